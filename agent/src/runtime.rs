//! The agent's `run` mode: discovers sensors, samples them on an interval, and hands one batch per
//! tick to the exporter. Timestamps come from the monotonic clock mapped once to UTC, so intervals
//! never jump with NTP. A failing sensor degrades only itself: its error becomes an event (once
//! per distinct error) and the other sensors go on. Every read is timed into the agent's metrics.

use crate::config::Config;
use crate::drives::block;
use crate::export::backlog::{Backlog, MemoryBacklog};
use crate::export::grpc::{ExportSummary, Exporter, ExporterConfig};
use crate::export::spool::{Spool, SyncPolicy};
use crate::sensors::{discover_all, Discovered};
use crate::telemetry::AgentMetrics;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wattflip_proto::tls::TlsMode;
use wattflip_proto::v1;

/// Monotonic clock anchored to UTC once at start.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    utc0_ns: i64,
    mono0: Instant,
}

impl Clock {
    pub fn new() -> Self {
        let utc0_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        Clock { utc0_ns, mono0: Instant::now() }
    }

    /// (monotonic ns since start, UTC ns) for `Instant::now()`.
    pub fn now(&self) -> (u64, i64) {
        let mono = u64::try_from(self.mono0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        (mono, self.utc0_ns.saturating_add(mono as i64))
    }

    pub fn utc_now(&self) -> i64 {
        self.now().1
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

/// What `run` was asked to do beyond the config.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Stop after this many sampling ticks (then deliver everything and exit).
    pub samples: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("[tls] is missing: the collector connection needs mutual TLS certificates (or insecure_plaintext_loopback_only = true)")]
    NoTls,
    #[error("cannot open the spool (spool.dir): {0}")]
    Spool(#[from] crate::export::backlog::BacklogError),
    #[error(transparent)]
    Metrics(#[from] wattflip_proto::telemetry::MetricsBindError),
}

#[derive(Debug, Default, Clone)]
pub struct RunSummary {
    pub ticks: u64,
    pub power_samples: u64,
    pub temperature_samples: u64,
    pub sensor_errors: u64,
    pub export: ExportSummary,
}

/// The Hello of this agent: identity, labels, inventory.
pub fn hello(cfg: &Config, found: &Discovered, clock: &Clock) -> v1::Hello {
    let mut power_sources: Vec<v1::PowerSource> = found.power.iter().map(|s| s.describe()).collect();
    power_sources.extend(found.unusable_power.iter().cloned());
    v1::Hello {
        agent_id: cfg.agent_id.clone(),
        hostname: cfg.hostname.clone(),
        agent_version: env!("CARGO_PKG_VERSION").into(),
        protocol_version: wattflip_proto::PROTOCOL_VERSION,
        labels: cfg.labels.clone().into_iter().collect(),
        inventory: Some(v1::Inventory {
            storage_devices: block::scan(&cfg.sysfs_root),
            power_sources,
            temperature_sensors: found.temperature.iter().map(|t| t.describe()).collect(),
        }),
        time_ns: clock.utc_now(),
    }
}

fn event(time_ns: i64, kind: &str, severity: v1::Severity, device: &str, message: String) -> v1::Event {
    v1::Event {
        time_ns,
        kind: kind.into(),
        severity: severity as i32,
        device: device.into(),
        message,
        attributes: Default::default(),
    }
}

/// Samples every sensor once into `batch`. `last_error` remembers each sensor's last error text so
/// that a persistent failure is reported once, not every tick.
fn sample(found: &mut Discovered, clock: &Clock, batch: &mut v1::Batch, last_error: &mut HashMap<String, String>, summary: &mut RunSummary, metrics: &AgentMetrics) {
    for s in found.power.iter_mut() {
        let d = s.describe();
        let key = format!("power:{}:{}", d.source, d.zone);
        let (mono, utc) = clock.now();
        let started = Instant::now();
        let r = s.read(mono);
        metrics.sensor_reads.record(&key, started.elapsed(), r.is_ok());
        match r {
            Ok(Some(r)) => {
                last_error.remove(&key);
                summary.power_samples += 1;
                batch.power.push(v1::PowerSample {
                    time_ns: utc,
                    source: d.source,
                    zone: d.zone,
                    scope: d.scope,
                    method: d.method,
                    watts: Some(r.watts.0),
                    joules: r.joules.map(|j| j.0),
                    interval_ns: i64::try_from(r.interval_ns).unwrap_or(i64::MAX),
                });
            }
            Ok(None) => {}
            Err(e) => report(&key, &d.zone, e.to_string(), utc, batch, last_error, summary),
        }
    }
    for t in found.temperature.iter_mut() {
        let d = t.describe();
        let key = format!("temp:{}:{}:{}", d.source, d.device, d.sensor);
        let utc = clock.utc_now();
        let started = Instant::now();
        let r = t.read();
        metrics.sensor_reads.record(&key, started.elapsed(), r.is_ok());
        match r {
            Ok(c) => {
                last_error.remove(&key);
                summary.temperature_samples += 1;
                batch.temperature.push(v1::TemperatureSample {
                    time_ns: utc,
                    source: d.source,
                    device: d.device,
                    sensor: d.sensor,
                    celsius: c.0,
                });
            }
            Err(e) => report(&key, &d.device, e.to_string(), utc, batch, last_error, summary),
        }
    }
}

fn report(key: &str, device: &str, msg: String, utc: i64, batch: &mut v1::Batch, last_error: &mut HashMap<String, String>, summary: &mut RunSummary) {
    summary.sensor_errors += 1;
    if last_error.get(key) != Some(&msg) {
        tracing::warn!(sensor = key, "{msg}");
        batch.events.push(event(utc, "sensor_error", v1::Severity::Warning, device, msg.clone()));
        last_error.insert(key.to_string(), msg);
    }
}

/// The exporter's settings from the agent config.
pub fn exporter_config(cfg: &Config, tls: TlsMode) -> ExporterConfig {
    ExporterConfig {
        endpoints: cfg.collector.urls.clone(),
        agent_id: cfg.agent_id.clone(),
        tls,
        server_name: cfg.collector.server_name.clone(),
        connect_timeout: cfg.collector.connect_timeout,
        backoff_initial: cfg.collector.backoff_initial,
        backoff_max: cfg.collector.backoff_max,
        maintain_every: match cfg.spool.as_ref().map(|s| s.sync) {
            Some(SyncPolicy::Interval(d)) => d,
            _ => Duration::from_secs(1),
        },
    }
}

/// The spool (with the next sequence it allows) or the in-memory backlog. Sequences start no
/// lower than the UTC microsecond, so they also rise across restarts without a spool.
fn open_backlog(cfg: &Config, clock: &Clock, first: &mut v1::Batch) -> Result<(Box<dyn Backlog>, u64), RunError> {
    let utc_us = u64::try_from(clock.utc_now() / 1000).unwrap_or(1);
    let Some(sc) = &cfg.spool else {
        return Ok((Box::new(MemoryBacklog::new(cfg.backlog_max_batches)), utc_us));
    };
    let (spool, rec) = Spool::open(sc.clone(), utc_us)?;
    tracing::info!(dir = %sc.dir.display(), batches = rec.records, next_sequence = rec.next_sequence, "spool opened");
    if rec.truncated_bytes > 0 {
        let msg = format!(
            "the spool had a corrupt or torn tail: {} byte(s) cut from {}",
            rec.truncated_bytes,
            rec.truncated_segments.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        );
        let mut e = event(clock.utc_now(), "spool_truncated", v1::Severity::Warning, "", msg);
        e.attributes.insert("truncated_bytes".into(), rec.truncated_bytes.to_string());
        first.events.push(e);
    }
    Ok((Box::new(spool), rec.next_sequence))
}

/// Runs the agent until `shutdown` completes (or `opts.samples` ticks are done and delivered).
pub async fn run(cfg: Config, opts: RunOptions, shutdown: impl Future<Output = ()>) -> Result<RunSummary, RunError> {
    let tls = cfg.tls.clone().ok_or(RunError::NoTls)?;
    let clock = Clock::new();
    let metrics = Arc::new(AgentMetrics::default());
    let (metrics_stop, metrics_stopped) = tokio::sync::oneshot::channel::<()>();
    if let Some(addr) = cfg.metrics_listen {
        let m = metrics.clone();
        let bound = wattflip_proto::telemetry::serve_metrics(addr, Arc::new(move || m.render()), async {
            let _ = metrics_stopped.await;
        })
        .await?;
        tracing::info!(%bound, "metrics at /metrics");
    }
    let mut first = v1::Batch::default();
    let (backlog, first_sequence) = open_backlog(&cfg, &clock, &mut first)?;
    let mut found = discover_all(&cfg.sysfs_root, &cfg.kinds);
    for note in &found.unavailable {
        tracing::info!("not available on this host: {note}");
    }
    let hello = hello(&cfg, &found, &clock);
    tracing::info!(
        agent = %cfg.agent_id,
        power = found.power.len(),
        temperature = found.temperature.len(),
        "sensors discovered"
    );
    let (tx, rx) = tokio::sync::mpsc::channel::<v1::Batch>(64);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let exporter = Exporter::new(exporter_config(&cfg, tls), hello, backlog, first_sequence, metrics.clone());
    let export_task = tokio::spawn(exporter.run(rx, stop_rx, move || clock.utc_now()));

    let mut summary = RunSummary::default();
    let mut last_error = HashMap::new();
    for s in &found.unusable_power {
        first.events.push(event(clock.utc_now(), "sensor_unusable", v1::Severity::Warning, &s.zone, s.note.clone()));
        tracing::warn!(zone = %s.zone, "power source not usable: {}", s.note);
    }
    let mut pending_first = Some(first);
    let mut ticker = tokio::time::interval(cfg.sampling_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    let mut stopped = false;
    loop {
        if opts.samples.is_some_and(|n| summary.ticks >= n) {
            break;
        }
        tokio::select! {
            _ = ticker.tick() => {}
            _ = &mut shutdown => { stopped = true; break; }
        }
        let mut batch = pending_first.take().unwrap_or_default();
        sample(&mut found, &clock, &mut batch, &mut last_error, &mut summary, &metrics);
        summary.ticks += 1;
        if (batch.power.is_empty() && batch.temperature.is_empty() && batch.events.is_empty()) || tx.send(batch).await.is_err() {
            continue;
        }
    }
    drop(tx);
    let mut export_task = export_task;
    if stopped {
        let _ = stop_tx.send(true);
    } else {
        // Deliver what was sampled; a second signal stops waiting.
        tokio::select! {
            r = &mut export_task => {
                summary.export = r.unwrap_or_default();
                let _ = metrics_stop.send(());
                return Ok(summary);
            }
            _ = &mut shutdown => { let _ = stop_tx.send(true); }
        }
    }
    summary.export = export_task.await.unwrap_or_default();
    let _ = metrics_stop.send(());
    Ok(summary)
}
