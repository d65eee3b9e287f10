//! The counters of one collector process: what the ingest service and the rollups count, read by
//! the metrics page (`telemetry.rs`) and the TLS acceptor. A new counter goes here, with its line
//! in `telemetry::render`. Each sink keeps its own counters (`crate::sinks::SinkMetrics`).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use wattflip_infra::telemetry::LabelledCounter;

#[derive(Debug, Default)]
pub struct IngestStats {
    pub streams_opened: AtomicU64,
    /// Streams open now (a gauge), held against the stream limit the open-file limit allows.
    pub streams_open: AtomicU64,
    /// Connections open now (a gauge), held against `limits.max_connections`.
    pub connections_open: AtomicU64,
    /// Readings the throttling detector could not place (older than its retention).
    pub throttle_late_readings: AtomicU64,
    pub batches_received: AtomicU64,
    pub batches_acked: AtomicU64,
    pub batches_rejected: AtomicU64,
    pub points_unencodable: AtomicU64,
    pub throttle_events: AtomicU64,
    pub samples_received: AtomicU64,
    pub batches_duplicate: AtomicU64,
    pub batches_rate_limited: AtomicU64,
    /// Agent points stored (acknowledged as in the store).
    pub points_stored: AtomicU64,
    /// Agent points left out by the checks, by rule (`out_of_range`, `bad_tag`, ...).
    pub points_rejected: LabelledCounter,
    /// Agent points InfluxDB refused, kept in the dead-letter store, by class.
    pub points_dead_lettered: LabelledCounter,
    /// Refused connections and streams by reason (tls_handshake, no_identity, hello_agent_id,
    /// batch_agent_id, hello_timeout, connection_limit, idle_connection, idle_evicted).
    pub agents_rejected: LabelledCounter,
}

/// Counters of one collector process.
#[derive(Debug, Default)]
pub struct Stats {
    pub ingest: Arc<IngestStats>,
    pub rollup: Arc<crate::rollup::RollupStats>,
}
