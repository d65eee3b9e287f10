//! Fleet analyses the collector computes online from incoming batches, before they are written.
//! Each analysis is a pure module (no I/O) fed by `service::ingest`, whose results become points
//! through `wattflip_proto::schema`. Add one as a module here plus one call in `ingest::receive`.

pub mod proportionality;
pub mod sources;
pub mod throttle;
