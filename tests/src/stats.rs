//! The Stats API (`POST /api/v2/query`, docs/stats-api.md) computed without its engine, for
//! the tests that check the engine's answers on the real stack (tests/tests/stats_api.rs
//! on the single node, tests/tests/cluster.rs on the cluster):
//!
//! - [`generate`]: a deterministic dataset of events in the enricher's row format
//!   ([`EventRow`]) and the claims of anonymous ids ([`ClaimRow`]), over the weeks around
//!   the Europe/Berlin change back from summer time (2025-10-26, 03:00 CEST → 02:00 CET),
//!   the two weeks before them and the same weeks of 2024; [`load`] writes it as the
//!   enricher does;
//! - [`Dataset::expected`]: the response the docs define for a query over that dataset,
//!   computed in plain Rust (no SQL): which events and visits a query counts, every
//!   metric, dimension and filter operator, local time buckets (jiff's time zone
//!   database), comparisons, the order and the pages, and the query as echoed;
//! - the query matrix ([`metric_and_dimension_queries`] and the others) and [`mismatches`],
//!   which sends each query to a running `rivulet-admin serve` and lists every figure that
//!   differs from the evaluator's, by query.

use crate::post_bytes;
use futures::StreamExt;
use jiff::civil::{Date, Weekday};
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};
use regex::Regex;
use rivulet_common::ch::Db;
use rivulet_common::schema::events::EventRow;
use rivulet_common::schema::people::{claim_rank, ClaimRow, CLAIMS_TABLE};
use serde_json::{json, Number, Value};
use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, HashMap, HashSet};
use uuid::Uuid;

/// The time zone of every site the tests read.
pub const TIME_ZONE: &str = "Europe/Berlin";
/// The main range of the query matrix: two weeks around the change back from summer time.
pub const MAIN_RANGE: [&str; 2] = ["2025-10-20", "2025-11-02"];
/// The day clocks went back (03:00 CEST → 02:00 CET): 25 hours, 02:00–03:00 twice.
pub const DST_DAY: &str = "2025-10-26";
/// The identified person the erasure test erases: a user id, three anonymous ids claimed
/// (one keyed, one keyless and also claimed later by bob, one claimed first by carol
/// keyless and then by alice keyed).
pub const ERASED_USER: &str = "alice";

/// The event types that keep a visit from bouncing (docs/stats-api.md, "Metrics").
const ENGAGEMENT: [&str; 6] = [
    "custom_event",
    "outbound",
    "button_click",
    "copy",
    "form_submit",
    "input_change",
];
/// Seconds the engine reads around a range for the visits' events (docs: "Visits").
const LOOKAROUND: i64 = 6 * 3600;

// ---------------------------------------------------------------------------------------
// The dataset.

