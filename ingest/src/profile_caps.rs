//! Caps on what identify calls may add to one person: `MAX_TRAITS_PER_USER` distinct
//! trait names and `MAX_ANONYMOUS_IDS_PER_USER` anonymous ids (1,000 each by default).
//! An identify call that would go past either is answered 400 and nothing of it is
//! published, so no caller — keyed or keyless — can grow a profile (and the erasure
//! ledger rows and dashboard pages that follow from it) without bound.
//!
//! Counted in Redis, shared by every ingest: per user, a set of 64-bit hashes of the trait
//! names and one of the anonymous ids (`cache::profile_traits`), checked and added in one
//! Lua script, so that concurrent calls cannot both slip under the cap. The sets never
//! hold a name or an id, only hashes, under a hash of the user id; erasing the user
//! deletes them. Redis holds no data of record: when it is unreachable the cap is not
//! checked (the call is published, and `ingest_profile_caps_unchecked_total` counts it),
//! and a lost Redis starts the counts again (docs/security.md).

use crate::redis_link::RedisLink;
use rivulet_common::cache;
use std::future::Future;
use std::sync::Arc;

/// The caps (`MAX_TRAITS_PER_USER`, `MAX_ANONYMOUS_IDS_PER_USER`); 0 turns one off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProfileLimits {
    pub traits: u32,
    pub anonymous_ids: u32,
}

impl Default for ProfileLimits {
    fn default() -> Self {
        ProfileLimits {
            traits: 1_000,
            anonymous_ids: 1_000,
        }
    }
}

/// What an identify call would add to its user's profile.
#[derive(Clone, Copy, Debug)]
pub struct ProfileWrite<'a> {
    pub site_id: u32,
    pub user_id: &'a str,
    /// The names of the traits it sets or removes.
    pub trait_names: &'a [String],
    pub anonymous_id: Option<&'a str>,
}

/// The caps' answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapVerdict {
    /// Within the caps (and counted), or not checked because Redis could not answer.
    Admitted,
    /// The user would have more than this many traits.
    TooManyTraits(u32),
    /// The user would have more than this many anonymous ids.
    TooManyAnonymousIds(u32),
}

/// How identify calls are held to the caps: Redis in the service, a map in memory in
/// in-process tests (`rivulet_ingest::testing`).
pub trait ProfileCaps: Send + Sync + 'static {
    fn limits(&self) -> ProfileLimits;
    /// Checks the write against the caps and, when it is within them, counts it.
    fn admit(&self, write: ProfileWrite<'_>) -> impl Future<Output = CapVerdict> + Send;
}

/// KEYS: the user's trait set, their anonymous-id set. ARGV: the trait cap, the anonymous
/// id cap (0: none), the number of trait hashes, the trait hashes, then the anonymous
/// id's hash if any. Answers 0 (counted), 1 (too many traits), 2 (too many anonymous
/// ids). Nothing is added unless both fit.
const CHECK_AND_ADD: &str = r"
local trait_cap = tonumber(ARGV[1])
local anon_cap = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
if trait_cap > 0 and n > 0 then
  local new = 0
  for i = 4, 3 + n do
    if redis.call('SISMEMBER', KEYS[1], ARGV[i]) == 0 then new = new + 1 end
  end
  if new > 0 and redis.call('SCARD', KEYS[1]) + new > trait_cap then return 1 end
end
local anon = ARGV[4 + n]
if anon and anon_cap > 0 and redis.call('SISMEMBER', KEYS[2], anon) == 0
   and redis.call('SCARD', KEYS[2]) + 1 > anon_cap then
  return 2
end
if n > 0 then redis.call('SADD', KEYS[1], unpack(ARGV, 4, 3 + n)) end
if anon then redis.call('SADD', KEYS[2], anon) end
return 0
";

/// The caps counted in Redis.
pub struct RedisProfileCaps {
    limits: ProfileLimits,
    redis: Arc<RedisLink>,
    script: redis::Script,
}

impl RedisProfileCaps {
    pub fn new(limits: ProfileLimits, redis: Arc<RedisLink>) -> Self {
        RedisProfileCaps {
            limits,
            redis,
            script: redis::Script::new(CHECK_AND_ADD),
        }
    }

    async fn check_in_redis(&self, write: ProfileWrite<'_>) -> Option<CapVerdict> {
        let mut conn = self.redis.conn()?;
        let mut call = self.script.prepare_invoke();
        call.key(cache::profile_traits(write.site_id, write.user_id))
            .key(cache::profile_anonymous_ids(write.site_id, write.user_id))
            .arg(self.limits.traits)
            .arg(self.limits.anonymous_ids)
            .arg(write.trait_names.len());
        for name in write.trait_names {
            call.arg(cache::profile_member(name));
        }
        if let Some(anon) = write.anonymous_id {
            call.arg(cache::profile_member(anon));
        }
        let r: Result<i64, _> = call.invoke_async(&mut conn).await;
        self.redis.record(&r);
        Some(match r.ok()? {
            1 => CapVerdict::TooManyTraits(self.limits.traits),
            2 => CapVerdict::TooManyAnonymousIds(self.limits.anonymous_ids),
            _ => CapVerdict::Admitted,
        })
    }
}

impl ProfileCaps for RedisProfileCaps {
    fn limits(&self) -> ProfileLimits {
        self.limits
    }

    async fn admit(&self, write: ProfileWrite<'_>) -> CapVerdict {
        let nothing_to_count = write.trait_names.is_empty() && write.anonymous_id.is_none();
        let off = self.limits.traits == 0 && self.limits.anonymous_ids == 0;
        if nothing_to_count || off {
            return CapVerdict::Admitted;
        }
        match self.check_in_redis(write).await {
            Some(verdict) => verdict,
            None => {
                metrics::counter!("ingest_profile_caps_unchecked_total").increment(1);
                CapVerdict::Admitted
            }
        }
    }
}

/// The trait names of an identify call's `traits` (a JSON object ingest has validated,
/// at most `TRAITS_LIMIT` characters).
pub fn trait_names(traits_json: &str) -> Vec<String> {
    serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(traits_json)
        .map(|m| m.into_iter().map(|(k, _)| k).collect())
        .unwrap_or_default()
}
