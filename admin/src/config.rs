//! `rivulet-admin`'s configuration, read once from the environment (docs/configuration.md).

use crate::error::AdminError;
use rivulet_common::ch::ChConfig;
use rivulet_common::config;

pub struct AdminConfig {
    /// `CLICKHOUSE_*`: the registry and `events`.
    pub clickhouse: ChConfig,
    /// `REDIS_URL`: where revocations are announced and site ids allocated.
    pub redis_url: String,
}

impl AdminConfig {
    pub fn from_env() -> Result<Self, AdminError> {
        Ok(AdminConfig {
            clickhouse: ChConfig::from_env()?,
            redis_url: config::string("REDIS_URL", "redis://127.0.0.1:16379/"),
        })
    }
}
