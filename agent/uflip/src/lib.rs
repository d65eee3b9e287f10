//! wattflip-uflip: the uFLIP probe engine (spec `docs/uflip-method.md`): IO patterns, run plans for the nine
//! micro-benchmarks, an O_DIRECT IO engine, device formats, calibration, statistics and fio iologs.
//!
//! Layout (one module per concern; each module's header says how to extend it):
//! - [`pattern`]: the pattern model and exact LBA functions (§1–§3)
//! - [`plan`]: the 34 experiments, value lists, run order and placement (§4, §5, §7)
//! - [`alloc`]: the fresh-area allocator (§5)
//! - [`format`]: random and sequential formats (§6.1)
//! - [`calibrate`]: IgnoreIO/IOCount from a response-time series (§6.3)
//! - [`target`], [`safety`], [`file_consent`], [`loopid`]: file and block targets, write refusal
//!   checks (§6.1, §9); `hostfs`: the host facts behind a target (filesystem, block size, sysfs)
//! - [`runner`]: the [`CommandRunner`] seam for external programs (blkid, losetup)
//! - [`error`], [`advice`]: what stops a probe, and what to do after an OS error on a target
//! - [`engine`]: the timed IO loop (§3.3, §3.4, §9)
//! - [`stats`], [`report`]: per-run statistics and results (§8)
//! - [`iolog`]: fio iolog v2 emission (§10)
//!
//! The agent calls [`plan`] then [`run`] with an [`Observer`] for progress; the library never prints.

#![deny(missing_docs)]

pub mod advice;
pub mod alloc;
pub mod buf;
pub mod calibrate;
pub mod engine;
pub mod error;
pub mod file_consent;
pub mod format;
mod hostfs;
pub mod iolog;
pub mod loopid;
pub mod pattern;
pub mod plan;
pub mod report;
pub mod runner;
pub mod safety;
pub mod stats;
pub mod target;

pub use calibrate::{calibrate, spe_effect, Calibration, CalibrationRule, SpeEffect};
pub use error::ProbeError;
pub use format::FormatKind;
pub use pattern::{Baseline, Io, MixSpec, Mode, PatternSpec};
pub use plan::{build_plan, experiments, BaselineTable, Bench, Experiment, Plan, PlanError, PlanOptions, RunSpec, ValueLists, Warning, Work};
pub use report::{summary_table, LegResult, ProbeReport, RunResult, RunStatus};
pub use safety::{CommandRunner, HostRoots, Refusal, RefusalReason, SystemRunner};
pub use target::{Target, TargetError, TargetInfo, TargetKind, TargetOptions};

/// Progress callbacks; the agent draws its progress bar from these.
pub trait Observer {
    /// Called once with the number of runs about to execute.
    fn planned(&mut self, total_runs: usize);
    /// Called before run `index` starts.
    fn run_started(&mut self, index: usize, spec: &RunSpec);
    /// Called after run `index` finished (ok or unsupported).
    fn run_finished(&mut self, index: usize, result: &RunResult);
    /// The pause between `done` (just finished, with `result`) and `next`. The default is the
    /// plan's fixed `done.pause_after` (§7); an observer with power data can choose it from
    /// measured background work instead (§11.6).
    fn pause_between(&mut self, done: &RunSpec, result: &RunResult, next: &RunSpec) -> Pause {
        let _ = (result, next);
        Pause { duration: done.pause_after, source: "plan".into() }
    }
}

/// A pause between two runs and where its length came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pause {
    /// How long.
    pub duration: std::time::Duration,
    /// Why this long: `plan` for the plan's fixed pause; an observer names its own rule.
    pub source: String,
}

/// An observer that ignores everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NullObserver;

impl Observer for NullObserver {
    fn planned(&mut self, _total_runs: usize) {}
    fn run_started(&mut self, _index: usize, _spec: &RunSpec) {}
    fn run_finished(&mut self, _index: usize, _result: &RunResult) {}
}

/// Build a plan (see [`PlanOptions::small`], [`PlanOptions::quick`], [`PlanOptions::spec_defaults`]).
pub fn plan(opts: &PlanOptions) -> Plan {
    build_plan(opts)
}

