//! Checks real responses against ingest's OpenAPI document (`/api/openapi.json`), with
//! the validator ingest's in-process tests use (`rivulet_ingest::testing::openapi`).

use serde_json::Value;

pub use rivulet_ingest::testing::openapi::assert_documented;

/// The document as the running ingest at `url` serves it.
pub async fn document(url: &str) -> Value {
    crate::http()
        .get(format!("{url}/api/openapi.json"))
        .send()
        .await
        .expect("GET /api/openapi.json")
        .json()
        .await
        .expect("the OpenAPI document is JSON")
}
