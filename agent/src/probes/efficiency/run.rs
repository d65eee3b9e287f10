//! The live efficiency preset: opens the target with the probe's safety rules (scratch file, or a
//! block device with destroy consent; writes only where consented), records power from the host's
//! sources, and runs each [`Profile`] through the uFLIP engine in windows ([`LiveSource`], one
//! uFLIP run per window, queue depth 1, no pauses) until its interval is stable or its budget ends.
//! After the last phase, every window and interval is re-read from the complete recording and
//! re-tested, so a reading that arrived late cannot change a verdict unseen. The report types
//! are here; files are `report::efficiency`. A new profile's IO is an arm of [`profile_load`].
//! With [`EfficiencyArgs::power_states`] the phases run once per NVMe power state
//! ([`super::states`]), one recording across all of them; without, in the state the drive is in,
//! labelled with it when it can be read.

use super::metrics::{self, ActiveMetrics, Figure, IdleMetrics};
use super::stability::{self, Assessment};
use super::states::{self, PowerStatesArgs, StateOutcome, StatePhases};
use super::{measure_profiles, EfficiencyOptions, EnergyFigure, Phase, PhaseSource, Profile, Window};
use crate::drives::changes::ChangeLog;
use crate::drives::governor::Controller;
use crate::energy::interval::{energy_over, energy_u95};
use crate::energy::live::{pick_for_drive, LivePower, PowerRecorder, ZoneSeries};
use crate::probes::ladder::{self, LadderArgs, Load};
use crate::probes::{open_target, EnergyOptions, Host, ProbeCmdError};
use serde::Serialize;
use std::path::PathBuf;
use wattflip_energy::PowerSeries;
use wattflip_proto::v1;
use wattflip_uflip::{self as uflip, Baseline, NullObserver};

/// What `probe --efficiency` was asked for.
#[derive(Debug, Clone)]
pub struct EfficiencyArgs {
    pub target: PathBuf,
    pub size: u64,
    pub destroy_consent: Vec<String>,
    /// Capacity for W/TB and GB/W when the target is a file (a block device's is its size).
    pub capacity: Option<u64>,
    pub seed: u64,
    pub options: EfficiencyOptions,
    pub profiles: Vec<Profile>,
    /// Set by the agent's shutdown or a signal: the preset stops between two IOs (or in an idle
    /// window); the phases it completed are kept ([`EfficiencyReport::interrupted`]).
    pub stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Run the phases in each of these NVMe power states (`--power-states`); `None`: in the
    /// state the drive is in.
    pub power_states: Option<PowerStatesArgs>,
}

/// The read share the mixed profile asks uFLIP's Mix for (it interleaves the nearest ratio).
pub const MIX_READ_PCT: u32 = 70;

/// The IO of an active profile: its uFLIP load and IO size (`None` for ready idle).
pub fn profile_load(p: Profile) -> Option<(Load, u64)> {
    Some(match p {
        Profile::ReadyIdle => return None,
        Profile::RandomRead4k => (Load::Pattern(Baseline::RR), 4096),
        Profile::RandomWrite4k => (Load::Pattern(Baseline::RW), 4096),
        Profile::SeqRead128k => (Load::Pattern(Baseline::SR), 128 << 10),
        Profile::SeqWrite128k => (Load::Pattern(Baseline::SW), 128 << 10),
        Profile::Mixed7030 => (Load::Mix { ratio: ladder::mix_ratio(MIX_READ_PCT).map(|(r, _)| r).unwrap_or(2) }, 4096),
    })
}

/// One phase in the report: its verdict and, only when stable, its metrics.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseReport {
    pub profile: Profile,
    /// The NVMe power state the phase ran in (`None`: not known).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power_state: Option<u32>,
    /// `stable`, `unstable` or `not_measured` (no power source).
    pub verdict: &'static str,
    pub windows_run: usize,
    pub interval_windows: usize,
    pub interval_start_ns: Option<i64>,
    pub interval_end_ns: Option<i64>,
    pub assessment: Assessment,
    pub idle: Option<IdleMetrics>,
    pub active: Option<ActiveMetrics>,
    /// The mixed profile's read share as interleaved (%).
    pub read_pct: Option<f64>,
}

/// The whole preset on one target.
#[derive(Debug, Clone, Serialize)]
pub struct EfficiencyReport {
    pub device: String,
    pub model: String,
    pub firmware: String,
    pub serial: String,
    pub target_kind: String,
    pub capacity_bytes: Option<u64>,
    pub energy_source: String,
    pub energy_scope: String,
    /// Why nothing is measured here (no drive-side power source), empty when measured.
    pub energy_note: String,
    pub started_ns: i64,
    pub options: EfficiencyOptions,
    pub phases: Vec<PhaseReport>,
    /// Per-state runs only: what became of each requested state (a state not set has no phases).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub power_states: Vec<StateOutcome>,
    /// The state changes and restores of per-state runs, and their events, for the collector.
    #[serde(skip)]
    pub changes: Vec<v1::PowerStateChange>,
    #[serde(skip)]
    pub events: Vec<v1::Event>,
    /// Stopped (`EfficiencyArgs::stop`) before its last phase: `phases` are the completed ones,
    /// the phase in progress is left out.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
}