/// Deterministic randomness (SplitMix64): the same dataset on every run.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// Who a profile's events are from.
#[derive(Clone, Copy)]
enum Who {
    /// A user id the site sent, and the anonymous id sent with it ("" for none).
    User(&'static str, &'static str),
    /// The enricher's daily visitor id, and the SDK's anonymous id ("" for none).
    Anonymous(&'static str),
    /// A bot (`is_bot = 1`): left out of everything.
    Bot,
}

/// A visitor: who, and the device and place every visit of theirs has.
struct Profile {
    who: Who,
    device: &'static str,
    browser: &'static str,
    browser_version: &'static str,
    os: &'static str,
    os_version: &'static str,
    country: &'static str,
    region: &'static str,
    city: &'static str,
    screen: u16,
}

const fn profile(
    who: Who,
    device: [&'static str; 5],
    place: [&'static str; 3],
    screen: u16,
) -> Profile {
    Profile {
        who,
        device: device[0],
        browser: device[1],
        browser_version: device[2],
        os: device[3],
        os_version: device[4],
        country: place[0],
        region: place[1],
        city: place[2],
        screen,
    }
}

/// The visitors. Screen widths sit on both sides of each class's bound (576, 992, 1440).
static PROFILES: [Profile; 12] = [
    profile(
        Who::User("alice", "dev-alice-1"),
        ["Desktop", "Chrome", "120", "Windows", "10"],
        ["DE", "DE-BE", "Berlin"],
        1920,
    ),
    profile(
        Who::Anonymous("dev-alice-1"),
        ["Mobile", "Safari", "17", "iOS", "17.1"],
        ["DE", "DE-BE", "Berlin"],
        390,
    ),
    profile(
        Who::Anonymous("dev-alice-2"),
        ["Tablet", "Chrome", "121", "Android", "14"],
        ["DE", "DE-BY", "Munich"],
        800,
    ),
    profile(
        Who::User("bob", ""),
        ["Desktop", "Firefox", "119", "Mac OS X", "14.4"],
        ["FR", "FR-IDF", "Paris"],
        1366,
    ),
    profile(
        Who::Anonymous("dev-bob"),
        ["Mobile", "Chrome", "120", "Android", "14"],
        ["FR", "FR-IDF", "Paris"],
        575,
    ),
    profile(
        Who::User("carol", ""),
        ["Desktop", "Safari", "17", "Mac OS X", "14.4"],
        ["US", "US-CA", "San Francisco"],
        1440,
    ),
    profile(
        Who::Anonymous("dev-shared"),
        ["Desktop", "Edge", "120", "Windows", "11"],
        ["US", "US-NY", "New York"],
        1439,
    ),
    profile(Who::Anonymous(""), ["", "", "", "", ""], ["", "", ""], 0),
    profile(
        Who::Anonymous("dev-x"),
        ["Desktop", "Chrome", "120", "Windows", "10"],
        ["DE", "DE-HH", "Hamburg"],
        992,
    ),
    profile(
        Who::Anonymous(""),
        ["Mobile", "Samsung Internet", "23", "Android", "13"],
        ["GB", "GB-ENG", "London"],
        576,
    ),
    profile(
        Who::Anonymous(""),
        ["Desktop", "Firefox", "118", "Linux", ""],
        ["NL", "", ""],
        991,
    ),
    profile(
        Who::Bot,
        ["Bot", "Googlebot", "2", "Other", ""],
        ["US", "US-CA", "Mountain View"],
        1024,
    ),
];
const BOT: usize = 11;

/// Where a visit came from: its first event's referrer, channel and query string.
struct Source {
    referrer: &'static str,
    channel: &'static str,
    querystring: &'static str,
}

static SOURCES: [Source; 7] = [
    Source {
        referrer: "",
        channel: "Direct",
        querystring: "",
    },
    Source {
        referrer: "https://www.google.com/search?q=rivulet",
        channel: "Organic Search",
        querystring: "",
    },
    Source {
        referrer: "https://news.ycombinator.com/item?id=1",
        channel: "Referral",
        querystring: "?ref=hn",
    },
    Source {
        referrer: "",
        channel: "Email",
        querystring: "?utm_source=newsletter&utm_medium=email&utm_campaign=spring+sale&utm_content=50%25%20off&utm_term=web+analytics",
    },
    // Without its `?`, as some clients store it.
    Source {
        referrer: "https://t.co/xyz",
        channel: "Social",
        querystring: "utm_source=twitter&utm_medium=social&utm_campaign=Launch",
    },
    // The site itself: no source, no referrer.
    Source {
        referrer: "https://example.com/pricing",
        channel: "Internal",
        querystring: "",
    },
    // An empty utm_source: the source is the referring host.
    Source {
        referrer: "https://www.bing.com/",
        channel: "Organic Search",
        querystring: "?utm_source=&utm_medium=cpc",
    },
];
const INTERNAL: usize = 5;

const PAGES: [&str; 7] = [
    "/",
    "/pricing",
    "/blog/post-1",
    "/blog/post-2",
    "/docs/Getting-Started",
    "/about",
    "/blog",
];

/// The web vitals of an event, drawn from its id (so that the dataset's other draws stay
/// as they were): a `performance` event's, each measured or not as browsers do (INP only
/// after an interaction); now and then one on another type of event, which is no
/// measurement (docs: "Web vitals"). LCP and FCP in half milliseconds, so that rounding
/// meets ties; CLS to the thousandth.
fn vitals(kind: &str, id: Uuid) -> EventRow {
    let (a, b) = id.as_u64_pair();
    let mut r = Rng::new(a ^ b.rotate_left(17));
    let performance = kind == "performance";
    if !performance && !r.chance(5) {
        return EventRow::default();
    }
    let mut measured = |percent: u64, from: u64, span: u64, scale: f64| {
        r.chance(percent)
            .then(|| (from + r.below(span)) as f64 / scale)
    };
    EventRow {
        lcp: measured(90, 400, 10_000, 2.0),
        cls: measured(85, 0, 400, 1000.0),
        inp: measured(50, 16, 600, 1.0),
        fcp: measured(90, 200, 6_000, 2.0),
        ttfb: measured(95, 10, 900, 1.0),
        ..EventRow::default()
    }
}

/// One event of a visit: seconds after the previous one, type, name, properties, page.
#[derive(Clone)]
struct Step {
    gap: i64,
    kind: &'static str,
    name: &'static str,
    props: &'static str,
    page: &'static str,
}

fn pageview(gap: i64, page: &'static str) -> Step {
    Step {
        gap,
        kind: "pageview",
        name: "",
        props: "",
        page,
    }
}

/// Something a visitor did on a page (or the page did on its own: web vitals, errors).
fn interaction(rng: &mut Rng, gap: i64, page: &'static str) -> Step {
    let (kind, name, props) = match rng.below(9) {
        0 => ("custom_event", "signup", r#"{"count":3,"plan":"pro"}"#),
        1 => ("custom_event", "signup", r#"{"count":1,"plan":"free"}"#),
        2 => (
            "custom_event",
            "purchase",
            r#"{"amount":2.5,"flag":true,"plan":"pro"}"#,
        ),
        3 => ("custom_event", "Download", r#"{"flag":null}"#),
        4 => ("outbound", "", r#"{"url":"https://github.com/rivulet"}"#),
        5 => ("button_click", "", ""),
        6 => ("copy", "", "{}"),
        7 => ("performance", "", ""),
        _ => ("error", "TypeError", r#"{"message":"x is undefined"}"#),
    };
    Step {
        gap,
        kind,
        name,
        props,
        page,
    }
}

/// A visit of the random kinds: bounced (a pageview, perhaps with web vitals or an
/// error), browsing (pageviews with things done between), engaged on one page, or
/// server-side only (custom events, no pageview).
fn random_steps(rng: &mut Rng) -> (Vec<Step>, bool) {
    let gap = |rng: &mut Rng| 10 + rng.below(590) as i64;
    let page = |rng: &mut Rng| *rng.pick(&PAGES);
    let roll = rng.below(100);
    let mut steps = Vec::new();
    let server = roll >= 92;
    if roll < 30 {
        let p = page(rng);
        steps.push(pageview(0, p));
        if rng.chance(40) {
            let g = gap(rng);
            let kind = if rng.chance(50) {
                "performance"
            } else {
                "error"
            };
            steps.push(Step {
                gap: g,
                kind,
                name: if kind == "error" { "TypeError" } else { "" },
                props: "",
                page: p,
            });
        }
    } else if roll < 80 {
        for i in 0..2 + rng.below(3) {
            let p = page(rng);
            let g = if i == 0 { 0 } else { gap(rng) };
            steps.push(pageview(g, p));
            if rng.chance(35) {
                let g = gap(rng);
                steps.push(interaction(rng, g, p));
            }
        }
    } else if roll < 92 {
        let p = page(rng);
        steps.push(pageview(0, p));
        let g = gap(rng);
        let (kind, name, props) = *rng.pick(&[
            ("custom_event", "newsletter", "{}"),
            ("outbound", "", r#"{"url":"https://github.com/rivulet"}"#),
            ("form_submit", "", ""),
            ("input_change", "", ""),
        ]);
        steps.push(Step {
            gap: g,
            kind,
            name,
            props,
            page: p,
        });
    } else {
        for i in 0..1 + rng.below(2) {
            let g = if i == 0 { 0 } else { gap(rng) };
            steps.push(Step {
                gap: g,
                kind: "custom_event",
                name: "purchase",
                props: r#"{"amount":2.5,"plan":"pro"}"#,
                page: "/api/checkout",
            });
        }
    }
    (steps, server)
}

/// Epoch seconds of a UTC time `YYYY-MM-DDTHH:MM:SSZ`.
pub fn at(utc: &str) -> i64 {
    utc.parse::<Timestamp>()
        .unwrap_or_else(|e| panic!("{utc}: {e}"))
        .as_second()
}

/// What a test writes and the evaluator reads: every row as written (duplicates and bots
/// included), and the claims of anonymous ids.
#[derive(Clone)]
pub struct Dataset {
    pub site_id: u32,
    pub time_zone: String,
    pub rows: Vec<EventRow>,
    pub claims: Vec<ClaimRow>,
}

struct Writer<'a> {
    site_id: u32,
    seed: u64,
    rng: &'a mut Rng,
    ids: Rng,
    rows: Vec<EventRow>,
    visits: u64,
}

impl Writer<'_> {
    /// The enricher's visitor id of a profile on a UTC day: 32 lowercase hex characters.
    fn visitor_id(&self, profile: usize, ts: i64) -> String {
        let mut r = Rng::new(self.seed ^ ((profile as u64) << 40) ^ ts.div_euclid(86_400) as u64);
        format!("{:016x}{:016x}", r.next_u64(), r.next_u64())
    }

    fn event_id(&mut self) -> Uuid {
        Uuid::from_u64_pair(self.ids.next_u64(), self.ids.next_u64())
    }

    /// Writes one visit. Its later events come from the site itself (an internal
    /// referrer), now and then with other query parameters or another country: a visit's
    /// properties are its first event's.
    fn visit(&mut self, profile: usize, start: i64, source: usize, host: &str, steps: &[Step]) {
        let p = &PROFILES[profile];
        let src = &SOURCES[source];
        self.visits += 1;
        let session = format!("{:016x}{:016x}", self.ids.next_u64(), self.visits);
        let mut ts = start;
        let mut previous = "";
        for (i, step) in steps.iter().enumerate() {
            ts += step.gap;
            let first = i == 0;
            let querystring = if first {
                src.querystring
            } else if self.rng.chance(10) {
                "?utm_source=inner&utm_campaign=inner"
            } else {
                ""
            };
            let (referrer, channel) = if first {
                (src.referrer.to_string(), src.channel)
            } else {
                (format!("https://{host}{previous}"), "Internal")
            };
            let country = if !first && self.rng.chance(10) {
                "AT"
            } else {
                p.country
            };
            // As the enricher sets them: a visitor id of the event's own UTC day when
            // no user id was sent.
            let (user_id, anonymous_id, daily_visitor) = match p.who {
                Who::User(u, a) => (u.to_string(), a, 0),
                Who::Anonymous(a) => (self.visitor_id(profile, ts), a, 1),
                Who::Bot => (self.visitor_id(profile, ts), "", 1),
            };
            let event_id = self.event_id();
            self.rows.push(EventRow {
                event_id,
                site_id: self.site_id,
                timestamp: ts as u32,
                received_at: ts as u32,
                event_type: step.kind.into(),
                event_name: step.name.into(),
                properties: step.props.into(),
                hostname: host.into(),
                pathname: step.page.into(),
                querystring: querystring.into(),
                referrer,
                channel: channel.into(),
                user_id,
                session_id: session.clone(),
                daily_visitor,
                screen_width: p.screen,
                screen_height: p.screen / 2,
                country: country.into(),
                region: p.region.into(),
                city: p.city.into(),
                browser: p.browser.into(),
                browser_version: p.browser_version.into(),
                operating_system: p.os.into(),
                operating_system_version: p.os_version.into(),
                device_type: p.device.into(),
                is_bot: u8::from(matches!(p.who, Who::Bot)),
                anonymous_id: anonymous_id.into(),
                ..vitals(step.kind, event_id)
            });
            if step.kind == "pageview" {
                previous = step.page;
            }
        }
    }

    /// `n` random visits starting in `[from, to)` (UTC seconds), by random visitors (no
    /// bots) from random sources.
    fn random_visits(&mut self, n: usize, from: i64, to: i64) {
        for _ in 0..n {
            let start = from + self.rng.below((to - from) as u64) as i64;
            let profile = self.rng.below(BOT as u64) as usize;
            let (steps, server) = random_steps(self.rng);
            let source = if server {
                0
            } else {
                self.rng.below(SOURCES.len() as u64) as usize
            };
            let host = if server {
                ""
            } else if self.rng.chance(20) {
                "shop.example.com"
            } else {
                "example.com"
            };
            self.visit(profile, start, source, host, &steps);
        }
    }
}

/// The dataset of site `site_id`: `visits_2025` random visits from 2025-10-05 to
/// 2025-11-03 (the main range, the two weeks before it and a day after), `visits_2024`
/// from 2024-10-19 to 2024-11-03 (the year before), fixed visits on the edges that matter
/// (the repeated hour of both DST changes, visits over midnight at both ends of the main
/// range and inside it, a visit that starts on the site itself, a bot event inside a
/// person's visit), bot visits, ~8 % of the events written twice (same event_id), and the
/// claims of the anonymous ids. The same `seed` gives the same events (their ids differ
/// by site).
pub fn generate(site_id: u32, seed: u64, visits_2025: usize, visits_2024: usize) -> Dataset {
    let mut rng = Rng::new(seed);
    let mut w = Writer {
        site_id,
        seed,
        rng: &mut rng,
        ids: Rng::new(seed ^ (u64::from(site_id) << 20) ^ 0x5eed),
        rows: Vec::new(),
        visits: 0,
    };
    // 2025-10-05 00:00 CEST to 2025-11-04 00:00 CET; 2024-10-19 to 2024-11-04.
    w.random_visits(
        visits_2025,
        at("2025-10-04T22:00:00Z"),
        at("2025-11-03T23:00:00Z"),
    );
    w.random_visits(
        visits_2024,
        at("2024-10-18T22:00:00Z"),
        at("2024-11-03T23:00:00Z"),
    );
    let signup = Step {
        gap: 300,
        kind: "custom_event",
        name: "signup",
        props: r#"{"count":3,"plan":"pro"}"#,
        page: "/",
    };
    // The repeated hour of 2025-10-26: 02:50 CEST, then 02:00 and 02:15 CET.
    w.visit(
        8,
        at("2025-10-26T00:50:00Z"),
        1,
        "example.com",
        &[
            pageview(0, "/"),
            pageview(600, "/pricing"),
            pageview(900, "/docs/Getting-Started"),
        ],
    );
    // 02:20 CEST (bounced), 02:40 CET (engaged), 01:10 CEST, 03:05 CET.
    w.visit(
        3,
        at("2025-10-26T00:20:00Z"),
        0,
        "example.com",
        &[pageview(0, "/blog/post-1")],
    );
    w.visit(
        1,
        at("2025-10-26T01:40:00Z"),
        3,
        "example.com",
        &[pageview(0, "/"), signup.clone()],
    );
    w.visit(
        9,
        at("2025-10-25T23:10:00Z"),
        2,
        "shop.example.com",
        &[pageview(0, "/"), pageview(1200, "/pricing")],
    );
    w.visit(
        5,
        at("2025-10-26T02:05:00Z"),
        0,
        "example.com",
        &[pageview(0, "/about")],
    );
    // Over midnight where the main range starts (23:50 CEST on the 19th), inside it, and
    // where it ends (23:50 CET on 2 November).
    w.visit(
        0,
        at("2025-10-19T21:50:00Z"),
        1,
        "example.com",
        &[
            pageview(0, "/blog"),
            pageview(900, "/blog/post-2"),
            pageview(600, "/pricing"),
        ],
    );
    w.visit(
        4,
        at("2025-10-22T21:55:00Z"),
        4,
        "example.com",
        &[pageview(0, "/"), pageview(600, "/about")],
    );
    w.visit(
        6,
        at("2025-11-02T22:50:00Z"),
        6,
        "example.com",
        &[pageview(0, "/pricing"), pageview(1200, "/")],
    );
    // The repeated hour of 2024-10-27: 02:30 CEST and 02:20 CET.
    w.visit(
        2,
        at("2024-10-27T00:30:00Z"),
        0,
        "example.com",
        &[pageview(0, "/"), pageview(3000, "/blog")],
    );
    // A visit that starts on the site itself.
    w.visit(
        7,
        at("2025-10-24T10:00:00Z"),
        INTERNAL,
        "example.com",
        &[pageview(0, "/docs/Getting-Started")],
    );
    // A person's visit with a bot's event in it, earlier and from elsewhere: the visit's
    // properties are those of its first event that is not a bot's.
    w.visit(
        10,
        at("2025-10-28T09:00:00Z"),
        2,
        "example.com",
        &[
            pageview(0, "/"),
            pageview(120, "/blog"),
            interaction(&mut Rng::new(3), 60, "/blog"),
        ],
    );
    let mut intruder = w.rows.last().unwrap().clone();
    intruder.event_id = w.event_id();
    intruder.timestamp -= 600;
    intruder.received_at = intruder.timestamp;
    intruder.is_bot = 1;
    intruder.country = "CN".into();
    intruder.pathname = "/wp-admin".into();
    intruder.event_type = "pageview".into();
    intruder.event_name = String::new();
    intruder.properties = String::new();
    w.rows.push(intruder);
    // Bots.
    for i in 0..6 {
        let start = at("2025-10-20T08:00:00Z") + i * 2 * 86_400 + i * 3_600;
        w.visit(
            BOT,
            start,
            0,
            "example.com",
            &[
                pageview(0, "/"),
                pageview(5, "/pricing"),
                pageview(5, "/blog"),
            ],
        );
    }
    w.visit(
        BOT,
        at("2024-10-25T08:00:00Z"),
        0,
        "example.com",
        &[pageview(0, "/")],
    );
    let mut rows = std::mem::take(&mut w.rows);
    // Copies of some events (a redelivery, a client's retry): the same event_id.
    let mut copies = Rng::new(seed ^ 0xd0b1e);
    let duplicates: Vec<EventRow> = rows.iter().filter(|_| copies.chance(8)).cloned().collect();
    rows.extend(duplicates);

    let ms = |utc: &str| (at(utc) * 1000) as u64;
    let claim = |anon: &str, user: &str, trusted: bool, received: u64| ClaimRow {
        site_id,
        anonymous_id: anon.into(),
        user_id: user.into(),
        trusted: u8::from(trusted),
        claimed_at_ms: received - 500,
        received_at_ms: received,
        rank: claim_rank(trusted, received),
    };
    let claims = vec![
        claim("dev-alice-1", "alice", true, ms("2025-10-01T10:00:00Z")),
        claim("dev-alice-2", "alice", false, ms("2025-10-01T10:00:00Z")),
        // Later and keyless as well: the first claim keeps it.
        claim("dev-alice-2", "bob", false, ms("2025-10-10T10:00:00Z")),
        claim("dev-bob", "bob", false, ms("2025-10-02T10:00:00Z")),
        // Keyless first, then keyed: the keyed claim owns it.
        claim("dev-shared", "carol", false, ms("2025-09-01T10:00:00Z")),
        claim("dev-shared", "alice", true, ms("2025-10-15T10:00:00Z")),
    ];
    Dataset {
        site_id,
        time_zone: TIME_ZONE.into(),
        rows,
        claims,
    }
}

/// Puts a site in [`TIME_ZONE`] (`rivulet-admin sites update N --timezone`) and makes it
/// a key that reads its statistics (`rivulet-admin keys create --site N --scope
/// stats:read`); returns the key.
pub async fn prepare_site(site_id: u32) -> String {
    let site = site_id.to_string();
    let updated =
        crate::data::run_admin_async(&["sites", "update", &site, "--timezone", TIME_ZONE], &[])
            .await
            .json();
    assert_eq!(updated["timezone"], TIME_ZONE, "{updated}");
    let key = crate::data::run_admin_async(
        &["keys", "create", "--site", &site, "--scope", "stats:read"],
        &[],
    )
    .await
    .json();
    assert_eq!(key["scopes"], json!(["stats:read"]), "{key}");
    key["api_key"].as_str().expect("the new key").to_string()
}

/// Writes a dataset as the enricher writes: each event's first copy in one insert, the
/// second copies in another (so that they are separate rows until ClickHouse merges), by
/// RowBinary through the `events` client (on a cluster, the Distributed table with
/// synchronous inserts and the quorum); then the claims.
pub async fn load(db: &Db, ds: &Dataset) {
    let mut seen = HashSet::new();
    let (mut first, mut again) = (Vec::new(), Vec::new());
    for r in &ds.rows {
        let out = if seen.insert(r.event_id) {
            &mut first
        } else {
            &mut again
        };
        r.write_row_binary(out);
    }
    for data in [first, again] {
        if !data.is_empty() {
            rivulet_enrichment::insert::insert_row_binary(db, &[bytes::Bytes::from(data)])
                .await
                .expect("insert the dataset's events");
        }
    }
    let mut insert = db
        .client
        .insert::<ClaimRow>(CLAIMS_TABLE)
        .await
        .expect("insert claims");
    for c in &ds.claims {
        insert.write(c).await.expect("write a claim");
    }
    insert.end().await.expect("insert claims");
}

impl Dataset {
    /// The dataset after `rivulet-admin erase --user-id user`: without the events under
    /// that user id or under an anonymous id they claimed (won or lost) or sent with their
    /// user id, and without the claims of those ids.
    pub fn without_person(&self, user: &str) -> Dataset {
        let anonymous = self.anonymous_ids_of(user);
        let gone = |user_id: &str, anon: &str| user_id == user || anonymous.contains(anon);
        Dataset {
            rows: self
                .rows
                .iter()
                .filter(|r| !gone(&r.user_id, &r.anonymous_id))
                .cloned()
                .collect(),
            claims: self
                .claims
                .iter()
                .filter(|c| !gone(&c.user_id, &c.anonymous_id))
                .cloned()
                .collect(),
            ..self.clone()
        }
    }

    /// The distinct events an erasure of `user` removes (bots' too, if any were theirs).
    pub fn events_of_person(&self, user: &str) -> usize {
        let anonymous = self.anonymous_ids_of(user);
        self.rows
            .iter()
            .filter(|r| r.user_id == user || anonymous.contains(r.anonymous_id.as_str()))
            .map(|r| r.event_id)
            .collect::<HashSet<_>>()
            .len()
    }

    fn anonymous_ids_of(&self, user: &str) -> HashSet<&str> {
        self.claims
            .iter()
            .filter(|c| c.user_id == user)
            .map(|c| c.anonymous_id.as_str())
            .chain(
                self.rows
                    .iter()
                    .filter(|r| r.user_id == user)
                    .map(|r| r.anonymous_id.as_str()),
            )
            .filter(|a| !a.is_empty())
            .collect()
    }

    /// The response docs/stats-api.md defines for `request` over this dataset. Supports
    /// what the tests ask: date ranges of two dates, comparisons `previous_period` and
    /// `year_over_year`, every metric, dimension and filter.
    pub fn expected(&self, request: &Value) -> Value {
        let q = Query::parse(request);
        let tz = TimeZone::get(&self.time_zone).expect("an IANA time zone");
        let events = self.events();
        let main = Period::new(&tz, q.first, q.last, &events);
        let bucket = q.time_dim().map(|i| bucket_of(&q.dims[i], &main));
        let labels = bucket.map(|b| main.labels(b));
        let mut rows = self.rows_of(&q, &main, &events, bucket);
        let order = q.order();
        rows.sort_by(|a, b| {
            for (key, asc) in &order {
                let c = match key {
                    OrderKey::Metric(i) => match (a.raw[*i].value(), b.raw[*i].value()) {
                        (Some(x), Some(y)) => {
                            let c = x.partial_cmp(&y).unwrap_or(Ordering::Equal);
                            if *asc {
                                c
                            } else {
                                c.reverse()
                            }
                        }
                        // No value (a percentile of nothing) comes last either way.
                        (x, y) => x.is_none().cmp(&y.is_none()),
                    },
                    OrderKey::Dim(i) if *asc => a.dims[*i].cmp(&b.dims[*i]),
                    OrderKey::Dim(i) => b.dims[*i].cmp(&a.dims[*i]),
                };
                if c != Ordering::Equal {
                    return c;
                }
            }
            Ordering::Equal
        });
        let total_rows = rows.len();
        let page: Vec<&Row> = rows.iter().skip(q.offset).take(q.limit).collect();

        let comparison = q.comparison.as_ref().map(|mode| {
            let (first, last) = match mode.as_str() {
                "previous_period" => {
                    let days = i64::from(q.first.until(q.last).unwrap().get_days()) + 1;
                    (
                        q.first.checked_sub(days.days()).unwrap(),
                        q.first.yesterday().unwrap(),
                    )
                }
                "year_over_year" => (
                    q.first.checked_sub(1.year()).unwrap(),
                    q.last.checked_sub(1.year()).unwrap(),
                ),
                other => panic!("the evaluator knows no comparison mode {other}"),
            };
            let period = Period::new(&tz, first, last, &events);
            let labels = bucket.map(|b| period.labels(b));
            let rows = self.rows_of(&q, &period, &events, bucket);
            (period, labels, rows)
        });

        let time = q.time_dim();
        let key = |dims: &[String], labels: &Option<Vec<String>>| {
            let position = time.and_then(|t| labels.as_ref()?.iter().position(|l| *l == dims[t]));
            let others: Vec<String> = dims
                .iter()
                .enumerate()
                .filter(|(i, _)| Some(*i) != time)
                .map(|(_, v)| v.clone())
                .collect();
            (position, others)
        };
        let compared = comparison.as_ref().map(|(_, labels, rows)| {
            rows.iter()
                .map(|r| (key(&r.dims, labels), r))
                .collect::<HashMap<_, _>>()
        });
        // With dimensions and no row on the page there is nothing to compare.
        let attach = compared.is_some() && (q.dims.is_empty() || !page.is_empty());
        let results: Vec<Value> = page
            .iter()
            .map(|row| {
                let mut out = json!({
                    "metrics": q.metrics.iter().zip(&row.raw).map(|(m, r)| shown(m, r).0).collect::<Vec<_>>(),
                    "dimensions": row.dims.iter().enumerate().map(|(i, v)| label(&q.dims[i], v)).collect::<Vec<_>>(),
                });
                if attach {
                    let (_, comp_labels, _) = comparison.as_ref().unwrap();
                    let k = key(&row.dims, &labels);
                    let twin = compared.as_ref().unwrap().get(&k);
                    let dims: Vec<Value> = row
                        .dims
                        .iter()
                        .enumerate()
                        .map(|(i, v)| {
                            if Some(i) == time {
                                k.0.and_then(|p| comp_labels.as_ref()?.get(p).cloned())
                                    .map_or(Value::Null, Value::String)
                            } else {
                                Value::String(label(&q.dims[i], v))
                            }
                        })
                        .collect();
                    let old: Vec<(Value, Option<f64>)> = q
                        .metrics
                        .iter()
                        .enumerate()
                        .map(|(i, m)| shown(m, &twin.map_or(Raw::absent(m), |t| t.raw[i])))
                        .collect();
                    let new: Vec<Option<f64>> = q
                        .metrics
                        .iter()
                        .zip(&row.raw)
                        .map(|(m, r)| shown(m, r).1)
                        .collect();
                    out["comparison"] = json!({
                        "dimensions": dims,
                        "metrics": old.iter().map(|(v, _)| v.clone()).collect::<Vec<_>>(),
                        "change": q.metrics.iter().zip(old.iter().zip(&new))
                            .map(|(m, ((_, o), n))| change(m, *o, *n)).collect::<Vec<_>>(),
                    });
                }
                out
            })
            .collect();

        let mut meta = serde_json::Map::new();
        if q.time_labels {
            meta.insert("time_labels".into(), json!(labels.clone().unwrap()));
        }
        if q.total_rows {
            meta.insert("total_rows".into(), json!(total_rows));
        }
        if let Some((period, _, _)) = &comparison {
            meta.insert("comparison_date_range".into(), json!(period.echo()));
        }
        let mut include =
            json!({"time_labels": q.time_labels, "total_rows": q.total_rows, "imports": q.imports});
        if let Some(mode) = &q.comparison {
            include["comparisons"] = json!({ "mode": mode });
        }
        json!({
            "results": results,
            "meta": meta,
            "query": {
                "site_id": q.site_id,
                "metrics": q.metrics,
                "date_range": main.echo(),
                "filters": q.filters_json,
                "dimensions": q.dims,
                "order_by": order.iter().map(|(k, asc)| {
                    let name = match k {
                        OrderKey::Metric(i) => q.metrics[*i].clone(),
                        OrderKey::Dim(i) => q.dims[*i].clone(),
                    };
                    json!([name, if *asc { "asc" } else { "desc" }])
                }).collect::<Vec<_>>(),
                "include": include,
                "pagination": {"limit": q.limit, "offset": q.offset},
            }
        })
    }

    /// Every event once (the first copy of each event_id), bots left out.
    fn events(&self) -> Vec<&EventRow> {
        let mut seen = HashSet::new();
        self.rows
            .iter()
            .filter(|r| r.is_bot == 0 && seen.insert(r.event_id))
            .collect()
    }

    /// The person of an event (docs: "Users"): its user id, unless that is a visitor id;
    /// then the owner of its anonymous id, if claimed.
    fn person(&self, e: &EventRow) -> String {
        let visitor_id = e.user_id.len() == 32
            && e.user_id
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !visitor_id {
            return e.user_id.clone();
        }
        if e.anonymous_id.is_empty() {
            return String::new();
        }
        // The strongest claim: keyed before keyless, then the first received.
        self.claims
            .iter()
            .filter(|c| c.site_id == self.site_id && c.anonymous_id == e.anonymous_id)
            .max_by_key(|c| (c.trusted, Reverse(c.received_at_ms), c.user_id.clone()))
            .map(|c| c.user_id.clone())
            .unwrap_or_default()
    }

    /// Every row of a query over one period, before the order and the page.
    fn rows_of<'a>(
        &self,
        q: &Query,
        period: &Period<'a>,
        events: &[&'a EventRow],
        bucket: Option<Bucket>,
    ) -> Vec<Row> {
        let mut groups: BTreeMap<Vec<String>, Acc> = BTreeMap::new();
        let mut all_visitors: HashSet<&str> = HashSet::new();
        for e in events
            .iter()
            .filter(|e| (period.start..period.end).contains(&i64::from(e.timestamp)))
        {
            let visit = &period.visits[e.session_id.as_str()];
            let ctx = Ctx {
                period,
                visit,
                bucket,
            };
            if !q.filters.iter().all(|f| f.holds(e, &ctx)) {
                continue;
            }
            all_visitors.insert(&e.user_id);
            let dims: Vec<String> = q.dims.iter().map(|d| ctx.value(d, e)).collect();
            let acc = groups.entry(dims).or_default();
            acc.visitors.insert(e.user_id.clone());
            acc.visits.insert(e.session_id.clone());
            acc.events.insert(e.event_id);
            if e.event_type == "pageview" {
                acc.pageviews.insert(e.event_id);
            }
            let person = self.person(e);
            if !person.is_empty() {
                acc.persons.insert(person);
            }
            if e.event_type == "performance" {
                for (vital, value) in VITALS.iter().zip([e.lcp, e.cls, e.inp, e.fcp, e.ttfb]) {
                    if let Some(v) = value {
                        acc.vitals.entry(vital).or_default().push(v);
                    }
                }
            }
        }
        if q.dims.is_empty() {
            groups.entry(Vec::new()).or_default();
        }
        let total = all_visitors.len() as u128;
        groups
            .into_iter()
            .map(|(dims, acc)| {
                let visits: Vec<&Visit> = acc
                    .visits
                    .iter()
                    .map(|s| &period.visits[s.as_str()])
                    .collect();
                let n = visits.len() as u128;
                let raw = q
                    .metrics
                    .iter()
                    .map(|m| match m.as_str() {
                        "visitors" => Raw::count(acc.visitors.len()),
                        "visits" => Raw::count(acc.visits.len()),
                        "pageviews" => Raw::count(acc.pageviews.len()),
                        "events" => Raw::count(acc.events.len()),
                        "users" => Raw::count(acc.persons.len()),
                        "views_per_visit" => {
                            Raw::ratio(visits.iter().map(|v| u128::from(v.pageviews)).sum(), n)
                        }
                        "bounce_rate" => {
                            Raw::ratio(100 * visits.iter().filter(|v| v.bounce).count() as u128, n)
                        }
                        "visit_duration" => {
                            Raw::ratio(visits.iter().map(|v| v.duration as u128).sum(), n)
                        }
                        "percentage" => Raw::ratio(100 * acc.visitors.len() as u128, total),
                        other => match other.strip_suffix("_p75") {
                            Some(vital) if VITALS.contains(&vital) => {
                                Raw::Measured(p75(acc.vitals.get(vital).map_or(&[], |v| v)))
                            }
                            _ => panic!("the evaluator knows no metric {other}"),
                        },
                    })
                    .collect();
                Row { dims, raw }
            })
            .collect()
    }
}

/// One row of a query: each dimension's raw value ("" when empty), each metric's exact
/// value.
struct Row {
    dims: Vec<String>,
    raw: Vec<Raw>,
}

#[derive(Default)]
struct Acc {
    visitors: HashSet<String>,
    visits: HashSet<String>,
    pageviews: HashSet<Uuid>,
    events: HashSet<Uuid>,
    persons: HashSet<String>,
    /// Each vital's values, one per `performance` event that measured it.
    vitals: HashMap<&'static str, Vec<f64>>,
}

/// The web vitals, as their columns and metrics (`<vital>_p75`) name them.
const VITALS: [&str; 5] = ["lcp", "cls", "inp", "fcp", "ttfb"];

/// The 75th percentile as the docs define it ("Web vitals"), which is ClickHouse's
/// `quantileExact(0.75)`: of the `n` values sorted ascending, the one at 0-based index
/// ⌊3n / 4⌋; none of none.
fn p75(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() * 3 / 4).copied()
}

/// A metric's exact value.
#[derive(Clone, Copy)]
enum Raw {
    /// `num / den` (`den` at least 1, as the engine's `greatest(…, 1)`).
    Ratio { num: u128, den: u128 },
    /// A percentile: one of the values as stored, or none without a measurement.
    Measured(Option<f64>),
}

impl Raw {
    fn count(n: usize) -> Raw {
        Raw::Ratio {
            num: n as u128,
            den: 1,
        }
    }
    fn ratio(num: u128, den: u128) -> Raw {
        Raw::Ratio {
            num,
            den: den.max(1),
        }
    }
    /// A row that has no events: counts 0, percentiles none.
    fn absent(metric: &str) -> Raw {
        if metric.ends_with("_p75") {
            Raw::Measured(None)
        } else {
            Raw::count(0)
        }
    }
    fn value(&self) -> Option<f64> {
        match *self {
            Raw::Ratio { num, den } => Some(num as f64 / den as f64),
            Raw::Measured(v) => v,
        }
    }
}

/// A metric as the response shows it (docs: "Metrics": integers, views_per_visit with 2
/// decimals, percentage with 1, cls_p75 with 3; `null` without a value), and that value
/// as a number. A ratio is rounded exactly, half away from zero; a percentile is a stored
/// `Float64` rounded in `f64`, half away from zero (the values' ties, `x.5` ms, are exact
/// there).
fn shown(metric: &str, raw: &Raw) -> (Value, Option<f64>) {
    let decimals = match metric {
        "views_per_visit" => 2,
        "percentage" => 1,
        "cls_p75" => 3,
        _ => 0,
    };
    let scale = 10u128.pow(decimals);
    let k = match *raw {
        Raw::Ratio { num, den } => (2 * num * scale + den) / (2 * den),
        Raw::Measured(None) => return (Value::Null, None),
        Raw::Measured(Some(v)) => (v * scale as f64).round() as u128,
    };
    if decimals == 0 {
        (json!(k as u64), Some(k as f64))
    } else {
        let v = k as f64 / scale as f64;
        (Value::Number(Number::from_f64(v).unwrap()), Some(v))
    }
}

/// A comparison's change (docs: "Comparisons"): the relative change in percent of the
/// shown values, rounded (100 from 0 to anything, 0 from 0 to 0); for bounce_rate the
/// difference in points, null when the old rate is 0; null when either has no value.
fn change(metric: &str, old: Option<f64>, new: Option<f64>) -> Value {
    let (Some(old), Some(new)) = (old, new) else {
        return Value::Null;
    };
    if metric == "bounce_rate" {
        return if old > 0.0 {
            json!((new - old).round() as i64)
        } else {
            Value::Null
        };
    }
    if old == 0.0 {
        return json!(if new > 0.0 { 100 } else { 0 });
    }
    json!(((new - old) / old * 100.0).round() as i64)
}

/// The label of a dimension's value: its empty label when empty (docs: "Dimensions").
fn label(dim: &str, raw: &str) -> String {
    match empty_label(dim) {
        Some(l) if raw.is_empty() => l.to_string(),
        _ => raw.to_string(),
    }
}

fn empty_label(dim: &str) -> Option<&'static str> {
    if dim.starts_with("time") {
        None
    } else if dim == "visit:source" || dim == "visit:referrer" {
        Some("Direct / None")
    } else if dim.starts_with("event:props:") {
        Some("(none)")
    } else {
        Some("(not set)")
    }
}

// ---------------------------------------------------------------------------------------
// Periods, visits and time buckets.

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Bucket {
    Hour,
    Day,
    Week,
    Month,
}

/// A time dimension's bucket; `time` by the main range's length in local days.
fn bucket_of(dim: &str, main: &Period) -> Bucket {
    match dim {
        "time:hour" => Bucket::Hour,
        "time:day" => Bucket::Day,
        "time:week" => Bucket::Week,
        "time:month" => Bucket::Month,
        "time" => match i64::from(main.first.until(main.last).unwrap().get_days()) + 1 {
            ..=1 => Bucket::Hour,
            2..=31 => Bucket::Day,
            32..=92 => Bucket::Week,
            _ => Bucket::Month,
        },
        other => panic!("{other} is not a time dimension"),
    }
}

/// A visit as the docs measure it, from all its events within the lookaround.
struct Visit {
    attrs: HashMap<&'static str, String>,
    pageviews: u64,
    bounce: bool,
    duration: i64,
}

/// A range of local dates: `[start, end)` in epoch seconds, and its visits.
struct Period<'a> {
    tz: &'a TimeZone,
    first: Date,
    last: Date,
    start: i64,
    end: i64,
    visits: HashMap<&'a str, Visit>,
}

impl<'a> Period<'a> {
    fn new(tz: &'a TimeZone, first: Date, last: Date, events: &[&'a EventRow]) -> Period<'a> {
        let start = start_of_day(tz, first);
        let end = start_of_day(tz, last.tomorrow().unwrap());
        let mut by_visit: HashMap<&str, Vec<&EventRow>> = HashMap::new();
        for e in events {
            let t = i64::from(e.timestamp);
            if t >= start - LOOKAROUND && t < end + LOOKAROUND {
                by_visit.entry(&e.session_id).or_default().push(e);
            }
        }
        let visits = by_visit
            .into_iter()
            .map(|(id, mut evs)| {
                evs.sort_by_key(|e| (e.timestamp, e.event_id));
                (id, visit_of(&evs))
            })
            .collect();
        Period {
            tz,
            first,
            last,
            start,
            end,
            visits,
        }
    }

    /// `[first second, last second]` as the response echoes them: local, with the offset.
    fn echo(&self) -> [String; 2] {
        [self.iso(self.start), self.iso(self.end - 1)]
    }

    fn iso(&self, second: i64) -> String {
        self.zoned(second)
            .strftime("%Y-%m-%dT%H:%M:%S%:z")
            .to_string()
    }

    fn zoned(&self, second: i64) -> jiff::Zoned {
        Timestamp::from_second(second)
            .unwrap()
            .to_zoned(self.tz.clone())
    }

    /// An event's bucket: its local hour, day, week (from Monday, or the range's first
    /// day if later) or month.
    fn bucket(&self, bucket: Bucket, second: i64) -> String {
        let z = self.zoned(second);
        let date = z.date();
        match bucket {
            Bucket::Hour => z.strftime("%Y-%m-%d %H:00:00").to_string(),
            Bucket::Day => date.to_string(),
            Bucket::Week => {
                let back = i64::from(date.weekday().to_monday_zero_offset());
                let monday = date.checked_sub(back.days()).unwrap();
                monday.max(self.first).to_string()
            }
            Bucket::Month => date.first_of_month().to_string(),
        }
    }

    /// Every bucket of the range, in order (a local hour that repeats is one bucket).
    fn labels(&self, bucket: Bucket) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut push = |l: String| {
            if out.last() != Some(&l) {
                out.push(l);
            }
        };
        match bucket {
            Bucket::Hour => {
                let mut t = self.start;
                while t < self.end {
                    push(self.bucket(Bucket::Hour, t));
                    t += 3600;
                }
            }
            Bucket::Day | Bucket::Week => {
                let mut d = self.first;
                while d <= self.last {
                    if bucket == Bucket::Day || d == self.first || d.weekday() == Weekday::Monday {
                        push(d.to_string());
                    }
                    d = d.tomorrow().unwrap();
                }
            }
            Bucket::Month => {
                let mut d = self.first.first_of_month();
                while d <= self.last {
                    push(d.to_string());
                    d = d.checked_add(1.month()).unwrap();
                }
            }
        }
        out
    }
}

fn start_of_day(tz: &TimeZone, date: Date) -> i64 {
    date.to_zoned(tz.clone())
        .unwrap()
        .start_of_day()
        .unwrap()
        .timestamp()
        .as_second()
}

/// A visit's properties (its first event's; the entry and exit page of its first and last
/// pageview) and measures, from its events in time order.
fn visit_of(evs: &[&EventRow]) -> Visit {
    let first = evs[0];
    let pageviews: Vec<&&EventRow> = evs.iter().filter(|e| e.event_type == "pageview").collect();
    let engaged = evs
        .iter()
        .any(|e| ENGAGEMENT.contains(&e.event_type.as_str()));
    let internal = first.channel == "Internal";
    let utm = |name: &str| url_parameter(&first.querystring, name);
    let source = match utm("utm_source") {
        s if !s.is_empty() => s,
        _ if internal => String::new(),
        _ => domain_without_www(&first.referrer),
    };
    let screen = match first.screen_width {
        0 => "",
        w if w < 576 => "Mobile",
        w if w < 992 => "Tablet",
        w if w < 1440 => "Laptop",
        _ => "Desktop",
    };
    let attrs: HashMap<&'static str, String> = [
        (
            "entry_page",
            pageviews
                .first()
                .map(|e| e.pathname.clone())
                .unwrap_or_default(),
        ),
        (
            "exit_page",
            pageviews
                .last()
                .map(|e| e.pathname.clone())
                .unwrap_or_default(),
        ),
        ("source", source),
        (
            "referrer",
            if internal {
                String::new()
            } else {
                first.referrer.clone()
            },
        ),
        ("channel", first.channel.clone()),
        ("utm_source", utm("utm_source")),
        ("utm_medium", utm("utm_medium")),
        ("utm_campaign", utm("utm_campaign")),
        ("utm_content", utm("utm_content")),
        ("utm_term", utm("utm_term")),
        ("device", first.device_type.clone()),
        ("browser", first.browser.clone()),
        ("browser_version", first.browser_version.clone()),
        ("os", first.operating_system.clone()),
        ("os_version", first.operating_system_version.clone()),
        ("country", first.country.clone()),
        ("region", first.region.clone()),
        ("city", first.city.clone()),
        ("screen", screen.to_string()),
    ]
    .into_iter()
    .collect();
    Visit {
        attrs,
        pageviews: pageviews.len() as u64,
        bounce: pageviews.len() == 1 && !engaged,
        duration: i64::from(evs[evs.len() - 1].timestamp) - i64::from(first.timestamp),
    }
}

