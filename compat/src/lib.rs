//! The data of the ClickHouse compatibility test (`compat/README.md`): a
//! deterministic, realistic set of the rows Rivulet writes (the registry, enriched
//! events, identify's people, erasure requests and their ledger, retention runs, a
//! secret), and the bind values each statement of `schema::queries::ALL` is run with.
//!
//! Deterministic, so that the same rows go into ClickHouse 18.16 and into the current
//! engine (chDB), and the same bound statements must give the same answers on both.
//! Realistic: a few sites (one renamed, one deleted), keys (one revoked), events of the
//! shapes the enricher writes (every event type of the tracker, web vitals with and
//! without values, bots, unknown geo, Unicode, strings longer than 127 bytes, IPv4 and
//! IPv6, months of history), people who identified themselves (an anonymous id claimed
//! by two users, traits changed and removed, a retried identify), erasure requests in
//! every state, and redelivered duplicates.

pub mod stats;

use rivulet_common::privacy::RetentionRun;
use rivulet_common::privacy::{IdKind, LedgerRow, Receipt, State, SubjectKind};
use rivulet_common::registry::{KeyRecord, Site};
use rivulet_common::schema::events::EventRow;
use rivulet_common::schema::migrations::{SecretRow, KEY_CACHE_MAC_SECRET};
use rivulet_common::schema::people::{self, identify_rows, ClaimRow, TraitRow};
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

/// The rows one identify call writes (`people::identify_rows`): its claim, if it names
/// an anonymous id, and its traits.
pub type Identify = (Option<ClaimRow>, Vec<TraitRow>);

/// The rows of every table Rivulet inserts into, in the order they are written.
pub struct Dataset {
    /// Every event is before this time.
    pub now: u32,
    /// Every version of every site, oldest first (a rename and a deletion add versions).
    pub sites: Vec<Site>,
    /// Every version of every key (a revocation adds one).
    pub keys: Vec<KeyRecord>,
    /// Events as the enricher writes them, redelivered duplicates included.
    pub events: Vec<EventRow>,
    /// Identify's rows, one identify call each, in the order written: each is a batch
    /// of the enricher (its claims in one insert, its traits in another); a retried
    /// identify writes its rows again.
    pub identifies: Vec<Identify>,
    /// Every version of every erasure receipt, in the order written (one insert each).
    pub receipts: Vec<Receipt>,
    /// The erasure ledger: each request's rows, one insert per request.
    pub ledger: Vec<Vec<LedgerRow>>,
    /// Retention runs: each run's rows (one per site with a retention), one insert per
    /// run; a site's later run replaces its earlier.
    pub retention_runs: Vec<Vec<RetentionRun>>,
    /// Secrets written besides the one `migrate` makes (one insert).
    pub secrets: Vec<SecretRow>,
    /// The user ids the people's statements are asked about (see [`bind_values`]).
    pub people: Vec<String>,
}

