//! The collector's connections: at most `limits.max_connections` at once (below the open-file
//! limit, so `accept` never fails for want of a descriptor), and none idle for long. A connection
//! that has no Ingest stream open is closed once it has been so for `limits.hello_timeout` (after
//! its handshake, or after its last stream ended): a client that finishes TLS and then sends
//! nothing, or answers HTTP/2 pings and nothing else, holds a descriptor for seconds, not forever.
//! At the limit, the connection idle the longest makes room for the new one; with none idle, the
//! new one is refused. An evicted connection holds its descriptor until its task closes it, so
//! while more than [`CLOSING_MAX`] are still closing no new one is accepted (the kernel's listen
//! queue holds them): evictions in a burst of handshakes had run the process out of descriptors
//! ("accept failed: Too many open files" with 1,000 clients and 512 descriptors). Each closing and refusal is counted by reason (`agents_rejected`:
//! `connection_limit`, `idle_connection`, `idle_evicted`) and logged at WARN at most once per
//! [`WARN_EVERY`] per reason. To watch another per-connection condition, add it to [`Conn`] and
//! to `Guarded::expired`.

use crate::service::guard::LogGate;
use crate::service::stats::IngestStats;
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, Sleep};
use tonic::transport::server::Connected;

/// At most one WARN per reason in this interval (the counters count every one).
pub const WARN_EVERY: Duration = Duration::from_secs(10);

/// Evicted connections still holding their descriptors above which no new connection is
/// accepted: a quarter of the 64 descriptors the limit keeps apart from the connections
/// (`server.rs`), the rest for the sinks, the listeners and the logs.
pub const CLOSING_MAX: usize = 16;

/// One connection's state, shared by its IO wrapper and the streams opened on it.
#[derive(Debug)]
pub struct Conn {
    streams: AtomicUsize,
    /// Since when no stream has been open.
    idle_since: Mutex<Instant>,
    /// Set to make room for a new connection.
    evict: AtomicBool,
    /// The task reading the connection, woken to close it or re-arm its timer.
    waker: Mutex<Option<Waker>>,
}

impl Conn {
    fn wake(&self) {
        if let Some(w) = self.waker.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            w.wake_by_ref();
        }
    }

    /// When this connection is to be closed for idleness, if no stream is open.
    fn idle_deadline(&self, idle: Duration) -> Option<Instant> {
        (self.streams.load(Ordering::Acquire) == 0).then(|| *self.idle_since.lock().unwrap_or_else(|p| p.into_inner()) + idle)
    }
}

/// Every connection of the process, by peer address.
#[derive(Debug)]
pub struct Conns {
    open: Mutex<HashMap<SocketAddr, Arc<Conn>>>,
    limit: usize,
    idle: Duration,
    stats: Arc<IngestStats>,
    warn: Mutex<HashMap<&'static str, LogGate>>,
    /// Evicted connections whose descriptor is not closed yet.
    closing: AtomicUsize,
    /// Told when one of them is.
    closed: tokio::sync::Notify,
}

impl Conns {
    pub fn new(limit: usize, idle: Duration, stats: Arc<IngestStats>) -> Arc<Self> {
        Arc::new(Conns {
            open: Mutex::default(),
            limit: limit.max(1),
            idle,
            stats,
            warn: Mutex::default(),
            closing: AtomicUsize::new(0),
            closed: tokio::sync::Notify::new(),
        })
    }

    /// Connections open now.
    pub fn len(&self) -> usize {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Evicted connections still holding their descriptors.
    pub fn closing(&self) -> usize {
        self.closing.load(Ordering::Acquire)
    }

    /// Returns once fewer than [`CLOSING_MAX`] evicted connections are still closing (checked
    /// again every 100 ms, should a wake-up be missed).
    pub async fn room(&self) {
        while self.closing() >= CLOSING_MAX {
            let _ = tokio::time::timeout(Duration::from_millis(100), self.closed.notified()).await;
        }
    }

    fn refuse(&self, reason: &'static str, peer: SocketAddr, msg: &str) {
        self.stats.agents_rejected.inc(reason);
        let mut gates = self.warn.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(quiet) = gates.entry(reason).or_insert_with(|| LogGate::new(WARN_EVERY)).open(Instant::now()) {
            tracing::warn!(%peer, limit = self.limit, more_not_logged = quiet, "{msg}");
        }
    }

    /// Admits a new connection from `peer`, making room by closing the connection idle the
    /// longest when at the limit; None (refused, counted) when none is idle.
    pub fn admit(&self, peer: SocketAddr) -> Option<Arc<Conn>> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if open.len() >= self.limit {
            let victim = open
                .iter()
                .filter(|(_, c)| !c.evict.load(Ordering::Acquire) && c.waker.lock().unwrap_or_else(|p| p.into_inner()).is_some())
                .filter_map(|(a, c)| c.idle_deadline(self.idle).map(|d| (d, *a)))
                .min();
            let Some((_, addr)) = victim else {
                drop(open);
                self.refuse(
                    "connection_limit",
                    peer,
                    "refused a connection: the collector holds limits.max_connections, none of them idle; raise LimitNOFILE and limits.max_connections, or add a collector",
                );
                return None;
            };
            if let Some(c) = open.remove(&addr) {
                // Counted before the flag is seen: its Guarded's drop takes it off again.
                self.closing.fetch_add(1, Ordering::AcqRel);
                c.evict.store(true, Ordering::Release);
                c.wake();
            }
            drop(open);
            self.refuse("idle_evicted", addr, "closed the connection idle the longest (no stream open) to make room for a new one at limits.max_connections");
            open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        }
        let conn =
            Arc::new(Conn { streams: AtomicUsize::new(0), idle_since: Mutex::new(Instant::now()), evict: AtomicBool::new(false), waker: Mutex::new(None) });
        open.insert(peer, conn.clone());
        self.stats.connections_open.store(open.len() as u64, Ordering::Relaxed);
        Some(conn)
    }

