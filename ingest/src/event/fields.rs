//! The JSON body of a tracking request, read in one pass into its known fields.
//!
//! Strings are borrowed from the body when they hold no escape. Unknown fields, and
//! known fields of a type no field accepts (arrays, objects), are read as JSON and then
//! dropped without being built: the body is checked as strictly as a full parse into a
//! `serde_json::Value` (syntax, UTF-8, `\u` escapes and surrogates, nesting deeper than
//! 128, numbers out of `f64`'s range), but none of it is allocated. A field given twice:
//! the last one wins, as with `JSON.parse`.
//!
//! Why not a `serde_json::Map`: it allocates every key, every string and a tree node per
//! few fields, and validation then looked each field up by name: a large share of
//! ingest's time per request (docs/decisions/002-ingest-request-path.md).

use serde::de::{Deserialize, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::fmt;

/// A field's value, as much of it as validation needs.
#[derive(Debug, Clone, PartialEq)]
pub enum Field<'a> {
    Null,
    Bool(bool),
    /// An integer ≥ 0.
    Unsigned(u64),
    /// An integer < 0.
    Negative(i64),
    /// A number with a fraction or an exponent, or an integer beyond 64 bits.
    Float(f64),
    Str(Cow<'a, str>),
    /// An array or an object; its content is not kept.
    Composite,
}

impl Field<'_> {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Field::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The value as an `f64`, for any number.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Field::Unsigned(n) => Some(n as f64),
            Field::Negative(n) => Some(n as f64),
            Field::Float(f) => Some(f),
            _ => None,
        }
    }
}

/// A field's value, treating JSON `null` as absent.
pub(crate) fn present(v: Option<Field<'_>>) -> Option<Field<'_>> {
    v.filter(|v| *v != Field::Null)
}

/// The known fields of one tracking event, as sent. `None`: the field was absent.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct EventFields<'a> {
    pub api_key: Option<Field<'a>>,
    pub site_id: Option<Field<'a>>,
    pub event_type: Option<Field<'a>>,
    pub pathname: Option<Field<'a>>,
    pub hostname: Option<Field<'a>>,
    pub querystring: Option<Field<'a>>,
    pub page_title: Option<Field<'a>>,
    pub referrer: Option<Field<'a>>,
    pub user_id: Option<Field<'a>>,
    pub user_agent: Option<Field<'a>>,
    pub ip_address: Option<Field<'a>>,
    pub language: Option<Field<'a>>,
    pub screen_width: Option<Field<'a>>,
    pub screen_height: Option<Field<'a>>,
    pub event_name: Option<Field<'a>>,
    pub properties: Option<Field<'a>>,
    pub event_id: Option<Field<'a>>,
    pub timestamp: Option<Field<'a>>,
    pub sent_at: Option<Field<'a>>,
    pub anonymous_id: Option<Field<'a>>,
    pub tag: Option<Field<'a>>,
    pub app_version: Option<Field<'a>>,
    pub device_model: Option<Field<'a>>,
    pub lcp: Option<Field<'a>>,
    pub cls: Option<Field<'a>>,
    pub inp: Option<Field<'a>>,
    pub fcp: Option<Field<'a>>,
    pub ttfb: Option<Field<'a>>,
    /// An object of strings: kept as its JSON text (borrowed from the body, not built), and
    /// read entry by entry when it is validated.
    pub feature_flags: Option<RawJson<'a>>,
}

impl<'a> EventFields<'a> {
    /// The JSON names of the known fields held as a [`Field`] (`feature_flags` is not one).
    pub const NAMES: [&'static str; 28] = [
        "api_key",
        "site_id",
        "type",
        "pathname",
        "hostname",
        "querystring",
        "page_title",
        "referrer",
        "user_id",
        "user_agent",
        "ip_address",
        "language",
        "screenWidth",
        "screenHeight",
        "event_name",
        "properties",
        "event_id",
        "timestamp",
        "sent_at",
        "anonymous_id",
        "tag",
        "app_version",
        "device_model",
        "lcp",
        "cls",
        "inp",
        "fcp",
        "ttfb",
    ];

