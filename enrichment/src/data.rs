//! The enrichment data (uap-core's user-agent rules, the geo databases), loaded at start
//! and reloaded while the enricher runs.
//!
//! [`EnrichmentData`] holds the [`Enrichers`] in use behind an `Arc` and a generation
//! number. The enrich loop keeps its own `Arc` and compares the generation (one atomic
//! load) before each event: a reload builds the new rules or database on another thread
//! and swaps it in between two events, so no event is dropped, enriched twice, or kept
//! waiting while rules compile.
//!
//! A reload happens on SIGHUP (every file, changed or not) and when a periodic check
//! (`ENRICHER_RELOAD_CHECK_MS`) sees a file's device, inode, size or modification time
//! change. A file that fails to load, or loads but gets the known cases of
//! [`crate::checks`] wrong, is not used: the previous one stays, and the reason goes to
//! the log, to `enricher_data_reload_failures_total` and `enricher_data_reload_failing`,
//! and to `/_readiness`. The same file is not retried until it changes again (or SIGHUP).

use crate::checks;
use crate::config::EnrichmentConfig;
use crate::device::DeviceParser;
use crate::enrich::Enrichers;
use crate::error::EnrichmentError;
use crate::geo::{GeoDb, GeoFileInfo};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a reload looks at: a file replaced by rename gets a new inode, one rewritten in
/// place a new size or modification time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fingerprint {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
}

fn fingerprint(path: &Path) -> std::io::Result<Fingerprint> {
    // `metadata` follows symlinks: a symlink switched to another file counts as a change.
    let m = std::fs::metadata(path)?;
    Ok(Fingerprint {
        dev: m.dev(),
        ino: m.ino(),
        size: m.size(),
        mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
    })
}

/// The user-agent rules in use.
#[derive(Clone, Debug, Serialize)]
pub struct UaRulesInfo {
    pub path: PathBuf,
    /// The uap-core revision in the `REVISION` file beside the rules, else
    /// `sha256:` + the first 16 hex digits of the file's SHA-256.
    pub revision: String,
    /// SHA-256 of the file, hex.
    pub sha256: String,
    /// When this enricher loaded it (RFC 3339).
    pub loaded_at: String,
}

/// The geo database files in use.
#[derive(Clone, Debug, Serialize)]
pub struct GeoInfo {
    pub files: Vec<GeoFileInfo>,
    pub loaded_at: String,
}

/// One kind of data: what is loaded, and how reloading it went.
#[derive(Debug, Serialize)]
struct Tracked<I> {
    #[serde(flatten)]
    loaded: Option<I>,
    reloads: u64,
    reload_failures: u64,
    /// Why the file on disk is not the one in use; `null` when it is.
    last_error: Option<String>,
    #[serde(skip)]
    fingerprints: Vec<Fingerprint>,
    /// The file that failed, so that it is not retried until it changes.
    #[serde(skip)]
    failed_fingerprints: Option<Vec<Fingerprint>>,
}

impl<I> Default for Tracked<I> {
    fn default() -> Self {
        Tracked {
            loaded: None,
            reloads: 0,
            reload_failures: 0,
            last_error: None,
            fingerprints: Vec::new(),
            failed_fingerprints: None,
        }
    }
}

struct Status {
    ua: Tracked<UaRulesInfo>,
    geo: Tracked<GeoInfo>,
    /// UA cache hits and misses of parsers replaced by a reload.
    retired_cache: (u64, u64),
}

/// What one reload did to one kind of data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing configured (no `GEOIP_DB`).
    NotConfigured,
    /// The files are the ones in use (or the ones that failed last time).
    Unchanged,
    Reloaded,
    /// Not loaded: the reason. The previous data stays in use.
    Failed(String),
}

/// The label values of the info metrics last set to 1, so that a reload sets them to 0.
#[derive(Default)]
struct Published {
    ua: Option<String>,
    geo: Vec<[String; 3]>,
}

