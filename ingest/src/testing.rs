//! Ingest in-process, for tests: the real router and handlers with doubles in place of
//! what reaches outside the process (feature `testing`; ingest's own tests have it).
//!
//! - [`MemorySink`] keeps what Kafka would have been sent, or refuses it;
//! - [`Keys`] knows a fixed set of keys and sites (a real [`SiteDirectory`], so the
//!   browser path's origin rules and erasure suppression are the product's own);
//! - [`Limits`] allows every request unless told to refuse the next ones, and records
//!   what it was asked;
//! - [`TestIngest`] wires them with the service's default configuration and sends
//!   requests through [`router::handle`] as the listener would, without a socket.
//!
//! What needs the real services (Kafka's acks, the key cache chain over Redis and the
//! registry, Redis's shared buckets, the listener's timeouts) is tested in `tests/`.

use crate::api::IngestError;
use crate::auth::{KeyCheck, KeyInfo};
use crate::config::IngestConfig;
use crate::failures::{FailureLimit, FailureLimiter};
use crate::last_used::LastUsed;
use crate::profile_caps::{CapVerdict, ProfileCaps, ProfileLimits, ProfileWrite};
use crate::rate_limit::{Budgets, Limiter, LocalLimiter, Verdict};
use crate::redis_link::RedisLink;
use crate::request_body::{Linger, RequestBody};
use crate::router;
use crate::sink::{Record, Sink, SinkError};
use crate::sites::{NotLoaded, SiteDirectory, SiteInfo};
use crate::state::{AppState, Backends, Shared};
use axum::http::{HeaderMap, Method, Request};
use bytes::Bytes;
use http_body_util::Full;
use rivulet_common::ch::ChConfig;
use rivulet_common::client_ip::TrustedProxies;
use rivulet_common::event::RawEvent;
use rivulet_common::keys::digest_if_well_formed;
use rivulet_common::registry::Site;
use rivulet_common::topology::Topology;
use serde_json::Value;
use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub mod openapi;

/// The doubles, as ingest's [`Backends`].
pub struct Doubles;

impl Backends for Doubles {
    type Sink = MemorySink;
    type Keys = Keys;
    type Limiter = Limits;
    type Caps = MemoryCaps;
}

/// One user's trait names and anonymous ids, as the caps count them.
type ProfileSets = (HashSet<String>, HashSet<String>);

/// The profile caps in memory: the same rule as the Redis script, on this process's
/// sets of names per user.
#[derive(Default)]
pub struct MemoryCaps {
    limits: ProfileLimits,
    sets: Mutex<HashMap<(u32, String), ProfileSets>>,
}

impl ProfileCaps for MemoryCaps {
    fn limits(&self) -> ProfileLimits {
        self.limits
    }

    async fn admit(&self, w: ProfileWrite<'_>) -> CapVerdict {
        let mut sets = self.sets.lock().expect("caps lock");
        let (traits, anons) = sets.entry((w.site_id, w.user_id.to_string())).or_default();
        let new = w
            .trait_names
            .iter()
            .filter(|n| !traits.contains(*n))
            .count();
        let cap = self.limits.traits as usize;
        if cap > 0 && new > 0 && traits.len() + new > cap {
            return CapVerdict::TooManyTraits(self.limits.traits);
        }
        let cap = self.limits.anonymous_ids as usize;
        if let Some(a) = w.anonymous_id {
            if cap > 0 && !anons.contains(a) && anons.len() + 1 > cap {
                return CapVerdict::TooManyAnonymousIds(self.limits.anonymous_ids);
            }
            anons.insert(a.to_string());
        }
        traits.extend(w.trait_names.iter().cloned());
        CapVerdict::Admitted
    }
}

/// One message as it would have gone to Kafka.
#[derive(Clone, Debug)]
pub struct Message {
    pub key: Vec<u8>,
    pub payload: Vec<u8>,
}

impl Message {
    /// The payload as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.payload).expect("a message payload is JSON")
    }
}

