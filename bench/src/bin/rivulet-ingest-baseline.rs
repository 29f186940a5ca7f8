//! Benchmark baseline: an axum server that reads the same JSON body as /api/track,
//! parses it as ingest does (`event::fields::parse_event`, or `parse_batch` for a batch)
//! and answers `{"success":true}` with no validation and no I/O. The ingest benchmark
//! reports rivulet-ingest's throughput as a ratio of this one's.

use axum::body::Bytes;
use axum::routing::{get, post};
use axum::{Json, Router};
use rivulet_ingest::event::fields::{parse_batch, parse_event};
use serde_json::{json, Value};

// The same allocator as rivulet-ingest, so that the ratio compares the work, not malloc.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

async fn track(body: Bytes) -> Json<Value> {
    Json(json!({"success": parse_event(&body).is_ok()}))
}

async fn track_batch(body: Bytes) -> Json<Value> {
    Json(json!({"success": parse_batch(&body, 500).is_ok()}))
}

#[tokio::main]
async fn main() {
    let addr = std::env::var("BASELINE_ADDR").unwrap_or_else(|_| "127.0.0.1:3900".into());
    let app = Router::new()
        .route("/api/track", post(track))
        .route("/api/track/batch", post(track_batch))
        // For the bench script to wait on, as it does on ingest's health routes.
        .route("/_liveness", get(|| async { "ok" }));
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .expect("bind BASELINE_ADDR");
    axum::serve(listener, app).await.expect("serve");
}