/// The enrichment data in use; see the module comment.
pub struct EnrichmentData {
    cfg: EnrichmentConfig,
    current: Mutex<Arc<Enrichers>>,
    generation: AtomicU64,
    status: Mutex<Status>,
    published: Mutex<Published>,
    /// One reload at a time.
    reloading: Mutex<()>,
}

/// Kinds of data, as the `data` label of the reload metrics names them.
const UA: &str = "ua_rules";
const GEO: &str = "geo_db";

/// How often a file that changes while it is read is read again before giving up.
const STABLE_READ_ATTEMPTS: u32 = 10;

impl EnrichmentData {
    /// Loads the rules and the geo database at start. A file that cannot be loaded is an
    /// error; one that loads but gets known cases wrong is used, with a warning (there is
    /// nothing older to keep).
    pub fn load(cfg: EnrichmentConfig) -> Result<EnrichmentData, EnrichmentError> {
        // Taken before loading: if a file changes meanwhile, the first check reloads it.
        let geo_fps = fingerprints(&cfg.geoip).unwrap_or_default();
        let (geo, geo_info) = if cfg.geoip.is_empty() {
            (GeoDb::disabled(), None)
        } else {
            let db = GeoDb::open(&cfg.geoip)?;
            if let Err(e) = checks::check_geo(&db, &join(&cfg.geoip)) {
                tracing::warn!(error = %e, "the geo database is in use, but check it");
            }
            let info = GeoInfo {
                files: db.files(),
                loaded_at: now_rfc3339(),
            };
            (db, Some(info))
        };
        let ua_fps = fingerprints(std::slice::from_ref(&cfg.ua_regexes)).unwrap_or_default();
        let (parser, info) = load_rules(&cfg)?;
        if let Err(e) = checks::check_device(&parser, &cfg.ua_regexes.display().to_string()) {
            tracing::warn!(error = %e, "the user-agent rules are in use, but check them");
        }
        let enrichers = Enrichers {
            geo: Arc::new(geo),
            device: Arc::new(parser),
            visitors: Arc::new(crate::identity::VisitorIds::new(cfg.visitor_secret.clone())),
            store_ip: cfg.store_ip,
        };
        Ok(EnrichmentData {
            cfg,
            current: Mutex::new(Arc::new(enrichers)),
            generation: AtomicU64::new(0),
            status: Mutex::new(Status {
                ua: Tracked {
                    loaded: Some(info),
                    fingerprints: ua_fps,
                    ..Tracked::default()
                },
                geo: Tracked {
                    loaded: geo_info,
                    fingerprints: geo_fps,
                    ..Tracked::default()
                },
                retired_cache: (0, 0),
            }),
            published: Mutex::new(Published::default()),
            reloading: Mutex::new(()),
        })
    }

