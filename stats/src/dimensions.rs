//! The dimensions a query can group and filter by, and their names on the wire.
//! What each one reads is the source's business ([`crate::events_source`]); here is only what
//! they are.

use crate::error::StatsError;
use crate::limits::MAX_PROPERTY_CHARS;

/// One dimension (docs/stats-api.md, "Dimensions").
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Dimension {
    /// A property of each event.
    Event(EventProperty),
    /// `event:props:<name>`: a custom property of each event.
    Prop(String),
    /// A property of each visit, the same for all its events.
    Visit(VisitProperty),
    /// Time buckets, in the site's time zone.
    Time(TimeGrain),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventProperty {
    /// The custom event's name; for other types, the type (`pageview`, `outbound`, …).
    Name,
    Page,
    Hostname,
    Type,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VisitProperty {
    EntryPage,
    ExitPage,
    Source,
    Referrer,
    Channel,
    UtmSource,
    UtmMedium,
    UtmCampaign,
    UtmContent,
    UtmTerm,
    Device,
    Browser,
    BrowserVersion,
    Os,
    OsVersion,
    Country,
    Region,
    City,
    Screen,
}

/// A time dimension as asked: `time` leaves the bucket to the range's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimeGrain {
    Auto,
    Bucket(Bucket),
}

/// A time bucket, in the site's time zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bucket {
    Hour,
    Day,
    /// From Monday; the first bucket starts with the range if that is later.
    Week,
    Month,
}

const EVENT_PROPERTIES: [(EventProperty, &str); 4] = [
    (EventProperty::Name, "event:name"),
    (EventProperty::Page, "event:page"),
    (EventProperty::Hostname, "event:hostname"),
    (EventProperty::Type, "event:type"),
];

pub(crate) const VISIT_PROPERTIES: [(VisitProperty, &str); 19] = [
    (VisitProperty::EntryPage, "visit:entry_page"),
    (VisitProperty::ExitPage, "visit:exit_page"),
    (VisitProperty::Source, "visit:source"),
    (VisitProperty::Referrer, "visit:referrer"),
    (VisitProperty::Channel, "visit:channel"),
    (VisitProperty::UtmSource, "visit:utm_source"),
    (VisitProperty::UtmMedium, "visit:utm_medium"),
    (VisitProperty::UtmCampaign, "visit:utm_campaign"),
    (VisitProperty::UtmContent, "visit:utm_content"),
    (VisitProperty::UtmTerm, "visit:utm_term"),
    (VisitProperty::Device, "visit:device"),
    (VisitProperty::Browser, "visit:browser"),
    (VisitProperty::BrowserVersion, "visit:browser_version"),
    (VisitProperty::Os, "visit:os"),
    (VisitProperty::OsVersion, "visit:os_version"),
    (VisitProperty::Country, "visit:country"),
    (VisitProperty::Region, "visit:region"),
    (VisitProperty::City, "visit:city"),
    (VisitProperty::Screen, "visit:screen"),
];

const TIME_GRAINS: [(TimeGrain, &str); 5] = [
    (TimeGrain::Auto, "time"),
    (TimeGrain::Bucket(Bucket::Hour), "time:hour"),
    (TimeGrain::Bucket(Bucket::Day), "time:day"),
    (TimeGrain::Bucket(Bucket::Week), "time:week"),
    (TimeGrain::Bucket(Bucket::Month), "time:month"),
];

pub(crate) const ALLOWED: &str = "event:name, event:page, event:hostname, event:type, \
     event:props:<name>, visit:entry_page, visit:exit_page, visit:source, visit:referrer, \
     visit:channel, visit:utm_source, visit:utm_medium, visit:utm_campaign, visit:utm_content, \
     visit:utm_term, visit:device, visit:browser, visit:browser_version, visit:os, \
     visit:os_version, visit:country, visit:region, visit:city, visit:screen, time, time:hour, \
     time:day, time:week, time:month";

/// What `visit:screen` calls a screen by its width in CSS pixels (Plausible's classes);
/// a width of 0 (not sent) is not set.
pub const SCREEN_CLASSES: [(u16, &str); 3] = [(576, "Mobile"), (992, "Tablet"), (1440, "Laptop")];
/// The class of a screen at least as wide as the last of [`SCREEN_CLASSES`].
pub const SCREEN_WIDEST: &str = "Desktop";

