//! Who may use the dashboard: whoever knows `ADMIN_TOKEN`. The login form trades the
//! token for a session cookie (`HttpOnly`, `SameSite=Strict`); the API also takes the
//! token itself as `Authorization: Bearer`. Tries are counted per client address before
//! the token is compared (`throttle`), so guessing is slow however many connections a
//! guesser opens, and a wrong token is answered after a delay.

use super::csrf;
use super::layout;
use super::respond::{api_error, page_error};
use super::session::SessionCtx;
use super::AppState;
use crate::error::AdminError;
use axum::body::Body;
use axum::extract::{ConnectInfo, Form, Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;
use std::net::{IpAddr, SocketAddr};

/// Admin forms are a few fields; anything bigger is not one of ours.
const MAX_FORM_BYTES: usize = 64 * 1024;

fn cookie_value(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

fn current_session(st: &AppState, headers: &HeaderMap) -> Option<SessionCtx> {
    cookie_value(headers, &st.sessions.session_cookie()).and_then(|id| st.sessions.session(&id))
}

/// The client's address: the peer, or what a trusted proxy says it forwarded.
fn client(st: &AppState, peer: SocketAddr, headers: &HeaderMap) -> IpAddr {
    let forwarded = headers.get("x-forwarded-for").and_then(|v| v.to_str().ok());
    rivulet_common::client_ip::client_ip(peer.ip(), forwarded, &st.trusted_proxies)
}

/// One try of the admin token from `ip`: refused (429) while the address must wait,
/// else compared; a wrong one is answered after the delay.
async fn try_token(st: &AppState, ip: IpAddr, given: &str) -> Result<(), AdminError> {
    if let Err(wait) = st.throttle.take_try(ip) {
        return Err(AdminError::TooManyTries(wait.as_secs_f64().ceil() as u64));
    }
    if st.sessions.token_matches(given) {
        st.throttle.succeeded(ip);
        return Ok(());
    }
    st.throttle.failed(ip);
    tracing::warn!("a wrong admin token");
    tokio::time::sleep(st.sessions.login_delay).await;
    Err(AdminError::Unauthorized(
        "That admin token is wrong. Enter the ADMIN_TOKEN this dashboard was started with.".into(),
    ))
}

fn is_safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD)
}

/// Pages: a session is required (a GET without one goes to the login form), and every
/// POST must carry the session's CSRF token in its `csrf` field. Handlers get the
/// session as an `Extension<SessionCtx>`.
pub async fn require_session(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let Some(session) = current_session(&st, req.headers()) else {
        if is_safe(req.method()) {
            return Redirect::to("/login").into_response();
        }
        return page_error(AdminError::Unauthorized(
            "You are not logged in, or your session expired. Log in again.".into(),
        ));
    };
    let mut req = if is_safe(req.method()) {
        req
    } else {
        let (parts, body) = req.into_parts();
        let Ok(bytes) = axum::body::to_bytes(body, MAX_FORM_BYTES).await else {
            return page_error(AdminError::Usage("That form is too large.".into()));
        };
        let valid = csrf::form_field(&bytes, csrf::FIELD)
            .is_some_and(|t| csrf::same_secret(&t, &session.csrf));
        if !valid {
            tracing::warn!(path = %parts.uri.path(), "form without a valid CSRF token refused");
            return page_error(AdminError::Forbidden(
                "This form was missing its security (CSRF) token, or the token is stale. Reload the page and try again.".into(),
            ));
        }
        Request::from_parts(parts, Body::from(bytes))
    };
    req.extensions_mut().insert(session);
    next.run(req).await
}

