//! `rivulet-admin serve`: the web dashboard (server-rendered HTML, a few lines of
//! JavaScript for the copy button) and the JSON admin API, both behind `ADMIN_TOKEN`.
//!
//! Routes are listed in `router`; login and sessions in `login` and `session`, CSRF in `csrf`; how errors become
//! responses in `respond`.

mod analytics;
mod assets;
mod chart;
mod csrf;
mod domains;
mod download;
mod json_api;
mod layout;
mod login;
mod privacy;
mod respond;
mod session;
mod settings;
mod sites;
mod stats;
mod stats_api;
mod throttle;
mod token;
mod tracking;
mod users;
mod view;

use crate::error::AdminError;
use crate::ops::Ops;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use rivulet_common::ch::Db;
use rivulet_common::client_ip::TrustedProxies;
use rivulet_common::config;
use rivulet_common::health::Readiness;
use rivulet_common::listener;
use rivulet_common::registry::Registry;
use rivulet_common::schema::queries;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub struct DashboardConfig {
    pub addr: SocketAddr,
    pub token: String,
    pub session_ttl: Duration,
    /// `Secure` cookies with `__Host-` names, and HSTS: behind TLS.
    pub cookie_secure: bool,
    pub login_delay: Duration,
    /// `ADMIN_TRUSTED_PROXIES` (default: `TRUSTED_PROXIES`): whose `X-Forwarded-For` names
    /// the client, whose login tries are counted.
    pub trusted_proxies: TrustedProxies,
    /// `ADMIN_MAX_CONNECTIONS`, default 1024.
    pub max_connections: usize,
    /// `ADMIN_INGEST_URL`: where sites load the tracking script from, as the Tracking
    /// code tab writes it into the snippet (no trailing slash).
    pub ingest_url: String,
    /// `STATS_RATE_LIMIT_PER_MINUTE` (600), `STATS_MAX_EXECUTION_SECS` (10) and
    /// `STATS_MAX_MEMORY_BYTES` (0: ClickHouse's own limit).
    pub stats_api: stats_api::StatsApiConfig,
}

impl DashboardConfig {
    pub fn from_env() -> Result<Self, AdminError> {
        let token = config::optional("ADMIN_TOKEN").ok_or_else(|| {
            AdminError::Usage(
                "ADMIN_TOKEN is not set: the dashboard needs a secret to log in with; generate one with `openssl rand -hex 32`".into(),
            )
        })?;
        // A short or made-up token is refused before anything listens (token.rs).
        token::check(&token).map_err(AdminError::Usage)?;
        let addr = config::parse("ADMIN_ADDR", SocketAddr::from(([127, 0, 0, 1], 3002)))?;
        let proxies = config::optional("ADMIN_TRUSTED_PROXIES")
            .or_else(|| config::optional("TRUSTED_PROXIES"))
            .unwrap_or_default();
        Ok(DashboardConfig {
            addr,
            token,
            session_ttl: Duration::from_secs(config::parse("ADMIN_SESSION_TTL_SECS", 43_200)?),
            // Off loopback the dashboard is meant to be reached through TLS.
            cookie_secure: match config::optional("ADMIN_COOKIE_SECURE") {
                None => !addr.ip().is_loopback(),
                Some(_) => config::flag("ADMIN_COOKIE_SECURE", false)?,
            },
            login_delay: config::millis("ADMIN_LOGIN_DELAY_MS", 1000)?,
            trusted_proxies: TrustedProxies::parse(&proxies).map_err(|e| {
                AdminError::Usage(format!("ADMIN_TRUSTED_PROXIES={proxies:?}: {e}"))
            })?,
            max_connections: config::parse("ADMIN_MAX_CONNECTIONS", 1024)?,
            ingest_url: ingest_url(&config::string("ADMIN_INGEST_URL", DEFAULT_INGEST_URL))?,
            stats_api: stats_api::StatsApiConfig {
                per_minute: config::parse("STATS_RATE_LIMIT_PER_MINUTE", 600)?,
                max_execution_secs: config::parse("STATS_MAX_EXECUTION_SECS", 10)?,
                max_memory_bytes: config::parse("STATS_MAX_MEMORY_BYTES", 0)?,
            },
        })
    }
}

/// Ingest's public address in the default configuration (`INGEST_ADDR`).
const DEFAULT_INGEST_URL: &str = "http://127.0.0.1:3000";

