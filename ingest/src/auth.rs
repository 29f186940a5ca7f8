//! API-key authentication through a cache chain (docs/design.md, "Keys and sites"):
//! in-process L1 (seconds) → Redis (minutes; negative answers briefly) → the ClickHouse
//! registry on a miss, with one registry lookup per key at a time and at most
//! `REGISTRY_MAX_CONCURRENT_LOOKUPS` at once. Sites come from the in-memory
//! [`SiteDirectory`], never from a query per request.
//!
//! Unknown keys are remembered apart from known ones (so a flood of random keys cannot
//! push known keys out of L1), in Redis too, for `KEY_CACHE_NEGATIVE_TTL_SECS`. Every
//! entry in Redis carries a MAC under a secret kept in the registry
//! (`cache::signed_entry`): an entry without a valid one is ignored, so whoever can write
//! to Redis cannot mint a key. Until the secret is read, Redis is skipped.
//!
//! Revocations arrive on a Redis channel and drop the L1 entry at once. An invalidation
//! epoch guards the race where a lookup that read the registry *before* a revocation
//! would otherwise cache the stale answer *after* it. If both Redis and the registry
//! fail, a known key keeps working from its (expired) L1 entry.

use crate::api::IngestError;
use crate::redis_link::RedisLink;
use crate::sites::{NotLoaded, SiteDirectory, SiteInfo};
use futures::StreamExt;
use metrics::Counter;
use redis::AsyncCommands;
use rivulet_common::cache;
use rivulet_common::keys::{digest_if_well_formed, KeyDigest, KeyHash};
use rivulet_common::registry::Registry;
use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

const L1_MAX_ENTRIES: usize = 100_000;

/// How long a key lookup waits for a free registry slot before answering 503.
const REGISTRY_SLOT_WAIT: Duration = Duration::from_secs(2);

#[derive(Clone, Debug, PartialEq)]
pub struct KeyInfo {
    /// Shared: every request of the key gets a copy of its info.
    pub key_id: Arc<str>,
    pub site_id: u32,
    /// Whether the key may send events (scope `ingest:write`); a key that may only read
    /// statistics is answered 403 here.
    pub ingest: bool,
}

impl KeyInfo {
    /// Whether the key may send events for `site_id`: its own site only, and only with
    /// the ingest scope. What `cached_good` asks of a key it holds, in [`Auth`] and in
    /// the in-process tests' double alike: one rule, so the tests exercise the service's.
    pub fn may_send_to(&self, site_id: u32) -> bool {
        self.site_id == site_id && self.ingest
    }
}

#[derive(Clone, Copy)]
pub struct AuthTtls {
    pub l1: Duration,
    pub redis_secs: u64,
    pub negative_secs: u64,
}

/// What the request path asks of keys and sites (`handlers`): [`Auth`] in the service;
/// a double in in-process tests (`rivulet_ingest::testing::Keys`).
pub trait KeyCheck: Send + Sync + 'static {
    /// The key's info if it may send for `site_id`: 401 for a malformed, unknown or
    /// revoked key or a key of another site; 404 for an unknown site; 503 when nothing
    /// can answer.
    fn authorize(
        &self,
        api_key: Option<&str>,
        site_id: u32,
    ) -> impl Future<Output = Result<KeyInfo, IngestError>> + Send;
    /// Whether `api_key` will cost no registry query of its own (held as good, or its
    /// lookup already under way).
    fn knows(&self, api_key: Option<&str>) -> bool;
    /// Whether `api_key` is a good key by what this process or Redis holds, without a
    /// registry query: a client address past its rejection limit is still served with
    /// such a key (a shared address is not refused for its neighbours' guesses).
    fn cached_good(&self, api_key: Option<&str>, site_id: u32)
        -> impl Future<Output = bool> + Send;
    /// The site; 503 before the site directory was first read.
    fn site(&self, site_id: u32) -> Result<Option<Arc<SiteInfo>>, IngestError>;
    /// Whether an event of these ids must be dropped (an erasure suppressed one).
    fn suppressed(&self, site_id: u32, ids: &[Option<&str>]) -> bool;
    /// Whether any site accepts browser events from `host` (a CORS preflight).
    fn any_site_accepts(&self, host: &str) -> Result<bool, NotLoaded>;
}

