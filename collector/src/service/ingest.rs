//! `Ingest.Stream`: one task per agent connection. The first message must be a `Hello`, within
//! `limits.hello_timeout` (`deadline_exceeded` otherwise), whose agent id is the one the client
//! certificate vouches for (mutual TLS; `permission_denied` otherwise); each `Batch` must carry that
//! id too, passes the agent's rate limit (`resource_exhausted`), and is checked point by point at
//! this boundary: an invalid point is left out alone, counted by rule (metric
//! `points_rejected_total`) and reported in an `event` of kind `point_rejected` naming the field,
//! value and rule, written with the batch. The rest is turned into points by the shared schema,
//! queued on the writer, and acknowledged in order once every line is stored or dead-lettered; the
//! Ack says how many points were stored, rejected and dead-lettered, by reason. A sequence already
//! made durable (per agent id and stream epoch, so a new spool's reused numbers are new data) is
//! acknowledged as a duplicate without being written again.
//! Power points of the scopes of their host's tier get the `budget` tag (`budget.rs`: decided
//! from the agent's `run` Hello, else from the scopes its points show).
//! Every batch also feeds the fleet-wide throttling detector (`analysis::throttle`, shared by all
//! streams so its state survives reconnects, sharded by host so streams of different hosts never
//! wait for each other) and the energy-proportionality analysis; their points are written with
//! the batch.
//! Ingest knows its sinks only through `crate::sinks::Sink`: each accepted stream opens its side of
//! every sink after the Hello, each batch is queued on every sink in order (InfluxDB first), and
//! the Ack waits for the sinks whose `Acks` say so (an optional OTLP sink is not waited for;
//! docs/deployment.md, *Two sinks*) and reports their account of the agent's points.

use crate::analysis::sources;
use crate::analysis::throttle::Sharded;
use crate::service::budget::Tiers;
use crate::service::conns::{Conns, StreamOnConn};
use crate::service::guard::{Dedup, LogGate, RateLimiter};
use crate::service::rejections::{rejection_events, Skew};
use crate::service::revocation::Revocation;
pub use crate::service::stats::IngestStats;
use crate::sinks::{Acks, Delivery, Receipt, Sink, SinkStopped, SinkStream, Unencodable};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::adapters::Map;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};
use wattflip_infra::ratelimit::Limited;
use wattflip_proto::domain::{convert_batch_points_within, Hello};
use wattflip_proto::lineproto::Point;
use wattflip_proto::schema::{throttle_event_point, HostTags, ThrottleEvent};
use wattflip_proto::v1::{self, agent_message::Kind, ingest_server::Ingest, Ack, AgentMessage};

/// How often a WARN that can repeat per batch or per stream is written at most (the line then says
/// how many were suppressed; the counters count every one).
const WARN_PERIOD: Duration = Duration::from_secs(10);

/// The status every stream ends with when the collector stops or its writer is gone.
const SHUTTING_DOWN: &str = "collector is shutting down; resend unacknowledged batches";

/// At most one WARN about a stream's left-out points per this interval.
const REJECTION_WARN_EVERY: Duration = Duration::from_secs(10);

/// Metadata key on an `invalid_argument` status that names the rejected batch.
pub const REJECTED_SEQUENCE: &str = "wattflip-rejected-sequence";

/// How streams learn who is calling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdentitySource {
    /// Mutual TLS: the verified client certificate names the agent.
    Certificate,
    /// Plaintext loopback demo mode: the Hello's word is taken.
    Hello,
}

pub struct IngestService {
    /// What every stream shares (each gets a clone).
    ctx: Ctx,
    identity: IdentitySource,
    max_streams: u64,
    conns: Option<Arc<Conns>>,
}

impl IngestService {
    /// Streams deliver every batch to `sinks`, in this order (the server puts InfluxDB first).
    pub fn new(sinks: Vec<Arc<dyn Sink>>, stats: Arc<IngestStats>, identity: IdentitySource, rate: RateLimiter, dedup: Dedup) -> Self {
        let ctx = Ctx {
            sinks: sinks.into(),
            stats,
            rate: Arc::new(rate),
            dedup: Arc::new(dedup),
            throttle: Arc::default(),
            sources: Arc::default(),
            tiers: Arc::default(),
            hello_timeout: crate::config::DEFAULT_HELLO_TIMEOUT,
            skew: Skew { ahead: crate::config::DEFAULT_MAX_TIME_AHEAD, behind: crate::config::DEFAULT_MAX_TIME_BEHIND },
            stop: tokio::sync::watch::channel(false).1,
            revocation: None,
        };
        IngestService { ctx, identity, max_streams: u64::MAX, conns: None }
    }

