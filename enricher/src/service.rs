//! The running enricher: its parts wired together from the configuration, run until
//! shutdown.

use crate::batcher::Batcher;
use crate::config::{EnricherConfig, LaneConfig};
use crate::error::EnricherError;
use crate::health::{Health, Lane, LaneHealth};
use crate::kafka::{self, KafkaDeadLetters, KafkaOffsets};
use crate::pipeline::Pipeline;
use crate::server::{self, ProbedLane};
use crate::writer::{ClickHouse, Writer};
use rivulet_common::ch::Db;
use rivulet_enrichment::data::EnrichmentData;
use rivulet_enrichment::ledger::Ledger;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// A lane's pipeline, wired to ClickHouse and Kafka.
type LanePipeline = Pipeline<ClickHouse, KafkaOffsets, KafkaDeadLetters>;

/// Runs a lane's pipeline on a thread of its own, with a runtime of its own, at the
/// lane's CPU priority (`rivulet_common::priority`; 0 for live events').
fn lane_thread(
    lane: &LaneConfig,
    pipeline: LanePipeline,
    shutdown: watch::Receiver<bool>,
) -> Result<std::thread::JoinHandle<Result<(), EnricherError>>, EnricherError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(EnricherError::LaneRuntime)?;
    let nice = lane.nice;
    let name = match lane.lane {
        Lane::Live => "enrich",
        Lane::Import => "enrich-import",
    };
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            rivulet_common::priority::lower_this_thread(nice);
            runtime.block_on(kafka::consume(pipeline, shutdown))
        })
        .map_err(EnricherError::LaneThread)
}

/// What every lane shares.
struct Shared {
    cfg: EnricherConfig,
    data: Arc<EnrichmentData>,
    db: Db,
    ledger: Arc<Ledger>,
    health: Arc<Health>,
}

impl Shared {
    /// A lane's consumer, wired to its pipeline, and what the probe looks at.
    fn lane(
        &self,
        lane: &LaneConfig,
        health: Arc<LaneHealth>,
    ) -> Result<(LanePipeline, ProbedLane), EnricherError> {
        // Only the live lane's partition 0 makes this enricher the lifecycle runner.
        let leads = (lane.lane == Lane::Live).then(|| self.health.clone());
        let consumer = Arc::new(kafka::consumer(&self.cfg, lane, health.clone(), leads)?);
        let writer = Writer {
            sink: Arc::new(ClickHouse(self.db.clone())),
            health: health.clone(),
            ledger: self.ledger.clone(),
            retry_max: self.cfg.insert_retry_max,
            ledger_max_age: self.cfg.ledger_max_age,
        };
        let offsets = KafkaOffsets {
            consumer: consumer.clone(),
            topic: lane.topic.clone(),
        };
        let dlq = KafkaDeadLetters {
            producer: kafka::dlq_producer(&self.cfg)?,
            topic: lane.topic.clone(),
            dlq_topic: self.cfg.dlq_topic.clone(),
        };
        let batcher = Batcher::new(
            tokio::runtime::Handle::current(),
            lane.batch,
            writer,
            offsets,
        );
        let pipeline = Pipeline::new(
            lane.lane,
            self.data.clone(),
            self.ledger.clone(),
            self.cfg.enrichment.session_timeout,
            batcher,
            dlq,
        );
        let probed = ProbedLane {
            consumer,
            topic: lane.topic.clone(),
            health,
        };
        Ok((pipeline, probed))
    }
}

