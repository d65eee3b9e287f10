//! The OTLP writer task: takes the data points every stream queued, posts them as
//! `ExportMetricsServiceRequest`s (protobuf over OTLP/HTTP, gzip) of at most `batch_points`
//! points, flushed at least every `flush_interval`, and retries network errors, 5xx, 429 and auth
//! failures with capped exponential backoff. A 400 (Prometheus: out-of-order or too old samples;
//! it rolls the whole request back) or 409 (Thanos receive: a sample conflicting with a stored
//! one, e.g. another collector's running total resent for the same millisecond) refuses samples:
//! the request is split until the refusal is narrowed to the one job (agent batch) it holds, so
//! the other jobs, other hosts' among them, are stored ([`Writer::deliver`]). A refused job, or a
//! request answered 413, 415 or 422, is final: its points are dead-lettered (counted, logged at
//! WARN naming the hosts) and not retried.
//! Required sink (`otlp.required = true`): a job completes only once its points are stored or
//! refused, and the agent's Ack waits for it; producers wait for room in the queue. Optional sink:
//! nobody waits; the queue holds at most `queue_points` points and drops its oldest beyond
//! (dead letters `queue_full`). A new failure class is a [`PostError`] variant and its arm in
//! [`Writer::send`].

// The error text without the URL and with its causes, as the InfluxDB sink logs it.
use crate::sinks::influx::writer::without_url;
use crate::sinks::otlp::config::OtlpConfig;
use crate::sinks::otlp::model::{self, HostPoints};
use crate::sinks::otlp::translate::Translator;
use prost::Message as _;
use std::collections::VecDeque;
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{oneshot, watch, Notify, Semaphore};
use tokio::time::Instant;
use wattflip_infra::ratelimit::Limited;
use wattflip_infra::telemetry::{Histogram, LabelledCounter};
use wattflip_infra::Backoff;
use wattflip_proto::domain::{Batch, Hello};
use wattflip_proto::encoder::BudgetTag;
use wattflip_proto::schema::{HostTags, ThrottleEvent};

/// Counters of the OTLP sink (the metrics page's `wattflip_collector_otlp_*`).
#[derive(Debug, Default)]
pub struct OtlpStats {
    /// Data points the receiver accepted (2xx).
    pub points_sent: AtomicU64,
    /// Data points that will never be stored, by reason (`queue_full`, `refused`).
    pub points_dead_lettered: LabelledCounter,
    /// Data points queued now (a gauge).
    pub points_queued: AtomicU64,
    pub requests: AtomicU64,
    pub retries: AtomicU64,
    /// Refused requests split in two to find the job whose samples were refused.
    pub requests_split: AtomicU64,
    /// Counter samples not newer than their series' newest (a resent batch): not added twice.
    pub stale_samples: AtomicU64,
    pub write_latency: Histogram,
    /// Whether the receiver answers (the sink's readiness).
    pub readiness: crate::sinks::readiness::Readiness,
}

/// What became of a job's points: all stored but `refused` (a 400-class answer).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OtlpOutcome {
    pub refused: usize,
}

struct Job {
    points: HostPoints,
    done: Option<oneshot::Sender<OtlpOutcome>>,
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    points: usize,
}

/// What the streams share: the queue, the translation state and the counters.
struct Shared {
    queue: Mutex<Queue>,
    /// Wakes the writer when a job arrives.
    arrived: Notify,
    /// Required sink: permits for `queue_points` points, returned when a job is written.
    room: Option<Semaphore>,
    cap: usize,
    translator: Mutex<Translator>,
    stats: Arc<OtlpStats>,
    /// When the last WARN about dropped points was logged (at most one per 10 s).
    warned: Mutex<Option<Instant>>,
}