/// A sink in memory: keeps what it accepts, in order. It refuses (as Kafka would, with
/// an error in the record's place) the events whose `pathname` is [`refuse`](Self::refuse)d,
/// and everything while it is [`down`](Self::set_down).
#[derive(Default)]
pub struct MemorySink {
    stored: Mutex<Vec<Message>>,
    refuse: Mutex<Option<String>>,
    down: AtomicBool,
}

impl MemorySink {
    /// Refuses the events whose `pathname` is `pathname` from now on.
    pub fn refuse(&self, pathname: &str) {
        *self.refuse.lock().unwrap() = Some(pathname.to_string());
    }

    /// Refuses everything (and is not ready) while `down`.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::Relaxed);
    }

    /// Every message accepted so far.
    pub fn messages(&self) -> Vec<Message> {
        self.stored.lock().unwrap().clone()
    }

    /// The events accepted so far (identify messages left out).
    pub fn events(&self) -> Vec<RawEvent> {
        self.messages()
            .iter()
            .filter(|m| m.json().get("kind").is_none())
            .map(|m| serde_json::from_slice(&m.payload).expect("a raw event"))
            .collect()
    }

    /// The identify messages accepted so far, as JSON.
    pub fn identifies(&self) -> Vec<Value> {
        self.messages()
            .iter()
            .map(Message::json)
            .filter(|m| m["kind"] == "identify")
            .collect()
    }

    fn take(&self, r: &Record) -> Result<(), SinkError> {
        if self.down.load(Ordering::Relaxed) {
            return Err(SinkError::Unavailable);
        }
        let message = Message {
            key: r.key().to_vec(),
            payload: r.payload().to_vec(),
        };
        if let Some(refused) = &*self.refuse.lock().unwrap() {
            if message.json()["pathname"] == refused.as_str() {
                return Err(SinkError::Timeout);
            }
        }
        self.stored.lock().unwrap().push(message);
        Ok(())
    }
}

impl Sink for MemorySink {
    fn publish(
        &self,
        r: &Record,
        _deadline: tokio::time::Instant,
    ) -> impl Future<Output = Result<(), SinkError>> + Send {
        std::future::ready(self.take(r))
    }
    fn publish_all(
        &self,
        records: &[Record],
        _deadline: tokio::time::Instant,
    ) -> impl Future<Output = Vec<Result<(), SinkError>>> + Send {
        std::future::ready(records.iter().map(|r| self.take(r)).collect())
    }
    fn is_ready(&self) -> bool {
        !self.down.load(Ordering::Relaxed)
    }
    fn queue_depth(&self) -> usize {
        0
    }
}

/// The API key [`Keys`] holds for `site_id`: well formed, and the same in every test.
pub fn key_of(site_id: u32) -> String {
    format!("rb_{site_id:032x}")
}

/// The site's key that may only read statistics (scope `stats:read`).
pub fn stats_key_of(site_id: u32) -> String {
    format!("rb_{:032x}", u128::from(site_id) + (1 << 100))
}

/// The `key_id` of [`key_of`]`(site_id)`.
pub fn key_id_of(site_id: u32) -> String {
    format!("key_{site_id:016x}")
}

/// Keys and sites held in memory, answering as [`crate::auth::Auth`] does: a malformed
/// or unknown key, or a key of another existing site, is 401; a site that does not exist
/// is 404 (after the key).
pub struct Keys {
    keys: HashMap<String, KeyInfo>,
    sites: SiteDirectory,
}

