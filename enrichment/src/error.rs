//! The enrichment library's one error type: a file of rules or a geo database that
//! cannot be used, and why. Each message names the file and says what to do.

use maxminddb::MaxMindDbError;
use std::net::IpAddr;
use std::path::PathBuf;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum EnrichmentError {
    #[error("cannot read the user-agent rules {path}: {source}; set UA_REGEXES to uap-core's regexes.yaml")]
    UaRulesUnreadable {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the user-agent rules {path} are not a valid uap-core regexes.yaml: {reason}")]
    UaRulesInvalid { path: String, reason: String },
    #[error("expected one MMDB file, or two (an IPv4 and an IPv6 one), but {0} were given")]
    GeoFileCount(usize),
    #[error("cannot read the geo database {path}: {source}; check the path and that the file is a complete MMDB download")]
    GeoUnreadable {
        path: PathBuf,
        #[source]
        source: MaxMindDbError,
    },
    #[error("the geo database {path} is corrupt or not a city/country database ({reason}); download it again or point to another file")]
    GeoInvalid { path: PathBuf, reason: String },
    #[error("lookup of {ip} in {path} failed: {source}")]
    GeoLookup {
        ip: IpAddr,
        path: PathBuf,
        #[source]
        source: MaxMindDbError,
    },
    /// A file that loads but answers known cases wrongly (`checks`): every case it got
    /// wrong.
    #[error("{what} gives wrong answers for known {kind}: {}", .failures.join("; "))]
    WrongAnswers {
        what: String,
        kind: &'static str,
        failures: Vec<String>,
    },
}
