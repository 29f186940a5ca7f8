//! The data of the ClickHouse compatibility test (`compat/README.md`): a
//! deterministic, realistic set of registry rows and enriched events, and the bind values
//! each statement of `schema::queries::ALL` is run with.
//!
//! Deterministic, so that the same rows go into ClickHouse 18.16 and into the current
//! engine (chDB), and the same bound statements must give the same answers on both.
//! Realistic: a few sites (one renamed, one deleted), keys (one revoked), events of the
//! shapes the enricher writes (pageviews and custom events, bots, unknown geo, Unicode,
//! strings longer than 127 bytes, IPv4 and IPv6), and redelivered duplicates.

use rivulet_common::registry::{KeyRecord, Site};
use rivulet_common::schema::events::EventRow;
use uuid::Uuid;

/// A fixed "now" (2026-01-01T00:00:00Z), for data that must be the same on every run
/// (the measurements). The compatibility test uses the time it runs at, so that the
/// dashboard's Overview, which asks for the last 24 hours, finds its rows.
pub const FIXED_NOW: u32 = 1_767_225_600;

/// The Overview's window at `now`: the current hour and the 23 before it (as the
/// dashboard computes it).
pub fn window_start(now: u32) -> u32 {
    now / 3600 * 3600 - 23 * 3600
}

/// splitmix64: small, fast, and the same sequence on every machine.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// 0..n
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    /// An index into `weights`, drawn in proportion to them.
    pub fn weighted(&mut self, weights: &[u64]) -> usize {
        let total: u64 = weights.iter().sum();
        let mut x = self.below(total);
        for (i, w) in weights.iter().enumerate() {
            if x < *w {
                return i;
            }
            x -= w;
        }
        weights.len() - 1
    }
    /// Popular items far more often: index i with weight 1/(i+1).
    pub fn skewed(&mut self, n: usize) -> usize {
        let weights: Vec<u64> = (0..n as u64).map(|i| 10_000 / (i + 1)).collect();
        self.weighted(&weights)
    }
    pub fn hex(&mut self, digits: usize) -> String {
        let mut s = String::with_capacity(digits + 16);
        while s.len() < digits {
            s.push_str(&format!("{:016x}", self.next_u64()));
        }
        s.truncate(digits);
        s
    }
}

/// Rows of the registry and events, in the order they are written.
pub struct Dataset {
    /// Every event is before this time.
    pub now: u32,
    /// Every version of every site, oldest first (a rename and a deletion add versions).
    pub sites: Vec<Site>,
    /// Every version of every key (a revocation adds one).
    pub keys: Vec<KeyRecord>,
    /// Events as the enricher writes them, redelivered duplicates included.
    pub events: Vec<EventRow>,
}

/// Sites: 1 and 3 plain, 2 renamed (two versions), 4 deleted (two versions).
pub const SITE_IDS: &[u32] = &[1, 2, 3, 4];
pub const DELETED_SITE: u32 = 4;
/// An id no row has.
pub const MISSING_SITE: u32 = 999;

fn registry(rng: &mut Rng, now: u32) -> (Vec<Site>, Vec<KeyRecord>) {
    let created = now - 90 * 86_400;
    let site = |site_id: u32, domain: &str, name: &str, at: u32, deleted: u8, version: u64| Site {
        site_id,
        domain: domain.into(),
        name: name.into(),
        created_at: at,
        deleted,
        version,
        domain_list: vec![domain.into(), format!("www.{domain}")],
        allow_subdomains: u8::from(site_id == 1),
        retention_days: if site_id == 3 { 400 } else { 0 },
    };
    let sites = vec![
        site(1, "shop.example.com", "Shop", created, 0, 1_000_001),
        site(2, "blog.example.org", "Blog", created + 60, 0, 1_000_002),
        site(
            2,
            "blog.example.org",
            "Blög — «renamed» ✓",
            created + 60,
            0,
            1_000_010,
        ),
        site(
            3,
            "docs.example.net",
            "docs.example.net",
            created + 120,
            0,
            1_000_003,
        ),
        site(4, "old.example.com", "Old", created + 180, 0, 1_000_004),
        site(4, "old.example.com", "Old", created + 180, 1, 1_000_020),
    ];
    let mut key = |site_id: u32, at: u32, version: u64| {
        let secret = rng.hex(32);
        KeyRecord {
            // The hash's shape (64 hex digits); the secret itself is never stored.
            key_hash: rng.hex(64),
            key_id: format!("key_{}", rng.hex(16)),
            key_prefix: format!("rb_{}", &secret[..8]),
            site_id,
            created_at: at,
            revoked_at: 0,
            revoked: 0,
            version,
        }
    };
    let k1 = key(1, created + 1, 2_000_001);
    let k2 = key(1, created + 2, 2_000_002);
    // Two keys of one site created in the same second: ordered by key_id.
    let mut k3 = key(1, created + 2, 2_000_003);
    let k4 = key(2, created + 61, 2_000_004);
    let k5 = key(4, created + 181, 2_000_005);
    if k3.key_id < k2.key_id {
        k3.key_id = format!("key_f{}", &k3.key_id[5..]);
    }
    let mut k2_revoked = k2.clone();
    k2_revoked.revoked = 1;
    k2_revoked.revoked_at = created + 86_400;
    k2_revoked.version = 2_000_100;
    let keys = vec![k1, k2, k3, k4, k5, k2_revoked];
    (sites, keys)
}