impl KeyCheck for Auth {
    fn authorize(
        &self,
        api_key: Option<&str>,
        site_id: u32,
    ) -> impl Future<Output = Result<KeyInfo, IngestError>> + Send {
        Auth::authorize(self, api_key, site_id)
    }
    fn knows(&self, api_key: Option<&str>) -> bool {
        Auth::knows(self, api_key)
    }
    fn cached_good(
        &self,
        api_key: Option<&str>,
        site_id: u32,
    ) -> impl Future<Output = bool> + Send {
        Auth::cached_good(self, api_key, site_id)
    }
    fn site(&self, site_id: u32) -> Result<Option<Arc<SiteInfo>>, IngestError> {
        Auth::site(self, site_id)
    }
    fn suppressed(&self, site_id: u32, ids: &[Option<&str>]) -> bool {
        self.sites.suppressed(site_id, ids)
    }
    fn any_site_accepts(&self, host: &str) -> Result<bool, NotLoaded> {
        self.sites.any_site_accepts(host)
    }
}

/// `REGISTRY_MAX_CONCURRENT_LOOKUPS`: registry queries one ingest runs at once for keys
/// missing from both caches.
pub const DEFAULT_MAX_REGISTRY_LOOKUPS: usize = 4;

struct Entry<V> {
    value: V,
    expires: Instant,
}

/// A small TTL map; stale entries are kept (bounded) as a fallback when every backend fails.
struct L1<K, V>(RwLock<HashMap<K, Entry<V>>>);

impl<K: Eq + Hash + Clone, V: Clone> L1<K, V> {
    fn new() -> Self {
        L1(RwLock::new(HashMap::new()))
    }
    /// `(value, fresh)`.
    fn get(&self, k: &K) -> Option<(V, bool)> {
        let map = self.0.read().expect("L1 lock");
        map.get(k)
            .map(|e| (e.value.clone(), e.expires > Instant::now()))
    }
    fn put(&self, k: K, value: V, ttl: Duration) {
        let mut map = self.0.write().expect("L1 lock");
        if map.len() >= L1_MAX_ENTRIES {
            let now = Instant::now();
            map.retain(|_, e| e.expires > now);
            if map.len() >= L1_MAX_ENTRIES {
                map.clear();
            }
        }
        map.insert(
            k,
            Entry {
                value,
                expires: Instant::now() + ttl,
            },
        );
    }
    fn remove(&self, k: &K) {
        self.0.write().expect("L1 lock").remove(k);
    }
    fn clear(&self) {
        self.0.write().expect("L1 lock").clear();
    }
}

pub struct Auth {
    /// Known keys, by the key's digest: the hex form the registry and Redis use is made
    /// on a miss only.
    keys: L1<KeyDigest, KeyInfo>,
    /// Keys known not to exist (or revoked), apart, so that they never evict known ones.
    unknown: L1<KeyDigest, ()>,
    inflight: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    epoch: AtomicU64,
    redis: Arc<RedisLink>,
    registry: Registry,
    ttl: AuthTtls,
    /// The MAC key of Redis entries, once read from the registry.
    mac_secret: OnceLock<Vec<u8>>,
    registry_slots: Semaphore,
    pub sites: Arc<SiteDirectory>,
    /// Keys' own sites found deleted in the registry (not in the directory either).
    deleted_sites: L1<u32, ()>,
}

/// The layers of the key cache, as the `layer` label of `ingest_key_cache_total`.
#[derive(Clone, Copy)]
enum Layer {
    L1,
    Redis,
    Registry,
}

/// Counts a lookup in `ingest_key_cache_total{layer, result}` (result: hit or miss).
fn count(layer: Layer, hit: bool) {
    static COUNTERS: LazyLock<[[Counter; 2]; 3]> = LazyLock::new(|| {
        ["l1", "redis", "registry"].map(|layer| {
            ["hit", "miss"].map(
                |result| metrics::counter!("ingest_key_cache_total", "layer" => layer, "result" => result),
            )
        })
    });
    COUNTERS[layer as usize][usize::from(!hit)].increment(1);
}

impl Auth {
    pub fn new(
        redis: Arc<RedisLink>,
        registry: Registry,
        ttl: AuthTtls,
        max_registry_lookups: usize,
        sites: Arc<SiteDirectory>,
    ) -> Self {
        Auth {
            keys: L1::new(),
            unknown: L1::new(),
            inflight: Mutex::new(HashMap::new()),
            epoch: AtomicU64::new(0),
            redis,
            registry,
            ttl,
            mac_secret: OnceLock::new(),
            registry_slots: Semaphore::new(max_registry_lookups.max(1)),
            sites,
            deleted_sites: L1::new(),
        }
    }

