use rivulet_common::ch::ChConfig;
use rivulet_enricher::config::EnricherConfig;
use rivulet_enricher::device::DeviceParser;
use rivulet_enricher::geo::GeoDb;
use rivulet_enricher::pipeline::{self, Health, Pipeline};
use rivulet_enricher::row::Enrichers;
use rivulet_enricher::server;
use std::sync::Arc;
use std::time::Duration;

// The system allocator, not mimalloc (which ingest uses): measured on 1M events, mimalloc
// held ~50 MB more RSS here (freed batch chunks and caches kept committed) for no
// measurable throughput (BENCHMARKS.md).

fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("rivulet-enricher: {msg}");
    std::process::exit(1);
}

#[tokio::main]
async fn main() {
    rivulet_common::telemetry::init_logging();
    let cfg = EnricherConfig::from_env().unwrap_or_else(|e| fail(e));
    let geo = if cfg.geoip.is_empty() {
        tracing::warn!("GEOIP_DB is not set: country, region, city and coordinates stay empty");
        GeoDb::disabled()
    } else {
        GeoDb::open(&cfg.geoip).unwrap_or_else(|e| fail(format!("GEOIP_DB: {e}")))
    };
    tracing::info!(geo = %geo.describe(), "geolocation");
    let device = DeviceParser::from_yaml_file(&cfg.ua_regexes, cfg.ua_cache_size)
        .unwrap_or_else(|e| fail(format!("UA_REGEXES={}: {e}", cfg.ua_regexes.display())));
    if cfg.visitor_secret_is_default {
        tracing::warn!("VISITOR_ID_SECRET is not set: using a development default; set one shared secret for all replicas in production");
    }
    let enrichers = Arc::new(Enrichers {
        geo,
        device,
        visitor_secret: cfg.visitor_secret.clone().into_bytes(),
        store_ip: cfg.store_ip,
    });

    let health = Arc::new(Health::default());
    let prometheus = server::prometheus();
    let listener = tokio::net::TcpListener::bind(&cfg.addr)
        .await
        .unwrap_or_else(|e| {
            fail(format!(
                "cannot listen on {} (ENRICHER_ADDR): {e}",
                cfg.addr
            ))
        });
    let app = server::router(server::ServerState {
        health: health.clone(),
        prometheus,
    });
    tokio::spawn(async move { axum::serve(listener, app).await });

    // ClickHouse may still be starting: wait for it rather than crash.
    let ch = ChConfig::from_env().unwrap_or_else(|e| fail(e));
    let db = loop {
        match ch.connect().await {
            Ok(db) => break db,
            Err(e) => {
                tracing::warn!(error = %e, url = %ch.url, "ClickHouse not reachable yet; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    };
    tracing::info!(version = %db.server_version, "connected to ClickHouse");
    let consumer = Arc::new(
        pipeline::consumer(&cfg, health.clone())
            .unwrap_or_else(|e| fail(format!("Kafka consumer: {e}"))),
    );
    let dlq = pipeline::dlq_producer(&cfg).unwrap_or_else(|e| fail(format!("Kafka producer: {e}")));
    tokio::spawn(server::probe(
        db.clone(),
        consumer.clone(),
        cfg.topic.clone(),
        health.clone(),
        enrichers.clone(),
    ));

    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        rivulet_common::shutdown::signal().await;
        let _ = tx.send(true);
        // Keep the sender alive so the loop sees one change, not a closed channel.
        std::future::pending::<()>().await;
    });
    let pipeline = Pipeline {
        io: tokio::runtime::Handle::current(),
        cfg,
        enrichers,
        db,
        consumer,
        dlq,
        health,
    };
    // Enrichment runs on one thread of its own; inserts, metrics and probes stay on this
    // runtime. The UA parser's regexes keep a cache per thread that runs them (measured:
    // ~40 MB per thread with uap-core's rules), so a loop that moved between worker
    // threads paid for them twice.
    let enrich = std::thread::Builder::new()
        .name("enrich".into())
        .spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap_or_else(|e| fail(format!("cannot start the enrichment runtime: {e}")))
                .block_on(pipeline.run(rx));
        })
        .unwrap_or_else(|e| fail(format!("cannot start the enrichment thread: {e}")));
    if tokio::task::spawn_blocking(move || enrich.join())
        .await
        .map_or(true, |joined| joined.is_err())
    {
        fail("the enrichment thread panicked");
    }
    tracing::info!("shutdown complete");
}
