//! The agent side of `Ingest.Stream`. Every batch gets the next sequence number and is stored in
//! the backlog (the disk spool, or memory when no spool is configured) *before* it is sent; it is
//! sent from there and stays until the collector acknowledges a sequence at or above it. On any
//! disconnect the exporter moves to the next configured collector endpoint, waits with capped
//! exponential backoff with jitter (`wattflip_infra::Backoff`), and after a fresh Hello resends everything unacknowledged, in order, as
//! fast as the stream takes it. Batches dropped because the backlog was full are counted and the
//! count is reported in the next batch as a `backlog_dropped` event. A Hello the collector refuses
//! as too large is made to fit (`hello_fit`) instead of being sent again as it was, with a
//! `hello_truncated` event in the next batch. Connections use mutual TLS unless the config names
//! the plaintext loopback mode.

use crate::export::backlog::{samples_of, Backlog, Count};
use crate::export::hello_fit;
use crate::export::loss::{direct_batch, dropped_event, failure_event, LossFile, Losses};
use crate::export::telemetry::AgentMetrics;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Certificate, ClientTlsConfig, Identity};
use wattflip_infra::backoff::Backoff;
use wattflip_infra::cli::error_chain;
use wattflip_infra::tls::{is_loopback_host, url_host, TlsMode};
use wattflip_proto::v1::{self, agent_message::Kind, ingest_client::IngestClient, AgentMessage};

/// Metadata key the collector sets on `invalid_argument` to name the rejected batch.
pub const REJECTED_SEQUENCE: &str = "wattflip-rejected-sequence";

/// Batch content from the sampler; the exporter adds agent id and sequence.
pub type Payload = v1::Batch;

#[derive(Debug, Clone)]
pub struct ExporterConfig {
    /// Collector URLs, tried in turn (failover).
    pub endpoints: Vec<String>,
    pub agent_id: String,
    pub tls: TlsMode,
    /// Name the collector's certificate must carry; default: the host of each URL.
    pub server_name: Option<String>,
    pub connect_timeout: Duration,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// How often the backlog's housekeeping (interval fsync) runs.
    pub maintain_every: Duration,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ExportSummary {
    pub batches: u64,
    pub acked: u64,
    pub dropped: u64,
    pub rejected: u64,
    pub unacked_at_exit: u64,
    pub connections: u64,
}

pub struct Exporter {
    cfg: ExporterConfig,
    tls: Option<ClientTlsConfig>,
    hello: v1::Hello,
    backlog: Box<dyn Backlog>,
    next_seq: u64,
    dropped_unreported: u64,
    /// Events for the next stored batch (`hello_truncated`, `spool_write_failed`).
    pending_events: Vec<v1::Event>,
    /// Loss counts while the spool fails (see `loss`).
    losses: Losses,
    endpoint: usize,
    summary: ExportSummary,
    metrics: Arc<AgentMetrics>,
}

enum Session {
    /// Input closed and everything acknowledged.
    Done,
    /// Connection lost; reconnect.
    Lost(String),
    /// Shutdown requested.
    Stop,
}

fn client_tls(cfg: &ExporterConfig) -> Option<ClientTlsConfig> {
    match &cfg.tls {
        TlsMode::InsecurePlaintextLoopback => None,
        TlsMode::Mutual(m) => {
            let mut t = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&m.ca_pem)).identity(Identity::from_pem(&m.cert_pem, &m.key_pem.0));
            if let Some(n) = &cfg.server_name {
                t = t.domain_name(n.clone());
            }
            Some(t)
        }
    }
}

impl Exporter {
    /// `first_sequence` lets a restarted agent continue above what it sent before.
    pub fn new(cfg: ExporterConfig, hello: v1::Hello, backlog: Box<dyn Backlog>, first_sequence: u64, metrics: Arc<AgentMetrics>) -> Self {
        Exporter {
            tls: client_tls(&cfg),
            cfg,
            hello,
            backlog,
            next_seq: first_sequence.max(1),
            dropped_unreported: 0,
            pending_events: Vec::new(),
            losses: Losses::default(),
            endpoint: 0,
            summary: ExportSummary::default(),
            metrics,
        }
    }

