//! Getting data off the host. `grpc` streams batches to the collector with acknowledgements and a
//! bounded in-memory backlog; a durable disk spool slots in between the sampler and `grpc` later.

pub mod grpc;