    /// 401 for a malformed, unknown or revoked key or a key of another site; 404 for an
    /// unknown site (checked after the key); 503 when nothing can answer.
    pub async fn authorize(
        &self,
        api_key: Option<&str>,
        site_id: u32,
    ) -> Result<KeyInfo, IngestError> {
        let digest = api_key
            .and_then(digest_if_well_formed)
            .ok_or(IngestError::InvalidKey)?;
        let info = self.key(&digest).await?.ok_or(IngestError::InvalidKey)?;
        if info.site_id == site_id {
            return match self.own_site(site_id).await? {
                true if info.ingest => Ok(info),
                true => Err(IngestError::KeyCannotIngest),
                false => Err(IngestError::SiteNotFound),
            };
        }
        // Another site than the key's: only the directory is asked, never the registry,
        // however many ids a client tries.
        match self.site(site_id)? {
            None => Err(IngestError::SiteNotFound),
            Some(_) => Err(IngestError::InvalidKey),
        }
    }

    /// Whether a key's own site exists: the directory, or, for a site created since it
    /// was read, one registry lookup (the only site ever looked up), which teaches the
    /// directory the site. A deleted site is remembered as such for a while.
    async fn own_site(&self, site_id: u32) -> Result<bool, IngestError> {
        if self.site(site_id)?.is_some() {
            return Ok(true);
        }
        if let Some(((), true)) = self.deleted_sites.get(&site_id) {
            return Ok(false);
        }
        let _guard = self.single_flight(format!("s{site_id}")).await;
        if self.site(site_id)?.is_some() {
            return Ok(true);
        }
        match self.registry.get_site(site_id).await {
            Ok(Some(site)) => {
                self.sites.learn(&site);
                Ok(true)
            }
            Ok(None) => {
                let ttl = Duration::from_secs(self.ttl.negative_secs);
                self.deleted_sites.put(site_id, (), ttl);
                Ok(false)
            }
            Err(e) => {
                tracing::warn!(error = %e, "site registry lookup failed");
                Err(IngestError::Unavailable("the site registry is unreachable"))
            }
        }
    }

    /// Whether `api_key` will cost no registry query of its own: a key this process holds
    /// as good, or one whose lookup is already under way (the request waits for that
    /// lookup's answer, so many concurrent first requests of one key are one query).
    pub fn knows(&self, api_key: Option<&str>) -> bool {
        let Some(digest) = api_key.and_then(digest_if_well_formed) else {
            return false;
        };
        if matches!(self.keys.get(&digest), Some((_, true))) {
            return true;
        }
        let id = format!("k{}", KeyHash::from_digest(&digest).0);
        self.inflight
            .lock()
            .expect("inflight lock")
            .contains_key(&id)
    }

    /// Whether `api_key` may send events to `site_id`, by L1 or Redis alone (never the
    /// registry). A good key sent with another site's id is not: probing site ids with a
    /// valid key is a failure like any other.
    pub async fn cached_good(&self, api_key: Option<&str>, site_id: u32) -> bool {
        let Some(digest) = api_key.and_then(digest_if_well_formed) else {
            return false;
        };
        if let Some(found) = self.fresh(&digest) {
            return found.is_some_and(|info| info.may_send_to(site_id));
        }
        let epoch = self.epoch.load(Ordering::SeqCst);
        let hash = &KeyHash::from_digest(&digest);
        match self.redis_key(&cache::key_entry(hash), hash).await {
            Some(Some(info)) => {
                let good = info.may_send_to(site_id);
                self.cache_key_locally(&digest, Some(info), epoch);
                good
            }
            _ => false,
        }
    }

    /// The site, from the directory; 503 before the directory was first read.
    pub fn site(&self, site_id: u32) -> Result<Option<Arc<SiteInfo>>, IngestError> {
        self.sites
            .site(site_id)
            .map_err(|_| IngestError::Unavailable("the site registry is unreachable"))
    }

