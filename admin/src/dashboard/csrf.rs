//! CSRF protection. Every form carries the session's token in a hidden `csrf` field and
//! `login::require_session` checks it on every POST; the API takes it in the
//! `X-CSRF-Token` header when a request is authenticated by the session cookie. The
//! login form, which has no session yet, uses a double-submit cookie instead.
//! (`SameSite=Strict` cookies already keep other sites out; this is the second lock.)

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

pub const FIELD: &str = "csrf";
pub const HEADER: &str = "x-csrf-token";

/// 256 random bits, hex: session ids and CSRF tokens.
pub fn random_token() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system's random source failed");
    hex::encode(bytes)
}

/// Compares secrets in constant time. Hashing first makes the time independent of the
/// lengths too, so a guess learns nothing from how long the comparison took.
pub fn same_secret(given: &str, expected: &str) -> bool {
    let a = Sha256::digest(given.as_bytes());
    let b = Sha256::digest(expected.as_bytes());
    bool::from(a.ct_eq(&b))
}

/// The value of `name` in an `application/x-www-form-urlencoded` body.
pub fn form_field(body: &[u8], name: &str) -> Option<String> {
    serde_urlencoded::from_bytes::<Vec<(String, String)>>(body)
        .ok()?
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_hex() {
        let a = random_token();
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(a, random_token());
    }

    #[test]
    fn secrets_compare_exactly() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "abcd"));
        assert!(!same_secret("", "abc"));
    }

    #[test]
    fn form_fields() {
        let body = b"domain=a.com&csrf=t%2B1&name=x";
        assert_eq!(form_field(body, "csrf").as_deref(), Some("t+1"));
        assert_eq!(form_field(body, "missing"), None);
        assert_eq!(form_field(b"%%%", "csrf"), None);
    }
}
