//! End-to-end tests: real `influxd`, real collector and agent binaries, real sockets. The fleet test
//! (`fleet.rs`, QEMU guests) is a separate test binary: see tests/Cargo.toml.

// Integration tests and their helpers: a panic with a message is the test's failure report
// (clippy.toml's allow-*-in-tests covers #[test] functions only, not the helpers they call).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod acpi_meter;
mod clocks;
mod config_checks;
mod connections;
mod dashboards;
mod dashboards_hosts;
mod dashboards_rollups;
mod dcmi;
mod delivery;
mod delivery_agent;
mod drive_temps;
mod drives;
mod drives_fleet;
mod efficiency;
mod energy;
mod energy_schedules;
mod faults;
mod grpc;
mod hwmon_scopes;
mod inventory_usable;
mod isolation;
mod ledger;
mod otlp;
mod otlp_dashboards;
mod otlp_fleet;
mod otlp_outage;
mod otlp_refusal;
mod otlp_resend;
mod otlp_rollups;
mod plan;
mod probe;
mod rediscovery;
mod report;
mod retention;
mod revocation;
mod rollups;
mod rollups_hourly;
mod security;
mod shutdown;
mod source_agreement;
mod spine;
mod thanos_store;
mod throttle;
