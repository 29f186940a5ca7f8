//! Decoding a message of `events.raw`; what cannot be decoded goes to the DLQ with a reason.

use rivulet_common::event::{IdentifyMessage, RawEvent, VersionProbe, RAW_EVENT_VERSION};

/// A message of `events.raw`: an event, or an identify call.
// Nearly every message is an event: boxing it would add an allocation per event.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, PartialEq)]
pub enum Message {
    Event(RawEvent),
    Identify(IdentifyMessage),
}

#[derive(Debug, PartialEq)]
pub enum Poison {
    Empty,
    NotJson(String),
    UnknownVersion(Option<u32>),
    Invalid(String),
}

impl Poison {
    pub fn reason(&self) -> String {
        match self {
            Poison::Empty => "empty message".into(),
            Poison::NotJson(e) => format!("not JSON: {e}"),
            Poison::UnknownVersion(Some(v)) => {
                format!("unknown message version {v} (this enricher reads {RAW_EVENT_VERSION})")
            }
            Poison::UnknownVersion(None) => "message has no version field".into(),
            Poison::Invalid(e) => format!("invalid raw event: {e}"),
        }
    }
}

pub fn decode(payload: Option<&[u8]>) -> Result<Message, Poison> {
    let bytes = payload.filter(|p| !p.is_empty()).ok_or(Poison::Empty)?;
    // One parse for the usual message (an event); only a failure is parsed again, as an
    // identify call (which has no `type`) and then to say why.
    match serde_json::from_slice::<RawEvent>(bytes) {
        Ok(ev) if ev.v != RAW_EVENT_VERSION => Err(Poison::UnknownVersion(Some(ev.v))),
        Ok(ev) if ev.site_id == 0 => Err(Poison::Invalid("site_id is 0".into())),
        Ok(ev) => Ok(Message::Event(ev)),
        Err(invalid) => {
            if let Ok(id) = serde_json::from_slice::<IdentifyMessage>(bytes) {
                if id.v == RAW_EVENT_VERSION && id.site_id != 0 && !id.user_id.is_empty() {
                    return Ok(Message::Identify(id));
                }
            }
            let probe: VersionProbe =
                serde_json::from_slice(bytes).map_err(|e| Poison::NotJson(e.to_string()))?;
            if probe.v != Some(RAW_EVENT_VERSION) {
                return Err(Poison::UnknownVersion(probe.v));
            }
            Err(Poison::Invalid(invalid.to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poison_kinds() {
        assert_eq!(decode(None), Err(Poison::Empty));
        assert!(matches!(decode(Some(b"{nope")), Err(Poison::NotJson(_))));
        assert_eq!(
            decode(Some(br#"{"v":2}"#)),
            Err(Poison::UnknownVersion(Some(2)))
        );
        assert_eq!(
            decode(Some(br#"{"x":1}"#)),
            Err(Poison::UnknownVersion(None))
        );
        assert!(matches!(
            decode(Some(br#"{"v":1,"site_id":"x"}"#)),
            Err(Poison::Invalid(_))
        ));
    }

    #[test]
    fn valid_event() {
        let raw = br#"{"v":1,"event_id":"0190d6a0-0000-7000-8000-000000000001","site_id":3,"key_id":"key_1","type":"pageview","timestamp":1700000000000,"received_at":1700000000001,"ip":"1.2.3.4","user_agent":"x","future":true}"#;
        let Message::Event(ev) = decode(Some(raw)).unwrap() else {
            panic!("an event")
        };
        assert_eq!(ev.site_id, 3);
        assert_eq!((ev.client_timestamp, ev.sent_at), (None, None));
    }

    /// The client's times are optional fields of version 1: a message with them is read,
    /// and one without them (from an ingest before them) still is.
    #[test]
    fn an_event_with_the_clients_times() {
        let raw = br#"{"v":1,"event_id":"0190d6a0-0000-7000-8000-000000000001","site_id":3,"key_id":"key_1","type":"pageview","timestamp":1700000000000,"received_at":1700000000001,"client_timestamp":1699996400000,"sent_at":1699999999000,"ip":"1.2.3.4","user_agent":"x"}"#;
        let Message::Event(ev) = decode(Some(raw)).unwrap() else {
            panic!("an event")
        };
        assert_eq!(
            (ev.client_timestamp, ev.sent_at),
            (Some(1_699_996_400_000), Some(1_699_999_999_000))
        );
    }

    #[test]
    fn identify_calls_are_recognised_and_need_a_user() {
        let raw = br#"{"v":1,"kind":"identify","event_id":"0190d6a0-0000-7000-8000-000000000001","site_id":3,"key_id":"key_1","timestamp":1700000000000,"received_at":1700000000001,"user_id":"u1","anonymous_id":"d1","traits":"{\"plan\":\"pro\"}"}"#;
        let Message::Identify(id) = decode(Some(raw)).unwrap() else {
            panic!("an identify call")
        };
        assert_eq!(
            (id.user_id.as_str(), id.anonymous_id.as_deref()),
            ("u1", Some("d1"))
        );
        let no_user = br#"{"v":1,"kind":"identify","event_id":"0190d6a0-0000-7000-8000-000000000001","site_id":3,"key_id":"k","timestamp":1,"received_at":1,"user_id":""}"#;
        assert!(matches!(decode(Some(no_user)), Err(Poison::Invalid(_))));
    }
}
