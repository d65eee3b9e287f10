//! The agent's `run` mode: discovers sensors, samples them on an interval, and hands one batch per
//! tick to the exporter, next to the fast power samplers, the SMART monitor and the scheduled
//! probes, which feed the same exporter. Timestamps come from the monotonic clock mapped once to
//! UTC, so intervals never jump with NTP. What happens on a tick is in `ticks`; a new task that
//! runs beside sampling is spawned in [`run`] and stopped in [`finish`].

use super::samplers::{place, FastSamplers};
use super::schedule::{run_job, DeviceLocks, JobStop};
use super::session::{exporter_config, hello, RunError};
pub use super::ticks::RunSummary;
use super::ticks::{monitor_loop, rediscover, sample, Rediscovery, SamplerState};
use crate::clock::Clock;
use crate::config::Config;
use crate::drives::changes::{recover_records, ChangeLog};
use crate::drives::monitor::DriveMonitor;
use crate::drives::tools::{DriveInventory, DriveTools};
use crate::events::event;
use crate::export::backlog::{Backlog, MemoryBacklog};
use crate::export::grpc::{ExportSummary, Exporter};
use crate::export::loss::LossFile;
use crate::export::spool::Spool;
use crate::export::telemetry::AgentMetrics;
use crate::export::totals::{EnergyTotals, Totaled, RESUME_BATCHES};
use crate::sensors::nvme_estimate::NvmeEstimate;
use crate::sensors::offtick::OffTick;
use crate::sensors::{discover_all, Discovered};
use anyhow::Context as _;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use wattflip_drives::CommandRunner;
use wattflip_proto::v1;

/// What `run` was asked to do beyond the config.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Stop after this many sampling ticks (then deliver everything and exit).
    pub samples: Option<u64>,
}

/// The spool (with the next sequence it allows and its stream epoch) or the in-memory backlog (a
/// random epoch per start: its batches do not outlive the process), either stamping the energy
/// totals (`export::totals`: continued from the spool, or a new energy epoch from now). Sequences start no lower than
/// the UTC microsecond, so they also rise across restarts without a spool. What recovery found
/// goes into `first`, the first batch sent: damage with the exact number of batches lost, and
/// files that cannot be segments.
fn open_backlog(cfg: &Config, clock: &Clock, first: &mut v1::Batch) -> Result<(Box<dyn Backlog>, u64, u64), RunError> {
    let utc_us = u64::try_from(clock.utc_now() / 1000).unwrap_or(1);
    let Some(sc) = &cfg.spool else {
        let totals = EnergyTotals::new(clock.utc_now());
        return Ok((Box::new(Totaled::new(Box::new(MemoryBacklog::new(cfg.backlog_max_batches)), totals)), utc_us, rand::random()));
    };
    let (spool, rec) = Spool::open(sc.clone(), utc_us)?;
    tracing::info!(dir = %sc.dir.display(), batches = rec.records, next_sequence = rec.next_sequence, epoch = rec.epoch, "spool opened");
    if rec.truncated_bytes > 0 || !rec.damaged.is_empty() {
        let segments: std::collections::BTreeSet<String> =
            rec.truncated_segments.iter().chain(rec.damaged.iter().map(|d| &d.0)).map(|p| p.display().to_string()).collect();
        let damaged_bytes: u64 = rec.damaged.iter().map(|d| d.2).sum();
        let msg = format!(
            "the spool was damaged: {} batch(es) lost ({} damaged record region(s) skipped, {damaged_bytes} byte(s); a corrupt or torn tail of {} byte(s) cut) in {}; every intact record was kept",
            rec.lost_batches,
            rec.damaged.len(),
            rec.truncated_bytes,
            segments.into_iter().collect::<Vec<_>>().join(", ")
        );
        tracing::warn!("{msg}");
        let mut e = event(clock.utc_now(), "spool_truncated", v1::Severity::Warning, "", msg);
        e.attributes.insert("truncated_bytes".into(), rec.truncated_bytes.to_string());
        e.attributes.insert("damaged_bytes".into(), damaged_bytes.to_string());
        e.attributes.insert("lost_batches".into(), rec.lost_batches.to_string());
        first.events.push(e);
    }
    if let Some(why) = &rec.epoch_replaced {
        let msg = format!("the spool's epoch was replaced ({why}): its {} kept batch(es) are resent under the new epoch {}", rec.records, rec.epoch);
        tracing::warn!("{msg}");
        let mut e = event(clock.utc_now(), "spool_epoch_replaced", v1::Severity::Warning, "", msg);
        e.attributes.insert("epoch".into(), rec.epoch.to_string());
        first.events.push(e);
    }
    for (path, why) in &rec.foreign {
        let msg = format!("{} in the spool folder is not a spool segment and was skipped: {why}; move it elsewhere", path.display());
        let mut e = event(clock.utc_now(), "spool_foreign_file", v1::Severity::Warning, "", msg);
        e.attributes.insert("path".into(), path.display().to_string());
        first.events.push(e);
    }
    // Energy totals go on from the spool's newest batches (the same epoch start), or start now.
    let totals = EnergyTotals::resume(spool.newest(RESUME_BATCHES), clock.utc_now());
    tracing::info!(zones = totals.zones(), start_ns = totals.start_ns(), "energy totals continued from the spool");
    Ok((Box::new(Totaled::new(Box::new(spool), totals)), rec.next_sequence, rec.epoch))
}