/// Loads the enrichment data, serves health and metrics, connects to ClickHouse (waiting
/// for it) and Kafka, and runs the pipeline until SIGTERM or Ctrl-C.
pub async fn run(cfg: EnricherConfig) -> Result<(), EnricherError> {
    // Before anything else: SIGHUP's default action ends the process.
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .map_err(EnricherError::Signal)?;
    // The recorder first, so that the info gauges set at load are kept.
    let prometheus = server::prometheus();
    if cfg.enrichment.geoip.is_empty() {
        tracing::warn!("GEOIP_DB is not set: country, region, city and coordinates stay empty");
    }
    let data = Arc::new(EnrichmentData::load(cfg.enrichment.clone())?);
    tracing::info!(geo = %data.current().geo.describe(), "geolocation");
    if let Some(rules) = data.ua_rules() {
        tracing::info!(path = %rules.path.display(), revision = %rules.revision, "user-agent rules");
    }
    data.publish_metrics();
    let reload = data
        .clone()
        .watch(cfg.reload_check)
        .map_err(EnricherError::ReloadThread)?;
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading the user-agent rules and the geo database");
            if reload.send(()).is_err() {
                return;
            }
        }
    });
    if cfg.enrichment.visitor_secret_is_default {
        tracing::warn!("VISITOR_ID_SECRET is not set: using a development default; set one shared secret for all replicas in production");
    }

    let lanes = cfg.lanes();
    let health = Arc::new(Health::new(
        &lanes.iter().map(|l| l.lane).collect::<Vec<_>>(),
    ));
    let listener = tokio::net::TcpListener::bind(&cfg.addr)
        .await
        .map_err(|source| EnricherError::Listen {
            addr: cfg.addr.clone(),
            source,
        })?;
    let app = server::router(server::ServerState {
        health: health.clone(),
        prometheus,
        data: data.clone(),
    });
    tokio::spawn(async move { axum::serve(listener, app).await });

    // ClickHouse may still be starting: wait for it rather than crash.
    let db = loop {
        match cfg.clickhouse.connect().await {
            Ok(db) => break db,
            Err(e) => {
                tracing::warn!(error = %e, url = %cfg.clickhouse.url, "ClickHouse not reachable yet; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    };
    tracing::info!(version = %db.server_version, "connected to ClickHouse");

    let (stop, shutdown) = watch::channel(false);
    let stop = Arc::new(stop);
    {
        let (stop, health) = (stop.clone(), health.clone());
        tokio::spawn(async move {
            rivulet_common::shutdown::signal().await;
            health.shutting_down.store(true, Ordering::Relaxed);
            let _ = stop.send(true);
        });
    }
    tokio::spawn(
        crate::lifecycle::Lifecycle {
            cfg: cfg.lifecycle.clone(),
            db: db.clone(),
            clickhouse: cfg.clickhouse.clone(),
            health: health.clone(),
        }
        .run(),
    );
    let ledger = Arc::new(Ledger::new());
    tokio::spawn(ledger.clone().keep_fresh(db.clone(), cfg.ledger_refresh));

    // Each lane (live events; imports, unless turned off) runs the same pipeline on its
    // own topic, group and thread, so that an import and live events never wait for each
    // other. Enrichment runs on those threads; inserts, metrics and probes stay on this
    // runtime. The UA parser's regexes keep a cache per thread that runs them
    // (docs/decisions/005-enricher-throughput-and-memory.md), so a loop that moved
    // between worker threads paid for them twice.
    let shared = Shared {
        cfg,
        data: data.clone(),
        db: db.clone(),
        ledger,
        health: health.clone(),
    };
    let mut probed = Vec::new();
    let mut running = tokio::task::JoinSet::new();
    for (lane, lane_health) in lanes.iter().zip(health.lanes.iter().cloned()) {
        let (pipeline, probe) = shared.lane(lane, lane_health.clone())?;
        probed.push(probe);
        let thread = lane_thread(lane, pipeline, shutdown.clone())?;
        running.spawn_blocking(move || {
            let ended = thread.join().unwrap_or(Err(EnricherError::LanePanicked));
            lane_health.stopped.store(true, Ordering::Relaxed);
            (lane_health.lane, ended)
        });
    }
    tokio::spawn(server::probe(db, probed, health.clone(), data));

    // A lane that ends before shutdown failed: the others are stopped too (they insert
    // and commit what they hold) and the process exits non-zero, to be restarted, rather
    // than run on with a lane that reads nothing.
    let mut failure = None;
    while let Some(joined) = running.join_next().await {
        let (lane, ended) = joined.map_err(|e| EnricherError::LaneJoin(e.to_string()))?;
        if let Err(e) = ended {
            tracing::error!(lane = lane.as_str(), error = %e, "a lane stopped; stopping the enricher");
            failure.get_or_insert(e);
            health.shutting_down.store(true, Ordering::Relaxed);
            let _ = stop.send(true);
        }
    }
    if let Some(e) = failure {
        return Err(e);
    }
    tracing::info!("shutdown complete");
    Ok(())
}
