//! The agent side of `Ingest.Stream`. Owns the backlog: every batch gets the next sequence number
//! and stays in the backlog until the collector acknowledges a sequence at or above it. On any
//! disconnect it reconnects with capped exponential backoff and resends the whole backlog after a
//! fresh Hello. The backlog is bounded: when full, the oldest batch is dropped and counted, and the
//! count is reported in the next batch as a `backlog_dropped` event.

use std::collections::VecDeque;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use wattflip_proto::v1::{self, agent_message::Kind, ingest_client::IngestClient, AgentMessage};

/// Metadata key the collector sets on `invalid_argument` to name the rejected batch.
pub const REJECTED_SEQUENCE: &str = "wattflip-rejected-sequence";

/// Batch content from the sampler; the exporter adds agent id and sequence.
pub type Payload = v1::Batch;

#[derive(Debug, Clone)]
pub struct ExporterConfig {
    pub url: String,
    pub agent_id: String,
    pub connect_timeout: Duration,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    pub max_batches: usize,
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
    hello: v1::Hello,
    backlog: VecDeque<v1::Batch>,
    next_seq: u64,
    dropped_unreported: u64,
    summary: ExportSummary,
}

enum Session {
    /// Input closed and everything acknowledged.
    Done,
    /// Connection lost; reconnect.
    Lost(String),
    /// Shutdown requested.
    Stop,
}

impl Exporter {
    /// `first_sequence` lets a restarted agent continue above what it sent before.
    pub fn new(cfg: ExporterConfig, hello: v1::Hello, first_sequence: u64) -> Self {
        Exporter {
            cfg,
            hello,
            backlog: VecDeque::new(),
            next_seq: first_sequence.max(1),
            dropped_unreported: 0,
            summary: ExportSummary::default(),
        }
    }

    fn enqueue(&mut self, mut b: v1::Batch, now_ns: i64) {
        if self.dropped_unreported > 0 {
            b.events.push(v1::Event {
                time_ns: now_ns,
                kind: "backlog_dropped".into(),
                severity: v1::Severity::Warning as i32,
                device: String::new(),
                message: format!(
                    "{} batch(es) dropped because the collector was unreachable and the backlog was full",
                    self.dropped_unreported
                ),
                attributes: [("dropped_batches".to_string(), self.dropped_unreported.to_string())].into(),
            });
            self.dropped_unreported = 0;
        }
        b.agent_id = self.cfg.agent_id.clone();
        b.sequence = self.next_seq;
        self.next_seq += 1;
        self.summary.batches += 1;
        if self.backlog.len() >= self.cfg.max_batches {
            if let Some(old) = self.backlog.pop_front() {
                self.summary.dropped += 1;
                self.dropped_unreported += 1;
                tracing::warn!(sequence = old.sequence, "backlog full: dropped the oldest batch");
            }
        }
        self.backlog.push_back(b);
    }

    fn ack(&mut self, seq: u64) {
        while self.backlog.front().is_some_and(|b| b.sequence <= seq) {
            self.backlog.pop_front();
            self.summary.acked += 1;
        }
    }

