//! `Ingest.Stream`: one task per agent connection. The first message must be a `Hello`; each
//! `Batch` is checked and converted to domain types at this boundary (bad ones end the stream with
//! `invalid_argument` naming the field and the sequence), turned into points by the shared schema,
//! queued on the InfluxDB writer, and acknowledged in order once InfluxDB holds all of it. Every
//! batch also feeds the fleet-wide throttling detector (`analysis::throttle`, shared by all
//! streams so its state survives reconnects); its events are written with the batch.

use crate::analysis::throttle::ThrottleDetector;
use crate::sinks::influx::WriterHandle;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use wattflip_proto::domain::{convert_batch, Hello};
use wattflip_proto::lineproto::Point;
use wattflip_proto::schema::{batch_points, hello_points, throttle_event_point, HostTags};
use wattflip_proto::v1::{self, agent_message::Kind, ingest_server::Ingest, Ack, AgentMessage};

/// Metadata key on an `invalid_argument` status that names the rejected batch.
pub const REJECTED_SEQUENCE: &str = "wattflip-rejected-sequence";

#[derive(Debug, Default)]
pub struct IngestStats {
    pub streams_opened: AtomicU64,
    pub batches_received: AtomicU64,
    pub batches_acked: AtomicU64,
    pub batches_rejected: AtomicU64,
    pub points_unencodable: AtomicU64,
    pub throttle_events: AtomicU64,
}

pub struct IngestService {
    writer: WriterHandle,
    stats: Arc<IngestStats>,
    throttle: Arc<Mutex<ThrottleDetector>>,
}

impl IngestService {
    pub fn new(writer: WriterHandle, stats: Arc<IngestStats>) -> Self {
        IngestService { writer, stats, throttle: Arc::default() }
    }
}

/// What the acknowledging task does next, in arrival order.
enum Pending {
    Ack(u64, oneshot::Receiver<()>),
    Fail(Status),
}

#[tonic::async_trait]
impl Ingest for IngestService {
    type StreamStream = ReceiverStream<Result<Ack, Status>>;

    async fn stream(&self, req: Request<Streaming<AgentMessage>>) -> Result<Response<Self::StreamStream>, Status> {
        let peer = req.remote_addr().map(|a| a.to_string()).unwrap_or_else(|| "unknown peer".into());
        let inbound = req.into_inner();
        let (out_tx, out_rx) = mpsc::channel(32);
        // At most 64 batches in flight per agent: beyond that the stream stops being read,
        // which is back-pressure through HTTP/2 flow control to the agent.
        let (pend_tx, pend_rx) = mpsc::channel(64);
        self.stats.streams_opened.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(acknowledge(pend_rx, out_tx, self.stats.clone()));
        tokio::spawn(receive(inbound, pend_tx, self.writer.clone(), self.stats.clone(), self.throttle.clone(), peer));
        Ok(Response::new(ReceiverStream::new(out_rx)))
    }
}

async fn acknowledge(
    mut pending: mpsc::Receiver<Pending>,
    out: mpsc::Sender<Result<Ack, Status>>,
    stats: Arc<IngestStats>,
) {
    while let Some(p) = pending.recv().await {
        let msg = match p {
            Pending::Ack(seq, done) => match done.await {
                Ok(()) => {
                    stats.batches_acked.fetch_add(1, Ordering::Relaxed);
                    Ok(Ack { durable_sequence: seq })
                }
                Err(_) => Err(Status::unavailable("collector is shutting down; resend unacknowledged batches")),
            },
            Pending::Fail(s) => Err(s),
        };
        let stop = msg.is_err();
        if out.send(msg).await.is_err() || stop {
            return;
        }
    }
}

fn encode(points: &[Point], stats: &IngestStats) -> Vec<String> {
    let mut lines = Vec::with_capacity(points.len());
    for p in points {
        let mut s = String::new();
        match p.write_line(&mut s) {
            Ok(()) => lines.push(s),
            Err(e) => {
                // Domain checks make this unreachable in practice; count it rather than fail the batch.
                stats.points_unencodable.fetch_add(1, Ordering::Relaxed);
                tracing::error!("dropping an unencodable point: {e}");
            }
        }
    }
    lines
}

