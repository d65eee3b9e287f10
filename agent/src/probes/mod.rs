//! Probes: builds a uFLIP plan (engine in the `wattflip-uflip` crate), opens the target with its
//! safety checks, runs with a progress bar and, given [`EnergyOptions`], power recorded around it
//! (per-run energy). Beside it: `calibration`, the load `ladder`, `pauses` (`--pause auto`),
//! `convert` (runs to the wire format), `config` (`[[probes]]` entries) and `power_sweep` (the
//! governor sweep, which runs probes in each power state). The command is `app::probe`; the
//! result folder is `report::folder`. A new benchmark option is a field of [`ProbeArgs`] mapped
//! onto `PlanOptions`, and value lists and counts are a profile plus overrides (`values`); a new
//! kind of probe is a module here called from `app::probe`.

pub mod calibration;
pub mod config;
pub mod convert;
pub mod efficiency;
pub mod ladder;
pub mod pauses;
pub mod power_sweep;
pub mod sized;
pub mod values;

use crate::clock::Clock;
pub use calibration::{apply_stored_calibration, calibrate, stored_calibration, StoredCalibration, CALIBRATION_FILE};
pub use config::ProbeJob;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
pub use values::{PlanOverrides, ValuesProfile};
use wattflip_drives::CommandRunner;
use wattflip_energy::UnixNanos;
use wattflip_uflip::{self as uflip, Bench, FormatKind, Observer, PlanOptions, ProbeReport, RunResult, RunSpec, TargetOptions};

/// Everything `wattflip-agent probe` was asked for.
#[derive(Debug, Clone)]
pub struct ProbeArgs {
    pub target: PathBuf,
    pub size: u64,
    pub benches: Vec<Bench>,
    /// The reduced demo plan: Granularity only, `quick` values (overrides `benches`).
    pub quick: bool,
    /// Value lists and counts to start from (`quick` implies [`ValuesProfile::Quick`]).
    pub values: ValuesProfile,
    /// Per-parameter value lists and counts that replace the profile's (`[[probes]]` entries).
    pub overrides: PlanOverrides,
    pub format: Option<FormatKind>,
    pub repetitions: Option<u32>,
    pub out: PathBuf,
    pub emit_fio_iolog: Option<PathBuf>,
    /// Write every IO's response time (uFLIP's DET files) as one CSV per run into this folder.
    pub io_trace: Option<PathBuf>,
    pub destroy_consent: Vec<String>,
    /// Write a consented device although it carries a signature (`--overwrite-signatures`).
    pub overwrite_signatures: bool,
    pub seed: Option<u64>,
    /// Run only the read-only benchmarks (allowed on any device, consent or not).
    pub read_only: bool,
    /// The pause between runs: the plan's, a fixed one, or chosen per run from measured tails.
    pub pause: PauseChoice,
    /// Per-baseline IOCount/IgnoreIO from an earlier calibration of this target (`calibrate`).
    pub counts: Option<uflip::BaselineTable>,
    /// Set by the agent when it shuts down: the probe stops between two IOs and the runs that
    /// completed come back in `ProbeError::Interrupted`. None: runs to the end.
    pub stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

/// How long to pause between runs (`--pause`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PauseChoice {
    /// The plan's fixed pause.
    #[default]
    Plan,
    /// This fixed pause after every run.
    Fixed(Duration),
    /// Per run, from the measured background tails of this target ([`pauses`], docs/uflip-method.md §11.6),
    /// the plan's pause where nothing is measured.
    Auto,
}

