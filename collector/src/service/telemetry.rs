//! The collector's Prometheus metrics (`GET /metrics` on `metrics.listen`): a rendering of the
//! counters that the ingest service and the sink keep anyway. To add a metric, add the counter to
//! `IngestStats`, `SinkStats`, `OtlpStats` or `RollupStats` and one line to its function here.

use crate::rollup::RollupStats;
use crate::service::stats::{IngestStats, Stats};
use crate::sinks::influx::SinkStats;
use crate::sinks::otlp::OtlpStats;
use std::sync::atomic::Ordering::Relaxed;
use wattflip_infra::telemetry::Text;

pub fn render(s: &Stats) -> String {
    let mut t = Text::default();
    ingest(&mut t, &s.ingest);
    influx(&mut t, &s.sink);
    otlp(&mut t, &s.otlp);
    rollup(&mut t, &s.rollup);
    t.finish()
}

fn ingest(t: &mut Text, i: &IngestStats) {
    t.counter("wattflip_collector_streams_opened_total", "Agent streams opened.", i.streams_opened.load(Relaxed))
        .gauge("wattflip_collector_streams_open", "Agent streams open now (held against the stream limit).", i.streams_open.load(Relaxed) as f64)
        .gauge("wattflip_collector_connections_open", "Connections open now (held against limits.max_connections).", i.connections_open.load(Relaxed) as f64)
        .counter(
            "wattflip_collector_throttle_late_readings_total",
            "Readings the throttling detector could not place: older than its retention.",
            i.throttle_late_readings.load(Relaxed),
        )
        .counter("wattflip_collector_batches_received_total", "Batches received from agents.", i.batches_received.load(Relaxed))
        .counter("wattflip_collector_batches_acked_total", "Batches acknowledged as durable.", i.batches_acked.load(Relaxed))
        .counter("wattflip_collector_batches_rejected_total", "Batches refused as invalid (invalid_argument).", i.batches_rejected.load(Relaxed))
        .counter("wattflip_collector_batches_duplicate_total", "Batches already durable, acknowledged without rewriting.", i.batches_duplicate.load(Relaxed))
        .counter("wattflip_collector_batches_rate_limited_total", "Batches refused by the per-agent rate limit.", i.batches_rate_limited.load(Relaxed))
        .counter("wattflip_collector_samples_received_total", "Power and temperature samples accepted.", i.samples_received.load(Relaxed))
        .counter(
            "wattflip_collector_points_unencodable_total",
            "Points that could not be encoded as line protocol, left out (agent points also in points_rejected_total{reason=\"unencodable\"}).",
            i.points_unencodable.load(Relaxed),
        )
        .counter("wattflip_collector_throttle_events_total", "Thermal throttling episodes the detector found.", i.throttle_events.load(Relaxed))
        .counter("wattflip_collector_points_stored_total", "Agent points acknowledged as stored.", i.points_stored.load(Relaxed))
        .labelled_counter(
            "wattflip_collector_points_rejected_total",
            "Agent points left out by the checks, by rule; each is in a point_rejected event.",
            "reason",
            &i.points_rejected,
        )
        .labelled_counter(
            "wattflip_collector_points_dead_lettered_total",
            "Agent points InfluxDB refused, kept in the dead-letter store, by class.",
            "reason",
            &i.points_dead_lettered,
        )
        .labelled_counter("wattflip_collector_agents_rejected_total", "Connections and streams refused, by reason.", "reason", &i.agents_rejected);
}

