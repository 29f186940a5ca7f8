//! The registry of record for sites and API keys, in ClickHouse.
//!
//! Both tables are ReplacingMergeTree(version): a change (revocation, deletion) is a new
//! row with a higher version, and reads use `FINAL` to see the latest one. Ingest reads
//! the registry only on a cache miss.

use crate::ch::Db;
use crate::keys::{ApiKey, KeyHash};
use crate::schema::migrations::now_secs;
use crate::schema::queries;
use crate::CommonError;
use clickhouse::Row;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Row, Serialize, Deserialize)]
pub struct Site {
    pub site_id: u32,
    pub domain: String,
    pub name: String,
    /// Epoch seconds.
    pub created_at: u32,
    pub deleted: u8,
    pub version: u64,
}

#[derive(Debug, Clone, PartialEq, Row, Serialize, Deserialize)]
pub struct KeyRecord {
    /// SHA-256 of the key, hex. The key itself is never stored.
    pub key_hash: String,
    pub key_id: String,
    /// `rb_` + the first 8 hex digits, to tell keys apart in listings.
    pub key_prefix: String,
    pub site_id: u32,
    pub created_at: u32,
    /// Epoch seconds, 0 while the key is active.
    pub revoked_at: u32,
    pub revoked: u8,
    pub version: u64,
}

/// A version that grows with time, so the latest write wins in ReplacingMergeTree.
fn next_version() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(1)
}

/// A host name such as `example.com`: what a site is registered under.
pub fn validate_domain(domain: &str) -> Result<String, CommonError> {
    let d = domain.trim().trim_end_matches('.').to_ascii_lowercase();
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if d.is_empty() || d.len() > 253 || !d.split('.').all(label_ok) {
        return Err(CommonError::Invalid(format!(
            "{domain:?} is not a domain name; give a host name such as example.com, without scheme, port or path"
        )));
    }
    Ok(d)
}

#[derive(Clone)]
pub struct Registry {
    db: Db,
}

impl Registry {
    pub fn new(db: Db) -> Self {
        Registry { db }
    }

    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Registers a site under a new id. Ids come from a Redis counter (floored at the
    /// registry's maximum), so concurrent creators never get the same one.
    #[cfg(feature = "redis")]
    pub async fn create_site<C: redis::aio::ConnectionLike>(
        &self,
        redis: &mut C,
        domain: &str,
        name: Option<&str>,
    ) -> Result<Site, CommonError> {
        let domain = validate_domain(domain)?;
        let name = name
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .unwrap_or(&domain)
            .to_string();
        if name.chars().count() > 200 {
            return Err(CommonError::Invalid(
                "site name must be at most 200 characters".into(),
            ));
        }
        let max: u32 = self
            .db
            .client
            .query(queries::SITES_MAX_ID)
            .fetch_one()
            .await?;
        let site_id = crate::cache::next_site_id(redis, max).await?;
        let site = Site {
            site_id,
            domain,
            name,
            created_at: now_secs(),
            deleted: 0,
            version: next_version(),
        };
        self.write_site(&site).await?;
        Ok(site)
    }

    async fn write_site(&self, site: &Site) -> Result<(), CommonError> {
        let mut insert = self.db.client.insert::<Site>("sites").await?;
        insert.write(site).await?;
        insert.end().await?;
        Ok(())
    }

    /// Active sites, by id.
    pub async fn list_sites(&self) -> Result<Vec<Site>, CommonError> {
        Ok(self
            .db
            .client
            .query(queries::SITES_ACTIVE)
            .fetch_all()
            .await?)
    }

    /// The site if it exists and is not deleted.
    pub async fn get_site(&self, site_id: u32) -> Result<Option<Site>, CommonError> {
        Ok(self
            .db
            .client
            .query(queries::SITE_BY_ID)
            .bind(site_id)
            .fetch_optional()
            .await?)
    }

    pub async fn delete_site(&self, site_id: u32) -> Result<Site, CommonError> {
        let mut site = self
            .get_site(site_id)
            .await?
            .ok_or_else(|| CommonError::NotFound(format!("site {site_id} does not exist")))?;
        site.deleted = 1;
        site.version = next_version();
        self.write_site(&site).await?;
        Ok(site)
    }

    /// A new key for an existing site. The returned `ApiKey` is the only copy of the secret.
    pub async fn create_key(&self, site_id: u32) -> Result<(ApiKey, KeyRecord), CommonError> {
        if self.get_site(site_id).await?.is_none() {
            return Err(CommonError::NotFound(format!(
                "site {site_id} does not exist"
            )));
        }
        let key = ApiKey::generate();
        let rec = KeyRecord {
            key_hash: key.hash().0,
            key_id: crate::keys::new_key_id(),
            key_prefix: key.display_prefix(),
            site_id,
            created_at: now_secs(),
            revoked_at: 0,
            revoked: 0,
            version: next_version(),
        };
        self.write_key(&rec).await?;
        Ok((key, rec))
    }

    async fn write_key(&self, rec: &KeyRecord) -> Result<(), CommonError> {
        let mut insert = self.db.client.insert::<KeyRecord>("api_keys").await?;
        insert.write(rec).await?;
        insert.end().await?;
        Ok(())
    }

    pub async fn list_keys(&self, site_id: u32) -> Result<Vec<KeyRecord>, CommonError> {
        Ok(self
            .db
            .client
            .query(queries::KEYS_OF_SITE)
            .bind(site_id)
            .fetch_all()
            .await?)
    }

    pub async fn find_key_by_hash(&self, hash: &KeyHash) -> Result<Option<KeyRecord>, CommonError> {
        Ok(self
            .db
            .client
            .query(queries::KEY_BY_HASH)
            .bind(hash.0.as_str())
            .fetch_optional()
            .await?)
    }

    pub async fn find_key_by_id(&self, key_id: &str) -> Result<Option<KeyRecord>, CommonError> {
        Ok(self
            .db
            .client
            .query(queries::KEY_BY_ID)
            .bind(key_id)
            .fetch_optional()
            .await?)
    }

    /// Records the revocation (idempotent: a revoked key stays as it was revoked).
    pub async fn revoke_key(&self, rec: &KeyRecord) -> Result<KeyRecord, CommonError> {
        if rec.revoked == 1 {
            return Ok(rec.clone());
        }
        let mut revoked = rec.clone();
        revoked.revoked = 1;
        revoked.revoked_at = now_secs();
        revoked.version = next_version();
        self.write_key(&revoked).await?;
        Ok(revoked)
    }
}

#[cfg(test)]
mod tests {
    use super::validate_domain;

    #[test]
    fn domains() {
        assert_eq!(validate_domain("Example.COM.").unwrap(), "example.com");
        assert_eq!(validate_domain("localhost").unwrap(), "localhost");
        for bad in [
            "",
            "https://x.com",
            "x.com/path",
            "x.com:80",
            "-x.com",
            "a..b",
            "sp ace.com",
        ] {
            assert!(validate_domain(bad).is_err(), "{bad}");
        }
    }
}