/// `ADMIN_INGEST_URL`: an http(s) origin, optionally with a path prefix (a proxy's
/// folder), without query or fragment; a trailing slash is dropped.
fn ingest_url(value: &str) -> Result<String, AdminError> {
    let url = value.trim().trim_end_matches('/');
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    match rest {
        Some(rest)
            if !rest.is_empty()
                && !rest.starts_with('/')
                && !rest.contains(['?', '#', '"', '<', '>', ' ', '\'', '\\']) =>
        {
            Ok(url.to_string())
        }
        _ => Err(AdminError::Usage(format!(
            "ADMIN_INGEST_URL={value:?} is not ingest's address: give its public URL, such as https://stats.example.com"
        ))),
    }
}

pub struct Dashboard {
    pub ops: Ops,
    pub reg: Registry,
    /// `events`, for the Overview.
    pub db: Db,
    pub sessions: session::Sessions,
    pub throttle: throttle::LoginThrottle,
    pub trusted_proxies: TrustedProxies,
    /// `ADMIN_INGEST_URL`, for the tracking snippet.
    pub ingest_url: String,
    /// The query engine over ClickHouse: the Stats API and the dashboard's figures.
    pub stats: crate::query::Stats,
    /// The Stats API's keys, rejection limit and rate limit.
    pub stats_api: stats_api::StatsApi,
}

pub type AppState = Arc<Dashboard>;

pub async fn serve(cfg: DashboardConfig, ops: Ops) -> Result<(), AdminError> {
    let stats_api = stats_api::StatsApi::new(cfg.stats_api, &ops.redis_url);
    let stats = crate::query::Stats::new(
        ops.reg.db().clone(),
        cfg.stats_api.max_execution_secs,
        cfg.stats_api.max_memory_bytes,
    );
    let state: AppState = Arc::new(Dashboard {
        db: ops.reg.db().clone(),
        reg: ops.reg.clone(),
        ops,
        sessions: session::Sessions::new(&cfg),
        throttle: throttle::LoginThrottle::new(cfg.login_delay),
        trusted_proxies: cfg.trusted_proxies.clone(),
        ingest_url: cfg.ingest_url.clone(),
        stats,
        stats_api,
    });
    let listener = tokio::net::TcpListener::bind(cfg.addr)
        .await
        .map_err(|source| AdminError::Bind {
            addr: format!("ADMIN_ADDR={}", cfg.addr),
            source,
        })?;
    tracing::info!(addr = %cfg.addr, secure_cookies = cfg.cookie_secure, "dashboard listening");
    // The same bounded listener as ingest: deadlines for heads, idle time and writes, and
    // a connection cap that stalled clients cannot hold.
    let limits = listener::Limits {
        header_read_timeout: Duration::from_secs(10),
        keep_alive_timeout: Duration::from_secs(75),
        write_timeout: Duration::from_secs(10),
        max_pipelined: 32,
        max_connections: listener::fit_to_nofile(
            cfg.max_connections,
            listener::raise_nofile_limit(),
        ),
        metrics_prefix: "admin",
    };
    let app = router(state);
    let handle = move |req: hyper::Request<listener::TrackedBody>, peer: SocketAddr| {
        let mut req = req.map(axum::body::Body::new);
        req.extensions_mut()
            .insert(axum::extract::ConnectInfo(peer));
        let app = app.clone();
        async move {
            match tower::ServiceExt::oneshot(app, req).await {
                Ok(resp) => resp,
                Err(never) => match never {},
            }
        }
    };
    listener::serve(listener, handle, limits, rivulet_common::shutdown::signal())
        .await
        .map_err(|e| AdminError::io("the dashboard's server failed", e))?;
    tracing::info!("dashboard stopped");
    Ok(())
}