    /// The enrichers in use now.
    pub fn current(&self) -> Arc<Enrichers> {
        self.current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Goes up by one at every swap: compare it to know whether [`Self::current`] changed.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The rules in use.
    pub fn ua_rules(&self) -> Option<UaRulesInfo> {
        self.status.lock().expect("status lock").ua.loaded.clone()
    }

    /// The geo database in use; `None` without `GEOIP_DB`.
    pub fn geo(&self) -> Option<GeoInfo> {
        self.status.lock().expect("status lock").geo.loaded.clone()
    }

    /// `(ua_rules, geo_db)` for `/_readiness`: what is loaded, reload counts, the last
    /// error (`geo_db` is `null` without `GEOIP_DB`).
    pub fn readiness(&self) -> (serde_json::Value, serde_json::Value) {
        let st = self.status.lock().expect("status lock");
        let geo = if st.geo.loaded.is_some() {
            serde_json::to_value(&st.geo).unwrap_or_default()
        } else {
            serde_json::Value::Null
        };
        (serde_json::to_value(&st.ua).unwrap_or_default(), geo)
    }

    /// `(hits, misses)` of the UA cache since start, across reloads.
    pub fn cache_stats(&self) -> (u64, u64) {
        let (hits, misses) = self.current().device.cache_stats();
        let (h0, m0) = self.status.lock().expect("status lock").retired_cache;
        (h0 + hits, m0 + misses)
    }

    /// Sets the info gauges (`enricher_ua_rules_info`, `enricher_geo_db_info`) to what is
    /// in use, and those of what was replaced to 0.
    pub fn publish_metrics(&self) {
        let (ua, geo, failing) = {
            let st = self.status.lock().expect("status lock");
            let failing = [
                (UA, st.ua.last_error.is_some()),
                (GEO, st.geo.last_error.is_some()),
            ];
            (st.ua.loaded.clone(), st.geo.loaded.clone(), failing)
        };
        for (kind, failing) in failing {
            metrics::gauge!("enricher_data_reload_failing", "data" => kind).set(if failing {
                1.0
            } else {
                0.0
            });
        }
        let mut published = self.published.lock().expect("published lock");
        if let Some(ua) = ua {
            if let Some(old) = published.ua.take().filter(|r| *r != ua.revision) {
                metrics::gauge!("enricher_ua_rules_info", "revision" => old).set(0.0);
            }
            metrics::gauge!("enricher_ua_rules_info", "revision" => ua.revision.clone()).set(1.0);
            published.ua = Some(ua.revision);
        }
        if let Some(geo) = geo {
            let labels: Vec<[String; 3]> = geo
                .files
                .iter()
                .map(|f| {
                    [
                        f.database_type.clone(),
                        f.build_epoch.to_string(),
                        f.ip_version.to_string(),
                    ]
                })
                .collect();
            for old in published.geo.iter().filter(|l| !labels.contains(l)) {
                geo_info_gauge(old).set(0.0);
            }
            for l in &labels {
                geo_info_gauge(l).set(1.0);
            }
            published.geo = labels;
        }
        for kind in [UA, GEO] {
            // Present from the start, so that a rate() over them has a first sample.
            metrics::counter!("enricher_data_reloads_total", "data" => kind).increment(0);
            metrics::counter!("enricher_data_reload_failures_total", "data" => kind).increment(0);
        }
    }

    /// Reloads the rules and the geo database if their files changed since they were
    /// loaded (or, with `force`, in any case). Blocking: run it off the enrich thread.
    pub fn reload(&self, force: bool) -> (Outcome, Outcome) {
        let _one_at_a_time = self.reloading.lock().expect("reloading lock");
        let ua = self.reload_ua(force);
        let geo = self.reload_geo(force);
        if ua == Outcome::Reloaded || geo == Outcome::Reloaded {
            self.publish_metrics();
        }
        (ua, geo)
    }

    /// Runs reloads on a thread of its own: every `every` (when given) for changed files,
    /// and at once, for every file, each time the returned sender is sent to (SIGHUP).
    /// The thread ends when the sender is dropped.
    pub fn watch(self: Arc<Self>, every: Option<Duration>) -> std::io::Result<mpsc::Sender<()>> {
        let (tx, rx) = mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("data-reload".into())
            .spawn(move || loop {
                let force = match every {
                    Some(every) => match rx.recv_timeout(every) {
                        Ok(()) => true,
                        Err(mpsc::RecvTimeoutError::Timeout) => false,
                        Err(mpsc::RecvTimeoutError::Disconnected) => return,
                    },
                    None => match rx.recv() {
                        Ok(()) => true,
                        Err(_) => return,
                    },
                };
                self.reload(force);
            })?;
        Ok(tx)
    }

    fn reload_ua(&self, force: bool) -> Outcome {
        let paths = [self.cfg.ua_regexes.clone()];
        let started = Instant::now();
        let attempt = match self.attempt(UA, &paths, force, |st| &mut st.ua) {
            Ok(seen) => seen,
            Err(outcome) => return outcome,
        };
        let loaded = stable(&paths, || load_rules(&self.cfg)).and_then(|((parser, info), fps)| {
            checks::check_device(&parser, &self.cfg.ua_regexes.display().to_string())
                .map_err(|e| e.to_string())?;
            Ok((parser, info, fps))
        });
        match loaded {
            Ok((parser, info, fps)) => {
                let parser = Arc::new(parser);
                let previous = self.swap(|e| Enrichers {
                    device: parser.clone(),
                    ..e.clone()
                });
                let mut st = self.status.lock().expect("status lock");
                let (h, m) = previous.device.cache_stats();
                st.retired_cache.0 += h;
                st.retired_cache.1 += m;
                let old = st.ua.loaded.replace(info.clone());
                succeeded(UA, &mut st.ua, fps);
                tracing::info!(
                    path = %info.path.display(),
                    revision = %info.revision,
                    previous = %old.map(|o| o.revision).unwrap_or_default(),
                    took_ms = started.elapsed().as_millis() as u64,
                    "user-agent rules reloaded"
                );
                Outcome::Reloaded
            }
            Err(message) => {
                self.failed(UA, attempt, message.clone(), |st| &mut st.ua);
                Outcome::Failed(message)
            }
        }
    }

    fn reload_geo(&self, force: bool) -> Outcome {
        if self.cfg.geoip.is_empty() {
            return Outcome::NotConfigured;
        }
        let paths = self.cfg.geoip.clone();
        let started = Instant::now();
        let attempt = match self.attempt(GEO, &paths, force, |st| &mut st.geo) {
            Ok(seen) => seen,
            Err(outcome) => return outcome,
        };
        let loaded = stable(&paths, || GeoDb::open(&paths)).and_then(|(db, fps)| {
            checks::check_geo(&db, &join(&paths)).map_err(|e| e.to_string())?;
            Ok((db, fps))
        });
        match loaded {
            Ok((db, fps)) => {
                let info = GeoInfo {
                    files: db.files(),
                    loaded_at: now_rfc3339(),
                };
                let db = Arc::new(db);
                self.swap(|e| Enrichers {
                    geo: db.clone(),
                    ..e.clone()
                });
                let mut st = self.status.lock().expect("status lock");
                st.geo.loaded = Some(info.clone());
                succeeded(GEO, &mut st.geo, fps);
                let describe = self.current().geo.describe();
                tracing::info!(
                    geo = %describe,
                    took_ms = started.elapsed().as_millis() as u64,
                    "geo database reloaded"
                );
                Outcome::Reloaded
            }
            Err(message) => {
                self.failed(GEO, attempt, message.clone(), |st| &mut st.geo);
                Outcome::Failed(message)
            }
        }
    }

    /// Whether to load `paths` now: `Ok(fingerprints as seen now)` when forced or when
    /// they differ from both those in use and those that failed last, else the outcome. A
    /// file that cannot even be looked at is a failure, reported once while the error
    /// stays the same.
    fn attempt<I>(
        &self,
        kind: &'static str,
        paths: &[PathBuf],
        force: bool,
        tracked: impl Fn(&mut Status) -> &mut Tracked<I> + Copy,
    ) -> Result<Vec<Fingerprint>, Outcome> {
        let seen = match fingerprints(paths) {
            Ok(seen) => seen,
            Err(message) => {
                let last = tracked(&mut self.status.lock().expect("status lock"))
                    .last_error
                    .clone();
                if force || last.as_deref() != Some(message.as_str()) {
                    self.failed(kind, Vec::new(), message.clone(), tracked);
                    return Err(Outcome::Failed(message));
                }
                return Err(Outcome::Unchanged);
            }
        };
        let mut st = self.status.lock().expect("status lock");
        let t = tracked(&mut st);
        if force {
            return Ok(seen);
        }
        if seen == t.fingerprints {
            if t.last_error.is_some() {
                // The file in use is back in place (a failed update was rolled back).
                t.last_error = None;
                t.failed_fingerprints = None;
                metrics::gauge!("enricher_data_reload_failing", "data" => kind).set(0.0);
                tracing::info!(data = kind, "the file in use is back in place");
            }
            return Err(Outcome::Unchanged);
        }
        if t.failed_fingerprints.as_ref() == Some(&seen) {
            return Err(Outcome::Unchanged);
        }
        Ok(seen)
    }

    fn failed<I>(
        &self,
        kind: &'static str,
        fingerprints: Vec<Fingerprint>,
        message: String,
        tracked: impl Fn(&mut Status) -> &mut Tracked<I> + Copy,
    ) {
        let mut st = self.status.lock().expect("status lock");
        let t = tracked(&mut st);
        t.reload_failures += 1;
        t.last_error = Some(message.clone());
        t.failed_fingerprints = (!fingerprints.is_empty()).then_some(fingerprints);
        metrics::counter!("enricher_data_reload_failures_total", "data" => kind).increment(1);
        metrics::gauge!("enricher_data_reload_failing", "data" => kind).set(1.0);
        let what = if kind == UA {
            "the user-agent rules failed; the loaded ones stay"
        } else {
            "the geo database failed; the loaded one stays"
        };
        tracing::error!(data = kind, error = %message, "reloading {what} in use");
    }

    /// Puts the enrichers `make` builds from the current ones in use; returns the old.
    fn swap(&self, make: impl FnOnce(&Enrichers) -> Enrichers) -> Arc<Enrichers> {
        let mut current = self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let next = Arc::new(make(&current));
        let previous = std::mem::replace(&mut *current, next);
        self.generation.fetch_add(1, Ordering::AcqRel);
        previous
    }
}

fn succeeded<I>(kind: &'static str, t: &mut Tracked<I>, fingerprints: Vec<Fingerprint>) {
    t.fingerprints = fingerprints;
    t.failed_fingerprints = None;
    t.last_error = None;
    t.reloads += 1;
    metrics::counter!("enricher_data_reloads_total", "data" => kind).increment(1);
    metrics::gauge!("enricher_data_reload_failing", "data" => kind).set(0.0);
}

fn geo_info_gauge(labels: &[String; 3]) -> metrics::Gauge {
    metrics::gauge!(
        "enricher_geo_db_info",
        "type" => labels[0].clone(),
        "build_epoch" => labels[1].clone(),
        "ip_version" => labels[2].clone()
    )
}

fn fingerprints(paths: &[PathBuf]) -> Result<Vec<Fingerprint>, String> {
    paths
        .iter()
        .map(|p| fingerprint(p).map_err(|e| format!("cannot read {}: {e}", p.display())))
        .collect()
}

/// Loads `paths` with `load` so that what is loaded is one version of the files: their
/// fingerprints before and after must agree (a file being written in place changes
/// under the reader); tried again a few times otherwise.
fn stable<T, E: std::fmt::Display>(
    paths: &[PathBuf],
    mut load: impl FnMut() -> Result<T, E>,
) -> Result<(T, Vec<Fingerprint>), String> {
    for _ in 0..STABLE_READ_ATTEMPTS {
        let before = fingerprints(paths)?;
        let loaded = load().map_err(|e| e.to_string())?;
        if fingerprints(paths)? == before {
            return Ok((loaded, before));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(format!(
        "{} kept changing while it was read; write the new file beside it and rename it over the old one",
        join(paths)
    ))
}

/// The rules file, compiled, and what it is.
fn load_rules(cfg: &EnrichmentConfig) -> Result<(DeviceParser, UaRulesInfo), EnrichmentError> {
    let path = &cfg.ua_regexes;
    let bytes = std::fs::read(path).map_err(|source| EnrichmentError::UaRulesUnreadable {
        path: path.display().to_string(),
        source,
    })?;
    let sha256 = hex::encode(Sha256::digest(&bytes));
    let text = std::str::from_utf8(&bytes).map_err(|e| EnrichmentError::UaRulesInvalid {
        path: path.display().to_string(),
        reason: format!("not UTF-8 text ({e})"),
    })?;
    let parser =
        DeviceParser::from_yaml_source(text, cfg.ua_cache_size, &path.display().to_string())?;
    Ok((
        parser,
        UaRulesInfo {
            path: path.clone(),
            revision: revision_beside(path).unwrap_or_else(|| format!("sha256:{}", &sha256[..16])),
            sha256,
            loaded_at: now_rfc3339(),
        },
    ))
}

/// The first line of the `REVISION` file beside `rules`, if it is a plausible revision
/// (a commit hash or a version: printable, without spaces, at most 64 characters).
pub fn revision_beside(rules: &Path) -> Option<String> {
    let text = std::fs::read_to_string(rules.with_file_name("REVISION")).ok()?;
    let line = text.lines().next()?.trim();
    let plausible =
        !line.is_empty() && line.len() <= 64 && line.chars().all(|c| c.is_ascii_graphic());
    plausible.then(|| line.to_string())
}

fn join(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn now_rfc3339() -> String {
    rivulet_common::epoch::rfc3339(rivulet_common::epoch::now_ms() / 1000).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    const DEFAULT_REGEXES: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/uap-core-rules/regexes.yaml"
    );
    const VIVALDI: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36 Vivaldi/6.5.3206.48";

    fn shipped_rules() -> String {
        let path = std::env::var("UA_REGEXES").unwrap_or_else(|_| DEFAULT_REGEXES.to_string());
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{path}: {e} (testdata/uap-core-rules, or UA_REGEXES)"))
    }

    /// The shipped rules without Vivaldi's: they pass the checks, and call Vivaldi Chrome.
    fn rules_without_vivaldi() -> String {
        let mut doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&shipped_rules()).unwrap();
        doc["user_agent_parsers"]
            .as_sequence_mut()
            .unwrap()
            .retain(|r| !r["regex"].as_str().unwrap_or_default().contains("Vivaldi"));
        serde_yaml_ng::to_string(&doc).unwrap()
    }

    fn geo_testdata(name: &str) -> PathBuf {
        let dir = std::env::var("RIVULET_GEO_TESTDATA")
            .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/geo").into());
        Path::new(&dir).join(name)
    }

    /// A folder of its own, removed at the end.
    struct Dir(PathBuf);
    impl Dir {
        fn new() -> Dir {
            let dir = std::env::temp_dir().join(format!("rivulet-data-{}", uuid::Uuid::new_v4()));
            std::fs::create_dir_all(&dir).unwrap();
            Dir(dir)
        }
        /// Writes `bytes` beside `name` and renames it over, as operators are told to.
        fn replace(&self, name: &str, bytes: &[u8]) {
            let temp = self.0.join(format!(".{name}.tmp"));
            std::fs::write(&temp, bytes).unwrap();
            std::fs::rename(&temp, self.0.join(name)).unwrap();
        }
        fn path(&self, name: &str) -> PathBuf {
            self.0.join(name)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn config(dir: &Dir, geo: bool) -> EnrichmentConfig {
        EnrichmentConfig {
            ua_regexes: dir.path("regexes.yaml"),
            ua_cache_size: 100,
            geoip: if geo {
                vec![dir.path("city.mmdb")]
            } else {
                Vec::new()
            },
            visitor_secret: b"secret".to_vec(),
            visitor_secret_is_default: false,
            store_ip: false,
            session_timeout: Duration::from_secs(1800),
        }
    }

    fn browser(data: &EnrichmentData) -> String {
        data.current().device.parse(VIVALDI, None).browser
    }

    #[test]
    fn changed_rules_are_reloaded_and_unchanged_ones_are_not() {
        let dir = Dir::new();
        dir.replace("regexes.yaml", shipped_rules().as_bytes());
        let data = EnrichmentData::load(config(&dir, false)).unwrap();
        assert_eq!(browser(&data), "Vivaldi");
        let first = data.ua_rules().unwrap();
        assert!(first.revision.starts_with("sha256:"), "{first:?}");
        assert_eq!(
            data.reload(false),
            (Outcome::Unchanged, Outcome::NotConfigured)
        );
        assert_eq!(data.generation(), 0);

        // The enrich loop's view: it holds the old enrichers until it sees a new generation.
        let held = data.current();
        std::fs::write(dir.path("REVISION"), "older-rules\n").unwrap();
        dir.replace("regexes.yaml", rules_without_vivaldi().as_bytes());
        assert_eq!(data.reload(false).0, Outcome::Reloaded);
        assert_eq!(data.generation(), 1);
        assert_eq!(held.device.parse(VIVALDI, None).browser, "Vivaldi");
        assert_eq!(browser(&data), "Chrome");
        let info = data.ua_rules().unwrap();
        assert_eq!(info.revision, "older-rules");
        assert_ne!(info.sha256, first.sha256);
        let (ua, geo) = data.readiness();
        assert_eq!(ua["reloads"], 1);
        assert_eq!(ua["revision"], "older-rules");
        assert_eq!(ua["last_error"], serde_json::Value::Null);
        assert_eq!(geo, serde_json::Value::Null);

        // SIGHUP reloads the same file again.
        assert_eq!(data.reload(true).0, Outcome::Reloaded);
        assert_eq!(data.generation(), 2);
    }

    #[test]
    fn a_bad_rules_file_leaves_the_old_one_in_use_until_a_good_one_comes() {
        let dir = Dir::new();
        let good = shipped_rules();
        dir.replace("regexes.yaml", good.as_bytes());
        let data = EnrichmentData::load(config(&dir, false)).unwrap();

        // Truncated in the middle of a rule: not valid YAML.
        dir.replace("regexes.yaml", &good.as_bytes()[..good.len() / 2 + 7]);
        let Outcome::Failed(why) = data.reload(false).0 else {
            panic!("a truncated file must fail")
        };
        assert!(
            why.contains("regexes.yaml are not a valid uap-core regexes.yaml"),
            "{why}"
        );
        assert_eq!(data.generation(), 0);
        assert_eq!(browser(&data), "Vivaldi");
        let (ua, _) = data.readiness();
        assert_eq!(ua["reload_failures"], 1);
        assert_eq!(ua["last_error"].as_str(), Some(why.as_str()));
        // The same bad file is not tried again at every check.
        assert_eq!(data.reload(false).0, Outcome::Unchanged);
        assert_eq!(data.readiness().0["reload_failures"], 1);

        // Valid YAML that knows nothing: refused by the checks.
        dir.replace(
            "regexes.yaml",
            b"user_agent_parsers: []\nos_parsers: []\ndevice_parsers: []\n",
        );
        let Outcome::Failed(why) = data.reload(false).0 else {
            panic!("empty rules must fail")
        };
        assert!(
            why.contains("gives wrong answers for known user agents"),
            "{why}"
        );
        assert_eq!(browser(&data), "Vivaldi");

        // Not UTF-8.
        dir.replace("regexes.yaml", &[0xff, 0xfe, 0x00, 0x41]);
        let Outcome::Failed(why) = data.reload(false).0 else {
            panic!("binary must fail")
        };
        assert!(why.contains("not UTF-8"), "{why}");

        // Gone: a failure, reported once.
        std::fs::remove_file(dir.path("regexes.yaml")).unwrap();
        let Outcome::Failed(why) = data.reload(false).0 else {
            panic!("a missing file must fail")
        };
        assert!(why.starts_with("cannot read"), "{why}");
        let failures = data.readiness().0["reload_failures"].clone();
        assert_eq!(data.reload(false).0, Outcome::Unchanged);
        assert_eq!(data.readiness().0["reload_failures"], failures);
        assert_eq!(browser(&data), "Vivaldi");

        // A good file again: loaded, the error cleared.
        dir.replace("regexes.yaml", rules_without_vivaldi().as_bytes());
        assert_eq!(data.reload(false).0, Outcome::Reloaded);
        assert_eq!(browser(&data), "Chrome");
        assert_eq!(data.readiness().0["last_error"], serde_json::Value::Null);
    }

    #[test]
    fn geo_databases_are_reloaded_and_bad_ones_refused() {
        let dir = Dir::new();
        dir.replace("regexes.yaml", shipped_rules().as_bytes());
        let city = std::fs::read(geo_testdata("GeoLite2-City-Test.mmdb")).unwrap();
        dir.replace("city.mmdb", &city);
        let data = EnrichmentData::load(config(&dir, true)).unwrap();
        let london: IpAddr = "81.2.69.142".parse().unwrap();
        assert_eq!(data.current().geo.lookup(london).city, "London");
        assert_eq!(data.geo().unwrap().files[0].database_type, "GeoLite2-City");

        // MaxMind's country database: loaded, the rules untouched.
        let rules = Arc::clone(&data.current().device);
        dir.replace(
            "city.mmdb",
            &std::fs::read(geo_testdata("GeoLite2-Country-Test.mmdb")).unwrap(),
        );
        assert_eq!(data.reload(false), (Outcome::Unchanged, Outcome::Reloaded));
        assert_eq!(data.current().geo.lookup(london).city, "");
        assert_eq!(data.current().geo.lookup(london).country, "GB");
        assert!(Arc::ptr_eq(&rules, &data.current().device));
        let (_, geo) = data.readiness();
        assert_eq!(geo["files"][0]["type"], "GeoLite2-Country");
        assert_eq!(geo["reloads"], 1);

        // The broken test database, and a file that is no database at all.
        dir.replace(
            "city.mmdb",
            &std::fs::read(geo_testdata("GeoIP2-City-Test-Broken-Double-Format.mmdb")).unwrap(),
        );
        let Outcome::Failed(why) = data.reload(false).1 else {
            panic!("the broken database must fail")
        };
        assert!(why.contains("is corrupt"), "{why}");
        dir.replace("city.mmdb", b"not a database");
        let Outcome::Failed(why) = data.reload(false).1 else {
            panic!("garbage must fail")
        };
        assert!(why.contains("cannot read the geo database"), "{why}");
        assert_eq!(data.current().geo.lookup(london).country, "GB");
        assert_eq!(data.readiness().1["reload_failures"], 2);

        dir.replace("city.mmdb", &city);
        assert_eq!(data.reload(false).1, Outcome::Reloaded);
        assert_eq!(data.current().geo.lookup(london).city, "London");
        assert_eq!(data.readiness().1["last_error"], serde_json::Value::Null);
    }

    #[test]
    fn the_watch_thread_reloads_on_a_change_and_on_request() {
        let dir = Dir::new();
        dir.replace("regexes.yaml", shipped_rules().as_bytes());
        let data = Arc::new(EnrichmentData::load(config(&dir, false)).unwrap());
        let wait_for = |generation: u64| {
            let end = Instant::now() + Duration::from_secs(20);
            while data.generation() < generation {
                assert!(Instant::now() < end, "no reload to generation {generation}");
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        let changes = data.clone().watch(Some(Duration::from_millis(50))).unwrap();
        dir.replace("regexes.yaml", rules_without_vivaldi().as_bytes());
        wait_for(1);
        assert_eq!(browser(&data), "Chrome");
        drop(changes);

        // Checks off: only a request (SIGHUP) reloads.
        let requests = data.clone().watch(None).unwrap();
        dir.replace("regexes.yaml", shipped_rules().as_bytes());
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(data.generation(), 1);
        requests.send(()).unwrap();
        wait_for(2);
        assert_eq!(browser(&data), "Vivaldi");
    }

    #[test]
    fn the_revision_comes_from_a_plausible_revision_file() {
        let dir = Dir::new();
        let rules = dir.path("regexes.yaml");
        assert_eq!(revision_beside(&rules), None);
        std::fs::write(
            dir.path("REVISION"),
            "73e7340c3ed8055051607b296bf46ead7aa5f19e\n",
        )
        .unwrap();
        assert_eq!(
            revision_beside(&rules).as_deref(),
            Some("73e7340c3ed8055051607b296bf46ead7aa5f19e")
        );
        std::fs::write(dir.path("REVISION"), "not a revision\n").unwrap();
        assert_eq!(revision_beside(&rules), None);
    }
}
