//! The InfluxDB writer task: gathers encoded lines from all agent streams, posts them in requests
//! of at most `batch_lines` lines (flushed at least every `flush_interval`), gzip-compressed, and
//! completes each job only when every one of its lines is either stored or in the dead-letter
//! store, telling the job which lines were refused and why. Network errors, 5xx, 429 and auth
//! failures are retried with capped exponential backoff and jitter (never dropped); 404 "database
//! not found" creates the database; 413 splits the request. A 400 (malformed line, field type
//! conflict, `partial write`) names only some of the lines it refused (influxd 1.6 reports the first
//! type conflict only, and hides parse errors behind a conflict): the lines it names are
//! dead-lettered and the rest is written again (idempotent: same points, same timestamps); when it
//! names none, the request is halved until each refused line stands alone. A refused line is never
//! retried unchanged (`docs/conventions.md` §3). To support another store that speaks line
//! protocol, add an `InfluxApi` variant and its URL/auth in `Endpoint`.

use crate::sinks::influx::config::{InfluxApi, InfluxConfig};
use crate::sinks::influx::dead_letter::{class_of, DeadLetterStore};
pub use crate::sinks::influx::observer::StoredLines;
pub use crate::sinks::influx::refusal::{error_text, offending_indices, offending_lines, Offending};
use crate::sinks::influx::refusal::{reason_for, SHOWN_CHARS, SHOWN_LINES};
use std::collections::VecDeque;
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use wattflip_infra::Backoff;

/// Counters of the sink, shared with whoever reports self-telemetry.
#[derive(Debug, Default)]
pub struct SinkStats {
    pub lines_written: AtomicU64,
    /// Lines InfluxDB refused (all of them are in the dead-letter store).
    pub lines_rejected: AtomicU64,
    /// The same lines by class (`type_conflict`, `parse_error`, `refused`).
    pub lines_dead_lettered: wattflip_infra::telemetry::LabelledCounter,
    pub requests: AtomicU64,
    pub retries: AtomicU64,
    pub databases_created: AtomicU64,
    /// Duration of each write request, successful or not.
    pub write_latency: wattflip_infra::telemetry::Histogram,
}