    /// Runs until `input` is closed and everything is acknowledged, or `shutdown` fires.
    pub async fn run(
        mut self,
        mut input: mpsc::Receiver<Payload>,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
        now_ns: impl Fn() -> i64,
    ) -> ExportSummary {
        let mut input_open = true;
        let mut attempt: u32 = 0;
        loop {
            if !input_open && self.backlog.is_empty() {
                break;
            }
            match self.session(&mut input, &mut input_open, &mut shutdown, &now_ns, &mut attempt).await {
                Session::Done | Session::Stop => break,
                Session::Lost(why) => {
                    let wait = backoff(self.cfg.backoff_initial, self.cfg.backoff_max, attempt);
                    attempt = attempt.saturating_add(1);
                    tracing::warn!(backlog = self.backlog.len(), "collector {}: {why}; retrying in {wait:?}", self.cfg.url);
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
                            _ = shutdown.changed() => {
                                self.summary.unacked_at_exit = self.backlog.len() as u64;
                                return self.summary;
                            }
                        }
                    }
                }
            }
        }
        self.summary.unacked_at_exit = self.backlog.len() as u64;
        self.summary
    }

    async fn session(
        &mut self,
        input: &mut mpsc::Receiver<Payload>,
        input_open: &mut bool,
        shutdown: &mut tokio::sync::watch::Receiver<bool>,
        now_ns: &impl Fn() -> i64,
        attempt: &mut u32,
    ) -> Session {
        let endpoint = match tonic::transport::Endpoint::from_shared(self.cfg.url.clone()) {
            Ok(e) => e.connect_timeout(self.cfg.connect_timeout).tcp_nodelay(true),
            Err(e) => return Session::Lost(format!("invalid URL: {e}")),
        };
        let channel = tokio::select! {
            c = endpoint.connect() => match c {
                Ok(c) => c,
                Err(e) => return Session::Lost(format!("cannot connect: {}", chain(&e))),
            },
            _ = shutdown.changed() => return Session::Stop,
        };
        let mut client = IngestClient::new(channel);
        // Unbounded on purpose: the backlog (bounded) is what limits memory, and a bounded channel
        // here could deadlock against acknowledgements we would not be reading while resending.
        let (tx, rx) = mpsc::unbounded_channel::<AgentMessage>();
        let mut hello = self.hello.clone();
        hello.time_ns = now_ns();
        if tx.send(AgentMessage { kind: Some(Kind::Hello(hello)) }).is_err() {
            return Session::Lost("stream closed".into());
        }
        for b in &self.backlog {
            let _ = tx.send(AgentMessage { kind: Some(Kind::Batch(b.clone())) });
        }
        let mut acks = match client.stream(UnboundedReceiverStream::new(rx)).await {
            Ok(r) => r.into_inner(),
            Err(s) => return Session::Lost(format!("stream refused: {} {}", s.code(), s.message())),
        };
        self.summary.connections += 1;
        tracing::info!(url = %self.cfg.url, resent = self.backlog.len(), "connected to the collector");
        loop {
            if !*input_open && self.backlog.is_empty() {
                return Session::Done;
            }
            tokio::select! {
                b = input.recv(), if *input_open => match b {
                    Some(b) => {
                        self.enqueue(b, now_ns());
                        if let Some(last) = self.backlog.back() {
                            if tx.send(AgentMessage { kind: Some(Kind::Batch(last.clone())) }).is_err() {
                                return Session::Lost("stream closed".into());
                            }
                        }
                    }
                    None => *input_open = false,
                },
                ack = acks.message() => match ack {
                    Ok(Some(a)) => {
                        *attempt = 0;
                        self.ack(a.durable_sequence);
                    }
                    Ok(None) => return Session::Lost("the collector closed the stream".into()),
                    Err(status) => {
                        if status.code() == tonic::Code::InvalidArgument {
                            self.drop_rejected(&status);
                        }
                        return Session::Lost(format!("{}: {}", status.code(), status.message()));
                    }
                },
                _ = shutdown.changed() => return Session::Stop,
            }
        }
    }

    /// A batch the collector calls invalid would be refused forever: drop it, loudly.
    fn drop_rejected(&mut self, status: &tonic::Status) {
        let seq = status
            .metadata()
            .get(REJECTED_SEQUENCE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        match seq {
            Some(seq) => {
                self.backlog.retain(|b| b.sequence != seq);
                self.summary.rejected += 1;
                tracing::error!(sequence = seq, "the collector rejected a batch, dropped: {}", status.message());
            }
            None => tracing::error!("the collector rejected the stream: {}", status.message()),
        }
    }
}

fn backoff(initial: Duration, max: Duration, attempt: u32) -> Duration {
    initial.saturating_mul(1u32 << attempt.min(16)).min(max)
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exporter(max: usize) -> Exporter {
        let cfg = ExporterConfig {
            url: "http://127.0.0.1:1".into(),
            agent_id: "a".into(),
            connect_timeout: Duration::from_millis(10),
            backoff_initial: Duration::from_millis(1),
            backoff_max: Duration::from_millis(5),
            max_batches: max,
        };
        Exporter::new(cfg, v1::Hello::default(), 1)
    }

    #[test]
    fn bounded_backlog_drops_oldest_and_reports_it() {
        let mut e = exporter(2);
        for _ in 0..3 {
            e.enqueue(v1::Batch::default(), 7);
        }
        let seqs: Vec<u64> = e.backlog.iter().map(|b| b.sequence).collect();
        assert_eq!(seqs, vec![2, 3]);
        assert_eq!(e.summary.dropped, 1);
        e.enqueue(v1::Batch::default(), 9);
        let last = e.backlog.back().unwrap();
        assert_eq!(last.events.len(), 1);
        assert_eq!(last.events[0].kind, "backlog_dropped");
        assert_eq!(last.events[0].attributes.get("dropped_batches").map(String::as_str), Some("1"));
        // That enqueue dropped sequence 2 in turn.
        assert_eq!(e.backlog.iter().map(|b| b.sequence).collect::<Vec<_>>(), vec![3, 4]);
        assert_eq!(e.summary.dropped, 2);
        e.ack(3);
        assert_eq!(e.backlog.len(), 1);
        assert_eq!(e.summary.acked, 1);
    }

    #[test]
    fn backoff_is_capped() {
        let i = Duration::from_millis(200);
        let m = Duration::from_secs(30);
        assert_eq!(backoff(i, m, 0), Duration::from_millis(200));
        assert_eq!(backoff(i, m, 3), Duration::from_millis(1600));
        assert_eq!(backoff(i, m, 20), m);
    }

    #[tokio::test]
    async fn unreachable_collector_keeps_the_backlog_and_stops_on_shutdown() {
        let e = exporter(100);
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
    }
}
