//! How fast each format is read: writes N events of each format to a temporary file and
//! reads them back with a `Reader`, timing the reading only.
//!
//! `cargo run --release -p rivulet-import --example parse_speed [-- N [FORMAT]]` (N =
//! 1,000,000 by default; all three formats unless one is named). The rivulet lines are
//! full export lines (contracts §3, ~890 bytes). Prints the wall-clock rate and the rate
//! per second on a CPU, which a busy machine does not distort.

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::time::Instant;

use rivulet_import::{Format, Reader};

fn rivulet_line(i: u64) -> String {
    format!(
        concat!(
            r#"{{"event_id":"0190a5a8-7c3e-7000-8000-{:012x}","site_id":1,"timestamp":"2026-11-25T10:{:02}:{:02}Z","#,
            r#""received_at":"2026-11-25T10:{:02}:{:02}Z","type":"pageview","event_name":"","properties":"","#,
            r#""hostname":"shop.example.com","pathname":"/products/{}","querystring":"?utm_source=newsletter&utm_medium=email","#,
            r#""page_title":"Product {} – Example Shop","referrer":"https://www.google.com/","#,
            r#""user_id":"3f2a9c1e5b7d4a60918e2c4b6d8f{:04x}","anonymous_id":"","language":"en-GB","#,
            r#""screenWidth":1920,"screenHeight":1080,"tag":"","app_version":"","device_model":"","feature_flags":"","#,
            r#""lcp":null,"cls":null,"inp":null,"fcp":null,"ttfb":null,"channel":"Email","session_id":"9d1c7e0f2b4a{:04x}","#,
            r#""country":"GB","region":"GB-ENG","city":"London","lat":51.5,"lon":-0.09,"browser":"Chrome","#,
            r#""browser_version":"120","operating_system":"Windows","operating_system_version":"10","#,
            r#""device_type":"Desktop","is_bot":0,"ip":""}}"#
        ),
        i,
        (i / 60) % 60,
        i % 60,
        (i / 60) % 60,
        i % 60,
        i % 5000,
        i % 5000,
        i % 65536,
        i % 65536,
    )
}

fn umami_row(i: u64) -> String {
    format!(
        "\"5d3c1b2a-0f9e-4d8c-b7a6-958473625140\",\"a1b2c3d4-e5f6-4a7b-8c9d-{:012x}\",\"f0e1d2c3-b4a5-4968-8776-655443322110\",\"c0a80001-0000-4000-8000-{:012x}\",\"www.example.com\",\"chrome\",\"Windows 10\",\"laptop\",\"1920x1080\",\"en-GB\",\"GB\",\"GB-ENG\",\"\",\"London\",\"/products/{}\",\"utm_source=newsletter\",\"/search\",\"q=shop\",\"www.google.com\",\"Product {}\",\"1\",\"\",\"2025-03-01 09:{:02}:{:02}\"",
        i % 4096,
        i,
        i % 5000,
        i % 5000,
        (i / 60) % 60,
        i % 60
    )
}

fn posthog_line(i: u64) -> String {
    format!(
        concat!(
            r#"{{"uuid":"018f2c1a-d000-7000-8000-{:012x}","event":"$pageview","properties":{{"$os":"Windows","$os_version":"10.0","#,
            r#""$browser":"Chrome","$device_type":"Desktop","$current_url":"https://www.example.com/products/{}?utm_source=newsletter","#,
            r#""$host":"www.example.com","$pathname":"/products/{}","$raw_user_agent":"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36","#,
            r#""$browser_version":120,"$browser_language":"en-GB","$screen_height":1080,"$screen_width":1920,"$lib":"web","#,
            r#""$referrer":"https://www.google.com/","$device_id":"018f2c1a-9b3e-7c4d-8e5f-{:012x}","$session_id":"018f2c1a-9b40-7a11-b2c3-d4e5f6a7b8c9","#,
            r#""$is_identified":false,"title":"Product {}","$ip":"81.2.69.142","$geoip_country_code":"GB"}},"#,
            r#""distinct_id":"018f2c1a-9b3e-7c4d-8e5f-{:012x}","team_id":2,"timestamp":"2024-08-19T10:00:00.123456Z","#,
            r#""created_at":"2024-08-19T10:00:01.000000Z","elements_chain":"","person_id":"018f2c1a-c000-7000-8000-0000000000aa"}}"#
        ),
        i,
        i % 5000,
        i % 5000,
        i % 4096,
        i % 5000,
        i % 4096
    )
}

fn measure(format: Format, name: &str, header: Option<&str>, n: u64, row: fn(u64) -> String) {
    let path = std::env::temp_dir().join(format!("rivulet-import-speed-{name}"));
    {
        let mut out = BufWriter::new(File::create(&path).unwrap());
        if let Some(h) = header {
            writeln!(out, "{h}").unwrap();
        }
        for i in 0..n {
            writeln!(out, "{}", row(i)).unwrap();
        }
    }
    let bytes = std::fs::metadata(&path).unwrap().len();
    let cpu_start = thread_cpu_ns();
    let start = Instant::now();
    let reader = Reader::new(
        format,
        BufReader::with_capacity(1 << 16, File::open(&path).unwrap()),
    )
    .unwrap();
    let (mut ok, mut bad) = (0u64, 0u64);
    for item in reader {
        match item {
            Ok(ev) => {
                std::hint::black_box(&ev);
                ok += 1;
            }
            Err(_) => bad += 1,
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu = thread_cpu_ns()
        .zip(cpu_start)
        .map(|(end, start)| (end - start) as f64 / 1e9);
    std::fs::remove_file(&path).ok();
    assert_eq!((ok, bad), (n, 0), "{name}");
    print!(
        "{name:<8} {n} events, {:.0} MB: wall {secs:.2} s = {:.0} events/s, {:.0} MB/s",
        bytes as f64 / 1e6,
        n as f64 / secs,
        bytes as f64 / 1e6 / secs
    );
    match cpu {
        Some(cpu) => println!(
            "; on-CPU {cpu:.2} s = {:.0} events/s, {:.0} MB/s",
            n as f64 / cpu,
            bytes as f64 / 1e6 / cpu
        ),
        None => println!(),
    }
}

/// This thread's time on a CPU (Linux: /proc/thread-self/schedstat), so that a busy
/// machine's waiting is not counted as the parser's.
fn thread_cpu_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace().next()?.parse().ok()
}

fn main() {
    let n = std::env::args()
        .nth(1)
        .map_or(1_000_000, |a| a.parse().expect("N, a number of events"));
    let only: Option<Format> = std::env::args().nth(2).map(|f| f.parse().unwrap());
    let wanted = |f: Format| only.is_none_or(|o| o == f);
    if wanted(Format::Rivulet) {
        measure(Format::Rivulet, "rivulet", None, n, rivulet_line);
    }
    if wanted(Format::Umami) {
        measure(
        Format::Umami,
        "umami",
        Some("\"website_id\",\"session_id\",\"visit_id\",\"event_id\",\"hostname\",\"browser\",\"os\",\"device\",\"screen\",\"language\",\"country\",\"subdivision1\",\"subdivision2\",\"city\",\"url_path\",\"url_query\",\"referrer_path\",\"referrer_query\",\"referrer_domain\",\"page_title\",\"event_type\",\"event_name\",\"created_at\""),
        n,
        umami_row,
    );
    }
    if wanted(Format::Posthog) {
        measure(Format::Posthog, "posthog", None, n, posthog_line);
    }
}
