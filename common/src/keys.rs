//! API keys: `rb_` + 32 lowercase hex characters (128 bits from the OS CSPRNG).
//! Only the SHA-256 of a key is stored or cached; the key itself is shown once.

use sha2::{Digest, Sha256};
use std::fmt;

pub const KEY_PREFIX: &str = "rb_";
const KEY_HEX_LEN: usize = 32;

/// A well-formed API key. `Debug` and `Display` never print the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

/// The hex SHA-256 of an API key: what the registry and the caches hold.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KeyHash(pub String);

/// The SHA-256 of an API key, unencoded: what ingest's in-process cache is keyed by.
pub type KeyDigest = [u8; 32];

impl KeyHash {
    pub fn from_digest(digest: &KeyDigest) -> Self {
        KeyHash(hex::encode(digest))
    }

    /// The digest this hash encodes; `None` if it is not 64 hex digits.
    pub fn digest(&self) -> Option<KeyDigest> {
        let mut d = [0u8; 32];
        hex::decode_to_slice(&self.0, &mut d).ok().map(|()| d)
    }
}

/// The digest of `s` if it is a well-formed key (as `ApiKey::parse` checks), without
/// copying the secret: the request path's form of `ApiKey::parse(s)?.hash()`.
pub fn digest_if_well_formed(s: &str) -> Option<KeyDigest> {
    is_well_formed(s).then(|| Sha256::digest(s.as_bytes()).into())
}

fn is_well_formed(s: &str) -> bool {
    s.strip_prefix(KEY_PREFIX).is_some_and(|hex_part| {
        hex_part.len() == KEY_HEX_LEN
            && hex_part
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

impl ApiKey {
    /// A fresh key from the operating system's CSPRNG.
    pub fn generate() -> Self {
        let mut bytes = [0u8; KEY_HEX_LEN / 2];
        getrandom::fill(&mut bytes).expect("the operating system's random source failed");
        ApiKey(format!("{KEY_PREFIX}{}", hex::encode(bytes)))
    }

    /// Accepts exactly `rb_` + 32 lowercase hex digits. Nothing is trimmed or case-folded:
    /// a key is a secret compared byte for byte, so variants are simply invalid.
    pub fn parse(s: &str) -> Option<Self> {
        is_well_formed(s).then(|| ApiKey(s.to_string()))
    }

    pub fn hash(&self) -> KeyHash {
        KeyHash::from_digest(&Sha256::digest(self.0.as_bytes()).into())
    }

    /// The part shown in listings to tell keys apart (`rb_1a2b3c4d`): 32 of 128 bits.
    pub fn display_prefix(&self) -> String {
        self.0[..KEY_PREFIX.len() + 8].to_string()
    }

    /// The secret itself, for the one time it is shown to its owner.
    pub fn reveal(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ApiKey({}…)", self.display_prefix())
    }
}

/// What a key may do. A key may have several; one recorded before scopes existed (none
/// listed) is [`INGEST_WRITE`].
pub const INGEST_WRITE: &str = "ingest:write";
/// Read a site's statistics (`POST /api/v2/query`).
pub const STATS_READ: &str = "stats:read";
/// Every scope, for messages.
pub const SCOPES: &[&str] = &[INGEST_WRITE, STATS_READ];

/// Scopes as given (`--scope`, the admin API): known names, each once, at least one
/// (none given: [`INGEST_WRITE`]), in [`SCOPES`]' order.
pub fn parse_scopes<S: AsRef<str>>(given: &[S]) -> Result<Vec<String>, String> {
    for s in given {
        let s = s.as_ref();
        if !SCOPES.contains(&s) {
            return Err(format!("{s:?} is not a scope: use {}", SCOPES.join(" or ")));
        }
    }
    let mut scopes: Vec<String> = SCOPES
        .iter()
        .filter(|known| given.iter().any(|g| g.as_ref() == **known))
        .map(|s| s.to_string())
        .collect();
    if scopes.is_empty() {
        scopes.push(INGEST_WRITE.to_string());
    }
    Ok(scopes)
}

/// A public identifier for a key (`key_` + 16 hex), used to list and revoke it.
pub fn new_key_id() -> String {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).expect("the operating system's random source failed");
    format!("key_{}", hex::encode(bytes))
}

pub fn is_key_id(s: &str) -> bool {
    s.strip_prefix("key_")
        .is_some_and(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_are_known_names_in_order_and_default_to_ingest() {
        assert_eq!(parse_scopes::<&str>(&[]).unwrap(), [INGEST_WRITE]);
        assert_eq!(
            parse_scopes(&["stats:read", "ingest:write", "stats:read"]).unwrap(),
            [INGEST_WRITE, STATS_READ]
        );
        assert!(parse_scopes(&["stats:write"])
            .unwrap_err()
            .contains("ingest:write or stats:read"));
    }

    #[test]
    fn generated_keys_are_well_formed_and_distinct() {
        let a = ApiKey::generate();
        let b = ApiKey::generate();
        assert!(ApiKey::parse(a.reveal()).is_some());
        assert_ne!(a, b);
        assert_eq!(a.reveal().len(), 35);
        assert_eq!(a.hash().0.len(), 64);
    }

    #[test]
    fn parse_rejects_variants() {
        let k = ApiKey::generate();
        let s = k.reveal();
        assert!(ApiKey::parse(&s.to_uppercase()).is_none());
        assert!(ApiKey::parse(&format!(" {s}")).is_none());
        assert!(ApiKey::parse(&format!("{s} ")).is_none());
        assert!(ApiKey::parse(&s[..34]).is_none());
        assert!(ApiKey::parse(&format!("{s}0")).is_none());
        assert!(ApiKey::parse("rb_").is_none());
        assert!(ApiKey::parse("xx_0123456789abcdef0123456789abcdef").is_none());
    }

    #[test]
    fn debug_never_shows_the_secret() {
        let k = ApiKey::generate();
        let shown = format!("{k:?}");
        assert!(!shown.contains(k.reveal()));
    }

    #[test]
    fn key_hash_is_sha256_hex() {
        let k = ApiKey::parse("rb_0123456789abcdef0123456789abcdef").unwrap();
        assert_eq!(
            k.hash().0,
            hex::encode(Sha256::digest(b"rb_0123456789abcdef0123456789abcdef"))
        );
        assert_eq!(k.display_prefix(), "rb_01234567");
        let digest = digest_if_well_formed(k.reveal()).unwrap();
        assert_eq!(KeyHash::from_digest(&digest), k.hash());
        assert_eq!(k.hash().digest(), Some(digest));
        assert_eq!(KeyHash("zz".into()).digest(), None);
    }

    #[test]
    fn digest_only_for_well_formed_keys() {
        let k = ApiKey::generate();
        let s = k.reveal();
        for bad in [
            s.to_uppercase(),
            format!(" {s}"),
            s[..34].to_string(),
            "rb_".into(),
        ] {
            assert_eq!(
                ApiKey::parse(&bad).is_some(),
                digest_if_well_formed(&bad).is_some()
            );
            assert!(digest_if_well_formed(&bad).is_none());
        }
    }
}
