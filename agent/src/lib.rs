//! wattflip agent: `sensors/` (power and temperature sources), `drives/` (storage inventory),
//! `export/` (streaming to the collector), `runtime` (the sampling loop). `main.rs` only parses
//! the command line and calls into these.

pub mod config;
pub mod drives;
pub mod energy;
pub mod export;
pub mod probes;
pub mod report;
pub mod runtime;
pub mod sampler;
pub mod schedule;
pub mod sensors;
pub mod telemetry;