fn reject(stats: &IngestStats, seq: Option<u64>, msg: String) -> Pending {
    stats.batches_rejected.fetch_add(1, Ordering::Relaxed);
    let mut status = Status::invalid_argument(msg);
    if let Some(seq) = seq {
        if let Ok(v) = seq.to_string().parse() {
            status.metadata_mut().insert(REJECTED_SEQUENCE, v);
        }
    }
    Pending::Fail(status)
}

async fn receive(
    mut inbound: Streaming<AgentMessage>,
    pending: mpsc::Sender<Pending>,
    writer: WriterHandle,
    stats: Arc<IngestStats>,
    throttle: Arc<Mutex<ThrottleDetector>>,
    peer: String,
) {
    let hello = match inbound.message().await {
        Ok(Some(AgentMessage { kind: Some(Kind::Hello(h)) })) => h,
        Ok(Some(_)) => {
            let _ = pending.send(reject(&stats, None, "the first message of a stream must be a Hello".into())).await;
            return;
        }
        Ok(None) => return,
        Err(e) => {
            tracing::debug!(%peer, "stream ended before Hello: {e}");
            return;
        }
    };
    let hello = match Hello::try_from(hello) {
        Ok(h) => h,
        Err(e) => {
            let _ = pending.send(reject(&stats, None, format!("{e}"))).await;
            return;
        }
    };
    let tags = HostTags { host: hello.agent_id.clone(), labels: hello.labels.clone() };
    tracing::info!(agent = %hello.agent_id, %peer, version = %hello.agent_version, "agent connected");
    lock(&throttle).set_inventory(&hello.agent_id, &hello.inventory);
    // Inventory points need no acknowledgement: the agent sends a Hello on every connection.
    if writer.write(encode(&hello_points(&hello, &tags), &stats)).await.is_err() {
        return;
    }
    let mut last_seq = 0u64;
    loop {
        let msg = match inbound.message().await {
            Ok(Some(m)) => m,
            Ok(None) => break,
            Err(e) => {
                tracing::info!(agent = %hello.agent_id, "stream ended: {e}");
                break;
            }
        };
        let batch = match msg.kind {
            Some(Kind::Batch(b)) => b,
            Some(Kind::Hello(_)) | None => {
                let _ = pending.send(reject(&stats, None, "only the first message of a stream may be a Hello".into())).await;
                return;
            }
        };
        stats.batches_received.fetch_add(1, Ordering::Relaxed);
        let seq = batch.sequence;
        if seq <= last_seq {
            let m = format!("batch.sequence: {seq} is not above the previous {last_seq}; sequences must increase strictly");
            let _ = pending.send(reject(&stats, Some(seq), m)).await;
            return;
        }
        let batch = match convert_batch(&hello.agent_id, batch) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(agent = %hello.agent_id, seq, "rejected batch: {e}");
                let _ = pending.send(reject(&stats, Some(seq), format!("batch {seq}: {e}"))).await;
                return;
            }
        };
        last_seq = seq;
        let mut points = batch_points(&batch, &tags);
        for e in lock(&throttle).observe_batch(&hello.agent_id, &batch) {
            stats.throttle_events.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(agent = %hello.agent_id, device = %e.device, trigger = %e.trigger, ongoing = e.ongoing,
                throughput_drop_pct = ?e.throughput_drop_pct, power_drop_pct = ?e.power_drop_pct, "thermal throttling");
            points.push(throttle_event_point(&e, &tags));
        }
        // A load ladder arrives whole in one batch (the probe sends all its runs at once).
        points.extend(crate::analysis::proportionality::points(&batch.probe_runs, &tags));
        let lines = encode(&points, &stats);
        let Ok(done) = writer.write(lines).await else { return };
        if pending.send(Pending::Ack(seq, done)).await.is_err() {
            return;
        }
    }
}

/// The detector lock; a panic elsewhere must not stop ingestion, so a poisoned lock is taken as is.
fn lock(m: &Mutex<ThrottleDetector>) -> std::sync::MutexGuard<'_, ThrottleDetector> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Convenience for tests and tools: the proto message for a batch.
pub fn batch_message(b: v1::Batch) -> AgentMessage {
    AgentMessage { kind: Some(Kind::Batch(b)) }
}
