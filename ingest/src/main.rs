use rivulet_ingest::config::IngestConfig;
use rivulet_ingest::{shutdown_signal, Ingest};

// mimalloc: see the workspace Cargo.toml (malloc was a third of the CPU profile).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() {
    rivulet_common::telemetry::init_logging();
    let cfg = match IngestConfig::from_env() {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("rivulet-ingest: {e}");
            std::process::exit(2);
        }
    };
    let addr = cfg.addr.clone();
    let ingest = match Ingest::build(cfg) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("rivulet-ingest: {e}");
            std::process::exit(1);
        }
    };
    let listener = match tokio::net::TcpListener::bind(&addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("rivulet-ingest: cannot listen on {addr} (INGEST_ADDR): {e}");
            std::process::exit(1);
        }
    };
    let internal_addr = ingest.state.cfg.internal_addr.clone();
    let internal = match tokio::net::TcpListener::bind(&internal_addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!(
                "rivulet-ingest: cannot listen on {internal_addr} (INGEST_INTERNAL_ADDR): {e}"
            );
            std::process::exit(1);
        }
    };
    if let Err(e) = ingest.serve(listener, internal, shutdown_signal()).await {
        eprintln!("rivulet-ingest: {e}");
        std::process::exit(1);
    }
}