    async fn key(&self, digest: &KeyDigest) -> Result<Option<KeyInfo>, IngestError> {
        if let Some(v) = self.fresh(digest) {
            count(Layer::L1, true);
            return Ok(v);
        }
        count(Layer::L1, false);
        let hash = &KeyHash::from_digest(digest);
        let _guard = self.single_flight(format!("k{}", hash.0)).await;
        if let Some(v) = self.fresh(digest) {
            return Ok(v);
        }
        let epoch = self.epoch.load(Ordering::SeqCst);
        let entry = cache::key_entry(hash);
        if let Some(v) = self.redis_key(&entry, hash).await {
            count(Layer::Redis, true);
            self.cache_key_locally(digest, v.clone(), epoch);
            return Ok(v);
        }
        count(Layer::Redis, false);
        let Ok(_slot) =
            tokio::time::timeout(REGISTRY_SLOT_WAIT, self.registry_slots.acquire()).await
        else {
            metrics::counter!("ingest_registry_lookups_shed_total").increment(1);
            return self.stale_or_unavailable(digest);
        };
        let found = match self.registry.find_key_by_hash(hash).await {
            Ok(rec) => rec.filter(|r| r.revoked == 0).map(|r| KeyInfo {
                ingest: r.has_scope(rivulet_common::keys::INGEST_WRITE),
                key_id: r.key_id.into(),
                site_id: r.site_id,
            }),
            Err(e) => {
                tracing::warn!(error = %e, "key registry lookup failed");
                return self.stale_or_unavailable(digest);
            }
        };
        count(Layer::Registry, found.is_some());
        let (value, ttl) = match &found {
            Some(k) => (encode_key(k), self.ttl.redis_secs),
            None => ("-".to_string(), self.ttl.negative_secs),
        };
        if self.epoch.load(Ordering::SeqCst) == epoch {
            if let Some(secret) = self.mac_secret.get() {
                let signed = cache::signed_entry(secret, hash, &value);
                self.redis_set(&entry, &signed, ttl).await;
            }
        }
        self.cache_key_locally(digest, found.clone(), epoch);
        Ok(found)
    }

    /// The key's answer from L1 if it is fresh: `Some(None)` for a key known not to exist.
    fn fresh(&self, digest: &KeyDigest) -> Option<Option<KeyInfo>> {
        if let Some((v, true)) = self.keys.get(digest) {
            return Some(Some(v));
        }
        match self.unknown.get(digest) {
            Some(((), true)) => Some(None),
            _ => None,
        }
    }

    /// When nothing can answer: a key once known keeps working from its expired entry.
    fn stale_or_unavailable(&self, digest: &KeyDigest) -> Result<Option<KeyInfo>, IngestError> {
        match self.keys.get(digest) {
            Some((stale, _)) => Ok(Some(stale)),
            None => Err(IngestError::Unavailable("the key registry is unreachable")),
        }
    }

    /// The key's entry in Redis, if there is one with a valid MAC (`Some(None)`: cached as
    /// unknown). Nothing is read before the secret is known.
    async fn redis_key(&self, entry: &str, hash: &KeyHash) -> Option<Option<KeyInfo>> {
        let secret = self.mac_secret.get()?;
        let cached = self.redis_get(entry).await?;
        let Some(value) = cache::verified_entry(secret, hash, &cached) else {
            metrics::counter!("ingest_key_cache_entries_refused_total").increment(1);
            return None;
        };
        match value {
            "-" => Some(None),
            v => decode_key(v).map(Some),
        }
    }

    fn cache_key_locally(&self, digest: &KeyDigest, v: Option<KeyInfo>, epoch: u64) {
        // An invalidation arrived while we looked: our answer may predate it.
        if self.epoch.load(Ordering::SeqCst) != epoch {
            return;
        }
        match v {
            Some(info) => {
                self.unknown.remove(digest);
                self.keys.put(*digest, info, self.ttl.l1);
            }
            None => {
                let ttl = self.ttl.l1.min(Duration::from_secs(self.ttl.negative_secs));
                self.unknown.put(*digest, (), ttl);
            }
        }
    }

    /// Reads the MAC secret of Redis entries from the registry, retrying until it can
    /// (`rivulet-admin migrate` makes it). Until then Redis is not used for keys.
    pub async fn load_mac_secret(self: Arc<Self>) {
        let mut delay = Duration::from_millis(500);
        loop {
            match self
                .registry
                .secret(rivulet_common::schema::migrations::KEY_CACHE_MAC_SECRET)
                .await
            {
                Ok(Some(hex_secret)) => {
                    let _ = self.mac_secret.set(hex_secret.into_bytes());
                    tracing::info!("key cache secret loaded: Redis entries are used");
                    return;
                }
                Ok(None) => tracing::warn!(
                    "the registry has no key cache secret yet (run `rivulet-admin migrate`); key lookups skip Redis"
                ),
                Err(e) => tracing::warn!(error = %e, "key cache secret not read yet; key lookups skip Redis"),
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(10));
        }
    }