/// Handle the ingest streams use to send data to the OTLP sink.
#[derive(Clone)]
pub struct OtlpHandle {
    shared: Arc<Shared>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl OtlpHandle {
    /// Whether the agents' Acks wait for this sink.
    pub fn required(&self) -> bool {
        self.shared.room.is_some()
    }

    /// Translates one checked batch and queues its points. Required sink: returns the receiver
    /// that completes when they are stored (waiting for room first); optional: None.
    pub async fn batch(&self, tags: &HostTags, b: &Batch, budget: Option<&BudgetTag>, episodes: &[ThrottleEvent]) -> Option<oneshot::Receiver<OtlpOutcome>> {
        let points = {
            let mut t = lock(&self.shared.translator);
            let stale = t.stale_samples;
            let p = t.batch(tags, b, budget, episodes);
            self.shared.stats.stale_samples.fetch_add(t.stale_samples - stale, Ordering::Relaxed);
            p
        };
        self.queue(HostPoints { tags: tags.clone(), points }).await
    }

    /// The drives' sizes from a Hello's inventory (never waited for: a Hello is not acknowledged).
    pub async fn hello(&self, tags: &HostTags, hello: &Hello) {
        let points = lock(&self.shared.translator).hello(hello);
        drop(self.queue(HostPoints { tags: tags.clone(), points }).await);
    }

    async fn queue(&self, points: HostPoints) -> Option<oneshot::Receiver<OtlpOutcome>> {
        let s = &self.shared;
        let n = points.points.len();
        let (done, rx) = oneshot::channel();
        if n == 0 {
            let _ = done.send(OtlpOutcome::default());
            return s.room.is_some().then_some(rx);
        }
        if let Some(room) = &s.room {
            // A job larger than the whole queue waits for all of it.
            let want = u32::try_from(n.min(s.cap)).unwrap_or(u32::MAX);
            match room.acquire_many(want).await {
                Ok(p) => p.forget(),
                Err(_) => return Some(rx),
            }
        }
        let dropped = {
            let mut q = lock(&s.queue);
            let mut dropped = 0;
            if s.room.is_none() {
                while q.points + n > s.cap {
                    let Some(old) = q.jobs.pop_front() else { break };
                    q.points -= old.points.points.len();
                    dropped += old.points.points.len();
                }
            }
            q.points += n;
            q.jobs.push_back(Job { points, done: s.room.is_some().then_some(done) });
            s.stats.points_queued.store(q.points as u64, Ordering::Relaxed);
            dropped
        };
        s.arrived.notify_one();
        if dropped > 0 {
            self.dead_letter("queue_full", dropped, "the optional OTLP sink's retry queue is full (otlp.queue_points); dropped its oldest points");
        }
        s.room.is_some().then_some(rx)
    }

    fn dead_letter(&self, reason: &str, n: usize, why: &str) {
        let s = &self.shared;
        s.stats.points_dead_lettered.add(reason, n as u64);
        let mut w = lock(&s.warned);
        if w.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
            *w = Some(Instant::now());
            let total = s.stats.points_dead_lettered.get(reason);
            tracing::warn!(reason, points = n, total, "{why} (wattflip_collector_otlp_points_dead_lettered_total)");
        }
    }
}

/// Starts the OTLP writer. It ends when `shutdown` turns true: what it holds is then dropped
/// (required: unacknowledged, so agents resend; optional: counted as `shutdown`).
pub fn spawn(cfg: OtlpConfig, stats: Arc<OtlpStats>, shutdown: watch::Receiver<bool>) -> (OtlpHandle, tokio::task::JoinHandle<()>) {
    let shared = Arc::new(Shared {
        queue: Mutex::new(Queue::default()),
        arrived: Notify::new(),
        room: cfg.required.then(|| Semaphore::new(cfg.queue_points)),
        cap: cfg.queue_points,
        translator: Mutex::new(Translator::default()),
        stats,
        warned: Mutex::new(None),
    });
    let client = reqwest::Client::builder().timeout(cfg.request_timeout).build().unwrap_or_else(|_| reqwest::Client::new());
    let handle = OtlpHandle { shared: shared.clone() };
    let writer = Writer { cfg, client, handle: handle.clone(), shutdown };
    (handle, tokio::spawn(writer.run()))
}

enum PostError {
    /// Worth retrying after a pause (network, 5xx, 429, 401/403/404: a receiver being set up).
    Retry { reason: String, after: Option<Duration> },
    /// Final: the receiver refused the data (400, 409, 413, 415, 422); `samples`: it refused
    /// samples (400, 409), so the request's other samples may pass on their own.
    Refused { reason: String, samples: bool },
}