/// `run --config FILE [--samples N]`: the agent until SIGTERM/SIGINT (or N ticks, delivered).
pub fn command(config: PathBuf, samples: Option<u64>) -> anyhow::Result<()> {
    let cfg = Config::from_file(&config)?;
    let rt = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let s = rt.block_on(run(cfg, RunOptions { samples }, super::shutdown_signal()))?;
    eprintln!(
        "wattflip-agent: {} ticks, {} power and {} temperature samples, {} sensor errors; \
         {} batches sent, {} acknowledged, {} dropped, {} rejected, {} unacknowledged at exit",
        s.ticks,
        s.power_samples,
        s.temperature_samples,
        s.sensor_errors,
        s.export.batches,
        s.export.acked,
        s.export.dropped,
        s.export.rejected,
        s.export.unacked_at_exit
    );
    if s.export.unacked_at_exit > 0 {
        anyhow::bail!("{} batch(es) were not acknowledged by the collector", s.export.unacked_at_exit);
    }
    Ok(())
}

/// Runs the agent until `shutdown` completes (or `opts.samples` ticks are done and delivered).
pub async fn run(cfg: Config, opts: RunOptions, shutdown: impl Future<Output = ()>) -> Result<RunSummary, RunError> {
    let tls = cfg.tls.clone().ok_or(RunError::NoTls)?;
    let clock = Clock::new();
    let metrics = Arc::new(AgentMetrics::default());
    let metrics_stop = serve_metrics(&cfg, &metrics).await?;
    // The first batch carries what start-up found: a truncated spool, restored power states,
    // unusable sources.
    let mut first = v1::Batch::default();
    let (backlog, first_sequence, epoch) = open_backlog(&cfg, &clock, &mut first)?;
    let Startup { mut found, drives, monitor } = startup(&cfg, &clock, &mut first);
    let mut hello = hello(&cfg, &found, &drives, monitor.describe(), &clock);
    hello.stream_epoch = epoch;
    tracing::info!(
        agent = %cfg.agent_id,
        power = found.power.len(),
        temperature = found.temperature.len(),
        electrical = found.electrical.len(),
        "sensors discovered"
    );
    let (tx, rx) = mpsc::channel::<v1::Batch>(64);
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut exporter = Exporter::new(exporter_config(&cfg, tls), hello, backlog, first_sequence, metrics.clone());
    if let Some(sc) = &cfg.spool {
        exporter = exporter.with_loss_file(LossFile::of_spool(&sc.dir), clock.utc_now());
    }
    let export_task = tokio::spawn(exporter.run(rx, stop_rx, move || clock.utc_now()));
    // Scheduled probes feed the same exporter; they stop when sampling stops.
    let (jobs_stop, jobs_stop_rx) = watch::channel(JobStop::Run);
    let locks = DeviceLocks::default();
    let jobs: Vec<_> = cfg
        .probes
        .iter()
        .cloned()
        .map(|job| {
            tracing::info!(probe = %job.name, schedule = %job.schedule, "probe scheduled");
            tokio::spawn(run_job(job, cfg.agent_id.clone(), locks.clone(), tx.clone(), jobs_stop_rx.clone()))
        })
        .collect();
    let (monitor_stop, monitor_stop_rx) = watch::channel(false);
    let monitor_task = (!monitor.is_empty()).then(|| {
        let d = &cfg.drives;
        tokio::spawn(monitor_loop(monitor, (d.smart_interval, d.smart_workers, d.timeout), clock, tx.clone(), monitor_stop_rx))
    });
    for s in &found.unusable_power {
        first.events.push(event(clock.utc_now(), "sensor_unusable", v1::Severity::Warning, &s.zone, s.note.clone()));
        tracing::warn!(zone = %s.zone, "power source not usable: {}", s.note);
    }
    // What drive discovery could not read (a tool's failure, a field `nvme list`, id-ctrl or
    // smartctl printed unreadably, and the fallback taken): logged there, and one event each.
    for p in &drives.problems {
        first.events.push(event(clock.utc_now(), "drive_discovery", v1::Severity::Warning, "", p.clone()));
    }
    // Sources read faster than reporting move to windowed sampler threads, one per source, each
    // source on its own grid; the rest are read on the tick.
    let mut state = SamplerState::default();
    let known = found.power.iter().map(|s| s.describe()).map(|d| (d.source, d.zone)).collect();
    let kinds = crate::sensors::SensorKinds { ipmi: false, ..cfg.kinds.clone() };
    let every = super::ticks::REDISCOVER_EVERY;
    state.rediscovery = Some(Rediscovery { sysfs_root: cfg.sysfs_root.clone(), kinds, every, known, last_ns: clock.now().0 });
    state.tick = cfg.sampling_interval;
    let mut fast = FastSamplers::new(cfg.sampling_interval, clock, tx.clone());
    let power = std::mem::take(&mut found.power);
    place(&cfg, power, &mut found, &mut state, &mut fast);
    let mut summary = RunSummary::default();
    tokio::pin!(shutdown);
    let ticks = Ticks { cfg: &cfg, found: &mut found, clock: &clock, state: &mut state, metrics: &metrics, fast: &mut fast };
    let stopped = tick_loop(ticks, &opts, first, &tx, &mut summary, shutdown.as_mut()).await;
    // A signal halts a probe in flight (its completed runs are kept); a bounded run lets it end.
    let _ = jobs_stop.send(if stopped { JobStop::Halt } else { JobStop::Finish });
    let tasks = Tasks { fast, jobs, monitor_stop, monitor_task, tx, stop_tx, export_task, metrics_stop };
    Ok(finish(tasks, stopped, summary, shutdown).await)
}

