//! Small helpers shared by the parsers: JSON errors as messages, and typed reads of a
//! JSON object's members whatever the source made of them (PostHog's flattened CSV
//! columns carry every value as text).

use serde_json::{Map, Value};

use crate::SkipKind;

pub(crate) type Props = Map<String, Value>;

/// A JSON error as a message, with its column (inputs here are one line).
pub(crate) fn json_error(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let message = match text.rfind(" at line ") {
        Some(i) => &text[..i],
        None => &text,
    };
    if e.line() == 0 {
        message.to_owned()
    } else {
        format!("{message} (column {})", e.column())
    }
}

/// The kind of a JSON error: broken syntax is malformed; a value of the wrong type is
/// an invalid value.
pub(crate) fn json_kind(e: &serde_json::Error) -> SkipKind {
    match e.classify() {
        serde_json::error::Category::Data => SkipKind::InvalidValue,
        _ => SkipKind::Malformed,
    }
}

/// A line as text; the error says where it stops being UTF-8.
pub(crate) fn utf8(bytes: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(bytes)
        .map_err(|e| format!("not valid UTF-8 (byte {} of the line)", e.valid_up_to() + 1))
}

/// `Some` of a non-empty string.
pub(crate) fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

/// A member that is a non-empty string.
pub(crate) fn text<'a>(p: &'a Props, key: &str) -> Option<&'a str> {
    match p.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Some(s),
        _ => None,
    }
}

/// A member that is a number, or text holding one; `None` when absent, null or empty.
pub(crate) fn number(p: &Props, key: &str) -> Result<Option<f64>, String> {
    match p.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => Ok(n.as_f64()),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) => match s.trim().parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(Some(v)),
            _ => Err(format!("{key} is {s:?}, not a number")),
        },
        Some(other) => Err(format!("{key} is {other}, not a number")),
    }
}

/// A member that is `true`, or text saying so (`true`, `True`, `1`).
pub(crate) fn flag(p: &Props, key: &str) -> Option<bool> {
    match p.get(key)? {
        Value::Bool(b) => Some(*b),
        Value::String(s) => match s.as_str() {
            "true" | "True" | "TRUE" | "1" => Some(true),
            "false" | "False" | "FALSE" | "0" => Some(false),
            _ => None,
        },
        Value::Number(n) => Some(n.as_f64() == Some(1.0)),
        _ => None,
    }
}

/// A screen dimension as the track API takes it: a number within 0–65535 (before
/// rounding), rounded.
pub(crate) fn dimension(name: &str, v: Option<f64>) -> Result<Option<u16>, String> {
    match v {
        None => Ok(None),
        Some(v) => rivulet_common::contract::screen(v)
            .map(Some)
            .ok_or_else(|| {
                format!(
                    "{name} is {v}, outside 0–{}",
                    rivulet_common::contract::SCREEN_MAX
                )
            }),
    }
}

/// The text of a version up to its first dot: `120.0.6099` → `120`.
pub(crate) fn major(version: &str) -> Option<String> {
    let major = version.split('.').next().unwrap_or_default().trim();
    non_empty(major)
}

/// `major.minor` of a version: `10.15.7` → `10.15`; `10` → `10`.
pub(crate) fn major_minor(version: &str) -> Option<String> {
    let mut parts = version.trim().split('.');
    let major = parts.next().unwrap_or_default();
    if major.is_empty() {
        return None;
    }
    Some(match parts.next() {
        Some(minor) if !minor.is_empty() => format!("{major}.{minor}"),
        _ => major.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_errors_read_well() {
        let e = serde_json::from_str::<Value>("{\"a\":}").unwrap_err();
        assert_eq!(json_error(&e), "expected value (column 6)");
        assert_eq!(json_kind(&e), SkipKind::Malformed);
        let e = serde_json::from_str::<u16>("\"x\"").unwrap_err();
        assert_eq!(json_kind(&e), SkipKind::InvalidValue);
    }

    #[test]
    fn typed_reads() {
        let p = json!({"n": 5, "s": "7.5", "e": "", "b": "True", "x": "five", "o": {}})
            .as_object()
            .cloned()
            .unwrap();
        assert_eq!(number(&p, "n"), Ok(Some(5.0)));
        assert_eq!(number(&p, "s"), Ok(Some(7.5)));
        assert_eq!(number(&p, "e"), Ok(None));
        assert_eq!(number(&p, "missing"), Ok(None));
        assert_eq!(number(&p, "x"), Err("x is \"five\", not a number".into()));
        assert_eq!(number(&p, "o"), Err("o is {}, not a number".into()));
        assert_eq!(flag(&p, "b"), Some(true));
        assert_eq!(flag(&p, "x"), None);
        assert_eq!(text(&p, "e"), None);
        assert_eq!(text(&p, "s"), Some("7.5"));
        assert_eq!(dimension("w", Some(1080.5)), Ok(Some(1081)));
        assert_eq!(
            dimension("w", Some(65536.0)),
            Err("w is 65536, outside 0–65535".into())
        );
        assert_eq!(major("120.0.6099"), Some("120".into()));
        assert_eq!(major(""), None);
        assert_eq!(major_minor("10.15.7"), Some("10.15".into()));
        assert_eq!(major_minor("10"), Some("10".into()));
        assert_eq!(major_minor(""), None);
    }
}
