//! OTLP metrics sink (issue 28): the collector's data as OpenTelemetry metrics (hardware semantic
//! conventions `hw.*` plus wattflip's own `wattflip.*`), sent as protobuf over OTLP/HTTP to
//! Prometheus (`--web.enable-otlp-receiver`), Thanos receive, Mimir or an OpenTelemetry
//! Collector. `sink` is its [`Sink`](crate::sinks::Sink) and its registration, `config` its `[otlp]` table, `model` the metrics and the request, `translate` the
//! mapping with its cumulative state, `writer` the task that posts, retries and dead-letters.
//! Required or optional per collector (docs/deployment.md). A new metric: `model` + `translate`.

pub mod config;
pub mod efficiency;
pub mod model;
pub mod sink;
pub mod translate;
pub mod writer;

pub use sink::OtlpSink;
pub use writer::{spawn, OtlpHandle, OtlpOutcome, OtlpStats};

#[cfg(test)]
mod tests;
#[cfg(test)]
mod writer_tests;