/// The phase's report from its final assessment; `idle_w` is the ready-idle power for the
/// above-idle figures.
pub fn phase_report(p: &Phase, capacity: Option<u64>, idle_w: Option<&Figure>) -> PhaseReport {
    let span = p.interval_span();
    let verdict = if p.unmeasured() {
        "not_measured"
    } else if p.assessment.stable() && p.energy.is_some() {
        "stable"
    } else {
        "unstable"
    };
    let (mut idle, mut active) = (None, None);
    if let (Some(e), Some((from, to)), "stable") = (p.energy.as_ref(), span, verdict) {
        let secs = (to - from) as f64 / 1e9;
        if p.profile == Profile::ReadyIdle {
            idle = Some(metrics::idle_metrics(e, secs, capacity));
        } else {
            let (ios, bytes) = p.interval().iter().fold((0, 0), |(i, b), w| (i + w.ios, b + w.bytes));
            active = Some(metrics::active_metrics(e, secs, ios, bytes, idle_w));
        }
    }
    let read_pct = match profile_load(p.profile) {
        Some((Load::Mix { ratio }, _)) => Some(ladder::mix_read_pct(ratio)),
        _ => None,
    };
    PhaseReport {
        profile: p.profile,
        power_state: None,
        verdict,
        windows_run: p.windows.len(),
        interval_windows: p.interval().len(),
        interval_start_ns: span.map(|s| s.0),
        interval_end_ns: span.map(|s| s.1),
        assessment: p.assessment.clone(),
        idle,
        active,
        read_pct,
    }
}

/// The reports of every phase of `runs`, in order, each labelled with its state; the above-idle
/// figures of a state use that state's own ready-idle power.
pub fn report_phases(runs: &[StatePhases], capacity: Option<u64>) -> Vec<PhaseReport> {
    let mut reports = Vec::new();
    for run in runs {
        let idle = run.phases.iter().find(|p| p.profile == Profile::ReadyIdle).and_then(|p| phase_report(p, capacity, None).idle).map(|i| i.watts);
        for p in &run.phases {
            let mut r = phase_report(p, capacity, idle.as_ref());
            r.power_state = run.state;
            reports.push(r);
        }
    }
    reports
}

/// Re-reads every window's and the interval's energy with `energy` (the complete recording) and
/// re-tests the same interval: the verdict stands on the final data.
pub fn reassess(p: &mut Phase, cfg: &stability::StabilityConfig, energy: &mut dyn FnMut(i64, i64) -> Option<EnergyFigure>) {
    for w in &mut p.windows {
        w.energy = energy(w.start_ns, w.end_ns);
    }
    if p.unmeasured() {
        p.energy = None;
        return;
    }
    let values: Vec<f64> = p.interval().iter().filter_map(|w| super::window_value(p.profile, w)).collect();
    p.assessment = stability::assess(&values, cfg);
    p.energy = match (p.assessment.stable(), p.interval_span()) {
        (true, Some((from, to))) => energy(from, to),
        _ => None,
    };
}

/// The energy over `[from, to)` of a recording of `zone`, with its uncertainty.
fn energy_of(zone: &ZoneSeries, series: &PowerSeries, from: i64, to: i64) -> Option<EnergyFigure> {
    if !covers(series, from, to) {
        return None;
    }
    Some(EnergyFigure { energy: energy_over(series, from, to), u95: energy_u95(zone, series, from, to) })
}

/// Whether `series` holds readings over all of `[from, to)`.
fn covers(series: &PowerSeries, from: i64, to: i64) -> bool {
    series.times().first().is_some_and(|t| t.0 <= from) && series.end_time().0 >= to
}

/// Windows from the live target: idle windows wait, active ones are uFLIP runs sized to the
/// window from a calibration run at the phase's start.
pub struct LiveSource<'a> {
    target: &'a uflip::Target,
    args: &'a EfficiencyArgs,
    live: Option<LivePower>,
    zone: Option<String>,
    clock: crate::clock::Clock,
    /// IOs per window of the current phase (set by its calibration run).
    count: Option<(Profile, u64)>,
}

