//! Visitor ids without cookies or stored IPs.
//!
//! `visitor_id = HMAC-SHA256(daily_salt, site ‖ ip ‖ user agent)`, truncated to 128 bits
//! (32 hex characters), with `daily_salt = HMAC-SHA256(secret, "rivulet visitor salt" ‖
//! day)`. Every replica that holds the same secret computes the same id for the same
//! visitor on the same UTC day without coordinating, and the id changes every day, so a
//! visitor cannot be followed across days. Whoever holds the secret can recompute any
//! day's salt: keep it secret; rotating it changes every id from then on.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

const MS_PER_DAY: i64 = 86_400_000;

/// Days since the Unix epoch (UTC) of a time in epoch milliseconds, for [`visitor_id`].
/// Derive it from the event's own time (not the clock) so that a redelivered event gets
/// the same id.
pub fn day_of(epoch_ms: i64) -> u32 {
    u32::try_from(epoch_ms.div_euclid(MS_PER_DAY)).unwrap_or(0)
}

/// The salt of one day, derived from the secret.
pub fn daily_salt(secret: &[u8], day: u32) -> [u8; 32] {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(b"rivulet visitor salt\0");
    mac.update(&day.to_be_bytes());
    mac.finalize().into_bytes().into()
}

/// The anonymous id of a visitor of `site_id` on `day` (see [`day_of`]): 32 lower-case
/// hex characters.
pub fn visitor_id(secret: &[u8], day: u32, site_id: u32, ip: &str, user_agent: &str) -> String {
    id_under(salt_key(secret, day), site_id, ip, user_agent)
}

/// The day's salt as an HMAC key, ready to take a visitor's bytes.
fn salt_key(secret: &[u8], day: u32) -> HmacSha256 {
    HmacSha256::new_from_slice(&daily_salt(secret, day)).expect("HMAC takes keys of any length")
}

/// The visitor id under a day's salt key (see [`salt_key`]).
fn id_under(mut mac: HmacSha256, site_id: u32, ip: &str, user_agent: &str) -> String {
    mac.update(&site_id.to_be_bytes());
    // Length-prefixed so that no two (ip, user agent) pairs feed the same bytes.
    mac.update(&(ip.len() as u64).to_be_bytes());
    mac.update(ip.as_bytes());
    mac.update(user_agent.as_bytes());
    hex::encode(&mac.finalize().into_bytes()[..16])
}

/// [`visitor_id`] for one secret, keeping the last day's salt ready as an HMAC key: it
/// is the same for every event of that day, and deriving it again cost two thirds of
/// the id.
pub struct VisitorIds {
    secret: Vec<u8>,
    last_day: std::sync::Mutex<Option<(u32, HmacSha256)>>,
}

impl VisitorIds {
    pub fn new(secret: Vec<u8>) -> Self {
        VisitorIds {
            secret,
            last_day: std::sync::Mutex::new(None),
        }
    }

    /// The same as [`visitor_id`] with this secret.
    pub fn id(&self, day: u32, site_id: u32, ip: &str, user_agent: &str) -> String {
        let key = {
            let mut last = self.last_day.lock().unwrap_or_else(|p| p.into_inner());
            match &*last {
                Some((d, key)) if *d == day => key.clone(),
                _ => {
                    let key = salt_key(&self.secret, day);
                    *last = Some((day, key.clone()));
                    key
                }
            }
        };
        id_under(key, site_id, ip, user_agent)
    }
}

/// The `user_id` column: the user id the client supplied when it is not blank, else the
/// visitor id (computed only then).
pub fn user_id(supplied: Option<&str>, visitor_id: impl FnOnce() -> String) -> String {
    match supplied {
        Some(id) if !id.trim().is_empty() => id.to_string(),
        _ => visitor_id(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"test secret";
    const UA: &str = "Mozilla/5.0 (X11; Linux x86_64)";

    #[test]
    fn visitor_id_is_32_hex_and_stable_for_the_same_inputs() {
        let id = visitor_id(SECRET, 20_000, 1, "203.0.113.7", UA);
        assert_eq!(id.len(), 32);
        assert!(id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_eq!(id, visitor_id(SECRET, 20_000, 1, "203.0.113.7", UA));
    }

    #[test]
    fn visitor_id_changes_with_each_input() {
        let base = visitor_id(SECRET, 20_000, 1, "203.0.113.7", UA);
        for other in [
            visitor_id(b"other secret", 20_000, 1, "203.0.113.7", UA),
            visitor_id(SECRET, 20_001, 1, "203.0.113.7", UA),
            visitor_id(SECRET, 20_000, 2, "203.0.113.7", UA),
            visitor_id(SECRET, 20_000, 1, "203.0.113.8", UA),
            visitor_id(SECRET, 20_000, 1, "203.0.113.7", "curl/8.0"),
            // The boundary between ip and user agent matters.
            visitor_id(
                SECRET,
                20_000,
                1,
                "203.0.113.7M",
                "ozilla/5.0 (X11; Linux x86_64)",
            ),
        ] {
            assert_ne!(base, other);
        }
    }

    #[test]
    fn visitor_ids_with_a_kept_salt_are_the_same_ids() {
        let ids = VisitorIds::new(SECRET.to_vec());
        for (day, ip) in [
            (20_000, "203.0.113.7"),
            (20_000, "::1"),
            (20_001, "203.0.113.7"),
            (20_000, "10.0.0.1"),
        ] {
            assert_eq!(ids.id(day, 3, ip, UA), visitor_id(SECRET, day, 3, ip, UA));
        }
    }

    #[test]
    fn day_of_uses_utc_days() {
        assert_eq!(day_of(0), 0);
        assert_eq!(day_of(MS_PER_DAY - 1), 0);
        assert_eq!(day_of(MS_PER_DAY), 1);
        // 2024-01-01T00:00:00Z
        assert_eq!(day_of(1_704_067_200_000), 19_723);
        assert_eq!(day_of(-1), 0, "times before 1970 are clamped");
    }

    #[test]
    fn user_id_prefers_the_supplied_one() {
        let visitor = || "v".repeat(32);
        assert_eq!(user_id(Some("user-42"), visitor), "user-42");
        assert_eq!(user_id(Some(""), visitor), visitor());
        assert_eq!(user_id(Some("  "), visitor), visitor());
        assert_eq!(user_id(None, visitor), visitor());
        assert_eq!(user_id(Some("user-42"), || panic!("not needed")), "user-42");
    }
}
