//! `rivulet-admin install ua-rules|geo SOURCE`: puts a newer uap-core `regexes.yaml` or
//! MMDB geo database where the enricher reads it, without ever leaving a bad or half
//! written file there.
//!
//! The file is fetched (a path, or an `http(s)://` URL) into a temporary file beside the
//! target, flushed to disk, and loaded with the enricher's own code
//! (`rivulet_enrichment::device::DeviceParser`, `rivulet_enrichment::geo::GeoDb`), which
//! must then answer the known cases of `rivulet_enrichment::checks`. Only then is it
//! renamed over the target (atomic on one file system; the directory is flushed too).
//! A refused file is deleted and the target is untouched. Running enrichers see the new
//! file at their next check (`ENRICHER_RELOAD_CHECK_MS`) or on SIGHUP.

use crate::error::AdminError;
use rivulet_enrichment::checks;
use rivulet_enrichment::device::DeviceParser;
use rivulet_enrichment::geo::GeoDb;
use rivulet_enrichment::EnrichmentConfig;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What is being installed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    UaRules,
    Geo,
}

impl Kind {
    fn what(self) -> &'static str {
        match self {
            Kind::UaRules => "user-agent rules",
            Kind::Geo => "geo database",
        }
    }
}

pub struct Request {
    pub kind: Kind,
    /// A path or an `http://` / `https://` URL.
    pub source: String,
    /// Where to install; `None`: `UA_REGEXES`, or the one file of `GEOIP_DB`.
    pub to: Option<PathBuf>,
    /// The uap-core revision of the rules (written to `REVISION` beside them).
    pub revision: Option<String>,
    /// Check only: nothing is written.
    pub check_only: bool,
}

/// The largest download accepted (a full city database is ~130 MB).
const MAX_DOWNLOAD_BYTES: u64 = 4 << 30;

pub async fn install(req: Request) -> Result<Value, AdminError> {
    let cfg = EnrichmentConfig::from_env()?;
    let (target, companions) = match req.kind {
        Kind::UaRules => (req.to.clone().unwrap_or(cfg.ua_regexes), Vec::new()),
        Kind::Geo => geo_target(req.to.as_deref(), &cfg.geoip)?,
    };
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !dir.is_dir() {
        return Err(AdminError::Usage(format!(
            "{} does not exist: create the folder of {} first",
            dir.display(),
            target.display()
        )));
    }
    let file_name = target
        .file_name()
        .ok_or_else(|| AdminError::Usage(format!("{} is not a file name", target.display())))?
        .to_string_lossy()
        .into_owned();
    let temp = Temp::create(
        dir.join(format!(".{file_name}.new-{}", std::process::id())),
        &target,
    )?;
    let bytes = fetch(&req.source, &temp).await?;
    let sha256 = sha256_of(&temp.path).map_err(|e| temp_error(&temp.path, e))?;

    // Checked as the enricher will use it: a geo file together with the other file of a
    // v4,v6 pair.
    let what = format!("{} ({})", req.source, req.kind.what());
    let refuse = |reason: String| {
        AdminError::Refused(format!(
            "refused {what}: {reason}. {} is unchanged",
            target.display()
        ))
    };
    if bytes == 0 {
        return Err(refuse("it is empty".into()));
    }
    let details = match req.kind {
        Kind::UaRules => {
            let text = std::fs::read(&temp.path).map_err(|e| temp_error(&temp.path, e))?;
            let text = String::from_utf8(text).map_err(|e| {
                refuse(format!(
                    "it is not UTF-8 text ({e}); expected uap-core's regexes.yaml"
                ))
            })?;
            let parser = DeviceParser::from_yaml_source(&text, 0, &req.source)
                .map_err(|e| refuse(e.to_string()))?;
            checks::check_device(&parser, &req.source).map_err(|e| refuse(e.to_string()))?;
            json!({"checked": format!("{} known user agents parsed as expected", checks::UA_CASES.len())})
        }
        Kind::Geo => {
            let mut set = companions.clone();
            set.push(temp.path.clone());
            let db = GeoDb::open(&set).map_err(|e| {
                refuse(
                    e.to_string()
                        .replace(&temp.path.display().to_string(), &req.source),
                )
            })?;
            checks::check_geo(&db, &req.source).map_err(|e| refuse(e.to_string()))?;
            let file = db
                .files()
                .into_iter()
                .find(|f| f.path == temp.path)
                .expect("the new file is in the set");
            let checked = checks::GEO_CASES
                .iter()
                .filter(|c| db.answers_ipv6() || !c.ip.contains(':'))
                .map(|c| format!("{} → {}", c.ip, c.country))
                .collect::<Vec<_>>();
            json!({
                "type": file.database_type,
                "build_epoch": file.build_epoch,
                "ip_version": file.ip_version,
                "layout": file.layout,
                "checked": checked,
            })
        }
    };
    let previous_sha256 = sha256_of(&target).ok();
    let mut out = json!({
        "kind": match req.kind { Kind::UaRules => "ua-rules", Kind::Geo => "geo" },
        "source": req.source,
        "target": target,
        "bytes": bytes,
        "sha256": sha256,
        "previous_sha256": previous_sha256,
        "installed": false,
    });
    merge(&mut out, details);
    if req.check_only {
        out["message"] = json!(format!(
            "the file passes the checks; nothing was written (without --check-only it replaces {})",
            target.display()
        ));
        return Ok(out);
    }
    if previous_sha256.as_deref() == Some(sha256.as_str()) && req.revision.is_none() {
        out["message"] = json!(format!("{} already has this content", target.display()));
        return Ok(out);
    }

    if req.kind == Kind::UaRules {
        let revision = req.revision.clone().or_else(|| {
            (!is_url(&req.source))
                .then(|| rivulet_enrichment::data::revision_beside(Path::new(&req.source)))
                .flatten()
        });
        out["revision"] = json!(write_revision(&target, revision.as_deref())?);
    }
    temp.install()?;
    out["installed"] = json!(true);
    out["message"] = json!(format!(
        "installed; running enrichers load it at their next check (ENRICHER_RELOAD_CHECK_MS, 5 s by default) or at once on SIGHUP"
    ));
    Ok(out)
}