    /// The slot of a known field by its JSON name; `None` for unknown names.
    fn slot(&mut self, name: &str) -> Option<&mut Option<Field<'a>>> {
        Some(match name {
            "api_key" => &mut self.api_key,
            "site_id" => &mut self.site_id,
            "type" => &mut self.event_type,
            "pathname" => &mut self.pathname,
            "hostname" => &mut self.hostname,
            "querystring" => &mut self.querystring,
            "page_title" => &mut self.page_title,
            "referrer" => &mut self.referrer,
            "user_id" => &mut self.user_id,
            "user_agent" => &mut self.user_agent,
            "ip_address" => &mut self.ip_address,
            "language" => &mut self.language,
            "screenWidth" => &mut self.screen_width,
            "screenHeight" => &mut self.screen_height,
            "event_name" => &mut self.event_name,
            "properties" => &mut self.properties,
            "event_id" => &mut self.event_id,
            "timestamp" => &mut self.timestamp,
            "sent_at" => &mut self.sent_at,
            "anonymous_id" => &mut self.anonymous_id,
            "tag" => &mut self.tag,
            "app_version" => &mut self.app_version,
            "device_model" => &mut self.device_model,
            "lcp" => &mut self.lcp,
            "cls" => &mut self.cls,
            "inp" => &mut self.inp,
            "fcp" => &mut self.fcp,
            "ttfb" => &mut self.ttfb,
            _ => return None,
        })
    }
}

/// A JSON value kept as its text, borrowed from the body.
#[derive(Debug, Clone, Copy)]
pub struct RawJson<'a>(pub &'a RawValue);

impl<'a> RawJson<'a> {
    /// The value's JSON text; `None` for `null`.
    pub fn text(self) -> Option<&'a str> {
        Some(self.0.get()).filter(|t| *t != "null")
    }
}

impl PartialEq for RawJson<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get()
    }
}

impl<'de> Deserialize<'de> for RawJson<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        <&'de RawValue>::deserialize(d).map(RawJson)
    }
}

/// A `POST /api/identify` body.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct IdentifyFields<'a> {
    pub api_key: Option<Field<'a>>,
    pub site_id: Option<Field<'a>>,
    pub user_id: Option<Field<'a>>,
    pub anonymous_id: Option<Field<'a>>,
    pub event_id: Option<Field<'a>>,
    pub timestamp: Option<Field<'a>>,
    /// An object, kept as its JSON text.
    pub traits: Option<RawJson<'a>>,
}

/// A `POST /api/track/batch` body: the envelope's key, site and `sent_at`, and its events.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct BatchFields<'a> {
    pub api_key: Option<Field<'a>>,
    pub site_id: Option<Field<'a>>,
    /// When the client sent the batch: each event's own `sent_at` when it has one, else this.
    pub sent_at: Option<Field<'a>>,
    pub events: Option<Events<'a>>,
    /// The most events kept: the rest of a longer array is read and dropped unbuilt.
    max_events: usize,
}

/// The `events` of a batch.
#[derive(Debug, Clone, PartialEq)]
pub enum Events<'a> {
    List(Vec<Item<'a>>),
    /// An array of more than the batch's limit: its items past the limit were checked as
    /// JSON but not kept, so that memory stays bounded by the limit, not by the body.
    TooMany,
    /// Not an array (null included).
    NotAList,
}

/// One element of a batch's `events`.
// Nearly every item is an event: boxing it would only add an allocation per event.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Item<'a> {
    Event(EventFields<'a>),
    NotAnObject,
}

/// Why a body is not a JSON object: not JSON at all (serde_json's error), or another value.
#[derive(Debug)]
pub enum BodyError {
    Json(serde_json::Error),
    NotAnObject,
}

/// Reads a `POST /api/track` body.
pub fn parse_event(body: &[u8]) -> Result<EventFields<'_>, BodyError> {
    parse_object(body, EventFields::default())
}

/// Reads a `POST /api/track/batch` body, keeping at most `max_events` events: a longer
/// `events` array is [`Events::TooMany`].
pub fn parse_batch(body: &[u8], max_events: usize) -> Result<BatchFields<'_>, BodyError> {
    parse_object(
        body,
        BatchFields {
            max_events,
            ..BatchFields::default()
        },
    )
}

/// Reads a `POST /api/identify` body.
pub fn parse_identify(body: &[u8]) -> Result<IdentifyFields<'_>, BodyError> {
    parse_object(body, IdentifyFields::default())
}