#[derive(Debug, thiserror::Error)]
pub enum ProbeCmdError {
    #[error(transparent)]
    Target(#[from] uflip::TargetError),
    #[error(transparent)]
    Probe(#[from] uflip::ProbeError),
    #[error("cannot write results to {path}: {source}")]
    Output { path: PathBuf, source: std::io::Error },
    #[error("cannot read {path}: {reason}")]
    Input { path: PathBuf, reason: String },
    /// Selecting, setting or restoring a power state for a per-state run (`probe --efficiency
    /// --power-states`).
    #[error(transparent)]
    PowerStates(Box<crate::drives::governor::GovernorCmdError>),
}

/// Parses a size such as `1GiB`, `512MiB`, `4G` (config and command line spell it the same).
pub fn parse_size(s: &str) -> Result<u64, String> {
    s.trim().parse::<bytesize::ByteSize>().map(|b| b.as_u64()).map_err(|e| format!("`{s}` is not a size ({e}); write e.g. 1GiB or 512MiB"))
}

/// Parses the device-state choice: `random` (uFLIP's format), `seq`, or `none`.
pub fn parse_format(s: &str) -> Result<Option<FormatKind>, String> {
    match s {
        "none" => Ok(None),
        "random" => Ok(Some(FormatKind::Random)),
        "seq" => Ok(Some(FormatKind::Sequential)),
        other => Err(format!("`{other}` is not a format; use random, seq or none")),
    }
}

/// Parses a micro-benchmark list (`granularity,mix` or `all`).
pub fn parse_benches(s: &str) -> Result<Vec<Bench>, String> {
    Bench::parse_list(s).map_err(|e| e.to_string())
}

/// Maps the command line onto engine options. `--quick` is the reduced Granularity plan; the
/// profile's counts give way to a stored calibration, and explicit overrides win over both.
pub fn plan_options(a: &ProbeArgs, device_size: u64) -> PlanOptions {
    let profile = a.profile();
    let mut o = profile.options(device_size);
    if !a.quick {
        o.benches = a.benches.clone();
    }
    if let Some(r) = a.repetitions {
        o.repetitions = r.max(1);
    }
    if let Some(s) = a.seed {
        o.seed = s;
    }
    o.format = a.format;
    if let PauseChoice::Fixed(p) = a.pause {
        o.pause_between_runs = p;
    }
    // A calibration sizes full probes; the quick plan keeps its short demo runs.
    if let Some(c) = a.counts.as_ref().filter(|_| profile != ValuesProfile::Quick) {
        o.counts = c.clone();
    }
    a.overrides.apply(&mut o);
    o.emit_fio_iolog = a.emit_fio_iolog.clone();
    o.trace_dir = a.io_trace.clone();
    o
}

impl ProbeArgs {
    /// The value profile in effect: `quick` forces the quick one.
    pub fn profile(&self) -> ValuesProfile {
        if self.quick {
            ValuesProfile::Quick
        } else {
            self.values
        }
    }
}

/// Progress: "run i of N, experiment, ETA"; with `--pause auto`, also the per-run pauses.
struct Progress {
    bar: ProgressBar,
    planner: Option<pauses::PausePlanner>,
    /// Also log each finished run (calibration: few, long runs, seen without a terminal too).
    log_runs: bool,
}

impl Observer for Progress {
    fn planned(&mut self, total_runs: usize) {
        self.bar.set_length(total_runs as u64);
    }
    fn run_started(&mut self, _index: usize, spec: &RunSpec) {
        self.bar.set_message(spec_label(spec));
    }
    fn run_finished(&mut self, index: usize, result: &RunResult) {
        self.bar.inc(1);
        if self.log_runs {
            tracing::info!("run {} of {} completed: {}", index + 1, self.bar.length().unwrap_or_default(), result.experiment);
        }
    }
    fn pause_between(&mut self, done: &RunSpec, result: &RunResult, _next: &RunSpec) -> uflip::Pause {
        match &mut self.planner {
            Some(p) => p.after(pauses::DoneRun::of(done, result)),
            None => uflip::Pause { duration: done.pause_after, source: "plan".into() },
        }
    }
}

fn spec_label(spec: &RunSpec) -> String {
    format!("{} {}={} rep {}", spec.experiment, spec.varying, convert::fmt_value(&spec.varying, spec.value), spec.repetition)
}

/// What a probe needs from the command that runs it: the clock that stamps its power readings
/// and the runner of the tools it calls (ipmitool, nvme-cli). Made by `app/`.
#[derive(Clone)]
pub struct Host {
    pub clock: Clock,
    pub runner: Arc<dyn CommandRunner>,
}

/// Power recording around a probe (per-run energy, docs/uflip-method.md §11).
#[derive(Debug, Clone)]
pub struct EnergyOptions {
    pub sysfs_root: PathBuf,
    pub kinds: crate::sensors::SensorKinds,
    /// Time between power reads while the probe runs.
    pub period: Duration,
    /// Idle recorded before the first run: the baseline of every run.
    pub idle: Duration,
    /// Wait between preparing the target (creating, filling, growing it) and the idle window, so
    /// the baseline is not the device's write-back of the fill (docs/energy-method.md §3).
    pub settle: Duration,
    /// Recorded after the last run, so its background work is seen.
    pub tail: Duration,
    /// Zone to attribute energy to (default: the most drive-specific available; never a CPU zone
    /// unless named here).
    pub zone: Option<String>,
    /// nvme-cli settings, for the datasheet estimate of an NVMe target.
    pub drives: crate::drives::config::DrivesConfig,
    /// `--energy-target`: the relative 95 % half-width a run's energy should reach (0.02 = 2 %);
    /// runs that do not are `low_confidence` with the reason. `None`: off. Runs are lengthened
    /// to reach it ([`sized`]).
    pub energy_target: Option<f64>,
    /// `--energy-budget`: the run time the lengthened runs may add in all.
    pub energy_budget: Duration,
}

/// `/dev/nvme0n1` → `/dev/nvme0`: the controller that answers admin commands for a namespace.
pub fn nvme_controller(target: &Path) -> Option<String> {
    let name = target.file_name()?.to_str()?;
    let rest = name.strip_prefix("nvme")?;
    let (ctrl, ns) = rest.split_once('n')?;
    (ctrl.chars().all(|c| c.is_ascii_digit()) && !ctrl.is_empty() && ns.chars().all(|c| c.is_ascii_digit())).then(|| format!("/dev/nvme{ctrl}"))
}

/// The "datasheet watts" of an NVMe block-device target: PSD max power of its current power state.
fn datasheet_watts(target: &Path, drives: &crate::drives::config::DrivesConfig, runner: Arc<dyn CommandRunner>) -> Option<f64> {
    let (nvme, ctrl, states) = nvme_of(target, drives, runner)?;
    let e = crate::sensors::nvme_estimate::NvmeEstimate::new(nvme, &ctrl, states)?;
    e.current().ok().map(|(_, w)| w.0)
}

/// nvme-cli, the controller and its power-state table of an NVMe block-device target.
fn nvme_of(
    target: &Path,
    drives: &crate::drives::config::DrivesConfig,
    runner: Arc<dyn CommandRunner>,
) -> Option<(wattflip_drives::NvmeCli, String, Vec<wattflip_drives::PowerState>)> {
    let ctrl = nvme_controller(target)?;
    if !is_block(target) || !drives.nvme_cli {
        return None;
    }
    let nvme = wattflip_drives::NvmeCli::new(runner).with_program(drives.nvme_path.clone()).with_timeout(drives.timeout);
    let states = nvme.id_ctrl(&ctrl).ok()?.power_states;
    Some((nvme, ctrl, states))
}

/// The power state an NVMe block-device target is in (FID 02h, read only); `None` for any other
/// target or when it cannot be read.
pub fn nvme_current_state(target: &Path, drives: &crate::drives::config::DrivesConfig, runner: Arc<dyn CommandRunner>) -> Option<u32> {
    let (nvme, ctrl, states) = nvme_of(target, drives, runner)?;
    wattflip_drives::Governor::power_state(nvme, ctrl, states).ok()?.current().ok()
}

/// A probe with, when a power source was recorded, its per-run energy.
pub struct Measured {
    pub report: ProbeReport,
    pub energy: Option<crate::energy::ProbeEnergy>,
    /// The power zone the energy comes from, as recorded (for the power timeline).
    pub power: Option<crate::energy::live::ZoneSeries>,
    /// Every zone recorded around the probe, idle window and tail included: streamed to the
    /// collector as full-rate `power` points ([`convert::batches`]).
    pub recording: Vec<crate::energy::live::ZoneSeries>,
    /// Why there is no energy, when there is none.
    pub energy_note: String,
    /// No energy because only CPU-side power could be recorded here: the probe's batch carries an
    /// `energy_not_measurable` event with `energy_note` (docs/uflip-method.md §13).
    pub energy_unmeasurable: bool,
    /// How `--energy-target` sized the runs, when it did ([`sized`]).
    pub sizing: Option<crate::energy::sizing::SizePlan>,
}

/// Runs the probe, with power recorded and per-run energy attached when `e` is given; without it
/// (`--no-power`, `power = false`) the report alone, `off` saying why. The one path of the CLI
/// and of scheduled probes.
/// `host` stamps the power readings and runs the tools (ipmitool, nvme-cli).
pub fn run_probe_maybe_measured(a: &ProbeArgs, show_progress: bool, e: Option<&EnergyOptions>, off: &str, host: &Host) -> Result<Measured, ProbeCmdError> {
    match e {
        Some(e) => run_probe_measured(a, show_progress, e, host),
        None => Ok(Measured {
            report: run_probe(a, show_progress, None)?,
            energy: None,
            power: None,
            recording: Vec::new(),
            energy_note: off.to_string(),
            energy_unmeasurable: false,
            sizing: None,
        }),
    }
}

/// Runs the probe while recording power (if this host has a power source), then aligns the two.
pub fn run_probe_measured(a: &ProbeArgs, show_progress: bool, e: &EnergyOptions, host: &Host) -> Result<Measured, ProbeCmdError> {
    let found = crate::sensors::discover_all(&e.sysfs_root, &e.kinds, &host.runner);
    if found.power.is_empty() {
        let report = run_probe(a, show_progress, None)?;
        let mut why = vec!["no usable power source on this host".to_string()];
        why.extend(found.unavailable.iter().cloned());
        why.extend(found.unusable_power.iter().map(|p| format!("{}: {}", p.zone, p.note)));
        return Ok(Measured {
            report,
            energy: None,
            power: None,
            recording: Vec::new(),
            energy_note: why.join("; "),
            energy_unmeasurable: false,
            sizing: None,
        });
    }
    run_probe_recorded(a, show_progress, e, found.power, host)
}

/// [`run_probe_measured`] with the power `sensors` already found: prepares the target (creation,
/// fill, growth) first, lets the device settle for `e.settle`, records the idle window, then runs
/// the probe, so the idle baseline is the idle device's and never the fill's (issue 37).
pub fn run_probe_recorded(
    a: &ProbeArgs,
    show_progress: bool,
    e: &EnergyOptions,
    sensors: Vec<Box<dyn crate::sensors::PowerSensor>>,
    host: &Host,
) -> Result<Measured, ProbeCmdError> {
    let prepared_from = host.clock.utc_now();
    let target = open_target_with(&a.target, a.size, &a.destroy_consent, a.overwrite_signatures)?;
    let prepared_to = host.clock.utc_now();
    let recorder = crate::energy::live::PowerRecorder::start(sensors, e.period, host.clock);
    std::thread::sleep(e.settle);
    let idle_from = host.clock.utc_now();
    std::thread::sleep(e.idle);
    let idle_to = host.clock.utc_now();
    let prep = crate::energy::Preparation {
        from_ns: prepared_from,
        to_ns: prepared_to,
        settle_s: e.settle.as_secs_f64(),
        idle_from_ns: idle_from,
        idle_to_ns: idle_to,
    };
    let sized = match e.energy_target {
        Some(t) => sized::size_runs(&target, a, &recorder.live(), e, (idle_from, idle_to), t),
        None => Ok(None),
    };
    let mut live = pauses::LiveTails::new(recorder.live(), e.zone.clone(), e.idle);
    live.window = Some((idle_from, idle_to));
    let scale = sized.as_ref().ok().and_then(|s| s.as_ref()).map(|s| s.io_scale.clone()).unwrap_or_default();
    let report = sized.and_then(|s| run_probe_on(&target, a, show_progress, Some(live), scale).map(|r| (r, s)));
    std::thread::sleep(e.tail);
    let zones = recorder.stop();
    let (report, sized) = report?;
    let zone = match crate::energy::live::pick_for_drive(&zones, e.zone.as_deref()) {
        Ok(z) => z,
        Err(why) => {
            let unmeasurable = matches!(why, crate::energy::live::NoZone::NotMeasurable { .. });
            let note = why.to_string();
            return Ok(Measured { report, energy: None, power: None, energy_note: note, recording: zones, energy_unmeasurable: unmeasurable, sizing: None });
        }
    };
    let datasheet = datasheet_watts(&a.target, &e.drives, host.runner.clone());
    let Some(mut energy) = crate::energy::energy_of_recording_in(
        &report,
        zone,
        (UnixNanos(idle_from), UnixNanos(idle_to)),
        e.kinds.update_period_of(&zone.source, &zone.zone),
        datasheet,
    ) else {
        let note = format!("{}: samples out of order", zone.label());
        return Ok(Measured { report, energy: None, power: None, energy_note: note, recording: zones, energy_unmeasurable: false, sizing: None });
    };
    energy.preparation = Some(prep);
    if let Some(t) = e.energy_target {
        crate::energy::recorded::apply_target(&mut energy, t, sized.as_ref().map(|s| &s.plan));
    }
    let power = Some(zone.clone());
    let sizing = sized.map(|s| s.plan);
    Ok(Measured { report, energy: Some(energy), power, energy_note: String::new(), recording: zones, energy_unmeasurable: false, sizing })
}

/// Opens a probe target: a block device (writes need its serial in `destroy_consent`) or a file
/// of `size` bytes, created with its parent folders (an existing file with data needs its path in
/// `destroy_consent`, see `wattflip_uflip::file_consent`). Shared by `probe` and `governor sweep`.
pub fn open_target(path: &Path, size: u64, destroy_consent: &[String]) -> Result<uflip::Target, ProbeCmdError> {
    open_target_with(path, size, destroy_consent, false)
}

/// [`open_target`] with the separate signature override (`--overwrite-signatures`): a consented
/// device that carries a filesystem, LUKS, LVM, RAID or partition-table signature may be written.
pub fn open_target_with(path: &Path, size: u64, destroy_consent: &[String], overwrite_signatures: bool) -> Result<uflip::Target, ProbeCmdError> {
    let opts = if path.exists() && is_block(path) {
        let mut o = TargetOptions::block(path, destroy_consent.to_vec());
        o.overwrite_signatures = overwrite_signatures;
        o
    } else {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| ProbeCmdError::Output { path: dir.to_owned(), source: e })?;
        }
        let mut o = TargetOptions::file(path, size);
        o.destroy_consent = destroy_consent.to_vec();
        o.overwrite_signatures = overwrite_signatures;
        o.on_grow = Some(say_growth);
        o
    };
    Ok(uflip::Target::open(&opts)?)
}