    /// Holds a per-key async lock so concurrent misses of one key make one lookup.
    async fn single_flight(&self, id: String) -> InflightGuard<'_> {
        let lock = {
            let mut map = self.inflight.lock().expect("inflight lock");
            map.entry(id.clone())
                .or_insert_with(|| Arc::new(tokio::sync::Mutex::new(())))
                .clone()
        };
        let guard = lock.clone().lock_owned().await;
        InflightGuard {
            auth: self,
            id,
            _guard: guard,
            lock,
        }
    }

    async fn redis_get(&self, entry: &str) -> Option<String> {
        let mut conn = self.redis.conn()?;
        let r: Result<Option<String>, _> = conn.get(entry).await;
        self.redis.record(&r);
        r.ok().flatten()
    }

    async fn redis_set(&self, entry: &str, value: &str, ttl_secs: u64) {
        if let Some(mut conn) = self.redis.conn() {
            let r: Result<(), _> = conn.set_ex(entry, value, ttl_secs.max(1)).await;
            self.redis.record(&r);
        }
    }

    /// Applies one message of the invalidation channel.
    pub fn invalidate(&self, message: &str) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        if let Some(hash) = message.strip_prefix("key:") {
            match KeyHash(hash.to_string()).digest() {
                Some(digest) => {
                    self.keys.remove(&digest);
                    self.unknown.remove(&digest);
                }
                // Not a hash we could hold: forget every key rather than guess.
                None => self.clear(),
            }
        } else if let Some(site) = message.strip_prefix("site:") {
            if let Ok(site_id) = site.parse() {
                self.deleted_sites.remove(&site_id);
            }
            self.sites.invalidate();
        } else {
            self.clear();
        }
    }

    fn clear(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        self.keys.clear();
        self.unknown.clear();
        self.deleted_sites.clear();
        self.sites.invalidate();
    }

    /// Listens for revocations until the process ends; reconnects after Redis outages
    /// and then forgets L1, since messages may have been missed meanwhile.
    pub async fn listen_for_invalidations(self: Arc<Self>, redis_url: String) {
        let mut delay = Duration::from_millis(200);
        loop {
            match self.subscribe_once(&redis_url).await {
                Ok(()) => delay = Duration::from_millis(200),
                Err(e) => tracing::warn!(error = %e, "invalidation subscription lost; retrying"),
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(5));
        }
    }

    async fn subscribe_once(&self, redis_url: &str) -> Result<(), redis::RedisError> {
        let client = redis::Client::open(redis_url)?;
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(cache::INVALIDATION_CHANNEL).await?;
        self.clear();
        tracing::info!(
            channel = cache::INVALIDATION_CHANNEL,
            "subscribed to key invalidations"
        );
        let mut stream = pubsub.on_message();
        while let Some(msg) = stream.next().await {
            if let Ok(payload) = msg.get_payload::<String>() {
                self.invalidate(&payload);
            }
        }
        Ok(())
    }
}

struct InflightGuard<'a> {
    auth: &'a Auth,
    id: String,
    lock: Arc<tokio::sync::Mutex<()>>,
    _guard: tokio::sync::OwnedMutexGuard<()>,
}

impl Drop for InflightGuard<'_> {
    fn drop(&mut self) {
        let mut map = self.auth.inflight.lock().expect("inflight lock");
        // Only the map and this guard hold it: nobody else waits, so forget the lock.
        if Arc::strong_count(&self.lock) <= 3 {
            map.remove(&self.id);
        }
    }
}

/// `k:<site_id>:<key_id>` → the key's info.
/// A key's cached value: `k:<site>:<key id>` for a key that may send events, `r:…` for
/// one that may only read statistics.
fn encode_key(k: &KeyInfo) -> String {
    let kind = if k.ingest { 'k' } else { 'r' };
    format!("{kind}:{}:{}", k.site_id, k.key_id)
}

fn decode_key(s: &str) -> Option<KeyInfo> {
    let (ingest, rest) = match s.split_at_checked(2)? {
        ("k:", rest) => (true, rest),
        ("r:", rest) => (false, rest),
        _ => return None,
    };
    let (site, key_id) = rest.split_once(':')?;
    Some(KeyInfo {
        key_id: key_id.into(),
        site_id: site.parse().ok()?,
        ingest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_value_round_trip() {
        assert_eq!(
            decode_key("k:7:key_0011223344556677"),
            Some(KeyInfo {
                key_id: "key_0011223344556677".into(),
                site_id: 7,
                ingest: true,
            })
        );
        let read_only = KeyInfo {
            key_id: "key_0011223344556677".into(),
            site_id: 7,
            ingest: false,
        };
        assert_eq!(decode_key(&encode_key(&read_only)), Some(read_only));
        assert_eq!(decode_key("-"), None);
        assert_eq!(decode_key("k:x:y"), None);
    }

    #[test]
    fn l1_fresh_and_stale() {
        let l1: L1<u32, bool> = L1::new();
        l1.put(1, true, Duration::from_secs(60));
        l1.put(2, true, Duration::ZERO);
        assert_eq!(l1.get(&1), Some((true, true)));
        assert_eq!(l1.get(&2), Some((true, false)));
        l1.remove(&1);
        assert_eq!(l1.get(&1), None);
    }
}
