//! The HTTP/1 accept loop of ingest and the dashboard, with the bounds axum's `serve`
//! does not have: deadlines on everything a client controls, a cap on pipelined requests,
//! and a cap on open connections that a stalled client cannot hold.
//!
//! Each connection's socket is wrapped in [`TimedIo`], which knows from the request
//! service whether a request is being handled, and so which deadline applies:
//! - waiting for a request with no byte of it yet: `keep_alive_timeout` (idle);
//! - from the first byte of a request head until the head is complete:
//!   `header_read_timeout`, counted from that first byte, so trickling a byte at a time
//!   does not extend it (slowloris);
//! - while a request is handled: none here; the handler bounds the body and its own work;
//! - writing: a write that makes no progress for `write_timeout` (a client that does not
//!   read its answers) closes the connection.
//!
//! A client that pipelines more than `max_pipelined` requests without once letting the
//! server wait for it has its connection closed after them: answers it does not read
//! would otherwise keep the connection (and the work) going for as long as it likes.
//!
//! hyper's own `header_read_timeout` starts when hyper *waits* for a head, so on a
//! kept-alive connection it also ends the idle time: one timer could not give a short
//! head deadline and a keep-alive longer than a load balancer's idle timeout.
//!
//! **At `max_connections`** a new connection is accepted all the same, and the connection
//! that has waited longest on its client (idle, trickling a head or a body, or not
//! reading its answers, for at least [`MIN_STALL`]) is closed to make room: one host
//! opening connections it never uses cannot keep the slots from clients that use them.
//! While no connection is stalled (every slot is working on a request), the new one
//! waits for a slot, holding one descriptor, and the search is repeated.

use axum::response::Response;
use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, Semaphore};
use tokio::time::{Instant, Sleep};

/// A connection stalled for less than this is not closed to make room: a client that has
/// just connected, or just sent half a head over a slow link, is not an attacker.
pub const MIN_STALL: Duration = Duration::from_millis(100);

/// The connection bounds of [`serve`].
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub header_read_timeout: Duration,
    pub keep_alive_timeout: Duration,
    /// A write that makes no progress for this long closes the connection.
    pub write_timeout: Duration,
    /// Requests answered back to back, without the server once waiting for the client,
    /// after which the connection is closed.
    pub max_pipelined: u32,
    pub max_connections: usize,
    /// The prefix of this listener's metrics (`<prefix>_open_connections`, …).
    pub metrics_prefix: &'static str,
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

/// The open connections, for choosing one to close when a new one needs its slot.
#[derive(Default)]
struct Connections {
    next_id: AtomicU64,
    open: Mutex<Vec<(u64, SharedState, Arc<Notify>)>>,
}

impl Connections {
    fn add(&self, shared: SharedState) -> (u64, Arc<Notify>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let evict = Arc::new(Notify::new());
        self.open
            .lock()
            .expect("connections lock")
            .push((id, shared, evict.clone()));
        (id, evict)
    }

    fn remove(&self, id: u64) {
        let mut open = self.open.lock().expect("connections lock");
        if let Some(i) = open.iter().position(|(c, _, _)| *c == id) {
            open.swap_remove(i);
        }
    }

