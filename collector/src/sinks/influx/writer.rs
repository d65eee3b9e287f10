//! The InfluxDB writer task: gathers encoded lines from all agent streams, posts them in requests
//! of at most `batch_lines` lines (flushed at least every `flush_interval`), gzip-compressed, and
//! completes each job only when every one of its lines is either stored or in the dead-letter
//! store, telling the job which lines were refused and why. Network errors, 5xx, 429 and auth
//! failures are retried with capped exponential backoff and jitter (never dropped); 404 "database
//! not found" creates the database; 413 splits the request. A 400 (malformed line, field type
//! conflict, `partial write`) names only some of the lines it refused (influxd 1.6 reports the first
//! type conflict only, and hides parse errors behind a conflict): the lines it names are
//! dead-lettered and the rest is written again (idempotent: same points, same timestamps); a
//! partial write that names none (`dropped=N`: past `max-values-per-tag`, beyond the retention
//! policy) is read by `partial.rs`; only an answer neither explains halves the request until each
//! refused line stands alone. A refused line is never retried unchanged (`docs/conventions.md` §3).
//!
//! **Agents are isolated** (docs/deployment.md, *One agent's refusals*): every job has an owner (its
//! agent), and a refused request that mixes owners is first split by owner, so a bystander's lines
//! are stored by their own request; an owner refused in the last [`SUSPECT_FOR`] gets requests of
//! its own from the start, posted after everyone else's; and a job is completed as soon as its own
//! lines are stored, not when the whole request is. The request and the store's answers are in
//! `endpoint.rs`.

use crate::sinks::influx::config::InfluxConfig;
use crate::sinks::influx::dead_letter::{class_of, DeadLetterStore};
pub(crate) use crate::sinks::influx::endpoint::without_url;
use crate::sinks::influx::endpoint::{Endpoint, PostError};
pub use crate::sinks::influx::observer::StoredLines;
use crate::sinks::influx::partial::{oldest, tag_value, Partial};
pub use crate::sinks::influx::refusal::{error_text, offending_indices, offending_lines, Offending};
use crate::sinks::influx::refusal::{reason_for, SHOWN_CHARS, SHOWN_LINES};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
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
    /// Refused requests split by owner so that one agent's refusal does not hold up the others.
    pub isolations: AtomicU64,
    /// Partial writes whose dropped lines were found without splitting the request.
    pub partial_writes_understood: AtomicU64,
    /// Whether InfluxDB answers (the sink's readiness).
    pub readiness: crate::sinks::readiness::Readiness,
}

/// An owner refused within this long gets requests of its own, after everyone else's.
pub const SUSPECT_FOR: Duration = Duration::from_secs(60);
/// Owners remembered as refused at most (a refusing fleet this large is forgotten at once).
const MAX_SUSPECTS: usize = 10_000;

struct Job {
    /// Whose lines these are (an agent id; empty for the collector's own).
    owner: Arc<str>,
    lines: Vec<String>,
    written: usize,
    /// Lines stored or dead-lettered; the job is completed when all are.
    resolved: usize,
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
    /// The quarantine lane: the jobs of owners refused lately, written by a writer of their own.
    quarantine: Option<mpsc::Sender<Job>>,
    suspects: Suspects,
    stats: Arc<SinkStats>,
}

/// Owners refused lately, and when (shared by the writers and the handles).
type Suspects = Arc<Mutex<HashMap<Arc<str>, Instant>>>;

/// Whether `owner` was refused within [`SUSPECT_FOR`].
fn suspected(s: &Suspects, owner: &str) -> bool {
    !owner.is_empty() && s.lock().unwrap_or_else(|p| p.into_inner()).get(owner).is_some_and(|at| at.elapsed() < SUSPECT_FOR)
}

#[derive(Debug, thiserror::Error)]
#[error("the InfluxDB writer has stopped (collector shutting down)")]
pub struct WriterClosed;

impl WriterHandle {
    /// Queues `lines` (each ending in `\n`). The receiver completes when all are durable; it is
    /// dropped without completing if the collector stops first, so the batch is never acknowledged.
    /// Waits when the writer is saturated, which is the back-pressure that reaches the agents.
    pub async fn write(&self, lines: Vec<String>) -> Result<oneshot::Receiver<JobOutcome>, WriterClosed> {
        self.write_as(Arc::from(""), lines).await
    }