/// Said right before an existing probe file is grown (the fill writes past its old end).
fn say_growth(path: &Path, from: u64, to: u64) {
    tracing::warn!(file = %path.display(), "growing the probe file {} from {from} to {to} bytes: the probe writes a fill pattern after its current end", path.display());
}

/// Runs the probe and returns its report (outputs are written by the caller). With `--pause auto`,
/// each pause comes from the target's stored tails in `a.out` and, given `live` power, from the
/// tails measured during this probe ([`pauses`]).
pub fn run_probe(a: &ProbeArgs, show_progress: bool, live: Option<pauses::LiveTails>) -> Result<ProbeReport, ProbeCmdError> {
    let target = open_target_with(&a.target, a.size, &a.destroy_consent, a.overwrite_signatures)?;
    run_probe_on(&target, a, show_progress, live, Vec::new())
}

/// [`run_probe`] on a target already opened (and so already created and filled), each run's
/// IOCount multiplied by its `io_scale` (by plan position; empty: as planned, [`sized`]).
fn run_probe_on(
    target: &uflip::Target,
    a: &ProbeArgs,
    show_progress: bool,
    live: Option<pauses::LiveTails>,
    io_scale: Vec<f64>,
) -> Result<ProbeReport, ProbeCmdError> {
    let mut options = plan_options(a, target.size);
    options.io_scale = io_scale;
    let planner = (a.pause == PauseChoice::Auto).then(|| {
        let stored = pauses::stored_tails(&a.out, &a.target).map(|t| t.0).unwrap_or_default();
        let rule = pauses::PauseRule { cfg: wattflip_energy::PauseConfig::default(), fallback: options.pause_between_runs };
        pauses::PausePlanner::new(rule, stored, live)
    });
    let mut plan = uflip::plan(&options);
    if a.read_only {
        plan = plan.read_only();
    }
    let bar = if show_progress { ProgressBar::new(plan.runs.len() as u64) } else { ProgressBar::hidden() };
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} run {pos}/{len} ETA {eta}  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    let mut progress = Progress { bar, planner, log_runs: false };
    let report = run_plan(target, &plan, &mut progress, a.stop.as_deref());
    progress.bar.finish_and_clear();
    let report = report?;
    Ok(report)
}