struct Job {
    lines: Vec<String>,
    written: usize,
    refused: Vec<(usize, &'static str)>,
    done: Option<oneshot::Sender<JobOutcome>>,
}

/// What became of a job's lines: all are stored but `refused`, which are in the dead-letter store.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobOutcome {
    /// Index of each refused line in the job, and its class (`type_conflict`, `parse_error`, `refused`).
    pub refused: Vec<(usize, &'static str)>,
}

/// Handle used by streams to queue lines.
#[derive(Clone)]
pub struct WriterHandle {
    /// None: the null sink, which counts the lines and completes at once (benchmarks).
    tx: Option<mpsc::Sender<Job>>,
    stats: Arc<SinkStats>,
}

#[derive(Debug, thiserror::Error)]
#[error("the InfluxDB writer has stopped (collector shutting down)")]
pub struct WriterClosed;

impl WriterHandle {
    /// Queues `lines` (each ending in `\n`). The receiver completes when all are durable; it is
    /// dropped without completing if the collector stops first, so the batch is never acknowledged.
    /// Waits when the writer is saturated, which is the back-pressure that reaches the agents.
    pub async fn write(&self, lines: Vec<String>) -> Result<oneshot::Receiver<JobOutcome>, WriterClosed> {
        let (done, rx) = oneshot::channel();
        let Some(tx) = self.tx.as_ref().filter(|_| !lines.is_empty()) else {
            self.stats.lines_written.fetch_add(lines.len() as u64, Ordering::Relaxed);
            let _ = done.send(JobOutcome::default());
            return Ok(rx);
        };
        tx.send(Job { lines, written: 0, refused: Vec::new(), done: Some(done) }).await.map_err(|_| WriterClosed)?;
        Ok(rx)
    }
}

/// Starts the writer. It ends when every handle is dropped and the queue is flushed, or at once
/// when `shutdown` turns true (pending jobs are then left unacknowledged, to be resent by agents).
pub fn spawn(cfg: InfluxConfig, stats: Arc<SinkStats>, shutdown: watch::Receiver<bool>) -> (WriterHandle, tokio::task::JoinHandle<()>) {
    spawn_observed(cfg, stats, shutdown, None)
}

/// [`spawn`], telling `observer` of every line stored.
pub fn spawn_observed(
    cfg: InfluxConfig,
    stats: Arc<SinkStats>,
    shutdown: watch::Receiver<bool>,
    observer: Option<Arc<dyn StoredLines>>,
) -> (WriterHandle, tokio::task::JoinHandle<()>) {
    let dead = Arc::new(DeadLetterStore::new(cfg.dead_letter_dir.clone()));
    let (tx, rx) = mpsc::channel(256);
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    let client = reqwest::Client::builder().timeout(cfg.request_timeout).build().unwrap_or_else(|_| reqwest::Client::new());
    let handle = WriterHandle { tx: Some(tx), stats: stats.clone() };
    // `writers` tasks share the queue: one gathers the next request while another's is in flight.
    let tasks: Vec<_> = (0..cfg.writers.max(1))
        .map(|_| {
            let endpoint = Endpoint { cfg: cfg.clone(), client: client.clone() };
            let (rx, dead, observer) = (rx.clone(), dead.clone(), observer.clone());
            let writer = Writer { endpoint, stats: stats.clone(), rx, shutdown: shutdown.clone(), pending: VecDeque::new(), dead, observer };
            tokio::spawn(writer.run())
        })
        .collect();
    let all = tokio::spawn(async move {
        for t in tasks {
            let _ = t.await;
        }
    });
    (handle, all)
}

/// A sink that discards every line and completes at once: measures the gRPC side alone.
pub fn spawn_null(stats: Arc<SinkStats>) -> (WriterHandle, tokio::task::JoinHandle<()>) {
    (WriterHandle { tx: None, stats }, tokio::spawn(async {}))
}

struct Endpoint {
    cfg: InfluxConfig,
    client: reqwest::Client,
}

enum PostError {
    /// Worth retrying after a pause (network, 5xx, 429, 401/403, 404 after creation failed).
    Retry { reason: String, after: Option<Duration> },
    /// The database is missing: create it, then retry at once.
    NoDatabase,
    /// The body is larger than the server accepts: split it.
    TooLarge,
    /// Bad data (400): InfluxDB's answer, which names some of the lines it refused.
    Rejected { body: String },
}

/// `piece` split into the lines at the indices `named` (ascending) and the others, each in order.
fn split_named(piece: Tagged, named: &[usize]) -> (Tagged, Tagged) {
    let (mut bad, mut rest) = (Vec::with_capacity(named.len()), Vec::with_capacity(piece.len() - named.len()));
    let mut next = named.iter().peekable();
    for (k, item) in piece.into_iter().enumerate() {
        if next.next_if(|&&i| i == k).is_some() {
            bad.push(item);
        } else {
            rest.push(item);
        }
    }
    (bad, rest)
}

impl Endpoint {
    fn write_request(&self, body: Vec<u8>) -> reqwest::RequestBuilder {
        let c = &self.cfg;
        let mut req = match c.api {
            // 1.x spells nanosecond precision `n`; `ns` is also accepted, `us` is silently wrong.
            // With retention the policy is named: a missing one fails the write (and is created).
            InfluxApi::V1 => self.client.post(format!("{}/write", c.url)).query(&[("db", c.database.as_str()), ("precision", "n")]).query(&c.raw_rp()),
            InfluxApi::V2 => {
                self.client.post(format!("{}/api/v2/write", c.url)).query(&[("org", c.org.as_str()), ("bucket", c.bucket.as_str()), ("precision", "ns")])
            }
        };
        req = self.auth(req);
        if c.gzip {
            req = req.header("Content-Encoding", "gzip");
        }
        req.header("Content-Type", "text/plain; charset=utf-8").body(body)
    }

