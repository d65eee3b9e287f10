//! The collector's Prometheus metrics (`GET /metrics` on `metrics.listen`): a rendering of the
//! counters that the ingest service, the sinks and the rollups keep anyway. To add a metric, add
//! the counter to `IngestStats` or `RollupStats` and its row to the table here; a sink's
//! counters render themselves (`SinkMetrics`: InfluxDB's `SinkStats` in `sinks/influx/sink.rs`,
//! `OtlpStats` in `sinks/otlp/sink.rs`).

use crate::rollup::RollupStats;
use crate::service::stats::{IngestStats, Stats};
use crate::sinks::rows::{self, Reading::*, Row};
use crate::sinks::SinkMetrics;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use wattflip_infra::telemetry::Text;

/// The page: the ingest service's counters, then each running sink's, then the rollups'.
pub fn render(s: &Stats, sinks: &[Arc<dyn SinkMetrics>]) -> String {
    let mut t = Text::default();
    rows::render(&mut t, &*s.ingest, INGEST);
    for sink in sinks {
        sink.render(&mut t);
    }
    rows::render(&mut t, &*s.rollup, ROLLUP);
    t.finish()
}

/// The ingest service's counters.
#[rustfmt::skip]
const INGEST: &[Row<IngestStats>] = &[
    ("wattflip_collector_streams_opened_total", "Agent streams opened.", |i| Counter(i.streams_opened.load(Relaxed))),
    ("wattflip_collector_streams_open", "Agent streams open now (held against the stream limit).", |i| Gauge(i.streams_open.load(Relaxed))),
    ("wattflip_collector_connections_open", "Connections open now (held against limits.max_connections).", |i| Gauge(i.connections_open.load(Relaxed))),
    ("wattflip_collector_throttle_late_readings_total", "Readings the throttling detector could not place: older than its retention.", |i| Counter(i.throttle_late_readings.load(Relaxed))),
    ("wattflip_collector_batches_received_total", "Batches received from agents.", |i| Counter(i.batches_received.load(Relaxed))),
    ("wattflip_collector_batches_acked_total", "Batches acknowledged as durable.", |i| Counter(i.batches_acked.load(Relaxed))),
    ("wattflip_collector_batches_rejected_total", "Batches refused as invalid (invalid_argument).", |i| Counter(i.batches_rejected.load(Relaxed))),
    ("wattflip_collector_batches_duplicate_total", "Batches already durable, acknowledged without rewriting.", |i| Counter(i.batches_duplicate.load(Relaxed))),
    ("wattflip_collector_batches_rate_limited_total", "Batches refused by the per-agent rate limit.", |i| Counter(i.batches_rate_limited.load(Relaxed))),
    ("wattflip_collector_samples_received_total", "Power and temperature samples accepted.", |i| Counter(i.samples_received.load(Relaxed))),
    ("wattflip_collector_points_unencodable_total", "Points that could not be encoded as line protocol, left out (agent points also in points_rejected_total{reason=\"unencodable\"}).", |i| Counter(i.points_unencodable.load(Relaxed))),
    ("wattflip_collector_throttle_events_total", "Thermal throttling episodes the detector found.", |i| Counter(i.throttle_events.load(Relaxed))),
    ("wattflip_collector_points_stored_total", "Agent points acknowledged as stored.", |i| Counter(i.points_stored.load(Relaxed))),
    ("wattflip_collector_points_rejected_total", "Agent points left out by the checks, by rule; each is in a point_rejected event.", |i| ByLabel("reason", &i.points_rejected)),
    ("wattflip_collector_points_dead_lettered_total", "Agent points InfluxDB refused, kept in the dead-letter store, by class.", |i| ByLabel("reason", &i.points_dead_lettered)),
    ("wattflip_collector_agents_rejected_total", "Connections and streams refused, by reason.", |i| ByLabel("reason", &i.agents_rejected)),
];

/// The rollups' counters.
#[rustfmt::skip]
const ROLLUP: &[Row<RollupStats>] = &[
    ("wattflip_collector_rollup_buckets_marked_total", "Rollup buckets (measurement, host, minute) marked for recompute.", |r| Counter(r.buckets_marked.load(Relaxed))),
    ("wattflip_collector_rollup_buckets_dropped_total", "Rollup buckets dropped because the dirty set was full (influx.rollup_max_dirty): their rollups may miss points.", |r| Counter(r.buckets_dropped.load(Relaxed))),
    ("wattflip_collector_rollup_buckets_recomputed_total", "Rollup buckets recomputed from raw points.", |r| Counter(r.buckets_recomputed.load(Relaxed))),
    ("wattflip_collector_rollup_statements_total", "SELECT INTO statements run by the rollup task.", |r| Counter(r.statements.load(Relaxed))),
    ("wattflip_collector_rollup_statements_failed_total", "Rollup statements that failed (their buckets are retried).", |r| Counter(r.statements_failed.load(Relaxed))),
    ("wattflip_collector_rollup_points_written_total", "Rollup and copy points written.", |r| Counter(r.points_written.load(Relaxed))),
    ("wattflip_collector_rollup_buckets_pending", "Rollup buckets waiting for their writes to settle.", |r| Gauge(r.pending.load(Relaxed))),
    ("wattflip_collector_rollup_setup_failures_total", "Failed setups of the database and retention policies; rollups and resolution markers wait until one succeeds.", |r| Counter(r.setup_failures.load(Relaxed))),
    ("wattflip_collector_rollup_setup_pending", "Tasks (rollups, resolution markers) stopped because their setup fails; 0 when they run.", |r| Gauge(r.setup_pending.load(Relaxed))),
];
