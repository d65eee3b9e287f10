//! The agent's `run` mode: discovers sensors, samples them on an interval, and hands one batch per
//! tick to the exporter. Timestamps come from the monotonic clock mapped once to UTC, so intervals
//! never jump with NTP. A failing sensor degrades only itself: its error becomes an event (once
//! per distinct error) and the other sensors go on. Every read is timed into the agent's metrics.

use crate::config::Config;
use crate::drives::block;
use crate::drives::governor::{recover_records, Recorder};
use wattflip_drives::CommandRunner;
use crate::drives::monitor::DriveMonitor;
use crate::drives::tools::{DriveInventory, DriveTools};
use crate::export::backlog::{Backlog, MemoryBacklog};
use crate::export::grpc::{ExportSummary, Exporter, ExporterConfig};
use crate::export::spool::{Spool, SyncPolicy};
use crate::sensors::{discover_all, Discovered};
use crate::telemetry::AgentMetrics;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wattflip_infra::tls::TlsMode;
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
    Metrics(#[from] wattflip_infra::telemetry::MetricsBindError),
}

#[derive(Debug, Default, Clone)]
pub struct RunSummary {
    pub ticks: u64,
    pub power_samples: u64,
    pub temperature_samples: u64,
    pub electrical_samples: u64,
    pub sensor_errors: u64,
    pub export: ExportSummary,
}

/// The Hello of this agent: identity, labels, inventory (sysfs block devices enriched by what
/// nvme-cli/smartctl found, and the drive temperature sensors the SMART monitor reads).
pub fn hello(
    cfg: &Config,
    found: &Discovered,
    drives: &DriveInventory,
    drive_sensors: Vec<v1::TemperatureSensor>,
    clock: &Clock,
) -> v1::Hello {
    let mut power_sources: Vec<v1::PowerSource> = found.power.iter().map(|s| s.describe()).collect();
    power_sources.extend(found.unusable_power.iter().cloned());
    let mut storage_devices = block::scan(&cfg.sysfs_root);
    drives.enrich(&mut storage_devices);
    let mut temperature_sensors: Vec<v1::TemperatureSensor> = found.temperature.iter().map(|t| t.describe()).collect();
    temperature_sensors.extend(drive_sensors);
    v1::Hello {
        agent_id: cfg.agent_id.clone(),
        hostname: cfg.hostname.clone(),
        agent_version: env!("CARGO_PKG_VERSION").into(),
        protocol_version: wattflip_proto::PROTOCOL_VERSION,
        labels: cfg.labels.clone().into_iter().collect(),
        inventory: Some(v1::Inventory {
            storage_devices,
            power_sources,
            temperature_sensors,
            drive_thermal_limits: drives.thermal_limits(),
        }),
        time_ns: clock.utc_now(),
    }
}

/// The Hello of a one-shot command that streams to a collector (`probe`, `governor`): the agent's
/// identity and labels plus the drive inventory nvme-cli/smartctl give, power-state tables
/// included, so those connections write the same `inventory` and `power_state_descriptor` points
/// as `run` does instead of a drive list without its power states. Costs a few short tool calls,
/// made only when something is sent.
pub fn command_hello(cfg: &Config, runner: Arc<dyn CommandRunner>, clock: &Clock) -> v1::Hello {
    let tools = DriveTools::probe(&cfg.drives, runner);
    let drives = DriveInventory::discover(&tools, &cfg.sysfs_root);
    hello(cfg, &Discovered::default(), &drives, Vec::new(), clock)
}

use crate::drives::monitor::event;

/// Polls drive health every `interval` on a blocking thread and sends each poll as its own batch,
/// until `stop` turns true (a poll in progress is finished and sent first). Returns (temperature
/// samples, failed tool calls).
async fn monitor_loop(
    mut monitor: DriveMonitor,
    interval: std::time::Duration,
    clock: Clock,
    tx: tokio::sync::mpsc::Sender<v1::Batch>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> (u64, u64) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut samples, mut errors) = (0, 0);
    loop {
        tokio::select! {
            // The first tick is immediate and wins over a stop that is already set, so every run
            // reads the drives at least once.
            biased;
            _ = ticker.tick() => {}
            _ = stop.changed() => break,
        }
        let joined = tokio::task::spawn_blocking(move || {
            let p = monitor.poll(&|| clock.utc_now());
            (monitor, p)
        })
        .await;
        let Ok((m, poll)) = joined else {
            tracing::error!("the drive monitor stopped unexpectedly; drive temperatures are no longer read");
            break;
        };
        monitor = m;
        samples += poll.temperature.len() as u64;
        errors += poll.errors;
        let mut batch = v1::Batch::default();
        poll.into_batch(&mut batch);
        if batch != v1::Batch::default() && tx.send(batch).await.is_err() {
            break;
        }
        if *stop.borrow() {
            break;
        }
    }
    (samples, errors)
}

