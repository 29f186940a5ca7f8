use crate::auth::Auth;
use crate::config::IngestConfig;
use crate::failures::FailureLimiter;
use crate::last_used::LastUsed;
use crate::rate_limit::{LocalLimiter, RateLimiter};
use crate::redis_link::RedisLink;
use crate::sink::{KafkaSink, Sink};
use metrics_exporter_prometheus::PrometheusHandle;
use std::net::IpAddr;
use std::ops::Deref;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// What every handler can reach. axum clones the state for every request, so it is one
/// `Arc` (one reference count to touch) rather than a struct of several.
/// `S` is where accepted events go: Kafka in the service, memory in unit tests.
pub struct AppState<S: Sink = KafkaSink>(Arc<Shared<S>>);

impl<S: Sink> Clone for AppState<S> {
    fn clone(&self) -> Self {
        AppState(self.0.clone())
    }
}

pub struct Shared<S: Sink = KafkaSink> {
    pub cfg: Arc<IngestConfig>,
    pub auth: Arc<Auth>,
    pub limiter: Arc<RateLimiter>,
    /// The browser path's limit, per client address and site.
    pub browser_limiter: LocalLimiter<(IpAddr, u32)>,
    /// Rejections (401, 403, 404) per client address.
    pub failures: FailureLimiter,
    pub last_used: Arc<LastUsed>,
    pub sink: Arc<S>,
    pub redis: Arc<RedisLink>,
    pub prometheus: PrometheusHandle,
    pub shutting_down: Arc<AtomicBool>,
}

impl<S: Sink> AppState<S> {
    pub fn new(shared: Shared<S>) -> Self {
        AppState(Arc::new(shared))
    }
}

impl<S: Sink> Deref for AppState<S> {
    type Target = Shared<S>;

    fn deref(&self) -> &Shared<S> {
        &self.0
    }
}
