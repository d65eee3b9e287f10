//! wattflip agent, laid out so that imports run one way, top to bottom (agent/tests/layout.rs
//! keeps it so):
//!
//! - `app/`: one module per command (`run`, `schedule`, `probe`, `governor`, `trace`,
//!   `inventory`, `report`) and the `session` with a collector (hello, exporter settings, send).
//!   Only `app/` creates the command runner, the [`clock::Clock`] and tokio runtimes.
//! - `config`: the agent's TOML file, composed of each component's own config type.
//! - `report/`: what people read: the probe result folder and the HTML report.
//! - `probes/`: uFLIP probes, the load ladder, calibration, pauses, the governor's power sweep.
//! - `drives/` (storage inventory, SMART, NVMe power states), `energy/` (per-run energy, live
//!   power recording, imported traces), `export/` (backlog, spool, gRPC, agent metrics).
//! - `sensors/` (power, temperature and electrical sources, the fast power sampler), `clock`,
//!   `events`.
//!
//! `main.rs` only parses the command line and calls into `app/`.

pub mod app;
pub mod clock;
pub mod config;
pub mod drives;
pub mod energy;
pub mod events;
pub mod export;
pub mod probes;
pub mod report;
pub mod sensors;
