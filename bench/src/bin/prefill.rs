//! Fills a Kafka topic with realistic raw events for `scripts/bench enricher`.
//!
//!   prefill TOPIC COUNT SITE_ID UAP_CORE_TESTS_DIR
//!
//! User agents: drawn from uap-core's own test cases (`test_ua.yaml`, `test_os.yaml`,
//! `test_device.yaml` in UAP_CORE_TESTS_DIR; the `ua-parser` crate ships them in its
//! package, Apache-2.0), shuffled, then picked with a skewed popularity (popular ones far
//! more often; the count of distinct strings is printed);
//! IPs: random public IPv4 (10 % IPv6); paths, referrers and UTM tags varied.

use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rivulet_common::event::{EventType, RawEvent, RAW_EVENT_VERSION};
use serde::Deserialize;
use std::path::Path;
use std::time::{Duration, Instant};

#[derive(Deserialize)]
struct TestFile {
    test_cases: Vec<TestCase>,
}

#[derive(Deserialize)]
struct TestCase {
    user_agent_string: String,
}

/// Every distinct user agent of uap-core's test files, in a deterministic shuffled order.
fn uap_core_user_agents(dir: &Path, rng: &mut Rng) -> Vec<String> {
    let mut all = std::collections::BTreeSet::new();
    for name in ["test_ua.yaml", "test_os.yaml", "test_device.yaml"] {
        let path = dir.join(name);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let file: TestFile = serde_yaml_ng::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not a uap-core test file: {e}", path.display()));
        all.extend(file.test_cases.into_iter().map(|c| c.user_agent_string));
    }
    let mut uas: Vec<String> = all.into_iter().filter(|u| !u.trim().is_empty()).collect();
    for i in (1..uas.len()).rev() {
        uas.swap(i, rng.below(i as u64 + 1) as usize);
    }
    uas
}

const REFERRERS: &[&str] = &[
    "",
    "",
    "",
    "https://www.google.com/",
    "https://www.bing.com/search?q=x",
    "https://t.co/abc",
    "https://www.facebook.com/",
    "https://news.ycombinator.com/",
    "https://mail.google.com/",
    "https://shop.example.com/cart",
];
const QUERIES: &[&str] = &[
    "",
    "",
    "",
    "?utm_source=newsletter&utm_medium=email",
    "?utm_source=google&utm_medium=cpc",
    "?gclid=abc",
];

/// xorshift64*: fast, deterministic, good enough for test data.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Skewed towards 0: popular values far more often.
    fn skewed(&mut self, n: u64) -> u64 {
        let a = self.below(n);
        let b = self.below(n);
        let c = self.below(n);
        a.min(b).min(c)
    }
}

fn public_ip(rng: &mut Rng) -> String {
    if rng.below(10) == 0 {
        return format!(
            "2a0{}:{:x}:{:x}::{:x}",
            1 + rng.below(8),
            rng.below(0xffff),
            rng.below(0xffff),
            rng.below(0xffff)
        );
    }
    loop {
        let o = [
            1 + rng.below(223),
            rng.below(256),
            rng.below(256),
            1 + rng.below(254),
        ];
        let private = o[0] == 10
            || o[0] == 127
            || (o[0] == 172 && (16..32).contains(&o[1]))
            || (o[0] == 192 && o[1] == 168)
            || o[0] == 100
            || o[0] == 169;
        if !private {
            return format!("{}.{}.{}.{}", o[0], o[1], o[2], o[3]);
        }
    }
}

#[tokio::main]
async fn main() {
    let args = rivulet_bench::tool_args("prefill TOPIC COUNT SITE_ID UAP_CORE_TESTS_DIR", 4..=4);
    let (topic, count, site_id): (&str, u64, u32) =
        (&args[1], args[2].parse().unwrap(), args[3].parse().unwrap());
    let producer: FutureProducer = rivulet_common::kafka::base_config()
        .set("linger.ms", "20")
        .set("compression.type", "lz4")
        .set("queue.buffering.max.messages", "500000")
        .set("batch.num.messages", "10000")
        .create()
        .expect("producer");
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let user_agents = uap_core_user_agents(Path::new(&args[4]), &mut rng);
    eprintln!(
        "prefill: {} distinct user agents from uap-core's test cases",
        user_agents.len()
    );
    let now = rivulet_bench::now_ms();
    let started = Instant::now();
    let mut pending = Vec::with_capacity(50_000);
    let mut distinct_uas = std::collections::HashSet::new();
    for i in 0..count {
        let ip = public_ip(&mut rng);
        let ua = user_agents[rng.skewed(user_agents.len() as u64) as usize].clone();
        distinct_uas.insert(ua.clone());
        let ts = now - rng.below(3_600_000) as i64;
        let custom = rng.below(5) == 0;
        let ev = RawEvent {
            v: RAW_EVENT_VERSION,
            event_id: uuid::Uuid::new_v4(),
            site_id,
            key_id: "key_bench".into(),
            event_type: if custom {
                EventType::CustomEvent
            } else {
                EventType::Pageview
            },
            timestamp: ts,
            received_at: ts,
            ip: ip.clone(),
            user_agent: ua.clone(),
            event_name: custom.then(|| "signup".to_string()),
            properties: custom.then(|| format!("{{\"plan\":\"pro\",\"n\":{}}}", rng.below(100))),
            pathname: Some(format!("/page/{}", rng.skewed(200))),
            hostname: Some("shop.example.com".into()),
            querystring: Some(QUERIES[rng.below(QUERIES.len() as u64) as usize].to_string())
                .filter(|q| !q.is_empty()),
            page_title: Some("A page".into()),
            referrer: Some(REFERRERS[rng.below(REFERRERS.len() as u64) as usize].to_string())
                .filter(|r| !r.is_empty()),
            user_id: None,
            language: Some("en-US".into()),
            screen_width: Some(1920),
            screen_height: Some(1080),
            ..RawEvent::default()
        };
        let key = rivulet_common::kafka::message_key(site_id, None, &ip, &ua);
        let payload = serde_json::to_vec(&ev).unwrap();
        loop {
            match producer.send_result(FutureRecord::to(topic).key(&key).payload(&payload)) {
                Ok(f) => {
                    pending.push(f);
                    break;
                }
                Err(_) => {
                    for f in pending.drain(..) {
                        f.await.unwrap().expect("delivery");
                    }
                }
            }
        }
        if pending.len() >= 50_000 {
            for f in pending.drain(..) {
                f.await.unwrap().expect("delivery");
            }
        }
        if i > 0 && i % 200_000 == 0 {
            eprintln!("prefill: {i} events");
        }
    }
    for f in pending.drain(..) {
        f.await.unwrap().expect("delivery");
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{{\"produced\":{count},\"distinct_user_agents\":{},\"seconds\":{secs:.1},\"per_sec\":{:.0}}}",
        distinct_uas.len(),
        count as f64 / secs
    );
}