/// The JSON API: `Authorization: Bearer <ADMIN_TOKEN>`, or the dashboard's session
/// cookie plus, for anything but GET, the session's CSRF token in `X-CSRF-Token`.
pub async fn require_api_auth(
    State(st): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
    next: Next,
) -> Response {
    if let Some(value) = req.headers().get(header::AUTHORIZATION) {
        let given = value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("")
            .trim()
            .to_string();
        let ip = client(&st, peer, req.headers());
        return match try_token(&st, ip, &given).await {
            Ok(()) => next.run(req).await,
            Err(AdminError::Unauthorized(_)) => {
                tracing::warn!(path = %req.uri().path(), "admin API call with a wrong token");
                api_error(AdminError::Unauthorized(
                    "wrong admin token: send Authorization: Bearer <ADMIN_TOKEN>".into(),
                ))
            }
            Err(e) => api_error(e),
        };
    }
    if let Some(session) = current_session(&st, req.headers()) {
        if !is_safe(req.method()) {
            let valid = req
                .headers()
                .get(csrf::HEADER)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|t| csrf::same_secret(t, &session.csrf));
            if !valid {
                return api_error(AdminError::Forbidden(
                    "with the session cookie, changes need the X-CSRF-Token header".into(),
                ));
            }
        }
        return next.run(req).await;
    }
    api_error(AdminError::Unauthorized(
        "missing admin token: send Authorization: Bearer <ADMIN_TOKEN>".into(),
    ))
}

#[derive(Deserialize)]
pub struct LoginForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    token: String,
}

pub async fn login_form(State(st): State<AppState>, headers: HeaderMap) -> Response {
    if current_session(&st, &headers).is_some() {
        return Redirect::to("/sites").into_response();
    }
    login_page(&st, StatusCode::OK, None)
}

pub async fn login(
    State(st): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let from_our_form = cookie_value(&headers, &st.sessions.login_cookie())
        .is_some_and(|expected| csrf::same_secret(&form.csrf, &expected));
    if !from_our_form {
        return login_page(
            &st,
            StatusCode::FORBIDDEN,
            Some("The login form expired or did not come from this dashboard. Try again."),
        );
    }
    if let Err(e) = try_token(&st, client(&st, peer, &headers), &form.token).await {
        return login_page(&st, e.status(), Some(&e.to_string()));
    }
    let session = st.sessions.start_session();
    tracing::info!("dashboard login");
    let mut resp = Redirect::to("/sites").into_response();
    let max_age = st.sessions.ttl.as_secs();
    let headers = resp.headers_mut();
    headers.append(
        header::SET_COOKIE,
        st.sessions
            .cookie(&st.sessions.session_cookie(), &session.id, max_age),
    );
    headers.append(
        header::SET_COOKIE,
        st.sessions.cookie(&st.sessions.login_cookie(), "", 0),
    );
    resp
}

pub async fn logout(
    State(st): State<AppState>,
    axum::Extension(session): axum::Extension<SessionCtx>,
) -> Response {
    st.sessions.end_session(&session.id);
    let mut resp = Redirect::to("/login").into_response();
    resp.headers_mut().append(
        header::SET_COOKIE,
        st.sessions.cookie(&st.sessions.session_cookie(), "", 0),
    );
    resp
}

/// The login form, with a fresh double-submit token in a hidden field and a cookie.
fn login_page(st: &AppState, status: StatusCode, error: Option<&str>) -> Response {
    let nonce = csrf::random_token();
    let body = html! {
        section.login {
            h1 { "Log in" }
            @if let Some(e) = error {
                p.error role="alert" { (e) }
            }
            form method="post" action="/login" {
                input type="hidden" name=(csrf::FIELD) value=(nonce);
                label for="token" { "Admin token" }
                input id="token" type="password" name="token" autocomplete="current-password" required autofocus;
                button type="submit" { "Log in" }
            }
            p.hint { "The token is the value of " code { "ADMIN_TOKEN" } " the dashboard was started with." }
        }
    };
    let mut resp = (status, layout::html(layout::page("Log in", None, body))).into_response();
    resp.headers_mut().append(
        header::SET_COOKIE,
        st.sessions
            .cookie(&st.sessions.login_cookie(), &nonce, 3600),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn cookies_are_found_by_name() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; rivulet_admin_session=abc; b=2"),
        );
        assert_eq!(
            cookie_value(&h, "rivulet_admin_session").as_deref(),
            Some("abc")
        );
        assert_eq!(cookie_value(&h, "rivulet_admin_login"), None);
    }
}
