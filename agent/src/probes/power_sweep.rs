//! `governor sweep`'s measuring: arms a restore guard (state file first), visits every
//! operational power state, runs the configured uFLIP patterns in each with temperature and live
//! power recorded, and puts the original state back — on success, on error, on SIGTERM/SIGINT
//! ([`sweep_until_signal`]: the signal task runs `RestoreRegistry::restore_all`) and, after
//! SIGKILL, at the next start (`drives::changes::recover_records`).
//!
//! Power is recorded live in every state (from the change on, so the settle time is the idle
//! baseline): each sweep run carries its power state, the state's datasheet watts, its measured
//! mean power and its energy (docs/schema.md), or none of the power fields on a host without a
//! power source, which one `sweep_power_unavailable` event explains. A new per-run field of the
//! sweep is set in `measure_state`.

use super::{convert, open_target};
use crate::clock::Clock;
use crate::drives::changes::ChangeLog;
use crate::drives::config::DrivesConfig;
use crate::drives::governor::{Controller, GovernorCmdError};
use crate::drives::sweep::{plan_for, SweepPattern};
use crate::energy::live::PowerRecorder;
use crate::sensors::{discover_all, Discovered, SensorKinds};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wattflip_drives::{plan_sweep, CommandRunner, RestoreError, RestoreGuard, RestoreRegistry, StepPurpose, SweepOrder, ThermalSnapshot};
use wattflip_proto::v1;
use wattflip_proto::v1::PowerStateOutcome as Outcome;

/// Where a sweep runs: the power sources to record and the `[drives]` settings (consent, state
/// folder).
#[derive(Clone)]
pub struct SweepHost {
    pub sysfs_root: PathBuf,
    pub kinds: SensorKinds,
    pub drives: DrivesConfig,
    /// Runs the tools of power sources (ipmitool).
    pub runner: Arc<dyn CommandRunner>,
}

/// What `governor sweep` was asked to do.
#[derive(Debug, Clone)]
pub struct SweepArgs {
    pub target: PathBuf,
    /// Size of a file target.
    pub size: u64,
    pub patterns: Vec<SweepPattern>,
    pub settle: Duration,
    pub seed: u64,
}

/// What a sweep measured.
#[derive(Debug, Default, Clone)]
pub struct SweepSummary {
    pub measured: Vec<u32>,
    pub skipped: Vec<(u32, String)>,
    /// Why the runs carry no measured power, when the host has no power source.
    pub power_note: Option<String>,
}

/// Time between power reads while a state is measured: the `probe` default (RAPL updates about
/// every 1 ms, shunt monitors every few ms).
const POWER_PERIOD: Duration = Duration::from_millis(5);
/// Power recorded after a state's last run, so that run's end and background work are seen; the
/// settle time when shorter (a zero settle, as in unit tests, adds no wait).
const MAX_POWER_TAIL: Duration = Duration::from_secs(1);

/// A live recording of every usable power zone during one state's measurement.
struct StatePower {
    recorder: PowerRecorder,
    /// UTC ns when recording began: the idle-baseline window runs from here to the first run.
    started_ns: i64,
}

impl StatePower {
    /// `None` when the host has no usable power source (the sweep said so once).
    fn start(host: &SweepHost, clock: Clock) -> Option<StatePower> {
        // Discovered afresh: the recorder thread owns its sensors.
        let found = discover_all(&host.sysfs_root, &host.kinds, &host.runner);
        if found.power.is_empty() {
            return None;
        }
        let started_ns = clock.utc_now();
        Some(StatePower { recorder: PowerRecorder::start(found.power, POWER_PERIOD, clock), started_ns })
    }
}

/// The state being measured.
struct StateCtx {
    state: u32,
    /// The state's datasheet maximum power (PSD MP).
    max_watts: Option<f64>,
    tail: Duration,
    run: wattflip_uflip::RunOptions,
}

/// Per-run power of one state's runs: the zone's label, the per-run energy (existing per-run
/// energy path) and the mean measured power over each run's IO window.
struct RunPower {
    label: String,
    energy: Option<crate::energy::ProbeEnergy>,
    series: wattflip_energy::PowerSeries,
}