pub fn router(state: AppState) -> Router {
    let pages = Router::new()
        .route("/", get(|| async { Redirect::to("/sites") }))
        .route("/sites", get(sites::list).post(sites::create))
        .route("/sites/{site_id}/overview", get(analytics::page))
        .route("/sites/{site_id}/overview/details", get(analytics::details))
        .route(
            "/sites/{site_id}/overview/export.csv",
            get(analytics::export_csv),
        )
        .route("/sites/{site_id}/overview/live", get(analytics::live))
        .route(
            "/sites/{site_id}/settings",
            get(settings::general).post(settings::update),
        )
        .route("/sites/{site_id}/delete", post(settings::delete))
        .route("/sites/{site_id}/settings/api-key", get(settings::api_key))
        .route("/sites/{site_id}/keys", post(settings::generate_key))
        .route(
            "/sites/{site_id}/keys/{key_id}/revoke",
            post(settings::revoke_key),
        )
        .route("/sites/{site_id}/settings/privacy", get(privacy::page))
        .route("/sites/{site_id}/erasures", post(privacy::erase))
        .route("/sites/{site_id}/retention", post(privacy::save_retention))
        .route("/sites/{site_id}/export", get(privacy::export))
        .route(
            "/sites/{site_id}/settings/domains",
            get(domains::page).post(domains::save),
        )
        .route("/sites/{site_id}/settings/tracking", get(tracking::page))
        .route("/sites/{site_id}/users", get(users::search))
        .route("/sites/{site_id}/users/{user_id}", get(users::page))
        .route("/logout", post(login::logout))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            login::require_session,
        ));
    let api = Router::new()
        .route(
            "/api/sites",
            get(json_api::list_sites).post(json_api::create_site),
        )
        .route(
            "/api/sites/{site_id}",
            get(json_api::get_site)
                .patch(json_api::update_site)
                .delete(json_api::delete_site),
        )
        .route(
            "/api/sites/{site_id}/keys",
            get(json_api::list_keys).post(json_api::create_key),
        )
        .route(
            "/api/sites/{site_id}/keys/{key_id}/revoke",
            post(json_api::revoke_key),
        )
        .route("/api/sites/{site_id}/overview", get(json_api::overview))
        .route(
            "/api/sites/{site_id}/erasures",
            get(json_api::list_erasures).post(json_api::create_erasure),
        )
        .route("/api/erasures/{request_id}", get(json_api::get_erasure))
        .route(
            "/api/sites/{site_id}/users/{user_id}",
            get(json_api::user_profile),
        )
        .route("/api/sites/{site_id}/export", get(json_api::export))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            login::require_api_auth,
        ));
    Router::new()
        .merge(pages)
        .merge(api)
        // Authenticated by its own API keys (scope stats:read), not the admin token.
        .route("/api/v2/query", post(stats_api::query))
        .route("/login", get(login::login_form).post(login::login))
        .route("/assets/app.css", get(assets::css))
        .route("/assets/app.js", get(assets::js))
        .route("/_liveness", get(|| async { "ok" }))
        .route("/_readiness", get(readiness))
        .fallback(|| async {
            respond::page_error(AdminError::NotFound("There is no such page.".into()))
        })
        .layer(middleware::from_fn_with_state(
            state.clone(),
            security_headers,
        ))
        .with_state(state)
}

/// Ready when ClickHouse, where everything the dashboard shows lives, answers.
async fn readiness(State(st): State<AppState>) -> Response {
    let clickhouse = st
        .db
        .client
        .query(queries::SELECT_ONE)
        .fetch_one::<u8>()
        .await;
    if let Err(e) = &clickhouse {
        tracing::warn!(error = %e, "readiness: ClickHouse does not answer");
    }
    Readiness::new()
        .check("clickhouse", clickhouse.is_ok())
        .into_response()
}

/// Every response: no caching (a page may show a new API key once), no framing, no
/// sniffing, a CSP that allows only our own stylesheet and script, so even a missed
/// escape could not run injected script, and behind TLS (secure cookies) HSTS.
async fn security_headers(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let is_asset = req.uri().path().starts_with("/assets/");
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:; \
             connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    if !is_asset {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    if st.sessions.cookie_secure {
        // Browsers heed it only over HTTPS, which secure cookies already require.
        h.insert(
            header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static("max-age=31536000"),
        );
    }
    resp
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_ingest_url_is_an_http_origin_without_a_trailing_slash() {
        assert_eq!(
            super::ingest_url("https://stats.example.com/").unwrap(),
            "https://stats.example.com"
        );
        assert_eq!(
            super::ingest_url(" http://127.0.0.1:3000 ").unwrap(),
            "http://127.0.0.1:3000"
        );
        assert_eq!(
            super::ingest_url("https://example.com/rivulet").unwrap(),
            "https://example.com/rivulet"
        );
        for bad in [
            "",
            "stats.example.com",
            "ftp://x",
            "https://",
            "https:///x",
            "https://x?y",
            "https://x\"><script>",
        ] {
            assert!(super::ingest_url(bad).is_err(), "{bad}");
        }
    }
}