/// Serves `GET /metrics` when `metrics.listen` is set; the sender stops it.
async fn serve_metrics(cfg: &Config, metrics: &Arc<AgentMetrics>) -> Result<oneshot::Sender<()>, RunError> {
    let (metrics_stop, metrics_stopped) = oneshot::channel::<()>();
    if let Some(addr) = cfg.metrics_listen {
        let m = metrics.clone();
        let bound = wattflip_infra::telemetry::serve_metrics(addr, Arc::new(move || m.render()), async {
            let _ = metrics_stopped.await;
        })
        .await?;
        tracing::info!(%bound, "metrics at /metrics");
    }
    Ok(metrics_stop)
}

/// What start-up discovered.
struct Startup {
    found: Discovered,
    drives: DriveInventory,
    monitor: DriveMonitor,
}

/// Discovers sensors and drives, restores power states a killed governor sweep left behind
/// (recorded in `first`), and adds the datasheet estimate of each NVMe controller.
fn startup(cfg: &Config, clock: &Clock, first: &mut v1::Batch) -> Startup {
    let runner: Arc<dyn CommandRunner> = Arc::new(wattflip_drives::SystemRunner::new());
    let mut found = discover_all(&cfg.sysfs_root, &cfg.kinds, &runner);
    // Tool probes and discovery are a handful of short child processes, once, before sampling.
    let tools = DriveTools::probe(&cfg.drives, runner);
    let drives = DriveInventory::discover(&tools, &cfg.sysfs_root);
    for note in found.unavailable.iter().chain(&drives.unavailable) {
        tracing::info!("not available on this host: {note}");
    }
    if let Some(nvme) = &tools.nvme {
        // A governor sweep killed with SIGKILL left its state file: put the original state back.
        // The records go after what `first` already holds (a `spool_truncated` event).
        let mut log = ChangeLog::new(*clock);
        log.batch = std::mem::take(first);
        recover_records(&cfg.drives.state_dir, nvme, &mut log);
        *first = log.batch;
    }
    // The datasheet estimate per NVMe controller (labelled estimated, never summed with meters).
    if let Some(nvme) = &tools.nvme {
        let mut seen = std::collections::HashSet::new();
        for d in &drives.drives {
            let Some(ctrl) = d.controller.as_ref().filter(|c| seen.insert(c.to_string())) else { continue };
            if let Some(e) = NvmeEstimate::new(nvme.clone(), ctrl, d.power_states.clone()) {
                // nvme-cli runs on a worker of its own: a hung tool never holds up the tick.
                let period = super::ticks::power_period(cfg, &e);
                found.power.push(Box::new(OffTick::spawn(Box::new(e), period)));
            }
        }
    }
    let monitor = DriveMonitor::new(tools, drives.health_devices()).with_nocheck(cfg.drives.smart_nocheck);
    Startup { found, drives, monitor }
}