    /// Keeps loss counts in `file` and reports what it held from before (a restart after the spool
    /// failed and the network was down too).
    pub fn with_loss_file(mut self, file: LossFile, now_ns: i64) -> Self {
        match file.load() {
            Ok(state) => {
                let direct = state.direct.as_ref().map_or(0, |d| d.dropped_batches);
                if state.dropped_batches + direct > 0 {
                    tracing::warn!(file = %file.path().display(), "{} batch(es) lost before this start were not reported yet: reporting them now", state.dropped_batches + direct);
                }
                self.dropped_unreported += state.dropped_batches;
                self.pending_events.extend(state.spool_error.map(|f| failure_event(&f, now_ns)));
                // The same sequence as before: a collector that stored it takes it as a duplicate.
                self.losses.direct = state.direct.map(|d| (d.batch(&self.cfg.agent_id, now_ns), d.dropped_batches));
            }
            Err(e) => tracing::error!("{e}"),
        }
        self.losses.file = Some(file);
        self
    }

    fn dropped(&mut self, n: Count) {
        self.summary.dropped += n.batches;
        self.dropped_unreported += n.batches;
        AgentMetrics::add(&self.metrics.batches_dropped, n.batches);
        AgentMetrics::add(&self.metrics.samples_dropped, n.samples);
    }

    fn enqueue(&mut self, mut b: v1::Batch, now_ns: i64) {
        // The count is reported by the first batch that is stored: a batch carrying it that fails
        // to store takes the report with it, so the count stays (plus that batch) for the next.
        let reporting = self.dropped_unreported;
        if reporting > 0 {
            b.events.push(dropped_event(reporting, now_ns));
        }
        // Like the count above: they stay until a batch carrying them is stored.
        let carried = self.pending_events.len();
        b.events.extend(self.pending_events.iter().cloned());
        b.agent_id = self.cfg.agent_id.clone();
        b.sequence = self.next_seq;
        self.next_seq += 1;
        self.summary.batches += 1;
        let (seq, samples, power, temperature, probe_runs) = (b.sequence, samples_of(&b), b.power.len(), b.temperature.len(), b.probe_runs.len());
        match self.backlog.push(b) {
            Ok(dropped) => {
                // The ledger line: this batch is stored (and, with the spool, synced per policy).
                tracing::debug!(target: "wattflip::ledger", sequence = seq, power, temperature, probe_runs, "stored");
                AgentMetrics::add(&self.metrics.batches_stored, 1);
                AgentMetrics::add(&self.metrics.samples_stored, samples);
                self.dropped_unreported -= reporting;
                self.pending_events.drain(..carried);
                self.losses.failing = None;
                if dropped.batches > 0 {
                    self.dropped(dropped);
                }
                if reporting > 0 || carried > 0 || dropped.batches > 0 {
                    self.losses.save(self.dropped_unreported, &self.pending_events);
                }
            }
            Err(e) => {
                tracing::error!(sequence = seq, "batch lost: {e}");
                AgentMetrics::add(&self.metrics.store_errors, 1);
                self.dropped(Count { batches: 1, samples });
                self.pending_events.extend(self.losses.store_failed(e.raw_os_error(), e.to_string(), now_ns));
                self.prepare_direct(now_ns);
                self.losses.save(self.dropped_unreported, &self.pending_events);
            }
        }
        self.metrics.backlog_batches.store(self.backlog.len() as u64, std::sync::atomic::Ordering::Relaxed);
    }

    /// While the spool fails, what it cannot carry goes in an events-only batch that is sent
    /// directly (not stored): the lost count and the failure event. One at a time; what is lost
    /// while it is in flight goes in the next.
    fn prepare_direct(&mut self, now_ns: i64) {
        if self.losses.direct.is_some() || self.losses.failing.is_none() || (self.dropped_unreported == 0 && self.pending_events.is_empty()) {
            return;
        }
        let mut b = direct_batch(&self.cfg.agent_id, self.next_seq, self.dropped_unreported, now_ns);
        self.next_seq += 1;
        b.events.append(&mut self.pending_events);
        self.losses.direct = Some((b, self.dropped_unreported));
        self.dropped_unreported = 0;
    }

    /// The next batch to send after `sent`, in sequence order: from the backlog, or the direct one.
    fn next_to_send(&mut self, sent: u64) -> Option<v1::Batch> {
        let stored = self.backlog.next_after(sent);
        match (self.losses.direct_seq().filter(|d| *d > sent), stored) {
            (Some(d), Some(b)) if b.sequence < d => Some(b),
            (Some(_), _) => self.losses.direct.as_ref().map(|d| d.0.clone()),
            (None, b) => b,
        }
    }