/// The file to replace and the other file of its v4,v6 pair (if `GEOIP_DB` names two).
fn geo_target(
    to: Option<&Path>,
    configured: &[PathBuf],
) -> Result<(PathBuf, Vec<PathBuf>), AdminError> {
    match (to, configured.len()) {
        (Some(to), _) => {
            let others = if configured.iter().any(|p| p == to) {
                configured.iter().filter(|p| *p != to).cloned().collect()
            } else {
                Vec::new()
            };
            Ok((to.to_path_buf(), others))
        }
        (None, 1) => Ok((configured[0].clone(), Vec::new())),
        (None, 0) => Err(AdminError::Usage(
            "GEOIP_DB is not set: say which file to replace with --to".into(),
        )),
        (None, _) => Err(AdminError::Usage(format!(
            "GEOIP_DB names two files ({}): say which one to replace with --to",
            configured
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

fn is_url(source: &str) -> bool {
    source.starts_with("http://") || source.starts_with("https://")
}

/// Copies or downloads `source` into the temporary file and flushes it to disk; returns
/// its size.
async fn fetch(source: &str, temp: &Temp) -> Result<u64, AdminError> {
    let mut file = File::options()
        .write(true)
        .open(&temp.path)
        .map_err(|e| temp_error(&temp.path, e))?;
    let bytes = if is_url(source) {
        download(source, &mut file).await?
    } else {
        let mut src =
            File::open(source).map_err(|e| AdminError::io(format!("cannot read {source}"), e))?;
        if src.metadata().is_ok_and(|m| m.is_dir()) {
            return Err(AdminError::Usage(format!(
                "{source} is a folder: give the file itself"
            )));
        }
        std::io::copy(&mut src, &mut file)
            .map_err(|e| AdminError::io(format!("cannot copy {source}"), e))?
    };
    file.sync_all().map_err(|e| temp_error(&temp.path, e))?;
    Ok(bytes)
}

async fn download(url: &str, file: &mut File) -> Result<u64, AdminError> {
    let failed = |e: String| AdminError::Unavailable(format!("{url} ({e})"));
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(30 * 60))
        .user_agent(concat!("rivulet-admin/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| failed(e.to_string()))?;
    let mut resp = client
        .get(url)
        .send()
        .await
        .map_err(|e| failed(error_chain(&e)))?;
    if !resp.status().is_success() {
        return Err(AdminError::Refused(format!(
            "refused {url}: the server answered {}",
            resp.status()
        )));
    }
    let mut total = 0u64;
    while let Some(chunk) = resp.chunk().await.map_err(|e| failed(error_chain(&e)))? {
        total += chunk.len() as u64;
        if total > MAX_DOWNLOAD_BYTES {
            return Err(AdminError::Refused(format!(
                "refused {url}: larger than {} bytes",
                MAX_DOWNLOAD_BYTES
            )));
        }
        file.write_all(&chunk)
            .map_err(|e| AdminError::io("cannot write the download", e))?;
    }
    Ok(total)
}

/// reqwest's error with its causes ("error sending request" alone says little).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Writes (atomically) or removes the `REVISION` file beside the rules, so that it never
/// describes other rules than those beside it. Returns what the enricher will report.
fn write_revision(rules: &Path, revision: Option<&str>) -> Result<String, AdminError> {
    let path = rules.with_file_name("REVISION");
    match revision {
        Some(rev) => {
            let rev = rev.trim();
            if rev.is_empty() || rev.len() > 64 || !rev.chars().all(|c| c.is_ascii_graphic()) {
                return Err(AdminError::Usage(format!(
                    "--revision {rev:?}: give a commit hash or a version (no spaces, at most 64 characters)"
                )));
            }
            let temp = Temp::create(
                path.with_file_name(format!(".REVISION.new-{}", std::process::id())),
                &path,
            )?;
            std::fs::write(&temp.path, format!("{rev}\n"))
                .and_then(|()| File::open(&temp.path)?.sync_all())
                .map_err(|e| temp_error(&temp.path, e))?;
            temp.install()?;
            Ok(rev.to_string())
        }
        None => {
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(AdminError::Usage(format!(
                        "cannot remove {} (it names the revision of the rules being replaced): {e}",
                        path.display()
                    )))
                }
            }
            Ok("unknown (no REVISION beside the source; give one with --revision): the enricher reports sha256:<first 16 hex digits>".into())
        }
    }
}

fn sha256_of(path: &Path) -> std::io::Result<String> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher)?;
    Ok(hex::encode(hasher.finalize()))
}

fn temp_error(path: &Path, e: std::io::Error) -> AdminError {
    AdminError::io(format!("cannot write {}", path.display()), e)
}

fn merge(into: &mut Value, from: Value) {
    if let (Some(into), Value::Object(from)) = (into.as_object_mut(), from) {
        into.extend(from);
    }
}

/// A temporary file beside its target: renamed over it by [`Temp::install`], deleted if
/// dropped before.
struct Temp {
    path: PathBuf,
    target: PathBuf,
    installed: bool,
}

impl Temp {
    /// Creates it (it must not exist), with the target's permissions if there is one.
    fn create(path: PathBuf, target: &Path) -> Result<Temp, AdminError> {
        let file = File::options()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| temp_error(&path, e))?;
        let temp = Temp {
            path,
            target: target.to_path_buf(),
            installed: false,
        };
        if let Ok(m) = std::fs::metadata(target) {
            file.set_permissions(m.permissions())
                .map_err(|e| temp_error(&temp.path, e))?;
        }
        Ok(temp)
    }

    /// Renames it over the target and flushes the folder, so that the rename survives a
    /// crash.
    fn install(mut self) -> Result<(), AdminError> {
        std::fs::rename(&self.path, &self.target).map_err(|e| {
            AdminError::io(
                format!(
                    "cannot rename {} over {}",
                    self.path.display(),
                    self.target.display()
                ),
                e,
            )
        })?;
        self.installed = true;
        if let Some(dir) = self.target.parent().filter(|d| !d.as_os_str().is_empty()) {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| AdminError::io(format!("cannot flush {}", dir.display()), e))?;
        }
        Ok(())
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        if !self.installed {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_geo_target_comes_from_geoip_db_or_to() {
        let one = vec![PathBuf::from("/d/city.mmdb")];
        let pair = vec![PathBuf::from("/d/v4.mmdb"), PathBuf::from("/d/v6.mmdb")];
        assert_eq!(
            geo_target(None, &one).unwrap(),
            (PathBuf::from("/d/city.mmdb"), vec![])
        );
        assert!(geo_target(None, &[]).is_err());
        let err = geo_target(None, &pair).unwrap_err().to_string();
        assert!(err.contains("say which one to replace with --to"), "{err}");
        // One of a pair is checked together with the other.
        assert_eq!(
            geo_target(Some(Path::new("/d/v6.mmdb")), &pair).unwrap(),
            (
                PathBuf::from("/d/v6.mmdb"),
                vec![PathBuf::from("/d/v4.mmdb")]
            )
        );
        // A file that GEOIP_DB does not name is checked alone.
        assert_eq!(
            geo_target(Some(Path::new("/e/x.mmdb")), &pair).unwrap(),
            (PathBuf::from("/e/x.mmdb"), vec![])
        );
    }
}