impl KeyCheck for Keys {
    async fn authorize(&self, api_key: Option<&str>, site_id: u32) -> Result<KeyInfo, IngestError> {
        let key = api_key
            .filter(|k| digest_if_well_formed(k).is_some())
            .ok_or(IngestError::InvalidKey)?;
        let info = self.keys.get(key).ok_or(IngestError::InvalidKey)?;
        match (info.site_id == site_id, self.site(site_id)?) {
            (_, None) => Err(IngestError::SiteNotFound),
            (true, Some(_)) if info.ingest => Ok(info.clone()),
            (true, Some(_)) => Err(IngestError::KeyCannotIngest),
            (false, Some(_)) => Err(IngestError::InvalidKey),
        }
    }
    fn knows(&self, api_key: Option<&str>) -> bool {
        api_key.is_some_and(|k| self.keys.contains_key(k))
    }
    async fn cached_good(&self, api_key: Option<&str>, site_id: u32) -> bool {
        api_key
            .and_then(|k| self.keys.get(k))
            .is_some_and(|info| info.may_send_to(site_id))
    }
    fn site(&self, site_id: u32) -> Result<Option<Arc<SiteInfo>>, IngestError> {
        self.sites
            .site(site_id)
            .map_err(|_| IngestError::Unavailable("the site registry is unreachable"))
    }
    fn suppressed(&self, site_id: u32, ids: &[Option<&str>]) -> bool {
        self.sites.suppressed(site_id, ids)
    }
    fn any_site_accepts(&self, host: &str) -> Result<bool, NotLoaded> {
        self.sites.any_site_accepts(host)
    }
}

/// A rate limit that allows every request, unless told to refuse the next ones; it
/// records each question (key id, events).
pub struct Limits {
    budgets: Budgets,
    refusals: Mutex<VecDeque<Verdict>>,
    asked: Mutex<Vec<(String, u32)>>,
}

impl Limits {
    /// The next `n` requests get `verdict`.
    pub fn refuse_next(&self, n: usize, verdict: Verdict) {
        self.refusals
            .lock()
            .unwrap()
            .extend(std::iter::repeat_n(verdict, n));
    }

    /// What it was asked, in order: (key id, events).
    pub fn asked(&self) -> Vec<(String, u32)> {
        self.asked.lock().unwrap().clone()
    }
}

impl Limiter for Limits {
    fn budgets(&self) -> Budgets {
        self.budgets
    }
    fn allow(self: &Arc<Self>, key_id: &str, events: u32) -> impl Future<Output = Verdict> + Send {
        self.asked
            .lock()
            .unwrap()
            .push((key_id.to_string(), events));
        let verdict = self.refusals.lock().unwrap().pop_front();
        std::future::ready(verdict.unwrap_or(Verdict::Allowed))
    }
}

/// The service's configuration with its documented defaults (`IngestConfig::from_env`
/// with nothing set), except that rejections per address are not limited, as the
/// integration harness runs ingest (`AUTH_FAILURE_BURST=0`).
pub fn config() -> IngestConfig {
    IngestConfig {
        addr: "127.0.0.1:0".into(),
        internal_addr: "127.0.0.1:0".into(),
        redis_url: "redis://127.0.0.1:1/".into(),
        kafka_brokers: "127.0.0.1:1".into(),
        topic: "events.raw".into(),
        rate_limit_per_second: 20,
        event_rate_limit_per_second: 10_000,
        browser_rate_limit_per_second: 20,
        browser_event_rate_limit_per_second: 500,
        auth_failure_burst: 0,
        auth_failures_per_minute: 60,
        profile_limits: ProfileLimits::default(),
        registry_max_lookups: 4,
        site_refresh: Duration::from_secs(30),
        kafka_ack_timeout: Duration::from_secs(5),
        kafka_linger_ms: 1,
        kafka_queue_max_messages: 100_000,
        kafka_compression: "lz4".into(),
        max_body_bytes: 64 * 1024,
        max_batch_bytes: 1024 * 1024,
        max_batch_events: 500,
        oversize_linger: Linger {
            max_bytes: 256 << 20,
            max_time: Duration::from_secs(10),
        },
        body_timeout: Duration::from_secs(10),
        header_read_timeout: Duration::from_secs(10),
        keep_alive_timeout: Duration::from_secs(75),
        write_timeout: Duration::from_secs(10),
        max_pipelined: 32,
        max_connections: 20_000,
        trusted_proxies: TrustedProxies::parse("").expect("no proxies"),
        l1_ttl: Duration::from_secs(5),
        redis_ttl_secs: 300,
        negative_ttl_secs: 10,
        shutdown_drain: Duration::ZERO,
        clickhouse: ChConfig {
            url: "http://127.0.0.1:1".into(),
            database: "rivulet".into(),
            user: "default".into(),
            password: String::new(),
            validation: None,
            lz4: None,
            topology: Topology::SingleNode,
            insert_quorum: 0,
            insert_quorum_timeout_ms: 10_000,
            nodes: vec!["http://127.0.0.1:1".into()],
        },
    }
}

