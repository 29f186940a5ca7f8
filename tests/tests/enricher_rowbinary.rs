//! The enricher's RowBinary encoder against the real ClickHouse: rows with edge-case
//! values, split across chunks at awkward offsets, read back equal through the typed
//! client (which decodes by column name, so a column written out of order fails here).

use bytes::Bytes;
use rivulet_common::schema::events::EventRow;
use rivulet_enrichment::insert::insert_row_binary;
use uuid::Uuid;

fn row(site_id: u32, n: u8) -> EventRow {
    EventRow {
        event_id: Uuid::now_v7(),
        site_id,
        timestamp: 1_700_000_000 + u32::from(n),
        received_at: u32::MAX - 1_000_000_000,
        event_type: "custom_event".into(),
        event_name: "signup ✓".into(),
        properties: r#"{"plan":"pro","emoji":"🚀","nested":{"a":[1,2]}}"#.into(),
        hostname: "shop.example.com".into(),
        // Over 127 bytes: a two-byte length prefix.
        pathname: format!("/{}", "ä".repeat(150 + usize::from(n))),
        querystring: "?utm_source=x&q=%20".into(),
        page_title: String::new(),
        referrer: "https://www.google.com/".into(),
        channel: "Organic Search".into(),
        user_id: format!("user-{n}"),
        session_id: "0123456789abcdef0123456789abcdef".into(),
        language: "en-GB".into(),
        screen_width: u16::MAX,
        screen_height: 0,
        country: "GB".into(),
        region: "GB-ENG".into(),
        city: "London".into(),
        lat: 51.5142,
        lon: -0.0931,
        browser: "Chrome".into(),
        browser_version: "120".into(),
        operating_system: "Windows".into(),
        operating_system_version: "10".into(),
        device_type: "Desktop".into(),
        is_bot: n % 2,
        ip: "2001:db8::1".into(),
        anonymous_id: format!("device-{n}"),
        tag: "launch".into(),
        app_version: "2.1.0".into(),
        device_model: "Pixel 8".into(),
        feature_flags: r#"{"new-checkout":"on"}"#.into(),
        // Nullable columns: a value, and null, in every row.
        lcp: Some(2500.25),
        cls: Some(0.05),
        inp: n.is_multiple_of(2).then_some(120.0),
        fcp: None,
        ttfb: Some(0.0),
        // Nullable(DateTime): a client's own times, a value or null; 0 and u32::MAX are
        // the bounds a client's clock is held to.
        client_timestamp: match n % 3 {
            0 => Some(1_699_996_400),
            1 => Some(0),
            _ => None,
        },
        sent_at: n.is_multiple_of(2).then_some(u32::MAX - u32::from(n)),
        daily_visitor: u8::from(n == 1),
    }
}

#[tokio::test]
async fn encoded_rows_read_back_equal_even_when_split_across_chunks() {
    let db = rivulet_tests::db().await;
    // A site id no other test uses, so the rows read back are this test's.
    let site_id = 4_000_000_000 + (std::process::id() % 1_000_000);
    let rows: Vec<EventRow> = (0..3).map(|n| row(site_id, n)).collect();
    let mut data = Vec::new();
    for r in &rows {
        r.write_row_binary(&mut data);
    }
    // Chunk boundaries inside rows, inside a length prefix and inside a UTF-8 character.
    let data = Bytes::from(data);
    let cuts = [
        0,
        1,
        17,
        200,
        201,
        data.len() / 2,
        data.len() - 3,
        data.len(),
    ];
    let chunks: Vec<Bytes> = cuts.windows(2).map(|w| data.slice(w[0]..w[1])).collect();
    insert_row_binary(&db, &chunks).await.expect("insert");

    let back = db
        .client
        .query("SELECT ?fields FROM events WHERE site_id = ? ORDER BY timestamp")
        .bind(site_id)
        .fetch_all::<EventRow>()
        .await
        .expect("read back");
    assert_eq!(back, rows);
}