impl RunPower {
    /// Stops the recording and aligns it with the report. Problems become events, never zeros.
    fn align(p: StatePower, report: &wattflip_uflip::ProbeReport, max_watts: Option<f64>, tag: &str, rec: &mut ChangeLog) -> Option<RunPower> {
        use wattflip_energy::{Baseline, UnixNanos};
        let zones = p.recorder.stop();
        let Some(zone) = crate::energy::live::pick(&zones, None) else {
            let labels = zones.iter().map(|z| format!("{} ({} samples, {} read errors)", z.label(), z.watts.len(), z.errors)).collect::<Vec<_>>();
            rec.event("sensor_error", v1::Severity::Warning, tag, format!("sweep: no power zone produced samples: {}", labels.join(", ")));
            return None;
        };
        let label = zone.label();
        let Some(series) = zone.series() else {
            rec.event("sensor_error", v1::Severity::Warning, tag, format!("sweep: {label}: power samples out of order; no per-run power"));
            return None;
        };
        let first = i64::try_from(report.started_ns).unwrap_or(i64::MAX);
        let energy = match Baseline::from_window(&series, UnixNanos(p.started_ns), UnixNanos(first), 3) {
            Ok(_) => {
                let idle = (UnixNanos(p.started_ns), UnixNanos(first));
                Some(crate::energy::analyze(report, &series, Some(idle), &label, &crate::energy::live_detect_config(), max_watts))
            }
            Err(e) => {
                rec.event(
                    "sweep_energy_skipped",
                    v1::Severity::Info,
                    tag,
                    format!("sweep: {label}: no idle baseline before the runs ({e}); runs carry power_w but no energy_j: use a settle time of at least 100ms"),
                );
                None
            }
        };
        Some(RunPower { label, energy, series })
    }

    /// Mean measured power over `[start_ns, end_ns)`. A run shorter than the sample period (64
    /// random 4 KiB reads can take 2 ms) holds no sample: the reading in effect during it, the
    /// last one before its end, stands for it; the series only holds this state's readings.
    fn mean_w(&self, start_ns: i64, end_ns: i64) -> Option<f64> {
        use wattflip_energy::UnixNanos;
        let w = self.series.powers_between(UnixNanos(start_ns), UnixNanos(end_ns));
        if !w.is_empty() {
            return Some(w.iter().map(|w| w.0).sum::<f64>() / w.len() as f64);
        }
        let i = self.series.index_at_or_after(UnixNanos(end_ns)).checked_sub(1)?;
        self.series.powers().get(i).map(|w| w.0)
    }
}

