//! Integration tests for wattflip-drives: recorded tool outputs (tests/fixtures), the in-process
//! fake nvme-cli, the fake `nvme` script run through the real runner, and the SIGKILL crash test.
//! One binary (ripgrep style); one module per area.

mod captures;
mod crash;
mod fixtures;
mod governor;
mod inventory;
mod nvme_parsing;
mod restore;
mod runner;
mod smartctl;
mod sweep;
mod util;