struct Writer {
    cfg: OtlpConfig,
    client: reqwest::Client,
    handle: OtlpHandle,
    shutdown: watch::Receiver<bool>,
}

impl Writer {
    async fn run(mut self) {
        loop {
            let Some(jobs) = self.take().await else {
                self.dropped_at_shutdown(0);
                break;
            };
            let Some(refused) = self.deliver(&jobs).await else {
                self.dropped_at_shutdown(jobs.iter().map(|j| j.points.points.len()).sum());
                break;
            };
            let s = &self.handle.shared;
            for (j, refused) in jobs.into_iter().zip(refused) {
                if let Some(room) = &s.room {
                    room.add_permits(j.points.points.len().min(s.cap));
                }
                if let Some(done) = j.done {
                    let _ = done.send(OtlpOutcome { refused: if refused { j.points.points.len() } else { 0 } });
                }
            }
        }
    }

    /// Posts the jobs' points as one request. When the receiver refuses samples of a request of
    /// several jobs (400: Prometheus rolls the whole request back for one out-of-order or too old
    /// sample; 409: Thanos), the request is split in two halves, sent in order (a host's older
    /// jobs first), until every refusal is narrowed to the one job (one agent batch) it holds: a
    /// host's bad sample no longer costs another host's points. A clean request is one POST; a
    /// request with one refused job costs about 2·log2(jobs) more. Returns which jobs were
    /// refused; None on shutdown.
    async fn deliver(&mut self, jobs: &[Job]) -> Option<Vec<bool>> {
        let mut refused = vec![false; jobs.len()];
        // Ranges still to send, the next one last.
        let mut todo = vec![(0, jobs.len())];
        while let Some((a, b)) = todo.pop() {
            let part = &jobs[a..b];
            let n: usize = part.iter().map(|j| j.points.points.len()).sum();
            match self.send(part, n).await? {
                None => {}
                Some(split) if split && b - a > 1 => {
                    self.handle.shared.stats.requests_split.fetch_add(1, Ordering::Relaxed);
                    let mid = a + (b - a) / 2;
                    todo.push((mid, b));
                    todo.push((a, mid));
                }
                Some(_) => refused[a..b].iter_mut().for_each(|r| *r = true),
            }
        }
        Some(refused)
    }

    /// Optional sink: the points it held when the collector stopped are counted as `shutdown`
    /// (a required sink's are unacknowledged, and the agents send them again).
    fn dropped_at_shutdown(&self, in_flight: usize) {
        let s = &self.handle.shared;
        let n = in_flight + lock(&s.queue).points;
        if s.room.is_none() && n > 0 {
            self.handle.dead_letter("shutdown", n, "the collector stopped before the OTLP receiver took these points");
        }
    }

    /// Waits for jobs, then for more until `batch_points` or `flush_interval`; takes whole jobs
    /// (at least one) up to `batch_points` points. None on shutdown.
    async fn take(&mut self) -> Option<Vec<Job>> {
        let s = self.handle.shared.clone();
        let mut deadline: Option<Instant> = None;
        loop {
            let queued = lock(&s.queue).points;
            let due = deadline.is_some_and(|d| Instant::now() >= d);
            if queued >= self.cfg.batch_points || (queued > 0 && due) {
                break;
            }
            if queued > 0 && deadline.is_none() {
                deadline = Some(Instant::now() + self.cfg.flush_interval);
            }
            let wait = deadline.map(|d| d.saturating_duration_since(Instant::now())).unwrap_or(Duration::from_secs(3600));
            tokio::select! {
                _ = s.arrived.notified() => {}
                _ = tokio::time::sleep(wait) => {}
                _ = self.shutdown.changed() => return None,
            }
        }
        let mut q = lock(&s.queue);
        let mut jobs = Vec::new();
        let mut n = 0;
        while let Some(j) = q.jobs.front() {
            let len = j.points.points.len();
            if !jobs.is_empty() && n + len > self.cfg.batch_points {
                break;
            }
            n += len;
            q.points -= len;
            jobs.extend(q.jobs.pop_front());
        }
        s.stats.points_queued.store(q.points as u64, Ordering::Relaxed);
        Some(jobs)
    }

