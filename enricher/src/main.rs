use rivulet_enricher::config::EnricherConfig;

// The system allocator, not mimalloc (which ingest uses): mimalloc held more RSS here
// (freed batch chunks and caches kept committed) for no measurable throughput
// (docs/decisions/005-enricher-throughput-and-memory.md).

#[tokio::main]
async fn main() {
    rivulet_common::telemetry::init_logging();
    let result = match EnricherConfig::from_env() {
        Ok(cfg) => rivulet_enricher::run(cfg).await,
        Err(e) => Err(e.into()),
    };
    if let Err(e) = result {
        eprintln!("rivulet-enricher: {e}");
        std::process::exit(1);
    }
}
