//! HTTP as the tests use it: one way to send a request and read its answer, bursts of
//! concurrent posts, and waiting until a service answers.

use crate::wait::Pace;
use reqwest::header::HeaderMap;
use reqwest::{RequestBuilder, Response, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::future::Future;
use std::time::Duration;

pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// Sending a request and reading its answer in one call. Each fails the test when no
/// answer comes (connection refused, time-out) or the body cannot be read as asked; a
/// test that expects no answer calls `send` itself.
pub trait Fetch {
    /// The response.
    fn fetch(self) -> impl Future<Output = Response> + Send;
    /// The response's status.
    fn fetch_status(self) -> impl Future<Output = StatusCode> + Send;
    /// The response's body, as JSON.
    fn fetch_json<T: DeserializeOwned>(self) -> impl Future<Output = T> + Send;
    /// The response's body, as text.
    fn fetch_text(self) -> impl Future<Output = String> + Send;
}

impl Fetch for RequestBuilder {
    async fn fetch(self) -> Response {
        self.send().await.expect("a response")
    }
    async fn fetch_status(self) -> StatusCode {
        self.fetch().await.status()
    }
    async fn fetch_json<T: DeserializeOwned>(self) -> T {
        self.fetch().await.json().await.expect("a JSON body")
    }
    async fn fetch_text(self) -> String {
        self.fetch().await.text().await.expect("a text body")
    }
}

/// POSTs `body` to `url` as `application/json` with `headers` on a fresh client: the
/// status, the headers, and the body as JSON (`Null` if it is not JSON).
pub async fn post_bytes(
    url: &str,
    body: Vec<u8>,
    headers: &[(&str, &str)],
) -> (u16, HeaderMap, Value) {
    let mut req = http()
        .post(url)
        .header("content-type", "application/json")
        .body(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.fetch().await;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.json::<Value>().await.unwrap_or(Value::Null);
    (status, headers, body)
}

/// POSTs `body` as JSON to `url` `n` times at once; the responses, in order.
pub async fn post_concurrently(url: &str, body: &Value, n: usize) -> Vec<Response> {
    let client = http();
    let reqs = (0..n).map(|_| client.post(url).json(body).fetch());
    futures::future::join_all(reqs).await
}

/// `post_concurrently`, and only the statuses, sorted.
pub async fn statuses_of_concurrent_posts(url: &str, body: &Value, n: usize) -> Vec<u16> {
    let mut statuses: Vec<u16> = post_concurrently(url, body, n)
        .await
        .iter()
        .map(|r| r.status().as_u16())
        .collect();
    statuses.sort_unstable();
    statuses
}

/// Waits long enough for any key's rate-limit buckets to be full again (they hold one
/// second's worth), so that a burst starts from a known state. A fixed delay on purpose:
/// the refill is the scenario, and nothing outside Redis's buckets shows it.
pub async fn buckets_refilled() {
    tokio::time::sleep(Duration::from_millis(1100)).await;
}

/// The most a key with `limit` per second may be accepted over a burst of `elapsed`
/// that starts with a full bucket: the bucket, and what refills meanwhile.
pub fn bucket_allows(limit: u32, elapsed: Duration) -> usize {
    (f64::from(limit) * (1.0 + elapsed.as_secs_f64())).floor() as usize
}

pub async fn wait_ready(url: &str, within: Duration) {
    wait_for(url, "/_readiness", within).await;
}

/// Waits until GET `url` + `path` answers 2xx, polling every 100 ms, for at most `within`.
pub async fn wait_for(url: &str, path: &str, within: Duration) {
    let client = http();
    let what = format!("{url}{path} did not answer 2xx");
    Pace::within(within)
        .every(Duration::from_millis(100))
        .poll_until(&what, || async {
            match client.get(format!("{url}{path}")).send().await {
                Ok(r) if r.status().is_success() => Ok(()),
                Ok(r) => Err(r.status().to_string()),
                Err(e) => Err(e.to_string()),
            }
        })
        .await
}

/// POSTs these events as one batch to ingest (`url` is its base URL) and checks that it
/// answered 200 with every event accepted.
pub async fn post_accepted_batch(url: &str, site: u32, key: &str, events: &[serde_json::Value]) {
    let r = crate::http()
        .post(format!("{url}/api/track/batch"))
        .json(&serde_json::json!({"api_key": key, "site_id": site, "events": events}))
        .send()
        .await
        .expect("ingest answers");
    assert_eq!(r.status(), 200);
    let body: serde_json::Value = r.json().await.expect("a JSON body");
    assert_eq!(body["accepted"], events.len(), "{body}");
}