    /// Refuses revoked agents (`tls.crl_file`, `tls.deny_file`) at the start of a stream and at
    /// every batch, so that a revocation ends the streams already open.
    pub fn with_revocation(mut self, revocation: Option<Arc<Revocation>>) -> Self {
        self.ctx.revocation = revocation;
        self
    }

    /// When `stop` turns true, every stream ends with `unavailable` after acknowledging what it
    /// has queued (the collector is stopping).
    pub fn with_stop(mut self, stop: tokio::sync::watch::Receiver<bool>) -> Self {
        self.ctx.stop = stop;
        self
    }

    /// Tells `conns` which connections have a stream open (the others are closed when idle).
    pub fn with_conns(mut self, conns: Arc<Conns>) -> Self {
        self.conns = Some(conns);
        self
    }

    /// Points stamped more than `ahead` after or `behind` before the collector's clock are
    /// refused (`limits.max_time_ahead`, `limits.max_time_behind`).
    pub fn with_time_skew(mut self, ahead: Duration, behind: Duration) -> Self {
        self.ctx.skew = Skew { ahead, behind };
        self
    }

    /// At most `n` streams at once; one more is refused with `resource_exhausted` naming the limit
    /// (the server sizes it from the open-file limit).
    pub fn with_max_streams(mut self, n: u64) -> Self {
        self.max_streams = n;
        self
    }

    /// A stream that sends no Hello within `t` is closed (`limits.hello_timeout`).
    pub fn with_hello_timeout(mut self, t: Duration) -> Self {
        self.ctx.hello_timeout = t;
        self
    }
}

/// What the acknowledging task does next, in arrival order.
enum Pending {
    /// Acknowledge `seq` once every receipt completes, then remember it as durable under `key`
    /// (agent id and stream epoch); `rejected` counts the points the checks left out, by rule.
    Ack {
        seq: u64,
        /// The sinks the Ack waits for, in sink order.
        receipts: Vec<Receipt>,
        key: Arc<str>,
        rejected: BTreeMap<&'static str, u64>,
    },
    /// A batch already durable: acknowledged as a duplicate, nothing written.
    Duplicate {
        seq: u64,
    },
    Fail(Status),
}

/// The shared state a stream's tasks use.
#[derive(Clone)]
struct Ctx {
    sinks: Arc<[Arc<dyn Sink>]>,
    stats: Arc<IngestStats>,
    rate: Arc<RateLimiter>,
    dedup: Arc<Dedup>,
    throttle: Arc<Sharded>,
    sources: Arc<sources::Sharded>,
    tiers: Arc<Tiers>,
    hello_timeout: Duration,
    skew: Skew,
    stop: tokio::sync::watch::Receiver<bool>,
    revocation: Option<Arc<Revocation>>,
}

#[tonic::async_trait]
impl Ingest for IngestService {
    /// Channel items are boxed: a channel allocates its slots 32 at a time, and at one stream per
    /// agent 32 unboxed `Result<Ack, Status>` were ~4 KiB per stream (heaptrack, docs/benchmarks.md).
    type StreamStream = Map<ReceiverStream<Box<Result<Ack, Status>>>, fn(Box<Result<Ack, Status>>) -> Result<Ack, Status>>;

