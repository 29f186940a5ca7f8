//! Whatever the bytes, a reader does not panic, reports lines within the input, in
//! order, and ends.

use proptest::prelude::*;
use rivulet_import::{Format, Reader, SkipKind};

/// Bytes that matter to the parsers, so that random inputs reach their branches: quotes,
/// commas, line ends, braces, a BOM, multi-byte and invalid UTF-8, and pieces of real
/// records.
fn fragment() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        any::<u8>().prop_map(|b| vec![b]),
        Just(b"\"".to_vec()),
        Just(b",".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"{".to_vec()),
        Just(b"}".to_vec()),
        Just(b"\xEF\xBB\xBF".to_vec()),
        Just("é€😀".as_bytes().to_vec()),
        Just(b"\xff\xc3".to_vec()),
        Just(b"uuid,event,timestamp,distinct_id,properties\n".to_vec()),
        Just(b"event_id,session_id,created_at,event_type,url_path,screen,event_name\n".to_vec()),
        Just(b"{\"event_id\":\"0190a5a8-7c3e-7000-8000-000000000001\",\"timestamp\":".to_vec()),
        Just(b"\"2026-11-25T10:00:00Z\",\"type\":\"pageview\"}\n".to_vec()),
        Just(b"{\"uuid\":\"u\",\"event\":\"$autocapture\",\"timestamp\":\"2024-08-19T10:00:00Z\",\"distinct_id\":\"d\",\"properties\":{\"$event_type\":\"click\"},\"elements_chain\":\"".to_vec()),
        Just(b"button:text=\\\"x\\\"\\\\;a".to_vec()),
        Just(b"e,s,2025-03-01 09:15:02,2,/p,1920x,".to_vec()),
        Just(b"\"{\"\"$current_url\"\":\"\"https://[::1\"\"}\"".to_vec()),
        Just(b"$exception_list".to_vec()),
        Just(b"2024-02-29T23:59:60.9999+14:00".to_vec()),
    ]
}

fn input() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..512),
        prop::collection::vec(fragment(), 0..64).prop_map(|parts| parts.concat()),
    ]
}

fn check(format: Format, bytes: &[u8]) -> Result<(), TestCaseError> {
    let Ok(reader) = Reader::new(format, bytes) else {
        return Ok(());
    };
    let lines = bytes.iter().filter(|b| **b == b'\n').count() as u64 + 1;
    let mut last = 0;
    let mut count = 0;
    let mut reader = reader;
    for item in reader.by_ref() {
        count += 1;
        prop_assert!(count <= lines, "more results than lines");
        if let Err(e) = item {
            prop_assert!(e.line >= 1 && e.line <= lines, "line {} of {lines}", e.line);
            prop_assert!(e.line > last, "line {} after {last}", e.line);
            prop_assert!(e.kind != SkipKind::Io);
            prop_assert!(!e.message.is_empty());
            last = e.line;
        }
    }
    prop_assert!(reader.next().is_none());
    prop_assert_eq!(reader.bytes_read(), bytes.len() as u64);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn rivulet_never_panics(bytes in input()) {
        check(Format::Rivulet, &bytes)?;
    }

    #[test]
    fn umami_never_panics(bytes in input()) {
        check(Format::Umami, &bytes)?;
    }

    #[test]
    fn posthog_never_panics(bytes in input()) {
        check(Format::Posthog, &bytes)?;
    }

    /// With a valid header in front, the rows themselves are what is random.
    #[test]
    fn rows_after_a_real_header_never_panic(bytes in input(), which in 0..3usize) {
        let header: &[u8] = match which {
            0 => b"event_id,session_id,visit_id,created_at,event_type,event_name,url_path,url_query,referrer_domain,referrer_path,referrer_query,screen,browser,os,device,country,region,lcp\n",
            1 => b"uuid,event,timestamp,distinct_id,$session_id,properties,elements_chain\n",
            _ => b"*.uuid,*.event,*.timestamp,*.distinct_id,*.properties.$current_url,*.properties.$screen_width,*.properties.$is_identified,*.properties.plan\n",
        };
        let format = if which == 0 { Format::Umami } else { Format::Posthog };
        check(format, &[header, &bytes].concat())?;
    }
}