fn parse_object<'a, T: ObjectFields<'a>>(body: &'a [u8], empty: T) -> Result<T, BodyError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let read = ObjectSeed(empty)
        .deserialize(&mut de)
        .and_then(|value| de.end().map(|()| value));
    match read {
        Ok(ObjectOr::Object(fields)) => Ok(fields),
        Ok(ObjectOr::Other) => Err(BodyError::NotAnObject),
        Err(e) => Err(BodyError::Json(e)),
    }
}

/// A struct of known fields filled from a JSON object's entries.
trait ObjectFields<'de>: Default {
    /// Reads the value of the entry `name` from `map`, into its slot or to be dropped.
    fn read_entry<A: MapAccess<'de>>(&mut self, name: &str, map: &mut A) -> Result<(), A::Error>;
}

impl<'de> ObjectFields<'de> for EventFields<'de> {
    fn read_entry<A: MapAccess<'de>>(&mut self, name: &str, map: &mut A) -> Result<(), A::Error> {
        if name == "feature_flags" {
            self.feature_flags = Some(map.next_value()?);
            return Ok(());
        }
        match self.slot(name) {
            Some(slot) => *slot = Some(map.next_value()?),
            None => {
                map.next_value::<Skip>()?;
            }
        }
        Ok(())
    }
}

impl<'de> ObjectFields<'de> for BatchFields<'de> {
    fn read_entry<A: MapAccess<'de>>(&mut self, name: &str, map: &mut A) -> Result<(), A::Error> {
        match name {
            "api_key" => self.api_key = Some(map.next_value()?),
            "site_id" => self.site_id = Some(map.next_value()?),
            "sent_at" => self.sent_at = Some(map.next_value()?),
            "events" => {
                self.events = Some(map.next_value_seed(EventsSeed {
                    max: self.max_events,
                })?)
            }
            _ => {
                map.next_value::<Skip>()?;
            }
        }
        Ok(())
    }
}

impl<'de> ObjectFields<'de> for IdentifyFields<'de> {
    fn read_entry<A: MapAccess<'de>>(&mut self, name: &str, map: &mut A) -> Result<(), A::Error> {
        let slot = match name {
            "api_key" => &mut self.api_key,
            "site_id" => &mut self.site_id,
            "user_id" => &mut self.user_id,
            "anonymous_id" => &mut self.anonymous_id,
            "event_id" => &mut self.event_id,
            "timestamp" => &mut self.timestamp,
            "traits" => {
                self.traits = Some(map.next_value()?);
                return Ok(());
            }
            _ => {
                map.next_value::<Skip>()?;
                return Ok(());
            }
        };
        *slot = Some(map.next_value()?);
        Ok(())
    }
}

fn read_object<'de, T: ObjectFields<'de>, A: MapAccess<'de>>(
    mut fields: T,
    mut map: A,
) -> Result<T, A::Error> {
    while let Some(Key(name)) = map.next_key()? {
        fields.read_entry(&name, &mut map)?;
    }
    Ok(fields)
}

/// The `visit_*` methods of every JSON scalar (and `null`), each answering `$value`: for
/// visitors that only care whether a value is an object or an array.
macro_rules! scalars_answer {
    ($value:expr) => {
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
}

/// A value that must be an object of `T`'s fields; anything else is read and dropped.
enum ObjectOr<T> {
    Object(T),
    Other,
}

/// Reads an [`ObjectOr`] into the given empty fields (which may carry settings, such as
/// a batch's limit).
struct ObjectSeed<T>(T);

impl<'de, T: ObjectFields<'de>> DeserializeSeed<'de> for ObjectSeed<T> {
    type Value = ObjectOr<T>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        struct V<T>(T);
        impl<'de, T: ObjectFields<'de>> Visitor<'de> for V<T> {
            type Value = ObjectOr<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                read_object(self.0, map).map(ObjectOr::Object)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                drain_seq(seq).map(|()| ObjectOr::Other)
            }
            scalars_answer!(ObjectOr::Other);
        }
        d.deserialize_any(V(self.0))
    }
}

impl<'de, T: ObjectFields<'de>> Deserialize<'de> for ObjectOr<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        ObjectSeed(T::default()).deserialize(d)
    }
}

/// Reads a batch's `events`, keeping at most `max` of them.
struct EventsSeed {
    max: usize,
}

