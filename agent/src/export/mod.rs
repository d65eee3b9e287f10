//! Getting data off the host. `grpc` streams batches to the collector(s) with acknowledgements;
//! `backlog` holds them until acknowledged, in memory or in the durable disk `spool`. A new
//! transport gets a module here and takes a `Box<dyn Backlog>` like `grpc` does.

pub mod backlog;
pub mod config;
pub mod grpc;
pub mod spool;
pub mod telemetry;