    /// [`WriterHandle::write`] of `owner`'s lines: a refusal of them never holds up another owner's.
    pub async fn write_as(&self, owner: Arc<str>, lines: Vec<String>) -> Result<oneshot::Receiver<JobOutcome>, WriterClosed> {
        let (done, rx) = oneshot::channel();
        let Some(tx) = self.tx.as_ref().filter(|_| !lines.is_empty()) else {
            self.stats.lines_written.fetch_add(lines.len() as u64, Ordering::Relaxed);
            let _ = done.send(JobOutcome::default());
            return Ok(rx);
        };
        let tx = match &self.quarantine {
            Some(q) if suspected(&self.suspects, &owner) => q,
            _ => tx,
        };
        tx.send(Job { owner, lines, written: 0, resolved: 0, refused: Vec::new(), done: Some(done) }).await.map_err(|_| WriterClosed)?;
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
    let (qtx, qrx) = mpsc::channel(256);
    let suspects: Suspects = Arc::default();
    let handle = WriterHandle { tx: Some(tx), quarantine: Some(qtx.clone()), suspects: suspects.clone(), stats: stats.clone() };
    // `writers` tasks share the queue: one gathers the next request while another's is in flight.
    // One more writes the quarantine lane, so refused owners never occupy the others.
    let lanes: Vec<_> = (0..cfg.writers.max(1)).map(|_| (rx.clone(), Some(qtx.clone()))).chain([(Arc::new(tokio::sync::Mutex::new(qrx)), None)]).collect();
    drop(qtx);
    let tasks: Vec<_> = lanes
        .into_iter()
        .map(|(rx, divert)| {
            let endpoint = Endpoint { cfg: cfg.clone(), client: client.clone() };
            let (dead, observer, suspects) = (dead.clone(), observer.clone(), suspects.clone());
            let pending = VecDeque::new();
            let writer = Writer { endpoint, stats: stats.clone(), rx, shutdown: shutdown.clone(), pending, dead, observer, suspects, divert };
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
    (WriterHandle { tx: None, quarantine: None, suspects: Arc::default(), stats }, tokio::spawn(async {}))
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

struct Writer {
    endpoint: Endpoint,
    stats: Arc<SinkStats>,
    /// Shared by the writers; held only while one gathers its next request.
    rx: Arc<tokio::sync::Mutex<mpsc::Receiver<Job>>>,
    shutdown: watch::Receiver<bool>,
    pending: VecDeque<Job>,
    dead: Arc<DeadLetterStore>,
    observer: Option<Arc<dyn StoredLines>>,
    /// Owners refused lately, and when (shared by the writers).
    suspects: Suspects,
    /// The quarantine lane, where this writer sends the jobs of owners refused lately (None: this
    /// is the quarantine lane's writer).
    divert: Option<mpsc::Sender<Job>>,
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
                        Some(j) => self.take(j),
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

    /// Queues `job` here, or on the quarantine lane when its owner was refused lately (kept here
    /// when that lane is full: the agent's stream is held up, never the other writers).
    fn take(&mut self, job: Job) {
        let job = match &self.divert {
            Some(q) if suspected(&self.suspects, &job.owner) => match q.try_send(job) {
                Ok(()) => return,
                Err(e) => e.into_inner(),
            },
            _ => job,
        };
        self.pending.push_back(job);
    }

    /// Takes jobs until a request is full or `flush_interval` has passed; true when the queue closed.
    async fn gather(&mut self, rx: &mut mpsc::Receiver<Job>) -> bool {
        let batch = self.endpoint.cfg.batch_lines;
        let deadline = Instant::now() + self.endpoint.cfg.flush_interval;
        while self.unwritten() < batch {
            tokio::select! {
                job = rx.recv() => match job {
                    Some(j) => self.take(j),
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
            let pieces = self.apart_from_suspects(lines);
            if !self.write_with_retry(pieces).await {
                return false;
            }
            for &(i, _, b) in &chunk {
                self.pending[i].written = b;
            }
            while self.pending.front().is_some_and(|j| j.written == j.lines.len()) {
                self.pending.pop_front();
            }
        }
        true
    }

    /// The pieces to post, in posting order reversed (a stack): each owner refused lately alone,
    /// then everyone else's lines together (posted first).
    fn apart_from_suspects(&self, lines: Tagged) -> Vec<Tagged> {
        let now = Instant::now();
        let suspect: HashSet<Arc<str>> = {
            let mut m = self.suspects.lock().unwrap_or_else(|p| p.into_inner());
            m.retain(|_, at| now.duration_since(*at) < SUSPECT_FOR);
            if m.is_empty() {
                return vec![lines];
            }
            m.keys().cloned().collect()
        };
        let (apart, clean): (Tagged, Tagged) = lines.into_iter().partition(|((i, _), _)| suspect.contains(&self.pending[*i].owner));
        let mut pieces = self.by_owner(apart);
        pieces.push(clean);
        pieces
    }

    /// `piece` split by the owner of its lines, each owner's in order.
    fn by_owner(&self, piece: Tagged) -> Vec<Tagged> {
        let mut index: HashMap<&str, usize> = HashMap::new();
        let mut out: Vec<Tagged> = Vec::new();
        for item in piece {
            let owner: &str = &self.pending[item.0 .0].owner;
            let k = *index.entry(owner).or_insert_with(|| {
                out.push(Vec::new());
                out.len() - 1
            });
            out[k].push(item);
        }
        out
    }

    /// Remembers `owner` as refused now.
    fn suspect(&self, owner: &Arc<str>) {
        let mut m = self.suspects.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() >= MAX_SUSPECTS && !m.contains_key(owner) {
            m.clear();
        }
        m.insert(owner.clone(), Instant::now());
    }

    /// Counts lines as stored or dead-lettered; a job whose lines all are is completed now.
    fn resolve(&mut self, origins: impl Iterator<Item = Origin>) {
        for (i, _) in origins {
            let j = &mut self.pending[i];
            j.resolved += 1;
            if j.resolved == j.lines.len() {
                if let Some(done) = j.done.take() {
                    let mut refused = std::mem::take(&mut j.refused);
                    refused.sort_unstable();
                    let _ = done.send(JobOutcome { refused });
                }
            }
        }
    }

    /// Keeps `bad` in the dead-letter store; on success records them as refused in their jobs.
    /// False (and nothing recorded) when the store cannot take them.
    fn dead_letter(&mut self, bad: &[(Origin, String)], err: &str) -> bool {
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
                    self.pending[origin.0].refused.push((origin.1, class));
                }
                self.resolve(bad.iter().map(|(o, _)| *o));
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

    /// The lines of a one-owner piece that a partial write naming none dropped (`partial.rs`);
    /// empty when the answer does not say, or its count disagrees.
    async fn dropped_lines(&self, err: &str, refs: &[&str]) -> Vec<usize> {
        let found = match Partial::parse(err) {
            Some(Partial::Retention { dropped }) => oldest(refs, dropped),
            Some(Partial::MaxValues { measurement, tag, dropped }) => {
                let values: Vec<Option<String>> = refs.iter().map(|l| tag_value(l, &measurement, &tag)).collect();
                let asked: HashSet<String> = values.iter().flatten().cloned().collect();
                match self.endpoint.held_values(&measurement, &tag, &asked).await {
                    Ok(held) => {
                        let new: Vec<usize> = (0..refs.len()).filter(|&i| values[i].as_ref().is_some_and(|v| !held.contains(v))).collect();
                        (new.len() == dropped).then_some(new)
                    }
                    Err(e) => {
                        tracing::warn!("cannot tell which lines InfluxDB dropped ({e}); splitting the request instead");
                        None
                    }
                }
            }
            None => None,
        };
        if found.is_some() {
            self.stats.partial_writes_understood.fetch_add(1, Ordering::Relaxed);
        }
        found.unwrap_or_default()
    }

    /// Posts `pieces` (a stack: the last first) until each line is stored or dead-lettered; false
    /// on shutdown.
    async fn write_with_retry(&mut self, mut pieces: Vec<Tagged>) -> bool {
        // 100 ms doubling up to `influx.max_backoff` (a lower max caps the first step too).
        let cap = self.endpoint.cfg.max_backoff;
        let mut backoff = Backoff::new(Duration::from_millis(100).min(cap), cap);
        while let Some(piece) = pieces.pop() {
            if piece.is_empty() {
                continue;
            }
            let refs: Vec<&str> = piece.iter().map(|(_, l)| l.as_str()).collect();
            let posted = self.post_piece(&refs).await;
            match &posted {
                Err(PostError::Retry { .. }) => self.stats.readiness.failed(),
                _ => self.stats.readiness.answered(),
            }
            match posted {
                Ok(()) => {
                    backoff.reset();
                    self.resolve(piece.iter().map(|(o, _)| *o));
                }
                Err(PostError::Rejected { body }) => {
                    backoff.reset();
                    if !self.refused(piece, &body, &mut pieces, &mut backoff).await {
                        return false;
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
                    if !self.dead_letter(&piece, err) {
                        pieces.push(piece);
                        if !self.pause(&mut backoff, None).await {
                            return false;
                        }
                    }
                }
                Err(PostError::NoDatabase) => {
                    if !self.create_database(&mut backoff).await {
                        return false;
                    }
                    pieces.push(piece);
                }
                Err(PostError::Retry { reason, after }) => {
                    self.stats.retries.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(attempt = backoff.attempt(), "InfluxDB write failed, will retry: {reason}");
                    pieces.push(piece);
                    if !self.pause(&mut backoff, after).await {
                        return false;
                    }
                }
            }
        }
        true
    }

    /// A 400 for `piece`: several owners are split apart first; one owner's lines that the answer
    /// names (or a partial write explains) are dead-lettered and the rest written again; else the
    /// piece is halved. False on shutdown.
    async fn refused(&mut self, piece: Tagged, body: &str, pieces: &mut Vec<Tagged>, backoff: &mut Backoff) -> bool {
        let refs: Vec<&str> = piece.iter().map(|(_, l)| l.as_str()).collect();
        let mut named = if piece.len() == 1 { vec![0] } else { offending_indices(body, &refs) };
        if named.is_empty() {
            let owners = self.by_owner(piece);
            if owners.len() > 1 {
                self.stats.isolations.fetch_add(1, Ordering::Relaxed);
                pieces.extend(owners);
                return true;
            }
            let Some(piece) = owners.into_iter().next() else { return true };
            let refs: Vec<&str> = piece.iter().map(|(_, l)| l.as_str()).collect();
            named = self.dropped_lines(&error_text(body), &refs).await;
            return self.refused_lines(piece, &named, body, pieces, backoff).await;
        }
        self.refused_lines(piece, &named, body, pieces, backoff).await
    }

    /// Dead-letters the `named` lines of `piece` and queues the rest to be written again; with
    /// none named, halves it. False on shutdown.
    async fn refused_lines(&mut self, piece: Tagged, named: &[usize], body: &str, pieces: &mut Vec<Tagged>, backoff: &mut Backoff) -> bool {
        let blamed: HashSet<Arc<str>> = match named {
            [] => piece.iter().map(|((i, _), _)| self.pending[*i].owner.clone()).collect(),
            _ => named.iter().map(|&k| self.pending[piece[k].0 .0].owner.clone()).collect(),
        };
        for owner in blamed.iter().filter(|o| !o.is_empty()) {
            self.suspect(owner);
        }
        if named.is_empty() {
            // Nothing to go by: halve until each refused line stands alone.
            let mut a = piece;
            let b = a.split_off(a.len() / 2);
            pieces.push(b);
            pieces.push(a);
            return true;
        }
        let (mut bad, mut rest) = split_named(piece, named);
        if self.dead_letter(&bad, &error_text(body)) {
            // The answer may not name every refused line: write the others again.
            pieces.push(rest);
            return true;
        }
        rest.append(&mut bad);
        pieces.push(rest);
        self.pause(backoff, None).await
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
