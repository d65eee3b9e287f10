//! wattflip's wire format (`wattflip.v1`), unit newtypes shared by agent and collector, and the
//! strict-TOML plumbing both binaries use. Add a message in `proto/wattflip/v1/*.proto` (new field
//! numbers only, never reuse one) and it appears in [`v1`].

pub mod domain;
pub mod lineproto;
pub mod schema;
pub mod telemetry;
pub mod tls;
pub mod tomlcfg;
pub mod units;

/// Generated prost messages and tonic client/server for package `wattflip.v1`.
#[allow(clippy::all, missing_docs)]
pub mod v1 {
    tonic::include_proto!("wattflip.v1");
}

/// Version of the wire protocol this build speaks (sent in `Hello.protocol_version`).
pub const PROTOCOL_VERSION: u32 = 1;
