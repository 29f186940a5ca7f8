//! `rivulet-admin serve`: the web dashboard (server-rendered HTML, a few lines of
//! JavaScript for the copy button) and the JSON admin API, both behind `ADMIN_TOKEN`.
//!
//! Routes are listed in `router`; login and sessions in `login` and `session`, CSRF in `csrf`; how errors become
//! responses in `respond`.

mod assets;
mod chart;
mod csrf;
mod json_api;
mod layout;
mod login;
mod overview;
mod respond;
mod session;
mod settings;
mod sites;
mod stats;

use crate::error::AdminError;
use crate::ops::Ops;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use rivulet_common::ch::Db;
use rivulet_common::config;
use rivulet_common::health::Readiness;
use rivulet_common::registry::Registry;
use rivulet_common::schema::queries;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Shortest accepted `ADMIN_TOKEN`: the login form is the only thing between the
/// network and the registry, so a guessable token is refused at startup.
const MIN_TOKEN_LEN: usize = 16;

pub struct DashboardConfig {
    pub addr: SocketAddr,
    pub token: String,
    pub session_ttl: Duration,
    pub cookie_secure: bool,
    pub login_delay: Duration,
}

impl DashboardConfig {
    pub fn from_env() -> Result<Self, AdminError> {
        let token = config::optional("ADMIN_TOKEN").ok_or_else(|| {
            AdminError::Usage(
                "ADMIN_TOKEN is not set: the dashboard needs a secret to log in with; generate one with `openssl rand -hex 32`".into(),
            )
        })?;
        if token.len() < MIN_TOKEN_LEN {
            return Err(AdminError::Usage(format!(
                "ADMIN_TOKEN is too short ({} characters): use at least {MIN_TOKEN_LEN}, e.g. `openssl rand -hex 32`",
                token.len()
            )));
        }
        Ok(DashboardConfig {
            addr: config::parse("ADMIN_ADDR", SocketAddr::from(([127, 0, 0, 1], 3002)))?,
            token,
            session_ttl: Duration::from_secs(config::parse("ADMIN_SESSION_TTL_SECS", 43_200)?),
            cookie_secure: config::flag("ADMIN_COOKIE_SECURE", false)?,
            login_delay: config::millis("ADMIN_LOGIN_DELAY_MS", 1000)?,
        })
    }
}

pub struct Dashboard {
    pub ops: Ops,
    pub reg: Registry,
    /// `events`, for the Overview.
    pub db: Db,
    pub sessions: session::Sessions,
}

pub type AppState = Arc<Dashboard>;

pub async fn serve(cfg: DashboardConfig, ops: Ops) -> Result<(), AdminError> {
    let state: AppState = Arc::new(Dashboard {
        db: ops.reg.db().clone(),
        reg: ops.reg.clone(),
        ops,
        sessions: session::Sessions::new(&cfg),
    });
    let listener = tokio::net::TcpListener::bind(cfg.addr)
        .await
        .map_err(|e| AdminError::Usage(format!("cannot listen on ADMIN_ADDR={}: {e}", cfg.addr)))?;
    tracing::info!(addr = %cfg.addr, "dashboard listening");
    axum::serve(listener, router(state))
        .with_graceful_shutdown(rivulet_common::shutdown::signal())
        .await
        .map_err(|e| AdminError::Usage(format!("dashboard server failed: {e}")))?;
    tracing::info!("dashboard stopped");
    Ok(())
}

pub fn router(state: AppState) -> Router {
    let pages = Router::new()
        .route("/", get(|| async { Redirect::to("/sites") }))
        .route("/sites", get(sites::list).post(sites::create))
        .route("/sites/{site_id}/overview", get(overview::page))
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
            get(json_api::get_site).delete(json_api::delete_site),
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
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            login::require_api_auth,
        ));
    Router::new()
        .merge(pages)
        .merge(api)
        .route("/login", get(login::login_form).post(login::login))
        .route("/assets/app.css", get(assets::css))
        .route("/assets/app.js", get(assets::js))
        .route("/_liveness", get(|| async { "ok" }))
        .route("/_readiness", get(readiness))
        .fallback(|| async {
            respond::page_error(AdminError::NotFound("There is no such page.".into()))
        })
        .layer(middleware::from_fn(security_headers))
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
/// sniffing, and a CSP that allows only our own stylesheet and script, so even a missed
/// escape could not run injected script.
async fn security_headers(req: Request, next: Next) -> Response {
    let is_asset = req.uri().path().starts_with("/assets/");
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:; \
             form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
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
    resp
}
