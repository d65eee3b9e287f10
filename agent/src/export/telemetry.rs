//! The agent's Prometheus metrics (`GET /metrics` on `metrics.listen`): delivery counters kept by
//! the exporter and per-sensor read durations and errors kept by the sampling loop. To add a
//! metric, add a field here, update it where it happens, and render it in [`AgentMetrics::render`].

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use wattflip_infra::telemetry::{LabelledTimings, Text};

#[derive(Debug, Default)]
pub struct AgentMetrics {
    pub batches_stored: AtomicU64,
    pub samples_stored: AtomicU64,
    pub batches_sent: AtomicU64,
    pub samples_sent: AtomicU64,
    pub batches_acked: AtomicU64,
    pub samples_acked: AtomicU64,
    pub batches_dropped: AtomicU64,
    pub samples_dropped: AtomicU64,
    pub batches_rejected: AtomicU64,
    pub connect_retries: AtomicU64,
    pub store_errors: AtomicU64,
    pub backlog_batches: AtomicU64,
    pub sensor_reads: LabelledTimings,
}

impl AgentMetrics {
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Relaxed);
    }

    pub fn render(&self) -> String {
        let g = |c: &AtomicU64| c.load(Relaxed);
        Text::default()
            .counter("wattflip_agent_batches_stored_total", "Batches put in the spool or memory backlog.", g(&self.batches_stored))
            .counter("wattflip_agent_samples_spooled_total", "Samples put in the spool or memory backlog.", g(&self.samples_stored))
            .counter("wattflip_agent_batches_sent_total", "Batches sent, resends included.", g(&self.batches_sent))
            .counter("wattflip_agent_samples_sent_total", "Samples sent, resends included.", g(&self.samples_sent))
            .counter("wattflip_agent_batches_acked_total", "Batches the collector acknowledged as durable.", g(&self.batches_acked))
            .counter("wattflip_agent_samples_acked_total", "Samples the collector acknowledged as durable.", g(&self.samples_acked))
            .counter("wattflip_agent_batches_dropped_total", "Batches dropped because the spool or backlog was full.", g(&self.batches_dropped))
            .counter("wattflip_agent_samples_dropped_total", "Samples dropped because the spool or backlog was full.", g(&self.samples_dropped))
            .counter("wattflip_agent_batches_rejected_total", "Batches the collector refused as invalid.", g(&self.batches_rejected))
            .counter("wattflip_agent_connect_retries_total", "Lost or failed collector connections (each is retried).", g(&self.connect_retries))
            .counter("wattflip_agent_store_errors_total", "Batches the spool could not write (disk errors).", g(&self.store_errors))
            .gauge("wattflip_agent_backlog_batches", "Batches waiting for an acknowledgement.", g(&self.backlog_batches) as f64)
            .timings("wattflip_agent_sensor_read", "Sensor reads", "sensor", &self.sensor_reads)
            .finish()
    }
}