/// A query parameter of a query string stored with or without its `?`: URL-decoded, `+`
/// as a space.
fn url_parameter(querystring: &str, name: &str) -> String {
    let q = querystring.strip_prefix('?').unwrap_or(querystring);
    let q = q.split('#').next().unwrap_or_default();
    q.split('&')
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
        .map(|v| percent_decode(&v.replace('+', " ")))
        .unwrap_or_default()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).and_then(|c| hex(*c)),
            b.get(i + 2).and_then(|c| hex(*c)),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The host of a URL without a leading `www.`.
fn domain_without_www(url: &str) -> String {
    let Some((_, rest)) = url.split_once("://") else {
        return String::new();
    };
    let host = rest.split(['/', '?', '#', ':']).next().unwrap_or_default();
    host.strip_prefix("www.").unwrap_or(host).to_string()
}

/// A custom property as text: a string unescaped, anything else as its JSON; "" when
/// absent.
fn property(properties: &str, name: &str) -> String {
    let Ok(Value::Object(map)) = serde_json::from_str::<Value>(properties) else {
        return String::new();
    };
    match map.get(name) {
        None => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
    }
}

/// What a dimension's value is read from: the event, its visit, its period.
struct Ctx<'a, 'b> {
    period: &'b Period<'a>,
    visit: &'b Visit,
    bucket: Option<Bucket>,
}

