//! The agent's session with its collector(s): the `Hello` that opens every stream (identity,
//! labels, inventory), the exporter's settings from the config, and [`send`] for one-shot
//! commands (`probe`, `trace import`, `governor`), which stream over the same acknowledged
//! stream as `run` mode (in-memory backlog, same TLS) and wait until the collector has made every
//! batch durable. A new one-shot command that reports to the collector calls [`send_results`].

use crate::clock::Clock;
use crate::config::Config;
use crate::drives::tools::{DriveInventory, DriveTools};
use crate::export::backlog::MemoryBacklog;
use crate::export::grpc::{ExportSummary, Exporter, ExporterConfig};
use crate::export::spool::SyncPolicy;
use crate::sensors::Discovered;
use anyhow::Context as _;
use std::sync::Arc;
use std::time::Duration;
use wattflip_drives::CommandRunner;
use wattflip_infra::tls::TlsMode;
use wattflip_proto::v1;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("[tls] is missing: the collector connection needs mutual TLS certificates (or insecure_plaintext_loopback_only = true)")]
    NoTls,
    #[error("cannot open the spool (spool.dir)")]
    Spool(#[from] crate::export::backlog::BacklogError),
    #[error(transparent)]
    Metrics(#[from] wattflip_infra::telemetry::MetricsBindError),
}

/// The Hello of this agent: identity, labels, inventory (sysfs block devices enriched by what
/// nvme-cli/smartctl found, and the drive temperature sensors the SMART monitor reads), as `run`
/// sends it (session `run`: the collector shows this inventory as the host's).
pub fn hello(cfg: &Config, found: &Discovered, drives: &DriveInventory, drive_sensors: Vec<v1::TemperatureSensor>, clock: &Clock) -> v1::Hello {
    let mut power_sources: Vec<v1::PowerSource> = found
        .power
        .iter()
        .map(|s| {
            let mut d = s.describe();
            // A source read faster than it updates says so (its readings repeat).
            let period = super::ticks::power_period(cfg, s.as_ref());
            if let Some(note) = crate::sensors::sampler::rate_note(period, s.update_period()) {
                d.note = if d.note.is_empty() { note } else { format!("{}; {note}", d.note) };
            }
            d
        })
        .collect();
    power_sources.extend(found.unusable_power.iter().cloned());
    let mut storage_devices = crate::drives::block::scan(&cfg.sysfs_root);
    drives.enrich(&mut storage_devices);
    let mut temperature_sensors: Vec<v1::TemperatureSensor> = found.temperature.iter().map(|t| t.describe()).collect();
    temperature_sensors.extend(drive_sensors);
    v1::Hello {
        agent_id: cfg.agent_id.clone(),
        hostname: cfg.hostname.clone(),
        agent_version: env!("CARGO_PKG_VERSION").into(),
        protocol_version: wattflip_proto::PROTOCOL_VERSION,
        labels: cfg.labels.clone().into_iter().collect(),
        inventory: Some(v1::Inventory { storage_devices, power_sources, temperature_sensors, drive_thermal_limits: drives.thermal_limits() }),
        time_ns: clock.utc_now(),
        session: "run".into(),
        // `run` sets its spool's epoch; one-shot commands send no spooled batches.
        stream_epoch: 0,
    }
}

/// The Hello of a one-shot command that streams to a collector (`probe`, `governor`): the agent's
/// identity and labels plus the drive inventory nvme-cli/smartctl give, power-state tables
/// included, so those connections write the same `inventory` and `power_state_descriptor` points
/// as `run` does instead of a drive list without its power states. Costs a few short tool calls,
/// made only when something is sent. `session` names the command (`probe`, `governor`, `trace`),
/// so the collector does not mistake this Hello, which lists no power sources or sensors, for the
/// host's inventory.
pub fn command_hello(cfg: &Config, runner: Arc<dyn CommandRunner>, clock: &Clock, session: &str) -> v1::Hello {
    let tools = DriveTools::probe(&cfg.drives, runner);
    let drives = DriveInventory::discover(&tools, &cfg.sysfs_root);
    let mut h = hello(cfg, &Discovered::default(), &drives, Vec::new(), clock);
    h.session = session.into();
    h
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

/// Streams `batches` to the collector(s) of `cfg` and waits for their acknowledgements, at most
/// `timeout`.
pub async fn send(cfg: &Config, hello: v1::Hello, batches: Vec<v1::Batch>, timeout: Duration) -> Result<ExportSummary, RunError> {
    let tls = cfg.tls.clone().ok_or(RunError::NoTls)?;
    let clock = Clock::new();
    let exporter = Exporter::new(
        exporter_config(cfg, tls),
        hello,
        // Room for every batch: the backlog drops its oldest when full, and none may be lost here.
        Box::new(MemoryBacklog::new(batches.len().max(16))),
        u64::try_from(clock.utc_now() / 1000).unwrap_or(1),
        Default::default(),
    );
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(exporter.run(rx, stop_rx, move || clock.utc_now()));
    for b in batches {
        if tx.send(b).await.is_err() {
            break;
        }
    }
    drop(tx);
    let mut task = task;
    Ok(match tokio::time::timeout(timeout, &mut task).await {
        Ok(r) => r.unwrap_or_default(),
        Err(_) => {
            let _ = stop_tx.send(true);
            task.await.unwrap_or_default()
        }
    })
}

/// Streams batches of results to a collector and waits until all are acknowledged; `session`
/// names the command in its Hello (`probe`, `trace`).
pub fn send_results(url: &str, cfg: &Config, batches: Vec<v1::Batch>, kept_in: &std::path::Path, session: &str) -> anyhow::Result<()> {
    let total = batches.len() as u64;
    let clock = Clock::new();
    let hello = command_hello(cfg, Arc::new(wattflip_drives::SystemRunner::new()), &clock, session);
    let mut cfg = cfg.clone();
    cfg.collector.urls = vec![url.to_string()];
    let rt = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let s = rt.block_on(send(&cfg, hello, batches, Duration::from_secs(60))).context("--collector needs --config with a [tls] section")?;
    if s.acked < total || s.unacked_at_exit > 0 {
        anyhow::bail!("the collector at {url} did not acknowledge the results (they are still in {})", kept_in.display());
    }
    println!("sent to the collector at {url}: acknowledged");
    Ok(())
}
