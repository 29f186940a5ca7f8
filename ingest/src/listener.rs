//! The HTTP/1 accept loop, with the bounds axum's `serve` does not have: a deadline for
//! a request head, an idle keep-alive timeout, and a cap on open connections.
//!
//! Each connection's socket is wrapped in [`TimedIo`], which knows from the request
//! service whether a request is being handled, and so which deadline applies:
//! - waiting for a request with no byte of it yet: `KEEP_ALIVE_TIMEOUT_MS` (idle);
//! - from the first byte of a request head until the head is complete:
//!   `HEADER_READ_TIMEOUT_MS`, counted from that first byte, so trickling a byte at a
//!   time does not extend it (slowloris);
//! - while a request is handled: none here; the handler bounds the body with
//!   `REQUEST_BODY_TIMEOUT_MS` (408) and Kafka's ack with `KAFKA_ACK_TIMEOUT_MS`.
//!
//! hyper's own `header_read_timeout` starts when hyper *waits* for a head, so on a
//! kept-alive connection it also ends the idle time: one timer could not give a short
//! head deadline and a keep-alive longer than a load balancer's idle timeout.
//!
//! At `MAX_CONNECTIONS` open connections the loop stops accepting: new connections
//! wait in the kernel's listen backlog (no file descriptor, no memory spent on them) and
//! are served as soon as one closes, which idle ones do within the keep-alive timeout.
//! Refusing them instead (accept, then close) would spend a descriptor per attempt and
//! turn a short wait into an error the client must retry.

use axum::response::Response;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::time::{Instant, Sleep};

/// The connection bounds of [`serve`].
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub header_read_timeout: Duration,
    pub keep_alive_timeout: Duration,
    pub max_connections: usize,
}

/// File descriptors kept free for everything but client connections (Kafka, Redis,
/// ClickHouse, logs) when the connection cap is fitted to `RLIMIT_NOFILE`.
const FD_RESERVE: u64 = 256;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and returns the soft limit now in
/// force (`None` if it cannot be read). Each connection is a descriptor, and the usual
/// soft default (1024) is far below what an ingest replica should hold open.
pub fn raise_nofile_limit() -> Option<u64> {
    let before = rlimit::Resource::NOFILE.get().ok();
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(now) => {
            if let Some((soft, _)) = before.filter(|(soft, _)| *soft < now) {
                tracing::info!(from = soft, to = now, "raised RLIMIT_NOFILE");
            }
            Some(now)
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not raise RLIMIT_NOFILE");
            before.map(|(soft, _)| soft)
        }
    }
}

/// The connection cap to use: `configured`, lowered to fit the descriptor limit.
pub fn fit_to_nofile(configured: usize, nofile: Option<u64>) -> usize {
    match nofile {
        Some(n) if (configured as u64).saturating_add(FD_RESERVE) > n => {
            let fitted = n.saturating_sub(FD_RESERVE).max(1) as usize;
            tracing::warn!(
                configured,
                fitted,
                nofile = n,
                "MAX_CONNECTIONS lowered to fit RLIMIT_NOFILE"
            );
            fitted
        }
        _ => configured,
    }
}

