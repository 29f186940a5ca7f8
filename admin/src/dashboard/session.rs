//! The dashboard's login sessions: the admin token they are traded for, the sessions
//! themselves (each with its CSRF token, and a new API key waiting to be shown once),
//! and their cookies. `login` has the handlers and middleware that use them.

use super::csrf;
use super::DashboardConfig;
use axum::http::HeaderValue;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The session cookie, and the double-submit cookie of the login form (there is no
/// session to hold its token yet). Behind TLS they are `Secure` and carry the `__Host-`
/// prefix, which browsers keep to the exact host, `Path=/` and HTTPS.
const SESSION_COOKIE: &str = "rivulet_admin_session";
const LOGIN_COOKIE: &str = "rivulet_admin_login";
const HOST_PREFIX: &str = "__Host-";
/// Sessions are created only by someone who knows the token, but a bound keeps a
/// script that logs in in a loop from growing memory without limit.
const MAX_SESSIONS: usize = 10_000;

/// A key created in this session, held until the API Key tab shows it (once).
pub struct NewKey {
    pub site_id: u32,
    pub key_id: String,
    pub api_key: String,
}

struct Session {
    csrf: String,
    expires: Instant,
    new_key: Option<NewKey>,
}

/// The logged-in session a page handler runs in: its id and its CSRF token.
#[derive(Clone)]
pub struct SessionCtx {
    pub id: String,
    pub csrf: String,
}

pub struct Sessions {
    token: String,
    sessions: Mutex<HashMap<String, Session>>,
    pub ttl: Duration,
    pub cookie_secure: bool,
    pub login_delay: Duration,
}

impl Sessions {
    pub fn new(cfg: &DashboardConfig) -> Self {
        Sessions {
            token: cfg.token.clone(),
            sessions: Mutex::new(HashMap::new()),
            ttl: cfg.session_ttl,
            cookie_secure: cfg.cookie_secure,
            login_delay: cfg.login_delay,
        }
    }

    pub fn token_matches(&self, given: &str) -> bool {
        csrf::same_secret(given, &self.token)
    }

    /// The session cookie's name.
    pub fn session_cookie(&self) -> String {
        self.cookie_name(SESSION_COOKIE)
    }

    /// The login form's cookie's name.
    pub fn login_cookie(&self) -> String {
        self.cookie_name(LOGIN_COOKIE)
    }

    fn cookie_name(&self, name: &str) -> String {
        if self.cookie_secure {
            format!("{HOST_PREFIX}{name}")
        } else {
            name.to_string()
        }
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        // A panic while holding the lock leaves a map that is still consistent.
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn start_session(&self) -> SessionCtx {
        let now = Instant::now();
        let mut sessions = self.sessions();
        sessions.retain(|_, s| s.expires > now);
        if sessions.len() >= MAX_SESSIONS {
            if let Some(oldest) = sessions
                .iter()
                .min_by_key(|(_, s)| s.expires)
                .map(|(id, _)| id.clone())
            {
                sessions.remove(&oldest);
            }
        }
        let ctx = SessionCtx {
            id: csrf::random_token(),
            csrf: csrf::random_token(),
        };
        sessions.insert(
            ctx.id.clone(),
            Session {
                csrf: ctx.csrf.clone(),
                expires: now + self.ttl,
                new_key: None,
            },
        );
        ctx
    }

    pub fn session(&self, id: &str) -> Option<SessionCtx> {
        let mut sessions = self.sessions();
        match sessions.get(id) {
            Some(s) if s.expires > Instant::now() => Some(SessionCtx {
                id: id.to_string(),
                csrf: s.csrf.clone(),
            }),
            Some(_) => {
                sessions.remove(id);
                None
            }
            None => None,
        }
    }

    pub fn end_session(&self, id: &str) {
        self.sessions().remove(id);
    }

    pub fn hold_new_key(&self, session: &SessionCtx, key: NewKey) {
        if let Some(s) = self.sessions().get_mut(&session.id) {
            s.new_key = Some(key);
        }
    }

    /// The key created for this site in this session, if not shown yet; after this call
    /// the dashboard no longer has it.
    pub fn take_new_key(&self, session: &SessionCtx, site_id: u32) -> Option<NewKey> {
        let mut sessions = self.sessions();
        let s = sessions.get_mut(&session.id)?;
        if s.new_key.as_ref().is_some_and(|k| k.site_id == site_id) {
            s.new_key.take()
        } else {
            None
        }
    }

    /// A cookie of the dashboard: `HttpOnly`, `SameSite=Strict`, `Path=/`, and behind TLS
    /// `Secure` with the `__Host-` name.
    pub fn cookie(&self, name: &str, value: &str, max_age: u64) -> HeaderValue {
        let secure = if self.cookie_secure { "; Secure" } else { "" };
        HeaderValue::from_str(&format!(
            "{name}={value}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}"
        ))
        .expect("cookie values are hex")
    }
}