impl<'de> DeserializeSeed<'de> for EventsSeed {
    type Value = Events<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        struct V {
            max: usize,
        }
        impl<'de> Visitor<'de> for V {
            type Value = Events<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<ObjectOr<EventFields<'de>>>()? {
                    if items.len() == self.max {
                        // One past the limit: the answer is decided. The rest is still
                        // read (the body must be JSON) but nothing of it is built.
                        drain_seq(seq)?;
                        return Ok(Events::TooMany);
                    }
                    items.push(match item {
                        ObjectOr::Object(fields) => Item::Event(fields),
                        ObjectOr::Other => Item::NotAnObject,
                    });
                }
                Ok(Events::List(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                drain_map(map).map(|()| Events::NotAList)
            }
            scalars_answer!(Events::NotAList);
        }
        d.deserialize_any(V { max: self.max })
    }
}

impl<'de> Deserialize<'de> for Field<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Field<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E>(self, b: bool) -> Result<Self::Value, E> {
                Ok(Field::Bool(b))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Self::Value, E> {
                Ok(match u64::try_from(n) {
                    Ok(u) => Field::Unsigned(u),
                    Err(_) => Field::Negative(n),
                })
            }
            fn visit_u64<E>(self, n: u64) -> Result<Self::Value, E> {
                Ok(Field::Unsigned(n))
            }
            fn visit_f64<E>(self, n: f64) -> Result<Self::Value, E> {
                Ok(Field::Float(n))
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Self::Value, E> {
                Ok(Field::Str(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
                Ok(Field::Str(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E>(self, s: String) -> Result<Self::Value, E> {
                Ok(Field::Str(Cow::Owned(s)))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Field::Null)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                drain_seq(seq).map(|()| Field::Composite)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                drain_map(map).map(|()| Field::Composite)
            }
        }
        d.deserialize_any(V)
    }
}

/// An object key, borrowed when it holds no escape.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E>(self, s: String) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(s)))
            }
        }
        d.deserialize_str(V)
    }
}

/// Any JSON value, read in full and dropped. Unlike `serde::de::IgnoredAny` (which
/// serde_json skips without decoding strings), every string is decoded, so invalid UTF-8
/// and lone surrogates are refused wherever they are, as a full parse would.
struct Skip;

impl<'de> Deserialize<'de> for Skip {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Skip;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            scalars_answer!(Skip);
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Skip, A::Error> {
                drain_seq(seq).map(|()| Skip)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Skip, A::Error> {
                drain_map(map).map(|()| Skip)
            }
        }
        d.deserialize_any(V)
    }
}

fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<Skip>()?.is_some() {}
    Ok(())
}

fn drain_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<Skip, Skip>()?.is_some() {}
    Ok(())
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            BodyError::Json(e) => e.fmt(f),
            BodyError::NotAnObject => f.write_str("the body must be a JSON object"),
        }
    }
}

impl std::error::Error for BodyError {}

/// JSON values for property tests, shared by the tests of the body reader and of the
/// request decoder.
#[cfg(test)]
pub(crate) mod arbitrary {
    use proptest::prelude::*;
    use serde_json::{json, Value};

