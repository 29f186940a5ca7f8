//! JSON shapes printed by the CLI (and served by the dashboard's API).

use rivulet_common::registry::{KeyRecord, Site};
use serde_json::{json, Value};

pub fn rfc3339(epoch_secs: u32) -> Value {
    time::OffsetDateTime::from_unix_timestamp(epoch_secs.into())
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .map(Value::String)
        .unwrap_or(Value::Null)
}

pub fn site(s: &Site) -> Value {
    json!({
        "site_id": s.site_id,
        "domain": s.domain,
        "name": s.name,
        "created_at": rfc3339(s.created_at),
        "deleted": s.deleted == 1,
    })
}

/// Never includes the secret: only the id, the display prefix and dates.
pub fn key(k: &KeyRecord) -> Value {
    json!({
        "key_id": k.key_id,
        "key_prefix": k.key_prefix,
        "site_id": k.site_id,
        "created_at": rfc3339(k.created_at),
        "revoked": k.revoked == 1,
        "revoked_at": if k.revoked == 1 { rfc3339(k.revoked_at) } else { Value::Null },
    })
}
