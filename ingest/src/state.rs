use crate::auth::Auth;
use crate::config::IngestConfig;
use crate::last_used::LastUsed;
use crate::rate_limit::RateLimiter;
use crate::redis_link::RedisLink;
use crate::sink::KafkaSink;
use metrics_exporter_prometheus::PrometheusHandle;
use std::ops::Deref;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// What every handler can reach. axum clones the state for every request, so it is one
/// `Arc` (one reference count to touch) rather than a struct of several.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

pub struct Shared {
    pub cfg: Arc<IngestConfig>,
    pub auth: Arc<Auth>,
    pub limiter: Arc<RateLimiter>,
    pub last_used: Arc<LastUsed>,
    pub sink: Arc<KafkaSink>,
    pub redis: Arc<RedisLink>,
    pub prometheus: PrometheusHandle,
    pub shutting_down: Arc<AtomicBool>,
}

impl AppState {
    pub fn new(shared: Shared) -> Self {
        AppState(Arc::new(shared))
    }
}

impl Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}
