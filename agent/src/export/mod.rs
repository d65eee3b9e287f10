//! Getting data off the host. `grpc` streams batches to the collector(s) with acknowledgements;
//! `backlog` holds them until acknowledged, in memory or in the durable disk `spool` (its files'
//! format and recovery in `segment`, its one-owner lock in `spool_lock`); `telemetry`
//! counts what happens for `GET /metrics`; `hello_fit` shrinks a Hello the collector refused as
//! too large; `loss` keeps counts of loss while the spool fails; `config` checks `[collector]` and
//! `[spool]`; `totals` stamps each counter window with its zone's running energy total as the
//! batch is stored. A new sink gets a module here, takes a `Box<dyn Backlog>` like `grpc` does, its settings in
//! `config`, and is started by `app::run` and `app::session`.

pub mod backlog;
pub mod config;
pub mod grpc;
pub mod hello_fit;
pub mod loss;
pub mod segment;
pub mod spool;
pub mod spool_lock;
pub mod telemetry;
pub mod totals;
