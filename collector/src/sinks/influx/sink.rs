//! InfluxDB as a [`Sink`]: each stream encodes its agent's points as line protocol (the agent's
//! own first, then the collector's) with the agent's [`BatchEncoder`] and queues them on the
//! writer under the agent's id; the Ack waits until every line is stored or dead-lettered, and its
//! account counts the agent's lines stored and dead-lettered by class. The null writer (`sink =
//! "null"`) is the same sink with nothing behind it.

use crate::sinks::influx::writer::{SinkStats, WriterHandle};
use crate::sinks::rows::{self, Reading::*, Row};
use crate::sinks::{async_trait, Account, Acks, Delivery, Queued, Sink, SinkMetrics, SinkStopped, SinkStream, Unencodable};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use wattflip_infra::telemetry::Text;
use wattflip_proto::domain::Hello;
use wattflip_proto::encoder::BatchEncoder;
use wattflip_proto::lineproto::Point;
use wattflip_proto::schema::{hello_points, HostTags};

/// The InfluxDB sink: the writer's handle and its counters.
pub struct InfluxSink {
    writer: WriterHandle,
    stats: Arc<SinkStats>,
}

impl InfluxSink {
    pub fn new(writer: WriterHandle, stats: Arc<SinkStats>) -> Self {
        InfluxSink { writer, stats }
    }
}

impl Sink for InfluxSink {
    fn name(&self) -> &'static str {
        "influx"
    }

    fn acks(&self) -> Acks {
        Acks::Wait
    }

    fn ready(&self) -> bool {
        self.stats.readiness.ready()
    }

    fn open(&self, agent: &Arc<str>, tags: &HostTags) -> Box<dyn SinkStream> {
        Box::new(InfluxStream { writer: self.writer.clone(), owner: agent.clone(), tags: tags.clone(), encoder: BatchEncoder::new(tags) })
    }

    fn metrics(&self) -> Arc<dyn SinkMetrics> {
        self.stats.clone()
    }
}

struct InfluxStream {
    writer: WriterHandle,
    /// The agent: a refusal of its lines never holds up another agent's.
    owner: Arc<str>,
    tags: HostTags,
    encoder: BatchEncoder,
}

#[async_trait]
impl SinkStream for InfluxStream {
    async fn hello(&self, hello: &Hello) -> Result<Unencodable, SinkStopped> {
        let mut lines = Vec::new();
        let derived = encode(&hello_points(hello, &self.tags), &mut lines);
        // Inventory points need no acknowledgement: the agent sends a Hello on every connection.
        self.writer.write_as(self.owner.clone(), lines).await.map_err(|_| SinkStopped)?;
        Ok(Unencodable { agent: 0, derived })
    }

    async fn write(&self, d: &Delivery<'_>) -> Result<Queued, SinkStopped> {
        let mut lines = Vec::new();
        let errors = self.encoder.encode_tagged(d.batch, &mut lines, d.budget);
        for e in &errors {
            // Domain checks make this unreachable (the ingest_message fuzz target asserts it);
            // counted as a rejected point rather than failing the batch.
            tracing::error!("dropping an unencodable point: {e}");
        }
        let agent_lines = lines.len();
        let derived = encode(d.derived, &mut lines);
        let done = self.writer.write_as(self.owner.clone(), lines).await.map_err(|_| SinkStopped)?;
        let receipt = Box::pin(async move {
            let outcome = done.await.map_err(|_| SinkStopped)?;
            // Lines past the agent's own are the collector's (rejection events, analyses).
            let mut dead: BTreeMap<&'static str, u64> = BTreeMap::new();
            for &(_, class) in outcome.refused.iter().filter(|(i, _)| *i < agent_lines) {
                *dead.entry(class).or_default() += 1;
            }
            let stored = (agent_lines as u64).saturating_sub(dead.values().sum());
            Ok(Account { stored: Some(stored), dead_lettered: dead })
        });
        Ok(Queued { receipt: Some(receipt), unencodable: Unencodable { agent: errors.len() as u64, derived } })
    }
}

/// Appends one line per point to `lines`; returns how many could not be encoded (left out).
fn encode(points: &[Point], lines: &mut Vec<String>) -> u64 {
    lines.reserve(points.len());
    let mut failed = 0;
    for p in points {
        let mut s = String::new();
        match p.write_line(&mut s) {
            Ok(()) => lines.push(s),
            Err(e) => {
                // Domain checks make this unreachable in practice; counted rather than failing the batch.
                failed += 1;
                tracing::error!("dropping an unencodable point: {e}");
            }
        }
    }
    failed
}

impl SinkMetrics for SinkStats {
    /// The `wattflip_collector_lines_*` and `wattflip_collector_influx_*` metrics.
    fn render(&self, t: &mut Text) {
        #[rustfmt::skip]
        const ROWS: &[Row<SinkStats>] = &[
            ("wattflip_collector_lines_written_total", "Line-protocol lines the store accepted.", |k| Counter(k.lines_written.load(Relaxed))),
            ("wattflip_collector_lines_rejected_total", "Lines the store refused as bad data (HTTP 400), all dead-lettered.", |k| Counter(k.lines_rejected.load(Relaxed))),
            ("wattflip_collector_lines_dead_lettered_total", "Lines in the dead-letter store, by class (agent points and the collector's own).", |k| ByLabel("reason", &k.lines_dead_lettered)),
            ("wattflip_collector_influx_requests_total", "Write requests to InfluxDB.", |k| Counter(k.requests.load(Relaxed))),
            ("wattflip_collector_influx_retries_total", "Write requests retried after an error.", |k| Counter(k.retries.load(Relaxed))),
            ("wattflip_collector_influx_databases_created_total", "Databases the writer created after InfluxDB answered 404 database not found.", |k| Counter(k.databases_created.load(Relaxed))),
            ("wattflip_collector_influx_isolations_total", "Refused write requests split by agent, so one agent's refusal does not hold up the others.", |k| Counter(k.isolations.load(Relaxed))),
            ("wattflip_collector_influx_partial_writes_understood_total", "Partial writes (max-values-per-tag, retention) whose dropped lines were found without splitting the request.", |k| Counter(k.partial_writes_understood.load(Relaxed))),
            ("wattflip_collector_influx_write_seconds", "InfluxDB write request latency.", |k| Histogram(&k.write_latency)),
            ("wattflip_collector_influx_ready", "1 unless InfluxDB writes have failed without an answer for 10 s; while 0 the Ingest service is NOT_SERVING on the gRPC health service.", |k| Gauge(u64::from(k.readiness.ready()))),
        ];
        rows::render(t, self, ROWS);
    }
}
