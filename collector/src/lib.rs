//! wattflip collector: receives agent streams over gRPC (`service/`), writes InfluxDB
//! (`sinks/influx/`), and computes fleet analyses (`analysis/`: throttling,
//! energy proportionality, cross-source validation) and keeps raw retention and 1-minute rollups
//! (`rollup/`). `main.rs` only parses flags, loads the
//! config and calls [`service::server::serve`].

pub mod analysis;
pub mod config;
pub mod plan;
pub mod rollup;
pub mod service;
pub mod sinks;
