//! `probe --energy-target` on the live path (issue 37): after the idle window, the source's facts
//! from its readings there ([`crate::energy::source::resolve`]), a pilot that runs each
//! (experiment, value) of the plan once at [`PILOT_SCALE`] of its IOCount to measure how long
//! its runs take, the plan of [`crate::energy::sizing`] printed before the first run, and the
//! IOCount multipliers it chose checked against the target's size (a lengthened run whose window
//! no longer fits keeps its length and its reason). The pilot and the probe run on the one
//! target opened with its consent and safety checks, by the same engine.

use super::{EnergyOptions, ProbeArgs, ProbeCmdError, Progress};
use crate::energy::live::LivePower;
use crate::energy::sizing::{self, PlannedRun, SizePlan};
use crate::energy::source::{self, UpdateFrom};
use indicatif::ProgressBar;
use std::collections::HashMap;
use std::time::Duration;
use wattflip_uflip::{self as uflip, Plan, PlanOptions, RunSpec, Work};

/// The pilot runs each (experiment, value) once with this share of its IOCount.
pub const PILOT_SCALE: f64 = 1.0 / 16.0;

/// The sizing of a probe: the plan as printed, and the IOCount multiplier of every run of the
/// full plan (by its position there, before `--read-only` drops the writes).
pub struct Sized {
    pub plan: SizePlan,
    pub io_scale: Vec<f64>,
}

/// The first process's IOCount of a run (each process of a parallel run has the same).
fn count_of(spec: &RunSpec) -> Option<u64> {
    match &spec.work {
        Work::Pattern(p) => p.first().map(|s| s.io_count),
        Work::Phases(_) | Work::Format { .. } => None,
    }
}

fn key(spec: &RunSpec) -> (String, u64) {
    (spec.experiment.clone(), spec.value.to_bits())
}

/// The positions in `full` of the runs the probe executes (all, or the reads with `--read-only`).
fn executed(full: &Plan, read_only: bool) -> Vec<usize> {
    full.runs.iter().enumerate().filter(|(_, r)| !(read_only && r.writes())).map(|(i, _)| i).collect()
}

/// Sizes the probe's runs for `target`, or says why it does not (`None`): the source in `e.zone`
/// seen in the idle window `(from, to)`. Prints the plan before the first run.
pub fn size_runs(
    target: &uflip::Target,
    a: &ProbeArgs,
    live: &LivePower,
    e: &EnergyOptions,
    (from, to): (i64, i64),
    t: f64,
) -> Result<Option<Sized>, ProbeCmdError> {
    let Some(z) = live.snapshot(e.zone.as_deref()) else { return Ok(None) };
    let facts = source::resolve(&z, e.kinds.update_period_of(&z.source, &z.zone), from, to);
    if facts.update_from == UpdateFrom::Unknown {
        println!(
            "--energy-target {:.1} %: the update period of {} is unknown ({}): runs are not sized (every run is low_confidence)",
            t * 100.0,
            z.label(),
            facts.describe()
        );
        return Ok(None);
    }
    let (m, power) = sizing::idle_source(&z, &facts, from, to);
    // A held value slower than its reads is counted by its updates (`energy::held`).
    let how = if z.is_counter() || m.reporting != wattflip_energy::Reporting::Counter { m.reporting.as_str() } else { "held value counted by its updates" };
    let source = format!("{} ({}, {how}, accuracy class ±{:.1} %)", z.label(), facts.describe(), m.accuracy * 100.0);
    let options = super::plan_options(a, target.size);
    let full = uflip::plan(&options);
    let runs = executed(&full, a.read_only);
    let expected = if sizing::class_u95(&m) < t { pilot(target, a, &options, &full, &runs)? } else { vec![None; runs.len()] };
    let planned: Vec<PlannedRun> = expected.iter().map(|e| PlannedRun { expected: *e }).collect();
    let mut plan = sizing::plan(&m, power, t, e.energy_budget, &planned);
    let io_scale = fit(&options, &full, &runs, &expected, &mut plan);
    println!("{}", plan.describe(&source));
    Ok(Some(Sized { plan, io_scale }))
}

