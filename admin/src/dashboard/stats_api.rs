//! `POST /api/v2/query`: the Stats API (docs/stats-api.md), Plausible's Stats API v2 shape,
//! answered by the query engine (`crate::query`).
//!
//! Authenticated by an API key with the scope `stats:read` (`Authorization: Bearer rb_…`),
//! which reads its own site only. Every step that a client can make costly is bounded:
//! unknown keys count against the client address's rejection limit (as at ingest), each
//! key has a rate limit (`STATS_RATE_LIMIT_PER_MINUTE`, counted in Redis across every
//! dashboard server, in this process while Redis does not answer), the body is at most
//! `MAX_QUERY_BYTES`, the engine bounds dimensions, filters, nesting and rows, and
//! ClickHouse stops a statement at `STATS_MAX_EXECUTION_SECS` (503).

use super::respond::api_error;
use super::AppState;
use crate::error::AdminError;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use rivulet_common::client_ip::client_ip;
use rivulet_common::failures::{FailureLimit, FailureLimiter};
use rivulet_common::keys::{digest_if_well_formed, KeyDigest, KeyHash, STATS_READ};
use rivulet_common::registry::{KeyRecord, Site};
use rivulet_stats::{Request, SiteRef};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The largest request body taken: a query is a few hundred bytes; the engine's limits
/// (filters, values, patterns) fit well within it.
pub const MAX_QUERY_BYTES: usize = 64 * 1024;

/// How long a key's lookup is kept in this process: a revoked key stops working within
/// this long.
const KEY_CACHE_TTL: Duration = Duration::from_secs(5);
/// Above this many cached lookups, expired ones are dropped (and all, if none expired).
const KEY_CACHE_MAX: usize = 10_000;

/// `STATS_RATE_LIMIT_PER_MINUTE`, `STATS_MAX_EXECUTION_SECS` and `STATS_MAX_MEMORY_BYTES`.
#[derive(Clone, Copy, Debug)]
pub struct StatsApiConfig {
    pub per_minute: u32,
    pub max_execution_secs: u64,
    /// ClickHouse's `max_memory_usage` for each statement, in bytes; 0: the server's.
    pub max_memory_bytes: u64,
}

/// What the Stats API keeps between requests.
pub struct StatsApi {
    cfg: StatsApiConfig,
    keys: Mutex<HashMap<KeyDigest, (Option<KeyRecord>, Instant)>>,
    failures: FailureLimiter,
    limiter: KeyRateLimit,
}

impl StatsApi {
    pub fn new(cfg: StatsApiConfig, redis_url: &str) -> Self {
        StatsApi {
            cfg,
            keys: Mutex::new(HashMap::new()),
            // Ingest's defaults (AUTH_FAILURE_BURST, AUTH_FAILURES_PER_MINUTE).
            failures: FailureLimiter::new(FailureLimit {
                burst: 20,
                per_minute: 60,
            }),
            limiter: KeyRateLimit::new(redis_url, cfg.per_minute),
        }
    }

    /// The key's record (its latest version), from this process's cache or the registry;
    /// `None` for a key the registry does not hold or that is revoked.
    async fn key(
        &self,
        st: &AppState,
        digest: &KeyDigest,
    ) -> Result<Option<KeyRecord>, AdminError> {
        if let Some((rec, at)) = self.keys.lock().expect("key cache").get(digest) {
            if at.elapsed() < KEY_CACHE_TTL {
                return Ok(rec.clone());
            }
        }
        let found = st
            .reg
            .find_key_by_hash(&KeyHash::from_digest(digest))
            .await?
            .filter(|k| k.revoked == 0);
        let mut keys = self.keys.lock().expect("key cache");
        if keys.len() >= KEY_CACHE_MAX {
            keys.retain(|_, (_, at)| at.elapsed() < KEY_CACHE_TTL);
            if keys.len() >= KEY_CACHE_MAX {
                keys.clear();
            }
        }
        keys.insert(*digest, (found.clone(), Instant::now()));
        Ok(found)
    }
}

/// `POST /api/v2/query`.
pub async fn query(
    State(st): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match answer(&st, peer, &headers, &body).await {
        Ok(resp) => resp,
        Err(AdminError::RateLimited { limit, retry_after }) => {
            let mut resp = api_error(AdminError::RateLimited { limit, retry_after });
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(retry_after.max(1)));
            resp
        }
        Err(e) => api_error(e),
    }
}