    /// Any JSON value: objects take their keys from `keys`; `depth`, `size` and `items`
    /// bound the nesting, the total number of nodes, and the items of one collection.
    pub(crate) fn json_value(
        keys: impl Strategy<Value = String> + Clone + 'static,
        depth: u32,
        size: u32,
        items: u32,
    ) -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<u64>().prop_map(|n| json!(n)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| json!(f)),
            any::<String>().prop_map(Value::String),
        ];
        let n = items as usize;
        leaf.prop_recursive(depth, size, items, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..n).prop_map(Value::Array),
                prop::collection::vec((keys.clone(), inner), 0..n)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn event(body: &str) -> EventFields<'_> {
        parse_event(body.as_bytes()).unwrap()
    }

    #[test]
    fn known_fields_are_read_and_plain_strings_borrowed() {
        let f = event(
            r#"{"api_key":"rb_1","site_id":"7","type":"pageview","pathname":"/a\"b",
               "screenWidth":1920,"screenHeight":-1,"timestamp":1.5,"properties":null,
               "event_id":[1,{"x":2}],"user_id":{"a":[]},"unknown":{"deep":[1,2,{"k":"v"}]}}"#,
        );
        assert!(matches!(f.api_key, Some(Field::Str(Cow::Borrowed("rb_1")))));
        assert!(matches!(f.site_id, Some(Field::Str(Cow::Borrowed("7")))));
        assert_eq!(f.event_type, Some(Field::Str("pageview".into())));
        // An escape makes the string owned, unescaped.
        assert!(matches!(&f.pathname, Some(Field::Str(Cow::Owned(s))) if s == "/a\"b"));
        assert_eq!(f.screen_width, Some(Field::Unsigned(1920)));
        assert_eq!(f.screen_height, Some(Field::Negative(-1)));
        assert_eq!(f.timestamp, Some(Field::Float(1.5)));
        assert_eq!(f.properties, Some(Field::Null));
        assert_eq!(f.event_id, Some(Field::Composite));
        assert_eq!(f.user_id, Some(Field::Composite));
        assert_eq!(f.hostname, None);
    }

    #[test]
    fn every_known_name_has_a_slot() {
        let mut f = EventFields::default();
        for name in EventFields::NAMES {
            assert!(f.slot(name).is_some(), "{name}");
        }
        assert!(f.slot("screenwidth").is_none());
    }

    #[test]
    fn the_last_of_a_repeated_field_wins_and_escaped_keys_match() {
        let f = event(r#"{"site_id":1,"site_id":"2","p\u0061thname":"/x"}"#);
        assert_eq!(f.site_id, Some(Field::Str("2".into())));
        assert_eq!(f.pathname, Some(Field::Str("/x".into())));
    }

    #[test]
    fn anything_but_an_object_is_refused_and_skipped_values_are_still_checked() {
        for other in ["[1]", "1", "\"x\"", "null", "true", "[{\"site_id\":1}]"] {
            assert!(
                matches!(parse_event(other.as_bytes()), Err(BodyError::NotAnObject)),
                "{other}"
            );
        }
        let deep = format!(r#"{{"x":{}1{}}}"#, "[".repeat(200), "]".repeat(200));
        for bad in [
            &br#"{"x":"\ud800"}"#[..],
            b"{\"x\":\"\xff\"}",
            b"{\"\xff\":1}",
            br#"{"x":[1,]}"#,
            br#"{"x":1e400}"#,
            br#"{"x":NaN}"#,
            br#"{"a":1} x"#,
            br#"{"a":1"#,
            deep.as_bytes(),
        ] {
            assert!(
                matches!(parse_event(bad), Err(BodyError::Json(_))),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn a_batch_has_its_envelope_and_its_events() {
        let b = parse_batch(br#"{"api_key":"k","site_id":3,"sent_at":1700000000000,"pathname":"/ignored","events":[{"pathname":"/a"},1,{}]}"#, 500).unwrap();
        assert_eq!(b.api_key, Some(Field::Str("k".into())));
        assert_eq!(b.site_id, Some(Field::Unsigned(3)));
        assert_eq!(b.sent_at, Some(Field::Unsigned(1_700_000_000_000)));
        let Some(Events::List(items)) = b.events else {
            panic!("events")
        };
        assert_eq!(items.len(), 3);
        assert!(matches!(&items[0], Item::Event(e) if e.pathname == Some(Field::Str("/a".into()))));
        assert_eq!(items[1], Item::NotAnObject);
        assert_eq!(items[2], Item::Event(EventFields::default()));
        for not_a_list in ["null", "{}", "\"x\"", "1"] {
            let body = format!(r#"{{"events":{not_a_list}}}"#);
            assert_eq!(
                parse_batch(body.as_bytes(), 500).unwrap().events,
                Some(Events::NotAList)
            );
        }
        assert_eq!(parse_batch(b"{}", 500).unwrap().events, None);
    }

    #[test]
    fn a_batch_keeps_at_most_its_limit_and_still_checks_the_rest() {
        let list = |n: usize| format!(r#"{{"events":[{}]}}"#, vec!["{}"; n].join(","));
        let (three, four) = (list(3), list(4));
        let at = parse_batch(three.as_bytes(), 3).unwrap();
        assert!(matches!(at.events, Some(Events::List(ref l)) if l.len() == 3));
        let over = parse_batch(four.as_bytes(), 3).unwrap();
        assert_eq!(over.events, Some(Events::TooMany));
        let zeros = format!(r#"{{"events":[{}]}}"#, vec!["0"; 100_000].join(","));
        assert_eq!(
            parse_batch(zeros.as_bytes(), 500).unwrap().events,
            Some(Events::TooMany)
        );
        // Past the limit the body must still be JSON.
        let broken = format!(r#"{{"events":[{},"\ud800"]}}"#, ["{}"; 10].join(","));
        assert!(matches!(
            parse_batch(broken.as_bytes(), 3),
            Err(BodyError::Json(_))
        ));
    }

    #[test]
    fn feature_flags_and_traits_are_kept_as_json_text() {
        let f = event(r#"{"feature_flags":{"a":"on","b":"off"},"lcp":1.5,"anonymous_id":"d1"}"#);
        assert_eq!(
            f.feature_flags.and_then(RawJson::text),
            Some(r#"{"a":"on","b":"off"}"#)
        );
        assert_eq!(f.lcp, Some(Field::Float(1.5)));
        assert_eq!(f.anonymous_id, Some(Field::Str("d1".into())));
        let i = parse_identify(
            br#"{"site_id":1,"user_id":"u","traits":{"plan":"pro","x":null},"other":[1]}"#,
        )
        .unwrap();
        assert_eq!(i.user_id, Some(Field::Str("u".into())));
        assert_eq!(
            i.traits.and_then(RawJson::text),
            Some(r#"{"plan":"pro","x":null}"#)
        );
        assert!(matches!(
            parse_identify(b"[1]"),
            Err(BodyError::NotAnObject)
        ));
    }

    mod props {
        use super::super::arbitrary;
        use super::*;
        use proptest::prelude::*;

        /// The known names, and two unknown ones.
        fn names() -> Vec<&'static str> {
            let mut names = EventFields::NAMES.to_vec();
            names.extend(["other", ""]);
            names
        }

        fn json_value() -> impl Strategy<Value = Value> {
            arbitrary::json_value(
                prop::sample::select(names()).prop_map(str::to_string),
                4,
                64,
                6,
            )
        }

        /// What a field read from `v` must be.
        fn field_of(v: &Value) -> Field<'_> {
            match v {
                Value::Null => Field::Null,
                Value::Bool(b) => Field::Bool(*b),
                Value::Number(n) => match (n.as_u64(), n.as_i64()) {
                    (Some(u), _) => Field::Unsigned(u),
                    (None, Some(i)) => Field::Negative(i),
                    _ => Field::Float(n.as_f64().unwrap()),
                },
                Value::String(s) => Field::Str(Cow::Borrowed(s)),
                Value::Array(_) | Value::Object(_) => Field::Composite,
            }
        }

        /// `parse_event` accepts `bytes` exactly when a full parse gives an object, and
        /// calls them not an object exactly when they are JSON of another kind.
        fn same_answer_as_a_full_parse(bytes: &[u8]) -> Result<(), TestCaseError> {
            let full = serde_json::from_slice::<Value>(bytes);
            match parse_event(bytes) {
                Ok(_) => prop_assert!(matches!(full, Ok(Value::Object(_)))),
                Err(BodyError::NotAnObject) => {
                    prop_assert!(matches!(full, Ok(ref v) if !v.is_object()))
                }
                Err(BodyError::Json(_)) => prop_assert!(full.is_err()),
            }
            Ok(())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            // Any bytes: accepted exactly when a full parse gives an object.
            #[test]
            fn accepts_what_a_full_parse_accepts(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
                same_answer_as_a_full_parse(&bytes)?;
            }

            // Valid JSON, then damaged: the same answer as a full parse, for inputs near
            // the grammar's edges rather than random noise.
            #[test]
            fn damaged_json_as_a_full_parse(v in json_value(), edits in prop::collection::vec((any::<usize>(), any::<u8>()), 0..3)) {
                let mut bytes = serde_json::to_vec(&v).unwrap();
                for (at, b) in edits {
                    let i = at % bytes.len();
                    bytes[i] = b;
                }
                same_answer_as_a_full_parse(&bytes)?;
            }

            // Any object, with repeated and nested names: each known field is what a full
            // parse of the same text holds under its name (the last one given).
            #[test]
            fn reads_each_field_as_a_full_parse(entries in prop::collection::vec((prop::sample::select(names()), json_value()), 0..12)) {
                let text = format!("{{{}}}", entries.iter()
                    .map(|(k, v)| format!("{}:{}", json!(k), v))
                    .collect::<Vec<_>>().join(","));
                let full: serde_json::Map<String, Value> = serde_json::from_str(&text).unwrap();
                let mut fields = parse_event(text.as_bytes()).unwrap();
                for name in names() {
                    let read = fields.slot(name).map(|slot| slot.take());
                    if let Some(read) = read {
                        prop_assert_eq!(read, full.get(name).map(field_of), "{}", name);
                    }
                }
            }
        }
    }
}
