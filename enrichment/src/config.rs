//! The enrichment's own settings, from the environment (docs/configuration.md): what the
//! enricher and `rivulet-admin install` and `replay` read, and nothing else.

use rivulet_common::{config, CommonError};
use std::path::PathBuf;
use std::time::Duration;

/// The visitor id secret when `VISITOR_ID_SECRET` is not set (with a warning).
pub const DEFAULT_VISITOR_SECRET: &str = "rivulet-dev-secret-change-me";

#[derive(Clone, Debug)]
pub struct EnrichmentConfig {
    /// `UA_REGEXES`: uap-core's regexes.yaml.
    pub ua_regexes: PathBuf,
    /// `UA_CACHE_SIZE`, default 20000 distinct user agents.
    pub ua_cache_size: usize,
    /// `GEOIP_DB`: one MMDB file, or a v4,v6 pair separated by a comma. Empty: no geo.
    pub geoip: Vec<PathBuf>,
    /// `VISITOR_ID_SECRET`: keys the daily salt of visitor ids; all replicas must share it.
    pub visitor_secret: Vec<u8>,
    pub visitor_secret_is_default: bool,
    /// `STORE_IP`, default false: keep the raw IP in `events.ip`.
    pub store_ip: bool,
    /// `SESSION_TIMEOUT_SECS`, default 1800.
    pub session_timeout: Duration,
}

impl EnrichmentConfig {
    pub fn from_env() -> Result<Self, CommonError> {
        let secret = config::optional("VISITOR_ID_SECRET");
        Ok(EnrichmentConfig {
            ua_regexes: PathBuf::from(config::string(
                "UA_REGEXES",
                "/usr/share/rivulet/uap-core/regexes.yaml",
            )),
            ua_cache_size: config::parse("UA_CACHE_SIZE", 20_000)?,
            geoip: config::string("GEOIP_DB", "")
                .split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(PathBuf::from)
                .collect(),
            visitor_secret_is_default: secret.is_none(),
            visitor_secret: secret
                .unwrap_or_else(|| DEFAULT_VISITOR_SECRET.to_string())
                .into_bytes(),
            store_ip: config::flag("STORE_IP", false)?,
            session_timeout: Duration::from_secs(config::parse("SESSION_TIMEOUT_SECS", 1800)?),
        })
    }
}
