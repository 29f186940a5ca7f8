//! The registry changes that both the CLI and the dashboard make, in one place: a key
//! revoked from the browser goes through exactly what `rivulet-admin keys revoke` does
//! (a new version of the key's row in ClickHouse, then the Redis invalidation).

use crate::cache;
use crate::error::AdminError;
use rivulet_common::keys::{is_key_id, ApiKey, KeyHash};
use rivulet_common::registry::{KeyRecord, Registry, Site, SiteChanges};

/// The registry and the Redis its changes are announced on.
pub struct Ops {
    pub reg: Registry,
    /// `REDIS_URL`.
    pub redis_url: String,
}

impl Ops {
    /// Registers a site, and tells every ingest at once (its site directory rereads).
    pub async fn create_site(&self, domain: &str, name: Option<&str>) -> Result<Site, AdminError> {
        let mut redis = cache::connect(&self.redis_url).await?;
        let site = self.reg.create_site(&mut redis, domain, name).await?;
        cache::invalidate_site(&mut redis, site.site_id).await?;
        Ok(site)
    }

    /// The site, or a NotFound that says so.
    pub async fn site(&self, site_id: u32) -> Result<Site, AdminError> {
        self.reg
            .get_site(site_id)
            .await?
            .ok_or_else(|| AdminError::NotFound(format!("site {site_id} does not exist")))
    }

    /// Changes a site's settings (a newer version of its row), and tells every ingest:
    /// a changed list of domains takes effect on the browser path within a second.
    pub async fn update_site(
        &self,
        site_id: u32,
        changes: &SiteChanges,
    ) -> Result<Site, AdminError> {
        // Reach Redis first so that a change is never recorded without the running
        // ingests being told.
        let mut redis = cache::connect(&self.redis_url).await?;
        let site = self.reg.update_site(site_id, changes).await?;
        cache::invalidate_site(&mut redis, site_id).await?;
        Ok(site)
    }

    /// Deletes a site: its events stay, tracking for it stops (404) on every ingest.
    pub async fn delete_site(&self, site_id: u32) -> Result<Site, AdminError> {
        // Reach Redis first so that a deletion is never recorded without the running
        // ingests being told.
        let mut redis = cache::connect(&self.redis_url).await?;
        let site = self.reg.delete_site(site_id).await?;
        cache::invalidate_site(&mut redis, site_id).await?;
        Ok(site)
    }

    /// A new key; the returned `ApiKey` is the only copy of the secret.
    pub async fn create_key<S: AsRef<str>>(
        &self,
        site_id: u32,
        scopes: &[S],
    ) -> Result<(ApiKey, KeyRecord), AdminError> {
        Ok(self.reg.create_key(site_id, scopes).await?)
    }

    pub async fn list_keys(&self, site_id: u32) -> Result<Vec<KeyRecord>, AdminError> {
        self.site(site_id).await?;
        Ok(self.reg.list_keys(site_id).await?)
    }

    /// A key of one site by its id (`key_…`); 404 for another site's key or a malformed id.
    pub async fn site_key(&self, site_id: u32, key_id: &str) -> Result<KeyRecord, AdminError> {
        let no_such_key = || AdminError::NotFound(format!("site {site_id} has no key {key_id}"));
        if !is_key_id(key_id) {
            return Err(no_such_key());
        }
        let rec = self.find_key(key_id).await?;
        if rec.site_id != site_id {
            return Err(no_such_key());
        }
        Ok(rec)
    }

    /// When each key was last used (epoch seconds), as recorded in Redis by the ingests; a key
    /// never used is absent. `None` when Redis cannot say: the pages still render.
    pub async fn last_used(
        &self,
        keys: &[KeyRecord],
    ) -> Option<std::collections::HashMap<String, u32>> {
        let mut out = std::collections::HashMap::new();
        if keys.is_empty() {
            return Some(out);
        }
        let mut redis = cache::connect(&self.redis_url).await.ok()?;
        let names: Vec<String> = keys
            .iter()
            .map(|k| rivulet_common::cache::key_last_used(&k.key_id))
            .collect();
        let values: Vec<Option<u32>> = redis::cmd("MGET")
            .arg(&names)
            .query_async(&mut redis)
            .await
            .ok()?;
        for (k, v) in keys.iter().zip(values) {
            if let Some(at) = v {
                out.insert(k.key_id.clone(), at);
            }
        }
        Some(out)
    }

    /// A key by its id (`key_…`) or by the key itself (`rb_…`).
    pub async fn find_key(&self, key: &str) -> Result<KeyRecord, AdminError> {
        let rec = if key.starts_with("rb_") {
            let api_key = ApiKey::parse(key).ok_or_else(|| {
                AdminError::Usage(
                    "that is not a well-formed API key (rb_ followed by 32 lowercase hex digits)"
                        .into(),
                )
            })?;
            self.reg.find_key_by_hash(&api_key.hash()).await?
        } else if is_key_id(key) {
            self.reg.find_key_by_id(key).await?
        } else {
            return Err(AdminError::Usage(
            "give a key id (key_ + 16 hex digits, see `keys list`) or the API key itself (rb_…)"
                .into(),
        ));
        };
        rec.ok_or_else(|| AdminError::NotFound("no such API key".into()))
    }

    /// Revokes a key everywhere: records the revocation, then deletes the Redis entry and
    /// tells every ingest to drop it (docs/design.md, "Keys and sites").
    pub async fn revoke_key(&self, rec: &KeyRecord) -> Result<KeyRecord, AdminError> {
        let mut redis = cache::connect(&self.redis_url).await?;
        let revoked = self.reg.revoke_key(rec).await?;
        cache::invalidate_key(&mut redis, &KeyHash(rec.key_hash.clone())).await?;
        Ok(revoked)
    }
}