struct Place {
    country: &'static str,
    region: &'static str,
    city: &'static str,
    lat: f64,
    lon: f64,
}

const PLACES: &[Place] = &[
    Place {
        country: "GB",
        region: "ENG",
        city: "London",
        lat: 51.5142,
        lon: -0.0931,
    },
    Place {
        country: "US",
        region: "CA",
        city: "San Francisco",
        lat: 37.7749,
        lon: -122.4194,
    },
    Place {
        country: "DE",
        region: "BE",
        city: "Berlin",
        lat: 52.52,
        lon: 13.405,
    },
    Place {
        country: "FR",
        region: "IDF",
        city: "Paris",
        lat: 48.8566,
        lon: 2.3522,
    },
    Place {
        country: "JP",
        region: "13",
        city: "Tokyo",
        lat: 35.6895,
        lon: 139.6917,
    },
    Place {
        country: "BR",
        region: "SP",
        city: "São Paulo",
        lat: -23.5505,
        lon: -46.6333,
    },
    Place {
        country: "IN",
        region: "MH",
        city: "Mumbai",
        lat: 19.076,
        lon: 72.8777,
    },
    Place {
        country: "US",
        region: "NY",
        city: "New York",
        lat: 40.7128,
        lon: -74.006,
    },
    Place {
        country: "NL",
        region: "NH",
        city: "Amsterdam",
        lat: 52.3676,
        lon: 4.9041,
    },
    Place {
        country: "CA",
        region: "ON",
        city: "Toronto",
        lat: 43.6532,
        lon: -79.3832,
    },
    Place {
        country: "AU",
        region: "NSW",
        city: "Sydney",
        lat: -33.8688,
        lon: 151.2093,
    },
    Place {
        country: "SE",
        region: "AB",
        city: "Stockholm",
        lat: 59.3293,
        lon: 18.0686,
    },
    Place {
        country: "ES",
        region: "MD",
        city: "Madrid",
        lat: 40.4168,
        lon: -3.7038,
    },
    Place {
        country: "PL",
        region: "14",
        city: "Warszawa",
        lat: 52.2297,
        lon: 21.0122,
    },
    Place {
        country: "KR",
        region: "11",
        city: "서울",
        lat: 37.5665,
        lon: 126.978,
    },
    // Not found in the geo database: empty strings and zeros.
    Place {
        country: "",
        region: "",
        city: "",
        lat: 0.0,
        lon: 0.0,
    },
];

