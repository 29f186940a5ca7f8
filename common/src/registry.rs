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

#[derive(Debug, Clone, Default, PartialEq, Row, Serialize, Deserialize)]
pub struct Site {
    pub site_id: u32,
    pub domain: String,
    pub name: String,
    /// Epoch seconds.
    pub created_at: u32,
    pub deleted: u8,
    pub version: u64,
    /// Every domain the browser path accepts for the site, the primary `domain` among
    /// them. Rows written before the list existed have it empty: [`Site::domains`] reads
    /// those as the primary domain alone.
    #[serde(rename = "domains")]
    pub domain_list: Vec<String>,
    /// Whether each domain also covers its subdomains (`a.example.com` for `example.com`).
    pub allow_subdomains: u8,
    /// Days a site's events are kept; 0 keeps them for ever.
    pub retention_days: u32,
    /// 1 when the site takes no keyless requests (the browser path): only API keys.
    pub browser_path_off: u8,
    /// 1 when keyless `POST /api/identify` calls are taken from the site's domains (off
    /// unless turned on: a keyless call is anyone who sends the `Origin` header).
    pub browser_identify: u8,
    /// The IANA time zone its days, weeks and months are counted in (the Stats API, the
    /// dashboard); empty in rows written before it: UTC.
    pub timezone: String,
}

impl Site {
    /// The site's time zone: `UTC` unless it set one.
    pub fn time_zone(&self) -> &str {
        if self.timezone.is_empty() {
            "UTC"
        } else {
            &self.timezone
        }
    }

    /// Whether the site takes keyless requests from its domains.
    pub fn browser_path(&self) -> bool {
        self.browser_path_off == 0
    }

    /// The domains the site accepts browser events from.
    pub fn domains(&self) -> Vec<String> {
        if self.domain_list.is_empty() {
            vec![self.domain.clone()]
        } else {
            self.domain_list.clone()
        }
    }
}

/// What `sites update` may change; `None` leaves a setting as it is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SiteChanges {
    pub name: Option<String>,
    /// The full list; the first becomes the primary domain.
    pub domains: Option<Vec<String>>,
    pub allow_subdomains: Option<bool>,
    pub retention_days: Option<u32>,
    /// Whether keyless requests are taken at all.
    pub browser_path: Option<bool>,
    /// Whether keyless identify calls are taken.
    pub browser_identify: Option<bool>,
    /// An IANA time zone name (`Europe/Berlin`).
    pub timezone: Option<String>,
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
    /// What the key may do (`keys::INGEST_WRITE`, `keys::STATS_READ`); empty in rows
    /// written before scopes: ingest only.
    pub scopes: Vec<String>,
}

impl KeyRecord {
    /// Whether the key has `scope` (a key of before scopes has `ingest:write` only).
    pub fn has_scope(&self, scope: &str) -> bool {
        if self.scopes.is_empty() {
            scope == crate::keys::INGEST_WRITE
        } else {
            self.scopes.iter().any(|s| s == scope)
        }
    }

    /// Its scopes, the implicit one of a key of before scopes included.
    pub fn scope_names(&self) -> Vec<String> {
        if self.scopes.is_empty() {
            vec![crate::keys::INGEST_WRITE.to_string()]
        } else {
            self.scopes.clone()
        }
    }
}

/// A version that grows with time, so the latest write wins in ReplacingMergeTree.
fn next_version() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(1)
}

/// The longest retention a site may set: 100 years.
pub const MAX_RETENTION_DAYS: u32 = 36_500;
/// The most domains one site may list.
pub const MAX_DOMAINS: usize = 100;

fn site_name(name: &str) -> Result<String, CommonError> {
    let name = name.trim();
    if name.is_empty() {
        return Err(CommonError::Invalid("a site's name cannot be empty".into()));
    }
    if name.chars().count() > 200 {
        return Err(CommonError::Invalid(
            "site name must be at most 200 characters".into(),
        ));
    }
    Ok(name.to_string())
}

/// An IANA time zone name (`Europe/Berlin`, `UTC`), as the time zone database this build
/// carries knows it; returned as given.
pub fn validate_time_zone(name: &str) -> Result<String, CommonError> {
    let name = name.trim();
    match jiff::tz::TimeZone::get(name) {
        Ok(_) if !name.is_empty() => Ok(name.to_string()),
        _ => Err(CommonError::Invalid(format!(
            "{name:?} is not a time zone: give an IANA name such as Europe/Berlin, America/New_York or UTC"
        ))),
    }
}

/// A site's list of domains: each a host name, none twice, at least one, at most
/// [`MAX_DOMAINS`].
pub fn validate_domains(domains: &[String]) -> Result<Vec<String>, CommonError> {
    let mut list: Vec<String> = Vec::with_capacity(domains.len());
    for d in domains {
        let d = validate_domain(d)?;
        if !list.contains(&d) {
            list.push(d);
        }
    }
    if list.is_empty() {
        return Err(CommonError::Invalid(
            "a site needs at least one domain".into(),
        ));
    }
    if list.len() > MAX_DOMAINS {
        return Err(CommonError::Invalid(format!(
            "a site may list at most {MAX_DOMAINS} domains"
        )));
    }
    Ok(list)
}

