//! A small HTTP load generator for `scripts/bench` (loopback only).
//!
//!   loadgen max  URL BODY_FILE CONNECTIONS SECONDS       closed loop: as fast as possible
//!   loadgen rate URL BODY_FILE RATE SECONDS [CONNECTIONS] open loop: RATE requests/s over
//!                                                         CONNECTIONS (default 64) connections
//!
//! `--header 'Name: value'` (repeatable, anywhere among the arguments) adds a request
//! header, e.g. the `Origin` of a browser event; it is written into the prepared request
//! once, like the rest of it, so it costs nothing per request.
//!
//! Prints one JSON line: requests, ok, errors, elapsed_s, requests_per_sec, p50/p90/p99/max in ms
//! (rate mode also: p99_ms_by_second, the p99 of each second's requests).
//! In open-loop mode a request that is late because its connection was still busy is
//! timed from when it was due, so a stalled server shows up in the percentiles in full
//! (no coordinated omission); one sent on time is timed from its actual send, since the
//! gap to its due time is the generator's own timer (tokio's has 1 ms granularity),
//! reported as timer_lag_p50_ms/p99_ms. Open loop first
//! runs LOADGEN_WARMUP_SECS (default 2) at the same rate, not recorded: connections are
//! opened and the server's caches and the broker's JIT are warm when measuring starts.
//! LOADGEN_TRACE=FILE writes one line per request: start (s), latency (ms), ok, after a
//! first line giving the UNIX time of start 0.

use std::time::{Duration, Instant};

#[tokio::main]
async fn main() {
    let (args, headers) = match split_headers(std::env::args().collect()) {
        Ok(split) => split,
        Err(e) => usage(&e),
    };
    if args.len() != 6 && args.len() != 7 {
        usage("wrong number of arguments");
    }
    let (mode, url, body_file) = (args[1].clone(), args[2].clone(), &args[3]);
    let n: u64 = args[4].parse().expect("a number");
    let secs: u64 = args[5].parse().expect("seconds");
    let conns: u64 = args.get(6).map_or(64, |c| c.parse().expect("connections"));
    let warmup_secs: u64 =
        std::env::var("LOADGEN_WARMUP_SECS").map_or(2, |w| w.parse().expect("seconds"));
    assert!(
        url.starts_with("http://127.") || url.starts_with("http://localhost"),
        "loopback targets only"
    );
    let target = Target::new(
        &url,
        &headers,
        &std::fs::read(body_file).expect("body file"),
    );
    let deadline = Instant::now() + Duration::from_secs(secs);
    let started = Instant::now();
    // Open loop: request i is due at begin + i/RATE; recording starts after the warm-up.
    let begin = started + Duration::from_millis(50);
    // Rate mode: how late the generator's timer sent on-time requests, in ms (reported).
    let mut lags: Vec<f64> = Vec::new();
    // (ok, latency in ms, start in seconds since the run began)
    let results: Vec<(bool, f64, f64)> = match mode.as_str() {
        "max" => {
            let tasks: Vec<_> = (0..n)
                .map(|_| {
                    let target = target.clone();
                    tokio::spawn(async move {
                        let mut conn = None;
                        let mut out = Vec::new();
                        while Instant::now() < deadline {
                            let t = Instant::now();
                            let ok = target.send(&mut conn).await;
                            let at = t.duration_since(started).as_secs_f64();
                            out.push((ok, t.elapsed().as_secs_f64() * 1000.0, at));
                        }
                        out
                    })
                })
                .collect();
            let mut all = Vec::new();
            for t in tasks {
                all.extend(t.await.unwrap());
            }
            all
        }
        "rate" => {
            // wrk2's design: a fixed set of connections, each sending its share of a fixed
            // schedule (request i is due at i/RATE). A request that is late because its
            // connection is still busy counts from when it was due, so a stall is measured in
            // full, but a stall does not turn into a storm of new connections, which is what
            // a per-request task did: every request in flight during a 20 ms pause opened a
            // connection of its own, and the accept storm grew the pause tenfold.
            let conns = conns.min(n).max(1);
            let warm = Duration::from_secs(warmup_secs);
            let total = (n as f64 * (warmup_secs + secs) as f64) as u64;
            let tasks: Vec<_> = (0..conns)
                .map(|c| {
                    let target = target.clone();
                    tokio::spawn(async move {
                        let mut conn = None;
                        let (mut out, mut timer_lag) = (Vec::new(), Vec::new());
                        let mut i = c;
                        while i < total {
                            let due = begin + Duration::from_secs_f64(i as f64 / n as f64);
                            // Late = this connection's previous response came after this
                            // request was due: the server's delay, counted from `due`. On
                            // time = the wait is the generator's own timer (tokio's has 1 ms
                            // granularity), counted from the actual send instead.
                            let late = Instant::now() >= due;
                            tokio::time::sleep_until(due.into()).await;
                            let sent = Instant::now();
                            let ok = target.send(&mut conn).await;
                            let since = due.duration_since(begin);
                            if since >= warm {
                                let at = (since - warm).as_secs_f64();
                                let from = if late { due } else { sent };
                                out.push((ok, from.elapsed().as_secs_f64() * 1000.0, at));
                                if !late {
                                    timer_lag.push((sent - due).as_secs_f64() * 1000.0);
                                }
                            }
                            i += conns;
                        }
                        (out, timer_lag)
                    })
                })
                .collect();
            let mut all = Vec::new();
            for t in tasks {
                let (out, timer_lag) = t.await.unwrap();
                all.extend(out);
                lags.extend(timer_lag);
            }
            all
        }
        _ => panic!("mode is max or rate"),
    };
    // Where the recorded requests' `start_s` 0 lies: after the open loop's warm-up.
    let measured_from = match mode.as_str() {
        "rate" => begin + Duration::from_secs(warmup_secs),
        _ => started,
    };
    let elapsed = measured_from.elapsed().as_secs_f64();
    if let Ok(path) = std::env::var("LOADGEN_TRACE") {
        // One line per request, "start_s latency_ms ok", to look for a pattern in the tail.
        // The first line dates the run (UNIX seconds at `start_s` 0), to line it up
        // with other logs (the broker's GC log, a system monitor).
        let unix_now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let mut lines = format!("# start_s 0 = unix {:.3}\n", unix_now - elapsed);
        for (ok, ms, at) in &results {
            lines.push_str(&format!("{at:.6} {ms:.3} {}\n", *ok as u8));
        }
        std::fs::write(path, lines).expect("trace file");
    }
    let mut lat: Vec<f64> = results.iter().map(|r| r.1).collect();
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    lags.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let ok = results.iter().filter(|r| r.0).count();
    let timer = if mode == "rate" {
        format!(
            ",\"timer_lag_p50_ms\":{:.3},\"timer_lag_p99_ms\":{:.3},\"p99_ms_by_second\":[{}]",
            pct(&lags, 0.5),
            pct(&lags, 0.99),
            p99_by_second(&results)
        )
    } else {
        String::new()
    };
    println!(
        "{{\"mode\":\"{mode}\",\"requests\":{},\"ok\":{ok},\"errors\":{},\"elapsed_s\":{:.3},\"requests_per_sec\":{:.0},\"p50_ms\":{:.3},\"p90_ms\":{:.3},\"p99_ms\":{:.3},\"max_ms\":{:.3}{timer}}}",
        results.len(),
        results.len() - ok,
        elapsed,
        results.len() as f64 / elapsed,
        pct(&lat, 0.5),
        pct(&lat, 0.9),
        pct(&lat, 0.99),
        lat.last().copied().unwrap_or(0.0)
    );
}

