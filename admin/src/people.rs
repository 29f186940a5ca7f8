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
    /// 1 when a keyed write set it (its value is then the keyed one).
    keyed: u8,
}

#[derive(Row, Deserialize)]
struct Counts {
    events: u64,
    anonymous_events: u64,
    first_seen: u32,
    last_seen: u32,
    sessions: u64,
}

/// One of a person's latest events.
#[derive(Row, Deserialize)]
pub struct Recent {
    pub timestamp: u32,
    #[serde(rename = "type")]
    pub event_type: String,
    pub event_name: String,
    pub pathname: String,
    pub anonymous_id: String,
    pub country: String,
    pub browser: String,
    pub device_type: String,
}

/// A person as Rivulet knows them (`users show`, the dashboard's user page).
pub struct Profile {
    pub site_id: u32,
    pub user_id: String,
    /// Each trait's latest value, as JSON, by name (removed ones left out).
    pub traits: Map<String, Value>,
    /// When a trait was last set or removed (epoch ms, server time), 0 if never.
    pub traits_updated_ms: u64,
    /// The traits only keyless calls (the browser path) set: what any visitor of the
    /// site's pages could have sent.
    pub keyless_traits: Vec<String>,
    /// Whether the profile holds more traits or anonymous ids than a query returns
    /// (`queries::PROFILE_LIST_LIMIT`).
    pub truncated: bool,
    /// The anonymous ids this user owns (identify).
    pub aliases: Vec<String>,
    /// Epoch seconds; `None` without events.
    pub first_seen: Option<u32>,
    pub last_seen: Option<u32>,
    pub events: u64,
    /// Those sent under an anonymous id (before identify).
    pub events_before_identify: u64,
    pub sessions: u64,
    /// The 20 latest, newest first.
    pub recent_events: Vec<Recent>,
}

fn ch(e: clickhouse::error::Error) -> AdminError {
    AdminError::Common(e.into())
}

/// The person `user_id` of `site_id`, as JSON; NotFound when Rivulet knows nothing of them.
pub async fn show(db: &Db, site_id: u32, user_id: &str) -> Result<Value, AdminError> {
    Ok(profile(db, site_id, user_id).await?.to_json())
}

/// The person `user_id` of `site_id`; NotFound when Rivulet knows nothing of them.
pub async fn profile(db: &Db, site_id: u32, user_id: &str) -> Result<Profile, AdminError> {
    let traits: Vec<TraitValue> = db
        .client
        .query(queries::TRAITS_OF_USER)
        .bind(site_id)
        .bind(user_id)
        .fetch_all()
        .await
        .map_err(ch)?;
    let mut aliases: Vec<String> = db
        .client
        .query(queries::ALIASES_OF_USER)
        .bind(site_id)
        .bind(site_id)
        .bind(user_id)
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
        .bind(site_id)
        .bind(user_id)
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
        .bind(site_id)
        .bind(user_id)
        .bind(user_id)
        .fetch_all()
        .await
        .map_err(ch)?;
    let limit = queries::PROFILE_LIST_LIMIT;
    let truncated = traits.len() >= limit || aliases.len() >= limit;
    aliases.truncate(limit - 1);
    if traits.is_empty() && aliases.is_empty() && counts.events == 0 {
        return Err(AdminError::NotFound(format!(
            "site {site_id} has no user {user_id:?}: no event, identify or trait"
        )));
    }
    let mut profile = Map::new();
    let mut updated = 0;
    let mut keyless_traits = Vec::new();
    for t in traits.iter().take(limit - 1) {
        updated = updated.max(t.updated_ms);
        if t.keyed == 0 && t.is_removed == 0 {
            keyless_traits.push(t.name.clone());
        }
        if t.is_removed == 0 {
            let value = serde_json::from_str(&t.latest).unwrap_or(Value::String(t.latest.clone()));
            profile.insert(t.name.clone(), value);
        }
    }
    let seen = |secs: u32| (counts.events > 0).then_some(secs);
    Ok(Profile {
        site_id,
        user_id: user_id.to_string(),
        traits: profile,
        traits_updated_ms: updated,
        keyless_traits,
        truncated,
        aliases,
        first_seen: seen(counts.first_seen),
        last_seen: seen(counts.last_seen),
        events: counts.events,
        events_before_identify: counts.anonymous_events,
        sessions: counts.sessions,
        recent_events: recent,
    })
}

impl Profile {
    /// The CLI's and the admin API's shape.
    pub fn to_json(&self) -> Value {
        let time = |secs: Option<u32>| secs.map(rfc3339).unwrap_or(Value::Null);
        json!({
            "site_id": self.site_id,
            "user_id": self.user_id,
            "traits": self.traits,
            "traits_updated_at": if self.traits_updated_ms > 0 { rfc3339((self.traits_updated_ms / 1000) as u32) } else { Value::Null },
            "keyless_traits": self.keyless_traits,
            "truncated": self.truncated,
            "aliases": self.aliases,
            "first_seen": time(self.first_seen),
            "last_seen": time(self.last_seen),
            "events": self.events,
            "events_before_identify": self.events_before_identify,
            "sessions": self.sessions,
            "recent_events": self.recent_events.iter().map(|r| json!({
                "timestamp": rfc3339(r.timestamp), "type": r.event_type, "event_name": r.event_name,
                "pathname": r.pathname, "anonymous_id": r.anonymous_id, "country": r.country,
                "browser": r.browser, "device_type": r.device_type,
            })).collect::<Vec<_>>(),
        })
    }
}