    /// Up to `seq` delivered; a delivered direct batch makes way for the next (what was lost meanwhile).
    fn ack(&mut self, seq: u64, now_ns: i64) {
        if self.losses.acked(seq) {
            self.prepare_direct(now_ns);
            self.losses.save(self.dropped_unreported, &self.pending_events);
        }
        let n = self.backlog.ack(seq);
        self.summary.acked += n.batches;
        AgentMetrics::add(&self.metrics.batches_acked, n.batches);
        AgentMetrics::add(&self.metrics.samples_acked, n.samples);
        self.metrics.backlog_batches.store(self.backlog.len() as u64, std::sync::atomic::Ordering::Relaxed);
    }

    /// On shutdown: what is already waiting in the input (a stopped probe's runs, the last
    /// samples) goes to the backlog (the spool keeps it for the next start) instead of being lost.
    fn store_waiting(&mut self, input: &mut mpsc::Receiver<Payload>, now_ns: &impl Fn() -> i64) {
        while let Ok(b) = input.try_recv() {
            self.enqueue(b, now_ns());
        }
    }

    fn finish(mut self) -> ExportSummary {
        self.summary.unacked_at_exit = self.backlog.len() as u64;
        self.summary
    }

    /// Runs until `input` is closed and everything is acknowledged, or `shutdown` fires.
    pub async fn run(
        mut self,
        mut input: mpsc::Receiver<Payload>,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
        now_ns: impl Fn() -> i64,
    ) -> ExportSummary {
        let mut input_open = true;
        let mut backoff = Backoff::new(self.cfg.backoff_initial, self.cfg.backoff_max);
        let mut tick = tokio::time::interval(self.cfg.maintain_every);
        loop {
            if !input_open && self.backlog.is_empty() && self.losses.direct.is_none() {
                break;
            }
            match self.session(&mut input, &mut input_open, &mut shutdown, &now_ns, &mut backoff, &mut tick).await {
                Session::Done => break,
                Session::Stop => {
                    self.store_waiting(&mut input, &now_ns);
                    break;
                }
                Session::Lost(why) => {
                    AgentMetrics::add(&self.metrics.connect_retries, 1);
                    let wait = backoff.next_delay();
                    let url = &self.cfg.endpoints[self.endpoint % self.cfg.endpoints.len()];
                    tracing::warn!(backlog = self.backlog.len(), "collector {url}: {why}; retrying in {wait:?}");
                    // Failover: the next attempt goes to the next endpoint.
                    self.endpoint = self.endpoint.wrapping_add(1);
                    // Keep sampling into the backlog while waiting.
                    let sleep = tokio::time::sleep(wait);
                    tokio::pin!(sleep);
                    loop {
                        tokio::select! {
                            _ = &mut sleep => break,
                            b = input.recv(), if input_open => match b {
                                Some(b) => self.enqueue(b, now_ns()),
                                None => input_open = false,
                            },
                            _ = tick.tick() => self.backlog.maintain(),
                            _ = shutdown.changed() => {
                                self.store_waiting(&mut input, &now_ns);
                                return self.finish();
                            }
                        }
                    }
                }
            }
        }
        self.finish()
    }

    async fn connect(&self, url: &str) -> Result<tonic::transport::Channel, String> {
        if self.tls.is_none() && !url_host(url).is_some_and(is_loopback_host) {
            return Err("refusing plaintext to a non-loopback address (tls.insecure_plaintext_loopback_only)".into());
        }
        let mut endpoint = tonic::transport::Endpoint::from_shared(url.to_string())
            .map_err(|e| format!("invalid URL: {e}"))?
            .connect_timeout(self.cfg.connect_timeout)
            .tcp_nodelay(true);
        if let Some(t) = &self.tls {
            endpoint = endpoint.tls_config(t.clone()).map_err(|e| format!("TLS setup: {}", error_chain(&e)))?;
        }
        endpoint.connect().await.map_err(|e| format!("cannot connect: {}", error_chain(&e)))
    }