/// The site every [`TestIngest::new`] has, with its key [`key_of`]`(SITE)`; it accepts
/// browser events from `shop.example` and its subdomains.
pub const SITE: u32 = 1;
/// A second site with a key, `other.example` (no subdomains).
pub const OTHER_SITE: u32 = 2;
/// The client address requests come from unless a test says otherwise.
pub const PEER: &str = "203.0.113.9:40000";

/// How a [`TestIngest`] is set up: sites (each with a key), suppressed ids, the rate
/// limit's budgets, the configuration.
pub struct Builder {
    cfg: IngestConfig,
    sites: Vec<Site>,
    suppressed: Vec<(u32, String, String)>,
    budgets: Budgets,
}

impl Builder {
    /// A site with its key [`key_of`]`(site_id)`, accepting browser events from `domains`
    /// (and their subdomains when `subdomains`).
    pub fn site(mut self, site_id: u32, domains: &[&str], subdomains: bool) -> Self {
        self.sites.push(Site {
            site_id,
            domain: domains[0].into(),
            name: format!("site {site_id}"),
            created_at: 0,
            deleted: 0,
            version: 1,
            domain_list: domains.iter().map(|d| d.to_string()).collect(),
            allow_subdomains: u8::from(subdomains),
            ..Site::default()
        });
        self
    }

    /// Whether site `site_id` (added before) takes keyless requests and keyless
    /// identify calls.
    pub fn browser(mut self, site_id: u32, path: bool, identify: bool) -> Self {
        let site = self
            .sites
            .iter_mut()
            .find(|s| s.site_id == site_id)
            .expect("the site was added first");
        site.browser_path_off = u8::from(!path);
        site.browser_identify = u8::from(identify);
        self
    }

    /// Events of `id` (a `user_id` or `anonymous_id`) on `site_id` are dropped, as after
    /// `rivulet-admin erase --suppress`.
    pub fn suppress(mut self, site_id: u32, id: &str) -> Self {
        self.suppressed
            .push((site_id, "user_id".into(), id.to_string()));
        self
    }

    /// The budgets 429 answers state (the double allows everything unless told).
    pub fn budgets(mut self, requests: u32, events: u32) -> Self {
        self.budgets = Budgets { requests, events };
        self
    }

    /// Changes the configuration.
    pub fn config(mut self, change: impl FnOnce(&mut IngestConfig)) -> Self {
        change(&mut self.cfg);
        self
    }

    /// Ingest with these doubles. Call it within a Tokio runtime (the Redis link, never
    /// connected, is made lazily on it).
    pub fn build(self) -> TestIngest {
        let keys = self
            .sites
            .iter()
            .map(|s| {
                let info = KeyInfo {
                    key_id: key_id_of(s.site_id).into(),
                    site_id: s.site_id,
                    ingest: true,
                };
                (key_of(s.site_id), info)
            })
            .chain(self.sites.iter().map(|s| {
                let info = KeyInfo {
                    key_id: format!("key_{:016x}", u64::from(s.site_id) + (1 << 40)).into(),
                    site_id: s.site_id,
                    ingest: false,
                };
                (stats_key_of(s.site_id), info)
            }))
            .collect();
        let cfg = self.cfg;
        let redis = Arc::new(RedisLink::new(&cfg.redis_url).expect("a Redis URL"));
        let state = AppState::new(Shared {
            auth: Arc::new(Keys {
                keys,
                sites: SiteDirectory::with_suppressed(&self.sites, &self.suppressed),
            }),
            limiter: Arc::new(Limits {
                budgets: self.budgets,
                refusals: Mutex::default(),
                asked: Mutex::default(),
            }),
            caps: Arc::new(MemoryCaps {
                limits: cfg.profile_limits,
                sets: Mutex::default(),
            }),
            browser_limiter: LocalLimiter::new(Budgets {
                requests: cfg.browser_rate_limit_per_second,
                events: cfg.browser_event_rate_limit_per_second,
            }),
            failures: FailureLimiter::new(FailureLimit {
                burst: cfg.auth_failure_burst,
                per_minute: cfg.auth_failures_per_minute,
            }),
            last_used: Arc::new(LastUsed::off()),
            sink: Arc::new(MemorySink::default()),
            redis,
            prometheus: metrics_exporter_prometheus::PrometheusBuilder::new()
                .build_recorder()
                .handle(),
            shutting_down: Arc::new(AtomicBool::new(false)),
            cfg: Arc::new(cfg),
        });
        TestIngest {
            state,
            peer: PEER.parse().expect("an address"),
        }
    }
}