/// Whether `stop` is set (never, without one).
pub fn stopped(stop: Option<&std::sync::atomic::AtomicBool>) -> bool {
    stop.is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed))
}

/// Sleeps for `d`, or less when `stop` becomes set (checked every 20 ms); returns whether it was.
pub fn sleep_unless_stopped(d: Duration, stop: Option<&std::sync::atomic::AtomicBool>) -> bool {
    let end = std::time::Instant::now() + d;
    loop {
        if stopped(stop) {
            return true;
        }
        let left = end.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return false;
        }
        std::thread::sleep(left.min(Duration::from_millis(20)));
    }
}

/// [`uflip::run`], or [`uflip::run_until`] `stop` when one is given.
pub fn run_plan(
    target: &uflip::Target,
    plan: &uflip::Plan,
    observer: &mut dyn Observer,
    stop: Option<&std::sync::atomic::AtomicBool>,
) -> Result<ProbeReport, uflip::ProbeError> {
    match stop {
        Some(stop) => uflip::run_until(target, plan, observer, stop),
        None => uflip::run(target, plan, observer),
    }
}

fn is_block(p: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt as _;
    std::fs::metadata(p).map(|m| m.file_type().is_block_device()).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    #[test]
    fn namespace_to_controller() {
        use std::path::Path;
        assert_eq!(super::nvme_controller(Path::new("/dev/nvme0n1")).as_deref(), Some("/dev/nvme0"));
        assert_eq!(super::nvme_controller(Path::new("/dev/nvme12n3")).as_deref(), Some("/dev/nvme12"));
        assert_eq!(super::nvme_controller(Path::new("/dev/sda")), None);
        assert_eq!(super::nvme_controller(Path::new("/tmp/nvmex")), None);
    }
}
