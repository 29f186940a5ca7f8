//! The running service: wiring its parts together from the configuration, and serving
//! until shutdown.

use crate::auth::{Auth, AuthTtls};
use crate::config::IngestConfig;
use crate::failures::{FailureLimit, FailureLimiter};
use crate::profile_caps::RedisProfileCaps;
use crate::rate_limit::{Budgets, LocalLimiter, RateLimiter};
use crate::redis_link::RedisLink;
use crate::router;
use crate::sink::{KafkaSettings, KafkaSink};
use crate::sites::SiteDirectory;
use crate::state::{AppState, Shared};
use metrics_exporter_prometheus::PrometheusHandle;
use rivulet_common::listener;
use rivulet_common::registry::Registry;
use rivulet_common::CommonError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// The process-wide Prometheus recorder, with the request-latency buckets, and the clock
/// skew's own (`clock`).
pub fn prometheus() -> PrometheusHandle {
    rivulet_common::telemetry::prometheus_with_buckets_for(
        &[
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
        ],
        &[(crate::clock::SKEW_METRIC, crate::clock::SKEW_BUCKETS)],
    )
}

/// A running ingest with its background tasks; `kafka` is kept to flush on shutdown.
pub struct Ingest {
    pub state: AppState,
    kafka: Arc<KafkaSink>,
    registry: Registry,
}

impl Ingest {
    /// Wires the service from its configuration. Nothing here waits for Redis, Kafka or
    /// ClickHouse: each is connected lazily and retried, so ingest starts (and reports
    /// not-ready) while a dependency is still coming up.
    pub fn build(cfg: IngestConfig) -> Result<Self, CommonError> {
        let redis = Arc::new(RedisLink::new(&cfg.redis_url)?);
        let registry = Registry::new(cfg.clickhouse.connect_lazy());
        let sites = Arc::new(SiteDirectory::new(cfg.site_refresh));
        let auth = Arc::new(Auth::new(
            redis.clone(),
            registry.clone(),
            AuthTtls {
                l1: cfg.l1_ttl,
                redis_secs: cfg.redis_ttl_secs,
                negative_secs: cfg.negative_ttl_secs,
            },
            cfg.registry_max_lookups,
            sites,
        ));
        let kafka = KafkaSink::new(KafkaSettings {
            brokers: cfg.kafka_brokers.clone(),
            topic: cfg.topic.clone(),
            ack_timeout: cfg.kafka_ack_timeout,
            linger_ms: cfg.kafka_linger_ms,
            queue_max_messages: cfg.kafka_queue_max_messages,
            compression: cfg.kafka_compression.clone(),
        })?;
        let state = AppState::new(Shared {
            limiter: RateLimiter::new(
                Budgets {
                    requests: cfg.rate_limit_per_second,
                    events: cfg.event_rate_limit_per_second,
                },
                redis.clone(),
            ),
            caps: Arc::new(RedisProfileCaps::new(cfg.profile_limits, redis.clone())),
            browser_limiter: LocalLimiter::new(Budgets {
                requests: cfg.browser_rate_limit_per_second,
                events: cfg.browser_event_rate_limit_per_second,
            }),
            failures: FailureLimiter::new(FailureLimit {
                burst: cfg.auth_failure_burst,
                per_minute: cfg.auth_failures_per_minute,
            }),
            last_used: Arc::new(crate::last_used::LastUsed::new(redis.clone())),
            cfg: Arc::new(cfg),
            auth,
            sink: kafka.clone(),
            redis,
            prometheus: prometheus(),
            shutting_down: Arc::new(AtomicBool::new(false)),
        });
        Ok(Ingest {
            state,
            kafka,
            registry,
        })
    }

    /// Serves until `shutdown` resolves, then: readiness turns 503, the listener closes
    /// after `SHUTDOWN_DRAIN_MS`, in-flight requests finish, and the producer is flushed.
    /// `internal` serves readiness and metrics until the process ends.
    pub async fn serve(
        self,
        listener: TcpListener,
        internal: TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let st = self.state.clone();
        tokio::spawn(
            st.auth
                .clone()
                .listen_for_invalidations(st.cfg.redis_url.clone()),
        );
        tokio::spawn(st.auth.sites.clone().keep_fresh(self.registry.clone()));
        tokio::spawn(st.auth.clone().load_mac_secret());
        tokio::spawn(self.kafka.clone().watch());
        tokio::spawn(self.kafka.clone().serve_reports());
        let redis = st.redis.clone();
        tokio::spawn(async move {
            loop {
                redis.ping().await;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        let flag = st.shutting_down.clone();
        let drain = st.cfg.shutdown_drain;
        let limits = listener::Limits {
            header_read_timeout: st.cfg.header_read_timeout,
            keep_alive_timeout: st.cfg.keep_alive_timeout,
            write_timeout: st.cfg.write_timeout,
            max_pipelined: st.cfg.max_pipelined,
            metrics_prefix: "ingest",
            max_connections: listener::fit_to_nofile(
                st.cfg.max_connections,
                listener::raise_nofile_limit(),
            ),
        };
        let app = st.clone();
        let handle_internal = move |req, peer| router::handle_internal(app.clone(), peer, req);
        let internal_limits = listener::Limits {
            max_connections: 256,
            metrics_prefix: "ingest_internal",
            ..limits
        };
        tracing::info!(addr = %internal.local_addr()?, "internal endpoints (readiness, metrics) listening");
        tokio::spawn(listener::serve(
            internal,
            handle_internal,
            internal_limits,
            std::future::pending(),
        ));
        let app = st.clone();
        let handle = move |req, peer| router::handle(app.clone(), peer, req);
        tracing::info!(addr = %listener.local_addr()?, max_connections = limits.max_connections, "rivulet-ingest listening");
        listener::serve(listener, handle, limits, async move {
            shutdown.await;
            flag.store(true, Ordering::Relaxed);
            tracing::info!("shutting down: readiness is now 503, finishing in-flight requests");
            tokio::time::sleep(drain).await;
        })
        .await?;
        let kafka = self.kafka.clone();
        let _ = tokio::task::spawn_blocking(move || kafka.flush(Duration::from_secs(10))).await;
        tracing::info!("shutdown complete");
        Ok(())
    }
}
