//! End-to-end tests: real `influxd`, real collector and agent binaries, real sockets.

mod dashboards;
mod faults;
mod grpc;
mod report;
mod spine;
