//! Cost of each enrichment step, per event.
//!
//! `cargo bench -p rivulet-enricher -- --warm-up-time 1 --measurement-time 3`
//!
//! - `GEOIP_BENCH_DB`: comma-separated MMDB path(s), e.g. the DB-IP v4,v6 pair, benched
//!   with random public addresses in addition to MaxMind's small test database.
//! - `UA_REGEXES`: uap-core's `regexes.yaml` (default: the one `scripts/stack` installs).
//! - `RIVULET_GEO_TESTDATA`: folder of MaxMind's test databases (default: the
//!   repository's `testdata/geo`).

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion};
use rivulet_enrichment::channel::classify;
use rivulet_enrichment::device::DeviceParser;
use rivulet_enrichment::geo::GeoDb;
use rivulet_enrichment::identity::visitor_id;
use rivulet_enrichment::session::SessionTracker;

const USER_AGENTS: &[&str] = &[
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36 Edg/120.0.2210.91",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:121.0) Gecko/20100101 Firefox/121.0",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Safari/605.1.15",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36",
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36",
    "Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0",
    "Mozilla/5.0 (X11; CrOS x86_64 14541.0.0) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1_2 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1.2 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_2 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) CriOS/120.0.6099.119 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (iPad; CPU OS 16_6 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/16.6 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.6099.144 Mobile Safari/537.36",
    "Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Mobile Safari/537.36",
    "Mozilla/5.0 (Linux; Android 13; SAMSUNG SM-S918B) AppleWebKit/537.36 (KHTML, like Gecko) SamsungBrowser/23.0 Chrome/115.0.0.0 Mobile Safari/537.36",
    "Mozilla/5.0 (Linux; Android 13; SM-X710) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/119.0.0.0 Safari/537.36",
    "Mozilla/5.0 (Android 14; Mobile; rv:121.0) Gecko/121.0 Firefox/121.0",
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)",
    "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; GPTBot/1.2; +https://openai.com/gptbot)",
    "curl/8.4.0",
];

fn manifest_relative(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn ua_regexes() -> PathBuf {
    std::env::var_os("UA_REGEXES")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_relative("../.stack/dist/uap-core/regexes.yaml"))
}

fn geo_testdata() -> PathBuf {
    std::env::var_os("RIVULET_GEO_TESTDATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_relative("../testdata/geo"))
}

/// Deterministic pseudo-random public-looking addresses (xorshift), 3 IPv4 : 1 IPv6.
fn random_ips(n: usize) -> Vec<IpAddr> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..n)
        .map(|i| {
            if i % 4 == 3 {
                // 2000::/4, global unicast.
                let hi = (0x2u128 << 124) | (u128::from(next()) << 60 >> 4);
                IpAddr::V6(Ipv6Addr::from(hi | u128::from(next() as u16)))
            } else {
                // Skip 0/8, 10/8, 127/8 and 224/3.
                let mut a = (next() >> 32) as u32;
                while matches!(a >> 24, 0 | 10 | 127 | 224..) {
                    a = (next() >> 32) as u32;
                }
                IpAddr::V4(Ipv4Addr::from(a))
            }
        })
        .collect()
}

fn bench_geo(c: &mut Criterion) {
    let db = GeoDb::open(&[geo_testdata().join("GeoLite2-City-Test.mmdb")])
        .expect("GeoLite2-City-Test.mmdb (set RIVULET_GEO_TESTDATA)");
    let known: Vec<IpAddr> = [
        "81.2.69.142",
        "2001:218::1",
        "89.160.20.128",
        "216.160.83.56",
        "2.125.160.216",
    ]
    .iter()
    .map(|s| s.parse().unwrap())
    .collect();
    let mut i = 0;
    c.bench_function("geo/maxmind_test_db/hit", |b| {
        b.iter(|| {
            i = (i + 1) % known.len();
            black_box(db.lookup(black_box(known[i])))
        })
    });

    if let Ok(paths) = std::env::var("GEOIP_BENCH_DB") {
        let paths: Vec<PathBuf> = paths.split(',').map(PathBuf::from).collect();
        let db = GeoDb::open(&paths).expect("GEOIP_BENCH_DB");
        let ips = random_ips(4096);
        let mut i = 0;
        c.bench_function("geo/GEOIP_BENCH_DB/random_ip", |b| {
            b.iter(|| {
                i = (i + 1) % ips.len();
                black_box(db.lookup(black_box(ips[i])))
            })
        });
    }
}

fn bench_device(c: &mut Criterion) {
    let uncached =
        DeviceParser::from_yaml_file(ua_regexes(), 0).expect("regexes.yaml (set UA_REGEXES)");
    let cached = DeviceParser::from_yaml_file(ua_regexes(), 10_000).expect("regexes.yaml");
    let mut i = 0;
    c.bench_function("device/uncached", |b| {
        b.iter(|| {
            i = (i + 1) % USER_AGENTS.len();
            black_box(uncached.parse(black_box(USER_AGENTS[i]), Some(1920)))
        })
    });
    let mut i = 0;
    c.bench_function("device/cached", |b| {
        b.iter(|| {
            i = (i + 1) % USER_AGENTS.len();
            black_box(cached.parse(black_box(USER_AGENTS[i]), Some(1920)))
        })
    });
}

/// Start-up cost: reading and compiling uap-core's rules (done once per process).
fn bench_device_build(c: &mut Criterion) {
    let yaml = std::fs::read_to_string(ua_regexes()).expect("regexes.yaml");
    let mut group = c.benchmark_group("device");
    group.sample_size(10);
    group.bench_function("build_from_yaml", |b| {
        b.iter(|| black_box(DeviceParser::from_yaml_str(&yaml, 0).unwrap()))
    });
    group.finish();
}

fn bench_channel(c: &mut Criterion) {
    let cases: &[(Option<&str>, Option<&str>)] = &[
        (None, None),
        (Some("https://www.google.com/"), None),
        (
            Some("https://l.facebook.com/l.php?u=https%3A%2F%2Fexample.com"),
            None,
        ),
        (Some("https://example.com/pricing"), None),
        (Some("https://blog.other.org/some/post"), None),
        (
            None,
            Some("?utm_source=google&utm_medium=cpc&utm_campaign=brand&gclid=abc"),
        ),
        (None, Some("utm_source=newsletter&utm_medium=email")),
        (Some("https://t.co/abc"), Some("ref=1")),
    ];
    let mut i = 0;
    c.bench_function("channel/classify", |b| {
        b.iter(|| {
            i = (i + 1) % cases.len();
            let (referrer, qs) = cases[i];
            black_box(classify(
                black_box(referrer),
                Some("example.com"),
                black_box(qs),
            ))
        })
    });
}

fn bench_ids(c: &mut Criterion) {
    c.bench_function("identity/visitor_id", |b| {
        b.iter(|| {
            black_box(visitor_id(
                b"secret",
                20_000,
                1,
                black_box("203.0.113.7"),
                USER_AGENTS[0],
            ))
        })
    });
    let visitors: Vec<String> = (0..10_000).map(|i| format!("{i:032x}")).collect();
    let mut tracker = SessionTracker::default();
    let mut ts = 1_700_000_000_000i64;
    let mut i = 0;
    c.bench_function("session/observe_10k_visitors", |b| {
        b.iter(|| {
            i = (i + 1) % visitors.len();
            ts += 10;
            black_box(tracker.observe(1, &visitors[i], ts))
        })
    });
}

criterion_group!(
    benches,
    bench_geo,
    bench_device,
    bench_device_build,
    bench_channel,
    bench_ids
);
criterion_main!(benches);
