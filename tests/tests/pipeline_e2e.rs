//! End to end on the real stack: HTTP POST to rivulet-ingest → Kafka → rivulet-enricher
//! → the row in ClickHouse, with every column checked.

use clickhouse::Row;
use rivulet_tests::*;
use serde::Deserialize;
use serde_json::{json, Value};
use std::time::Duration;

const CHROME_WIN: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36";
const IPHONE: &str = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1";
const GOOGLEBOT: &str = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";

/// One ingest and one enricher for all tests here: several enrichers joining one group
/// at once would rebalance partitions (and so reset session state) mid-test.
struct Fixture {
    ingest: Service,
    _enricher: Service,
}

async fn fx() -> &'static Fixture {
    static FX: tokio::sync::OnceCell<Fixture> = tokio::sync::OnceCell::const_new();
    FX.get_or_init(|| async {
        let ingest = start_ingest(&[]).await;
        let enricher = start_enricher(&[]).await;
        wait_assigned(&enricher).await;
        Fixture {
            ingest,
            _enricher: enricher,
        }
    })
    .await
}

#[derive(Debug, Row, Deserialize)]
struct Stored {
    #[serde(with = "clickhouse::serde::uuid")]
    event_id: uuid::Uuid,
    site_id: u32,
    timestamp: u32,
    #[serde(rename = "type")]
    event_type: String,
    event_name: String,
    properties: String,
    hostname: String,
    pathname: String,
    querystring: String,
    page_title: String,
    referrer: String,
    channel: String,
    user_id: String,
    session_id: String,
    language: String,
    screen_width: u16,
    screen_height: u16,
    country: String,
    region: String,
    city: String,
    lat: f64,
    lon: f64,
    browser: String,
    browser_version: String,
    operating_system: String,
    operating_system_version: String,
    device_type: String,
    is_bot: u8,
    ip: String,
}

async fn fetch(event_id: &str) -> Stored {
    let sql = format!("SELECT count() FROM events WHERE event_id = toUUID('{event_id}')");
    assert_eq!(
        wait_count(&sql, 1, Duration::from_secs(30)).await,
        1,
        "event {event_id} reached ClickHouse"
    );
    db().await
        .client
        .query("SELECT ?fields FROM events FINAL WHERE event_id = toUUID(?)")
        .bind(event_id)
        .fetch_one()
        .await
        .unwrap()
}

#[tokio::test]
async fn events_arrive_enriched_in_clickhouse() {
    let (site, key) = site_with_key().await;
    let ingest = &fx().await.ingest;
    let client = http();
    let t0 = now_ms() - 2 * 3600 * 1000;
    let props =
        "{\"plan\":\"pro\", \"seats\":3,\"tags\":[\"a\",true],\"emoji\":\"\u{e9}\u{1f680}\"}";
    let post = |body: Value| {
        let client = client.clone();
        let url = format!("{}/api/track", ingest.url);
        async move {
            let r = client.post(url).json(&body).fetch().await;
            assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
        }
    };
    let id = |n: u32| format!("00000000-0000-4000-8000-{:04x}{:08x}", site % 0xffff, n);

    // 1. Chrome on Windows from London, a custom event with properties.
    post(json!({"api_key": key, "site_id": site, "type": "custom_event", "event_name": "signup", "properties": props,
        "pathname": "/pricing", "hostname": "shop.example.com", "querystring": "?utm_source=newsletter&utm_medium=email",
        "page_title": "Pricing", "referrer": "", "language": "en-GB", "screenWidth": 1920, "screenHeight": 1080,
        "ip_address": "81.2.69.142", "user_agent": CHROME_WIN, "event_id": id(1), "timestamp": t0})).await;
    // 2. IPv6 (JP), iPhone.
    post(json!({"api_key": key, "site_id": site, "pathname": "/m", "ip_address": "2001:218::1", "user_agent": IPHONE,
        "referrer": "https://www.google.com/search?q=x", "hostname": "shop.example.com", "event_id": id(2), "timestamp": t0})).await;
    // 3. Googlebot: stored and flagged.
    post(json!({"api_key": key, "site_id": site, "pathname": "/robots", "ip_address": "66.249.66.1", "user_agent": GOOGLEBOT,
        "event_id": id(3), "timestamp": t0})).await;

    let e1 = fetch(&id(1)).await;
    assert_eq!(
        (e1.site_id, e1.event_type.as_str(), e1.event_name.as_str()),
        (site, "custom_event", "signup")
    );
    assert_eq!(e1.properties, props, "properties byte for byte");
    assert_eq!(
        (
            e1.pathname.as_str(),
            e1.hostname.as_str(),
            e1.page_title.as_str()
        ),
        ("/pricing", "shop.example.com", "Pricing")
    );
    assert_eq!(e1.querystring, "?utm_source=newsletter&utm_medium=email");
    assert_eq!(e1.channel, "Email");
    assert_eq!(
        (e1.language.as_str(), e1.screen_width, e1.screen_height),
        ("en-GB", 1920, 1080)
    );
    assert_eq!(
        (e1.country.as_str(), e1.region.as_str(), e1.city.as_str()),
        ("GB", "GB-ENG", "London")
    );
    assert!(
        (e1.lat - 51.5142).abs() < 1e-3 && (e1.lon + 0.0931).abs() < 1e-3,
        "{} {}",
        e1.lat,
        e1.lon
    );
    assert_eq!(
        (e1.browser.as_str(), e1.browser_version.as_str()),
        ("Chrome", "120")
    );
    assert_eq!(
        (
            e1.operating_system.as_str(),
            e1.operating_system_version.as_str()
        ),
        ("Windows", "10")
    );
    assert_eq!((e1.device_type.as_str(), e1.is_bot), ("Desktop", 0));
    assert_eq!(e1.timestamp as i64, t0 / 1000);
    assert_eq!(
        e1.user_id.len(),
        32,
        "a visitor id stands in for a missing user_id"
    );
    assert!(!e1.session_id.is_empty());
    assert_eq!(e1.ip, "", "the raw IP is not stored unless STORE_IP=true");
    assert_eq!(e1.event_id.to_string(), id(1));

    let e2 = fetch(&id(2)).await;
    assert_eq!(e2.country, "JP");
    assert_eq!(
        (e2.device_type.as_str(), e2.operating_system.as_str()),
        ("Mobile", "iOS")
    );
    assert_eq!(e2.referrer, "https://www.google.com/search?q=x");
    assert_eq!(e2.channel, "Organic Search");
    let e3 = fetch(&id(3)).await;
    assert_eq!((e3.is_bot, e3.device_type.as_str()), (1, "Bot"));
}