    async fn session(
        &mut self,
        input: &mut mpsc::Receiver<Payload>,
        input_open: &mut bool,
        shutdown: &mut tokio::sync::watch::Receiver<bool>,
        now_ns: &impl Fn() -> i64,
        backoff: &mut Backoff,
        tick: &mut tokio::time::Interval,
    ) -> Session {
        let url = self.cfg.endpoints[self.endpoint % self.cfg.endpoints.len()].clone();
        let channel = tokio::select! {
            c = self.connect(&url) => match c {
                Ok(c) => c,
                Err(e) => return Session::Lost(e),
            },
            _ = shutdown.changed() => return Session::Stop,
        };
        let mut client = IngestClient::new(channel);
        // Bounded: batches are read from the backlog only as fast as the stream takes them, and
        // the select below keeps reading acknowledgements while it waits for room.
        let (tx, rx) = mpsc::channel::<AgentMessage>(16);
        let mut hello = self.hello.clone();
        hello.time_ns = now_ns();
        if tx.try_send(AgentMessage { kind: Some(Kind::Hello(hello)) }).is_err() {
            return Session::Lost("stream closed".into());
        }
        let mut acks = tokio::select! {
            r = client.stream(ReceiverStream::new(rx)) => match r {
                Ok(r) => r.into_inner(),
                Err(s) => return self.refused(&s, now_ns()),
            },
            _ = shutdown.changed() => return Session::Stop,
        };
        self.summary.connections += 1;
        tracing::info!(%url, unacknowledged = self.backlog.len(), "connected to the collector");
        // Highest sequence sent on this stream: everything above it still has to go.
        let mut sent = 0u64;
        loop {
            if !*input_open && self.backlog.is_empty() && self.losses.direct.is_none() {
                return Session::Done;
            }
            let more = self.backlog.has_after(sent) || self.losses.direct_seq().is_some_and(|d| d > sent);
            tokio::select! {
                permit = tx.reserve(), if more => match permit {
                    Ok(permit) => {
                        if let Some(b) = self.next_to_send(sent) {
                            sent = b.sequence;
                            AgentMetrics::add(&self.metrics.batches_sent, 1);
                            AgentMetrics::add(&self.metrics.samples_sent, samples_of(&b));
                            permit.send(AgentMessage { kind: Some(Kind::Batch(b)) });
                        }
                    }
                    Err(_) => return self.why_closed(&mut acks, now_ns()).await,
                },
                b = input.recv(), if *input_open => match b {
                    Some(b) => self.enqueue(b, now_ns()),
                    None => *input_open = false,
                },
                ack = acks.message() => match ack {
                    Ok(Some(a)) => {
                        backoff.reset();
                        report_ack(&a);
                        self.ack(a.durable_sequence, now_ns());
                    }
                    Ok(None) => return Session::Lost("the collector closed the stream".into()),
                    Err(status) => return self.failed(&status, now_ns()),
                },
                _ = tick.tick() => self.backlog.maintain(),
                _ = shutdown.changed() => return Session::Stop,
            }
        }
    }

    /// The collector ended the stream with `status`: a refused batch is noted, a Hello too large is
    /// made to fit before the next attempt.
    fn failed(&mut self, status: &tonic::Status, now_ns: i64) -> Session {
        if status.code() == tonic::Code::InvalidArgument {
            self.note_rejected(status);
        }
        self.fit_hello(status, now_ns);
        Session::Lost(format!("{}: {}", status.code(), status.message()))
    }

    /// Our side of the stream closed (the collector stopped reading it): its answer says why, if
    /// it gave one in time (a refused Hello must be seen, or the same one is sent again).
    async fn why_closed(&mut self, acks: &mut tonic::Streaming<v1::Ack>, now_ns: i64) -> Session {
        loop {
            match tokio::time::timeout(Duration::from_secs(2), acks.message()).await {
                Ok(Ok(Some(a))) => self.ack(a.durable_sequence, now_ns),
                Ok(Err(status)) => return self.failed(&status, now_ns),
                Ok(Ok(None)) | Err(_) => return Session::Lost("stream closed".into()),
            }
        }
    }

    /// The stream was refused at once: a Hello too large is made to fit before the next attempt.
    fn refused(&mut self, s: &tonic::Status, now_ns: i64) -> Session {
        self.fit_hello(s, now_ns);
        Session::Lost(format!("stream refused: {} {}", s.code(), s.message()))
    }

    /// When `status` refuses our Hello for its size: the next connection sends a smaller one (and
    /// the next batch says what was left out) instead of the same Hello for ever.
    fn fit_hello(&mut self, status: &tonic::Status, now_ns: i64) {
        let Some(limit) = hello_fit::refused_limit(status) else { return };
        match hello_fit::shrink(&mut self.hello, limit, now_ns) {
            Ok(e) => {
                tracing::warn!("{}", e.message);
                self.pending_events.push(e);
            }
            Err(why) => tracing::error!("the collector refuses the Hello as too large: {why}"),
        }
    }