    /// Closes the connection stalled longest on its client, if one has been for at least
    /// [`MIN_STALL`]. Returns whether one was told to close.
    fn evict_one(&self, now: Instant) -> bool {
        let open = self.open.lock().expect("connections lock");
        let victim = open
            .iter()
            .filter_map(|(_, shared, evict)| {
                let s = lock(shared);
                let since = s.stalled_since().filter(|_| !s.evicted)?;
                (now.saturating_duration_since(since) >= MIN_STALL)
                    .then_some((since, shared, evict))
            })
            .min_by_key(|(since, _, _)| *since);
        match victim {
            Some((_, shared, evict)) => {
                lock(shared).evicted = true;
                evict.notify_one();
                true
            }
            None => false,
        }
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
    H: Fn(hyper::Request<TrackedBody>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response> + Send + 'static,
{
    // u32: `acquire_many` below takes the whole count at once.
    let max = limits.max_connections.clamp(1, u32::MAX as usize);
    let slots = Arc::new(Semaphore::new(max));
    let connections = Arc::new(Connections::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.keep_alive(true);
    // hyper's read buffer grows to ~400 KB for a fast upload. Reading and discarding an
    // oversized body after its 413 then churned through buffers that large (docs/
    // decisions/003-connection-bounds.md); with 64 KiB RSS stayed flat. A request head
    // larger than this still gets hyper's 431.
    builder.max_buf_size(64 * 1024);
    let open_gauge = format!("{}_open_connections", limits.metrics_prefix);
    let evicted = format!("{}_connections_evicted_total", limits.metrics_prefix);
    loop {
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
        // At the cap: close the connection stalled longest, and look again while waiting,
        // since a connection working now may stall later.
        let permit = loop {
            if let Ok(permit) = slots.clone().try_acquire_owned() {
                break Some(permit);
            }
            if connections.evict_one(Instant::now()) {
                metrics::counter!(evicted.clone()).increment(1);
            }
            tokio::select! {
                () = &mut shutdown => break None,
                permit = slots.clone().acquire_owned() => break Some(permit.expect("the semaphore is never closed")),
                () = tokio::time::sleep(MIN_STALL / 2) => {}
            }
        };
        let Some(permit) = permit else { break };
        let _ = stream.set_nodelay(true);
        let shared = new_shared();
        let (id, evict) = connections.add(shared.clone());
        let io = TokioIo::new(TimedIo::new(stream, shared.clone(), limits));
        let handle = handle.clone();
        let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            let done = RequestGuard::begin(
                shared.clone(),
                limits.max_pipelined,
                req.body().is_end_stream(),
            );
            let req = req.map(|body| TrackedBody {
                inner: body,
                shared: shared.clone(),
            });
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
        let (open_gauge, connections) = (open_gauge.clone(), connections.clone());
        metrics::gauge!(open_gauge.clone()).increment(1.0);
        tokio::spawn(async move {
            let mut conn = std::pin::pin!(conn);
            let stopping = async move {
                let _ = stop.wait_for(|stop| *stop).await;
            };
            tokio::select! {
                res = conn.as_mut() => log_conn_end(res),
                () = evict.notified() => tracing::debug!("closed a stalled connection to make room"),
                () = stopping => {
                    conn.as_mut().graceful_shutdown();
                    log_conn_end(conn.await);
                }
            }
            connections.remove(id);
            metrics::gauge!(open_gauge).decrement(1.0);
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
    /// A request is being handled since this instant; `body_done` once its whole body has
    /// been received (until then the handler waits on the client).
    Busy { since: Instant, body_done: bool },
}

/// A connection's phase, and the task waiting to read while it was busy: when the
/// request ends, that task must poll the socket again to arm the idle deadline.
#[derive(Debug)]
struct Shared {
    phase: Phase,
    reader: Option<Waker>,
    /// Since when a write has been waiting for the client to read.
    write_blocked: Option<Instant>,
    /// Requests begun since the server last waited to read from the client.
    pipelined: u32,
    /// Past `max_pipelined`: reads fail, so the connection closes.
    closing: bool,
    /// Told to close to make room.
    evicted: bool,
}

impl Shared {
    /// Since when the connection has been waiting on its client, if it is: idle,
    /// receiving a head, or unable to write its answer.
    fn stalled_since(&self) -> Option<Instant> {
        let phase = match self.phase {
            Phase::Idle(since) | Phase::Head(since) => Some(since),
            Phase::Busy {
                since,
                body_done: false,
            } => Some(since),
            Phase::Busy {
                body_done: true, ..
            } => None,
        };
        match (phase, self.write_blocked) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

type SharedState = Arc<Mutex<Shared>>;

fn new_shared() -> SharedState {
    Arc::new(Mutex::new(Shared {
        phase: Phase::Idle(Instant::now()),
        reader: None,
        write_blocked: None,
        pipelined: 0,
        closing: false,
        evicted: false,
    }))
}

/// Marks its connection busy from a request's head until its response is ready.
struct RequestGuard(SharedState);

impl RequestGuard {
    fn begin(shared: SharedState, max_pipelined: u32, body_done: bool) -> Self {
        {
            let mut s = lock(&shared);
            s.phase = Phase::Busy {
                since: Instant::now(),
                body_done,
            };
            s.pipelined += 1;
            if s.pipelined > max_pipelined {
                s.closing = true;
            }
        }
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

/// A request's body as the handler reads it: hyper's, telling the connection once it has
/// all been received (so that a handler still waiting for it counts as waiting on the
/// client).
pub struct TrackedBody {
    inner: Incoming,
    shared: SharedState,
}

impl Body for TrackedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let frame = Pin::new(&mut this.inner).poll_frame(cx);
        if matches!(frame, Poll::Ready(None)) || this.inner.is_end_stream() {
            if let Phase::Busy { body_done, .. } = &mut lock(&this.shared).phase {
                *body_done = true;
            }
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A socket that fails reads with `TimedOut` once its phase's deadline has passed, and
/// writes once they have waited `write_timeout` for the client; either makes hyper close
/// the connection.
struct TimedIo {
    stream: TcpStream,
    shared: SharedState,
    limits: Limits,
    /// Armed only while a deadline applies; never later than the deadline, and possibly
    /// earlier (see `poll_deadline`).
    timer: Pin<Box<Sleep>>,
    /// The write deadline's timer, armed while a write waits.
    write_timer: Option<Pin<Box<Sleep>>>,
}

impl TimedIo {
    fn new(stream: TcpStream, shared: SharedState, limits: Limits) -> Self {
        TimedIo {
            stream,
            shared,
            limits,
            timer: Box::pin(tokio::time::sleep(limits.keep_alive_timeout)),
            write_timer: None,
        }
    }

    /// The deadline of the current phase; while busy there is none, and the waiting
    /// task is kept to be woken when the request ends.
    fn deadline(&self, cx: &Context<'_>) -> Option<Instant> {
        let mut shared = lock(&self.shared);
        match shared.phase {
            Phase::Idle(since) => Some(since + self.limits.keep_alive_timeout),
            Phase::Head(since) => Some(since + self.limits.header_read_timeout),
            Phase::Busy { .. } => {
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

    /// Called when a read would wait: the server now waits for its client, so pipelining
    /// starts over; `Ready` with an error once the deadline passed.
    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        lock(&self.shared).pipelined = 0;
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

    /// A write made progress, or is about to wait: tracks since when it has waited, and
    /// fails it once it has waited `write_timeout`.
    fn after_write<T>(
        &mut self,
        cx: &mut Context<'_>,
        r: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if !r.is_pending() {
            if self.write_timer.take().is_some() {
                lock(&self.shared).write_blocked = None;
            }
            return r;
        }
        let timer = self.write_timer.get_or_insert_with(|| {
            lock(&self.shared).write_blocked = Some(Instant::now());
            Box::pin(tokio::time::sleep(self.limits.write_timeout))
        });
        match timer.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client did not read its answers in time",
            ))),
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
        if lock(&this.shared).closing {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "too many pipelined requests",
            )));
        }
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
        let this = self.get_mut();
        let r = Pin::new(&mut this.stream).poll_write(cx, buf);
        this.after_write(cx, r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.after_write(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.stream).poll_flush(cx);
        this.after_write(cx, r)
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

    #[tokio::test(start_paused = true)]
    async fn the_longest_stalled_connection_is_evicted_never_a_busy_one() {
        let c = Connections::default();
        let busy = new_shared();
        lock(&busy).phase = Phase::Busy {
            since: Instant::now() - Duration::from_secs(60),
            body_done: true,
        };
        let (_, busy_evict) = c.add(busy);
        let t0 = Instant::now();
        let idle = new_shared();
        let (_, idle_evict) = c.add(idle.clone());
        tokio::time::advance(Duration::from_secs(5)).await;
        let unread = new_shared();
        {
            let mut s = lock(&unread);
            s.phase = Phase::Busy {
                since: Instant::now(),
                body_done: true,
            };
            s.write_blocked = Some(t0 - Duration::from_secs(1));
        }
        let (_, unread_evict) = c.add(unread);
        // The one that has waited longest on its client goes first: the unread answers.
        assert!(c.evict_one(Instant::now()));
        assert!(notified(&unread_evict));
        assert!(c.evict_one(Instant::now()));
        assert!(notified(&idle_evict));
        assert!(!notified(&busy_evict));
        // A connection stalled for less than MIN_STALL is left alone.
        let c = Connections::default();
        c.add(new_shared());
        assert!(!c.evict_one(Instant::now()));
    }

    /// Whether a `Notify` holds a permit (it was told).
    fn notified(n: &Notify) -> bool {
        let fut = n.notified();
        let mut fut = std::pin::pin!(fut);
        matches!(
            fut.as_mut().poll(&mut Context::from_waker(Waker::noop())),
            Poll::Ready(())
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_still_receiving_its_body_waits_on_its_client() {
        let c = Connections::default();
        let receiving = new_shared();
        let (_, evict) = c.add(receiving.clone());
        let _guard = RequestGuard::begin(receiving.clone(), 32, false);
        tokio::time::advance(MIN_STALL).await;
        assert!(c.evict_one(Instant::now()));
        assert!(notified(&evict));
    }

    #[test]
    fn pipelining_past_the_cap_closes() {
        let shared = new_shared();
        for _ in 0..3 {
            drop(RequestGuard::begin(shared.clone(), 3, true));
        }
        assert!(!lock(&shared).closing);
        drop(RequestGuard::begin(shared.clone(), 3, true));
        assert!(lock(&shared).closing);
    }
}
