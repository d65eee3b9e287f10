//! `wattflip-agent governor show|set|sweep`: the NVMe power-state governor (FID 02h) from the
//! command line, built on `wattflip_drives::{Governor, RestoreGuard, plan_sweep}`.
//!
//! - `show` prints the power-state table, the current state and whether it is changeable, and the
//!   current Intel PowerGovernorMode (FID C6h) on allow-listed models.
//! - `set --state N` validates (operational states only), sets, reads back and records the
//!   outcome; the new state stays (an operator's explicit choice; it is lost at the next
//!   controller reset).
//! - `set --intel-mode N` (FID C6h, allow-listed Intel models only) arms a restore guard (state
//!   file first), sets and reads back the mode, holds it for `--hold` or until SIGTERM/SIGINT, then
//!   puts the original mode back ([`intel_mode_until_signal`]). Unlike PS selection, a vendor
//!   power cap survives controller resets and is invisible in the PSD table, so it is never left
//!   behind: on error and signal it is restored at once, after SIGKILL at the next start.
//! - `sweep` arms a restore guard (state file first), visits every operational state, measures the
//!   configured uFLIP patterns in each, and puts the original state back — on success, on error, on
//!   SIGTERM/SIGINT (the caller's signal task runs [`RestoreRegistry::restore_all`]) and, after
//!   SIGKILL, through [`recover_records`], which `run` and every governor command call first.
//!
//! Power is recorded live in every state (from the change on, so the settle time is the idle
//! baseline): each sweep run carries its power state, the state's datasheet watts, its measured
//! mean power and its energy (docs/schema.md), or none of the power fields on a host without a
//! power source, which one `sweep_power_unavailable` event explains.
//!
//! Every attempted change is a `PowerStateChange` plus an `event` ([`Recorder`]). Results are written
//! to a local folder and, when a collector URL is given, streamed there. A change of the Intel mode
//! is recorded the same way, its from/to/observed being modes and its detail starting with
//! `Intel PowerGovernorMode (FID C6h)`. To add a knob, build its `Governor` from the [`Session`]
//! and reuse the same recording.

use super::monitor::event;
use super::sweep::{plan_for, SweepPattern};
use super::tools::{tag_of, DriveTools};
use crate::config::Config;
use crate::probes::{self, convert, ProbeCmdError};
use crate::runtime::Clock;
use crate::sensors::{discover_all, Discovered};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wattflip_drives::nvme_cli::controller_of;
use wattflip_drives::{
    plan_sweep, recover, CommandRunner, Governor, GovernorError, IdCtrl, NvmeCli, NvmeError, PowerManagement, RestoreError,
    IntelGovernorMode, Knob, RestoreGuard, RestoreRegistry, SetOutcome, StepPurpose, SweepError, SweepOrder,
    ThermalSnapshot,
};
use wattflip_proto::v1;
use wattflip_proto::v1::PowerStateOutcome as Outcome;

