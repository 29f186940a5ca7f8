//! Raw HTTP/1.1 over a socket, for tests that must control exactly what a client sends
//! and when. Uses tokio's readiness API: the workspace's tokio has no io-util.

use std::time::{Duration, Instant};
use tokio::net::TcpStream;

pub async fn read_some(s: &TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        s.readable().await?;
        match s.try_read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            other => return other,
        }
    }
}

pub async fn write_all(s: &TcpStream, mut bytes: &[u8]) -> std::io::Result<()> {
    while !bytes.is_empty() {
        s.writable().await?;
        match s.try_write(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads an HTTP response head (up to the blank line); `None` if the server closed
/// the connection first or `within` passed.
pub async fn read_head(stream: &TcpStream, within: Duration) -> Option<String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = tokio::time::Instant::now() + within;
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match tokio::time::timeout_at(end, read_some(stream, &mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return None,
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    Some(String::from_utf8_lossy(&buf).to_string())
}

/// Waits until the server closes `stream` (EOF or reset); returns when, or `None` if it
/// stayed open for `within`. Any bytes the server sends first are skipped.
pub async fn wait_closed(stream: &TcpStream, within: Duration) -> Option<Instant> {
    let mut chunk = [0u8; 4096];
    let end = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(end, read_some(stream, &mut chunk)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(Instant::now()),
            Ok(Ok(_)) => {}
        }
    }
}

/// Reads until the server closes the connection; `None` if it stayed open for `within`.
pub async fn read_to_close(stream: &TcpStream, within: Duration) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(end, read_some(stream, &mut chunk)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(buf),
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}