/// The sensors read on the tick and the sampler's memory of them, and the fast samplers that
/// rediscovered sources join.
struct Ticks<'a> {
    cfg: &'a Config,
    found: &'a mut Discovered,
    clock: &'a Clock,
    state: &'a mut SamplerState,
    metrics: &'a AgentMetrics,
    fast: &'a mut FastSamplers,
}

/// Samples on every tick until `opts.samples` ticks or `shutdown`; `first` goes out with the
/// first tick. Returns whether `shutdown` ended it.
async fn tick_loop(
    t: Ticks<'_>,
    opts: &RunOptions,
    first: v1::Batch,
    tx: &mpsc::Sender<v1::Batch>,
    summary: &mut RunSummary,
    mut shutdown: std::pin::Pin<&mut impl Future<Output = ()>>,
) -> bool {
    let mut pending_first = Some(first);
    let mut ticker = tokio::time::interval(t.state.tick);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if opts.samples.is_some_and(|n| summary.ticks >= n) {
            return false;
        }
        tokio::select! {
            _ = ticker.tick() => {}
            _ = &mut shutdown => return true,
        }
        let mut batch = pending_first.take().unwrap_or_default();
        // Sensor reads are short sysfs reads, but a BMC command can take a second: keep them off
        // the async workers' hot path.
        tokio::task::block_in_place(|| {
            let new = rediscover(t.cfg, t.clock, &mut batch, t.state);
            place(t.cfg, new, t.found, t.state, t.fast);
            sample(t.found, t.clock, &mut batch, t.state, summary, t.metrics)
        });
        summary.ticks += 1;
        if batch == v1::Batch::default() || tx.send(batch).await.is_err() {
            continue;
        }
    }
}

/// The tasks running beside sampling, to be stopped in order at the end.
struct Tasks {
    fast: FastSamplers,
    jobs: Vec<JoinHandle<()>>,
    monitor_stop: watch::Sender<bool>,
    monitor_task: Option<JoinHandle<(u64, u64)>>,
    tx: mpsc::Sender<v1::Batch>,
    stop_tx: watch::Sender<bool>,
    export_task: JoinHandle<ExportSummary>,
    metrics_stop: oneshot::Sender<()>,
}

/// Stops the samplers, lets scheduled probes finish (bounded run) and the monitor end, then
/// delivers what was sampled: on a signal the exporter stops at once; after `--samples` it drains
/// until everything is acknowledged or a second signal comes.
async fn finish(t: Tasks, stopped: bool, mut summary: RunSummary, shutdown: std::pin::Pin<&mut impl Future<Output = ()>>) -> RunSummary {
    for handle in t.fast.stop() {
        if let Ok(Ok(s)) = tokio::task::spawn_blocking(move || handle.join()).await {
            summary.power_samples += s.reads - s.errors;
            summary.sensor_errors += s.errors;
        }
    }
    // A probe in flight finishes and is delivered before a bounded run (--samples) ends; on a
    // signal its IO stops (between two IOs) and its completed runs are handed over to be spooled.
    for j in t.jobs {
        if !stopped {
            let _ = j.await;
        } else if tokio::time::timeout(std::time::Duration::from_secs(10), j).await.is_err() {
            tracing::warn!("a scheduled probe did not stop within 10 s of the signal; its runs are lost");
        }
    }
    let _ = t.monitor_stop.send(true);
    if let Some(task) = t.monitor_task {
        let (samples, errors) = task.await.unwrap_or_default();
        summary.temperature_samples += samples;
        summary.sensor_errors += errors;
    }
    drop(t.tx);
    let mut export_task = t.export_task;
    if stopped {
        let _ = t.stop_tx.send(true);
    } else {
        // Deliver what was sampled; a second signal stops waiting.
        tokio::select! {
            r = &mut export_task => {
                summary.export = r.unwrap_or_default();
                let _ = t.metrics_stop.send(());
                return summary;
            }
            _ = shutdown => { let _ = t.stop_tx.send(true); }
        }
    }
    summary.export = export_task.await.unwrap_or_default();
    let _ = t.metrics_stop.send(());
    summary
}