/// How a probe guards against a device that stops completing IO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunOptions {
    /// No IO deadline is ever shorter than this (generous: a healthy drive may stall for seconds
    /// in garbage collection or a firmware hiccup).
    pub io_deadline_floor: std::time::Duration,
    /// The deadline is this many times the longest IO seen so far (calibration runs come first)
    /// or [`RunOptions::calibrated_max_io`], when that is above the floor.
    pub io_deadline_factor: u32,
    /// The longest IO of a stored calibration of this device, if the caller has one.
    pub calibrated_max_io: Option<std::time::Duration>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions { io_deadline_floor: std::time::Duration::from_secs(30), io_deadline_factor: 100, calibrated_max_io: None }
    }
}

impl RunOptions {
    /// The deadline of each IO when the longest IO seen so far took `max_seen`.
    pub fn io_deadline(&self, max_seen: std::time::Duration) -> std::time::Duration {
        let longest = max_seen.max(self.calibrated_max_io.unwrap_or_default());
        longest.saturating_mul(self.io_deadline_factor).max(self.io_deadline_floor)
    }
}

/// Execute `plan` on `target` with the default [`RunOptions`]; see [`run_with`].
pub fn run(target: &Target, plan: &Plan, observer: &mut dyn Observer) -> Result<ProbeReport, ProbeError> {
    run_with(target, plan, observer, &RunOptions::default())
}

/// Execute `plan` on `target`. Write plans are refused up front unless the target is cleared for
/// writes (files unless they back a loop device; block devices need consent and must pass every
/// safety check on an exclusive handle). All IO goes through that one handle, and before every
/// run [`Target::verify`] checks that it still names the checked device: otherwise the probe stops
/// with [`ProbeError::TargetChanged`] and issues no further IO. An IO past its deadline
/// ([`RunOptions`]) stops the probe with [`ProbeError::IoDeadline`]. Runs the target cannot do
/// (alignment, §9) come back `unsupported`; an IO error stops the probe.
pub fn run_with(target: &Target, plan: &Plan, observer: &mut dyn Observer, options: &RunOptions) -> Result<ProbeReport, ProbeError> {
    run_with_stop(target, plan, observer, options, &std::sync::atomic::AtomicBool::new(false))
}

/// [`run`], stopping early when `stop` becomes true (the agent's SIGTERM).
pub fn run_until(target: &Target, plan: &Plan, observer: &mut dyn Observer, stop: &std::sync::atomic::AtomicBool) -> Result<ProbeReport, ProbeError> {
    run_with_stop(target, plan, observer, &RunOptions::default(), stop)
}