fn influx(t: &mut Text, k: &SinkStats) {
    t.counter("wattflip_collector_lines_written_total", "Line-protocol lines the store accepted.", k.lines_written.load(Relaxed))
        .counter(
            "wattflip_collector_lines_rejected_total",
            "Lines the store refused as bad data (HTTP 400), all dead-lettered.",
            k.lines_rejected.load(Relaxed),
        )
        .labelled_counter(
            "wattflip_collector_lines_dead_lettered_total",
            "Lines in the dead-letter store, by class (agent points and the collector's own).",
            "reason",
            &k.lines_dead_lettered,
        )
        .counter("wattflip_collector_influx_requests_total", "Write requests to InfluxDB.", k.requests.load(Relaxed))
        .counter("wattflip_collector_influx_retries_total", "Write requests retried after an error.", k.retries.load(Relaxed))
        .counter(
            "wattflip_collector_influx_databases_created_total",
            "Databases the writer created after InfluxDB answered 404 database not found.",
            k.databases_created.load(Relaxed),
        )
        .counter(
            "wattflip_collector_influx_isolations_total",
            "Refused write requests split by agent, so one agent's refusal does not hold up the others.",
            k.isolations.load(Relaxed),
        )
        .counter(
            "wattflip_collector_influx_partial_writes_understood_total",
            "Partial writes (max-values-per-tag, retention) whose dropped lines were found without splitting the request.",
            k.partial_writes_understood.load(Relaxed),
        )
        .histogram("wattflip_collector_influx_write_seconds", "InfluxDB write request latency.", &k.write_latency);
}

fn otlp(t: &mut Text, o: &OtlpStats) {
    t.counter("wattflip_collector_otlp_points_sent_total", "OTLP data points the receiver accepted.", o.points_sent.load(Relaxed))
        .labelled_counter(
            "wattflip_collector_otlp_points_dead_lettered_total",
            "OTLP data points not stored, by reason: queue_full, shutdown, refused (points of requests answered 400-class; the receiver may have stored some).",
            "reason",
            &o.points_dead_lettered,
        )
        .gauge("wattflip_collector_otlp_points_queued", "OTLP data points waiting to be sent.", o.points_queued.load(Relaxed) as f64)
        .counter("wattflip_collector_otlp_requests_total", "OTLP export requests.", o.requests.load(Relaxed))
        .counter("wattflip_collector_otlp_retries_total", "OTLP export requests retried after an error.", o.retries.load(Relaxed))
        .counter(
            "wattflip_collector_otlp_stale_samples_total",
            "Energy samples not newer than their series' newest (resent): not added to a counter twice.",
            o.stale_samples.load(Relaxed),
        )
        .histogram("wattflip_collector_otlp_write_seconds", "OTLP export request latency.", &o.write_latency);
}

fn rollup(t: &mut Text, r: &RollupStats) {
    t.counter(
        "wattflip_collector_rollup_buckets_marked_total",
        "Rollup buckets (measurement, host, minute) marked for recompute.",
        r.buckets_marked.load(Relaxed),
    )
    .counter(
        "wattflip_collector_rollup_buckets_dropped_total",
        "Rollup buckets dropped because the dirty set was full (influx.rollup_max_dirty): their rollups may miss points.",
        r.buckets_dropped.load(Relaxed),
    )
    .counter("wattflip_collector_rollup_buckets_recomputed_total", "Rollup buckets recomputed from raw points.", r.buckets_recomputed.load(Relaxed))
    .counter("wattflip_collector_rollup_statements_total", "SELECT INTO statements run by the rollup task.", r.statements.load(Relaxed))
    .counter(
        "wattflip_collector_rollup_statements_failed_total",
        "Rollup statements that failed (their buckets are retried).",
        r.statements_failed.load(Relaxed),
    )
    .counter("wattflip_collector_rollup_points_written_total", "Rollup and copy points written.", r.points_written.load(Relaxed))
    .gauge("wattflip_collector_rollup_buckets_pending", "Rollup buckets waiting for their writes to settle.", r.pending.load(Relaxed) as f64)
    .counter(
        "wattflip_collector_rollup_setup_failures_total",
        "Failed setups of the database and retention policies; rollups and resolution markers wait until one succeeds.",
        r.setup_failures.load(Relaxed),
    )
    .gauge(
        "wattflip_collector_rollup_setup_pending",
        "Tasks (rollups, resolution markers) stopped because their setup fails; 0 when they run.",
        r.setup_pending.load(Relaxed) as f64,
    );
}