/// A host name such as `example.com`: what a site is registered under.
pub fn validate_domain(domain: &str) -> Result<String, CommonError> {
    // Public suffixes, single labels, localhost and IP addresses are refused too: the
    // rule and its reasons are in `domain`.
    crate::domain::site_domain(domain).map_err(CommonError::Invalid)
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
        let name = site_name(name.unwrap_or(&domain))?;
        let max: u32 = self
            .db
            .client
            .query(queries::SITES_MAX_ID)
            .fetch_one()
            .await?;
        let site_id = crate::cache::next_site_id(redis, max).await?;
        let site = Site {
            site_id,
            domain: domain.clone(),
            name,
            created_at: now_secs(),
            deleted: 0,
            version: next_version(),
            domain_list: vec![domain],
            ..Site::default()
        };
        self.write_site(&site).await?;
        Ok(site)
    }

    /// Changes a site's settings: a new version of its row.
    pub async fn update_site(
        &self,
        site_id: u32,
        changes: &SiteChanges,
    ) -> Result<Site, CommonError> {
        let mut site = self
            .get_site(site_id)
            .await?
            .ok_or_else(|| CommonError::NotFound(format!("site {site_id} does not exist")))?;
        if let Some(name) = &changes.name {
            site.name = site_name(name)?;
        }
        if let Some(domains) = &changes.domains {
            let list = validate_domains(domains)?;
            site.domain = list[0].clone();
            site.domain_list = list;
        }
        if let Some(sub) = changes.allow_subdomains {
            site.allow_subdomains = u8::from(sub);
        }
        if let Some(days) = changes.retention_days {
            if days > MAX_RETENTION_DAYS {
                return Err(CommonError::Invalid(format!(
                    "retention must be at most {MAX_RETENTION_DAYS} days (0 keeps events for ever)"
                )));
            }
            site.retention_days = days;
        }
        if let Some(on) = changes.browser_path {
            site.browser_path_off = u8::from(!on);
        }
        if let Some(on) = changes.browser_identify {
            site.browser_identify = u8::from(on);
        }
        if let Some(tz) = &changes.timezone {
            site.timezone = validate_time_zone(tz)?;
        }
        site.version = next_version();
        self.write_site(&site).await?;
        Ok(site)
    }

    /// The ids whose erasure asked to suppress their future events: (site, kind, id).
    pub async fn suppressed_ids(&self) -> Result<Vec<(u32, String, String)>, CommonError> {
        Ok(self
            .db
            .client
            .query(queries::SUPPRESSED_IDS)
            .fetch_all::<(u32, String, String)>()
            .await?)
    }

    /// A shared secret made by `migrate` (`schema::migrations::ensure_secret`), as hex.
    pub async fn secret(&self, name: &str) -> Result<Option<String>, CommonError> {
        let value: String = self
            .db
            .client
            .query(queries::SECRET_VALUE)
            .bind(name)
            .fetch_one()
            .await?;
        Ok(Some(value).filter(|v| !v.is_empty()))
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

    /// Every site, deleted ones too, by id.
    pub async fn list_sites_with_deleted(&self) -> Result<Vec<Site>, CommonError> {
        Ok(self.db.client.query(queries::SITES_ALL).fetch_all().await?)
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

    /// A new key for an existing site, with `scopes` (`keys::parse_scopes`: none given is
    /// `ingest:write`). The returned `ApiKey` is the only copy of the secret.
    pub async fn create_key<S: AsRef<str>>(
        &self,
        site_id: u32,
        scopes: &[S],
    ) -> Result<(ApiKey, KeyRecord), CommonError> {
        let scopes = crate::keys::parse_scopes(scopes).map_err(CommonError::Invalid)?;
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
            scopes,
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
    fn domain_lists() {
        let l = |v: &[&str]| {
            super::validate_domains(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        };
        assert_eq!(
            l(&["A.example", "b.example", "a.example."]).unwrap(),
            ["a.example", "b.example"]
        );
        assert!(l(&[]).is_err());
        assert!(l(&["ok.example", "not a domain"]).is_err());
    }

    #[test]
    fn time_zones_are_iana_names() {
        use super::validate_time_zone as tz;
        assert_eq!(tz("Europe/Berlin").unwrap(), "Europe/Berlin");
        assert_eq!(tz(" UTC ").unwrap(), "UTC");
        for bad in ["", "Mars/Olympus", "+02:00", "Europe/Berlin; DROP"] {
            assert!(tz(bad).unwrap_err().to_string().contains("IANA"), "{bad}");
        }
    }

    #[test]
    fn domains() {
        assert_eq!(validate_domain("Example.COM.").unwrap(), "example.com");
        assert!(validate_domain("localhost").is_err());
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
