//! Names of what Rivulet keeps in Redis, in one place so that ingest and admin agree.
//! Keys are cached under their SHA-256 only.

use crate::keys::KeyHash;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Channel on which admin announces revocations and deletions; every ingest subscribes.
/// Payload: `key:<sha256 hex>` or `site:<site id>`.
pub const INVALIDATION_CHANNEL: &str = "rivulet:invalidate";

pub fn key_entry(hash: &KeyHash) -> String {
    format!("rivulet:key:{}", hash.0)
}

/// Hex digits of the MAC a cached key entry carries (128 bits).
const ENTRY_MAC_HEX: usize = 32;

fn entry_mac(secret: &[u8], hash: &KeyHash, value: &str) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(b"rivulet key cache entry\0");
    mac.update(hash.0.as_bytes());
    mac.update(b"\0");
    mac.update(value.as_bytes());
    mac
}

/// A key entry's value as stored in Redis: the value, `:`, and a MAC of the value and the
/// key's hash under a server secret. Whoever can write to Redis but does not know the
/// secret cannot make an entry that ingest believes (docs/security.md).
pub fn signed_entry(secret: &[u8], hash: &KeyHash, value: &str) -> String {
    let tag = entry_mac(secret, hash, value).finalize().into_bytes();
    format!("{value}:{}", &hex::encode(tag)[..ENTRY_MAC_HEX])
}

/// The value of an entry read from Redis if its MAC is right for this key's hash, else
/// `None` (a forged, altered, moved or old-format entry).
pub fn verified_entry<'a>(secret: &[u8], hash: &KeyHash, entry: &'a str) -> Option<&'a str> {
    let (value, tag) = entry.rsplit_once(':')?;
    let mut bytes = [0u8; ENTRY_MAC_HEX / 2];
    hex::decode_to_slice(tag, &mut bytes).ok()?;
    entry_mac(secret, hash, value)
        .verify_truncated_left(&bytes)
        .ok()
        .map(|()| value)
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

/// A key's rate-limit buckets (a hash: request tokens, event tokens, last update).
pub fn rate_limit_buckets(key_id: &str) -> String {
    format!("rivulet:rl:{key_id}")
}

/// When a key was last accepted (epoch seconds). Each ingest refreshes it at most once per
/// [`LAST_USED_RESOLUTION_SECS`] per key, so it costs no Redis call on most requests.
pub fn key_last_used(key_id: &str) -> String {
    format!("rivulet:key_last_used:{key_id}")
}

pub const LAST_USED_RESOLUTION_SECS: u64 = 60;

/// What one user's identify calls have added to their profile, for ingest's caps
/// (`MAX_TRAITS_PER_USER`, `MAX_ANONYMOUS_IDS_PER_USER`): two sets of 64-bit hashes, of
/// the trait names and of the anonymous ids. Named by a hash of the user id (Redis never
/// holds the id itself); erasing the user deletes them (`profile_entries`).
pub fn profile_traits(site_id: u32, user_id: &str) -> String {
    format!("rivulet:profile:{site_id}:{}:t", user_digest(user_id))
}

/// See [`profile_traits`].
pub fn profile_anonymous_ids(site_id: u32, user_id: &str) -> String {
    format!("rivulet:profile:{site_id}:{}:a", user_digest(user_id))
}

/// Both of a user's profile sets, for erasure.
pub fn profile_entries(site_id: u32, user_id: &str) -> [String; 2] {
    [
        profile_traits(site_id, user_id),
        profile_anonymous_ids(site_id, user_id),
    ]
}

fn user_digest(user_id: &str) -> String {
    use sha2::Digest;
    hex::encode(&Sha256::digest(user_id.as_bytes())[..16])
}

/// A member of a profile set: the first 64 bits of a name's SHA-256, as a decimal
/// integer, which Redis keeps in its compact integer-set encoding.
pub fn profile_member(name: &str) -> i64 {
    use sha2::Digest;
    let d = Sha256::digest(name.as_bytes());
    i64::from_be_bytes(d[..8].try_into().expect("8 bytes"))
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_verify_only_under_their_secret_and_key() {
        let (h1, h2) = (KeyHash("aa".repeat(32)), KeyHash("bb".repeat(32)));
        let e = signed_entry(b"secret", &h1, "k:7:key_0011223344556677");
        assert_eq!(
            verified_entry(b"secret", &h1, &e),
            Some("k:7:key_0011223344556677")
        );
        assert_eq!(verified_entry(b"other", &h1, &e), None);
        assert_eq!(
            verified_entry(b"secret", &h2, &e),
            None,
            "moved to another key"
        );
        let forged = e.replace("k:7:", "k:8:");
        assert_eq!(verified_entry(b"secret", &h1, &forged), None);
        assert_eq!(
            verified_entry(b"secret", &h1, "k:7:key_0011223344556677"),
            None
        );
        assert_eq!(verified_entry(b"secret", &h1, "-"), None);
        let neg = signed_entry(b"secret", &h1, "-");
        assert_eq!(verified_entry(b"secret", &h1, &neg), Some("-"));
    }
}
