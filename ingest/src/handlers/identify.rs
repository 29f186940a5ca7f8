//! `POST /api/identify`: checked, admitted as an event is, then held to the profile caps
//! and to the site's switch for identify calls from the browser.

use super::admission::{admit, credential, require_key};
use super::client::Client;
use super::message::identify_record;
use super::{answer_deadline, read_body};
use crate::api::{self, IngestError};
use crate::auth::KeyCheck;
use crate::event::errors::ValidationErrors;
use crate::event::fields;
use crate::event::identify::{validate_identify, Identify};
use crate::profile_caps::{self, CapVerdict, ProfileCaps, ProfileWrite};
use crate::request_body::RequestBody;
use crate::sink::Sink;
use crate::state::{AppState, Backends};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;

pub(super) async fn identify_one<S: Backends>(
    st: &AppState<S>,
    client: &Client<'_>,
    headers: &HeaderMap,
    body: impl RequestBody,
    cors: &mut Option<HeaderValue>,
) -> Result<Response, IngestError> {
    let body = read_body(st, headers, body, st.cfg.max_body_bytes).await?;
    let deadline = answer_deadline(st);
    let mut fields = fields::parse_identify(&body)?;
    let api_key = fields.api_key.take();
    let (id, credential) = require_key(
        credential(api_key.as_ref(), client),
        validate_identify(fields),
    )?;
    let who = admit(st, credential, id.site_id, 0, client, cors).await?;
    if who.browser {
        let takes_identify = st
            .auth
            .site(id.site_id)?
            .is_some_and(|site| site.browser_identify);
        if !takes_identify {
            return Err(IngestError::BrowserIdentifyOff);
        }
    }
    let ids = [Some(&*id.user_id), id.anonymous_id.as_deref()];
    if st.auth.suppressed(id.site_id, &ids) {
        metrics::counter!("ingest_events_suppressed_total").increment(1);
        return Ok(api::success());
    }
    within_profile_caps(st, &id).await?;
    let record = identify_record(&id, &who, client, rivulet_common::epoch::now_ms())?;
    if let Err(e) = st.sink.publish(&record, deadline).await {
        tracing::warn!(error = %e, "identify not acknowledged by Kafka");
        return Err(IngestError::Unavailable(
            "the identify call could not be stored",
        ));
    }
    Ok(api::success())
}

/// 400 when the call would give its user more traits or anonymous ids than the caps
/// allow (`profile_caps`); nothing of it is published then.
async fn within_profile_caps<S: Backends>(
    st: &AppState<S>,
    id: &Identify<'_>,
) -> Result<(), IngestError> {
    let names = id
        .traits
        .as_deref()
        .map(profile_caps::trait_names)
        .unwrap_or_default();
    let anonymous_id = id.anonymous_id.as_deref().filter(|a| !a.is_empty());
    let verdict = st
        .caps
        .admit(ProfileWrite {
            site_id: id.site_id,
            user_id: &id.user_id,
            trait_names: &names,
            anonymous_id,
        })
        .await;
    let (field, message) = match verdict {
        CapVerdict::Admitted => return Ok(()),
        CapVerdict::TooManyTraits(cap) => (
            "traits",
            format!(
                "this user would have more than {cap} traits, the most a user may have (MAX_TRAITS_PER_USER); set fewer new traits or remove some (null)"
            ),
        ),
        CapVerdict::TooManyAnonymousIds(cap) => (
            "anonymous_id",
            format!(
                "this user would have more than {cap} anonymous ids, the most a user may have (MAX_ANONYMOUS_IDS_PER_USER)"
            ),
        ),
    };
    metrics::counter!("ingest_profile_caps_refused_total", "cap" => field).increment(1);
    let mut details = ValidationErrors::default();
    details.field_errors.insert(field.into(), vec![message]);
    Err(IngestError::InvalidPayload(details))
}
