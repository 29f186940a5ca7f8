//! `/_liveness`, `/_readiness`, `/metrics`, and the probe that keeps their figures fresh:
//! ClickHouse and Kafka reachability, consumer lag per partition, UA cache hit ratio.

use crate::data::EnrichmentData;
use crate::pipeline::{Health, RawConsumer};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use rdkafka::consumer::Consumer;
use rdkafka::util::Timeout;
use rivulet_common::ch::Db;
use rivulet_common::health::{self, Readiness};
use rivulet_common::schema::queries;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone)]
pub struct ServerState {
    pub health: Arc<Health>,
    pub prometheus: PrometheusHandle,
    pub data: Arc<EnrichmentData>,
}

/// The process's Prometheus recorder, with buckets for insert durations (seconds) and
/// batch sizes (rows).
pub fn prometheus() -> PrometheusHandle {
    rivulet_common::telemetry::prometheus(&[
        0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 100.0, 1000.0, 10000.0,
        50000.0,
    ])
}

pub fn router(state: ServerState) -> Router {
    Router::new()
        .route("/_liveness", get(|| async { health::liveness() }))
        .route("/_readiness", get(readiness))
        .route(
            "/metrics",
            get(|State(st): State<ServerState>| async move { health::metrics(&st.prometheus) }),
        )
        .with_state(state)
}

/// Ready when Kafka and ClickHouse answer and no shutdown is under way. Also says which
/// user-agent rules and geo database are in use, and how their reloads went.
async fn readiness(State(st): State<ServerState>) -> Response {
    let h = &st.health;
    let (ua_rules, geo_db) = st.data.readiness();
    Readiness::new()
        .check("kafka", h.kafka_ok.load(Ordering::Relaxed))
        .check("clickhouse", h.clickhouse_ok.load(Ordering::Relaxed))
        .shutting_down(h.shutting_down.load(Ordering::Relaxed))
        .info(
            "assigned_partitions",
            h.assigned_partitions.load(Ordering::Relaxed),
        )
        .info("ua_rules", ua_rules)
        .info("geo_db", geo_db)
        .into_response()
}

/// Every two seconds: is ClickHouse answering, is Kafka answering, how far behind is
/// each assigned partition, how well does the UA cache do.
pub async fn probe(
    db: Db,
    consumer: Arc<RawConsumer>,
    topic: String,
    health: Arc<Health>,
    data: Arc<EnrichmentData>,
) {
    loop {
        let ch_ok = db
            .client
            .query(queries::SELECT_ONE)
            .fetch_one::<u8>()
            .await
            .is_ok();
        if !ch_ok {
            health.clickhouse_ok.store(false, Ordering::Relaxed);
        } else if !health.clickhouse_ok.load(Ordering::Relaxed)
            && health.assigned_partitions.load(Ordering::Relaxed) == 0
        {
            // Before the first insert, reachability is all we can know.
            health.clickhouse_ok.store(true, Ordering::Relaxed);
        }
        let c = consumer.clone();
        let t = topic.clone();
        let lags = tokio::task::spawn_blocking(move || -> Option<Vec<(i32, i64)>> {
            c.fetch_metadata(Some(&t), Timeout::After(Duration::from_millis(1500)))
                .ok()?;
            let positions = c.position().ok()?;
            let mut lags = Vec::new();
            for e in positions.elements_for_topic(&t) {
                let (_, high) = c
                    .fetch_watermarks(
                        &t,
                        e.partition(),
                        Timeout::After(Duration::from_millis(1000)),
                    )
                    .ok()?;
                let pos = e.offset().to_raw().filter(|o| *o >= 0);
                lags.push((e.partition(), pos.map(|p| (high - p).max(0)).unwrap_or(0)));
            }
            Some(lags)
        })
        .await
        .ok()
        .flatten();
        health.kafka_ok.store(lags.is_some(), Ordering::Relaxed);
        for (p, lag) in lags.unwrap_or_default() {
            metrics::gauge!("enricher_consumer_lag", "partition" => p.to_string()).set(lag as f64);
        }
        let (hits, misses) = data.cache_stats();
        metrics::gauge!("enricher_ua_cache_hits").set(hits as f64);
        metrics::gauge!("enricher_ua_cache_misses").set(misses as f64);
        if hits + misses > 0 {
            metrics::gauge!("enricher_ua_cache_hit_ratio")
                .set(hits as f64 / (hits + misses) as f64);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}