/// Per-sensor memory of the sampler.
#[derive(Default)]
struct SamplerState {
    /// Each sensor's last error text, so a persistent failure is reported once, not every tick.
    last_error: HashMap<String, String>,
    /// Monotonic time of the last read of sources read less often than every tick.
    last_read: HashMap<String, u64>,
    /// Read interval of each sensor left in `found.power` (same order).
    periods: Vec<Duration>,
    /// The tick (`sampling.interval`).
    tick: Duration,
}

/// The read interval of a power source: its `[sampling.power_intervals]` override, else
/// `sampling.power_interval` but no faster than the source allows (a BMC updates about once a
/// second; the NVMe estimate costs an admin command per read).
pub fn power_period(cfg: &Config, sensor: &dyn crate::sensors::PowerSensor) -> Duration {
    let source = sensor.describe().source;
    cfg.power_intervals.get(&source).unwrap_or_else(|| cfg.power_interval.max(sensor.min_interval()))
}

type Timed = (Box<dyn crate::sensors::PowerSensor>, Duration);

/// Splits the power sensors into those read faster than the tick, grouped by source (one sampler
/// thread each, so a slow `ipmitool` call never delays the 1 kHz grid of RAPL or hwmon), and those
/// read on the tick itself (raw samples, as without fast sampling).
pub fn split_by_rate(cfg: &Config, sensors: Vec<Box<dyn crate::sensors::PowerSensor>>) -> (Vec<(String, Vec<Timed>)>, Vec<Timed>) {
    let mut fast: Vec<(String, Vec<Timed>)> = Vec::new();
    let mut slow = Vec::new();
    for s in sensors {
        let period = power_period(cfg, s.as_ref());
        if period >= cfg.sampling_interval {
            slow.push((s, period));
            continue;
        }
        let source = s.describe().source;
        match fast.iter_mut().find(|(name, _)| *name == source) {
            Some((_, group)) => group.push((s, period)),
            None => fast.push((source, vec![(s, period)])),
        }
    }
    (fast, slow)
}

