//! Whether a request may send for its site: its credential (a key, or a browser's
//! `Origin`), then the key and its rate limits, or the origin and its limit per address;
//! rejections counted against the client's address.

use super::client::Client;
use crate::api::IngestError;
use crate::auth::KeyCheck;
use crate::event::errors::ValidationErrors;
use crate::event::fields::Field;
use crate::rate_limit::{Limiter, Verdict};
use crate::state::{AppState, Backends};
use axum::http::HeaderValue;
use metrics::Counter;
use rivulet_common::client_ip::counted_as;
use std::net::IpAddr;
use std::sync::{Arc, LazyLock};

// Registered once: `counter!` builds its key and looks the series up on every call.
static RATE_LIMITED: LazyLock<Counter> =
    LazyLock::new(|| metrics::counter!("ingest_rate_limited_total"));

use rivulet_common::event::KEYLESS_KEY_ID as BROWSER_KEY_ID;

/// How a request says it may send for its site.
pub(super) enum Credential<'a> {
    /// An API key, from the body or the `Authorization` header (`None`: given, but not a
    /// string, so invalid).
    Key(Option<&'a str>),
    /// No key at all: a browser event, checked against the site's domains.
    Browser,
}

/// The body's `api_key` when the body has one (even `null` counts as none), else a Bearer
/// key, else the browser path when the request has an `Origin`. `None` when it has none:
/// browsers send `Origin` with every POST, so a request with neither a key nor an origin
/// comes from a server that forgot its key, and is told so (`require_key`) rather than
/// sent down the browser path to a 403 about origins.
pub(super) fn credential<'a>(
    body_key: Option<&'a Field<'a>>,
    client: &Client<'a>,
) -> Option<Credential<'a>> {
    match body_key {
        Some(Field::Null) | None => match (client.bearer, client.origin) {
            (Some(key), _) => Some(Credential::Key(Some(key))),
            (None, Some(_)) => Some(Credential::Browser),
            (None, None) => None,
        },
        Some(field) => Some(Credential::Key(field.as_str())),
    }
}

/// What `fieldErrors.api_key` says to a request with neither a key nor an `Origin`.
const MISSING_KEY: &str =
    "api_key is required: send it in the body or as Authorization: Bearer rb_…";

/// The payload's validation, with a missing key as one more field error: every problem of
/// a payload is reported in one answer, the missing key among them.
pub(super) fn require_key<'a, T>(
    credential: Option<Credential<'a>>,
    validated: Result<T, ValidationErrors>,
) -> Result<(T, Credential<'a>), IngestError> {
    let mut errors = match (credential, validated) {
        (Some(credential), Ok(v)) => return Ok((v, credential)),
        (Some(_), Err(errors)) => return Err(IngestError::InvalidPayload(errors)),
        (None, Ok(_)) => ValidationErrors::default(),
        (None, Err(errors)) => errors,
    };
    errors.field("api_key", MISSING_KEY);
    Err(IngestError::InvalidPayload(errors))
}

/// A request that may send for its site.
pub(super) struct Admitted {
    pub(super) key_id: Arc<str>,
    pub(super) browser: bool,
}

/// Decides whether the request may send `events` events for `site_id`: the key and its
/// rate limits, or the browser's origin and its limit per address. Rejections that say
/// something about keys or sites (401, 403, 404) count against the client's address,
/// which past its limit is answered 429 before anything is looked up. Sets `cors` once
/// a browser request's origin is known to be allowed.
pub(super) async fn admit<S: Backends>(
    st: &AppState<S>,
    credential: Credential<'_>,
    site_id: u32,
    events: u32,
    client: &Client<'_>,
    cors: &mut Option<HeaderValue>,
) -> Result<Admitted, IngestError> {
    let ip = client.ip;
    if let Err(blocked) = st.failures.check(ip) {
        // A key held as good for this site (in memory or Redis, never a registry
        // query) is served even from an address past its limit: behind a shared address
        // (NAT), one client's bad keys must not lock out another's good one.
        let good = match credential {
            Credential::Key(key) => st.auth.cached_good(key, site_id).await,
            Credential::Browser => false,
        };
        if !good {
            return Err(IngestError::TooManyRejections(blocked.0));
        }
    }
    // A key not held in memory may cost a registry query: its token is taken before the
    // lookup, so concurrent unknown keys cannot get more queries than the address has
    // tokens; a good key gives it back.
    let ahead = match credential {
        Credential::Key(key) if !st.auth.knows(key) => {
            if let Err(blocked) = st.failures.take(ip) {
                return Err(IngestError::TooManyRejections(blocked.0));
            }
            true
        }
        _ => false,
    };
    let admitted = match credential {
        Credential::Key(key) => admit_key(st, key, site_id, events).await,
        Credential::Browser => admit_browser(st, site_id, events, client, ip, cors),
    };
    match &admitted {
        Err(
            IngestError::InvalidKey
            | IngestError::SiteNotFound
            | IngestError::OriginNotAllowed
            | IngestError::BrowserPathOff,
        ) if !ahead => st.failures.record(ip),
        Err(
            IngestError::InvalidKey
            | IngestError::SiteNotFound
            | IngestError::OriginNotAllowed
            | IngestError::BrowserPathOff,
        ) => {}
        _ if ahead => st.failures.refund(ip),
        _ => {}
    }
    admitted
}

async fn admit_key<S: Backends>(
    st: &AppState<S>,
    key: Option<&str>,
    site_id: u32,
    events: u32,
) -> Result<Admitted, IngestError> {
    let key = st.auth.authorize(key, site_id).await?;
    let budgets = st.limiter.budgets();
    match st.limiter.allow(&key.key_id, events).await {
        Verdict::Allowed => {}
        Verdict::TooManyRequests => {
            RATE_LIMITED.increment(1);
            return Err(IngestError::RateLimited(budgets.requests));
        }
        Verdict::TooManyEvents => {
            RATE_LIMITED.increment(1);
            return Err(IngestError::EventsRateLimited(budgets.events));
        }
    }
    st.last_used.touch(&key.key_id);
    Ok(Admitted {
        key_id: key.key_id,
        browser: false,
    })
}

fn admit_browser<S: Backends>(
    st: &AppState<S>,
    site_id: u32,
    events: u32,
    client: &Client<'_>,
    ip: IpAddr,
    cors: &mut Option<HeaderValue>,
) -> Result<Admitted, IngestError> {
    let host = client.origin_host().ok_or(IngestError::OriginNotAllowed)?;
    let site = st
        .auth
        .site(site_id)?
        .ok_or(IngestError::OriginNotAllowed)?;
    if !site.accepts_host(&host) {
        return Err(IngestError::OriginNotAllowed);
    }
    if !site.browser_path {
        return Err(IngestError::BrowserPathOff);
    }
    *cors = client.origin.cloned();
    // One host usually holds a whole IPv6 /64: counted as one client, as the rejection
    // limit counts it, so that it cannot multiply its budget by its addresses.
    match st.browser_limiter.take((counted_as(ip), site_id), events) {
        Verdict::Allowed => {}
        Verdict::TooManyRequests | Verdict::TooManyEvents => {
            RATE_LIMITED.increment(1);
            return Err(IngestError::BrowserRateLimited(
                st.browser_limiter.budgets().requests,
            ));
        }
    }
    static BROWSER_KEY: LazyLock<Arc<str>> = LazyLock::new(|| Arc::from(BROWSER_KEY_ID));
    Ok(Admitted {
        key_id: BROWSER_KEY.clone(),
        browser: true,
    })
}
