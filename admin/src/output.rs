//! JSON shapes printed by the CLI (and served by the dashboard's API).

use rivulet_common::keys::ApiKey;
use rivulet_common::registry::{KeyRecord, Site};
use serde_json::{json, Value};

pub fn rfc3339(epoch_secs: u32) -> Value {
    rivulet_common::epoch::rfc3339(epoch_secs.into()).map_or(Value::Null, Value::String)
}

pub fn site(s: &Site) -> Value {
    json!({
        "site_id": s.site_id,
        "domain": s.domain,
        "name": s.name,
        "created_at": rfc3339(s.created_at),
        "deleted": s.deleted == 1,
        "domains": s.domains(),
        "allow_subdomains": s.allow_subdomains == 1,
        "retention_days": s.retention_days,
        "browser_path": s.browser_path(),
        "browser_identify": s.browser_identify == 1,
        "timezone": s.time_zone(),
    })
}

/// An erasure request's receipt.
pub fn receipt(r: &rivulet_common::privacy::Receipt) -> Value {
    let ids: Value = serde_json::from_str(&r.ids).unwrap_or(Value::Null);
    json!({
        "request_id": r.request_id,
        "site_id": r.site_id,
        "subject": {"kind": r.subject_kind, "id": r.subject},
        "ids": ids,
        "suppress": r.suppress == 1,
        "requested_at": rfc3339((r.requested_at_ms / 1000) as u32),
        "state": r.state,
        "reason": if r.reason.is_empty() { Value::Null } else { Value::String(r.reason.clone()) },
        "rows_removed": r.rows_removed,
        "updated_at": rfc3339((r.updated_at_ms / 1000) as u32),
    })
}

pub const KEY_WARNING: &str = "This key is shown once. Keep it in an environment variable on your server, never in client-side code.";

/// Never includes the secret: only the id, the display prefix and dates.
pub fn key(k: &KeyRecord) -> Value {
    key_used(k, None)
}

/// `key` with `last_used_at`: when an ingest last accepted a request with it (to the
/// minute; null when never used, or when Redis could not be asked).
pub fn key_used(k: &KeyRecord, last_used: Option<u32>) -> Value {
    json!({
        "key_id": k.key_id,
        "key_prefix": k.key_prefix,
        "site_id": k.site_id,
        "created_at": rfc3339(k.created_at),
        "last_used_at": last_used.map(rfc3339).unwrap_or(Value::Null),
        "revoked": k.revoked == 1,
        "revoked_at": if k.revoked == 1 { rfc3339(k.revoked_at) } else { Value::Null },
        "scopes": k.scope_names(),
    })
}

/// A key just created: the record plus the secret, the one time it is shown.
pub fn new_key(k: &KeyRecord, secret: &ApiKey) -> Value {
    let mut v = key(k);
    v["api_key"] = Value::String(secret.reveal().to_string());
    v["warning"] = Value::String(KEY_WARNING.into());
    v
}
