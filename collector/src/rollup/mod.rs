//! Raw retention and 1-minute rollups (docs/schema.md, *Retention and rollups*). The writer tells
//! [`dirty::Dirty`] which (measurement, host, minute) buckets each stored request touched; after
//! `influx.rollup_settle` without new writes, [`task`] recomputes those minutes from the raw
//! points with `SELECT … INTO` ([`statements`]), so a bucket's rollup is always a function of
//! every raw point stored in it, whenever they arrived (a spool replayed hours late included).
//! Rewriting a rollup point overwrites it (same series key and minute), so a recompute is
//! idempotent. A new rolled-up measurement is a template in [`statements::aggregates`]; every
//! other measurement is copied whole into the rollup retention policy. The hourly tier
//! ([`hourly`], `rollup_1h`) is computed from the minute rollups of the hours they touched. The dashboards pick raw
//! points or rollups by range from the markers of [`resolution`].

mod client;
pub mod dirty;
pub mod hourly;
pub mod resolution;
pub mod setup;
pub mod statements;
pub mod task;

pub use dirty::{Bucket, Dirty, RollupStats};
