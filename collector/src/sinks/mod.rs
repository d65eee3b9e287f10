//! Where accepted data goes, behind one interface: a [`Sink`] takes every checked batch of every
//! agent stream and says when it is durable. Two implement it: InfluxDB line protocol over HTTP
//! (`influx`, the system of record, always started: its `[influx]` table also feeds `plan`, the
//! rollups and the dead-letter store) and OTLP metrics (`otlp`, when `[otlp]` is configured).
//!
//! **A new sink** is one folder, `sinks/<name>/`, and one registration: its entry in [`registry`]
//! (a [`Registration`]: its TOML table and the function that reads it into a [`SinkConfig`]). The
//! configuration then reads its table (unknown keys refused, problems named `<name>.<key>`), the
//! server starts it with the others, ingest hands it every Hello and batch, the Ack waits for it
//! when its [`Acks`] say so, and its counters are on the metrics page ([`SinkMetrics`]). The
//! README's recipe says it step by step; `collector/tests/new_sink.rs` keeps it true.

pub mod influx;
pub mod otlp;
pub mod readiness;
pub mod rows;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tokio::sync::watch;
pub use tonic::async_trait;
use wattflip_infra::telemetry::Text;
use wattflip_infra::tomlcfg::Loader;
use wattflip_proto::domain::{Batch, Hello};
use wattflip_proto::encoder::BudgetTag;
use wattflip_proto::lineproto::Point;
use wattflip_proto::schema::{HostTags, ThrottleEvent};

/// What an agent's Ack waits for from a sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// The Ack waits until the batch is stored (or kept aside) here; a sink that is down holds up
    /// every Ack, which is back-pressure to the agents.
    Wait,
    /// Nobody waits: the sink keeps its own bounded queue and counts what it drops.
    BestEffort,
}

/// The sink has stopped (the collector is stopping): the batch stays unacknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the sink has stopped (collector shutting down)")]
pub struct SinkStopped;

/// One checked batch of one agent, as every sink receives it.
pub struct Delivery<'a> {
    /// The agent's points, checked (an invalid point is already left out).
    pub batch: &'a Batch,
    /// The `budget` tag of the host's power tier, when it has one.
    pub budget: Option<&'a BudgetTag>,
    /// The collector's own points for this batch: `point_rejected` events and the analyses'.
    pub derived: &'a [Point],
    /// The throttling episodes the batch ended or began (also among `derived`, as points).
    pub episodes: &'a [ThrottleEvent],
}

/// What one sink made of a batch's agent points once it is durable there.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Account {
    /// Agent points stored; None when the sink does not account point by point (its refusals are
    /// on its own counters only).
    pub stored: Option<u64>,
    /// Agent points refused and kept aside (dead-lettered), by class.
    pub dead_lettered: BTreeMap<&'static str, u64>,
}

/// Completes once the batch is durable in the sink; `Err` when the sink stopped first.
pub type Receipt = Pin<Box<dyn Future<Output = Result<Account, SinkStopped>> + Send>>;

/// Points a sink could not encode and left out: the agent's (reported in the Ack as rejected
/// `unencodable`) and the collector's own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unencodable {
    pub agent: u64,
    pub derived: u64,
}

/// A batch queued on one sink.
pub struct Queued {
    /// What the Ack waits for (None from a best-effort sink).
    pub receipt: Option<Receipt>,
    pub unencodable: Unencodable,
}

/// One output of the collector, shared by every stream.
pub trait Sink: Send + Sync {
    /// Its name, as in its TOML table and the logs.
    fn name(&self) -> &'static str;
    /// Whether the agents' Acks wait for it.
    fn acks(&self) -> Acks;
    /// Whether its store answers now ([`readiness::Readiness`]): the server watches it and
    /// reports the Ingest service NOT_SERVING on the gRPC health service while a sink the Acks
    /// wait for is not ready, SERVING again once it is.
    fn ready(&self) -> bool {
        true
    }
    /// Its side of one agent's stream, opened after the agent's Hello was accepted.
    fn open(&self, agent: &Arc<str>, tags: &HostTags) -> Box<dyn SinkStream>;
    /// Its counters, rendered on the metrics page (held there without holding the sink).
    fn metrics(&self) -> Arc<dyn SinkMetrics>;
}

/// A sink's side of one agent's stream (per-stream state such as an encoder lives here).
#[async_trait]
pub trait SinkStream: Send + Sync {
    /// The agent's Hello (its inventory): queued, never waited for.
    async fn hello(&self, hello: &Hello) -> Result<Unencodable, SinkStopped>;
    /// Queues one batch; waits when the sink is saturated (back-pressure).
    async fn write(&self, batch: &Delivery<'_>) -> Result<Queued, SinkStopped>;
}

/// A sink's counters on the metrics page (`GET /metrics`).
pub trait SinkMetrics: Send + Sync {
    fn render(&self, page: &mut Text);
}

/// A running sink and its task, which ends once it has drained after the stop signal.
pub struct Started {
    pub sink: Arc<dyn Sink>,
    pub task: tokio::task::JoinHandle<()>,
}

/// A sink's checked configuration (its TOML table), ready to start.
pub trait SinkConfig: Debug + Send + Sync + std::any::Any {
    /// One line for `check-config`.
    fn describe(&self) -> String;
    /// Starts the sink; it stops when `stop` turns true.
    fn start(&self, stop: watch::Receiver<bool>) -> Started;
}

/// How the configuration finds a sink: its TOML table and the function that reads it.
#[derive(Clone, Copy)]
pub struct Registration {
    /// The table's name (`otlp` for `[otlp]`).
    pub section: &'static str,
    /// Takes the table from the loader (`Loader::take`) and checks it, recording every problem
    /// as `<section>.<key>`; None when the table is absent or unusable.
    pub configure: fn(&mut Loader) -> Option<Arc<dyn SinkConfig>>,
}

/// The sinks the configuration may start, besides InfluxDB (always on): a new sink adds its
/// entry here.
pub fn registry() -> Vec<Registration> {
    vec![otlp::sink::REGISTRATION]
}

/// The configured sinks, in registration order.
#[derive(Debug, Clone, Default)]
pub struct Configured(pub Vec<Arc<dyn SinkConfig>>);

impl Configured {
    /// The configuration of the sink of type `T`, when it is configured.
    pub fn get<T: SinkConfig>(&self) -> Option<&T> {
        self.0.iter().find_map(|c| (c.as_ref() as &dyn std::any::Any).downcast_ref::<T>())
    }
}

impl PartialEq for Configured {
    /// Two lists are equal when they configure the same sinks alike (their checked forms print
    /// the same).
    fn eq(&self, other: &Self) -> bool {
        format!("{:?}", self.0) == format!("{:?}", other.0)
    }
}
