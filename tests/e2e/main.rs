//! End-to-end tests: real `influxd`, real collector and agent binaries, real sockets.

mod dashboards;
mod drives;
mod energy;
mod faults;
mod grpc;
mod ledger;
mod plan;
mod probe;
mod report;
mod security;
mod spine;
