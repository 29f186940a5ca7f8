use crate::auth::Auth;
use crate::config::IngestConfig;
use crate::last_used::LastUsed;
use crate::rate_limit::RateLimiter;
use crate::redis_link::RedisLink;
use crate::sink::EventSink;
use metrics_exporter_prometheus::PrometheusHandle;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// What every handler can reach. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub cfg: Arc<IngestConfig>,
    pub auth: Arc<Auth>,
    pub limiter: Arc<RateLimiter>,
    pub last_used: Arc<LastUsed>,
    pub sink: Arc<dyn EventSink>,
    pub redis: Arc<RedisLink>,
    pub prometheus: PrometheusHandle,
    pub shutting_down: Arc<AtomicBool>,
}