impl LiveSource<'_> {
    fn ladder_args(&self, io_size: u64) -> LadderArgs {
        LadderArgs {
            target: self.args.target.clone(),
            size: self.target.size,
            destroy_consent: self.args.destroy_consent.clone(),
            patterns: vec![],
            mix_ratio: None,
            io_size,
            levels: vec![],
            hold: self.args.options.budget.window,
            seed: self.args.seed,
            stop: None,
        }
    }

    /// One uFLIP run of `count` IOs of `load` (sequential ones over the whole target).
    fn run_once(&self, load: Load, io_size: u64, count: u64) -> Result<uflip::RunResult, ProbeCmdError> {
        let mut plan = ladder::level_plan(self.target.size, &self.ladder_args(io_size), load, 0, count);
        for r in &mut plan.runs {
            if let uflip::Work::Pattern(specs) = &mut r.work {
                for s in specs.iter_mut().filter(|s| matches!(s.baseline, Baseline::SR | Baseline::SW)) {
                    s.target_offset = 0;
                    s.target_size = self.target.size / io_size * io_size;
                }
            }
        }
        let report = match crate::probes::run_plan(self.target, &plan, &mut NullObserver, self.args.stop.as_deref()) {
            Err(uflip::ProbeError::Interrupted(_)) => return Err(self.halted()),
            r => r?,
        };
        report.runs.into_iter().find(|r| r.status == uflip::RunStatus::Ok).ok_or_else(|| ProbeCmdError::Input {
            path: self.args.target.clone(),
            reason: format!("the efficiency run {load:?} of {io_size} B IOs did not complete"),
        })
    }

    /// The energy of a window while recording, for the stability decisions only (no uncertainty:
    /// the reported figures are re-read from the complete recording, [`reassess`]).
    /// Waits (up to half a second) for the reading that covers the window's end.
    fn energy(&self, from: i64, to: i64) -> Option<EnergyFigure> {
        let live = self.live.as_ref()?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(500);
        loop {
            // None: no drive-side zone (or no readings yet): nothing to wait for.
            let series = live.since(self.zone.as_deref(), from.saturating_sub(1_000_000_000))?;
            if covers(&series, from, to) {
                return Some(EnergyFigure { energy: energy_over(&series, from, to), u95: None });
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
}

impl LiveSource<'_> {
    /// Whether the preset was asked to stop.
    fn stopping(&self) -> bool {
        crate::probes::stopped(self.args.stop.as_deref())
    }

    /// The error that ends a phase stopped by `EfficiencyArgs::stop` ([`run`] keeps the phases
    /// completed before it).
    fn halted(&self) -> ProbeCmdError {
        ProbeCmdError::Input { path: self.args.target.clone(), reason: "the efficiency probe was stopped by the agent's shutdown".into() }
    }
}

impl PhaseSource for LiveSource<'_> {
    type Error = ProbeCmdError;

    fn next_window(&mut self, profile: Profile) -> Result<Window, ProbeCmdError> {
        if self.stopping() {
            return Err(self.halted());
        }
        let Some((load, io_size)) = profile_load(profile) else {
            let start_ns = self.clock.utc_now();
            if crate::probes::sleep_unless_stopped(self.args.options.budget.window, self.args.stop.as_deref()) {
                return Err(self.halted());
            }
            let end_ns = self.clock.utc_now();
            return Ok(Window { start_ns, end_ns, ios: 0, bytes: 0, energy: self.energy(start_ns, end_ns) });
        };
        let count = match self.count {
            Some((p, c)) if p == profile => c,
            _ => {
                // Calibration (and warm-up) run, not a window: the rate that sizes the windows.
                let cal = self.run_once(load, io_size, 256)?;
                let secs = (cal.end_ns.saturating_sub(cal.start_ns)) as f64 / 1e9;
                let c = ((cal.io_count as f64 / secs.max(1e-6)) * self.args.options.budget.window.as_secs_f64()).ceil().max(16.0) as u64;
                self.count = Some((profile, c));
                c
            }
        };
        let r = self.run_once(load, io_size, count)?;
        let (start_ns, end_ns) = (i64::try_from(r.start_ns).unwrap_or(i64::MAX), i64::try_from(r.end_ns).unwrap_or(i64::MAX));
        Ok(Window { start_ns, end_ns, ios: r.io_count, bytes: r.io_count.saturating_mul(r.io_size_bytes), energy: self.energy(start_ns, end_ns) })
    }

    fn interval_energy(&mut self, from_ns: i64, to_ns: i64) -> Option<EnergyFigure> {
        self.energy(from_ns, to_ns)
    }
}

/// The phases as measured, per state, and the records of a per-state run.
struct Measured {
    runs: Vec<StatePhases>,
    states: Vec<StateOutcome>,
    interrupted: bool,
    rec: ChangeLog,
}

