//! Configuration comes from environment variables (docs/configuration.md, which
//! `common/tests/docs.rs` checks against every call of these helpers); these
//! helpers read one variable with a default and say clearly what is wrong with a bad value.

use crate::CommonError;
use std::str::FromStr;
use std::time::Duration;

/// The variable's value, or `default` when it is unset or empty.
pub fn string(name: &str, default: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v.trim().to_string(),
        _ => default.to_string(),
    }
}

/// The variable's value, or `None` when it is unset or empty.
pub fn optional(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// A parsed value, or `default`; an unparsable value is an error naming the variable.
pub fn parse<T: FromStr>(name: &str, default: T) -> Result<T, CommonError> {
    match optional(name) {
        None => Ok(default),
        Some(v) => v
            .parse()
            .map_err(|_| CommonError::Config(format!("{name}={v:?} is not a valid value"))),
    }
}

/// A duration given in milliseconds.
pub fn millis(name: &str, default_ms: u64) -> Result<Duration, CommonError> {
    parse(name, default_ms).map(Duration::from_millis)
}

/// `true`/`false`/`1`/`0`/`yes`/`no`.
pub fn flag(name: &str, default: bool) -> Result<bool, CommonError> {
    match optional(name).map(|v| v.to_ascii_lowercase()) {
        None => Ok(default),
        Some(v) if matches!(v.as_str(), "1" | "true" | "yes" | "on") => Ok(true),
        Some(v) if matches!(v.as_str(), "0" | "false" | "no" | "off") => Ok(false),
        Some(v) => Err(CommonError::Config(format!(
            "{name}={v:?} is not a boolean (true or false)"
        ))),
    }
}