#[derive(Debug, thiserror::Error)]
pub enum GovernorCmdError {
    #[error("the governor needs nvme-cli, which is not available on this host: {0}")]
    NoNvmeCli(String),
    #[error("`{0}` is not an NVMe device node: pass a controller such as /dev/nvme0 or a namespace such as /dev/nvme0n1")]
    NotNvme(String),
    #[error(transparent)]
    Nvme(#[from] NvmeError),
    #[error(transparent)]
    Governor(#[from] GovernorError),
    #[error(transparent)]
    Restore(#[from] RestoreError),
    #[error("{controller}: cannot plan the sweep: {source}")]
    Sweep { controller: String, source: SweepError },
    #[error(transparent)]
    Target(#[from] ProbeCmdError),
    #[error("sweep target: {0}")]
    Engine(#[from] wattflip_uflip::ProbeError),
    #[error("{controller}: Intel PowerGovernorMode {mode} was not applied: {outcome}; the original mode was put back")]
    IntelNotApplied { controller: String, mode: u32, outcome: String },
    #[error("{controller}: PS{state} was not applied: {outcome}")]
    NotApplied { controller: String, state: u32, outcome: String },
    #[error("interrupted by a signal; the original power state was put back")]
    Interrupted,
    #[error("cannot write results to {path}: {source}")]
    Output { path: PathBuf, source: std::io::Error },
    #[error("the collector at {url} did not acknowledge the results; they are in {dir}")]
    NotDelivered { url: String, dir: PathBuf },
    #[error("the sweep thread stopped unexpectedly: {0}; run `wattflip-agent governor show` to restore from the state file")]
    Thread(String),
}

/// Collects what a governor command did, as the wire format carries it.
#[derive(Debug)]
pub struct Recorder {
    pub batch: v1::Batch,
    clock: Clock,
}

impl Recorder {
    pub fn new(clock: Clock) -> Self {
        Recorder { batch: v1::Batch::default(), clock }
    }

    /// A `PowerStateChange` and its `event`.
    #[allow(clippy::too_many_arguments)]
    pub fn change(&mut self, tag: &str, serial: &str, from: u32, to: u32, observed: u32, outcome: Outcome, detail: String) {
        self.change_of(Knob::PowerState, tag, serial, from, to, observed, outcome, detail)
    }

    /// A change of `knob`: the event names PS numbers for FID 02h and modes for Intel C6h.
    #[allow(clippy::too_many_arguments)]
    pub fn change_of(&mut self, knob: Knob, tag: &str, serial: &str, from: u32, to: u32, observed: u32, outcome: Outcome, detail: String) {
        let label = |v: u32| match knob {
            Knob::PowerState => format!("PS{v}"),
            Knob::IntelPowerGovernor => format!("Intel mode {v}"),
        };
        let t = self.clock.utc_now();
        let name = wattflip_proto::schema::outcome_name(outcome);
        self.batch.power_state_changes.push(v1::PowerStateChange {
            time_ns: t,
            device: tag.into(),
            serial: serial.trim().into(),
            from_state: from,
            to_state: to,
            observed_state: observed,
            outcome: outcome as i32,
            detail: detail.clone(),
        });
        let severity = match outcome {
            Outcome::Applied | Outcome::Restored => v1::Severity::Info,
            Outcome::Failed if to == from => v1::Severity::Critical,
            _ => v1::Severity::Warning,
        };
        let mut e = event(t, "power_state_change", severity, tag, format!("{tag}: {} -> {}: {name}: {detail}", label(from), label(to)));
        for (k, v) in [("outcome", name.to_string()), ("from", from.to_string()), ("to", to.to_string()), ("observed", observed.to_string())] {
            e.attributes.insert(k.into(), v);
        }
        tracing::info!("{}", e.message);
        self.batch.events.push(e);
    }

    /// Appends another recorder's records.
    pub fn absorb(&mut self, other: Recorder) {
        let b = other.batch;
        self.batch.power.extend(b.power);
        self.batch.temperature.extend(b.temperature);
        self.batch.probe_runs.extend(b.probe_runs);
        self.batch.power_state_changes.extend(b.power_state_changes);
        self.batch.events.extend(b.events);
        self.batch.nvme_smart.extend(b.nvme_smart);
    }

    pub fn event(&mut self, kind: &str, severity: v1::Severity, device: &str, message: String) {
        let e = event(self.clock.utc_now(), kind, severity, device, message);
        self.batch.events.push(e);
    }
}

/// Restores every state file a crashed run left behind, and records each result.
pub fn recover_records(state_dir: &Path, nvme: &NvmeCli, rec: &mut Recorder) {
    let found = match recover(state_dir, nvme) {
        Ok(f) => f,
        Err(e) => {
            rec.event("power_state_recover_failed", v1::Severity::Critical, "", e.to_string());
            tracing::error!("{e}");
            return;
        }
    };
    for r in found {
        let (device, serial) = r.record.as_ref().map(|s| (tag_of(&s.device), s.serial.clone())).unwrap_or_default();
        match r.result {
            Ok(rep) => {
                let detail = format!(
                    "recovered after an unclean exit from {} ({})",
                    r.path.display(),
                    if rep.wrote { "original state written back and verified" } else { "drive was already in it" }
                );
                tracing::warn!(device = %rep.device, "{detail}");
                // A C6h file restores an Intel mode: say so in the record (detail) and the event.
                let knob = Knob::from_feature_id(rep.feature_id).unwrap_or(Knob::PowerState);
                let detail = if knob == Knob::PowerState { detail } else { format!("{knob}: {detail}") };
                rec.change_of(knob, &tag_of(&rep.device), &serial, rep.state, rep.state, rep.state, Outcome::Restored, detail);
            }
            Err(e) => {
                tracing::error!("{e}");
                rec.event("power_state_recover_failed", v1::Severity::Critical, &device, e.to_string());
            }
        }
    }
}

/// One controller opened for governor commands.
pub struct Session {
    pub nvme: NvmeCli,
    /// `/dev/nvme0`.
    pub controller: String,
    /// `nvme0`.
    pub tag: String,
    pub id: IdCtrl,
}

impl Session {
    /// Probes nvme-cli, recovers leftover state files (recorded in `rec`), reads id-ctrl.
    pub fn open(cfg: &Config, device: &str, runner: Arc<dyn CommandRunner>, rec: &mut Recorder) -> Result<Session, GovernorCmdError> {
        let tools = DriveTools::probe(&cfg.drives, runner);
        let why = || tools.unavailable.iter().filter(|n| n.starts_with("nvme-cli")).cloned().collect::<Vec<_>>().join("; ");
        let nvme = tools.nvme.clone().ok_or_else(|| GovernorCmdError::NoNvmeCli(why()))?;
        let controller = controller_of(device).filter(|_| device.starts_with("/dev/")).ok_or_else(|| GovernorCmdError::NotNvme(device.into()))?;
        recover_records(&cfg.drives.state_dir, &nvme, rec);
        let id = nvme.id_ctrl(&controller)?;
        Ok(Session { tag: tag_of(&controller), nvme, controller, id })
    }

    pub fn governor(&self) -> Result<Governor, GovernorError> {
        Governor::power_state(self.nvme.clone(), self.controller.clone(), self.id.power_states.clone())
    }

    /// The power-state table and current state, for humans.
    pub fn show(&self) -> String {
        let mut s = String::new();
        let id = &self.id;
        let _ = writeln!(
            s,
            "{} ({}): model {}, serial {}, firmware {}, {} power state(s)",
            self.controller,
            self.nvme.program(),
            id.model.trim(),
            id.serial.trim(),
            id.firmware.trim(),
            id.power_states.len()
        );
        let gov = self.governor();
        match gov.as_ref().map(|g| (g.read_raw(), g.capabilities())) {
            Ok((Ok(raw), caps)) => {
                let pm = PowerManagement::from_value(raw);
                let caps = match caps {
                    Ok(c) => format!(
                        "{}, {}",
                        if c.changeable() { "changeable" } else { "NOT changeable (SEL 3)" },
                        if c.saveable() { "saveable" } else { "not saveable" }
                    ),
                    Err(e) => format!("capabilities unknown: {e}"),
                };
                let _ = writeln!(s, "current: PS{} (workload hint {}); {caps}", pm.ps, pm.workload_hint);
            }
            Ok((Err(e), _)) => {
                let _ = writeln!(s, "current: unknown: {e}");
            }
            Err(e) => {
                let _ = writeln!(s, "current: unknown: {e}");
            }
        }
        s.push_str(&super::power_state_table(&id.power_states));
        let limit = |c: Option<wattflip_drives::Celsius>| c.map(|c| c.to_string()).unwrap_or_else(|| "not reported".into());
        let _ = writeln!(s, "thresholds: warning {}, critical {}", limit(id.warning_temperature()), limit(id.critical_temperature()));
        let intel = match self.intel_governor() {
            Err(_) => "not on the allow-list for this model".to_string(),
            Ok(g) => match g.current() {
                Ok(m) => format!("mode {m} ({})", intel_mode_watts(m)),
                Err(e) => format!("supported by this model, current mode unknown: {e}"),
            },
        };
        let _ = writeln!(s, "Intel PowerGovernorMode (FID C6h): {intel}");
        s
    }

    /// The Intel FID C6h governor; fails unless the model is on the allow-list.
    pub fn intel_governor(&self) -> Result<Governor, GovernorError> {
        Governor::intel_power_governor(self.nvme.clone(), self.controller.clone(), &self.id)
    }

    /// Reads the current state for a record; `None` when the read fails.
    fn current(&self, gov: &Governor) -> Option<u32> {
        gov.current().ok()
    }

    /// Records one set outcome. Returns the state the drive is in afterwards.
    fn record(&self, rec: &mut Recorder, from: u32, to: u32, outcome: &SetOutcome, gov: &Governor) -> u32 {
        let (kind, observed) = match outcome {
            SetOutcome::Applied { current, .. } => (Outcome::Applied, *current),
            SetOutcome::Ignored { observed, .. } => (Outcome::Ignored, *observed),
            SetOutcome::Refused { .. } => (Outcome::Refused, self.current(gov).unwrap_or(from)),
            SetOutcome::Failed { .. } => (Outcome::Failed, self.current(gov).unwrap_or(from)),
        };
        rec.change(&self.tag, &self.id.serial, from, to, observed, kind, outcome.to_string());
        observed
    }
}

/// `governor set`: validate, set, read back, record. The state is kept.
pub fn set(s: &Session, state: u32, rec: &mut Recorder) -> Result<(), GovernorCmdError> {
    let gov = s.governor()?;
    if let Err(e) = gov.validate(state) {
        rec.event("power_state_rejected", v1::Severity::Warning, &s.tag, e.to_string());
        return Err(e.into());
    }
    let from = gov.current()?;
    let outcome = gov.set(state)?;
    s.record(rec, from, state, &outcome, &gov);
    if !outcome.is_applied() {
        return Err(GovernorCmdError::NotApplied { controller: s.controller.clone(), state, outcome: outcome.to_string() });
    }
    Ok(())
}

/// The cap of an Intel PowerGovernorMode on PCIe x4 cards (hardware.md §5.3).
pub fn intel_mode_watts(mode: u32) -> &'static str {
    match IntelGovernorMode::from_value(mode) {
        Some(IntelGovernorMode::Watts25) => "25 W",
        Some(IntelGovernorMode::Watts20) => "20 W",
        Some(IntelGovernorMode::Watts10) => "10 W",
        None => "undocumented",
    }
}

/// `governor set --intel-mode`: arm a restore guard (state file before the change), set the mode
/// and read it back, hold it for `hold` (`None`: until the signal), then restore the original and
/// verify. The end of the hold and a signal are both normal ends; a mode the drive refuses or
/// ignores is restored at once and returned as an error. After SIGKILL the state file makes the
/// next `run` or `governor` command restore it ([`recover_records`]).
pub async fn intel_mode_until_signal(
    cfg: &Config,
    s: &Session,
    mode: u32,
    hold: Option<Duration>,
    rec: &Mutex<Recorder>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<String, GovernorCmdError> {
    let lock = || rec.lock().unwrap_or_else(|p| p.into_inner());
    let gov = s.intel_governor()?;
    // Rejected before the state file exists: nothing to restore.
    if let Err(e) = gov.validate(mode) {
        lock().event("power_state_rejected", v1::Severity::Warning, &s.tag, e.to_string());
        return Err(e.into());
    }
    // Poll the signal future once before touching the drive: that installs the SIGTERM/SIGINT
    // handlers, so a signal during the set is caught and restored instead of killing the process.
    let mut shutdown = std::pin::pin!(shutdown);
    let early = tokio::select! {
        biased;
        _ = shutdown.as_mut() => true,
        _ = std::future::ready(()) => false,
    };
    if early {
        return Ok(format!("{}: interrupted by a signal before the change; nothing was changed\n", s.controller));
    }
    let guard = RestoreGuard::arm(gov, &s.id.serial, &cfg.drives.state_dir, None)?;
    let original = guard.record().original_state;
    let knob = Knob::IntelPowerGovernor;
    let (tag, serial) = (s.tag.as_str(), s.id.serial.as_str());
    let detail = |what: String| format!("{knob}: {what}");
    let outcome = guard.set(mode)?;
    let observed = match &outcome {
        SetOutcome::Applied { current, .. } => *current,
        SetOutcome::Ignored { observed, .. } => *observed,
        _ => guard.record().original_state,
    };
    let kind = match &outcome {
        SetOutcome::Applied { .. } => Outcome::Applied,
        SetOutcome::Ignored { .. } => Outcome::Ignored,
        SetOutcome::Refused { .. } => Outcome::Refused,
        SetOutcome::Failed { .. } => Outcome::Failed,
    };
    lock().change_of(knob, tag, serial, original, mode, observed, kind, detail(outcome.to_string()));
    let mut text = String::new();
    let held = if outcome.is_applied() {
        let _ = writeln!(
            text,
            "{}: Intel PowerGovernorMode {mode} ({}) applied and verified; original mode {original} saved in {}",
            s.controller,
            intel_mode_watts(mode),
            guard.state_file().display()
        );
        match hold {
            Some(d) => {
                tokio::select! {
                    _ = tokio::time::sleep(d) => format!("held for {}", humantime::format_duration(d)),
                    _ = shutdown.as_mut() => "interrupted by a signal".to_string(),
                }
            }
            None => {
                shutdown.as_mut().await;
                "held until a signal".to_string()
            }
        }
    } else {
        "not applied".to_string()
    };
    // Restore on a blocking thread: nvme-cli children, and a signal must not be able to cut it.
    let restored = tokio::task::spawn_blocking(move || guard.restore())
        .await
        .map_err(|e| GovernorCmdError::Thread(e.to_string()))?;
    match restored {
        Ok(rep) => {
            lock().change_of(
                knob,
                tag,
                serial,
                observed,
                rep.state,
                rep.state,
                Outcome::Restored,
                detail(format!("{held}: original mode {} {}", rep.state, if rep.wrote { "written back and verified" } else { "still in place" })),
            );
            let _ = writeln!(text, "{}: {held}; original Intel PowerGovernorMode {} restored and verified", s.controller, rep.state);
        }
        Err(e) => {
            lock().change_of(knob, tag, serial, observed, original, observed, Outcome::Failed, detail(format!("restoring the original mode failed: {e}")));
            return Err(e.into());
        }
    }
    if !outcome.is_applied() {
        return Err(GovernorCmdError::IntelNotApplied { controller: s.controller.clone(), mode, outcome: outcome.to_string() });
    }
    Ok(text)
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
    recorder: crate::energy::live::Recorder,
    /// UTC ns when recording began: the idle-baseline window runs from here to the first run.
    started_ns: i64,
}

impl StatePower {
    /// `None` when the host has no usable power source (the sweep said so once).
    fn start(cfg: &Config, clock: Clock) -> Option<StatePower> {
        // Discovered afresh: the recorder thread owns its sensors.
        let found = discover_all(&cfg.sysfs_root, &cfg.kinds);
        if found.power.is_empty() {
            return None;
        }
        let started_ns = clock.utc_now();
        Some(StatePower { recorder: crate::energy::live::Recorder::start(found.power, POWER_PERIOD), started_ns })
    }
}

/// The state being measured.
struct StateCtx {
    state: u32,
    /// The state's datasheet maximum power (PSD MP).
    max_watts: Option<f64>,
    tail: Duration,
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
    fn align(p: StatePower, report: &wattflip_uflip::ProbeReport, max_watts: Option<f64>, tag: &str, rec: &mut Recorder) -> Option<RunPower> {
        use wattflip_energy::{Baseline, RunDetectConfig, UnixNanos};
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
            Ok(b) => Some(crate::energy::analyze(report, &series, Some(&b), &label, &RunDetectConfig::default(), max_watts)),
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
pub fn sweep(
    cfg: &Config,
    s: &Session,
    args: &SweepArgs,
    registry: &RestoreRegistry,
    rec: &Mutex<Recorder>,
) -> Result<SweepSummary, GovernorCmdError> {
    let lock = || rec.lock().unwrap_or_else(|p| p.into_inner());
    // Everything that can fail without touching the drive comes first.
    let target = probes::open_target(&args.target, args.size, &cfg.drives.destroy_consent)?;
    let plan = plan_for(&args.patterns, target.size, args.seed);
    if plan.writes() {
        target.ensure_writable().map_err(wattflip_uflip::ProbeError::WritesRefused)?;
    }
    let gov = s.governor()?;
    let guard = RestoreGuard::arm(gov.clone(), &s.id.serial, &cfg.drives.state_dir, Some(registry))?;
    let original = guard.record().original_state;
    let steps = plan_sweep(&s.id.power_states, u8::try_from(original).unwrap_or(u8::MAX), SweepOrder::IndexAscending)
        .map_err(|source| GovernorCmdError::Sweep { controller: s.controller.clone(), source })?;
    let mut power = discover_all(&cfg.sysfs_root, &cfg.kinds);
    let mut summary = SweepSummary::default();
    if power.power.is_empty() {
        // Said once, and the runs carry no power fields: a zero would read as a measurement.
        let mut why = vec!["no usable power source on this host".to_string()];
        why.extend(power.unavailable.iter().cloned());
        why.extend(power.unusable_power.iter().map(|p| format!("{}: {}", p.zone, p.note)));
        let note = format!(
            "{}: sweep runs carry no measured power (power_w, energy_j): {}; add a drive rail monitor (hwmon INA2xx/PMBus), RAPL or IPMI DCMI and sweep again",
            s.controller,
            why.join("; ")
        );
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
        let recording = StatePower::start(cfg, lock().clock);
        std::thread::sleep(args.settle);
        // Measured into a local recorder: the shared one stays free for a signal-driven restore.
        let mut local = Recorder::new(lock().clock);
        let ctx = StateCtx { state, max_watts: step.max_power.map(|w| w.0), tail: args.settle.min(MAX_POWER_TAIL) };
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
    match guard.restore() {
        Ok(rep) => lock().change(
            &s.tag,
            &s.id.serial,
            current,
            rep.state,
            rep.state,
            Outcome::Restored,
            format!("sweep finished: original PS{} {}", rep.state, if rep.wrote { "written back and verified" } else { "still in place" }),
        ),
        Err(e) => {
            lock().change(&s.tag, &s.id.serial, current, original, current, Outcome::Failed, format!("restoring the original state failed: {e}"));
            result = result.and(Err(e.into()));
        }
    }
    result.map(|()| summary)
}

/// Runs the patterns once in `state`, with temperature (nvme smart-log) and host power around it;
/// with a recording, every run also carries its measured power and energy.
#[allow(clippy::too_many_arguments)]
fn measure_state(
    s: &Session,
    target: &wattflip_uflip::Target,
    plan: &wattflip_uflip::Plan,
    patterns: &[SweepPattern],
    ctx: &StateCtx,
    recording: Option<StatePower>,
    power: &mut Discovered,
    rec: &mut Recorder,
) -> Result<(), GovernorCmdError> {
    let (state, max_watts) = (ctx.state, ctx.max_watts);
    let before = thermal(s, rec);
    for p in power.power.iter_mut() {
        // The first read sets each counter's baseline at the start of the measurement.
        let _ = p.read(rec.clock.now().0);
    }
    let report = wattflip_uflip::run(target, plan, &mut wattflip_uflip::NullObserver);
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
        run.run_id = format!("{}-ps{state}", run.run_id);
        // The sweep measures the controller's power states, whatever the target (a file on it),
        // so its runs carry the drive's model: `plan power-cap --model` selects by it.
        run.model = s.id.model.trim().to_string();
        run.firmware = s.id.firmware.trim().to_string();
        run.power_state = Some(state);
        run.power_state_max_w = max_watts;
        if let Some(p) = &run_power {
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
        if let (Some(b), Some(a)) = (&before, &after) {
            if let Some(t) = a.throttled_since(b) {
                params.insert("throttled".into(), t.to_string());
            }
        }
        for (zone, w) in &watts {
            params.insert(format!("power_w.{zone}"), w.to_string());
        }
        rec.batch.probe_runs.push(run);
    }
    Ok(())
}

/// An nvme-cli SMART snapshot, its composite temperature recorded; `None` (with an event) on error.
fn thermal(s: &Session, rec: &mut Recorder) -> Option<ThermalSnapshot> {
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

/// Runs [`sweep`] on its own thread until it ends or `shutdown` (SIGTERM/SIGINT) completes; then
/// the registry restores at once (waiting only for an in-flight set on the controller) and the
/// sweep's next set fails. The caller exits after writing the records.
pub async fn sweep_until_signal(
    cfg: Config,
    s: Session,
    args: SweepArgs,
    rec: Arc<Mutex<Recorder>>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<SweepSummary, GovernorCmdError> {
    let registry = RestoreRegistry::new();
    let (tag, serial) = (s.tag.clone(), s.id.serial.clone());
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (reg, shared) = (registry.clone(), rec.clone());
    std::thread::spawn(move || {
        let _ = tx.send(sweep(&cfg, &s, &args, &reg, &shared));
    });
    tokio::select! {
        r = rx => r.unwrap_or_else(|e| Err(GovernorCmdError::Thread(e.to_string()))),
        _ = shutdown => {
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

/// A governor command from the command line.
#[derive(Debug, Clone)]
pub enum Request {
    Show,
    Set { state: u32 },
    /// Intel FID C6h mode, held for `hold` (`None`: until SIGTERM/SIGINT), then restored.
    IntelMode { mode: u32, hold: Option<Duration> },
    Sweep(SweepArgs),
}

impl Request {
    fn name(&self) -> &'static str {
        match self {
            Request::Show => "governor-show",
            Request::Set { .. } | Request::IntelMode { .. } => "governor-set",
            Request::Sweep(_) => "governor-sweep",
        }
    }
}

/// Runs a governor command on `device` and delivers its records: `<out>/<command>.lp` always
/// (when there is anything to record), and the collector at `collector` when given. Returns the
/// text for stdout; on error the records are still delivered first.
pub fn execute(
    cfg: Config,
    device: &str,
    req: Request,
    out: &Path,
    collector: Option<&str>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<String, GovernorCmdError> {
    let rt = tokio::runtime::Runtime::new().map_err(|source| GovernorCmdError::Output { path: out.to_path_buf(), source })?;
    let clock = Clock::new();
    let rec = Arc::new(Mutex::new(Recorder::new(clock)));
    let name = req.name();
    let runner: Arc<dyn CommandRunner> = Arc::new(wattflip_drives::SystemRunner::new());
    // A signal that arrives before the command gets to wait for it still ends the wait.
    let mut shutdown = std::pin::pin!(shutdown);
    let result = (|| -> Result<String, GovernorCmdError> {
        let s = Session::open(&cfg, device, runner.clone(), &mut rec.lock().unwrap_or_else(|p| p.into_inner()))?;
        match req {
            Request::Show => Ok(s.show()),
            Request::Set { state } => {
                set(&s, state, &mut rec.lock().unwrap_or_else(|p| p.into_inner()))?;
                Ok(format!("{}: PS{state} applied and verified\n", s.controller))
            }
            Request::IntelMode { mode, hold } => rt.block_on(intel_mode_until_signal(&cfg, &s, mode, hold, &rec, shutdown.as_mut())),
            Request::Sweep(args) => {
                let summary = rt.block_on(sweep_until_signal(cfg.clone(), s, args, rec.clone(), shutdown.as_mut()))?;
                let mut text = format!("measured power states: {:?}\n", summary.measured);
                if let Some(note) = &summary.power_note {
                    let _ = writeln!(text, "{note}");
                }
                for (st, why) in &summary.skipped {
                    let _ = writeln!(text, "skipped PS{st}: {why}");
                }
                Ok(text)
            }
        }
    })();
    let batch = std::mem::take(&mut rec.lock().unwrap_or_else(|p| p.into_inner()).batch);
    let delivered = deliver(&rt, &cfg, &batch, out, name, collector, || crate::runtime::command_hello(&cfg, runner, &clock));
    let mut text = result?;
    text.push_str(&delivered?);
    Ok(text)
}

/// Local folder, then the collector. Returns a line per destination.
fn deliver(
    rt: &tokio::runtime::Runtime,
    cfg: &Config,
    batch: &v1::Batch,
    out: &Path,
    name: &str,
    collector: Option<&str>,
    hello: impl FnOnce() -> v1::Hello,
) -> Result<String, GovernorCmdError> {
    if batch == &v1::Batch::default() {
        return Ok(String::new());
    }
    let tags = wattflip_proto::schema::HostTags { host: cfg.agent_id.clone(), labels: cfg.labels.clone() };
    let path = write_local(out, name, batch, &tags)?;
    let mut text = format!("records written to {}\n", path.display());
    if let Some(url) = collector {
        // Built only when sending: the inventory costs a few tool calls.
        let hello = hello();
        let b = v1::Batch { agent_id: cfg.agent_id.clone(), ..batch.clone() };
        let mut cfg = cfg.clone();
        cfg.collector.urls = vec![url.to_string()];
        let s = rt.block_on(probes::stream::send(&cfg, hello, vec![b], Duration::from_secs(60)));
        if s.map(|s| s.acked).unwrap_or(0) == 0 {
            return Err(GovernorCmdError::NotDelivered { url: url.into(), dir: out.to_path_buf() });
        }
        let _ = writeln!(text, "sent to the collector at {url}: acknowledged");
    }
    Ok(text)
}

/// Writes the records as line protocol (`<name>.lp`, exactly the points the collector would store)
/// into `dir`. Returns the file.
pub fn write_local(dir: &Path, name: &str, batch: &v1::Batch, tags: &wattflip_proto::schema::HostTags) -> Result<PathBuf, GovernorCmdError> {
    let out = |source| GovernorCmdError::Output { path: dir.to_path_buf(), source };
    std::fs::create_dir_all(dir).map_err(out)?;
    let b = v1::Batch { agent_id: String::new(), sequence: 1, ..batch.clone() };
    let domain = wattflip_proto::domain::convert_batch("", b)
        .map_err(|e| out(std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())))?;
    let (body, errors) = wattflip_proto::lineproto::encode_all(&wattflip_proto::schema::batch_points(&domain, tags));
    for e in errors {
        tracing::warn!("a record could not be encoded: {e}");
    }
    let path = dir.join(format!("{name}.lp"));
    std::fs::write(&path, body).map_err(|source| GovernorCmdError::Output { path: path.clone(), source })?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wattflip_drives::fake::{FakeNvme, SetBehaviour};

    fn fixture(rel: &str) -> String {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("drives/tests/fixtures").join(rel);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    fn config(state_dir: &Path) -> Config {
        let mut c = Config::from_str(Path::new("t.toml"), "agent_id = \"t1\"\n[tls]\ninsecure_plaintext_loopback_only = true\n").unwrap();
        c.drives.state_dir = state_dir.to_path_buf();
        c.drives.smartctl = false;
        c.drives.sweep_settle = Duration::ZERO;
        c.sysfs_root = PathBuf::from("/nonexistent-sys");
        c
    }

    fn five_states(behaviour: SetBehaviour, power_value: u32) -> Arc<FakeNvme> {
        Arc::new(
            FakeNvme::new()
                .with_controller("/dev/nvme0", &fixture("nvme/constructed-5ps-nvme-cli-2.3-id-ctrl.json"), power_value, behaviour)
                .with_smart_log("/dev/nvme0", &fixture("nvme/qemu-nvme-cli-2.3-smart-log.json")),
        )
    }

    fn changes(rec: &Recorder) -> Vec<(u32, u32, u32, i32)> {
        rec.batch.power_state_changes.iter().map(|c| (c.from_state, c.to_state, c.observed_state, c.outcome)).collect()
    }

    #[test]
    fn set_refused_is_recorded_and_the_state_is_intact() {
        let dir = tempfile::tempdir().unwrap();
        let fake = Arc::new(
            FakeNvme::new().with_controller("/dev/nvme0", &fixture("nvme/qemu-nvme-cli-2.3-id-ctrl.json"), 0, SetBehaviour::Refuse),
        );
        let mut rec = Recorder::new(Clock::new());
        let s = Session::open(&config(dir.path()), "/dev/nvme0n1", fake.clone(), &mut rec).unwrap();
        assert_eq!(s.controller, "/dev/nvme0");
        let e = set(&s, 0, &mut rec).unwrap_err();
        assert!(e.to_string().starts_with("/dev/nvme0: PS0 was not applied: refused 0: NVMe status 0x410e"), "{e}");
        assert_eq!(changes(&rec), vec![(0, 0, 0, Outcome::Refused as i32)]);
        assert_eq!(rec.batch.events[0].kind, "power_state_change");
        assert_eq!(fake.feature("/dev/nvme0", 2), Some(0));
        // PS1 does not exist on QEMU's one-state controller: rejected before reaching the drive.
        let e = set(&s, 1, &mut rec).unwrap_err();
        assert!(e.to_string().contains("PS1 does not exist"), "{e}");
        assert_eq!(fake.set_calls(), 1);
        assert_eq!(rec.batch.events[1].kind, "power_state_rejected");
    }

    #[test]
    fn an_intel_mode_the_drive_ignores_or_refuses_is_restored_at_once_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config(dir.path());
        let fake = Arc::new(
            FakeNvme::new()
                .with_controller("/dev/nvme0", &fixture("nvme/constructed-intel-p3700-nvme-cli-2.3-id-ctrl.json"), 0, SetBehaviour::Ignore)
                .with_feature("/dev/nvme0", 0xc6, 1),
        );
        let rec = Mutex::new(Recorder::new(Clock::new()));
        let s = Session::open(&cfg, "/dev/nvme0", fake.clone(), &mut rec.lock().unwrap()).unwrap();
        assert!(s.show().contains("\nIntel PowerGovernorMode (FID C6h): mode 1 (20 W)\n"), "{}", s.show());
        let rt = tokio::runtime::Runtime::new().unwrap();
        // Never resolves: the outcome alone ends the command.
        let run = |mode| rt.block_on(intel_mode_until_signal(&cfg, &s, mode, None, &rec, std::future::pending::<()>()));
        let e = run(2).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/dev/nvme0: Intel PowerGovernorMode 2 was not applied: ignored: requested 2, was 1, read-back shows 1; the original mode was put back"
        );
        fake.set_behaviour("/dev/nvme0", SetBehaviour::Refuse);
        let e = run(0).unwrap_err();
        assert!(e.to_string().starts_with("/dev/nvme0: Intel PowerGovernorMode 0 was not applied: refused 0: NVMe status 0x410e"), "{e}");
        let (ig, rf, rs) = (Outcome::Ignored as i32, Outcome::Refused as i32, Outcome::Restored as i32);
        assert_eq!(changes(&rec.lock().unwrap()), vec![(1, 2, 1, ig), (1, 1, 1, rs), (1, 0, 1, rf), (1, 1, 1, rs)]);
        let events: Vec<String> = rec.lock().unwrap().batch.events.iter().map(|e| e.message.clone()).collect();
        assert!(events[0].starts_with("nvme0: Intel mode 1 -> Intel mode 2: ignored: Intel PowerGovernorMode (FID C6h): "), "{events:?}");
        // FID C6h only: FID 02h untouched, and no state file left.
        assert_eq!((fake.feature("/dev/nvme0", 0xc6), fake.feature("/dev/nvme0", 2)), (Some(1), Some(0)));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        // A mode outside 0..2 is rejected before the state file.
        let e = run(5).unwrap_err();
        assert_eq!(e.to_string(), "/dev/nvme0: Intel PowerGovernorMode 5 is not 0 (25 W), 1 (20 W) or 2 (10 W)");
    }

    #[test]
    fn set_applies_and_ignored_is_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let fake = five_states(SetBehaviour::Honour, 0);
        let mut rec = Recorder::new(Clock::new());
        let s = Session::open(&config(dir.path()), "/dev/nvme0", fake.clone(), &mut rec).unwrap();
        set(&s, 2, &mut rec).unwrap();
        assert_eq!(fake.feature("/dev/nvme0", 2), Some(2));
        fake.set_behaviour("/dev/nvme0", SetBehaviour::Ignore);
        assert!(set(&s, 1, &mut rec).is_err());
        assert_eq!(changes(&rec), vec![(0, 2, 2, Outcome::Applied as i32), (2, 1, 2, Outcome::Ignored as i32)]);
        // Non-operational PS3/PS4 of the fixture are never sent.
        assert!(set(&s, 4, &mut rec).unwrap_err().to_string().contains("non-operational"));
        assert_eq!(fake.set_calls(), 2);
    }

    #[test]
    fn sweep_visits_operational_states_measures_and_restores() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config(dir.path());
        let fake = five_states(SetBehaviour::Honour, 1);
        let mut rec = Recorder::new(Clock::new());
        let s = Session::open(&cfg, "/dev/nvme0", fake.clone(), &mut rec).unwrap();
        let target = tempfile::Builder::new().prefix("wf-sweep-").tempdir_in("/var/tmp").unwrap();
        let args = SweepArgs {
            target: target.path().join("scratch.dat"),
            size: 64 << 20,
            patterns: vec!["SR:128KiB".parse().unwrap(), "RW:4KiB".parse().unwrap()],
            settle: Duration::ZERO,
            seed: 1,
        };
        let rec = Mutex::new(rec);
        let summary = sweep(&cfg, &s, &args, &RestoreRegistry::new(), &rec).unwrap();
        let rec = rec.into_inner().unwrap();
        assert_eq!(summary.measured, vec![0, 1, 2]);
        let a = Outcome::Applied as i32;
        assert_eq!(changes(&rec), vec![(1, 0, 0, a), (0, 1, 1, a), (1, 2, 2, a), (2, 1, 1, Outcome::Restored as i32)]);
        assert_eq!(fake.feature("/dev/nvme0", 2), Some(1));
        let runs: Vec<(String, String, f64, String)> = rec
            .batch
            .probe_runs
            .iter()
            .map(|r| (r.experiment.clone(), r.varying.clone(), r.value, r.parameters["temperature_end_c"].clone()))
            .collect();
        let want: Vec<(String, String, f64, String)> = [0.0, 1.0, 2.0]
            .iter()
            .flat_map(|&ps| {
                ["governor_sweep/SR:128KiB", "governor_sweep/RW:4KiB"]
                    .map(|e| (e.to_string(), "power_state".to_string(), ps, "49.85".to_string()))
            })
            .collect();
        assert_eq!(runs, want);
        assert!(rec.batch.probe_runs.iter().all(|r| r.mib_per_s > 0.0 && r.parameters["nvme_controller"] == "nvme0"));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "state file removed after restore");
        // No power source here: the runs say nothing about power rather than zero, and one event says why.
        assert!(rec.batch.probe_runs.iter().all(|r| r.power_w.is_none() && r.energy_j.is_none() && r.energy_source.is_empty()));
        let states: Vec<(Option<u32>, Option<f64>, &str)> =
            rec.batch.probe_runs.iter().map(|r| (r.power_state, r.power_state_max_w, r.model.as_str())).collect();
        let m = "WATTFLIP CONSTRUCTED 5PS NVME";
        assert_eq!(states, [0, 0, 1, 1, 2, 2].map(|ps| (Some(ps), Some([7.5, 5.9, 3.6][ps as usize]), m)).to_vec());
        let notes: Vec<&str> = rec.batch.events.iter().filter(|e| e.kind == "sweep_power_unavailable").map(|e| e.message.as_str()).collect();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].starts_with("/dev/nvme0: sweep runs carry no measured power (power_w, energy_j): no usable power source on this host"), "{}", notes[0]);
        assert_eq!(summary.power_note.as_deref(), Some(notes[0]));
    }

    #[test]
    fn with_a_drive_rail_every_sweep_run_carries_its_measured_power_and_energy() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = config(dir.path());
        // The INA226 fixture: a constant 18 W rail (power1_input = 18000000 µW).
        cfg.sysfs_root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sysfs/ina226/sys");
        let fake = five_states(SetBehaviour::Honour, 1);
        let mut rec = Recorder::new(Clock::new());
        let s = Session::open(&cfg, "/dev/nvme0", fake.clone(), &mut rec).unwrap();
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
        let summary = sweep(&cfg, &s, &args, &RestoreRegistry::new(), &rec).unwrap();
        let rec = rec.into_inner().unwrap();
        assert_eq!((summary.measured, summary.power_note), (vec![0, 1, 2], None));
        type PowerFields<'a> = (Option<u32>, Option<f64>, Option<f64>, &'a str);
        let got: Vec<PowerFields> = rec
            .batch
            .probe_runs
            .iter()
            .map(|r| (r.power_state, r.power_state_max_w, r.power_w, r.energy_source.as_str()))
            .collect();
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
        let guard = RestoreGuard::arm(gov, &id.serial, dir.path(), None).unwrap();
        guard.set(2).unwrap();
        std::mem::forget(guard); // as if SIGKILLed: no Drop, the state file stays
        assert_eq!(fake.feature("/dev/nvme0", 2), Some(2));
        fake.set_behaviour("/dev/nvme0", SetBehaviour::Honour);
        let mut rec = Recorder::new(Clock::new());
        let s = Session::open(&cfg, "/dev/nvme0", fake.clone(), &mut rec).unwrap();
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
        let summary = sweep(&cfg, &s, &args, &RestoreRegistry::new(), &rec).unwrap();
        assert_eq!(summary.measured, vec![0]);
        assert_eq!(summary.skipped.iter().map(|(s, _)| *s).collect::<Vec<_>>(), vec![1, 2]);
        let rec = rec.into_inner().unwrap();
        let r = Outcome::Refused as i32;
        assert_eq!(changes(&rec)[1..], [(0, 0, 0, r), (0, 1, 0, r), (0, 2, 0, r), (0, 0, 0, Outcome::Restored as i32)]);
        assert_eq!(rec.batch.probe_runs.len(), 1);
        assert_eq!((rec.batch.probe_runs[0].value, rec.batch.probe_runs[0].pattern.as_str()), (0.0, "RR"));
    }
}
