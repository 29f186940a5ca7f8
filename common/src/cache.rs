//! Names of what Rivulet keeps in Redis, in one place so that ingest and admin agree.
//! Keys are cached under their SHA-256 only.

use crate::keys::KeyHash;

/// Channel on which admin announces revocations and deletions; every ingest subscribes.
/// Payload: `key:<sha256 hex>` or `site:<site id>`.
pub const INVALIDATION_CHANNEL: &str = "rivulet:invalidate";

pub fn key_entry(hash: &KeyHash) -> String {
    format!("rivulet:key:{}", hash.0)
}

pub fn site_entry(site_id: u32) -> String {
    format!("rivulet:site:{site_id}")
}

pub fn key_invalidation(hash: &KeyHash) -> String {
    format!("key:{}", hash.0)
}

pub fn site_invalidation(site_id: u32) -> String {
    format!("site:{site_id}")
}

/// Per-key counter of one fixed one-second window.
pub fn rate_limit_counter(key_id: &str, epoch_second: u64) -> String {
    format!("rivulet:rl:{key_id}:{epoch_second}")
}
