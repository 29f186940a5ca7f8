//! `/_liveness`, `/_readiness`, `/metrics`, and the probe that keeps their figures fresh:
//! ClickHouse and Kafka reachability, each lane's consumer lag per partition and whether
//! it is stuck, the UA cache hit ratio.

use crate::health::{Health, Lane, LaneHealth};
use crate::kafka::RawConsumer;
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
use rivulet_enrichment::data::EnrichmentData;
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

/// Ready when Kafka and ClickHouse answer, the live lane's inserts go through, no lane
/// is stuck and no shutdown is under way. Also says how each lane is doing, which
/// user-agent rules and geo database are in use, and how their reloads went.
async fn readiness(State(st): State<ServerState>) -> Response {
    let h = &st.health;
    let (ua_rules, geo_db) = st.data.readiness();
    let mut ready = Readiness::new()
        .check(
            "kafka",
            h.lanes.iter().all(|l| l.kafka_ok.load(Ordering::Relaxed)),
        )
        .check(
            "clickhouse",
            h.clickhouse_reachable.load(Ordering::Relaxed)
                && !h
                    .lanes
                    .iter()
                    .any(|l| l.lane == Lane::Live && l.inserts_failing.load(Ordering::Relaxed)),
        );
    let mut lanes = serde_json::Map::new();
    for l in &h.lanes {
        let stuck = l.stuck();
        ready = ready.check(&format!("{}_lane", l.lane.as_str()), stuck.is_none());
        lanes.insert(
            l.lane.as_str().into(),
            serde_json::json!({
                "assigned_partitions": l.assigned_partitions.load(Ordering::Relaxed),
                "lag": l.lag.load(Ordering::Relaxed),
                "seconds_since_progress": l.since_progress().as_secs(),
                "stuck": stuck.map(|s| s.as_str()),
            }),
        );
    }
    let live_partitions = h
        .lane(Lane::Live)
        .map_or(0, |l| l.assigned_partitions.load(Ordering::Relaxed));
    ready
        .shutting_down(h.shutting_down.load(Ordering::Relaxed))
        .info("assigned_partitions", live_partitions)
        .info("lanes", lanes)
        .info("ua_rules", ua_rules)
        .info("geo_db", geo_db)
        .into_response()
}

/// A lane's consumer, as the probe looks at it.
pub struct ProbedLane {
    pub consumer: Arc<RawConsumer>,
    pub topic: String,
    pub health: Arc<LaneHealth>,
}

/// Every two seconds: is ClickHouse answering; for each lane, does its consumer reach
/// Kafka, how far behind is each of its partitions, is it stuck; how well does the UA
/// cache do.
pub async fn probe(db: Db, lanes: Vec<ProbedLane>, health: Arc<Health>, data: Arc<EnrichmentData>) {
    loop {
        let ch_ok = db
            .client
            .query(queries::SELECT_ONE)
            .fetch_one::<u8>()
            .await
            .is_ok();
        health.clickhouse_reachable.store(ch_ok, Ordering::Relaxed);
        for l in &lanes {
            probe_lane(l).await;
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

/// One lane's reach of Kafka, lag per partition and total, and whether it is stuck.
async fn probe_lane(l: &ProbedLane) {
    let lane = l.health.lane.as_str();
    let c = l.consumer.clone();
    let t = l.topic.clone();
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
    let h = &l.health;
    h.kafka_ok.store(lags.is_some(), Ordering::Relaxed);
    if let Some(lags) = lags {
        let total: i64 = lags.iter().map(|(_, lag)| lag).sum();
        h.lag.store(total.max(0) as u64, Ordering::Relaxed);
        if total == 0 {
            h.progressed();
        }
        for (p, lag) in lags {
            metrics::gauge!("enricher_consumer_lag", "lane" => lane, "partition" => p.to_string())
                .set(lag as f64);
        }
    }
    let stuck = h.stuck();
    metrics::gauge!("enricher_lane_stuck", "lane" => lane).set(if stuck.is_some() {
        1.0
    } else {
        0.0
    });
    metrics::gauge!("enricher_lane_seconds_since_progress", "lane" => lane)
        .set(h.since_progress().as_secs_f64());
}