    async fn stream(&self, req: Request<Streaming<AgentMessage>>) -> Result<Response<Self::StreamStream>, Status> {
        let on_conn = self.conns.as_ref().and_then(|c| c.stream(req.remote_addr()));
        let stats = &self.ctx.stats;
        let peer = req.remote_addr().map(|a| a.to_string()).unwrap_or_else(|| "unknown peer".into());
        let certified =
            crate::service::revocation::certified(self.identity == IdentitySource::Certificate, self.ctx.revocation.as_deref(), stats, &req, &peer)?;
        let inbound = req.into_inner();
        let (out_tx, out_rx) = mpsc::channel(32);
        // At most 64 batches in flight per agent: beyond that the stream stops being read,
        // which is back-pressure through HTTP/2 flow control to the agent.
        let (pend_tx, pend_rx) = mpsc::channel(64);
        stats.streams_opened.fetch_add(1, Ordering::Relaxed);
        let open = stats.streams_open.fetch_add(1, Ordering::Relaxed) + 1;
        let slot = OpenStream { stats: stats.clone(), _conn: on_conn };
        if open > self.max_streams {
            // Refused with a status rather than left to fail on a descriptor later (a hang).
            stats.agents_rejected.inc("stream_limit");
            static LIMIT_WARN: Limited = Limited::new(WARN_PERIOD);
            if let Some(suppressed) = LIMIT_WARN.hit(std::time::Instant::now()) {
                tracing::warn!(%peer, limit = self.max_streams, suppressed,
                    "refused a stream: the collector holds as many streams as its open-file limit allows ({suppressed} more refusals suppressed in the last {WARN_PERIOD:?}; all counted in wattflip_collector_agents_rejected_total)");
            }
            return Err(Status::resource_exhausted(format!(
                "the collector holds {} streams, as many as its open-file limit allows; retry later or connect to another collector (collector.urls)",
                self.max_streams
            )));
        }
        tokio::spawn(acknowledge(pend_rx, out_tx, stats.clone(), self.ctx.dedup.clone()));
        tokio::spawn(receive(inbound, pend_tx, self.ctx.clone(), peer, certified, slot));
        let unbox: fn(Box<Result<Ack, Status>>) -> Result<Ack, Status> = |b| *b;
        Ok(Response::new(ReceiverStream::new(out_rx).map(unbox)))
    }
}

async fn acknowledge(mut pending: mpsc::Receiver<Box<Pending>>, out: mpsc::Sender<Box<Result<Ack, Status>>>, stats: Arc<IngestStats>, dedup: Arc<Dedup>) {
    while let Some(p) = pending.recv().await {
        let msg = match *p {
            Pending::Ack { seq, receipts, key, rejected } => match settle(receipts).await {
                Ok((stored, dead)) => {
                    dedup.record(&key, seq);
                    stats.batches_acked.fetch_add(1, Ordering::Relaxed);
                    for (class, n) in &dead {
                        stats.points_dead_lettered.add(class, *n);
                    }
                    stats.points_stored.fetch_add(stored, Ordering::Relaxed);
                    Ok(Ack {
                        durable_sequence: seq,
                        points_stored: stored,
                        points_rejected: rejected.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
                        points_dead_lettered: dead.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
                        duplicate: false,
                    })
                }
                Err(_) => Err(Status::unavailable(SHUTTING_DOWN)),
            },
            Pending::Duplicate { seq } => {
                stats.batches_acked.fetch_add(1, Ordering::Relaxed);
                Ok(Ack { durable_sequence: seq, duplicate: true, ..Default::default() })
            }
            Pending::Fail(s) => Err(s),
        };
        let stop = msg.is_err();
        if out.send(Box::new(msg)).await.is_err() || stop {
            return;
        }
    }
}

/// The batch's agent points stored (the fewest any accounting sink stored) and dead-lettered
/// (summed over the sinks, by class) once every receipt completed; Err when a sink stopped first
/// (the batch stays unacknowledged).
async fn settle(receipts: Vec<Receipt>) -> Result<(u64, BTreeMap<&'static str, u64>), SinkStopped> {
    let (mut stored, mut dead) = (None::<u64>, BTreeMap::new());
    for r in receipts {
        let account = r.await?;
        if let Some(s) = account.stored {
            stored = Some(stored.map_or(s, |m| m.min(s)));
        }
        for (class, n) in account.dead_lettered {
            *dead.entry(class).or_default() += n;
        }
    }
    Ok((stored.unwrap_or(0), dead))
}