impl Ctx<'_, '_> {
    /// A dimension's raw value for an event ("" when empty).
    fn value(&self, dim: &str, e: &EventRow) -> String {
        if let Some(name) = dim.strip_prefix("event:props:") {
            return property(&e.properties, name);
        }
        if let Some(p) = dim.strip_prefix("visit:") {
            return self
                .visit
                .attrs
                .get(p)
                .unwrap_or_else(|| panic!("the evaluator knows no dimension {dim}"))
                .clone();
        }
        match dim {
            "event:name" if e.event_name.is_empty() => e.event_type.clone(),
            "event:name" => e.event_name.clone(),
            "event:page" => e.pathname.clone(),
            "event:hostname" => e.hostname.clone(),
            "event:type" => e.event_type.clone(),
            d if d.starts_with("time") => self
                .period
                .bucket(self.bucket.expect("a time bucket"), i64::from(e.timestamp)),
            other => panic!("the evaluator knows no dimension {other}"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Queries and filters.

enum Filter {
    Leaf {
        op: String,
        dim: String,
        values: Vec<String>,
        patterns: Vec<Regex>,
        case_sensitive: bool,
    },
    And(Vec<Filter>),
    Or(Vec<Filter>),
    Not(Box<Filter>),
}

impl Filter {
    fn parse(v: &Value) -> Filter {
        let items = v.as_array().expect("a filter is an array");
        let op = items[0].as_str().unwrap();
        match op {
            "and" | "or" => {
                let children = items[1].as_array().unwrap().iter().map(Filter::parse);
                if op == "and" {
                    Filter::And(children.collect())
                } else {
                    Filter::Or(children.collect())
                }
            }
            "not" => Filter::Not(Box::new(Filter::parse(&items[1]))),
            _ => {
                let case_sensitive = items
                    .get(3)
                    .and_then(|m| m["case_sensitive"].as_bool())
                    .unwrap_or(true);
                let values: Vec<String> = items[2]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|s| s.as_str().unwrap().to_string())
                    .collect();
                let patterns = if op.starts_with("matches") {
                    values
                        .iter()
                        .map(|p| {
                            let p = if case_sensitive {
                                p.clone()
                            } else {
                                format!("(?i:{p})")
                            };
                            Regex::new(&p).unwrap()
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                Filter::Leaf {
                    op: op.to_string(),
                    dim: items[1].as_str().unwrap().to_string(),
                    values,
                    patterns,
                    case_sensitive,
                }
            }
        }
    }

    /// Whether an event passes: `event:` leaves read the event, `visit:` leaves its visit.
    fn holds(&self, e: &EventRow, ctx: &Ctx) -> bool {
        match self {
            Filter::And(fs) => fs.iter().all(|f| f.holds(e, ctx)),
            Filter::Or(fs) => fs.iter().any(|f| f.holds(e, ctx)),
            Filter::Not(f) => !f.holds(e, ctx),
            Filter::Leaf {
                op,
                dim,
                values,
                patterns,
                case_sensitive,
            } => {
                let value = ctx.value(dim, e);
                let fold = |s: &str| {
                    if *case_sensitive {
                        s.to_string()
                    } else {
                        s.to_lowercase()
                    }
                };
                let (positive, negated) = match op.as_str() {
                    "is" | "is_not" => {
                        let empty = empty_label(dim);
                        let any = values.iter().any(|v| {
                            // The empty label stands for the empty value.
                            let v = if Some(v.as_str()) == empty { "" } else { v };
                            fold(&value) == fold(v)
                        });
                        (any, op == "is_not")
                    }
                    "contains" | "contains_not" => (
                        values.iter().any(|v| fold(&value).contains(&fold(v))),
                        op == "contains_not",
                    ),
                    "matches" | "matches_not" => (
                        patterns.iter().any(|p| p.is_match(&value)),
                        op == "matches_not",
                    ),
                    other => panic!("the evaluator knows no operator {other}"),
                };
                positive != negated
            }
        }
    }
}

enum OrderKey {
    Metric(usize),
    Dim(usize),
}

/// A request as the evaluator reads it.
struct Query {
    site_id: Value,
    metrics: Vec<String>,
    first: Date,
    last: Date,
    dims: Vec<String>,
    filters_json: Value,
    filters: Vec<Filter>,
    order_by: Vec<(String, bool)>,
    time_labels: bool,
    total_rows: bool,
    imports: bool,
    comparison: Option<String>,
    limit: usize,
    offset: usize,
}

impl Query {
    fn parse(r: &Value) -> Query {
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
                .unwrap_or_default()
        };
        let range = strings(&r["date_range"]);
        assert_eq!(
            range.len(),
            2,
            "the evaluator reads date ranges of two dates"
        );
        let date = |s: &str| s.parse::<Date>().unwrap();
        let filters_json = if r["filters"].is_null() {
            json!([])
        } else {
            r["filters"].clone()
        };
        let include = &r["include"];
        Query {
            site_id: r["site_id"].clone(),
            metrics: strings(&r["metrics"]),
            first: date(&range[0]),
            last: date(&range[1]),
            dims: strings(&r["dimensions"]),
            filters: filters_json
                .as_array()
                .unwrap()
                .iter()
                .map(Filter::parse)
                .collect(),
            filters_json,
            order_by: r["order_by"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|o| (o[0].as_str().unwrap().to_string(), o[1] == "asc"))
                        .collect()
                })
                .unwrap_or_default(),
            time_labels: include["time_labels"].as_bool().unwrap_or(false),
            total_rows: include["total_rows"].as_bool().unwrap_or(false),
            imports: include["imports"].as_bool().unwrap_or(false),
            comparison: include["comparisons"]["mode"].as_str().map(str::to_string),
            limit: r["pagination"]["limit"].as_u64().unwrap_or(10_000) as usize,
            offset: r["pagination"]["offset"].as_u64().unwrap_or(0) as usize,
        }
    }

    fn time_dim(&self) -> Option<usize> {
        self.dims.iter().position(|d| d.starts_with("time"))
    }

    /// The order asked for, else time ascending or the first metric descending, then every
    /// dimension not in it yet, ascending (docs: "Order and pages").
    fn order(&self) -> Vec<(OrderKey, bool)> {
        let key = |name: &str| match self.metrics.iter().position(|m| m == name) {
            Some(i) => OrderKey::Metric(i),
            None => OrderKey::Dim(self.dims.iter().position(|d| d == name).unwrap()),
        };
        let mut order: Vec<(OrderKey, bool)> = self
            .order_by
            .iter()
            .map(|(n, asc)| (key(n), *asc))
            .collect();
        if order.is_empty() {
            order.push(match self.time_dim() {
                Some(t) => (OrderKey::Dim(t), true),
                None => (OrderKey::Metric(0), false),
            });
        }
        for i in 0..self.dims.len() {
            if !order
                .iter()
                .any(|(k, _)| matches!(k, OrderKey::Dim(j) if *j == i))
            {
                order.push((OrderKey::Dim(i), true));
            }
        }
        order
    }
}

// ---------------------------------------------------------------------------------------
// The query matrix.

/// Every metric but `percentage` (which needs a dimension).
/// [`OVERVIEW`] without `users`: what the engine answers from one group per visit.
pub const OVERVIEW_BUT_USERS: [&str; 7] = [
    "visitors",
    "visits",
    "pageviews",
    "views_per_visit",
    "bounce_rate",
    "visit_duration",
    "events",
];

pub const OVERVIEW: [&str; 8] = [
    "visitors",
    "visits",
    "pageviews",
    "views_per_visit",
    "bounce_rate",
    "visit_duration",
    "events",
    "users",
];
/// The metrics an event dimension can be broken down by.
pub const EVENT_METRICS: [&str; 6] = [
    "visitors",
    "visits",
    "pageviews",
    "events",
    "percentage",
    "users",
];
pub const EVENT_DIMENSIONS: [&str; 9] = [
    "event:name",
    "event:page",
    "event:hostname",
    "event:type",
    "event:props:plan",
    "event:props:count",
    "event:props:amount",
    "event:props:flag",
    "event:props:url",
];
pub const VISIT_DIMENSIONS: [&str; 19] = [
    "visit:entry_page",
    "visit:exit_page",
    "visit:source",
    "visit:referrer",
    "visit:channel",
    "visit:utm_source",
    "visit:utm_medium",
    "visit:utm_campaign",
    "visit:utm_content",
    "visit:utm_term",
    "visit:device",
    "visit:browser",
    "visit:browser_version",
    "visit:os",
    "visit:os_version",
    "visit:country",
    "visit:region",
    "visit:city",
    "visit:screen",
];

/// A named query of the matrix.
pub type Named = (String, Value);

fn query(site_id: u32, fields: Value) -> Value {
    let mut q = json!({"site_id": site_id, "date_range": MAIN_RANGE});
    q.as_object_mut()
        .unwrap()
        .extend(fields.as_object().unwrap().clone());
    q
}

/// Every metric (the totals), each event dimension with every metric it takes, each visit
/// dimension with every metric, and two and three dimensions at once.
pub fn metric_and_dimension_queries(site_id: u32) -> Vec<Named> {
    let mut all = OVERVIEW.to_vec();
    all.push("percentage");
    let mut out = vec![(
        "every metric, totals".to_string(),
        query(site_id, json!({"metrics": OVERVIEW})),
    )];
    for d in EVENT_DIMENSIONS {
        out.push((
            d.to_string(),
            query(
                site_id,
                json!({"metrics": EVENT_METRICS, "dimensions": [d], "include": {"total_rows": true}}),
            ),
        ));
    }
    out.push((
        "every metric but users, totals".to_string(),
        query(site_id, json!({"metrics": OVERVIEW_BUT_USERS})),
    ));
    let mut all_but_users = OVERVIEW_BUT_USERS.to_vec();
    all_but_users.push("percentage");
    for d in VISIT_DIMENSIONS {
        out.push((
            d.to_string(),
            query(
                site_id,
                json!({"metrics": all, "dimensions": [d], "include": {"total_rows": true}}),
            ),
        ));
        out.push((
            format!("{d}, every metric but users"),
            query(
                site_id,
                json!({"metrics": all_but_users, "dimensions": [d], "include": {"total_rows": true}}),
            ),
        ));
        // Counts only, no visit measure: one row per visit all the same (the by-visit shape).
        out.push((
            format!("{d}, counts only"),
            query(
                site_id,
                json!({"metrics": ["visitors", "visits", "pageviews", "events", "percentage"],
                       "dimensions": [d], "include": {"total_rows": true}}),
            ),
        ));
    }
    out.push((
        "visit:country × event:type".into(),
        query(
            site_id,
            json!({"metrics": ["visitors", "events", "percentage", "visits"], "dimensions": ["visit:country", "event:type"]}),
        ),
    ));
    out.push((
        "visit:device × visit:browser × time:day".into(),
        query(
            site_id,
            json!({"metrics": ["visits", "bounce_rate", "visit_duration", "views_per_visit"],
                   "dimensions": ["visit:device", "visit:browser", "time:day"]}),
        ),
    ));
    out.push((
        "event:name × event:props:plan, custom events".into(),
        query(
            site_id,
            json!({"metrics": ["visitors", "events"], "dimensions": ["event:name", "event:props:plan"],
                   "filters": [["is", "event:type", ["custom_event"]]]}),
        ),
    ));
    out
}

/// Local time buckets: hours on both DST days (the repeated hour one bucket), days over
/// the week of the change, weeks from a Wednesday, months, and `time` picking each.
pub fn time_queries(site_id: u32) -> Vec<Named> {
    let metrics = json!([
        "visitors",
        "visits",
        "pageviews",
        "events",
        "bounce_rate",
        "visit_duration"
    ]);
    let q = |name: &str, range: [&str; 2], dims: Value| {
        (
            name.to_string(),
            query(
                site_id,
                json!({"metrics": metrics, "date_range": range, "dimensions": dims,
                       "include": {"time_labels": true, "total_rows": true}}),
            ),
        )
    };
    vec![
        q(
            "time:hour on 2025-10-26",
            [DST_DAY, DST_DAY],
            json!(["time:hour"]),
        ),
        q(
            "time on 2025-10-26 (hours)",
            [DST_DAY, DST_DAY],
            json!(["time"]),
        ),
        q(
            "time:hour on 2024-10-27",
            ["2024-10-27", "2024-10-27"],
            json!(["time:hour"]),
        ),
        q(
            "time:hour over 2025-10-25..27",
            ["2025-10-25", "2025-10-27"],
            json!(["time:hour"]),
        ),
        q(
            "time:day over the week of the change",
            ["2025-10-20", "2025-10-26"],
            json!(["time:day"]),
        ),
        q(
            "time:day over the main range",
            MAIN_RANGE,
            json!(["time:day"]),
        ),
        q(
            "time (days) over the main range",
            MAIN_RANGE,
            json!(["time"]),
        ),
        q(
            "time:week from a Wednesday",
            ["2025-10-08", "2025-11-03"],
            json!(["time:week"]),
        ),
        q(
            "time (weeks) over 57 days",
            ["2025-09-15", "2025-11-10"],
            json!(["time"]),
        ),
        q(
            "time:month",
            ["2025-09-15", "2025-11-10"],
            json!(["time:month"]),
        ),
        q(
            "time (months) over 17 months",
            ["2024-07-01", "2025-11-30"],
            json!(["time"]),
        ),
        q(
            "visit:country × time:day",
            ["2025-10-24", "2025-10-28"],
            json!(["visit:country", "time:day"]),
        ),
    ]
}

/// The filters of the matrix: every operator, on event and visit dimensions, case
/// sensitive and not, empty labels, and nested and/or/not trees.
pub fn filters() -> Vec<(&'static str, Value)> {
    let ci = json!({"case_sensitive": false});
    vec![
        ("is event:page", json!([["is", "event:page", ["/pricing"]]])),
        (
            "is_not event:page",
            json!([["is_not", "event:page", ["/pricing", "/"]]]),
        ),
        (
            "contains event:page",
            json!([["contains", "event:page", ["blog"]]]),
        ),
        (
            "contains event:page, any case",
            json!([["contains", "event:page", ["GETTING"], ci]]),
        ),
        (
            "contains event:page, case sensitive",
            json!([["contains", "event:page", ["GETTING"]]]),
        ),
        (
            "contains_not event:page",
            json!([["contains_not", "event:page", ["/docs", "/about"]]]),
        ),
        (
            "matches event:page",
            json!([["matches", "event:page", ["^/blog/post-\\d+$"]]]),
        ),
        (
            "matches event:page, any case",
            json!([["matches", "event:page", ["^/DOCS/"], ci]]),
        ),
        (
            "matches_not event:page",
            json!([["matches_not", "event:page", ["^/$", "^/about"]]]),
        ),
        (
            "matches_not event:page, any case",
            json!([["matches_not", "event:page", ["^/BLOG"], ci]]),
        ),
        (
            "is event:name",
            json!([["is", "event:name", ["signup", "purchase"]]]),
        ),
        (
            "is event:hostname",
            json!([["is", "event:hostname", ["shop.example.com"]]]),
        ),
        (
            "is event:hostname (not set)",
            json!([["is", "event:hostname", ["(not set)"]]]),
        ),
        ("is event:type", json!([["is", "event:type", ["pageview"]]])),
        (
            "is_not event:props:plan (none)",
            json!([["is_not", "event:props:plan", ["(none)"]]]),
        ),
        (
            "is event:props:count",
            json!([["is", "event:props:count", ["3"]]]),
        ),
        (
            "is visit:country",
            json!([["is", "visit:country", ["DE", "FR"]]]),
        ),
        (
            "is_not visit:country",
            json!([["is_not", "visit:country", ["DE"]]]),
        ),
        (
            "is visit:browser, any case",
            json!([["is", "visit:browser", ["chrome"], ci]]),
        ),
        (
            "is visit:browser, case sensitive",
            json!([["is", "visit:browser", ["chrome"]]]),
        ),
        (
            "is_not visit:browser, any case",
            json!([["is_not", "visit:browser", ["FIREFOX"], ci]]),
        ),
        (
            "is visit:source Direct / None",
            json!([["is", "visit:source", ["Direct / None"]]]),
        ),
        (
            "is_not visit:referrer Direct / None",
            json!([["is_not", "visit:referrer", ["Direct / None"]]]),
        ),
        (
            "contains visit:referrer",
            json!([["contains", "visit:referrer", ["google", "bing"]]]),
        ),
        (
            "contains_not visit:utm_campaign, any case",
            json!([["contains_not", "visit:utm_campaign", ["SALE"], ci]]),
        ),
        (
            "matches visit:entry_page",
            json!([["matches", "visit:entry_page", ["^/blog"]]]),
        ),
        (
            "matches_not visit:exit_page",
            json!([["matches_not", "visit:exit_page", ["pricing"]]]),
        ),
        (
            "matches visit:utm_source",
            json!([["matches", "visit:utm_source", ["^news|^twit"]]]),
        ),
        (
            "is visit:screen",
            json!([["is", "visit:screen", ["Laptop", "Mobile"]]]),
        ),
        (
            "is visit:channel",
            json!([["is", "visit:channel", ["Organic Search"]]]),
        ),
        (
            "is visit:entry_page and is visit:exit_page and contains visit:browser",
            json!([
                ["is", "visit:entry_page", ["/", "/pricing"]],
                ["is", "visit:exit_page", ["/pricing", "/about"]],
                ["contains", "visit:browser", ["Chr", "Fire"]]
            ]),
        ),
        (
            "is visit:os_version (not set)",
            json!([["is", "visit:os_version", ["(not set)"]]]),
        ),
        (
            "is visit:city any case and contains visit:region",
            json!([
                ["is", "visit:city", ["berlin", "PARIS"], ci],
                ["contains", "visit:region", ["-"]]
            ]),
        ),
        (
            "the docs' mixed tree",
            json!([
                [
                    "or",
                    [
                        ["is", "visit:country", ["DE"]],
                        [
                            "and",
                            [
                                ["contains", "event:page", ["blog"]],
                                ["not", ["is", "visit:source", ["Direct / None"]]]
                            ]
                        ]
                    ]
                ],
                ["is_not", "event:name", ["signup"]]
            ]),
        ),
        (
            "not (event type or visit device)",
            json!([[
                "not",
                [
                    "or",
                    [
                        ["is", "event:type", ["performance", "error"]],
                        ["is", "visit:device", ["Mobile"]]
                    ]
                ]
            ]]),
        ),
        (
            "and of visit and event leaves",
            json!([[
                "and",
                [
                    ["is", "visit:device", ["Desktop"]],
                    ["matches", "event:page", ["^/(pricing|about)$"]],
                    ["not", ["contains", "visit:browser", ["Fire"]]]
                ]
            ]]),
        ),
    ]
}

/// Each filter with every metric but `percentage`, and some with a dimension.
pub fn filter_queries(site_id: u32) -> Vec<Named> {
    let mut out: Vec<Named> = filters()
        .into_iter()
        .flat_map(|(name, f)| {
            [
                (
                    format!("filter: {name}"),
                    query(site_id, json!({"metrics": OVERVIEW, "filters": f})),
                ),
                // Without `users` the engine reads each visit in one group (its by-visit
                // shape) wherever the filters allow: both shapes are checked.
                (
                    format!("filter without users: {name}"),
                    query(
                        site_id,
                        json!({"metrics": OVERVIEW_BUT_USERS, "filters": f}),
                    ),
                ),
            ]
        })
        .collect();
    let with = |name: &str, dims: Value, metrics: Value, f: Value| {
        (
            format!("filter: {name}"),
            query(
                site_id,
                json!({"metrics": metrics, "dimensions": dims, "filters": f}),
            ),
        )
    };
    out.push(with(
        "is event:hostname, by visit:entry_page",
        json!(["visit:entry_page"]),
        json!(["visits", "bounce_rate", "views_per_visit", "percentage"]),
        json!([["is", "event:hostname", ["shop.example.com"]]]),
    ));
    out.push(with(
        "is visit:channel, by visit:source",
        json!(["visit:source"]),
        json!(["visitors", "visits", "pageviews", "percentage"]),
        json!([["is", "visit:channel", ["Organic Search", "Referral"]]]),
    ));
    out.push(with(
        "contains event:page, by event:page",
        json!(["event:page"]),
        json!(["visitors", "pageviews", "percentage"]),
        json!([["contains", "event:page", ["blog"], {"case_sensitive": false}]]),
    ));
    // Event rows and filters that only pick visits: the events of the visits kept.
    out.push(with(
        "is visit:country and is visit:browser, by event:page",
        json!(["event:page"]),
        json!(["visitors", "visits", "pageviews", "events", "percentage"]),
        json!([
            ["is", "visit:country", ["DE"]],
            ["is", "visit:browser", ["Chrome"]]
        ]),
    ));
    out.push(with(
        "is_not visit:source and contains event:page, by event:name",
        json!(["event:name"]),
        json!(["visitors", "events", "users"]),
        json!([["is_not", "visit:source", ["Direct / None"]], ["contains", "event:page", ["blog"], {"case_sensitive": false}]]),
    ));
    out.push(with(
        "not (visit:device or matches visit:entry_page)",
        json!([]),
        json!(["visitors", "visits", "pageviews"]),
        json!([[
            "not",
            [
                "or",
                [
                    ["is", "visit:device", ["Mobile"]],
                    ["matches", "visit:entry_page", ["^/blog"]]
                ]
            ]
        ]]),
    ));
    out.push((
        "filter: is visit:channel, by event:page, previous period".into(),
        query(
            site_id,
            json!({"metrics": ["visitors", "pageviews"], "dimensions": ["event:page"],
                   "filters": [["is", "visit:channel", ["Organic Search", "Direct"]]],
                   "include": {"comparisons": {"mode": "previous_period"}}}),
        ),
    ));
    out.push(with(
        "the docs' visits by source",
        json!(["visit:source"]),
        json!(["visits", "bounce_rate", "visit_duration"]),
        json!([["is", "visit:country", ["DE", "FR"]], ["contains", "event:page", ["blog"], {"case_sensitive": false}]]),
    ));
    out
}

/// Comparisons with the previous period and the year before: totals, by a dimension, by
/// time (matched by position), and a row without a twin.
pub fn comparison_queries(site_id: u32) -> Vec<Named> {
    let c = |mode: &str| json!({"mode": mode});
    let mut out = Vec::new();
    for mode in ["previous_period", "year_over_year"] {
        out.push((
            format!("{mode}: totals"),
            query(
                site_id,
                json!({"metrics": OVERVIEW, "include": {"comparisons": c(mode)}}),
            ),
        ));
        out.push((
            format!("{mode}: by visit:country"),
            query(
                site_id,
                json!({"metrics": ["visitors", "visits", "bounce_rate", "views_per_visit", "percentage"],
                       "dimensions": ["visit:country"], "include": {"comparisons": c(mode), "total_rows": true}}),
            ),
        ));
        out.push((
            format!("{mode}: by time:day"),
            query(
                site_id,
                json!({"metrics": ["visitors", "visits", "pageviews", "bounce_rate"], "dimensions": ["time:day"],
                       "include": {"comparisons": c(mode), "time_labels": true}}),
            ),
        ));
        out.push((
            format!("{mode}: by event:props:plan and time:week, filtered"),
            query(
                site_id,
                json!({"metrics": ["events", "visitors"], "dimensions": ["event:props:plan", "time:week"],
                       "filters": [["is", "event:type", ["custom_event"]]],
                       "include": {"comparisons": c(mode)}}),
            ),
        ));
    }
    out.push((
        "previous_period: time:hour on 2025-10-26 against the 25th".into(),
        query(
            site_id,
            json!({"metrics": ["visitors", "pageviews"], "date_range": [DST_DAY, DST_DAY], "dimensions": ["time:hour"],
                   "include": {"comparisons": c("previous_period"), "time_labels": true}}),
        ),
    ));
    out.push((
        "year_over_year: time:hour on 2025-10-26 against 2024-10-26".into(),
        query(
            site_id,
            json!({"metrics": ["visitors", "pageviews"], "date_range": [DST_DAY, DST_DAY], "dimensions": ["time:hour"],
                   "include": {"comparisons": c("year_over_year")}}),
        ),
    ));
    out.push((
        "previous_period: by event:page, a page".into(),
        query(
            site_id,
            json!({"metrics": ["pageviews", "visitors"], "dimensions": ["event:page"],
                   "include": {"comparisons": c("previous_period")}, "pagination": {"limit": 3, "offset": 2}}),
        ),
    ));
    out
}

/// Pages through the default order, a metric's order, a dimension's, time descending,
/// and past the last row.
pub fn page_queries(site_id: u32) -> Vec<Named> {
    let mut out = Vec::new();
    for offset in [0, 3, 6, 9] {
        out.push((
            format!("event:page, limit 3 offset {offset}"),
            query(
                site_id,
                json!({"metrics": ["pageviews", "visitors"], "dimensions": ["event:page"],
                       "include": {"total_rows": true}, "pagination": {"limit": 3, "offset": offset}}),
            ),
        ));
    }
    out.push((
        "visit:entry_page by visit_duration ascending, limit 4 offset 2".into(),
        query(
            site_id,
            json!({"metrics": ["visits", "visit_duration"], "dimensions": ["visit:entry_page"],
                   "order_by": [["visit_duration", "asc"]], "include": {"total_rows": true},
                   "pagination": {"limit": 4, "offset": 2}}),
        ),
    ));
    out.push((
        "visit:country × visit:device by country descending, limit 5 offset 1".into(),
        query(
            site_id,
            json!({"metrics": ["visitors"], "dimensions": ["visit:country", "visit:device"],
                   "order_by": [["visit:country", "desc"]], "include": {"total_rows": true},
                   "pagination": {"limit": 5, "offset": 1}}),
        ),
    ));
    out.push((
        "time:day descending, limit 5".into(),
        query(
            site_id,
            json!({"metrics": ["visits"], "dimensions": ["time:day"], "order_by": [["time:day", "desc"]],
                   "pagination": {"limit": 5}}),
        ),
    ));
    out.push((
        "visitors ascending then event:type descending".into(),
        query(
            site_id,
            json!({"metrics": ["visitors", "events"], "dimensions": ["event:type"],
                   "order_by": [["visitors", "asc"], ["event:type", "desc"]]}),
        ),
    ));
    out.push((
        "visit:browser past the last row".into(),
        query(
            site_id,
            json!({"metrics": ["visitors"], "dimensions": ["visit:browser"], "include": {"total_rows": true},
                   "pagination": {"limit": 10, "offset": 1000}}),
        ),
    ));
    out
}

/// The web vitals' percentiles (docs: "Web vitals"): every one of them in all, by page as
/// the dashboard's tab asks, by event type (rows without a measurement: `null`, last in
/// either order, over pages), by visit dimensions and time, beside visit measures and
/// users, with comparisons.
pub fn vital_queries(site_id: u32) -> Vec<Named> {
    let all = [
        "events", "lcp_p75", "cls_p75", "inp_p75", "fcp_p75", "ttfb_p75",
    ];
    let performance = json!([["is", "event:type", ["performance"]]]);
    [
        ("web vitals: totals", json!({"metrics": all})),
        (
            "web vitals: by page, the dashboard's tab",
            json!({"metrics": ["visitors", "events", "lcp_p75", "cls_p75", "inp_p75", "percentage"],
                   "dimensions": ["event:page"], "filters": performance,
                   "order_by": [["visitors", "desc"]], "include": {"total_rows": true}}),
        ),
        (
            "web vitals: by event:type, fastest LCP first",
            json!({"metrics": ["lcp_p75", "events", "inp_p75"], "dimensions": ["event:type"],
                   "order_by": [["lcp_p75", "asc"]]}),
        ),
        (
            "web vitals: by event:type, slowest INP first, a page",
            json!({"metrics": ["inp_p75", "cls_p75"], "dimensions": ["event:type"],
                   "order_by": [["inp_p75", "desc"]], "pagination": {"limit": 3, "offset": 1}}),
        ),
        (
            "web vitals: by visit:device × time:day, from DE",
            json!({"metrics": ["visitors", "lcp_p75", "cls_p75"], "dimensions": ["visit:device", "time:day"],
                   "filters": [["is", "visit:country", ["DE"]]]}),
        ),
        (
            "web vitals: beside visit measures and users, by visit:browser",
            json!({"metrics": ["visits", "bounce_rate", "lcp_p75", "inp_p75", "users"],
                   "dimensions": ["visit:browser"]}),
        ),
        (
            "web vitals: by page, previous_period",
            json!({"metrics": ["lcp_p75", "inp_p75", "events"], "dimensions": ["event:page"],
                   "filters": [["contains", "event:page", ["/"]]],
                   "include": {"comparisons": {"mode": "previous_period"}}}),
        ),
        (
            "web vitals: totals, year_over_year",
            json!({"metrics": ["ttfb_p75", "cls_p75", "fcp_p75"],
                   "include": {"comparisons": {"mode": "year_over_year"}}}),
        ),
    ]
    .into_iter()
    .map(|(name, fields)| (name.to_string(), query(site_id, fields)))
    .collect()
}

/// The whole matrix.
pub fn all_queries(site_id: u32) -> Vec<Named> {
    [
        metric_and_dimension_queries(site_id),
        time_queries(site_id),
        filter_queries(site_id),
        comparison_queries(site_id),
        page_queries(site_id),
        vital_queries(site_id),
    ]
    .concat()
}

/// `rivulet-admin rollup --site <site> --margin-secs 0`, again while a mutation of
/// `events` (another test's erasure) keeps it waiting: its report.
pub async fn compute_rollup(site_id: u32) -> Value {
    let started = std::time::Instant::now();
    // A day is computed only for stamps older than the second its computation begins.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    loop {
        let run = crate::data::run_admin_async(
            &[
                "rollup",
                "--site",
                &site_id.to_string(),
                "--margin-secs",
                "0",
            ],
            &[],
        )
        .await
        .json();
        if run["waited_for_mutations"] != true {
            return run;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(300),
            "the rollup waited for mutations for 5 minutes: {run}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

/// Rows of the site's rollup (`stats_total_days` and `stats_breakdown_days`) that meet
/// `condition`.
pub async fn rollup_rows(db: &Db, site_id: u32, condition: &str) -> u64 {
    db.client
        .query(&format!(
            "SELECT (SELECT count() FROM stats_total_days WHERE site_id = ? AND ({condition})) \
             + (SELECT count() FROM stats_breakdown_days WHERE site_id = ? AND ({condition}))"
        ))
        .bind(site_id)
        .bind(site_id)
        .fetch_one()
        .await
        .expect("count the rollup's rows")
}

/// The rows of a site's rollup visits (`stats_visit_days`) that meet `condition`.
pub async fn visit_rows(db: &Db, site_id: u32, condition: &str) -> u64 {
    db.client
        .query(&format!(
            "SELECT count() FROM stats_visit_days WHERE site_id = ? AND ({condition})"
        ))
        .bind(site_id)
        .fetch_one()
        .await
        .expect("count the rollup's visits")
}

/// What the daily rollup answers (docs/stats-api.md, "The daily rollup"): the totals and the day,
/// week and month series of whole days, with comparisons, over the main range, the DST
/// day, and a range from the year before to after the data.
pub fn rollup_queries(site_id: u32) -> Vec<Named> {
    // `users` in total and by time (the breakdowns hold no persons).
    let with_users = OVERVIEW;
    let metrics = OVERVIEW_BUT_USERS;
    let mut out = Vec::new();
    let ranges = [
        ("the main range", json!(MAIN_RANGE)),
        ("the DST day", json!([DST_DAY, DST_DAY])),
        ("2024 to 2025", json!(["2024-10-01", "2025-11-30"])),
    ];
    for (name, range) in &ranges {
        for dims in [
            json!([]),
            json!(["time:day"]),
            json!(["time:week"]),
            json!(["time:month"]),
        ] {
            out.push((
                format!("rollup: {name} by {dims}"),
                query(
                    site_id,
                    json!({"metrics": with_users, "date_range": range, "dimensions": dims}),
                ),
            ));
        }
    }
    // Breakdowns by a visit attribute, with each row's share of the visitors: every
    // attribute over the main range, a few over the others, and a page of one, ordered by
    // another metric.
    let with_share: Vec<&str> = metrics.iter().copied().chain(["percentage"]).collect();
    for (name, range) in &ranges {
        for dim in &VISIT_DIMENSIONS {
            let few = [
                "visit:entry_page",
                "visit:source",
                "visit:country",
                "visit:device",
            ];
            if *name != "the main range" && !few.contains(dim) {
                continue;
            }
            out.push((
                format!("rollup: {name} by {dim}"),
                query(
                    site_id,
                    json!({"metrics": with_share, "date_range": range, "dimensions": [dim],
                           "include": {"total_rows": true}}),
                ),
            ));
        }
    }
    // By an event dimension, the event metrics.
    for (name, range) in &ranges {
        for dim in ["event:page", "event:name", "event:hostname", "event:type"] {
            out.push((
                format!("rollup: {name} by {dim}"),
                query(
                    site_id,
                    json!({"metrics": ["visitors", "pageviews", "events", "percentage"],
                           "date_range": range, "dimensions": [dim], "include": {"total_rows": true}}),
                ),
            ));
        }
    }
    // Of one type (the dashboard's Top pages and Custom events): their own breakdowns.
    for (name, range) in &ranges {
        for (dim, of_type) in [("event:page", "pageview"), ("event:name", "custom_event")] {
            out.push((
                format!("rollup: {name} by {dim} of {of_type}s"),
                query(
                    site_id,
                    json!({"metrics": ["visitors", "pageviews", "events", "percentage"],
                           "date_range": range, "dimensions": [dim],
                           "filters": [["is", "event:type", [of_type]]],
                           "include": {"total_rows": true}}),
                ),
            ));
        }
    }
    out.push((
        "rollup: year_over_year by event:name of custom_events".into(),
        query(
            site_id,
            json!({"metrics": ["visitors", "events", "percentage"], "dimensions": ["event:name"],
                   "filters": [["is", "event:type", ["custom_event"]]],
                   "include": {"comparisons": {"mode": "year_over_year"}}}),
        ),
    ));
    out.push((
        "rollup: previous_period by event:page".into(),
        query(
            site_id,
            json!({"metrics": ["visitors", "pageviews", "percentage"], "dimensions": ["event:page"],
                   "include": {"comparisons": {"mode": "previous_period"}}}),
        ),
    ));
    out.push((
        "rollup: a page of exit pages by visits".into(),
        query(
            site_id,
            json!({"metrics": with_share, "date_range": MAIN_RANGE, "dimensions": ["visit:exit_page"],
                   "order_by": [["visits", "asc"], ["visit:exit_page", "desc"]],
                   "include": {"total_rows": true},
                   "pagination": {"limit": 3, "offset": 2}}),
        ),
    ));
    // Filtered by visit attributes only: the rollup's visits. Every such filter of the
    // matrix in total; two of them over each range, by time and by attributes.
    let visit_only: Vec<(&str, Value)> = filters()
        .into_iter()
        .filter(|(_, f)| !f.to_string().contains("\"event:"))
        .collect();
    for (name, f) in &visit_only {
        out.push((
            format!("rollup visits: {name}"),
            query(site_id, json!({"metrics": metrics, "filters": f})),
        ));
    }
    let german_chrome = json!([
        ["is", "visit:country", ["DE"]],
        ["is", "visit:browser", ["Chrome"]]
    ]);
    let a_tree = json!([[
        "or",
        [
            [
                "and",
                [
                    ["is", "visit:device", ["Desktop"]],
                    ["not", ["contains", "visit:browser", ["Fire"]]]
                ]
            ],
            ["matches", "visit:entry_page", ["^/blog"]]
        ]
    ]]);
    for (name, range) in &ranges {
        for (fname, f) in [("German Chrome", &german_chrome), ("a tree", &a_tree)] {
            for dims in [
                json!([]),
                json!(["time:day"]),
                json!(["time:week"]),
                json!(["time:month"]),
                json!(["visit:source"]),
                json!(["visit:entry_page"]),
                json!(["visit:country"]),
                json!(["visit:device"]),
            ] {
                // (`percentage` is a row's share: it needs a dimension.)
                let asked = if dims == json!([]) {
                    &metrics[..]
                } else {
                    &with_share[..]
                };
                out.push((
                    format!("rollup visits: {fname}, {name} by {dims}"),
                    query(
                        site_id,
                        json!({"metrics": asked, "date_range": range, "dimensions": dims,
                               "filters": f, "include": {"total_rows": true}}),
                    ),
                ));
            }
        }
    }
    // By page: each event of the visits that pass, under its own page; of pageviews only
    // (the dashboard's Top pages, filtered).
    let mut pageviews_of = german_chrome.as_array().unwrap().clone();
    pageviews_of.push(json!(["is", "event:type", ["pageview"]]));
    for (name, range) in &ranges {
        for (fname, f) in [
            ("German Chrome", &german_chrome),
            ("a tree", &a_tree),
            ("German Chrome pageviews", &json!(pageviews_of)),
        ] {
            out.push((
                format!("rollup visits: {fname}, {name} by event:page"),
                query(
                    site_id,
                    json!({"metrics": ["visitors", "pageviews", "events", "percentage"],
                           "date_range": range, "dimensions": ["event:page"], "filters": f,
                           "include": {"total_rows": true}}),
                ),
            ));
        }
    }
    out.push((
        "rollup visits: a tree, previous_period by event:page".into(),
        query(
            site_id,
            json!({"metrics": ["visitors", "pageviews", "percentage"], "dimensions": ["event:page"],
                   "filters": a_tree, "include": {"comparisons": {"mode": "previous_period"}}}),
        ),
    ));
    for mode in ["previous_period", "year_over_year"] {
        out.push((
            format!("rollup visits: German Chrome, {mode} by visit:source"),
            query(
                site_id,
                json!({"metrics": with_share, "dimensions": ["visit:source"], "filters": german_chrome,
                       "include": {"comparisons": {"mode": mode}}}),
            ),
        ));
    }
    out.push((
        "rollup visits: a page of exit pages by visits".into(),
        query(
            site_id,
            json!({"metrics": with_share, "dimensions": ["visit:exit_page"], "filters": a_tree,
                   "order_by": [["visits", "asc"], ["visit:exit_page", "desc"]],
                   "include": {"total_rows": true},
                   "pagination": {"limit": 3, "offset": 2}}),
        ),
    ));
    for mode in ["previous_period", "year_over_year"] {
        for (dims, metrics) in [
            (json!([]), &with_users[..]),
            (json!(["time:day"]), &with_users[..]),
            (json!(["visit:source"]), &with_share[..]),
        ] {
            out.push((
                format!("rollup: {mode} by {dims}"),
                query(
                    site_id,
                    json!({"metrics": metrics, "dimensions": dims,
                           "include": {"comparisons": {"mode": mode}}}),
                ),
            ));
        }
    }
    out
}

/// A few of the matrix's queries, for the cluster: the totals, a visit dimension, a
/// filter tree of visit and event leaves, days, and a comparison.
pub fn cluster_queries(site_id: u32) -> Vec<Named> {
    let wanted = [
        "every metric, totals",
        "visit:country",
        "filter: the docs' mixed tree",
        "filter: the docs' visits by source",
        "filter: is visit:country and is visit:browser, by event:page",
        // An event filter read first (`PREWHERE`) from the Distributed table.
        "filter: is event:name",
        "time:day over the main range",
        "previous_period: totals",
    ];
    let all = all_queries(site_id);
    let picked: Vec<Named> = all
        .into_iter()
        .filter(|(name, _)| wanted.contains(&name.as_str()))
        .collect();
    assert_eq!(
        picked.len(),
        wanted.len(),
        "every wanted query is in the matrix"
    );
    picked
}

// ---------------------------------------------------------------------------------------
// Asking the API.

/// POSTs a query to a `rivulet-admin serve` at `url` with a Bearer key: the status, the
/// headers, and the body (`Null` if not JSON).
pub async fn ask(
    url: &str,
    key: Option<&str>,
    body: &Value,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let auth = key.map(|k| format!("Bearer {k}"));
    let headers: Vec<(&str, &str)> = auth
        .as_deref()
        .map(|a| vec![("authorization", a)])
        .unwrap_or_default();
    post_bytes(
        &format!("{url}/api/v2/query"),
        serde_json::to_vec(body).unwrap(),
        &headers,
    )
    .await
}

/// Sends every query (a few at a time) and compares each answer with the evaluator's:
/// one entry per query that differs, naming it, its differences and the request.
pub async fn mismatches(url: &str, key: &str, ds: &Dataset, queries: &[Named]) -> Vec<String> {
    futures::stream::iter(queries)
        .map(|(name, q)| async move {
            let (status, _, got) = ask(url, Some(key), q).await;
            if status != 200 {
                return Some(format!("{name}: status {status}: {got}\n    request: {q}"));
            }
            let want = ds.expected(q);
            let mut diffs = Vec::new();
            differences("", &want, &got, &mut diffs);
            (!diffs.is_empty()).then(|| {
                format!(
                    "{name}: {} difference(s) (want / got):\n    {}\n    request: {q}",
                    diffs.len(),
                    diffs
                        .iter()
                        .take(12)
                        .cloned()
                        .collect::<Vec<_>>()
                        .join("\n    ")
                )
            })
        })
        .buffered(3)
        .filter_map(|m| async move { m })
        .collect()
        .await
}

/// The paths where two JSON values differ, with both values.
pub fn differences(path: &str, want: &Value, got: &Value, out: &mut Vec<String>) {
    match (want, got) {
        (Value::Object(a), Value::Object(b)) => {
            for k in a.keys().chain(b.keys().filter(|k| !a.contains_key(*k))) {
                let p = format!("{path}.{k}");
                differences(
                    &p,
                    a.get(k).unwrap_or(&Value::Null),
                    b.get(k).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            if a.len() != b.len() {
                out.push(format!("{path}: {} items / {} items", a.len(), b.len()));
            }
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                differences(&format!("{path}[{i}]"), x, y, out);
            }
        }
        _ if want != got => out.push(format!("{path}: {want} / {got}")),
        _ => {}
    }
}

/// The evaluator itself, on events few enough to count by hand.
/// The dashboard's cards by visit attributes (visitors over the main range; their first
/// three rows, fewer than each has, so that each is cut at its own), asked of the engine
/// as the Overview asks them (it takes ten): the one statement
/// [`rivulet_stats::share_main`] makes of them, its rows split per card. What differs from
/// the figures computed from the events, card by card. Panics unless the cards do share
/// one statement (the rollup answers them: the site's days are computed, some may be
/// stale).
pub async fn shared_card_mismatches(db: &Db, ds: &Dataset, site_id: u32) -> Vec<String> {
    use rivulet_stats::{
        decode_rows, respond, rollup, share_main, FirstEvent, Planner, QueryPlan, QueryRows,
        Request, RollupSource, RollupState, SiteContext,
    };
    let mut site = SiteContext {
        site_id,
        time_zone: TIME_ZONE.into(),
        first_event: FirstEvent::NotLoaded,
        rollup: RollupState::NotLoaded,
    };
    let state = rollup::state_statement(&site).expect("the rollup state's statement");
    site.rollup =
        RollupState::from_rows(&state, &fetch(db, &state).await).expect("the rollup state");
    let planner = Planner::default().with_source(std::sync::Arc::new(RollupSource));
    let now = Timestamp::now().as_second();
    let requests: Vec<Value> = [
        "visit:source",
        "visit:country",
        "visit:browser",
        "visit:entry_page",
    ]
    .iter()
    .map(|d| {
        query(
            site_id,
            json!({"metrics": ["visitors"], "dimensions": [d], "pagination": {"limit": 3}}),
        )
    })
    .collect();
    let plans: Vec<QueryPlan> = requests
        .iter()
        .map(|r| {
            let req = Request::from_value(r.clone()).expect("a card's request");
            planner.plan(&req, &site, now).expect("a card's plan")
        })
        .collect();
    let refs: Vec<&QueryPlan> = plans.iter().collect();
    let shared = share_main(&refs).expect("the cards share one statement");
    assert_eq!(shared.members(), [0, 1, 2, 3], "every card is in it");
    let body = fetch(db, shared.statement()).await;
    let split = shared.split(decode_rows(shared.statement(), &body).expect("its rows"));
    let mut out = Vec::new();
    for ((plan, main), request) in plans.iter().zip(split).zip(&requests) {
        let rows = QueryRows {
            main,
            total_rows: None,
            comparison: None,
        };
        let got = serde_json::to_value(respond(plan, &rows).expect("a card's answer"))
            .expect("an answer is JSON");
        let mut diffs = Vec::new();
        differences("", &ds.expected(request), &got, &mut diffs);
        if !diffs.is_empty() {
            out.push(format!(
                "{}: {} difference(s) (want / got):\n    {}",
                request["dimensions"],
                diffs.len(),
                diffs.join("\n    ")
            ));
        }
    }
    out
}

/// A statement of the engine's rows, sent as rivulet-admin sends it.
async fn fetch(db: &Db, statement: &rivulet_stats::Statement) -> bytes::Bytes {
    let mut q = db.client.query(&statement.sql);
    for b in &statement.binds {
        q = q.bind(b);
    }
    for (name, value) in &statement.settings {
        q = q.with_setting(*name, value.clone());
    }
    q.fetch_bytes("JSONEachRow")
        .expect("send the statement")
        .collect()
        .await
        .expect("the statement's rows")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(session: &str, user: &str, anon: &str, utc: &str, kind: &str, page: &str) -> EventRow {
        EventRow {
            event_id: Uuid::new_v4(),
            site_id: 1,
            timestamp: at(utc) as u32,
            event_type: kind.into(),
            pathname: page.into(),
            user_id: user.into(),
            session_id: session.into(),
            anonymous_id: anon.into(),
            channel: "Direct".into(),
            ..EventRow::default()
        }
    }

    /// Visit a, user u1: 02:30 CEST "/", then 02:10 and 02:20 CET "/x" and a signup, all
    /// in the repeated hour. Visit b, anonymous (its id claimed by u2): 11:00 CET "/" and
    /// web vitals 30 s later (a bounce). A bot's pageview, and a second copy of a's first
    /// event.
    fn dataset() -> Dataset {
        let hex = "0123456789abcdef0123456789abcdef";
        let mut signup = event("a", "u1", "", "2025-10-26T01:20:00Z", "custom_event", "/x");
        signup.event_name = "signup".into();
        signup.properties = r#"{"plan":"pro","n":2}"#.into();
        let first = event("a", "u1", "", "2025-10-26T00:30:00Z", "pageview", "/");
        let mut bot = event("c", hex, "", "2025-10-26T09:00:00Z", "pageview", "/");
        bot.is_bot = 1;
        let rows = vec![
            first.clone(),
            event("a", "u1", "", "2025-10-26T01:10:00Z", "pageview", "/x"),
            signup,
            event("b", hex, "dev", "2025-10-26T10:00:00Z", "pageview", "/"),
            event("b", hex, "dev", "2025-10-26T10:00:30Z", "performance", "/"),
            bot,
            first,
        ];
        let claims = vec![ClaimRow {
            site_id: 1,
            anonymous_id: "dev".into(),
            user_id: "u2".into(),
            trusted: 1,
            claimed_at_ms: 0,
            received_at_ms: 0,
            rank: claim_rank(true, 0),
        }];
        Dataset {
            site_id: 1,
            time_zone: TIME_ZONE.into(),
            rows,
            claims,
        }
    }

    fn ask(fields: Value) -> Value {
        dataset().expected(&query(1, {
            let mut f = json!({"date_range": [DST_DAY, DST_DAY]});
            f.as_object_mut()
                .unwrap()
                .extend(fields.as_object().unwrap().clone());
            f
        }))
    }

    #[test]
    fn web_vitals_are_the_p75_of_each_measurement_once() {
        let mut ds = dataset();
        let perf = |page: &str, minute: u32, lcp: Option<f64>, cls: Option<f64>| EventRow {
            lcp,
            cls,
            ..event(
                "b",
                "u3",
                "",
                &format!("2025-10-26T10:{minute:02}:00Z"),
                "performance",
                page,
            )
        };
        // "/": LCP 100, 400.5, 300, 200.5 and one not measured: sorted, index
        // ⌊4 × 3 / 4⌋ = 3, 400.5, shown 401 (half away from zero). CLS of one event, twice
        // (a copy): 0.0625, shown to the thousandth 0.063 (62.5 is exact in f64).
        let copied = perf("/", 1, Some(100.0), Some(0.0625));
        ds.rows.extend([
            copied.clone(),
            copied,
            perf("/", 2, Some(400.5), None),
            perf("/", 3, Some(300.0), None),
            perf("/", 4, Some(200.5), None),
            perf("/", 5, None, None),
            // "/y": a pageview with an LCP is no measurement.
            EventRow {
                lcp: Some(9_999.0),
                ..event("b", "u3", "", "2025-10-26T10:06:00Z", "pageview", "/y")
            },
        ]);
        let r = ds.expected(&query(
            1,
            json!({"date_range": [DST_DAY, DST_DAY], "metrics": ["events", "lcp_p75", "cls_p75"],
                   "dimensions": ["event:page"], "order_by": [["lcp_p75", "asc"]]}),
        ));
        assert_eq!(
            r["results"],
            json!([
                // With the visit's pageview and its vitals event of dataset().
                {"metrics": [8, 401, 0.063], "dimensions": ["/"]},
                // "/x" and "/y" have no measurement: null, after every value.
                {"metrics": [2, null, null], "dimensions": ["/x"]},
                {"metrics": [1, null, null], "dimensions": ["/y"]}
            ])
        );
        assert_eq!(p75(&[3.0, 1.0, 2.0]), Some(3.0));
        assert_eq!(p75(&[5.0]), Some(5.0));
        assert_eq!(p75(&[]), None);
    }

    #[test]
    fn totals_count_each_event_once_and_leave_bots_out() {
        let r = ask(json!({"metrics": OVERVIEW}));
        // visitors, visits, pageviews, views_per_visit, bounce_rate, visit_duration
        // ((3000 + 30) / 2), events, users (u1, and u2 by the claim).
        assert_eq!(
            r["results"],
            json!([{"metrics": [2, 2, 3, 1.5, 50, 1515, 5, 2], "dimensions": []}])
        );
        assert_eq!(
            r["query"]["date_range"],
            json!(["2025-10-26T00:00:00+02:00", "2025-10-26T23:59:59+01:00"])
        );
        assert_eq!(r["query"]["order_by"], json!([["visitors", "desc"]]), "{r}");
    }

    #[test]
    fn the_repeated_hour_is_one_bucket() {
        let r = ask(
            json!({"metrics": ["visitors", "visits", "pageviews"], "dimensions": ["time:hour"],
                           "include": {"time_labels": true}}),
        );
        assert_eq!(
            r["results"],
            json!([{"metrics": [1, 1, 2], "dimensions": ["2025-10-26 02:00:00"]},
                   {"metrics": [1, 1, 1], "dimensions": ["2025-10-26 11:00:00"]}])
        );
        let labels = r["meta"]["time_labels"].as_array().unwrap();
        assert_eq!(labels.len(), 24);
        assert_eq!(labels[2], "2025-10-26 02:00:00");
        assert_eq!(labels[3], "2025-10-26 03:00:00");
    }

    #[test]
    fn breakdowns_filters_and_comparisons() {
        let r = ask(json!({"metrics": ["visitors", "percentage"], "dimensions": ["event:page"]}));
        assert_eq!(
            r["results"],
            json!([{"metrics": [2, 100.0], "dimensions": ["/"]},
                   {"metrics": [1, 50.0], "dimensions": ["/x"]}])
        );
        let r = ask(json!({"metrics": ["events"], "dimensions": ["event:props:n", "event:name"]}));
        assert_eq!(
            r["results"],
            json!([{"metrics": [3], "dimensions": ["(none)", "pageview"]},
                   {"metrics": [1], "dimensions": ["(none)", "performance"]},
                   {"metrics": [1], "dimensions": ["2", "signup"]}])
        );
        // A visit filter counts the visits' events, an event filter the events themselves;
        // the visits are measured whole (a's two pageviews: not a bounce).
        let r = ask(json!({"metrics": ["events", "visits", "bounce_rate"],
                           "filters": [["is", "visit:entry_page", ["/"]], ["is_not", "event:page", ["/X"], {"case_sensitive": false}]]}));
        assert_eq!(r["results"][0]["metrics"], json!([3, 2, 50]));
        let r = ask(json!({"metrics": ["visitors", "bounce_rate"],
                           "include": {"comparisons": {"mode": "previous_period"}}}));
        assert_eq!(
            r["results"][0]["comparison"],
            json!({"dimensions": [], "metrics": [0, 0], "change": [100, null]})
        );
        assert_eq!(
            r["meta"]["comparison_date_range"],
            json!(["2025-10-25T00:00:00+02:00", "2025-10-25T23:59:59+02:00"])
        );
    }

    #[test]
    fn query_strings_and_referrers() {
        let qs = "utm_source=news&utm_campaign=spring+sale%21&x=1";
        assert_eq!(url_parameter(qs, "utm_campaign"), "spring sale!");
        assert_eq!(url_parameter(&format!("?{qs}"), "utm_source"), "news");
        assert_eq!(url_parameter("?utm_source=&a=b", "utm_source"), "");
        assert_eq!(url_parameter("?a=b", "utm_term"), "");
        assert_eq!(
            domain_without_www("https://www.google.com/search?q=x"),
            "google.com"
        );
        assert_eq!(domain_without_www("https://t.co"), "t.co");
        assert_eq!(domain_without_www(""), "");
        assert_eq!(property(r#"{"a":null,"b":2.5,"c":"x"}"#, "a"), "null");
        assert_eq!(property(r#"{"a":null,"b":2.5,"c":"x"}"#, "b"), "2.5");
        assert_eq!(property(r#"{"a":null,"b":2.5,"c":"x"}"#, "c"), "x");
        assert_eq!(property("", "c"), "");
    }
}