fn usage(problem: &str) -> ! {
    eprintln!(
        "{problem}\nusage: loadgen max|rate URL BODY_FILE CONNECTIONS|RATE SECONDS [CONNECTIONS] [--header 'Name: value']..."
    );
    std::process::exit(2);
}

/// A request header: name, value.
type Header = (String, String);

/// The arguments without the `--header 'Name: value'` pairs, and those headers as
/// `(name, value)`. A header must have a name and no line break, or it would change the
/// request's framing.
fn split_headers(args: Vec<String>) -> Result<(Vec<String>, Vec<Header>), String> {
    let (mut rest, mut headers) = (Vec::new(), Vec::new());
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if arg != "--header" {
            rest.push(arg);
            continue;
        }
        let h = args.next().ok_or("--header needs 'Name: value'")?;
        let (name, value) = h
            .split_once(':')
            .ok_or_else(|| format!("header {h:?} is not 'Name: value'"))?;
        let (name, value) = (name.trim(), value.trim());
        let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
        if name.is_empty() || !name.chars().all(token) || value.contains(['\r', '\n']) {
            return Err(format!("header {h:?} is not 'Name: value'"));
        }
        headers.push((name.to_string(), value.to_string()));
    }
    Ok((rest, headers))
}

/// The p99 of the requests due in each whole second of the run, comma-separated: whether
/// a tail is one episode of a few hundred milliseconds or spread over the whole run.
fn p99_by_second(results: &[(bool, f64, f64)]) -> String {
    let mut seconds: Vec<Vec<f64>> = Vec::new();
    for &(_, ms, at) in results {
        let s = at as usize;
        if seconds.len() <= s {
            seconds.resize_with(s + 1, Vec::new);
        }
        seconds[s].push(ms);
    }
    seconds
        .iter_mut()
        .map(|v| {
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            format!("{:.1}", pct(v, 0.99))
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The `p` quantile of sorted values (0 when empty).
fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted
        .get(((sorted.len() as f64 * p) as usize).min(sorted.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0.0)
}

/// One server and the request sent to it, written out once: the generator's own cost per
/// request should be far below the server's, or it measures itself (with reqwest it used
/// about as much CPU per request as ingest, on the same two cores; BENCHMARKS.md, "Design
/// notes").
#[derive(Clone)]
struct Target {
    addr: String,
    request: std::sync::Arc<[u8]>,
}

/// A keep-alive connection and its read buffer.
struct Conn {
    stream: tokio::net::TcpStream,
    buf: Vec<u8>,
}

impl Target {
    fn new(url: &str, headers: &[Header], body: &[u8]) -> Target {
        let rest = url.strip_prefix("http://").expect("an http:// URL");
        let (addr, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let path = if path.is_empty() { "/" } else { path };
        let mut head = format!(
            "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
            body.len()
        );
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        let mut request = head.into_bytes();
        request.extend_from_slice(body);
        Target {
            addr: addr.to_string(),
            request: request.into(),
        }
    }

    /// Sends the request on `conn` (connecting first if there is none) and reads the whole
    /// response: whether it was a 2xx. On any error the connection is dropped, and the
    /// next request opens a new one, as a pooled client would.
    async fn send(&self, conn: &mut Option<Conn>) -> bool {
        if conn.is_none() {
            match tokio::net::TcpStream::connect(&self.addr).await {
                Ok(stream) => {
                    let _ = stream.set_nodelay(true);
                    *conn = Some(Conn {
                        stream,
                        buf: Vec::with_capacity(4096),
                    });
                }
                Err(_) => return false,
            }
        }
        let c = conn.as_mut().unwrap();
        match exchange(c, &self.request).await {
            Ok(Response { ok, keep_alive }) => {
                if !keep_alive {
                    *conn = None;
                }
                ok
            }
            Err(_) => {
                *conn = None;
                false
            }
        }
    }
}

struct Response {
    ok: bool,
    keep_alive: bool,
}

/// Writes one request and reads its response: the head, then `content-length` bytes of
/// body. The servers measured here answer with a length; a chunked answer is an error.
async fn exchange(c: &mut Conn, request: &[u8]) -> std::io::Result<Response> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    c.stream.write_all(request).await?;
    c.buf.clear();
    let head_end = loop {
        if let Some(i) = c.buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if c.buf.len() > 64 * 1024 {
            return Err(bad("response head over 64 KiB"));
        }
        if c.stream.read_buf(&mut c.buf).await? == 0 {
            return Err(bad("connection closed before a response"));
        }
    };
    let head = std::str::from_utf8(&c.buf[..head_end]).map_err(|_| bad("head not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.strip_prefix("HTTP/1.1 "))
        .and_then(|l| l.get(..3))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("no HTTP/1.1 status line"))?;
    let (mut length, mut keep_alive) = (None, true);
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .parse::<usize>()
                    .map_err(|_| bad("bad content-length"))?,
            );
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(bad("chunked responses are not read"));
        } else if name.eq_ignore_ascii_case("connection") && value.eq_ignore_ascii_case("close") {
            keep_alive = false;
        }
    }
    let total = head_end + length.ok_or_else(|| bad("no content-length"))?;
    while c.buf.len() < total {
        if c.stream.read_buf(&mut c.buf).await? == 0 {
            return Err(bad("connection closed inside a body"));
        }
    }
    Ok(Response {
        ok: (200..300).contains(&status),
        keep_alive,
    })
}

#[cfg(test)]
mod tests {
    use super::{split_headers, Target};

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn headers_are_taken_out_of_the_arguments() {
        let (rest, headers) = split_headers(args(&[
            "loadgen",
            "--header",
            "Origin: https://bench.localhost",
            "max",
            "http://127.0.0.1:1/api/track",
            "body.json",
            "--header",
            "User-Agent:Mozilla/5.0 (X11)",
            "64",
            "2",
        ]))
        .unwrap();
        assert_eq!(
            rest,
            args(&[
                "loadgen",
                "max",
                "http://127.0.0.1:1/api/track",
                "body.json",
                "64",
                "2"
            ])
        );
        assert_eq!(
            headers,
            vec![
                ("Origin".to_string(), "https://bench.localhost".to_string()),
                ("User-Agent".to_string(), "Mozilla/5.0 (X11)".to_string()),
            ]
        );
    }

    #[test]
    fn a_header_that_would_break_the_request_is_refused() {
        for bad in ["no colon", ": no name", "Bad Name: x", "X: a\r\nY: b"] {
            assert!(
                split_headers(args(&["loadgen", "--header", bad])).is_err(),
                "{bad:?}"
            );
        }
        assert!(split_headers(args(&["loadgen", "--header"])).is_err());
    }

    #[test]
    fn headers_are_written_into_the_prepared_request() {
        let headers = vec![("Origin".to_string(), "https://a.example".to_string())];
        let t = Target::new("http://127.0.0.1:9/api/track", &headers, b"{}");
        assert_eq!(t.addr, "127.0.0.1:9");
        assert_eq!(
            std::str::from_utf8(&t.request).unwrap(),
            "POST /api/track HTTP/1.1\r\nhost: 127.0.0.1:9\r\ncontent-type: application/json\r\n\
             content-length: 2\r\nOrigin: https://a.example\r\n\r\n{}"
        );
    }
}
