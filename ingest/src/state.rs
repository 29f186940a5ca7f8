use crate::auth::{Auth, KeyCheck};
use crate::config::IngestConfig;
use crate::failures::FailureLimiter;
use crate::last_used::LastUsed;
use crate::profile_caps::{ProfileCaps, RedisProfileCaps};
use crate::rate_limit::{Limiter, LocalLimiter, RateLimiter};
use crate::redis_link::RedisLink;
use crate::sink::{KafkaSink, Sink};
use metrics_exporter_prometheus::PrometheusHandle;
use std::net::IpAddr;
use std::ops::Deref;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// The parts of ingest that reach outside the process, as types: where accepted events
/// go, how keys and sites are checked, and the per-key rate limit. [`Live`] is the
/// service's (Kafka, the key cache chain over Redis and the registry, token buckets in
/// Redis); in-process tests put doubles in their place (`rivulet_ingest::testing`).
/// The caps on a person's profile (`profile_caps`) are one too. Type parameters rather than `dyn`, so that the request path is compiled for the real
/// ones as before: no boxed futures, no virtual calls.
pub trait Backends: Send + Sync + 'static {
    type Sink: Sink;
    type Keys: KeyCheck;
    type Limiter: Limiter;
    type Caps: ProfileCaps;
}

/// The service's backends.
pub struct Live;

impl Backends for Live {
    type Sink = KafkaSink;
    type Keys = Auth;
    type Limiter = RateLimiter;
    type Caps = RedisProfileCaps;
}

/// What every handler can reach. axum clones the state for every request, so it is one
/// `Arc` (one reference count to touch) rather than a struct of several.
pub struct AppState<S: Backends = Live>(Arc<Shared<S>>);

impl<S: Backends> Clone for AppState<S> {
    fn clone(&self) -> Self {
        AppState(self.0.clone())
    }
}

pub struct Shared<S: Backends = Live> {
    pub cfg: Arc<IngestConfig>,
    pub auth: Arc<S::Keys>,
    pub limiter: Arc<S::Limiter>,
    /// The caps on what identify calls add to one user.
    pub caps: Arc<S::Caps>,
    /// The browser path's limit, per client address (an IPv6 /64 as one) and site.
    pub browser_limiter: LocalLimiter<(IpAddr, u32)>,
    /// Rejections (401, 403, 404) per client address.
    pub failures: FailureLimiter,
    pub last_used: Arc<LastUsed>,
    pub sink: Arc<S::Sink>,
    pub redis: Arc<RedisLink>,
    pub prometheus: PrometheusHandle,
    pub shutting_down: Arc<AtomicBool>,
}

impl<S: Backends> AppState<S> {
    pub fn new(shared: Shared<S>) -> Self {
        AppState(Arc::new(shared))
    }
}

impl<S: Backends> Deref for AppState<S> {
    type Target = Shared<S>;

    fn deref(&self) -> &Shared<S> {
        &self.0
    }
}
