//! Integration tests for wattflip-drives: recorded tool outputs (tests/fixtures), the in-process
//! fake nvme-cli, the fake `nvme` script run through the real runner, and the SIGKILL crash test.
//! One binary (ripgrep style); one module per area.

// Integration tests and their helpers: a panic with a message is the test's failure report
// (clippy.toml's allow-*-in-tests covers #[test] functions only, not the helpers they call).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod captures;
mod crash;
mod discovery;
mod fixtures;
mod governor;
mod inventory;
mod nvme_parsing;
mod restore;
mod runner;
mod smartctl;
mod sweep;
mod util;
