//! End-to-end tests: real `influxd`, real collector and agent binaries, real sockets.

mod drives;
mod energy;
mod faults;
mod fleet;
mod grpc;
mod probe;
mod spine;