impl Dimension {
    /// Reads a dimension's name; `field` is where it stood, for the error.
    pub fn parse(name: &str, field: &str) -> Result<Dimension, StatsError> {
        let unknown = || StatsError::UnknownDimension {
            field: field.to_string(),
            value: name.to_string(),
            allowed: ALLOWED,
        };
        if let Some(prop) = name.strip_prefix("event:props:") {
            if prop.is_empty() {
                return Err(unknown());
            }
            let chars = prop.chars().count();
            if chars > MAX_PROPERTY_CHARS {
                return Err(StatsError::too_large(
                    field,
                    "the property name's length",
                    chars,
                    MAX_PROPERTY_CHARS,
                ));
            }
            return Ok(Dimension::Prop(prop.to_string()));
        }
        if let Some((p, _)) = EVENT_PROPERTIES.iter().find(|(_, n)| *n == name) {
            return Ok(Dimension::Event(*p));
        }
        if let Some((p, _)) = VISIT_PROPERTIES.iter().find(|(_, n)| *n == name) {
            return Ok(Dimension::Visit(*p));
        }
        if let Some((g, _)) = TIME_GRAINS.iter().find(|(_, n)| *n == name) {
            return Ok(Dimension::Time(*g));
        }
        Err(unknown())
    }

    /// The name on the wire.
    pub fn name(&self) -> String {
        match self {
            Dimension::Event(p) => lookup(&EVENT_PROPERTIES, p).to_string(),
            Dimension::Prop(name) => format!("event:props:{name}"),
            Dimension::Visit(p) => lookup(&VISIT_PROPERTIES, p).to_string(),
            Dimension::Time(g) => lookup(&TIME_GRAINS, g).to_string(),
        }
    }

    pub fn is_time(&self) -> bool {
        matches!(self, Dimension::Time(_))
    }

    pub fn is_visit(&self) -> bool {
        matches!(self, Dimension::Visit(_))
    }

    /// `event:*`, custom properties included.
    pub fn is_event(&self) -> bool {
        matches!(self, Dimension::Event(_) | Dimension::Prop(_))
    }

    /// What the response shows for an empty value (unknown, or absent), and what an
    /// `is`/`is_not` filter value means the empty value by: Plausible's words.
    pub fn empty_label(&self) -> Option<&'static str> {
        match self {
            Dimension::Time(_) => None,
            Dimension::Visit(VisitProperty::Source | VisitProperty::Referrer) => {
                Some("Direct / None")
            }
            Dimension::Prop(_) => Some("(none)"),
            _ => Some("(not set)"),
        }
    }
}

fn lookup<K: PartialEq, const N: usize>(table: &[(K, &'static str); N], key: &K) -> &'static str {
    table
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, n)| *n)
        .unwrap_or_default()
}

impl Bucket {
    pub fn name(self) -> &'static str {
        match self {
            Bucket::Hour => "hour",
            Bucket::Day => "day",
            Bucket::Week => "week",
            Bucket::Month => "month",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_back_to_itself_and_is_in_the_allowed_list() {
        let names = EVENT_PROPERTIES
            .iter()
            .map(|(_, n)| *n)
            .chain(VISIT_PROPERTIES.iter().map(|(_, n)| *n))
            .chain(TIME_GRAINS.iter().map(|(_, n)| *n))
            .chain(["event:props:plan"]);
        for name in names {
            let d = Dimension::parse(name, "dimensions[0]").unwrap();
            assert_eq!(d.name(), name);
            let listed = if name.starts_with("event:props:") {
                "event:props:<name>"
            } else {
                name
            };
            assert!(
                ALLOWED.split(", ").any(|a| a == listed),
                "{name} is missing from ALLOWED"
            );
        }
        assert_eq!(ALLOWED.split(", ").count(), 4 + 1 + 19 + 5);
    }

    #[test]
    fn unknown_names_say_where_and_what_is_allowed() {
        for bad in [
            "event:goal",
            "visit:country_name",
            "event:props:",
            "time:minute",
            "page",
        ] {
            match Dimension::parse(bad, "dimensions[1]") {
                Err(StatsError::UnknownDimension {
                    field,
                    value,
                    allowed,
                }) => {
                    assert_eq!(field, "dimensions[1]");
                    assert_eq!(value, bad);
                    assert_eq!(allowed, ALLOWED);
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
        let long = format!("event:props:{}", "k".repeat(MAX_PROPERTY_CHARS + 1));
        assert!(matches!(
            Dimension::parse(&long, "dimensions[0]"),
            Err(StatsError::TooLarge { .. })
        ));
        // Any characters may name a property: the name is a bound value, never SQL.
        assert_eq!(
            Dimension::parse("event:props:it's \"x\"", "d").unwrap(),
            Dimension::Prop("it's \"x\"".into())
        );
    }

    #[test]
    fn kinds_and_empty_labels() {
        let d = |n| Dimension::parse(n, "d").unwrap();
        assert!(d("time:week").is_time());
        assert!(d("visit:city").is_visit());
        assert!(d("event:props:x").is_event() && d("event:page").is_event());
        assert_eq!(d("visit:source").empty_label(), Some("Direct / None"));
        assert_eq!(d("visit:referrer").empty_label(), Some("Direct / None"));
        assert_eq!(d("event:props:x").empty_label(), Some("(none)"));
        assert_eq!(d("visit:utm_source").empty_label(), Some("(not set)"));
        assert_eq!(d("time").empty_label(), None);
    }
}
