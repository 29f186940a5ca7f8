//! `POST /api/track/batch`: the envelope and each event checked on their own, the valid
//! ones admitted and published together, and one answer per event.

use super::admission::{admit, credential, require_key};
use super::client::Client;
use super::message::{publish_all, raw_event, stored_event_id};
use super::{answer_deadline, read_body, suppressed, EVENTS_ACCEPTED};
use crate::api::{self, BatchItem, BatchResponse, IngestError};
use crate::event::errors::ValidationErrors;
use crate::event::fields::{self, EventFields, Events, Field, Item};
use crate::event::validate::validate_event;
use crate::event::TrackEvent;
use crate::request_body::RequestBody;
use crate::state::{AppState, Backends};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use rivulet_common::event::RawEvent;
use std::borrow::Cow;

pub(super) async fn track_many<S: Backends>(
    st: &AppState<S>,
    client: &Client<'_>,
    headers: &HeaderMap,
    body: impl RequestBody,
    cors: &mut Option<HeaderValue>,
) -> Result<Response, IngestError> {
    let body = read_body(st, headers, body, st.cfg.max_batch_bytes).await?;
    let deadline = answer_deadline(st);
    let batch = fields::parse_batch(&body, st.cfg.max_batch_events)?;
    let events = event_list(batch.events, st.cfg.max_batch_events)?;
    // The envelope carries site_id, api_key and sent_at; its site_id and sent_at are
    // checked as an event's. Its sent_at is each event's that has none of its own.
    let envelope = EventFields {
        site_id: batch.site_id,
        sent_at: batch.sent_at,
        ..EventFields::default()
    };
    let (envelope, credential) = require_key(
        credential(batch.api_key.as_ref(), client),
        validate_event(envelope),
    )?;
    let site_id = envelope.site_id;
    let checked: Vec<Result<TrackEvent<'_>, ValidationErrors>> = events
        .into_iter()
        .map(|item| {
            batch_event(item, site_id).map(|mut ev| {
                ev.sent_at_ms = ev.sent_at_ms.or(envelope.sent_at_ms);
                ev
            })
        })
        .collect();
    let valid = checked.iter().filter(|c| c.is_ok()).count() as u32;
    let who = admit(st, credential, site_id, valid, client, cors).await?;
    let received_at = rivulet_common::epoch::now_ms();
    let mut results: Vec<Option<BatchItem>> = Vec::with_capacity(checked.len());
    let mut pending = Vec::new();
    // Suppressed events: answered accepted, never published.
    let mut dropped = 0;
    for (i, event) in checked.into_iter().enumerate() {
        match event {
            Ok(ev) if suppressed(st, &ev) => {
                dropped += 1;
                results.push(Some(BatchItem::Accepted {
                    event_id: stored_event_id(ev.event_id, site_id, &who).to_string(),
                }))
            }
            Ok(ev) => {
                pending.push((i, raw_event(ev, &who, client, received_at)));
                results.push(None);
            }
            Err(details) => results.push(Some(BatchItem::Invalid {
                error: "Invalid payload",
                details,
            })),
        }
    }
    let (places, raws): (Vec<usize>, Vec<RawEvent<Cow<str>>>) = pending.into_iter().unzip();
    let outcomes = publish_all(&*st.sink, &raws, deadline).await;
    let (mut accepted, mut failed) = (dropped, 0);
    for ((i, raw), outcome) in places.into_iter().zip(raws).zip(outcomes) {
        let event_id = raw.event_id.to_string();
        results[i] = Some(match outcome {
            Ok(()) => {
                accepted += 1;
                BatchItem::Accepted { event_id }
            }
            Err(error) => {
                failed += 1;
                BatchItem::Failed {
                    event_id,
                    error: error.to_string(),
                }
            }
        });
    }
    EVENTS_ACCEPTED.increment((accepted - dropped) as u64);
    Ok(answer(
        results.into_iter().flatten().collect(),
        accepted,
        failed,
    ))
}

/// The batch's events, or a 400 when `events` is not a list of at most `max` of them.
fn event_list(events: Option<Events<'_>>, max: usize) -> Result<Vec<Item<'_>>, IngestError> {
    let msg = match events {
        Some(Events::List(events)) => return Ok(events),
        Some(Events::TooMany) => format!("events must hold at most {max} events"),
        _ => "events must be an array of event objects".to_string(),
    };
    let mut details = ValidationErrors::default();
    details.field_errors.insert("events".into(), vec![msg]);
    Err(IngestError::InvalidPayload(details))
}

/// The answer, one result per event in order: 200 when every valid event is in Kafka;
/// 503 with `Retry-After` when any could not be stored, so that the client retries those
/// (with the same event_id).
fn answer(results: Vec<BatchItem>, accepted: usize, failed: usize) -> Response {
    let rejected = results.len() - accepted - failed;
    let body = BatchResponse {
        // Every event is in Kafka; a caller that checks only this learns of rejections too.
        success: failed == 0 && rejected == 0,
        accepted,
        rejected,
        failed,
        results,
    };
    if failed > 0 {
        let mut resp = (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
        resp.headers_mut().insert(
            header::RETRY_AFTER,
            api::RETRY_AFTER_UNAVAILABLE.parse().expect("header"),
        );
        return resp;
    }
    Json(body).into_response()
}

/// One event of a batch: it inherits the envelope's site_id; its own, if any, must match.
fn batch_event(item: Item<'_>, site_id: u32) -> Result<TrackEvent<'_>, ValidationErrors> {
    let Item::Event(mut fields) = item else {
        let mut e = ValidationErrors::default();
        e.form_errors
            .push("each event must be a JSON object".into());
        return Err(e);
    };
    let own = fields.site_id.replace(Field::Unsigned(u64::from(site_id)));
    let ev = validate_event(fields)?;
    let matches = match own {
        None | Some(Field::Null) => true,
        Some(Field::Unsigned(n)) => n == u64::from(site_id),
        Some(Field::Str(s)) => s == site_id.to_string(),
        Some(_) => false,
    };
    if !matches {
        let mut e = ValidationErrors::default();
        e.field_errors.insert(
            "site_id".into(),
            vec!["an event's site_id must match the batch's site_id".into()],
        );
        return Err(e);
    }
    Ok(ev)
}
