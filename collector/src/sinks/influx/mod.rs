//! InfluxDB sink: its configuration (`config`, composed by the service's), the [`Sink`](crate::sinks::Sink)
//! implementation (`sink`: per-stream encoding, the Ack's account, the metrics), the writer task
//! (batching, gzip, retries, acknowledgement on durability, agents isolated from each other's
//! refusals; its requests in `endpoint`, partial writes read by `partial`) and the dead-letter store of the lines
//! InfluxDB refused (`dead_letter`) and its replay (`replay`); the stored tiers' names (`tiers`). Line
//! encoding and the schema live in `wattflip_proto::{lineproto, schema}`, shared with the agent.

pub mod config;
pub mod dead_letter;
pub(crate) mod endpoint;
pub mod observer;
pub(crate) mod partial;
pub mod refusal;
pub mod replay;
pub mod sink;
pub mod tiers;
pub mod writer;

#[cfg(test)]
mod fake_server;
#[cfg(test)]
mod writer_tests;

pub use sink::InfluxSink;
pub use writer::{spawn, spawn_null, spawn_observed, JobOutcome, SinkStats, StoredLines, WriterHandle};