/// (browser, versions, operating systems that run it).
const BROWSERS: &[(&str, &[&str], &[usize])] = &[
    ("Chrome", &["120", "121", "122", "119"], &[0, 1, 2, 3]),
    ("Mobile Safari", &["17.2", "17.1", "16.6"], &[4]),
    ("Safari", &["17.2", "16.6"], &[1]),
    ("Firefox", &["121.0", "120.0", "115.0"], &[0, 1, 2]),
    ("Chrome Mobile", &["120.0.6099", "119.0.6045"], &[3]),
    ("Edge", &["120.0.2210", "119.0.2151"], &[0]),
    ("Samsung Internet", &["23.0", "22.0"], &[3]),
    ("Opera", &["105.0"], &[0, 2]),
];
const OSES: &[(&str, &[&str], &str)] = &[
    ("Windows", &["10", "11"], "Desktop"),
    ("Mac OS X", &["10.15.7", "14.2"], "Desktop"),
    ("Ubuntu", &["", "22.04"], "Desktop"),
    ("Android", &["14", "13", "12"], "Mobile"),
    ("iOS", &["17.2", "16.7", "17.1.2"], "Mobile"),
];
const BOTS: &[(&str, &str)] = &[
    ("Googlebot", "2.1"),
    ("bingbot", "2.0"),
    ("AhrefsBot", "7.0"),
];
const LANGUAGES: &[&str] = &[
    "en-US", "en-GB", "de-DE", "fr-FR", "ja-JP", "pt-BR", "es-ES", "nl-NL", "ko-KR", "",
];
const REFERRERS: &[(&str, &str)] = &[
    ("", "Direct"),
    ("https://www.google.com/", "Organic Search"),
    ("https://www.bing.com/", "Organic Search"),
    ("https://duckduckgo.com/", "Organic Search"),
    ("https://t.co/", "Organic Social"),
    ("https://www.facebook.com/", "Organic Social"),
    ("https://news.ycombinator.com/", "Referral"),
    ("https://github.com/", "Referral"),
    ("https://mail.google.com/", "Email"),
];
const PAGES: &[(&str, &str)] = &[
    ("/", "Home"),
    ("/pricing", "Pricing"),
    ("/blog", "Blog"),
    ("/docs/getting-started", "Getting started"),
    ("/products/42", "Product 42"),
    ("/products/7", "Product 7"),
    ("/cart", "Cart"),
    ("/checkout", "Checkout"),
    ("/about", "About us"),
    ("/contact", "Contact"),
    ("/blog/über-uns", "Über uns"),
    ("/blog/2025/12/year-in-review", "2025 — a year in review 🎉"),
    ("/search", "Search"),
    ("/login", "Log in"),
    ("/signup", "Sign up"),
    ("/docs/api/events", "Events API"),
    ("/careers", "Careers"),
    ("/legal/privacy", "Privacy"),
];
const CUSTOM: &[(&str, &str)] = &[
    ("signup", r#"{"plan":"pro"}"#),
    ("purchase", r#"{"amount":49.9,"currency":"EUR","items":2}"#),
    ("download", r#"{"file":"report.pdf"}"#),
    ("newsletter", "{}"),
    ("video_play", r#"{"title":"Démo","position":0}"#),
];
const SCREENS: &[(u16, u16)] = &[
    (1920, 1080),
    (1440, 900),
    (1536, 864),
    (390, 844),
    (412, 915),
    (1280, 720),
    (2560, 1440),
    (0, 0),
];

/// One realistic event of `site_id` at `timestamp`.
pub fn event(rng: &mut Rng, site_id: u32, timestamp: u32, users: u64) -> EventRow {
    let hostname = match site_id {
        1 => "shop.example.com",
        2 => "blog.example.org",
        3 => "docs.example.net",
        _ => "old.example.com",
    };
    let bot = rng.chance(3);
    let (browser, browser_version, os, os_version, device) = if bot {
        let (b, v) = BOTS[rng.below(BOTS.len() as u64) as usize];
        (b, v, "Other", "", "Spider")
    } else {
        let (b, versions, oses) = BROWSERS[rng.skewed(BROWSERS.len())];
        let v = versions[rng.below(versions.len() as u64) as usize];
        let (os, os_versions, device) = OSES[oses[rng.below(oses.len() as u64) as usize]];
        let ov = os_versions[rng.below(os_versions.len() as u64) as usize];
        let device = if device == "Mobile" && rng.chance(10) {
            "Tablet"
        } else {
            device
        };
        (b, v, os, ov, device)
    };
    let custom = !bot && rng.chance(15);
    let (event_type, event_name, properties) = if custom {
        let (n, p) = CUSTOM[rng.skewed(CUSTOM.len())];
        ("custom_event", n, p.to_string())
    } else {
        ("pageview", "", String::new())
    };
    let (mut pathname, page_title) = PAGES[rng.skewed(PAGES.len())];
    let long_path;
    if rng.chance(2) {
        // Over 127 bytes: a two-byte length prefix in RowBinary.
        long_path = format!("/search/{}", "é".repeat(80));
        pathname = &long_path;
    }
    let querystring = match rng.below(10) {
        0 => "?utm_source=newsletter&utm_medium=email&utm_campaign=winter".to_string(),
        1 => format!("?q={}", rng.hex(6)),
        _ => String::new(),
    };
    let (referrer, channel) = if rng.chance(10) {
        ("https://shop.example.com/", "Internal")
    } else {
        REFERRERS[rng.skewed(REFERRERS.len())]
    };
    let place = &PLACES[rng.skewed(PLACES.len())];
    let (screen_width, screen_height) = SCREENS[rng.skewed(SCREENS.len())];
    let user = rng.below(users);
    let ip = if rng.chance(15) {
        format!("2001:db8:{:x}::{:x}", rng.below(0xffff), rng.below(0xffff))
    } else {
        format!(
            "{}.{}.{}.{}",
            1 + rng.below(223),
            rng.below(256),
            rng.below(256),
            1 + rng.below(254)
        )
    };
    // Web vitals on one event in eight; the rest null, as most events carry none.
    let with_vitals = rng.chance(12);
    let vital_ms = rng.below(4000) as f64 + 0.5;
    let vital = || with_vitals.then_some(vital_ms);
    // Time-ordered ids, like the v7 UUIDs ingest gives events.
    let event_id = Uuid::from_u64_pair(
        (u64::from(timestamp) << 16) | 0x7000 | rng.below(0x1000),
        0x8000_0000_0000_0000 | (rng.next_u64() >> 2),
    );
    EventRow {
        event_id,
        site_id,
        timestamp,
        received_at: timestamp + rng.below(3) as u32,
        event_type: event_type.into(),
        event_name: event_name.into(),
        properties,
        hostname: hostname.into(),
        pathname: pathname.into(),
        querystring,
        page_title: page_title.into(),
        referrer: referrer.into(),
        channel: channel.into(),
        user_id: format!(
            "{:016x}",
            (u64::from(site_id) << 40) ^ user.wrapping_mul(0x9e37_79b9)
        ),
        session_id: format!(
            "{:016x}{:016x}",
            u64::from(site_id),
            user ^ u64::from(timestamp / 1800)
        ),
        language: LANGUAGES[rng.skewed(LANGUAGES.len())].into(),
        screen_width,
        screen_height,
        country: place.country.into(),
        region: if place.region.is_empty() {
            String::new()
        } else {
            format!("{}-{}", place.country, place.region)
        },
        city: place.city.into(),
        lat: place.lat,
        lon: place.lon,
        browser: browser.into(),
        browser_version: browser_version.into(),
        operating_system: os.into(),
        operating_system_version: os_version.into(),
        device_type: device.into(),
        is_bot: u8::from(bot),
        ip,
        anonymous_id: if rng.chance(30) {
            format!("anon-{:x}", user ^ 0x5a5a)
        } else {
            String::new()
        },
        tag: if rng.chance(5) {
            "v2-launch".into()
        } else {
            String::new()
        },
        app_version: String::new(),
        device_model: String::new(),
        feature_flags: if rng.chance(5) {
            r#"{"new-checkout":"on"}"#.into()
        } else {
            String::new()
        },
        lcp: vital(),
        cls: vital().map(|v| v / 10_000.0),
        inp: vital(),
        fcp: vital(),
        ttfb: None,
    }
}

/// `count` events over the `span` seconds before `now`, across the sites (the deleted
/// one too: its events stay), oldest first; 2 % are delivered twice.
pub fn events(seed: u64, count: usize, span: u32, now: u32) -> Vec<EventRow> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(count + count / 40);
    for i in 0..count {
        // Evenly spread, with jitter; never at or after `now`.
        let base = now - span + (u64::from(span) * i as u64 / count as u64) as u32;
        let timestamp = (base + rng.below(60) as u32).min(now - 1);
        let site_id = SITE_IDS[rng.weighted(&[70, 24, 5, 1])];
        let users = match site_id {
            1 => 400,
            2 => 150,
            _ => 20,
        };
        let row = event(&mut rng, site_id, timestamp, users);
        if rng.chance(2) {
            out.push(row.clone());
        }
        out.push(row);
    }
    out
}

/// The dataset the compatibility test loads into every engine it compares: the same
/// rows for the same `now`.
pub fn dataset(now: u32) -> Dataset {
    let mut rng = Rng::new(26);
    let (sites, keys) = registry(&mut rng, now);
    // 36 hours: some events fall before the Overview's 24-hour window.
    Dataset {
        now,
        sites,
        keys,
        events: events(2026, 3_000, 36 * 3600, now),
    }
}

/// The values a `?` is bound to, by the column it is compared with: every statement of
/// `queries::ALL` runs once per combination. A statement binding a column not named
/// here fails the test, asking for values.
pub fn bind_values(column: &str, data: &Dataset) -> Option<Vec<BindValue>> {
    let distinct = |f: fn(&KeyRecord) -> &String| -> Vec<String> {
        let set: std::collections::BTreeSet<&String> = data.keys.iter().map(f).collect();
        set.into_iter().cloned().collect()
    };
    let mut key_hashes = distinct(|k| &k.key_hash);
    let mut key_ids = distinct(|k| &k.key_id);
    key_hashes.push("0".repeat(64));
    key_ids.push("key_0000000000000000".into());
    Some(match column {
        "site_id" => SITE_IDS
            .iter()
            .chain([&MISSING_SITE])
            .map(|s| BindValue::U32(*s))
            .collect(),
        // The Overview's window, everything, and a window after the last event.
        "timestamp" => vec![
            BindValue::U32(window_start(data.now)),
            BindValue::U32(0),
            BindValue::U32(data.now + 3600),
        ],
        "key_hash" => key_hashes.into_iter().map(BindValue::Str).collect(),
        "key_id" => key_ids.into_iter().map(BindValue::Str).collect(),
        _ => return None,
    })
}

/// A value bound to a statement (the types the product binds).
#[derive(Clone, Debug)]
pub enum BindValue {
    U32(u32),
    Str(String),
}

impl BindValue {
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            BindValue::U32(v) => serde_json::json!(v),
            BindValue::Str(s) => serde_json::json!(s),
        }
    }
}

/// The column each `?` of a statement is compared with, in order: the identifier before
/// `=`, `>=`, `<=`, `<` or `>`, looking through `toDateTime(`.
pub fn bound_columns(sql: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut rest = sql;
    while let Some(i) = rest.find('?') {
        let before = rest[..i].trim_end();
        let before = before
            .strip_suffix("toDateTime(")
            .unwrap_or(before)
            .trim_end();
        let Some(before) = before
            .strip_suffix(['=', '<', '>'])
            .map(|b| b.trim_end_matches(['=', '<', '>', '!']).trim_end())
        else {
            return Err(format!(
                "the `?` after {:?} is not compared with a column (`column = ?`, `column >= ?`, \
                 `column >= toDateTime(?)`): teach compat/src/lib.rs, bound_columns(), this form",
                &rest[..i]
            ));
        };
        let ident: String = before
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        if ident.is_empty() {
            return Err(format!(
                "cannot tell which column the `?` after {:?} is compared with",
                &rest[..i]
            ));
        }
        out.push(ident);
        rest = &rest[i + 1..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bound_columns_are_found() {
        assert_eq!(
            bound_columns(
                "SELECT 1 FROM events WHERE site_id = ? AND timestamp >= toDateTime(?) AND x"
            )
            .unwrap(),
            ["site_id", "timestamp"]
        );
        assert_eq!(bound_columns("SELECT 1").unwrap(), Vec::<String>::new());
        assert_eq!(
            bound_columns("WHERE a >= ? AND b != ? AND c<?").unwrap(),
            ["a", "b", "c"]
        );
        assert!(bound_columns("SELECT ?").is_err());
        assert!(bound_columns("WHERE a IN (?)").is_err());
    }

    #[test]
    fn the_dataset_is_the_same_every_time_and_has_what_the_queries_need() {
        let a = dataset(FIXED_NOW);
        let b = dataset(FIXED_NOW);
        assert_eq!(a.events, b.events);
        assert_eq!(a.keys, b.keys);
        let e = &a.events;
        assert!(e.iter().all(|r| r.timestamp < FIXED_NOW));
        assert!(e.iter().any(|r| r.timestamp < window_start(FIXED_NOW)));
        assert!(e.iter().any(|r| r.is_bot == 1));
        assert!(e.iter().any(|r| r.event_type == "custom_event"));
        assert!(e.iter().any(|r| r.pathname.len() > 127));
        assert!(e.iter().any(|r| r.country.is_empty()));
        assert!(e.windows(2).any(|w| w[0] == w[1]), "duplicates");
        for site in SITE_IDS {
            assert!(e
                .iter()
                .any(|r| r.site_id == *site && r.timestamp >= window_start(FIXED_NOW)));
        }
    }
}