    /// A batch the collector refuses as a whole (not its agent id, no sequence: invalid points
    /// alone are left out by the collector and acknowledged) is kept: nothing leaves the backlog
    /// unless acknowledged. It is counted and logged, and sent again after the backoff.
    fn note_rejected(&mut self, status: &tonic::Status) {
        let seq = status.metadata().get(REJECTED_SEQUENCE).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
        match seq {
            Some(seq) => {
                self.summary.rejected += 1;
                AgentMetrics::add(&self.metrics.batches_rejected, 1);
                tracing::error!(sequence = seq, "the collector refused a batch; it stays in the backlog and is sent again: {}", status.message());
            }
            None => tracing::error!("the collector rejected the stream: {}", status.message()),
        }
    }
}

/// Logs what an Ack says the collector left out (rejected points are also in `point_rejected`
/// events, dead-lettered ones in its dead-letter store).
fn report_ack(a: &v1::Ack) {
    if !a.points_rejected.is_empty() || !a.points_dead_lettered.is_empty() {
        let by = |m: &std::collections::HashMap<String, u64>| {
            let mut v: Vec<String> = m.iter().map(|(k, n)| format!("{k}={n}")).collect();
            v.sort();
            v.join(" ")
        };
        tracing::warn!(
            sequence = a.durable_sequence,
            stored = a.points_stored,
            rejected = %by(&a.points_rejected),
            dead_lettered = %by(&a.points_dead_lettered),
            "the collector stored the batch without some points"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::backlog::MemoryBacklog;

    fn exporter(max: usize) -> Exporter {
        let cfg = ExporterConfig {
            endpoints: vec!["http://127.0.0.1:1".into(), "http://127.0.0.1:2".into()],
            agent_id: "a".into(),
            tls: TlsMode::InsecurePlaintextLoopback,
            server_name: None,
            connect_timeout: Duration::from_millis(10),
            backoff_initial: Duration::from_millis(1),
            backoff_max: Duration::from_millis(5),
            maintain_every: Duration::from_millis(100),
        };
        Exporter::new(cfg, v1::Hello::default(), Box::new(MemoryBacklog::new(max)), 1, Arc::default())
    }

    #[test]
    fn full_backlog_drops_oldest_and_reports_it_in_the_next_batch() {
        let mut e = exporter(2);
        for _ in 0..3 {
            e.enqueue(v1::Batch::default(), 7);
        }
        assert_eq!(e.backlog.next_after(0).map(|b| b.sequence), Some(2));
        assert_eq!(e.summary.dropped, 1);
        e.enqueue(v1::Batch::default(), 9);
        let last = e.backlog.next_after(3).unwrap();
        assert_eq!(last.sequence, 4);
        assert_eq!(last.events.len(), 1);
        assert_eq!(last.events[0].kind, "backlog_dropped");
        assert_eq!(last.events[0].attributes.get("dropped_batches").map(String::as_str), Some("1"));
        assert_eq!(e.summary.dropped, 2);
        e.ack(3, 1);
        assert_eq!(e.backlog.len(), 1);
        assert_eq!(e.summary.acked, 1);
        assert_eq!(e.metrics.batches_dropped.load(std::sync::atomic::Ordering::Relaxed), 2);
    }

    /// A memory backlog whose stores fail with EROFS while `failing` is set: a spool on a
    /// filesystem remounted read-only after an error.
    struct ReadOnly {
        inner: MemoryBacklog,
        failing: Arc<std::sync::atomic::AtomicBool>,
    }

    impl Backlog for ReadOnly {
        fn push(&mut self, b: v1::Batch) -> Result<Count, crate::export::backlog::BacklogError> {
            if self.failing.load(std::sync::atomic::Ordering::Relaxed) {
                let source = std::io::Error::from_raw_os_error(libc::EROFS);
                return Err(crate::export::backlog::BacklogError::Io { path: "/spool/1.seg".into(), what: "cannot append a batch", source });
            }
            self.inner.push(b)
        }
        fn ack(&mut self, seq: u64) -> Count {
            self.inner.ack(seq)
        }
        fn next_after(&mut self, seq: u64) -> Option<v1::Batch> {
            self.inner.next_after(seq)
        }
        fn has_after(&self, seq: u64) -> bool {
            self.inner.has_after(seq)
        }
        fn remove(&mut self, seq: u64) {
            self.inner.remove(seq)
        }
        fn len(&self) -> usize {
            self.inner.len()
        }
    }

    fn kinds(b: &v1::Batch) -> Vec<(String, Option<String>)> {
        b.events.iter().map(|e| (e.kind.clone(), e.attributes.get("dropped_batches").or(e.attributes.get("errno")).cloned())).collect()
    }

    /// Issue 32 §2: while the spool cannot store, the lost count and the failure (with its errno)
    /// go out in a direct batch between the stored ones, and what is not yet acknowledged is in the
    /// loss file; a restart reports what the file holds.
    #[test]
    fn a_failing_spool_sends_its_losses_directly_and_keeps_them_in_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = LossFile::of_spool(&dir.path().join("spool"));
        let failing = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut e = exporter(1);
        e.backlog = Box::new(ReadOnly { inner: MemoryBacklog::new(16), failing: failing.clone() });
        let mut e = e.with_loss_file(file.clone(), 1);
        e.enqueue(v1::Batch::default(), 5); // 1: stored
        failing.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in 6..9 {
            e.enqueue(v1::Batch::default(), t); // 2 lost (3: the direct batch), 4 and 5 lost
        }
        let first = e.next_to_send(0).unwrap();
        let direct = e.next_to_send(first.sequence).unwrap();
        assert_eq!((first.sequence, direct.sequence, e.next_to_send(3)), (1, 3, None));
        assert_eq!(kinds(&direct), vec![("backlog_dropped".into(), Some("1".into())), ("spool_write_failed".into(), Some("30".into()))]);
        assert_eq!(direct.events[1].attributes["error"], "spool /spool/1.seg: cannot append a batch: Read-only file system (os error 30)");
        let held = |f: &LossFile| f.load().unwrap();
        let in_flight = held(&file).direct.unwrap();
        assert_eq!((held(&file).dropped_batches, in_flight.sequence, in_flight.dropped_batches), (2, 3, 1), "2 not sent yet, 1 in flight");
        assert_eq!(in_flight.spool_error.map(|x| x.0), Some(Some(libc::EROFS)));
        // Stopped now, the next start sends the same direct batch again, its events at their own
        // times: a duplicate if the collector remembers it, the same points if it wrote it.
        assert_eq!(exporter(16).with_loss_file(file.clone(), 9).losses.direct.map(|d| d.0), Some(direct.clone()));
        // Acked while the spool still fails: the 2 lost meanwhile go out in the next direct batch.
        e.ack(3, 9);
        let next = e.next_to_send(3).expect("the next direct batch");
        assert_eq!((next.sequence, kinds(&next)), (6, vec![("backlog_dropped".into(), Some("2".into()))]));
        let in_flight = held(&file).direct.unwrap();
        assert_eq!((held(&file).dropped_batches, in_flight.sequence, in_flight.dropped_batches), (0, 6, 2));
        assert_eq!(exporter(16).with_loss_file(file.clone(), 10).losses.direct.map(|d| d.0), Some(next.clone()));
        e.ack(6, 11);
        assert!(!file.path().exists(), "every count delivered: nothing left to keep");
        // The spool recovers: the next stored batch carries no stale count.
        failing.store(false, std::sync::atomic::Ordering::Relaxed);
        e.enqueue(v1::Batch::default(), 12);
        assert_eq!(kinds(&e.backlog.next_after(6).unwrap()), vec![]);
    }

    #[tokio::test]
    async fn plaintext_is_refused_beyond_loopback() {
        let e = exporter(1);
        let err = e.connect("http://10.1.2.3:50051").await.unwrap_err();
        assert_eq!(err, "refusing plaintext to a non-loopback address (tls.insecure_plaintext_loopback_only)");
    }

    #[tokio::test]
    async fn unreachable_collectors_keep_the_backlog_rotate_and_stop_on_shutdown() {
        let e = exporter(100);
        let metrics = e.metrics.clone();
        let (tx, rx) = mpsc::channel(8);
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(e.run(rx, stop_rx, || 1));
        for _ in 0..5 {
            tx.send(v1::Batch::default()).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        stop_tx.send(true).unwrap();
        let s = task.await.unwrap();
        assert_eq!(s.batches, 5);
        assert_eq!(s.unacked_at_exit, 5);
        assert_eq!(s.connections, 0);
        assert!(metrics.connect_retries.load(std::sync::atomic::Ordering::Relaxed) >= 2);
    }
}