/// Opens the controller of a per-state run (before any IO: a wrong controller fails first).
fn open_controller(a: &EfficiencyArgs, ps: &PowerStatesArgs, e: &EnergyOptions, host: &Host, rec: &mut ChangeLog) -> Result<Controller, ProbeCmdError> {
    let dev = ps.controller.clone().or_else(|| crate::probes::nvme_controller(&a.target)).ok_or_else(|| ProbeCmdError::Input {
        path: a.target.clone(),
        reason: "--power-states needs an NVMe namespace target (/dev/nvmeXnY) or --power-states-controller naming the controller of the drive holding it"
            .into(),
    })?;
    Controller::open(&e.drives, &dev, host.runner.clone(), rec).map_err(|e| ProbeCmdError::PowerStates(Box::new(e)))
}

/// Runs the phases: once per selected state with `ctl`, otherwise once in the state the drive is
/// in (labelled with it when it can be read).
fn measure_all(
    a: &EfficiencyArgs,
    src: &mut LiveSource,
    ctl: Option<&Controller>,
    e: &EnergyOptions,
    host: &Host,
    mut rec: ChangeLog,
) -> Result<Measured, ProbeCmdError> {
    let stop = a.stop.clone();
    let stopping = move || crate::probes::stopped(stop.as_deref());
    match (ctl, &a.power_states) {
        (Some(ctl), Some(ps)) => {
            let mut measure = |_state: u32| {
                // Each state sizes its own windows: a capped state runs slower.
                src.count = None;
                measure_profiles(&a.profiles, &mut *src, &a.options, &stopping)
            };
            let r = states::run_states(ctl, &ps.selection, &e.drives.state_dir, &mut rec, &mut measure)?;
            Ok(Measured { runs: r.runs, states: r.states, interrupted: r.interrupted, rec })
        }
        _ => {
            let state = crate::probes::nvme_current_state(&a.target, &e.drives, host.runner.clone());
            let (phases, interrupted) = measure_profiles(&a.profiles, src, &a.options, &stopping)?;
            Ok(Measured { runs: vec![StatePhases { state, phases }], states: Vec::new(), interrupted, rec })
        }
    }
}

/// Runs the preset on `a.target` with power from the host's sources (`e`).
pub fn run(a: &EfficiencyArgs, e: &EnergyOptions, host: &Host) -> Result<EfficiencyReport, ProbeCmdError> {
    // The probe's safety rules: a block device only with destroy consent, a file as scratch.
    let target = open_target(&a.target, a.size, &a.destroy_consent)?;
    let mut rec = ChangeLog::new(host.clock);
    let ctl = a.power_states.as_ref().map(|ps| open_controller(a, ps, e, host, &mut rec)).transpose()?;
    let found = crate::sensors::discover_all(&e.sysfs_root, &e.kinds, &host.runner);
    let recorder = (!found.power.is_empty()).then(|| PowerRecorder::start(found.power, e.period, host.clock));
    // Readings before the first idle window (a counter's first reading only starts its series).
    std::thread::sleep((e.period * 4).max(std::time::Duration::from_millis(200)));
    let started_ns = host.clock.utc_now();
    let mut src =
        LiveSource { target: &target, args: a, live: recorder.as_ref().map(PowerRecorder::live), zone: e.zone.clone(), clock: host.clock, count: None };
    let mut m = measure_all(a, &mut src, ctl.as_ref(), e, host, rec)?;
    let zones = recorder.map(PowerRecorder::stop).unwrap_or_default();
    let picked = pick_for_drive(&zones, e.zone.as_deref());
    let series = picked.as_ref().ok().and_then(|z| z.series());
    let mut energy = |from: i64, to: i64| match (&picked, &series) {
        (Ok(z), Some(s)) => energy_of(z, s, from, to),
        _ => None,
    };
    for p in m.runs.iter_mut().flat_map(|r| r.phases.iter_mut()) {
        reassess(p, &a.options.stability, &mut energy);
    }
    let capacity = match target.kind {
        uflip::TargetKind::Block => Some(target.size),
        uflip::TargetKind::File => a.capacity,
    };
    let name = target.device.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    Ok(EfficiencyReport {
        device: match target.kind {
            uflip::TargetKind::Block => name,
            uflip::TargetKind::File => format!("file:{name}"),
        },
        model: target.model.clone().unwrap_or_else(|| target.kind.as_str().to_string()),
        firmware: target.firmware.clone().unwrap_or_default(),
        serial: target.serial.clone().unwrap_or_default(),
        target_kind: target.kind.as_str().to_string(),
        capacity_bytes: capacity,
        energy_source: picked.as_ref().map(|z| z.label()).unwrap_or_default(),
        energy_scope: picked.as_ref().map(|z| z.scope.clone()).unwrap_or_default(),
        energy_note: picked.err().map(|e| e.to_string()).unwrap_or_default(),
        started_ns,
        options: a.options,
        phases: report_phases(&m.runs, capacity),
        power_states: m.states,
        changes: m.rec.batch.power_state_changes,
        events: m.rec.batch.events,
        interrupted: m.interrupted,
    })
}
