//! wattflip collector: receives agent streams over gRPC (`service/`), writes InfluxDB
//! (`sinks/influx/`), and computes fleet analyses (`analysis/`: throttling,
//! energy proportionality, cross-source validation). `main.rs` only parses flags, loads the
//! config and calls [`service::server::serve`].

pub mod analysis;
pub mod config;
pub mod plan;
pub mod service;
pub mod sinks;