/// `governor sweep`: see the module docs. `registry` is shared with the caller's signal task;
/// `rec` too, so an interrupted sweep's records can still be written.
pub fn sweep(host: &SweepHost, s: &Controller, args: &SweepArgs, registry: &RestoreRegistry, rec: &Mutex<ChangeLog>) -> Result<SweepSummary, GovernorCmdError> {
    let lock = || rec.lock().unwrap_or_else(|p| p.into_inner());
    // Everything that can fail without touching the drive comes first.
    let target = open_target(&args.target, args.size, &host.drives.destroy_consent).map_err(|e| GovernorCmdError::Target(Box::new(e)))?;
    let plan = plan_for(&args.patterns, target.size, args.seed);
    if plan.writes() {
        target.ensure_writable().map_err(wattflip_uflip::ProbeError::WritesRefused)?;
    }
    let gov = s.governor()?;
    let guard = RestoreGuard::arm(gov.clone(), &s.id.serial, &host.drives.state_dir, Some(registry))?;
    let original = guard.record().original_state;
    let steps = plan_sweep(&s.id.power_states, u8::try_from(original).unwrap_or(u8::MAX), SweepOrder::IndexAscending)
        .map_err(|source| GovernorCmdError::Sweep { controller: s.controller.clone(), source })?;
    let mut power = discover_all(&host.sysfs_root, &host.kinds, &host.runner);
    let mut summary = SweepSummary::default();
    if power.power.is_empty() {
        // Said once, and the runs carry no power fields: a zero would read as a measurement.
        let note = no_power_note(&s.controller, &power);
        tracing::warn!("{note}");
        lock().event("sweep_power_unavailable", v1::Severity::Warning, &s.tag, note.clone());
        summary.power_note = Some(note);
    }
    let mut current = original;
    let mut result = Ok(());
    for step in steps.steps.iter().filter(|st| st.purpose == StepPurpose::Measure) {
        let state = u32::from(step.state);
        let outcome = match guard.set(state) {
            Ok(o) => o,
            Err(RestoreError::Finished { .. }) => {
                result = Err(GovernorCmdError::Interrupted);
                break;
            }
            Err(e) => {
                result = Err(e.into());
                break;
            }
        };
        current = s.record(&mut lock(), current, state, &outcome, &gov);
        // A drive that refuses every change (QEMU) can still be measured in the state it is in.
        if current != state {
            summary.skipped.push((state, outcome.to_string()));
            continue;
        }
        // Power is recorded from the state change on, so the settle time is this state's idle
        // baseline for the per-run energy.
        let recording = StatePower::start(host, lock().clock);
        std::thread::sleep(args.settle);
        // Measured into a local recorder: the shared one stays free for a signal-driven restore.
        let mut local = ChangeLog::new(lock().clock);
        let run = wattflip_uflip::RunOptions { io_deadline_floor: host.drives.io_deadline_floor, ..Default::default() };
        let ctx = StateCtx { state, max_watts: step.max_power.map(|w| w.0), tail: args.settle.min(MAX_POWER_TAIL), run };
        let measured = measure_state(s, &target, &plan, &args.patterns, &ctx, recording, &mut power, &mut local);
        lock().absorb(local);
        match measured {
            Ok(()) => summary.measured.push(state),
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    // Always restore, whatever happened above; a signal task may have restored already.
    if let Err(e) = restore(guard, s, current, original, &mut lock()) {
        result = result.and(Err(e));
    }
    result.map(|()| summary)
}

/// Why the sweep's runs carry no power: the host has no usable power source.
fn no_power_note(controller: &str, power: &Discovered) -> String {
    let mut why = vec!["no usable power source on this host".to_string()];
    why.extend(power.unavailable.iter().cloned());
    why.extend(power.unusable_power.iter().map(|p| format!("{}: {}", p.zone, p.note)));
    format!(
        "{controller}: sweep runs carry no measured power (power_w, energy_j): {}; add a drive rail monitor (hwmon INA2xx/PMBus), RAPL or IPMI DCMI and sweep again",
        why.join("; ")
    )
}

/// Puts the original state back at the end of a sweep and records the outcome.
fn restore(guard: RestoreGuard, s: &Controller, current: u32, original: u32, rec: &mut ChangeLog) -> Result<(), GovernorCmdError> {
    match guard.restore() {
        Ok(rep) => {
            let how = if rep.wrote { "written back and verified" } else { "still in place" };
            rec.change(&s.tag, &s.id.serial, current, rep.state, rep.state, Outcome::Restored, format!("sweep finished: original PS{} {how}", rep.state));
            Ok(())
        }
        Err(e) => {
            rec.change(&s.tag, &s.id.serial, current, original, current, Outcome::Failed, format!("restoring the original state failed: {e}"));
            Err(e.into())
        }
    }
}

/// Runs the patterns once in `state`, with temperature (nvme smart-log) and host power around it;
/// with a recording, every run also carries its measured power and energy.
#[allow(clippy::too_many_arguments)]
fn measure_state(
    s: &Controller,
    target: &wattflip_uflip::Target,
    plan: &wattflip_uflip::Plan,
    patterns: &[SweepPattern],
    ctx: &StateCtx,
    recording: Option<StatePower>,
    power: &mut Discovered,
    rec: &mut ChangeLog,
) -> Result<(), GovernorCmdError> {
    let (state, max_watts) = (ctx.state, ctx.max_watts);
    let before = thermal(s, rec);
    for p in power.power.iter_mut() {
        // The first read sets each counter's baseline at the start of the measurement.
        let _ = p.read(rec.clock.now().0);
    }
    let report = wattflip_uflip::run_with(target, plan, &mut wattflip_uflip::NullObserver, &ctx.run);
    let run_power = match (recording, &report) {
        (Some(p), Ok(report)) => {
            std::thread::sleep(ctx.tail);
            RunPower::align(p, report, max_watts, &s.tag, rec)
        }
        (Some(p), Err(_)) => {
            p.recorder.stop();
            None
        }
        (None, _) => None,
    };
    let report = report?;
    let mut watts = Vec::new();
    for p in power.power.iter_mut() {
        let d = p.describe();
        let (mono, utc) = rec.clock.now();
        match p.read(mono) {
            Ok(Some(r)) => {
                watts.push((d.zone.clone(), r.watts.0));
                rec.batch.power.push(r.sample(d, utc));
            }
            Ok(None) => {}
            Err(e) => rec.event("sensor_error", v1::Severity::Warning, &d.zone, e.to_string()),
        }
    }
    let after = thermal(s, rec);
    let device = convert::device_tag(&report);
    for (r, pat) in report.runs.iter().zip(patterns) {
        let energy = run_power.as_ref().and_then(|p| p.energy.as_ref());
        let Some(mut run) = convert::probe_run(&report, r, &device, energy) else {
            rec.event("probe_unsupported", v1::Severity::Info, &device, format!("PS{state} {pat}: {:?}", r.status));
            continue;
        };
        let thermal = (&before, &after);
        annotate(&mut run, s, pat, ctx, run_power.as_ref(), thermal, &watts);
        rec.batch.probe_runs.push(run);
    }
    Ok(())
}

/// A sweep run as the schema has it: its power state, the drive's identity, measured power, and
/// the state, controller, pattern, temperatures, throttling and per-zone power as parameters.
fn annotate(
    run: &mut v1::ProbeRun,
    s: &Controller,
    pat: &SweepPattern,
    ctx: &StateCtx,
    run_power: Option<&RunPower>,
    (before, after): (&Option<ThermalSnapshot>, &Option<ThermalSnapshot>),
    watts: &[(String, f64)],
) {
    let (state, max_watts) = (ctx.state, ctx.max_watts);
    run.run_id = format!("{}-ps{state}", run.run_id);
    // The sweep measures the controller's power states, whatever the target (a file on it),
    // so its runs carry the drive's model: `plan power-cap --model` selects by it.
    run.model = s.id.model.trim().to_string();
    run.firmware = s.id.firmware.trim().to_string();
    run.power_state = Some(state);
    run.power_state_max_w = max_watts;
    if let Some(p) = run_power {
        run.power_w = p.mean_w(run.start_ns, run.end_ns);
        if run.power_w.is_some() && run.energy_source.is_empty() {
            run.energy_source = p.label.clone();
        }
    }
    run.bench = "governor_sweep".into();
    run.experiment = format!("governor_sweep/{pat}");
    // The power state is the varying parameter, so `value` carries it into InfluxDB.
    run.varying = "power_state".into();
    run.value = f64::from(state);
    let params = &mut run.parameters;
    params.insert("power_state".into(), state.to_string());
    params.insert("nvme_controller".into(), s.tag.clone());
    params.insert("sweep_pattern".into(), pat.to_string());
    if let Some(w) = max_watts {
        params.insert("power_state_max_w".into(), w.to_string());
    }
    if let Some(c) = before.as_ref().and_then(|b| b.composite) {
        params.insert("temperature_start_c".into(), c.0.to_string());
    }
    if let Some(c) = after.as_ref().and_then(|a| a.composite) {
        params.insert("temperature_end_c".into(), c.0.to_string());
    }
    if let (Some(b), Some(a)) = (before, after) {
        if let Some(t) = a.throttled_since(b) {
            params.insert("throttled".into(), t.to_string());
        }
    }
    for (zone, w) in watts {
        params.insert(format!("power_w.{zone}"), w.to_string());
    }
}

/// An nvme-cli SMART snapshot, its composite temperature recorded; `None` (with an event) on error.
fn thermal(s: &Controller, rec: &mut ChangeLog) -> Option<ThermalSnapshot> {
    match s.nvme.smart_log(&s.controller) {
        Ok(log) => {
            if let Some(c) = log.composite {
                let t = rec.clock.utc_now();
                rec.batch.temperature.push(v1::TemperatureSample {
                    time_ns: t,
                    source: "nvme_cli".into(),
                    device: s.tag.clone(),
                    sensor: "Composite".into(),
                    celsius: c.0,
                });
            }
            Some(ThermalSnapshot::from_smart_log(&log))
        }
        Err(e) => {
            rec.event("sensor_error", v1::Severity::Warning, &s.tag, format!("nvme_cli: {e}"));
            None
        }
    }
}

/// Runs [`sweep`] on its own thread until it ends or `shutdown` (SIGTERM/SIGINT/SIGHUP) completes; then
/// the registry restores at once (waiting only for an in-flight set on the controller) and the
/// sweep's next set fails. The caller exits after writing the records.
pub async fn sweep_until_signal(
    host: SweepHost,
    s: Controller,
    args: SweepArgs,
    rec: Arc<Mutex<ChangeLog>>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<SweepSummary, GovernorCmdError> {
    // Poll the signal future once before the sweep thread touches the drive: that installs the
    // handlers, so a signal during the first set is caught and restored instead of killing us.
    let mut shutdown = std::pin::pin!(shutdown);
    let early = tokio::select! {
        biased;
        _ = shutdown.as_mut() => true,
        _ = std::future::ready(()) => false,
    };
    if early {
        return Err(GovernorCmdError::Interrupted);
    }
    let registry = RestoreRegistry::new();
    let (tag, serial) = (s.tag.clone(), s.id.serial.clone());
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (reg, shared) = (registry.clone(), rec.clone());
    std::thread::spawn(move || {
        let _ = tx.send(sweep(&host, &s, &args, &reg, &shared));
    });
    tokio::select! {
        r = rx => r.unwrap_or_else(|e| Err(GovernorCmdError::Thread(e.to_string()))),
        _ = shutdown.as_mut() => {
            tracing::warn!("signal received: restoring the original power state");
            let results = tokio::task::spawn_blocking(move || registry.restore_all()).await.unwrap_or_default();
            let mut rec = rec.lock().unwrap_or_else(|p| p.into_inner());
            for r in results {
                match r {
                    Ok(rep) => rec.change(&tag, &serial, rep.state, rep.state, rep.state, Outcome::Restored,
                        format!("sweep interrupted by a signal: original PS{} {}", rep.state,
                            if rep.wrote { "written back and verified" } else { "still in place" })),
                    Err(e) => {
                        tracing::error!("{e}");
                        rec.event("power_state_restore_failed", v1::Severity::Critical, &tag, e.to_string());
                    }
                }
            }
            Err(GovernorCmdError::Interrupted)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::path::Path;
    use wattflip_drives::fake::SetBehaviour;
    use wattflip_drives::{Governor, NvmeCli};

    use crate::drives::governor::tests::{config, five_states, fixture};

    fn host(c: &Config) -> SweepHost {
        SweepHost { sysfs_root: c.sysfs_root.clone(), kinds: c.kinds.clone(), drives: c.drives.clone(), runner: Arc::new(wattflip_drives::SystemRunner::new()) }
    }

    fn changes(rec: &ChangeLog) -> Vec<(u32, u32, u32, i32)> {
        rec.batch.power_state_changes.iter().map(|c| (c.from_state, c.to_state, c.observed_state, c.outcome)).collect()
    }

    #[test]
    fn sweep_visits_operational_states_measures_and_restores() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config(dir.path());
        let fake = five_states(SetBehaviour::Honour, 1);
        let mut rec = ChangeLog::new(Clock::new());
        let s = Controller::open(&cfg.drives, "/dev/nvme0", fake.clone(), &mut rec).unwrap();
        let target = tempfile::Builder::new().prefix("wf-sweep-").tempdir_in("/var/tmp").unwrap();
        let args = SweepArgs {
            target: target.path().join("scratch.dat"),
            size: 64 << 20,
            patterns: vec!["SR:128KiB".parse().unwrap(), "RW:4KiB".parse().unwrap()],
            settle: Duration::ZERO,
            seed: 1,
        };
        let rec = Mutex::new(rec);
        let summary = sweep(&host(&cfg), &s, &args, &RestoreRegistry::new(), &rec).unwrap();
        let rec = rec.into_inner().unwrap();
        assert_eq!(summary.measured, vec![0, 1, 2]);
        let a = Outcome::Applied as i32;
        assert_eq!(changes(&rec), vec![(1, 0, 0, a), (0, 1, 1, a), (1, 2, 2, a), (2, 1, 1, Outcome::Restored as i32)]);
        assert_eq!(fake.feature("/dev/nvme0", 2), Some(1));
        let runs: Vec<(String, String, f64, String)> =
            rec.batch.probe_runs.iter().map(|r| (r.experiment.clone(), r.varying.clone(), r.value, r.parameters["temperature_end_c"].clone())).collect();
        let want: Vec<(String, String, f64, String)> = [0.0, 1.0, 2.0]
            .iter()
            .flat_map(|&ps| ["governor_sweep/SR:128KiB", "governor_sweep/RW:4KiB"].map(|e| (e.to_string(), "power_state".to_string(), ps, "49.85".to_string())))
            .collect();
        assert_eq!(runs, want);
        assert!(rec.batch.probe_runs.iter().all(|r| r.mib_per_s > 0.0 && r.parameters["nvme_controller"] == "nvme0"));
        let json = std::fs::read_dir(dir.path()).unwrap().flatten().filter(|e| e.path().extension().is_some_and(|x| x == "json")).count();
        assert_eq!(json, 0, "state file removed after restore (lock files stay)");
        // No power source here: the runs say nothing about power rather than zero, and one event says why.
        assert!(rec.batch.probe_runs.iter().all(|r| r.power_w.is_none() && r.energy_j.is_none() && r.energy_source.is_empty()));
        let states: Vec<(Option<u32>, Option<f64>, &str)> =
            rec.batch.probe_runs.iter().map(|r| (r.power_state, r.power_state_max_w, r.model.as_str())).collect();
        let m = "WATTFLIP CONSTRUCTED 5PS NVME";
        assert_eq!(states, [0, 0, 1, 1, 2, 2].map(|ps| (Some(ps), Some([7.5, 5.9, 3.6][ps as usize]), m)).to_vec());
        let notes: Vec<&str> = rec.batch.events.iter().filter(|e| e.kind == "sweep_power_unavailable").map(|e| e.message.as_str()).collect();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].starts_with("/dev/nvme0: sweep runs carry no measured power (power_w, energy_j): no usable power source on this host"),
            "{}",
            notes[0]
        );
        assert_eq!(summary.power_note.as_deref(), Some(notes[0]));
    }

    #[test]
    fn with_a_drive_rail_every_sweep_run_carries_its_measured_power_and_energy() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = config(dir.path());
        // The INA226 fixture: a constant 18 W rail (power1_input = 18000000 µW).
        cfg.sysfs_root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sysfs/ina226/sys");
        let fake = five_states(SetBehaviour::Honour, 1);
        let mut rec = ChangeLog::new(Clock::new());
        let s = Controller::open(&cfg.drives, "/dev/nvme0", fake.clone(), &mut rec).unwrap();
        let target = tempfile::Builder::new().prefix("wf-sweep-").tempdir_in("/var/tmp").unwrap();
        let args = SweepArgs {
            target: target.path().join("scratch.dat"),
            size: 64 << 20,
            patterns: vec!["SR:128KiB".parse().unwrap()],
            // 100 ms of idle baseline (about 20 samples) before each state's runs.
            settle: Duration::from_millis(100),
            seed: 1,
        };
        let rec = Mutex::new(rec);
        let summary = sweep(&host(&cfg), &s, &args, &RestoreRegistry::new(), &rec).unwrap();
        let rec = rec.into_inner().unwrap();
        assert_eq!((summary.measured, summary.power_note), (vec![0, 1, 2], None));
        type PowerFields<'a> = (Option<u32>, Option<f64>, Option<f64>, &'a str);
        let got: Vec<PowerFields> = rec.batch.probe_runs.iter().map(|r| (r.power_state, r.power_state_max_w, r.power_w, r.energy_source.as_str())).collect();
        let zone = "hwmon:ina226-0-0040/power1";
        assert_eq!(got, vec![(Some(0), Some(7.5), Some(18.0), zone), (Some(1), Some(5.9), Some(18.0), zone), (Some(2), Some(3.6), Some(18.0), zone)]);
        for r in &rec.batch.probe_runs {
            // A flat rail: the settle window's baseline is 18 W and nothing lies above it.
            assert_eq!((r.idle_baseline_w, r.energy_above_idle_j), (Some(18.0), Some(0.0)), "{r:?}");
            let secs = (r.end_ns - r.start_ns) as f64 / 1e9;
            let e = r.energy_j.unwrap();
            // 18 W × the run, to within a few 5 ms samples at each end on a loaded machine.
            assert!((e - 18.0 * secs).abs() <= 18.0 * 0.05, "{e} J vs 18 W × {secs} s");
        }
        assert!(rec.batch.events.iter().all(|e| e.kind != "sweep_power_unavailable" && e.kind != "sweep_energy_skipped"));
    }

    #[test]
    fn a_refusing_drive_is_measured_only_in_its_current_state_and_a_leftover_state_file_is_recovered() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config(dir.path());
        // A crashed run left PS2 selected and its state file (original PS0) behind.
        let fake = five_states(SetBehaviour::Honour, 0);
        let gov = Governor::power_state(NvmeCli::new(fake.clone()), "/dev/nvme0", Vec::new());
        assert!(gov.is_err(), "an empty table is refused");
        let id = wattflip_drives::nvme_cli::parse_id_ctrl(&fixture("nvme/constructed-5ps-nvme-cli-2.3-id-ctrl.json")).unwrap();
        let gov = Governor::power_state(NvmeCli::new(fake.clone()), "/dev/nvme0", id.power_states).unwrap();
        let guard = RestoreGuard::arm(gov.clone(), &id.serial, dir.path(), None).unwrap();
        guard.set(2).unwrap();
        // As if SIGKILLed: no restore, the state file stays, and the kernel released the owner's
        // lock (a forgotten guard would keep holding it, i.e. look alive).
        let (path, left) = (guard.state_file(), std::fs::read(guard.state_file()).unwrap());
        drop(guard);
        gov.set(2).unwrap();
        std::fs::write(&path, left).unwrap();
        assert_eq!(fake.feature("/dev/nvme0", 2), Some(2));
        fake.set_behaviour("/dev/nvme0", SetBehaviour::Honour);
        let mut rec = ChangeLog::new(Clock::new());
        let s = Controller::open(&cfg.drives, "/dev/nvme0", fake.clone(), &mut rec).unwrap();
        assert_eq!(fake.feature("/dev/nvme0", 2), Some(0), "recovered at open");
        assert_eq!(changes(&rec), vec![(0, 0, 0, Outcome::Restored as i32)]);
        fake.set_behaviour("/dev/nvme0", SetBehaviour::Refuse);
        let target = tempfile::Builder::new().prefix("wf-sweep-").tempdir_in("/var/tmp").unwrap();
        let args = SweepArgs {
            target: target.path().join("scratch.dat"),
            size: 64 << 20,
            patterns: vec!["RR:4KiB".parse().unwrap()],
            settle: Duration::ZERO,
            seed: 1,
        };
        let rec = Mutex::new(rec);
        let summary = sweep(&host(&cfg), &s, &args, &RestoreRegistry::new(), &rec).unwrap();
        assert_eq!(summary.measured, vec![0]);
        assert_eq!(summary.skipped.iter().map(|(s, _)| *s).collect::<Vec<_>>(), vec![1, 2]);
        let rec = rec.into_inner().unwrap();
        let r = Outcome::Refused as i32;
        assert_eq!(changes(&rec)[1..], [(0, 0, 0, r), (0, 1, 0, r), (0, 2, 0, r), (0, 0, 0, Outcome::Restored as i32)]);
        assert_eq!(rec.batch.probe_runs.len(), 1);
        assert_eq!((rec.batch.probe_runs[0].value, rec.batch.probe_runs[0].pattern.as_str()), (0.0, "RR"));
    }
}