/// [`run_with`], stopping early when `stop` becomes true: the IO workers check it before every
/// IO and the watching thread within a tick, so IO stops at once. The run in progress is
/// abandoned; the completed runs come back in [`ProbeError::Interrupted`].
pub fn run_with_stop(
    target: &Target,
    plan: &Plan,
    observer: &mut dyn Observer,
    options: &RunOptions,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<ProbeReport, ProbeError> {
    if plan.device_size > target.size {
        return Err(ProbeError::PlanDoesNotFit { path: target.path.clone(), plan_size: plan.device_size, target_size: target.size });
    }
    let writes = plan.writes();
    let handle = if writes { target.open_for_writes().map_err(ProbeError::WritesRefused)? } else { target.handle().clone() };
    // However the probe ends, a scratch file it wrote is re-marked as it left it.
    let _seal = writes.then_some(Seal(target));
    let clock = engine::Clock::start();
    let started_ns = clock.utc_ns(std::time::Instant::now());
    observer.planned(plan.runs.len());
    let mut runs = Vec::with_capacity(plan.runs.len());
    let mut max_seen = std::time::Duration::ZERO;
    // Each run records the pause that preceded it (none before the first): the pause exists for
    // the previous run's background work, and the run is what it protects.
    let mut before = (Pause { duration: std::time::Duration::ZERO, source: "first".into() }, "none");
    let mut interrupted = false;
    for (i, spec) in plan.runs.iter().enumerate() {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            interrupted = true;
            break;
        }
        target.verify(&handle, writes).map_err(|refusal| ProbeError::TargetChanged { run: spec.index, experiment: spec.experiment.clone(), refusal })?;
        observer.run_started(spec.index, spec);
        let deadline = options.io_deadline(max_seen);
        let mut r = match engine::run_one(target, &handle, plan, spec, &clock, deadline, stop) {
            Ok(r) => r,
            Err(ProbeError::Stopped { .. }) => {
                interrupted = true;
                break;
            }
            Err(e) => return Err(e),
        };
        max_seen = max_seen.max(std::time::Duration::from_secs_f64((r.max_us.max(0.0) / 1e6).min(1e6)));
        let (p, method) = &before;
        r.parameters.insert("pause_before_us".into(), p.duration.as_micros().to_string());
        r.parameters.insert("pause_source".into(), p.source.clone());
        r.parameters.insert("pause_method".into(), (*method).into());
        observer.run_finished(spec.index, &r);
        match plan.runs.get(i + 1) {
            Some(next) => {
                let p = observer.pause_between(spec, &r, next);
                let method = engine::pause_between_runs(p.duration);
                before = (p, method);
            }
            // After the last run: the plan's pause, as the original's busy-wait at every run's end.
            None => {
                engine::pause_between_runs(spec.pause_after);
            }
        }
        runs.push(r);
    }
    let report = ProbeReport {
        target: TargetInfo::from(target),
        seed: plan.seed,
        started_ns,
        ended_ns: clock.utc_ns(std::time::Instant::now()),
        engine_version: env!("CARGO_PKG_VERSION").to_string(),
        runs,
    };
    if interrupted {
        return Err(ProbeError::Interrupted(Box::new(report)));
    }
    Ok(report)
}

/// Re-marks a scratch file target when dropped ([`Target::seal_scratch`]).
struct Seal<'a>(&'a Target);

impl Drop for Seal<'_> {
    fn drop(&mut self) {
        self.0.seal_scratch();
    }
}

/// Calibrate every baseline from the SIO preparation runs of a report (§6.2, §6.3): returns a
/// [`BaselineTable`] where a baseline without SIO runs keeps `fallback`'s values. With several
/// repetitions the largest IgnoreIO and IOCount win (conservative).
pub fn calibrate_from_report(report: &ProbeReport, rule: &CalibrationRule, fallback: &BaselineTable) -> BaselineTable {
    let mut t = fallback.clone();
    let mut seen = [false; 4];
    for r in report.runs.iter().filter(|r| r.experiment.starts_with("prepare/SIO.") && !r.series_us.is_empty()) {
        let Some(b) = Baseline::parse(&r.pattern) else {
            continue;
        };
        let c = calibrate(&r.series_us, rule);
        let i = b.index();
        if !seen[i] {
            t.io_count[i] = c.io_count;
            t.ignore_io[i] = c.ignore_io;
            seen[i] = true;
        } else {
            t.io_count[i] = t.io_count[i].max(c.io_count);
            t.ignore_io[i] = t.ignore_io[i].max(c.ignore_io);
        }
    }
    t
}

/// The SPE verdict of a report (§6.2): the first `prepare/SPE` run with its three legs, its per-IO
/// series split at the legs. `None` when the report has no completed SPE run.
pub fn spe_from_report(report: &ProbeReport, rule: &CalibrationRule) -> Option<SpeEffect> {
    let r = report.runs.iter().find(|r| r.experiment == "prepare/SPE" && r.legs.len() == 3 && r.status == RunStatus::Ok)?;
    let n: Vec<usize> = r.legs.iter().map(|l| l.stats.n as usize).collect();
    if r.series_us.len() != n.iter().sum::<usize>() {
        return None;
    }
    let (a, rest) = r.series_us.split_at(n[0]);
    let (b, c) = rest.split_at(n[1]);
    Some(spe_effect(a, b, c, rule.tolerance))
}

/// A directory on a disk-backed filesystem for tests (O_DIRECT does not work on tmpfs).
#[cfg(test)]
pub(crate) fn test_dir() -> std::path::PathBuf {
    std::path::PathBuf::from("/var/tmp")
}
