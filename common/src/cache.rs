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

/// When a key was last accepted (epoch seconds). Each ingest refreshes it at most once per
/// [`LAST_USED_RESOLUTION_SECS`] per key, so it costs no Redis call on most requests.
pub fn key_last_used(key_id: &str) -> String {
    format!("rivulet:key_last_used:{key_id}")
}

pub const LAST_USED_RESOLUTION_SECS: u64 = 60;

/// Counter from which site ids are allocated.
pub const SITE_ID_SEQUENCE: &str = "rivulet:site_id_seq";

/// Raises the counter to at least `floor` (the registry's current maximum, in case Redis
/// lost the counter) and increments it, atomically: concurrent creators get distinct ids.
#[cfg(feature = "redis")]
const NEXT_SITE_ID: &str = r"
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local floor = tonumber(ARGV[1])
if cur < floor then redis.call('SET', KEYS[1], floor) end
return redis.call('INCR', KEYS[1])";

#[cfg(feature = "redis")]
pub async fn next_site_id<C: redis::aio::ConnectionLike>(
    conn: &mut C,
    floor: u32,
) -> redis::RedisResult<u32> {
    redis::Script::new(NEXT_SITE_ID)
        .key(SITE_ID_SEQUENCE)
        .arg(floor)
        .invoke_async(conn)
        .await
}