async fn answer(
    st: &AppState,
    peer: SocketAddr,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, AdminError> {
    let api = &st.stats_api;
    let forwarded = headers.get("x-forwarded-for").and_then(|v| v.to_str().ok());
    let ip = client_ip(peer.ip(), forwarded, &st.trusted_proxies);
    if let Err(blocked) = api.failures.check(ip) {
        return Err(AdminError::TooManyRejections(
            blocked.0.as_secs_f64().ceil() as u64,
        ));
    }
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let Some(bearer) = bearer else {
        return Err(AdminError::Unauthorized(
            "Send a Stats API key: Authorization: Bearer rb_… (rivulet-admin keys create --site N --scope stats:read)".into(),
        ));
    };
    let key = match digest_if_well_formed(bearer) {
        Some(digest) => api.key(st, &digest).await?,
        None => None,
    };
    let Some(key) = key else {
        api.failures.record(ip);
        return Err(AdminError::Unauthorized("Invalid API key".into()));
    };
    if !key.has_scope(STATS_READ) {
        return Err(AdminError::Forbidden(format!(
            "This API key may not read statistics: its scopes are {}; make one with rivulet-admin keys create --site {} --scope stats:read",
            key.scope_names().join(", "),
            key.site_id
        )));
    }
    if let Err(retry_after) = api.limiter.take(&key.key_id).await {
        return Err(AdminError::RateLimited {
            limit: api.cfg.per_minute,
            retry_after,
        });
    }
    if body.len() > MAX_QUERY_BYTES {
        return Err(AdminError::Usage(format!(
            "the query is {} bytes, more than the limit of {MAX_QUERY_BYTES}",
            body.len()
        )));
    }
    let request = Request::from_json(body)?;
    let site = st
        .reg
        .get_site(key.site_id)
        .await?
        .ok_or_else(|| AdminError::NotFound(format!("site {} does not exist", key.site_id)))?;
    let reads_it = match request.site()? {
        SiteRef::Id(id) => id == site.site_id,
        SiteRef::Domain(d) => site.domains().iter().any(|s| s.eq_ignore_ascii_case(&d)),
    };
    if !reads_it {
        return Err(site_forbidden(&site));
    }
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let answer = st.stats.query(&request, &site, now).await?;
    Ok(Json(answer).into_response())
}

fn site_forbidden(site: &Site) -> AdminError {
    AdminError::Forbidden(format!(
        "This API key reads site {} ({}) only: give its site_id",
        site.site_id, site.domain
    ))
}

/// Each Stats API key's queries per minute: a token bucket of `per_minute` tokens that
/// refills continuously, in Redis (one round trip, shared by every dashboard server), or
/// in this process while Redis does not answer.
pub struct KeyRateLimit {
    per_minute: u32,
    redis: Option<redis::Client>,
    conn: tokio::sync::Mutex<Option<redis::aio::MultiplexedConnection>>,
    script: redis::Script,
    local: Mutex<HashMap<String, (f64, Instant)>>,
}

/// KEYS[1]: the key's bucket (a hash). ARGV: capacity, tokens per second, now (ms).
/// Answers 0 when a token was taken, else the milliseconds until one is there.
const TAKE: &str = r"
local cap = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local b = redis.call('HMGET', KEYS[1], 't', 'at')
local tokens = tonumber(b[1]) or cap
local at = tonumber(b[2]) or now
tokens = math.min(cap, tokens + (now - at) / 1000 * rate)
local wait = 0
if tokens >= 1 then tokens = tokens - 1 else wait = math.ceil((1 - tokens) / rate * 1000) end
redis.call('HSET', KEYS[1], 't', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(cap / rate * 1000) + 1000)
return wait
";

impl KeyRateLimit {
    fn new(redis_url: &str, per_minute: u32) -> Self {
        KeyRateLimit {
            per_minute,
            redis: redis::Client::open(redis_url).ok(),
            conn: tokio::sync::Mutex::new(None),
            script: redis::Script::new(TAKE),
            local: Mutex::new(HashMap::new()),
        }
    }

    /// `Err(seconds to wait)` when the key has used its minute.
    async fn take(&self, key_id: &str) -> Result<(), u64> {
        if self.per_minute == 0 {
            return Ok(());
        }
        let wait_ms = match self.take_in_redis(key_id).await {
            Some(ms) => ms,
            None => self.take_locally(key_id),
        };
        if wait_ms == 0 {
            Ok(())
        } else {
            Err(wait_ms.div_ceil(1000))
        }
    }

    async fn take_in_redis(&self, key_id: &str) -> Option<u64> {
        let client = self.redis.as_ref()?;
        let mut guard = self.conn.lock().await;
        if guard.is_none() {
            let connect = client.get_multiplexed_async_connection();
            *guard = tokio::time::timeout(Duration::from_millis(500), connect)
                .await
                .ok()?
                .ok();
        }
        let mut conn = guard.clone()?;
        drop(guard);
        let now_ms = time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000;
        let mut invocation = self.script.prepare_invoke();
        invocation
            .key(format!("rivulet:stats_rl:{key_id}"))
            .arg(self.per_minute)
            .arg(f64::from(self.per_minute) / 60.0)
            .arg(now_ms as i64);
        let call = invocation.invoke_async::<i64>(&mut conn);
        match tokio::time::timeout(Duration::from_millis(500), call).await {
            Ok(Ok(wait)) => Some(wait.max(0) as u64),
            _ => {
                tracing::warn!(
                    "Redis did not answer the Stats API's rate limit; counting in this process"
                );
                *self.conn.lock().await = None;
                None
            }
        }
    }

    fn take_locally(&self, key_id: &str) -> u64 {
        let cap = f64::from(self.per_minute);
        let rate = cap / 60.0;
        let mut local = self.local.lock().expect("rate limit lock");
        if local.len() > KEY_CACHE_MAX {
            local.clear();
        }
        let (tokens, at) = local
            .entry(key_id.to_string())
            .or_insert((cap, Instant::now()));
        *tokens = (*tokens + at.elapsed().as_secs_f64() * rate).min(cap);
        *at = Instant::now();
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            0
        } else {
            ((1.0 - *tokens) / rate * 1000.0).ceil() as u64
        }
    }
}
