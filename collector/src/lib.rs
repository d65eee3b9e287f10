//! wattflip collector: receives agent streams over gRPC (`service/`), writes InfluxDB
//! (`sinks/influx/`), and computes fleet analyses (`analysis/`; `sources`: cross-source
//! validation, a pure API not yet wired into ingest). `main.rs` only parses flags, loads the
//! config and calls [`service::server::serve`].

pub mod analysis;
pub mod config;
pub mod plan;
pub mod service;
pub mod sinks;
pub mod sources;
pub mod telemetry;
