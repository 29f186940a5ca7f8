//! The running enricher: its parts wired together from the configuration, run until
//! shutdown.

use crate::config::EnricherConfig;
use crate::data::EnrichmentData;
use crate::error::EnricherError;
use crate::ledger::Ledger;
use crate::pipeline::{self, Health, Pipeline};
use crate::server;
use std::sync::Arc;
use std::time::Duration;

/// Runs a lane's pipeline on a thread of its own, with a runtime of its own.
/// `nice`: the thread's CPU priority (`rivulet_common::priority`), 0 for live events'.
fn lane_thread(
    name: &str,
    pipeline: Pipeline,
    nice: i32,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> Result<std::thread::JoinHandle<()>, EnricherError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| EnricherError::Thread(format!("cannot start its runtime: {e}")))?;
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            rivulet_common::priority::lower_this_thread(nice);
            runtime.block_on(pipeline.run(shutdown))
        })
        .map_err(|e| EnricherError::Thread(format!("cannot start it: {e}")))
}

/// Loads the enrichment data, serves health and metrics, connects to ClickHouse (waiting
/// for it) and Kafka, and runs the pipeline until SIGTERM or Ctrl-C.
pub async fn run(cfg: EnricherConfig) -> Result<(), EnricherError> {
    // Before anything else: SIGHUP's default action ends the process.
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .map_err(EnricherError::Signal)?;
    // The recorder first, so that the info gauges set at load are kept.
    let prometheus = server::prometheus();
    if cfg.geoip.is_empty() {
        tracing::warn!("GEOIP_DB is not set: country, region, city and coordinates stay empty");
    }
    let data = Arc::new(EnrichmentData::load(cfg.data())?);
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
    if cfg.visitor_secret_is_default {
        tracing::warn!("VISITOR_ID_SECRET is not set: using a development default; set one shared secret for all replicas in production");
    }

    let health = Arc::new(Health::default());
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
    let consumer = Arc::new(pipeline::consumer(&cfg, health.clone(), true)?);
    let dlq = pipeline::dlq_producer(&cfg)?;
    tokio::spawn(server::probe(
        db.clone(),
        consumer.clone(),
        cfg.topic.clone(),
        health.clone(),
        data.clone(),
    ));

    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        rivulet_common::shutdown::signal().await;
        let _ = tx.send(true);
        // Keep the sender alive so the loop sees one change, not a closed channel.
        std::future::pending::<()>().await;
    });
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
    // The historical lane (`rivulet-admin import`): the same pipeline on its own topic,
    // group and thread, so that an import and live events never wait for each other.
    let import_nice = cfg.import_lane_nice;
    let import = if cfg.import_lane {
        let import_cfg = cfg.import_lane();
        let import_health = Arc::new(Health::default());
        Some(Pipeline {
            io: tokio::runtime::Handle::current(),
            consumer: Arc::new(pipeline::consumer(
                &import_cfg,
                import_health.clone(),
                false,
            )?),
            dlq: pipeline::dlq_producer(&import_cfg)?,
            cfg: import_cfg,
            data: data.clone(),
            db: db.clone(),
            health: import_health,
            ledger: ledger.clone(),
        })
    } else {
        None
    };
    let pipeline = Pipeline {
        io: tokio::runtime::Handle::current(),
        cfg,
        data,
        db,
        consumer,
        dlq,
        health,
        ledger,
    };
    // Enrichment runs on one thread of its own per lane; inserts, metrics and probes stay
    // on this runtime. The UA parser's regexes keep a cache per thread that runs them
    // (docs/decisions/005-enricher-throughput-and-memory.md), so a loop that moved
    // between worker threads paid for them twice.
    let mut threads = vec![lane_thread("enrich", pipeline, 0, rx.clone())?];
    if let Some(import) = import {
        threads.push(lane_thread("enrich-import", import, import_nice, rx)?);
    }
    for thread in threads {
        tokio::task::spawn_blocking(move || thread.join())
            .await
            .map_err(|e| EnricherError::Thread(e.to_string()))?
            .map_err(|_| EnricherError::Thread("it panicked".into()))?;
    }
    tracing::info!("shutdown complete");
    Ok(())
}