/// Serves `handle` (a request and its peer's address → the response) on `listener`
/// until `shutdown` resolves; then stops accepting, lets every connection finish its
/// request in flight (idle ones close at once), and returns when all are closed.
pub async fn serve<H, F>(
    listener: TcpListener,
    handle: H,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()>
where
    H: Fn(hyper::Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response> + Send + 'static,
{
    // u32: `acquire_many` below takes the whole count at once.
    let max = limits.max_connections.clamp(1, u32::MAX as usize);
    let slots = Arc::new(Semaphore::new(max));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.keep_alive(true);
    // hyper's read buffer grows to ~400 KB for a fast upload. Reading and discarding an
    // oversized body after its 413 (request_body::Linger) then churned through buffers that
    // large: RSS rose from 23 to 90 MB over forty 100 MB bodies. With 64 KiB it stayed
    // at 27 MB; a request head larger than this still gets hyper's 431.
    builder.max_buf_size(64 * 1024);
    loop {
        let permit = tokio::select! {
            () = &mut shutdown => break,
            permit = slots.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
        };
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    accept_error(e).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let shared = new_shared();
        let io = TokioIo::new(TimedIo::new(stream, shared.clone(), limits));
        let handle = handle.clone();
        let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            let done = RequestGuard::begin(shared.clone());
            // Boxed: hyper keeps room for one request's future in every connection, busy
            // or idle, and the handler's is ~3.6 KB (ten thousand idle connections would
            // hold 36 MB of it).
            let resp = Box::pin(handle(req, peer));
            async move {
                let resp = resp.await;
                drop(done);
                Ok::<_, Infallible>(resp)
            }
        });
        let conn = builder.serve_connection(io, service);
        let mut stop = stop_rx.clone();
        metrics::gauge!("ingest_open_connections").increment(1.0);
        tokio::spawn(async move {
            let mut conn = std::pin::pin!(conn);
            let stopping = async move {
                let _ = stop.wait_for(|stop| *stop).await;
            };
            tokio::select! {
                res = conn.as_mut() => log_conn_end(res),
                () = stopping => {
                    conn.as_mut().graceful_shutdown();
                    log_conn_end(conn.await);
                }
            }
            metrics::gauge!("ingest_open_connections").decrement(1.0);
            drop(permit);
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Every connection holds a permit until it closes: all permits back = all closed.
    let _ = slots.acquire_many(max as u32).await;
    Ok(())
}

fn log_conn_end(res: Result<(), hyper::Error>) {
    if let Err(e) = res {
        tracing::debug!(error = %e, "connection closed with an error");
    }
}

/// As axum's `serve`: errors of one connection are skipped; anything else (such as
/// running out of file descriptors) is logged and retried after a pause.
async fn accept_error(e: io::Error) {
    use io::ErrorKind::*;
    if matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accept failed; retrying in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// Where a connection is between requests, as the socket wrapper needs to know it.
#[derive(Clone, Copy, Debug)]
enum Phase {
    /// No request in flight and no byte of the next one, since this instant.
    Idle(Instant),
    /// The first byte of a request head arrived at this instant.
    Head(Instant),
    /// A request is being handled.
    Busy,
}

/// A connection's phase, and the task waiting to read while it was busy: when the
/// request ends, that task must poll the socket again to arm the idle deadline.
#[derive(Debug)]
struct Shared {
    phase: Phase,
    reader: Option<Waker>,
}

type SharedState = Arc<Mutex<Shared>>;

fn new_shared() -> SharedState {
    Arc::new(Mutex::new(Shared {
        phase: Phase::Idle(Instant::now()),
        reader: None,
    }))
}

/// Marks its connection busy from a request's head until its response is ready.
struct RequestGuard(SharedState);

impl RequestGuard {
    fn begin(shared: SharedState) -> Self {
        lock(&shared).phase = Phase::Busy;
        RequestGuard(shared)
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let reader = {
            let mut shared = lock(&self.0);
            shared.phase = Phase::Idle(Instant::now());
            shared.reader.take()
        };
        if let Some(waker) = reader {
            waker.wake();
        }
    }
}

fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A socket that fails reads with `TimedOut` once its phase's deadline has passed, which
/// makes hyper close the connection.
struct TimedIo {
    stream: TcpStream,
    shared: SharedState,
    limits: Limits,
    /// Armed only while a deadline applies; never later than the deadline, and possibly
    /// earlier (see `poll_deadline`).
    timer: Pin<Box<Sleep>>,
}

impl TimedIo {
    fn new(stream: TcpStream, shared: SharedState, limits: Limits) -> Self {
        TimedIo {
            stream,
            shared,
            limits,
            timer: Box::pin(tokio::time::sleep(limits.keep_alive_timeout)),
        }
    }

    /// The deadline of the current phase; while busy there is none, and the waiting
    /// task is kept to be woken when the request ends.
    fn deadline(&self, cx: &Context<'_>) -> Option<Instant> {
        let mut shared = lock(&self.shared);
        match shared.phase {
            Phase::Idle(since) => Some(since + self.limits.keep_alive_timeout),
            Phase::Head(since) => Some(since + self.limits.header_read_timeout),
            Phase::Busy => {
                if !shared
                    .reader
                    .as_ref()
                    .is_some_and(|w| w.will_wake(cx.waker()))
                {
                    shared.reader = Some(cx.waker().clone());
                }
                None
            }
        }
    }

    /// Bytes arrived: if none of this request had before, its head deadline starts now.
    fn on_read(&self) {
        let mut shared = lock(&self.shared);
        if let Phase::Idle(_) = shared.phase {
            shared.phase = Phase::Head(Instant::now());
        }
    }

    /// Called when a read would wait: `Ready` with an error once the deadline passed.
    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let Some(deadline) = self.deadline(cx) else {
            return Poll::Pending;
        };
        // Moving a timer takes the timer wheel's lock, and the idle deadline moves later
        // with every request. So the timer is only moved when it would fire late; when it
        // fires early it is moved once, to the deadline that then applies.
        if self.timer.deadline() > deadline {
            self.timer.as_mut().reset(deadline);
        }
        loop {
            match self.timer.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(()) if Instant::now() < deadline => self.timer.as_mut().reset(deadline),
                Poll::Ready(()) => {
                    return Poll::Ready(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no complete request head in time (idle or slow client)",
                    ))
                }
            }
        }
    }
}

impl AsyncRead for TimedIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.on_read();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => this.poll_deadline(cx).map(Err),
        }
    }
}

impl AsyncWrite for TimedIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_cap_fits_the_descriptor_limit() {
        assert_eq!(fit_to_nofile(20_000, Some(1_048_576)), 20_000);
        assert_eq!(fit_to_nofile(20_000, Some(20_000)), 20_000 - 256);
        assert_eq!(fit_to_nofile(20_000, Some(1024)), 768);
        assert_eq!(fit_to_nofile(20_000, Some(100)), 1);
        assert_eq!(fit_to_nofile(20_000, None), 20_000);
    }
}
