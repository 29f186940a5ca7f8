//! `rivulet-admin users show`: a person as Rivulet knows them — their traits, the
//! anonymous ids they claimed (identify), when they were first and last seen, and their
//! events counted under both their user id and those anonymous ids (docs/design.md,
//! "Identity").

use crate::error::AdminError;
use crate::output::rfc3339;
use clickhouse::Row;
use rivulet_common::ch::Db;
use rivulet_common::schema::queries;
use serde::Deserialize;
use serde_json::{json, Map, Value};

#[derive(Row, Deserialize)]
struct TraitValue {
    name: String,
    latest: String,
    is_removed: u8,
    updated_ms: u64,
}

#[derive(Row, Deserialize)]
struct Counts {
    events: u64,
    anonymous_events: u64,
    first_seen: u32,
    last_seen: u32,
    sessions: u64,
}

#[derive(Row, Deserialize)]
struct Recent {
    timestamp: u32,
    #[serde(rename = "type")]
    event_type: String,
    event_name: String,
    pathname: String,
    anonymous_id: String,
    country: String,
    browser: String,
    device_type: String,
}

fn ch(e: clickhouse::error::Error) -> AdminError {
    AdminError::Common(e.into())
}

/// The person `user_id` of `site_id`, as JSON; NotFound when Rivulet knows nothing of them.
pub async fn show(db: &Db, site_id: u32, user_id: &str) -> Result<Value, AdminError> {
    let traits: Vec<TraitValue> = db
        .client
        .query(queries::TRAITS_OF_USER)
        .bind(site_id)
        .bind(user_id)
        .fetch_all()
        .await
        .map_err(ch)?;
    let aliases: Vec<String> = db
        .client
        .query(queries::ALIASES_OF_USER)
        .bind(site_id)
        .bind(user_id)
        .fetch_all()
        .await
        .map_err(ch)?;
    let counts: Counts = db
        .client
        .query(queries::PERSON_EVENT_COUNTS)
        .bind(user_id)
        .bind(site_id)
        .bind(user_id)
        .bind(site_id)
        .bind(user_id)
        .fetch_one()
        .await
        .map_err(ch)?;
    let recent: Vec<Recent> = db
        .client
        .query(queries::PERSON_RECENT_EVENTS)
        .bind(site_id)
        .bind(user_id)
        .bind(site_id)
        .bind(user_id)
        .fetch_all()
        .await
        .map_err(ch)?;
    if traits.is_empty() && aliases.is_empty() && counts.events == 0 {
        return Err(AdminError::NotFound(format!(
            "site {site_id} has no user {user_id:?}: no event, identify or trait"
        )));
    }
    let mut profile = Map::new();
    let mut updated = 0;
    for t in &traits {
        updated = updated.max(t.updated_ms);
        if t.is_removed == 0 {
            let value = serde_json::from_str(&t.latest).unwrap_or(Value::String(t.latest.clone()));
            profile.insert(t.name.clone(), value);
        }
    }
    let seen = |secs: u32| {
        if counts.events > 0 {
            rfc3339(secs)
        } else {
            Value::Null
        }
    };
    Ok(json!({
        "site_id": site_id,
        "user_id": user_id,
        "traits": profile,
        "traits_updated_at": if updated > 0 { rfc3339((updated / 1000) as u32) } else { Value::Null },
        "aliases": aliases,
        "first_seen": seen(counts.first_seen),
        "last_seen": seen(counts.last_seen),
        "events": counts.events,
        "events_before_identify": counts.anonymous_events,
        "sessions": counts.sessions,
        "recent_events": recent.iter().map(|r| json!({
            "timestamp": rfc3339(r.timestamp), "type": r.event_type, "event_name": r.event_name,
            "pathname": r.pathname, "anonymous_id": r.anonymous_id, "country": r.country,
            "browser": r.browser, "device_type": r.device_type,
        })).collect::<Vec<_>>(),
    }))
}