/// Runs each (experiment, value) of the executed runs once at [`PILOT_SCALE`] of its IOCount
/// (no format, no preparation) and returns every executed run's expected length: its pilot's
/// (without its slowest IO, counted as one of the others), times its IOCount over the pilot's.
fn pilot(target: &uflip::Target, a: &ProbeArgs, options: &PlanOptions, full: &Plan, runs: &[usize]) -> Result<Vec<Option<Duration>>, ProbeCmdError> {
    let mut o = options.clone();
    o.repetitions = 1;
    o.format = None;
    o.prepare = false;
    o.emit_fio_iolog = None;
    o.trace_dir = None;
    o.io_scale = vec![PILOT_SCALE; full.runs.len()];
    let mut p = uflip::plan(&o);
    if a.read_only {
        p = p.read_only();
    }
    println!("--energy-target: a pilot of {} runs at 1/{:.0} of their IOCount, to size the runs", p.runs.len(), 1.0 / PILOT_SCALE);
    let mut quiet = Progress { bar: ProgressBar::hidden(), planner: None, log_runs: false };
    let report = super::run_plan(target, &p, &mut quiet, a.stop.as_deref()).map_err(|e| match e {
        // Stopped during the pilot: no run of the probe itself has completed.
        uflip::ProbeError::Interrupted(mut r) => {
            r.runs.clear();
            uflip::ProbeError::Interrupted(r)
        }
        other => other,
    })?;
    let mut took: HashMap<(String, u64), (f64, u64)> = HashMap::new();
    for (spec, r) in p.runs.iter().zip(&report.runs) {
        if let (Some(n), true) = (count_of(spec), r.status == uflip::RunStatus::Ok && r.end_ns > r.start_ns) {
            // The slowest IO (a cold first one) would be multiplied with the rest: the others'
            // time stands for it.
            let (d, ios) = ((r.end_ns - r.start_ns) as f64 * 1e-9, r.io_count as f64);
            let d = if ios > 1.0 && r.max_us.is_finite() { (d - r.max_us * 1e-6).max(0.0) * ios / (ios - 1.0) } else { d };
            took.insert(key(spec), (d, n));
        }
    }
    std::thread::sleep(options.pause_between_runs);
    Ok(runs
        .iter()
        .map(|&i| {
            let spec = &full.runs[i];
            let (d, n) = took.get(&key(spec))?;
            Some(Duration::from_secs_f64(d * count_of(spec)? as f64 / (*n).max(1) as f64))
        })
        .collect())
}

/// The IOCount multipliers of `plan` on the full plan, after taking back each lengthening whose
/// window no longer fits in the target (the plan then warns where the unscaled run did not).
fn fit(options: &PlanOptions, full: &Plan, runs: &[usize], expected: &[Option<Duration>], plan: &mut SizePlan) -> Vec<f64> {
    let mut o = options.clone();
    let scale_of = |plan: &SizePlan| {
        let mut v = vec![1.0; full.runs.len()];
        for (j, &i) in runs.iter().enumerate() {
            v[i] = plan.scale[j];
        }
        v
    };
    for _ in 0..4 {
        o.io_scale = scale_of(plan);
        let scaled = uflip::plan(&o);
        let mut refused = false;
        for (j, &i) in runs.iter().enumerate() {
            let new = scaled.runs[i].warnings.iter().any(|w| !full.runs[i].warnings.contains(w));
            if plan.scale[j] > 1.0 && new {
                plan.refuse(j, expected[j].unwrap_or_default(), "its window no longer fits in the target's size");
                refused = true;
            }
        }
        if !refused {
            break;
        }
    }
    scale_of(plan)
}