    /// Forgets `conn` (its descriptor is closed).
    fn remove(&self, peer: SocketAddr, conn: &Arc<Conn>) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if open.get(&peer).is_some_and(|c| Arc::ptr_eq(c, conn)) {
            open.remove(&peer);
        }
        self.stats.connections_open.store(open.len() as u64, Ordering::Relaxed);
    }

    /// Marks a stream open on the connection from `peer` until the returned guard drops.
    pub fn stream(&self, peer: Option<SocketAddr>) -> Option<StreamOnConn> {
        let conn = self.open.lock().unwrap_or_else(|p| p.into_inner()).get(&peer?).cloned()?;
        conn.streams.fetch_add(1, Ordering::AcqRel);
        Some(StreamOnConn(conn))
    }
}

/// One stream open on a connection; the connection's idle clock starts when the last one drops.
#[derive(Debug)]
pub struct StreamOnConn(Arc<Conn>);

impl Drop for StreamOnConn {
    fn drop(&mut self) {
        *self.0.idle_since.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        if self.0.streams.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.wake();
        }
    }
}

/// A connection's IO: ends (EOF) when the connection is evicted or idle too long.
pub struct Guarded<IO> {
    io: IO,
    peer: SocketAddr,
    conn: Arc<Conn>,
    conns: Arc<Conns>,
    timer: Pin<Box<Sleep>>,
}

impl<IO> Guarded<IO> {
    pub fn new(io: IO, peer: SocketAddr, conn: Arc<Conn>, conns: Arc<Conns>) -> Self {
        let timer = Box::pin(tokio::time::sleep(conns.idle));
        Guarded { io, peer, conn, conns, timer }
    }

    /// Whether to close now; otherwise arms the timer for the idle deadline (when idle).
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        *self.conn.waker.lock().unwrap_or_else(|p| p.into_inner()) = Some(cx.waker().clone());
        if self.conn.evict.load(Ordering::Acquire) {
            return true;
        }
        let Some(deadline) = self.conn.idle_deadline(self.conns.idle) else { return false };
        if Instant::now() >= deadline {
            self.conns.refuse(
                "idle_connection",
                self.peer,
                "closed a connection with no Ingest stream open for limits.hello_timeout (a client that sends nothing after the handshake)",
            );
            return true;
        }
        self.timer.as_mut().reset(deadline);
        // Registers the waker with the timer; it is not due yet.
        let _ = self.timer.as_mut().poll(cx);
        false
    }
}

impl<IO> Drop for Guarded<IO> {
    fn drop(&mut self) {
        self.conns.remove(self.peer, &self.conn);
        // An evicted connection's descriptor closes with its IO, dropped right after this.
        if self.conn.evict.load(Ordering::Acquire) {
            self.conns.closing.fetch_sub(1, Ordering::AcqRel);
            self.conns.closed.notify_one();
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Guarded<IO> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let me = self.get_mut();
        if me.expired(cx) {
            // End of stream: the HTTP/2 connection ends as if the client had closed it.
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut me.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Guarded<IO> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[std::io::IoSlice<'_>]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

impl<IO: Connected> Connected for Guarded<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

/// Accepts TCP connections within the limit and hands each to `handshake` in a task of its own (a
/// slow or hostile client never holds up the others); yields the connections it completes.
pub fn accept<IO, F, Fut>(listener: TcpListener, conns: Arc<Conns>, handshake: F) -> tokio_stream::wrappers::ReceiverStream<Result<Guarded<IO>, std::io::Error>>
where
    IO: Send + 'static,
    F: Fn(TcpStream, SocketAddr) -> Fut + Send + 'static,
    Fut: Future<Output = Option<IO>> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        let mut failed = LogGate::new(WARN_EVERY);
        loop {
            conns.room().await;
            let (tcp, peer) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    // EMFILE and friends (descriptors held outside the limit): pause, not spin.
                    if let Some(quiet) = failed.open(Instant::now()) {
                        tracing::warn!(more_not_logged = quiet, "accept failed: {e}");
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            if tx.is_closed() {
                return;
            }
            // Refused: the socket is closed when `tcp` drops here.
            let Some(conn) = conns.admit(peer) else { continue };
            let (tx, conns, done) = (tx.clone(), conns.clone(), handshake(tcp, peer));
            tokio::spawn(async move {
                match done.await {
                    Some(io) => {
                        let _ = tx.send(Ok(Guarded::new(io, peer, conn, conns))).await;
                    }
                    None => conns.remove(peer, &conn),
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

#[cfg(test)]
mod tests;