/// Samples every sensor once into `batch`.
fn sample(found: &mut Discovered, clock: &Clock, batch: &mut v1::Batch, state: &mut SamplerState, summary: &mut RunSummary, metrics: &AgentMetrics) {
    let last_error = &mut state.last_error;
    for (i, s) in found.power.iter_mut().enumerate() {
        let d = s.describe();
        let key = format!("power:{}:{}", d.source, d.zone);
        let (mono, utc) = clock.now();
        // Sources slower than the tick are read on the tick that reaches their interval; half a
        // tick of slack keeps timer jitter from pushing a read to the tick after.
        let period = state.periods.get(i).copied().unwrap_or_default();
        if period > state.tick {
            let wait = u64::try_from((period - state.tick / 2).as_nanos()).unwrap_or(u64::MAX);
            if state.last_read.get(&key).is_some_and(|&t| mono.saturating_sub(t) < wait) {
                continue;
            }
            state.last_read.insert(key.clone(), mono);
        }
        let started = Instant::now();
        let r = s.read(mono);
        metrics.sensor_reads.record(&key, started.elapsed(), r.is_ok());
        match r {
            Ok(Some(r)) => {
                last_error.remove(&key);
                summary.power_samples += 1;
                batch.power.push(r.sample(d, utc));
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
    // Voltages and currents go with the temperatures, once per tick, not at the power rate: they
    // are context (PSU line voltage, rail droop, which rail draws) that moves slowly, the power
    // they multiply to is already sampled at up to 1 kHz, and a 1 kHz read of every in*/curr*
    // channel would multiply the sampler's reads and the points written for no new energy figure.
    for e in found.electrical.iter_mut() {
        let c = e.describe();
        let key = format!("electrical:{}:{}:{}", c.source, c.chip, c.channel);
        let utc = clock.utc_now();
        let started = Instant::now();
        let r = e.read();
        metrics.sensor_reads.record(&key, started.elapsed(), r.is_ok());
        match r {
            Ok(v) => {
                last_error.remove(&key);
                summary.electrical_samples += 1;
                batch.electrical.push(v.sample(c, utc));
            }
            Err(e) => report(&key, &c.chip, e.to_string(), utc, batch, last_error, summary),
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
        let bound = wattflip_infra::telemetry::serve_metrics(addr, Arc::new(move || m.render()), async {
            let _ = metrics_stopped.await;
        })
        .await?;
        tracing::info!(%bound, "metrics at /metrics");
    }
    let mut first = v1::Batch::default();
    let (backlog, first_sequence) = open_backlog(&cfg, &clock, &mut first)?;
    let mut found = discover_all(&cfg.sysfs_root, &cfg.kinds);
    // Tool probes and discovery are a handful of short child processes, once, before sampling.
    let tools = DriveTools::probe(&cfg.drives, std::sync::Arc::new(wattflip_drives::SystemRunner::new()));
    let drives = DriveInventory::discover(&tools, &cfg.sysfs_root);
    for note in found.unavailable.iter().chain(&drives.unavailable) {
        tracing::info!("not available on this host: {note}");
    }
    let mut first = v1::Batch::default();
    if let Some(nvme) = &tools.nvme {
        // A governor sweep killed with SIGKILL left its state file: put the original state back.
        let mut rec = Recorder::new(clock);
        recover_records(&cfg.drives.state_dir, nvme, &mut rec);
        first = rec.batch;
    }
    // The datasheet estimate per NVMe controller (labelled estimated, never summed with meters).
    if let Some(nvme) = &tools.nvme {
        let mut seen = std::collections::HashSet::new();
        for d in &drives.drives {
            let Some(ctrl) = d.controller.as_ref().filter(|c| seen.insert(c.to_string())) else { continue };
            if let Some(e) = crate::sensors::nvme_estimate::NvmeEstimate::new(nvme.clone(), ctrl, d.power_states.clone()) {
                found.power.push(Box::new(e));
            }
        }
    }
    let monitor = DriveMonitor::new(tools, drives.health_devices());
    let hello = hello(&cfg, &found, &drives, monitor.describe(), &clock);
    tracing::info!(
        agent = %cfg.agent_id,
        power = found.power.len(),
        temperature = found.temperature.len(),
        electrical = found.electrical.len(),
        "sensors discovered"
    );
    let (tx, rx) = tokio::sync::mpsc::channel::<v1::Batch>(64);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let exporter = Exporter::new(exporter_config(&cfg, tls), hello, backlog, first_sequence, metrics.clone());
    let export_task = tokio::spawn(exporter.run(rx, stop_rx, move || clock.utc_now()));
    // Scheduled probes feed the same exporter; they stop when sampling stops.
    let (jobs_stop_tx, jobs_stop_rx) = tokio::sync::watch::channel(false);
    let locks = crate::schedule::DeviceLocks::default();
    let jobs: Vec<_> = cfg
        .probes
        .iter()
        .cloned()
        .map(|job| {
            tracing::info!(probe = %job.name, schedule = %job.schedule, "probe scheduled");
            tokio::spawn(crate::schedule::run_job(job, cfg.agent_id.clone(), locks.clone(), tx.clone(), jobs_stop_rx.clone()))
        })
        .collect();

    let (monitor_stop, monitor_stop_rx) = tokio::sync::watch::channel(false);
    let monitor_task = (!monitor.is_empty())
        .then(|| tokio::spawn(monitor_loop(monitor, cfg.drives.smart_interval, clock, tx.clone(), monitor_stop_rx)));

    let mut summary = RunSummary::default();
    let mut state = SamplerState::default();
    for s in &found.unusable_power {
        first.events.push(event(clock.utc_now(), "sensor_unusable", v1::Severity::Warning, &s.zone, s.note.clone()));
        tracing::warn!(zone = %s.zone, "power source not usable: {}", s.note);
    }
    let mut pending_first = Some(first);
    // Sources read faster than reporting move to windowed sampler threads, one per source, each
    // source on its own grid; the rest are read on the tick.
    let (fast_groups, slow) = split_by_rate(&cfg, std::mem::take(&mut found.power));
    for (s, period) in slow {
        found.power.push(s);
        state.periods.push(period);
    }
    state.tick = cfg.sampling_interval;
    let fast: Vec<_> = fast_groups
        .into_iter()
        .map(|(source, sensors)| {
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let (flag, out, window) = (stop.clone(), tx.clone(), cfg.sampling_interval);
            tracing::info!(source = %source, zones = sensors.len(), "fast power sampling");
            let handle = std::thread::spawn(move || {
                let mut time = crate::sampler::RealTime::new(clock);
                crate::sampler::run_on(sensors, window, &mut time, flag, |b| out.blocking_send(b).is_ok())
            });
            (stop, handle)
        })
        .collect();
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
        // Sensor reads are short sysfs reads, but a BMC command can take a second: keep them off
        // the async workers' hot path.
        tokio::task::block_in_place(|| sample(&mut found, &clock, &mut batch, &mut state, &mut summary, &metrics));
        summary.ticks += 1;
        if batch == v1::Batch::default() || tx.send(batch).await.is_err() {
            continue;
        }
    }
    let _ = jobs_stop_tx.send(true);
    for (stop, _) in &fast {
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    for (_, handle) in fast {
        if let Ok(Ok(s)) = tokio::task::spawn_blocking(move || handle.join()).await {
            summary.power_samples += s.reads - s.errors;
            summary.sensor_errors += s.errors;
        }
    }
    if !stopped {
        // A probe in flight finishes and is delivered before a bounded run (--samples) ends.
        for j in jobs {
            let _ = j.await;
        }
    }
    let _ = monitor_stop.send(true);
    if let Some(task) = monitor_task {
        let (samples, errors) = task.await.unwrap_or_default();
        summary.temperature_samples += samples;
        summary.sensor_errors += errors;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sensors::{discover_all, PowerReading, PowerSensor, SensorError, SensorKinds};

    fn fixture(scenario: &str) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sysfs").join(scenario).join("sys")
    }

    /// A source with a BMC-like minimum interval (the IPMI sensor needs ipmitool to exist).
    struct Bmc;

    impl PowerSensor for Bmc {
        fn describe(&self) -> v1::PowerSource {
            v1::PowerSource { source: "ipmi".into(), zone: "dcmi".into(), ..Default::default() }
        }

        fn read(&mut self, _now_ns: u64) -> Result<Option<PowerReading>, SensorError> {
            Ok(None)
        }

        fn min_interval(&self) -> Duration {
            Duration::from_secs(1)
        }
    }

    fn config(sampling: &str) -> Config {
        let text = format!("[sampling]\n{sampling}\n[tls]\ninsecure_plaintext_loopback_only = true\n");
        Config::from_str(std::path::Path::new("agent.toml"), &text).unwrap()
    }

    /// (zone, period) of each sensor.
    type Zones = Vec<(String, Duration)>;

    fn layout(cfg: &Config) -> (Vec<(String, Zones)>, Zones) {
        let mut sensors = discover_all(&fixture("rapl-only"), &SensorKinds::default()).power;
        sensors.retain(|s| s.describe().zone == "package-0");
        sensors.extend(discover_all(&fixture("ina226"), &SensorKinds::default()).power);
        sensors.push(Box::new(Bmc));
        let (fast, slow) = split_by_rate(cfg, sensors);
        let named = |v: Vec<Timed>| v.into_iter().map(|(s, p)| (s.describe().zone, p)).collect::<Vec<_>>();
        (fast.into_iter().map(|(source, v)| (source, named(v))).collect(), named(slow))
    }

    #[test]
    fn each_source_gets_its_own_rate_and_thread() {
        let ms = Duration::from_millis;
        // One power_interval for all: the BMC still no faster than its 1 s.
        let (fast, slow) = layout(&config("interval = \"1s\"\npower_interval = \"10ms\""));
        assert_eq!(
            fast,
            vec![
                ("rapl".to_string(), vec![("package-0".to_string(), ms(10))]),
                ("hwmon".to_string(), vec![("ina226-0-0040/power1".to_string(), ms(10))]),
            ]
        );
        assert_eq!(slow, vec![("dcmi".to_string(), ms(1000))]);
        // Overrides: hwmon at 1 kHz, RAPL on the tick, IPMI at 1 Hz inside 5 s windows.
        let (fast, slow) = layout(&config(
            "interval = \"5s\"\npower_interval = \"5s\"\n[sampling.power_intervals]\nhwmon = \"1ms\"\nipmi = \"1s\"",
        ));
        assert_eq!(
            fast,
            vec![
                ("hwmon".to_string(), vec![("ina226-0-0040/power1".to_string(), ms(1))]),
                ("ipmi".to_string(), vec![("dcmi".to_string(), ms(1000))]),
            ]
        );
        assert_eq!(slow, vec![("package-0".to_string(), ms(5000))]);
    }
}
