//! End-to-end tests: real `influxd`, real collector and agent binaries, real sockets.

mod faults;
mod grpc;
mod ledger;
mod security;
mod spine;