    fn auth(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let c = &self.cfg;
        match (&c.api, &c.secret) {
            (InfluxApi::V2, Some(t)) => req.header("Authorization", format!("Token {}", t.0)),
            (InfluxApi::V1, Some(p)) if !c.username.is_empty() => req.basic_auth(&c.username, Some(&p.0)),
            _ => req,
        }
    }

    fn encode(&self, lines: &[&str]) -> Vec<u8> {
        let plain: String = lines.concat();
        if !self.cfg.gzip {
            return plain.into_bytes();
        }
        let mut enc = flate2::write::GzEncoder::new(Vec::with_capacity(plain.len() / 4), flate2::Compression::fast());
        // Writing to a Vec cannot fail.
        let _ = enc.write_all(plain.as_bytes());
        enc.finish().unwrap_or_default()
    }

    async fn post(&self, lines: &[&str]) -> Result<(), PostError> {
        let resp = self
            .write_request(self.encode(lines))
            .send()
            .await
            .map_err(|e| PostError::Retry { reason: format!("cannot reach InfluxDB at {}: {}", self.cfg.url, without_url(e)), after: None })?;
        let status = resp.status();
        if status.is_success() {
            return Ok(());
        }
        let retry_after = resp.headers().get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<u64>().ok()).map(Duration::from_secs);
        let body = resp.text().await.unwrap_or_default();
        let body = body.trim();
        match status.as_u16() {
            400 | 422 => Err(PostError::Rejected { body: body.to_string() }),
            404 if body.contains("database not found") => Err(PostError::NoDatabase),
            404 | 500 if body.contains("retention policy not found") => Err(PostError::NoDatabase),
            413 => Err(PostError::TooLarge),
            s => Err(PostError::Retry { reason: format!("InfluxDB answered {s}: {body}"), after: retry_after }),
        }
    }

    /// Creates the database, and with `retention` set its retention policies.
    async fn create_database(&self) -> Result<(), String> {
        let c = &self.cfg;
        for (q, may_fail) in c.setup_statements() {
            let req = self.auth(self.client.post(format!("{}/query", c.url)).query(&[("q", q.as_str())]));
            let resp = req.send().await.map_err(without_url)?;
            let status = resp.status();
            let body = resp.text().await.unwrap_or_default();
            let failed = !status.is_success() || body.contains("\"error\"");
            if failed && !may_fail {
                return Err(format!("InfluxDB answered {status} to {q}: {}", body.trim()));
            }
        }
        Ok(())
    }
}

