//! The gRPC side of the collector: the `wattflip.v1.Ingest` service and the server that hosts it
//! with the standard health service, the process's counters (`stats`) and their metrics page
//! (`telemetry`), and the connections' limits (`conns`). A new RPC gets its own module here.

pub mod budget;
pub mod conns;
pub mod guard;
pub mod ingest;
pub mod oversized;
pub mod rejections;
pub mod revocation;
pub mod server;
pub mod stats;
pub mod telemetry;
pub mod tls;