/// Counts the points a sink could not encode: the agent's are also rejected (`unencodable`).
fn unencodable(stats: &IngestStats, u: Unencodable, rejected: &mut BTreeMap<&'static str, u64>) {
    stats.points_unencodable.fetch_add(u.agent + u.derived, Ordering::Relaxed);
    if u.agent > 0 {
        stats.points_rejected.add("unencodable", u.agent);
        *rejected.entry("unencodable").or_default() += u.agent;
    }
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

fn deny(stats: &IngestStats, reason: &str, msg: String) -> Pending {
    stats.agents_rejected.inc(reason);
    tracing::warn!("refused: {msg}");
    Pending::Fail(Status::permission_denied(msg))
}

/// One open stream, counted in `streams_open` while it lives, and on its connection (which is not
/// idle while it has one).
struct OpenStream {
    stats: Arc<IngestStats>,
    _conn: Option<StreamOnConn>,
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.stats.streams_open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What one stream knows of its agent after the Hello.
struct Agent {
    hello: Hello,
    id: Arc<str>,
    /// Durable sequences are remembered per spool incarnation: a new epoch's numbers are new data.
    dedup_key: Arc<str>,
    tags: HostTags,
    /// Its side of every sink, in sink order, with what the Ack waits for.
    sinks: Vec<(Acks, Box<dyn SinkStream>)>,
    /// The client certificate's serial number (empty in the plaintext mode).
    serial: Vec<u8>,
}

/// Reads and checks the Hello; on a refusal, sends it and returns None.
async fn read_hello(
    inbound: &mut Streaming<AgentMessage>,
    pending: &mpsc::Sender<Box<Pending>>,
    ctx: &Ctx,
    peer: &str,
    certified: Option<&str>,
) -> Option<Agent> {
    let stats = &ctx.stats;
    let hello_timeout = ctx.hello_timeout;
    let first = match tokio::time::timeout(hello_timeout, inbound.message()).await {
        Ok(m) => m,
        Err(_) => {
            stats.agents_rejected.inc("hello_timeout");
            tracing::warn!(%peer, "closed a stream that sent no Hello within {hello_timeout:?} (limits.hello_timeout)");
            let m = format!("no Hello within {hello_timeout:?}; a stream starts with a Hello");
            let _ = pending.send(Box::new(Pending::Fail(Status::deadline_exceeded(m)))).await;
            return None;
        }
    };
    let refuse = |p: Pending| async move {
        let _ = pending.send(Box::new(p)).await;
        None
    };
    let hello = match first {
        Ok(Some(AgentMessage { kind: Some(Kind::Hello(h)) })) => h,
        Ok(Some(_)) => return refuse(reject(stats, None, "the first message of a stream must be a Hello".into())).await,
        Ok(None) => return None,
        Err(e) if crate::service::oversized::is_oversized(&e) => {
            return refuse(Pending::Fail(crate::service::oversized::refuse_hello(&stats.agents_rejected, peer, &e))).await;
        }
        Err(e) => {
            tracing::debug!(%peer, "stream ended before Hello: {e}");
            return None;
        }
    };
    let hello = match Hello::try_from(hello) {
        Ok(h) => h,
        Err(e) => return refuse(reject(stats, None, format!("{e}"))).await,
    };
    if let Some(id) = certified.filter(|id| *id != hello.agent_id) {
        let m = format!("hello.agent_id: `{}` is not the agent id of the client certificate (`{id}`)", hello.agent_id);
        return refuse(deny(stats, "hello_agent_id", m)).await;
    }
    let tags = HostTags { host: hello.agent_id.clone(), labels: hello.labels.clone() };
    let id: Arc<str> = Arc::from(hello.agent_id.as_str());
    Some(Agent {
        sinks: ctx.sinks.iter().map(|s| (s.acks(), s.open(&id, &tags))).collect(),
        id,
        dedup_key: Arc::from(format!("{}#{}", hello.agent_id, hello.stream_epoch)),
        tags,
        hello,
        serial: Vec::new(),
    })
}

async fn receive(
    mut inbound: Streaming<AgentMessage>,
    pending: mpsc::Sender<Box<Pending>>,
    ctx: Ctx,
    peer: String,
    certified: Option<(String, Vec<u8>)>,
    _open: OpenStream,
) {
    let Some(mut agent) = read_hello(&mut inbound, &pending, &ctx, &peer, certified.as_ref().map(|(id, _)| id.as_str())).await else {
        return;
    };
    agent.serial = certified.map(|(_, s)| s).unwrap_or_default();
    let hello = &agent.hello;
    tracing::info!(agent = %hello.agent_id, %peer, version = %hello.agent_version, "agent connected");
    ctx.throttle.lock(&hello.agent_id).set_inventory(&hello.agent_id, &hello.inventory);
    ctx.tiers.hello(hello);
    // Inventory points need no acknowledgement: the agent sends a Hello on every connection.
    for (_, sink) in &agent.sinks {
        match sink.hello(hello).await {
            Ok(u) => unencodable(&ctx.stats, u, &mut BTreeMap::new()),
            Err(SinkStopped) => return,
        }
    }
    let mut last_seq = 0u64;
    // One WARN about left-out points per stream and interval: an agent whose clock is off by a
    // year would otherwise log every batch (each point is still counted and in an event).
    let mut warn = LogGate::new(REJECTION_WARN_EVERY);
    let mut stop = ctx.stop.clone();
    loop {
        let next = tokio::select! {
            m = inbound.message() => m,
            () = stopped(&mut stop) => {
                tracing::info!(agent = %hello.agent_id, "ending the stream: the collector is stopping");
                let _ = pending.send(Box::new(Pending::Fail(Status::unavailable(SHUTTING_DOWN)))).await;
                return;
            }
        };
        let msg = match next {
            Ok(Some(m)) => m,
            Ok(None) => break,
            Err(e) if e.code() == tonic::Code::OutOfRange => {
                // tonic's decoder refused a message above limits.max_message_bytes.
                let m = format!("{}; the collector's limits.max_message_bytes refuses it", e.message());
                ctx.stats.agents_rejected.inc("oversized_message");
                tracing::warn!(agent = %hello.agent_id, "{m}");
                let _ = pending.send(Box::new(Pending::Fail(Status::resource_exhausted(m)))).await;
                return;
            }
            Err(e) => {
                tracing::info!(agent = %hello.agent_id, "stream ended: {e}");
                break;
            }
        };
        let batch = match msg.kind {
            Some(Kind::Batch(b)) => b,
            Some(Kind::Hello(_)) | None => {
                let _ = pending.send(Box::new(reject(&ctx.stats, None, "only the first message of a stream may be a Hello".into()))).await;
                return;
            }
        };
        // Ok: acknowledge in order and go on; Err: the stream ends with it.
        let (next, stop) = match on_batch(&ctx, &agent, batch, &mut last_seq, &mut warn).await {
            Ok(p) => (p, false),
            Err(p) => (p, true),
        };
        if pending.send(Box::new(next)).await.is_err() || stop {
            return;
        }
    }
}

/// Completes when `stop` turns true; never when its sender is gone without doing so.
pub(crate) async fn stopped(stop: &mut tokio::sync::watch::Receiver<bool>) {
    if stop.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Checks, converts, analyses and queues one batch; `Ok` with what to acknowledge, `Err` with the
/// refusal that ends the stream.
async fn on_batch(ctx: &Ctx, agent: &Agent, batch: v1::Batch, last_seq: &mut u64, warn: &mut LogGate) -> Result<Pending, Pending> {
    let (stats, hello) = (&ctx.stats, &agent.hello);
    stats.batches_received.fetch_add(1, Ordering::Relaxed);
    let seq = batch.sequence;
    if seq <= *last_seq {
        let m = format!("batch.sequence: {seq} is not above the previous {last_seq}; sequences must increase strictly");
        return Err(reject(stats, Some(seq), m));
    }
    if batch.agent_id != hello.agent_id {
        let m = format!("batch.agent_id: `{}` in batch {seq} is not this stream's agent `{}`", batch.agent_id, hello.agent_id);
        return Err(deny(stats, "batch_agent_id", m));
    }
    // Revoked while the stream was open (a reloaded tls.crl_file or tls.deny_file).
    if let Some((reason, m)) = ctx.revocation.as_ref().and_then(|r| r.refusal(&agent.id, &agent.serial)) {
        return Err(deny(stats, reason, m));
    }
    if ctx.dedup.is_durable(&agent.dedup_key, seq) {
        // Written before, but the acknowledgement was lost: acknowledge, do not rewrite.
        stats.batches_duplicate.fetch_add(1, Ordering::Relaxed);
        *last_seq = seq;
        return Ok(Pending::Duplicate { seq });
    }
    let points = wattflip_proto::domain::wire_points(&batch);
    if !ctx.rate.admit(&agent.id, points, tokio::time::Instant::now()) {
        stats.batches_rate_limited.fetch_add(1, Ordering::Relaxed);
        let m = format!("agent `{}` exceeds its rate limit (limits.agent_points_per_second); back off and resend from batch {seq}", agent.id);
        tracing::warn!("{m}");
        return Err(Pending::Fail(Status::resource_exhausted(m)));
    }
    let converted = match convert_batch_points_within(&hello.agent_id, batch, ctx.skew.window()) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(agent = %hello.agent_id, seq, "rejected batch: {e}");
            return Err(reject(stats, Some(seq), format!("batch {seq}: {e}")));
        }
    };
    *last_seq = seq;
    let batch = converted.batch;
    stats.samples_received.fetch_add((batch.power.len() + batch.temperature.len()) as u64, Ordering::Relaxed);
    let mut rejected: BTreeMap<&'static str, u64> = BTreeMap::new();
    for r in &converted.rejected {
        stats.points_rejected.inc(r.rule.as_str());
        *rejected.entry(r.rule.as_str()).or_default() += 1;
    }
    if let Some(first) = converted.rejected.first() {
        if let Some(quiet) = warn.open(tokio::time::Instant::now()) {
            tracing::warn!(agent = %hello.agent_id, seq, rejected = converted.rejected.len(), batches_not_logged = quiet,
                "left out invalid points, stored the rest of the batch; first: {first}");
        }
    }
    let tier = ctx.tiers.tag_for(&hello.agent_id, batch.power.iter().map(|s| (s.scope.as_str(), s.time.0)));
    let mut derived = rejection_events(&converted.rejected, seq, &agent.tags);
    let (analysed, episodes) = analyses(ctx, agent, &batch);
    derived.extend(analysed);
    let delivery = Delivery { batch: &batch, budget: tier.as_deref(), derived: &derived, episodes: &episodes };
    let mut receipts = Vec::with_capacity(agent.sinks.len());
    for (acks, sink) in &agent.sinks {
        let Ok(queued) = sink.write(&delivery).await else {
            return Err(Pending::Fail(Status::unavailable(SHUTTING_DOWN)));
        };
        unencodable(stats, queued.unencodable, &mut rejected);
        if *acks == Acks::Wait {
            receipts.extend(queued.receipt);
        }
    }
    Ok(Pending::Ack { seq, receipts, key: agent.dedup_key.clone(), rejected })
}

/// The analyses' points for one batch: throttling episodes (under this host's shard of the
/// detector only) and the load ladder's proportionality; and the episodes (for the sinks that
/// take them as such: OTLP).
fn analyses(ctx: &Ctx, agent: &Agent, batch: &wattflip_proto::domain::Batch) -> (Vec<Point>, Vec<ThrottleEvent>) {
    let hello = &agent.hello;
    let (episodes, late) = {
        let mut d = ctx.throttle.lock(&hello.agent_id);
        let before = d.late_readings;
        let e = d.observe_batch(&hello.agent_id, batch);
        (e, d.late_readings - before)
    };
    if late > 0 {
        ctx.stats.throttle_late_readings.fetch_add(late, Ordering::Relaxed);
        // Once per batch while agents backfill: one line per period, the rest counted in it.
        static LATE_WARN: Limited = Limited::new(WARN_PERIOD);
        if let Some(suppressed) = LATE_WARN.hit(std::time::Instant::now()) {
            tracing::warn!(agent = %hello.agent_id, late, suppressed,
                "readings older than the throttling detector's retention were counted, not placed ({suppressed} more such warnings suppressed in the last {WARN_PERIOD:?}; all counted in wattflip_collector_throttle_late_readings_total)");
        }
    }
    let mut points = Vec::new();
    for e in &episodes {
        ctx.stats.throttle_events.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(agent = %hello.agent_id, device = %e.device, trigger = %e.trigger, ongoing = e.ongoing,
            throughput_drop_pct = ?e.throughput_drop_pct, power_drop_pct = ?e.power_drop_pct, "thermal throttling");
        points.push(throttle_event_point(e, &agent.tags));
    }
    // A load ladder arrives whole in one batch (the probe sends all its runs at once).
    points.extend(crate::analysis::proportionality::points(&batch.probe_runs, &agent.tags, &hello.inventory));
    for f in ctx.sources.observe(&hello.agent_id, &batch.power) {
        points.extend(f.points(&agent.tags));
    }
    (points, episodes)
}

/// Convenience for tests and tools: the proto message for a batch.
pub fn batch_message(b: v1::Batch) -> AgentMessage {
    AgentMessage { kind: Some(Kind::Batch(b)) }
}