/// reqwest errors print the URL; ours carry no credentials, but keep messages short and stable.
pub(crate) fn without_url(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut s = e.to_string();
    let mut src = std::error::Error::source(&e);
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

struct Writer {
    endpoint: Endpoint,
    stats: Arc<SinkStats>,
    /// Shared by the writers; held only while one gathers its next request.
    rx: Arc<tokio::sync::Mutex<mpsc::Receiver<Job>>>,
    shutdown: watch::Receiver<bool>,
    pending: VecDeque<Job>,
    dead: Arc<DeadLetterStore>,
    observer: Option<Arc<dyn StoredLines>>,
}

/// Where a line being written came from: its job (index in `pending`) and its index in that job.
type Origin = (usize, usize);
/// Lines, each with its origin.
type Tagged = Vec<(Origin, String)>;

impl Writer {
    fn unwritten(&self) -> usize {
        self.pending.iter().map(|j| j.lines.len() - j.written).sum()
    }

    async fn run(mut self) {
        let queue = self.rx.clone();
        let mut closed = false;
        while !closed {
            let mut rx = tokio::select! {
                rx = queue.lock() => rx,
                _ = self.shutdown.changed() => break,
            };
            if self.pending.is_empty() {
                tokio::select! {
                    job = rx.recv() => match job {
                        Some(j) => self.pending.push_back(j),
                        None => break,
                    },
                    _ = self.shutdown.changed() => break,
                }
            }
            closed = self.gather(&mut rx).await;
            drop(rx);
            if !self.flush().await {
                break;
            }
        }
    }

    /// Takes jobs until a request is full or `flush_interval` has passed; true when the queue closed.
    async fn gather(&mut self, rx: &mut mpsc::Receiver<Job>) -> bool {
        let batch = self.endpoint.cfg.batch_lines;
        let deadline = Instant::now() + self.endpoint.cfg.flush_interval;
        while self.unwritten() < batch {
            tokio::select! {
                job = rx.recv() => match job {
                    Some(j) => self.pending.push_back(j),
                    None => return true,
                },
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
        false
    }

    /// Writes everything pending; false when shutdown interrupted it.
    async fn flush(&mut self) -> bool {
        let batch = self.endpoint.cfg.batch_lines;
        while !self.pending.is_empty() {
            // Take up to `batch` lines across jobs, in order.
            let mut chunk: Vec<(usize, usize, usize)> = Vec::new(); // (job index, from, to)
            let mut n = 0;
            for (i, j) in self.pending.iter().enumerate() {
                if n >= batch {
                    break;
                }
                let take = (j.lines.len() - j.written).min(batch - n);
                chunk.push((i, j.written, j.written + take));
                n += take;
            }
            // Moved out, not cloned: a job's lines are not read again once taken (on shutdown the
            // job is dropped unacknowledged and the agent resends it).
            let mut lines: Vec<(Origin, String)> = Vec::with_capacity(n);
            for &(i, a, b) in &chunk {
                lines.extend((a..b).map(|k| ((i, k), std::mem::take(&mut self.pending[i].lines[k]))));
            }
            let Some(refused) = self.write_with_retry(lines).await else { return false };
            for ((i, k), class) in refused {
                self.pending[i].refused.push((k, class));
            }
            for &(i, _, b) in &chunk {
                self.pending[i].written = b;
            }
            while self.pending.front().is_some_and(|j| j.written == j.lines.len()) {
                if let Some(mut j) = self.pending.pop_front() {
                    if let Some(done) = j.done.take() {
                        j.refused.sort_unstable();
                        let _ = done.send(JobOutcome { refused: j.refused });
                    }
                }
            }
        }
        true
    }

    /// Keeps `bad` in the dead-letter store; on success records them as refused. False (and
    /// nothing recorded) when the store cannot take them.
    fn dead_letter(&self, bad: &[(Origin, String)], err: &str, refused: &mut Vec<(Origin, &'static str)>) -> bool {
        let entries: Vec<_> = bad
            .iter()
            .map(|(_, l)| {
                let line = l.trim_end_matches('\n');
                let reason = reason_for(err, line);
                DeadLetterStore::entry(class_of(&reason), &reason, line)
            })
            .collect();
        match self.dead.append(&entries) {
            Ok(file) => {
                self.stats.lines_rejected.fetch_add(bad.len() as u64, Ordering::Relaxed);
                for ((origin, _), e) in bad.iter().zip(&entries) {
                    let class = class_of(&e.reason);
                    self.stats.lines_dead_lettered.inc(class);
                    refused.push((*origin, class));
                }
                let shown: Vec<String> = entries.iter().take(SHOWN_LINES).map(|e| e.line.chars().take(SHOWN_CHARS).collect()).collect();
                tracing::error!(
                    rejected_lines = bad.len(),
                    file = %file.display(),
                    "InfluxDB refused data, kept in the dead-letter store (fix the cause, then `wattflip-collector dead-letter replay`): {err}; first: {}",
                    shown.join(" | ")
                );
                true
            }
            Err(e) => {
                // Nothing refused may vanish: the lines stay unacknowledged and are tried again.
                tracing::error!("{e}; InfluxDB refused {} line(s), which stay unacknowledged until they can be kept", bad.len());
                false
            }
        }
    }

    /// Posts one piece, counting the request and its latency; when it is stored, counts its
    /// lines and tells the observer.
    async fn post_piece(&self, refs: &[&str]) -> Result<(), PostError> {
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let result = self.endpoint.post(refs).await;
        self.stats.write_latency.observe(started.elapsed());
        if result.is_ok() {
            self.stats.lines_written.fetch_add(refs.len() as u64, Ordering::Relaxed);
            if let Some(o) = &self.observer {
                o.stored(refs);
            }
        }
        result
    }

    /// Posts `lines` until each is stored or dead-lettered; returns the dead-lettered ones, None on
    /// shutdown.
    async fn write_with_retry(&mut self, lines: Vec<(Origin, String)>) -> Option<Vec<(Origin, &'static str)>> {
        // A stack of pieces: a 413, or a 400 that names no line, splits a piece in two.
        let mut pieces: Vec<Vec<(Origin, String)>> = vec![lines];
        let mut refused = Vec::new();
        // 100 ms doubling up to `influx.max_backoff` (a lower max caps the first step too).
        let cap = self.endpoint.cfg.max_backoff;
        let mut backoff = Backoff::new(Duration::from_millis(100).min(cap), cap);
        while let Some(piece) = pieces.pop() {
            if piece.is_empty() {
                continue;
            }
            let refs: Vec<&str> = piece.iter().map(|(_, l)| l.as_str()).collect();
            match self.post_piece(&refs).await {
                Ok(()) => backoff.reset(),
                Err(PostError::Rejected { body }) => {
                    backoff.reset();
                    let named = if piece.len() == 1 { vec![0] } else { offending_indices(&body, &refs) };
                    if named.is_empty() {
                        // Nothing to go by: halve until each refused line stands alone.
                        let mut a = piece;
                        let b = a.split_off(a.len() / 2);
                        pieces.push(b);
                        pieces.push(a);
                        continue;
                    }
                    let (mut bad, mut rest) = split_named(piece, &named);
                    if self.dead_letter(&bad, &error_text(&body), &mut refused) {
                        // The answer may not name every refused line: write the others again.
                        pieces.push(rest);
                    } else {
                        rest.append(&mut bad);
                        pieces.push(rest);
                        if !self.pause(&mut backoff, None).await {
                            return None;
                        }
                    }
                }
                Err(PostError::TooLarge) if piece.len() > 1 => {
                    let mut a = piece;
                    let b = a.split_off(a.len() / 2);
                    tracing::warn!("InfluxDB said 413 (body too large): splitting into {} + {} lines", a.len(), b.len());
                    pieces.push(b);
                    pieces.push(a);
                }
                Err(PostError::TooLarge) => {
                    let err = "InfluxDB refused a single line as too large (413); raise its max-body-size, then replay";
                    if !self.dead_letter(&piece, err, &mut refused) {
                        pieces.push(piece);
                        if !self.pause(&mut backoff, None).await {
                            return None;
                        }
                    }
                }
                Err(PostError::NoDatabase) => {
                    if !self.create_database(&mut backoff).await {
                        return None;
                    }
                    pieces.push(piece);
                }
                Err(PostError::Retry { reason, after }) => {
                    self.stats.retries.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(attempt = backoff.attempt(), "InfluxDB write failed, will retry: {reason}");
                    pieces.push(piece);
                    if !self.pause(&mut backoff, after).await {
                        return None;
                    }
                }
            }
        }
        Some(refused)
    }

    /// Creates the database InfluxDB said is missing; when it cannot, waits the next backoff
    /// delay. False on shutdown.
    async fn create_database(&mut self, backoff: &mut Backoff) -> bool {
        match self.endpoint.create_database().await {
            Ok(()) => {
                self.stats.databases_created.fetch_add(1, Ordering::Relaxed);
                tracing::info!(database = %self.endpoint.cfg.database, "created the InfluxDB database");
                true
            }
            Err(e) => {
                tracing::warn!("cannot create database {}: {e}", self.endpoint.cfg.database);
                self.pause(backoff, None).await
            }
        }
    }

    /// Sleeps the next backoff delay (jittered), or InfluxDB's Retry-After (capped); false on
    /// shutdown.
    async fn pause(&mut self, backoff: &mut Backoff, retry_after: Option<Duration>) -> bool {
        let wait = backoff.next_delay_or(retry_after);
        tokio::select! {
            _ = tokio::time::sleep(wait) => true,
            _ = self.shutdown.changed() => false,
        }
    }
}