#[tokio::test]
async fn one_visitor_one_session_and_a_new_one_after_30_minutes() {
    let (site, key) = site_with_key().await;
    let ingest = &fx().await.ingest;
    let client = http();
    let now = now_ms();
    // All events on one UTC day (visitor ids rotate with the daily salt at midnight):
    // 01:00 UTC yesterday, well inside the accepted 7-day window.
    let day_ms = 86_400_000;
    let t0 = (now / day_ms - 1) * day_ms + 3_600_000;
    // Five events 5 minutes apart (one session), then one 31 minutes after the last.
    let offsets_min = [0, 5, 10, 15, 20, 51];
    let mut ids = Vec::new();
    for (i, m) in offsets_min.iter().enumerate() {
        let id = uuid::Uuid::new_v4().to_string();
        let r = client.post(format!("{}/api/track", ingest.url)).json(&json!({"api_key": key, "site_id": site,
            "pathname": format!("/p{i}"), "ip_address": "81.2.69.142", "user_agent": CHROME_WIN, "event_id": id,
            "timestamp": t0 + m * 60_000})).fetch().await;
        assert_eq!(r.status(), 200);
        ids.push(id);
    }
    let mut sessions = Vec::new();
    let mut users = Vec::new();
    for id in &ids {
        let e = fetch(id).await;
        sessions.push(e.session_id);
        users.push(e.user_id);
    }
    assert!(
        users.iter().all(|u| *u == users[0]),
        "one visitor id: {users:?}"
    );
    assert!(
        sessions[..5].iter().all(|s| *s == sessions[0]),
        "one session: {sessions:?}"
    );
    assert_ne!(
        sessions[5], sessions[0],
        "a new session after 31 minutes of event time"
    );
}

#[tokio::test]
async fn poison_messages_go_to_the_dlq_and_the_consumer_moves_on() {
    use rdkafka::message::{Headers, Message};
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let (site, key) = site_with_key().await;
    let ingest = &fx().await.ingest;
    load_stack_env();
    let dlq = TopicReader::from_end(&rivulet_common::kafka::topic_dlq());

    let producer: FutureProducer = rivulet_common::kafka::base_config().create().unwrap();
    let marker = uuid::Uuid::new_v4().to_string();
    let poison = [
        format!("not json {marker}"),
        format!("{{\"v\":99,\"m\":\"{marker}\"}}"),
        format!("{{\"v\":1,\"m\":\"{marker}\"}}"),
    ];
    for p in &poison {
        let key = format!("{site}:poison");
        producer
            .send(
                FutureRecord::to(&rivulet_common::kafka::topic_raw())
                    .key(&key)
                    .payload(p),
                Duration::from_secs(5),
            )
            .await
            .unwrap();
    }
    let id = uuid::Uuid::new_v4().to_string();
    let r = http()
        .post(format!("{}/api/track", ingest.url))
        .json(&json!({"api_key": key, "site_id": site, "event_id": id}))
        .fetch()
        .await;
    assert_eq!(r.status(), 200);
    fetch(&id).await;

    let mut reasons = Vec::new();
    let _all_three = Pace::within(Duration::from_secs(20)).poll_blocking(|| {
        if let Some(m) = dlq.next(Duration::from_millis(200)) {
            let payload = String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string();
            if payload.contains(&marker) {
                let h = m.headers().expect("headers");
                let reason = h
                    .iter()
                    .find(|h| h.key == "reason")
                    .and_then(|h| h.value)
                    .map(|v| String::from_utf8_lossy(v).to_string());
                reasons.push(reason.expect("a reason header"));
            }
        }
        if reasons.len() < 3 {
            Err(())
        } else {
            Ok(())
        }
    });
    assert_eq!(
        reasons.len(),
        3,
        "all poison messages are in the DLQ: {reasons:?}"
    );
    assert!(reasons[0].contains("not JSON"));
    assert!(reasons[1].contains("unknown message version 99"));
    assert!(reasons[2].contains("invalid raw event"));
}