impl Dataset {
    /// Every `person_claims` row written, in order.
    pub fn claims(&self) -> Vec<ClaimRow> {
        self.identifies
            .iter()
            .filter_map(|(a, _)| a.clone())
            .collect()
    }
    /// Every `person_trait_values` row written, in order.
    pub fn traits(&self) -> Vec<TraitRow> {
        self.identifies
            .iter()
            .flat_map(|(_, t)| t.iter().cloned())
            .collect()
    }
    /// Every `erasure_ledger` row written, in order.
    pub fn ledger_rows(&self) -> Vec<LedgerRow> {
        self.ledger.iter().flatten().cloned().collect()
    }
    /// Every `retention_runs` row written, in order.
    pub fn retention_rows(&self) -> Vec<RetentionRun> {
        self.retention_runs.iter().flatten().cloned().collect()
    }
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
        browser_path_off: u8::from(site_id == 3),
        browser_identify: u8::from(site_id == 1),
        timezone: if site_id == 2 {
            "Europe/Berlin".into()
        } else {
            String::new()
        },
    };
    let mut renamed = site(
        2,
        "blog.example.org",
        "Blög — «renamed» ✓",
        created + 60,
        0,
        1_000_010,
    );
    // The edit that renamed it also set a retention (retention runs prune it).
    renamed.retention_days = 60;
    let sites = vec![
        site(1, "shop.example.com", "Shop", created, 0, 1_000_001),
        site(2, "blog.example.org", "Blog", created + 60, 0, 1_000_002),
        renamed,
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
            scopes: if site_id == 2 {
                vec!["ingest:write".into(), "stats:read".into()]
            } else {
                Vec::new()
            },
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
/// The tracker's other event types with the properties each carries: (type,
/// event_name, properties). An error's name is its type.
const INTERACTIONS: &[(&str, &str, &str)] = &[
    ("button_click", "", r#"{"id":"buy-now","text":"Buy now"}"#),
    (
        "outbound",
        "",
        r#"{"url":"https://github.com/rivulet/rivulet","text":"GitHub","target":"_blank"}"#,
    ),
    (
        "form_submit",
        "",
        r#"{"formId":"signup","formName":"","formAction":"/signup","method":"post","fieldCount":3}"#,
    ),
    (
        "copy",
        "",
        r#"{"sourceElement":"code","text":"npm i @rivulet/browser","textLength":22}"#,
    ),
    (
        "input_change",
        "",
        r#"{"element":"input","inputName":"email"}"#,
    ),
    (
        "error",
        "TypeError",
        r#"{"message":"Cannot read properties of undefined (reading 'id')","stack":"TypeError: Cannot read properties of undefined (reading 'id')\n    at checkout (https://shop.example.com/assets/checkout.js:42:17)","fileName":"https://shop.example.com/assets/checkout.js","lineNumber":42,"columnNumber":17}"#,
    ),
];
/// (app_version, device_model) of events sent from an app.
const APPS: &[(&str, &str)] = &[
    ("3.2.1", "iPhone15,2"),
    ("3.2.1", "Pixel 8"),
    ("3.1.0", "SM-S918B"),
    ("3.2.0", ""),
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

/// The id the events of user number `user` of a site carry.
pub fn user_id(site_id: u32, user: u64) -> String {
    format!(
        "{:016x}",
        (u64::from(site_id) << 40) ^ user.wrapping_mul(0x9e37_79b9)
    )
}

/// The anonymous (device) id of user number `user`, on some of their events.
pub fn anonymous_id(user: u64) -> String {
    format!("anon-{:x}", user ^ 0x5a5a)
}

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
    // Bots send pageviews; people every type the tracker has.
    let kind = if bot {
        0
    } else {
        rng.weighted(&[66, 15, 10, 9])
    };
    let (event_type, event_name, properties) = match kind {
        0 => ("pageview", "", String::new()),
        1 => {
            let (n, p) = CUSTOM[rng.skewed(CUSTOM.len())];
            ("custom_event", n, p.to_string())
        }
        2 => ("performance", "", String::new()),
        _ => {
            let (t, n, p) = INTERACTIONS[rng.skewed(INTERACTIONS.len())];
            (t, n, p.to_string())
        }
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
    // Web vitals on performance events only, each one null when the page did not
    // measure it (no interaction: no INP); every other event carries none.
    let performance = event_type == "performance";
    // A value in 0..max in steps of 1/scale, measured with `percent` % probability.
    let mut vital = |percent: u64, max: u64, scale: u64| {
        let value = rng.below(max * scale) as f64 / scale as f64;
        (performance && rng.chance(percent)).then_some(value)
    };
    let lcp = vital(95, 6000, 10);
    let cls = vital(90, 1, 1000);
    let inp = vital(60, 800, 1);
    let fcp = vital(98, 4000, 10);
    let ttfb = vital(90, 2000, 10);
    let (app_version, device_model) = if rng.chance(6) {
        APPS[rng.below(APPS.len() as u64) as usize]
    } else {
        ("", "")
    };
    // Time-ordered ids, like the v7 UUIDs ingest gives events.
    let event_id = Uuid::from_u64_pair(
        (u64::from(timestamp) << 16) | 0x7000 | rng.below(0x1000),
        0x8000_0000_0000_0000 | (rng.next_u64() >> 2),
    );
    // The client's own times (migration 9): on a third of the events, as an SDK that
    // queued them sends them, by a clock up to a day off either way (ingest corrected
    // `timestamp`); a few sent a timestamp without sent_at; NULL on the rest.
    let (client_timestamp, sent_at) = match rng.below(12) {
        0..=3 => {
            let skew = rng.below(2 * 86_400) as i64 - 86_400;
            let queued = rng.below(3600) as i64;
            let clock = |t: i64| u32::try_from(t + skew).ok();
            let happened = i64::from(timestamp) - queued;
            (clock(happened), clock(i64::from(timestamp)))
        }
        4 => (Some(timestamp), None),
        _ => (None, None),
    };
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
        user_id: user_id(site_id, user),
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
            anonymous_id(user)
        } else {
            String::new()
        },
        tag: if rng.chance(5) {
            "v2-launch".into()
        } else {
            String::new()
        },
        app_version: app_version.into(),
        device_model: device_model.into(),
        feature_flags: if rng.chance(5) {
            r#"{"new-checkout":"on","search":"v2"}"#.into()
        } else {
            String::new()
        },
        lcp,
        cls,
        inp,
        fcp,
        ttfb,
        client_timestamp,
        sent_at,
        // Its user ids come back on other days: none is a day's visitor id.
        daily_visitor: 0,
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

/// The enricher's daily visitor id (32 lowercase hex digits, docs/design.md "Visitor
/// id") a user's events carry when the caller sent no user id: the shape of an id the
/// Stats API's `users` looks up the owner of (`rivulet_stats::identity::PERSON`).
pub fn visitor_id(user_id: &str, day: u32) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in user_id.bytes().chain(day.to_le_bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}{:016x}", h.rotate_left(29) ^ u64::from(day))
}

/// Half of the events that carry an anonymous id (those of even hours) were sent before
/// their person identified: their `user_id` is the visitor id, and `users` counts them
/// for the owner of their anonymous id, if it was claimed. Applied to the compatibility
/// test's dataset only (measure.py's events stay as they are); deterministic per row,
/// so a redelivered copy stays a copy.
fn with_visitor_ids(mut events: Vec<EventRow>) -> Vec<EventRow> {
    for e in &mut events {
        if !e.anonymous_id.is_empty() && (e.timestamp / 3600) % 2 == 0 {
            e.user_id = visitor_id(&e.user_id, e.timestamp / 86_400);
        }
    }
    events
}

/// The dataset the compatibility test loads into every engine it compares: the same
/// rows for the same `now`.
pub fn dataset(now: u32) -> Dataset {
    let mut rng = Rng::new(26);
    let (sites, keys) = registry(&mut rng, now);
    let (identifies, people) = people(now);
    let (receipts, ledger) = erasures(&mut rng, now);
    Dataset {
        now,
        sites,
        keys,
        // 36 hours: some events fall before the Overview's 24-hour window.
        events: with_visitor_ids(events(2026, 3_000, 36 * 3600, now)),
        identifies,
        receipts,
        ledger,
        retention_runs: retention_runs(now),
        secrets: secrets(&mut rng, now),
        people,
    }
}

/// A name of `secrets` besides the key cache's MAC key, which `migrate` makes with a
/// random value (so that no two engines have the same).
pub const RACED_SECRET: &str = "compat_raced_secret";

/// A secret two `migrate`s made at once (`migrations::ensure_secret`): two values of
/// one name, of which readers take the smallest.
fn secrets(rng: &mut Rng, now: u32) -> Vec<SecretRow> {
    let created_at = now - 90 * 86_400;
    assert_ne!(RACED_SECRET, KEY_CACHE_MAC_SECRET);
    (0..2)
        .map(|_| SecretRow {
            name: RACED_SECRET.into(),
            value: rng.hex(64),
            created_at,
        })
        .collect()
}

/// Identify calls (site, user, anonymous id, traits, seconds before now, with a key), as
/// the enricher turns them into rows (`people::identify_rows`): users 0 and 1 of site 1
/// ("alice", "bob") and user 0 of site 2 ("carol"), ids their events carry.
fn people(now: u32) -> (Vec<Identify>, Vec<String>) {
    let (alice, bob, carol) = (user_id(1, 0), user_id(1, 1), user_id(2, 0));
    type Call<'a> = (u32, &'a str, Option<String>, Option<&'a str>, u32, bool);
    let calls: &[Call] = &[
        (
            1,
            &alice,
            Some(anonymous_id(0)),
            Some(r#"{"plan":"pro","seats":5,"email":"alice@example.com"}"#),
            30 * 3600,
            true,
        ),
        // The same call again: the enricher retried its batch.
        (
            1,
            &alice,
            Some(anonymous_id(0)),
            Some(r#"{"plan":"pro","seats":5,"email":"alice@example.com"}"#),
            30 * 3600,
            true,
        ),
        // Alice claims user 7's device first; Bob's later claim of it loses.
        (1, &alice, Some(anonymous_id(7)), None, 29 * 3600, true),
        (
            1,
            &bob,
            Some(anonymous_id(7)),
            Some(r#"{"plan":"free"}"#),
            28 * 3600,
            true,
        ),
        (
            1,
            &bob,
            Some(anonymous_id(1)),
            Some(r#"{"name":"Bøb «B» 🎉","tags":["a","b"],"beta":true}"#),
            27 * 3600,
            true,
        ),
        // A trait changed and one removed (null).
        (
            1,
            &alice,
            None,
            Some(r#"{"plan":"team","seats":null}"#),
            3 * 3600,
            true,
        ),
        // Without a key, later: it cannot change Alice's plan, sets a trait of its own,
        // and cannot take Bob's device.
        (
            1,
            &alice,
            Some(anonymous_id(1)),
            Some(r#"{"plan":"hacked","role":"admin"}"#),
            3600,
            false,
        ),
        // The same anonymous id on another site is another person's.
        (
            2,
            &carol,
            Some(anonymous_id(0)),
            Some(r#"{"lang":"de"}"#),
            5 * 3600,
            true,
        ),
    ];
    let rows = calls
        .iter()
        .map(|(site, user, anon, traits, ago, trusted)| {
            let at_ms = i64::from(now - ago) * 1000 + 250;
            identify_rows(&people::Identify {
                site_id: *site,
                user_id: user,
                anonymous_id: anon.as_deref(),
                traits_json: *traits,
                trusted: *trusted,
                at_ms,
                received_at_ms: at_ms + 40,
            })
        })
        .collect();
    (rows, vec![alice, bob, carol])
}

/// Erasure requests in every state, each with its ledger rows and every version of its
/// receipt, as `privacy::request_erasure` and the lifecycle runner write them: (site,
/// subject kind, subject, the anonymous ids it claimed, suppress, states after pending
/// with the rows removed and reason, seconds before now).
fn erasures(rng: &mut Rng, now: u32) -> (Vec<Receipt>, Vec<Vec<LedgerRow>>) {
    type Request<'a> = (
        u32,
        SubjectKind,
        String,
        Vec<String>,
        bool,
        &'a [(State, &'a str, u64)],
        u32,
    );
    let requests: Vec<Request> = vec![
        (
            1,
            SubjectKind::UserId,
            user_id(1, 399),
            vec![anonymous_id(399)],
            false,
            &[(State::Running, "", 0), (State::Done, "", 7)],
            20 * 3600,
        ),
        (
            1,
            SubjectKind::VisitorId,
            user_id(1, 398),
            vec![],
            true,
            &[
                (State::Running, "", 0),
                (
                    State::Failed,
                    "ClickHouse: Timeout: «mutation» did not finish",
                    0,
                ),
            ],
            12 * 3600,
        ),
        (
            2,
            SubjectKind::UserId,
            user_id(2, 149),
            vec![],
            true,
            &[(State::Running, "", 0)],
            2 * 3600,
        ),
        // Bob, with the device he kept (Alice claimed user 7's first).
        (
            1,
            SubjectKind::UserId,
            user_id(1, 1),
            vec![anonymous_id(1)],
            false,
            &[],
            3600,
        ),
    ];
    let mut receipts = Vec::new();
    let mut ledger = Vec::new();
    for (site_id, kind, subject, aliases, suppress, states, ago) in requests {
        let at = u64::from(now - ago) * 1000 + 125;
        let request_id = format!("er_{}", rng.hex(32));
        let ids: Vec<(IdKind, String)> = std::iter::once((IdKind::UserId, subject.clone()))
            .chain(aliases.into_iter().map(|a| (IdKind::AnonymousId, a)))
            .collect();
        ledger.push(
            ids.iter()
                .map(|(k, id)| LedgerRow {
                    site_id,
                    id_kind: k.as_str().into(),
                    id: id.clone(),
                    erased_at_ms: at,
                    request_id: request_id.clone(),
                    suppress: u8::from(suppress),
                    added_at_ms: at,
                })
                .collect(),
        );
        let mut receipt = Receipt {
            request_id,
            site_id,
            subject_kind: kind.as_str().into(),
            subject,
            suppress: u8::from(suppress),
            requested_at_ms: at,
            state: State::Pending.as_str().into(),
            reason: String::new(),
            rows_removed: 0,
            ids: serde_json::to_string(
                &ids.iter()
                    .map(|(k, id)| (k.as_str(), id.as_str()))
                    .collect::<Vec<_>>(),
            )
            .expect("ids as JSON"),
            updated_at_ms: at,
            version: at * 1000,
        };
        receipts.push(receipt.clone());
        // Each state a minute after the one before, a newer version (as
        // `Receipt::with_state` makes it, at a fixed time).
        for (state, reason, removed) in states {
            receipt = Receipt {
                state: state.as_str().into(),
                reason: (*reason).into(),
                rows_removed: *removed,
                updated_at_ms: receipt.updated_at_ms + 60_000,
                version: (receipt.updated_at_ms + 60_000) * 1000,
                ..receipt
            };
            receipts.push(receipt.clone());
        }
    }
    (receipts, ledger)
}

/// Two retention runs a day apart, each of the sites with a retention (sites 2 and 3)
/// as the lifecycle runner records them: the cutoff is the run's time less the days.
fn retention_runs(now: u32) -> Vec<Vec<RetentionRun>> {
    [(26 * 3600, [120, 0]), (2 * 3600, [4, 0])]
        .iter()
        .map(|(ago, removed)| {
            let ran_at = now - ago;
            [(2, 60), (3, 400)]
                .iter()
                .zip(removed)
                .map(|((site_id, days), rows_removed)| RetentionRun {
                    site_id: *site_id,
                    ran_at,
                    cutoff: ran_at - days * 86_400,
                    rows_removed: *rows_removed,
                })
                .collect()
        })
        .collect()
}

/// The values a `?` is bound to, by the column it is compared with: every statement of
/// `queries::ALL` runs once per combination (but see [`same_value`]). A statement
/// binding a column not named here fails the test, asking for values.
pub fn bind_values(column: &str, data: &Dataset) -> Option<Vec<BindValue>> {
    let distinct = |f: fn(&KeyRecord) -> &String| -> Vec<String> {
        let set: std::collections::BTreeSet<&String> = data.keys.iter().map(f).collect();
        set.into_iter().cloned().collect()
    };
    let strings = |values: Vec<String>| values.into_iter().map(BindValue::Str).collect();
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
        "key_hash" => strings(key_hashes),
        "key_id" => strings(key_ids),
        // A secret two runs made at once, and one nobody made. Not the key cache's MAC
        // key: `migrate` makes it with a random value, different on every engine.
        "name" => strings(vec![RACED_SECRET.into(), "no_such_secret".into()]),
        // People who identified themselves, and a user nobody is. `owner` is the user
        // an anonymous id belongs to.
        "user_id" | "owner" => strings(
            data.people
                .iter()
                .cloned()
                .chain(["no-such-user".into()])
                .collect(),
        ),
        "request_id" => {
            let mut ids: Vec<String> = data.receipts.iter().map(|r| r.request_id.clone()).collect();
            ids.dedup();
            ids.push("er_00000000000000000000000000000000".into());
            strings(ids)
        }
        // The whole ledger, its later part, and nothing.
        "added_at_ms" => {
            let mut added: Vec<u64> = data.ledger_rows().iter().map(|r| r.added_at_ms).collect();
            added.sort_unstable();
            vec![
                BindValue::U64(0),
                BindValue::U64(added[added.len() / 2]),
                BindValue::U64((u64::from(data.now) + 3600) * 1000),
            ]
        }
        // The database the statement runs in (`{db}`, which the test replaces with each
        // engine's database, as it does in the SQL), and one that does not exist.
        "database" => strings(vec!["{db}".into(), "no_such_database".into()]),
        _ => return None,
    })
}

/// The columns whose every `?` in one statement takes the same value: the product asks
/// about one site and one person at a time (`PERSON_EVENT_COUNTS` binds site, user,
/// site, user), so other combinations are questions it never asks. Returns the name
/// the column's value is shared under (`owner` is a user id).
pub fn same_value(column: &str) -> Option<&'static str> {
    match column {
        "site_id" => Some("site_id"),
        "user_id" | "owner" => Some("user_id"),
        _ => None,
    }
}

/// A value bound to a statement (the types the product binds).
#[derive(Clone, Debug)]
pub enum BindValue {
    U32(u32),
    U64(u64),
    Str(String),
}

impl BindValue {
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            BindValue::U32(v) => serde_json::json!(v),
            BindValue::U64(v) => serde_json::json!(v),
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
        for t in [
            "pageview",
            "custom_event",
            "performance",
            "error",
            "outbound",
        ] {
            assert!(e.iter().any(|r| r.event_type == t), "{t}");
        }
        assert!(e.iter().any(|r| r.lcp.is_some() && r.inp.is_none()));
        assert!(e.iter().any(|r| r.sent_at.is_some()));
        assert!(e
            .iter()
            .any(|r| r.client_timestamp.is_some() && r.sent_at.is_none()));
        assert!(e.iter().any(|r| r.client_timestamp.is_none()));
        assert!(e.iter().any(|r| !r.app_version.is_empty()));
        // Events under a visitor id whose anonymous id a user claimed (the Stats API's
        // `users` counts them for that user), and under one nobody claimed.
        let claimed: Vec<(u32, String)> = a
            .claims()
            .iter()
            .map(|c| (c.site_id, c.anonymous_id.clone()))
            .collect();
        let visitor = |r: &&EventRow| {
            r.user_id.len() == 32
                && r.user_id
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        };
        assert!(e
            .iter()
            .filter(visitor)
            .any(|r| claimed.contains(&(r.site_id, r.anonymous_id.clone()))));
        assert!(e
            .iter()
            .filter(visitor)
            .any(|r| !claimed.contains(&(r.site_id, r.anonymous_id.clone()))));

        // The tables of migrations 3, 6 and 7 have rows, the same every time.
        assert_eq!(a.identifies, b.identifies);
        assert_eq!(a.receipts, b.receipts);
        assert_eq!(a.ledger, b.ledger);
        assert_eq!(a.retention_runs, b.retention_runs);
        assert_eq!(a.secrets, b.secrets);
        let (claims, traits) = (a.claims(), a.traits());
        assert!(claims.len() >= 6 && traits.len() >= 10);
        // An anonymous id claimed by two users; a retried identify; a removed trait; a
        // keyless write.
        assert!(claims
            .iter()
            .any(|x| claims.iter().any(|y| x.anonymous_id == y.anonymous_id
                && x.site_id == y.site_id
                && x.user_id != y.user_id)));
        assert!(a.identifies.windows(2).any(|w| w[0] == w[1]));
        assert!(traits.iter().any(|t| t.removed == 1));
        assert!(traits.iter().any(|t| t.trusted == 0) && claims.iter().any(|c| c.trusted == 0));
        // The people asked about have events, under their user id or a claimed one.
        for user in &a.people {
            assert!(e.iter().any(|r| &r.user_id == user), "{user}");
        }
        for state in ["pending", "running", "done", "failed"] {
            assert!(a.receipts.iter().any(|r| r.state == state), "{state}");
        }
        assert_eq!(
            a.ledger.len(),
            a.receipts.iter().filter(|r| r.state == "pending").count()
        );
        assert!(a.ledger_rows().iter().any(|r| r.suppress == 1));
        assert!(a.ledger_rows().iter().any(|r| r.id_kind == "anonymous_id"));
        assert_eq!(a.retention_runs.len(), 2);
        assert!(a.retention_rows().iter().all(|r| r.cutoff < r.ran_at));
        assert_eq!(a.secrets.len(), 2);
        assert!(a.secrets.iter().all(|s| s.name == RACED_SECRET));
    }

    #[test]
    fn every_statement_has_bind_values_and_repeated_ids_share_theirs() {
        let data = dataset(FIXED_NOW);
        for st in rivulet_common::schema::queries::ALL {
            for column in bound_columns(st.sql).unwrap() {
                let values = bind_values(&column, &data)
                    .unwrap_or_else(|| panic!("{}: no values for {column}", st.name));
                assert!(!values.is_empty(), "{}: {column}", st.name);
            }
        }
        assert_eq!(same_value("owner"), same_value("user_id"));
        assert_eq!(same_value("timestamp"), None, "a range's ends differ");
    }
}
