//! InfluxDB sink: the writer task (batching, gzip, retries, acknowledgement on durability). Line
//! encoding and the schema live in `wattflip_proto::{lineproto, schema}`, shared with the agent.

pub mod writer;

#[cfg(test)]
mod fake_server;
#[cfg(test)]
mod writer_tests;

pub use writer::{spawn, spawn_null, SinkStats, WriterHandle};
