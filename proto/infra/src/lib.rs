//! Process infrastructure shared by the agent and the collector binaries, kept out of the wire crate
//! (`wattflip-proto`) so that one is the wire format only.
//!
//! - [`tls`]: the one rustls crypto provider (ring) and the `[tls]` config section.
//! - [`tomlcfg`]: strict TOML loading (unknown keys rejected, every problem at once by dotted key),
//!   bounded config reads.
//! - [`duration`]: [`duration::Bounded`], the one way a duration setting or flag is parsed (range per key).
//! - [`telemetry`]: counters, histograms, the Prometheus text format and the `/metrics` server.
//! - [`cli`]: logging set-up, exit codes with the error chain, SIGINT/SIGTERM.
//! - [`backoff`]: capped exponential reconnect/retry delays with jitter.
//! - [`limits`]: the open-file limit raised at start and the connections it allows.
//! - [`ratelimit`]: repeated log lines written once per period with a count of those suppressed.
//!
//! To add a piece: a module here only if both binaries use it and it is not about the wire format
//! (that goes in `wattflip-proto`) nor about units (`wattflip-units`); one binary's plumbing stays
//! in that binary.

pub mod backoff;
pub mod cli;
pub mod duration;
#[cfg(any(test, feature = "test-support"))]
pub mod edge;
pub mod limits;
pub mod ratelimit;
pub mod telemetry;
pub mod tls;
pub mod tomlcfg;

pub use backoff::Backoff;
