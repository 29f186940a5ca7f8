//! The request on the wire (`POST /api/v2/query`, Plausible's Stats API v2 shape):
//!
//! ```json
//! {"site_id": 1, "metrics": ["visitors"], "date_range": "7d",
//!  "dimensions": ["visit:country"], "filters": [["is", "event:page", ["/"]]],
//!  "order_by": [["visitors", "desc"]],
//!  "include": {"time_labels": false, "total_rows": true, "comparisons": {"mode": "previous_period"}},
//!  "pagination": {"limit": 100, "offset": 0}}
//! ```
//!
//! The fields are kept as JSON here and read in `validate`, so that every error can name
//! the exact place (`filters[0][2][1]`) and what is allowed there.

use crate::date_range::DateRangeInput;
use crate::error::StatsError;
use serde::de::{Deserialize, Deserializer, Error as _};
use serde_json::{Map, Value};

const FIELDS: &str =
    "site_id, metrics, date_range, dimensions, filters, order_by, include, pagination";

/// A query as sent. Make one with [`Request::from_json`], [`Request::from_value`], or
/// serde (it implements `Deserialize`, with the same checks).
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// As sent: a site id (a number or a string of digits) or a domain; the server
    /// resolves it ([`Request::site`]) and checks the caller may read it.
    pub site_id: Value,
    pub metrics: Value,
    pub date_range: Value,
    pub dimensions: Option<Value>,
    pub filters: Option<Value>,
    pub order_by: Option<Value>,
    pub include: Option<Value>,
    pub pagination: Option<Value>,
}

/// The site a request names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SiteRef {
    Id(u32),
    /// Plausible's clients name a site by its domain.
    Domain(String),
}

impl Request {
    pub fn from_json(body: &[u8]) -> Result<Request, StatsError> {
        let value: Value =
            serde_json::from_slice(body).map_err(|e| StatsError::InvalidJson(e.to_string()))?;
        Request::from_value(value)
    }

    pub fn from_value(value: Value) -> Result<Request, StatsError> {
        let Value::Object(mut map) = value else {
            return Err(StatsError::InvalidJson(
                "the request must be a JSON object".into(),
            ));
        };
        if let Some(unknown) = map.keys().find(|k| !FIELDS.split(", ").any(|f| f == *k)) {
            return Err(StatsError::UnknownField {
                field: unknown.clone(),
                allowed: FIELDS,
            });
        }
        let mut required = |name: &str| -> Result<Value, StatsError> {
            take(&mut map, name).ok_or_else(|| StatsError::Missing { field: name.into() })
        };
        let site_id = required("site_id")?;
        let metrics = required("metrics")?;
        let date_range = required("date_range")?;
        Ok(Request {
            site_id,
            metrics,
            date_range,
            dimensions: take(&mut map, "dimensions"),
            filters: take(&mut map, "filters"),
            order_by: take(&mut map, "order_by"),
            include: take(&mut map, "include"),
            pagination: take(&mut map, "pagination"),
        })
    }

    /// The site asked for.
    pub fn site(&self) -> Result<SiteRef, StatsError> {
        let bad = || {
            StatsError::invalid(
                "site_id",
                "a site id (a positive integer) or the site's domain",
            )
        };
        match &self.site_id {
            Value::Number(n) => n
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| *n > 0)
                .map(SiteRef::Id)
                .ok_or_else(bad),
            Value::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => s
                .parse::<u32>()
                .ok()
                .filter(|n| *n > 0)
                .map(SiteRef::Id)
                .ok_or_else(bad),
            Value::String(s) if !s.trim().is_empty() && s.len() <= 253 => {
                Ok(SiteRef::Domain(s.trim().to_ascii_lowercase()))
            }
            _ => Err(bad()),
        }
    }

    /// Whether planning needs the site's first event (`date_range: "all"`, also as a
    /// custom comparison's range): look it up and pass it in [`crate::SiteContext`].
    pub fn needs_first_event(&self) -> bool {
        DateRangeInput::parse(&self.date_range, "date_range")
            .map(|r| r.needs_first_event())
            .unwrap_or(false)
    }
}

/// A field that is absent or `null` is not given.
fn take(map: &mut Map<String, Value>, name: &str) -> Option<Value> {
    map.remove(name).filter(|v| !v.is_null())
}

impl<'de> Deserialize<'de> for Request {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Request::from_value(Value::deserialize(d)?).map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_a_full_request() {
        let r = Request::from_json(
            br#"{"site_id": "1", "metrics": ["visitors"], "date_range": "7d",
                 "dimensions": ["visit:country"], "filters": [], "order_by": null,
                 "include": {"total_rows": true}, "pagination": {"limit": 5}}"#,
        )
        .unwrap();
        assert_eq!(r.site().unwrap(), SiteRef::Id(1));
        assert_eq!(r.metrics, json!(["visitors"]));
        assert_eq!(r.order_by, None);
        assert_eq!(r.pagination, Some(json!({"limit": 5})));
        assert!(!r.needs_first_event());
    }

    #[test]
    fn refuses_what_is_not_a_query() {
        assert!(matches!(
            Request::from_json(b"{"),
            Err(StatsError::InvalidJson(_))
        ));
        assert!(matches!(
            Request::from_json(b"[1]"),
            Err(StatsError::InvalidJson(_))
        ));
        assert_eq!(
            Request::from_value(
                json!({"site_id": 1, "metrics": ["visitors"], "date_range": "day", "period": "7d"})
            ),
            Err(StatsError::UnknownField {
                field: "period".into(),
                allowed: FIELDS
            })
        );
        for missing in ["site_id", "metrics", "date_range"] {
            let mut v = json!({"site_id": 1, "metrics": ["visitors"], "date_range": "day"});
            v.as_object_mut().unwrap().remove(missing);
            assert_eq!(
                Request::from_value(v),
                Err(StatsError::Missing {
                    field: missing.into()
                })
            );
        }
    }

    #[test]
    fn site_ids_and_domains() {
        let site = |v: Value| {
            Request::from_value(json!({"site_id": v, "metrics": [], "date_range": "day"}))
                .unwrap()
                .site()
        };
        assert_eq!(site(json!(42)), Ok(SiteRef::Id(42)));
        assert_eq!(site(json!("42")), Ok(SiteRef::Id(42)));
        assert_eq!(
            site(json!("Example.com")),
            Ok(SiteRef::Domain("example.com".into()))
        );
        for bad in [
            json!(0),
            json!(-1),
            json!(1.5),
            json!("0"),
            json!(""),
            json!(true),
            json!(5_000_000_000u64),
        ] {
            assert!(site(bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn deserializes_with_the_same_checks() {
        let r: Request =
            serde_json::from_str(r#"{"site_id": 1, "metrics": ["visits"], "date_range": "all"}"#)
                .unwrap();
        assert!(r.needs_first_event());
        let e = serde_json::from_str::<Request>(r#"{"site_id": 1}"#).unwrap_err();
        assert!(e.to_string().contains("`metrics` is required"), "{e}");
    }
}