/// Ingest in-process: requests go through [`router::handle`] as from the listener.
pub struct TestIngest {
    pub state: AppState<Doubles>,
    pub peer: SocketAddr,
}

/// An answer, read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    /// The body as JSON; `Null` when it is not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// A header's value as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// `error` of an error body.
    pub fn error(&self) -> String {
        self.json()["error"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

impl TestIngest {
    /// [`SITE`] and [`OTHER_SITE`], the default configuration.
    pub fn new() -> Self {
        TestIngest::builder().build()
    }

    /// [`SITE`] and [`OTHER_SITE`], the default configuration, to change.
    pub fn builder() -> Builder {
        Builder {
            cfg: config(),
            sites: Vec::new(),
            suppressed: Vec::new(),
            budgets: Budgets {
                requests: 20,
                events: 10_000,
            },
        }
        .site(SITE, &["shop.example"], true)
        .site(OTHER_SITE, &["other.example"], false)
    }

    /// Where accepted events went.
    pub fn sink(&self) -> &MemorySink {
        &self.state.sink
    }

    /// The per-key rate limit.
    pub fn limits(&self) -> &Limits {
        &self.state.limiter
    }

    /// Sends a request on the public listener.
    pub async fn send<B: RequestBody>(&self, req: Request<B>) -> Reply {
        read(router::handle(self.state.clone(), self.peer, req).await).await
    }

    /// Sends a request on the internal listener (readiness, metrics).
    pub async fn send_internal<B: RequestBody>(&self, req: Request<B>) -> Reply {
        read(router::handle_internal(self.state.clone(), self.peer, req).await).await
    }

    /// POSTs `body` to `path` as `application/json`, with `headers`.
    pub async fn post(
        &self,
        path: &str,
        body: impl Into<Bytes>,
        headers: &[(&str, &str)],
    ) -> Reply {
        self.send(request(Method::POST, path, body, headers)).await
    }

    /// POSTs `body`, as JSON, to `path`.
    pub async fn post_json(&self, path: &str, body: &Value) -> Reply {
        self.post(path, serde_json::to_vec(body).expect("JSON"), &[])
            .await
    }

    /// An event of [`SITE`] with its key, with `fields` (a JSON object) added.
    pub fn event(&self, fields: Value) -> Value {
        let mut ev = serde_json::json!({"api_key": key_of(SITE), "site_id": SITE});
        for (k, v) in fields.as_object().expect("an object of fields") {
            ev[k] = v.clone();
        }
        ev
    }
}

impl Default for TestIngest {
    fn default() -> Self {
        TestIngest::new()
    }
}

/// A request with a body held whole (`Content-Length` known, as most clients send).
pub fn request(
    method: Method,
    path: &str,
    body: impl Into<Bytes>,
    headers: &[(&str, &str)],
) -> Request<Full<Bytes>> {
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.body(Full::new(body.into())).expect("a request")
}

async fn read(resp: axum::response::Response) -> Reply {
    let (parts, body) = resp.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .expect("a response body");
    Reply {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body,
    }
}