    /// Posts `jobs` (`n` points) until stored or refused: `Some(None)` stored, `Some(Some(split))`
    /// refused (`split`: the receiver refused samples, so a smaller request may pass); None on
    /// shutdown.
    async fn send(&mut self, jobs: &[Job], n: usize) -> Option<Option<bool>> {
        let body = self.encode(jobs);
        let stats = self.handle.shared.stats.clone();
        let cap = self.cfg.max_backoff;
        let mut backoff = Backoff::new(Duration::from_millis(100).min(cap), cap);
        loop {
            stats.requests.fetch_add(1, Ordering::Relaxed);
            let started = Instant::now();
            let result = self.post(body.clone()).await;
            stats.write_latency.observe(started.elapsed());
            match &result {
                Err(PostError::Retry { .. }) => stats.readiness.failed(),
                _ => stats.readiness.answered(),
            }
            match result {
                Ok(()) => {
                    stats.points_sent.fetch_add(n as u64, Ordering::Relaxed);
                    return Some(None);
                }
                Err(PostError::Refused { reason, samples }) => {
                    if !(samples && jobs.len() > 1) {
                        self.refused(jobs, n, &reason);
                    }
                    return Some(Some(samples));
                }
                Err(PostError::Retry { reason, after }) => {
                    stats.retries.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(attempt = backoff.attempt(), points = n, "OTLP write failed, will retry: {reason}");
                    let wait = backoff.next_delay_or(after.map(|a| a.min(cap)));
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = self.shutdown.changed() => return None,
                    }
                }
            }
        }
    }

    /// Counts a refused request's points as dead letters (`refused`) and logs a WARN naming its
    /// hosts (at most one per 10 s; the line says how many were suppressed).
    fn refused(&self, jobs: &[Job], n: usize, reason: &str) {
        static REFUSED: Limited = Limited::new(Duration::from_secs(10));
        let stats = &self.handle.shared.stats;
        stats.points_dead_lettered.add("refused", n as u64);
        if let Some(suppressed) = REFUSED.hit(std::time::Instant::now()) {
            let mut hosts: Vec<&str> = jobs.iter().map(|j| j.points.tags.host.as_str()).collect();
            hosts.sort_unstable();
            hosts.dedup();
            let total = stats.points_dead_lettered.get("refused");
            let hosts = hosts.join(", ");
            tracing::warn!(%hosts, points = n, total, suppressed,
                "the OTLP receiver refused {n} points of {hosts}, not retried: {reason} ({suppressed} more refusals suppressed; wattflip_collector_otlp_points_dead_lettered_total{{reason=\"refused\"}})");
        }
    }

    fn encode(&self, jobs: &[Job]) -> Vec<u8> {
        let plain = model::request(jobs.iter().map(|j| &j.points)).encode_to_vec();
        if !self.cfg.gzip {
            return plain;
        }
        let mut enc = flate2::write::GzEncoder::new(Vec::with_capacity(plain.len() / 4), flate2::Compression::fast());
        // Writing to a Vec cannot fail.
        let _ = enc.write_all(&plain);
        enc.finish().unwrap_or_default()
    }

    async fn post(&self, body: Vec<u8>) -> Result<(), PostError> {
        let c = &self.cfg;
        let mut req = self.client.post(&c.url).header("Content-Type", "application/x-protobuf");
        if c.gzip {
            req = req.header("Content-Encoding", "gzip");
        }
        for (k, v) in &c.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        for (k, v) in &c.secret_headers {
            req = req.header(k.as_str(), v.0.as_str());
        }
        let resp = req
            .body(body)
            .send()
            .await
            .map_err(|e| PostError::Retry { reason: format!("cannot reach the OTLP receiver at {}: {}", c.url, without_url(e)), after: None })?;
        let status = resp.status();
        if status.is_success() {
            return Ok(());
        }
        let after = resp.headers().get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<u64>().ok()).map(Duration::from_secs);
        let text = resp.text().await.unwrap_or_default();
        let reason = format!("{} answered {status}: {}", c.url, text.trim().chars().take(400).collect::<String>());
        match status.as_u16() {
            400 | 409 => Err(PostError::Refused { reason, samples: true }),
            413 | 415 | 422 => Err(PostError::Refused { reason, samples: false }),
            _ => Err(PostError::Retry { reason, after }),
        }
    }
}
