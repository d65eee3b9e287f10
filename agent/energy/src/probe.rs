//! A whole probe's runs against one power series (`docs/energy-method.md` §4–§5): one idle baseline
//! per probe (its idle characterisation window), each run's search bounded by its neighbours, tails
//! cut and their energy split at the next run's first submit, and plausibility checks that refuse a
//! trace that does not match the probe (wrong rate, time unit or origin). The live path and trace
//! import both call [`analyze_probe`]; a new check belongs here, with its numbers in the message.

use crate::error::{AnalysisError, TraceError};
use crate::fine::{refine, EdgeContext, FineSamples};
use crate::run::{
    analyze_run_bounded, analyze_run_local, Baseline, BaselineSource, RunDetectConfig, RunEnergy,
    RunInfo, TimeBase,
};
use crate::series::PowerSeries;
use crate::units::UnixNanos;

/// The outcome for a whole probe.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeAnalysis {
    /// The probe's idle baseline, when its idle window was in the series.
    pub baseline: Option<Baseline>,
    pub baseline_source: BaselineSource,
    /// Per run, in the order given: its energy, or why it has none.
    pub runs: Vec<Result<RunEnergy, AnalysisError>>,
    /// Gap samples (NaN/∞) in the whole series.
    pub gap_samples: u64,
    /// Loud warnings with their numbers (also when nothing was refused).
    pub warnings: Vec<String>,
}

impl ProbeAnalysis {
    /// Why the whole trace was refused, if it was.
    pub fn refused(&self) -> Option<&str> {
        self.runs.iter().find_map(|r| match r {
            Err(AnalysisError::TraceMismatch(m)) => Some(m.as_str()),
            _ => None,
        })
    }
}

/// What the analysis of a run needs from the run before it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PreviousRun {
    pub last_complete: UnixNanos,
    /// Its end as found in the trace (its last completion if it got no energy).
    pub end: UnixNanos,
    /// Its tail was cut at this run's first submit.
    pub tail_cut: bool,
}

impl PreviousRun {
    pub fn of(run: &RunInfo, result: &Result<RunEnergy, AnalysisError>) -> PreviousRun {
        match result {
            Ok(e) => PreviousRun {
                last_complete: run.last_complete,
                end: e.end,
                tail_cut: e.tail_cut,
            },
            Err(_) => PreviousRun {
                last_complete: run.last_complete,
                end: run.last_complete,
                tail_cut: false,
            },
        }
    }
}

/// One step of [`analyze_probe`]: run `run` (its `next_run_start` set to the next run's first
/// submit, if any) after `prev`, against the probe's `baseline` or, without one, the checked local
/// fallback. The live pause planner calls this as runs end, so its tails are the probe's.
pub fn analyze_next_run(
    series: &PowerSeries,
    run: &RunInfo,
    prev: Option<PreviousRun>,
    baseline: Option<&Baseline>,
    cfg: &RunDetectConfig,
    time_base: TimeBase,
) -> Result<RunEnergy, AnalysisError> {
    let lower = prev.map(|p| p.last_complete.max(p.end));
    let split = prev.is_some_and(|p| p.tail_cut);
    match baseline {
        Some(b) => analyze_run_bounded(series, run, (lower, split), b, cfg, time_base),
        // The split instant needs the previous run's baseline; without one there is none.
        None if split => Err(AnalysisError::NotEnoughBaseline {
            from_ns: run.first_submit.0,
            to_ns: run.first_submit.0,
            found: 0,
            needed: cfg.min_baseline_samples,
        }),
        None => analyze_run_local(series, run, lower, cfg, time_base),
    }
}

/// Share of the runs inside the trace whose activity is not found above which the whole trace is
/// refused: it does not show the probe (a wrong sample rate stretches it, a wrong time unit or
/// origin moves it).
pub const MAX_UNMATCHED_FRACTION: f64 = 0.5;

/// Analyse `runs` (in execution order, `next_run_start` is ignored and set from the next run)
/// against `series`. `idle` is the probe's idle window `[from, to)`: its baseline is every run's.
/// When it is not in the series (or holds fewer than `min_baseline_samples`), each run falls back to
/// the idle stretch just before it, after the previous run's end, and records `Local`. An
/// [`TimeBase::Imported`] series that does not match the probe is refused (every run gets
/// `TraceMismatch`); a [`TimeBase::Shared`] one never is.
pub fn analyze_probe(
    series: &PowerSeries,
    runs: &[RunInfo],
    idle: Option<(UnixNanos, UnixNanos)>,
    cfg: &RunDetectConfig,
    time_base: TimeBase,
) -> ProbeAnalysis {
    let mut warnings = Vec::new();
    let baseline = idle.and_then(|(from, to)| {
        match Baseline::from_window(series, from, to, cfg.min_baseline_samples) {
            Ok(b) => Some(b),
            Err(e) => {
                warnings.push(format!(
                    "the probe's idle window is not usable ({e}); each run uses the idle stretch before it"
                ));
                None
            }
        }
    });
    let gap_samples = (0..series.len()).map(|i| series.sample_gaps(i)).sum();
    let mut out = Vec::with_capacity(runs.len());
    let mut prev: Option<PreviousRun> = None;
    for (i, r) in runs.iter().enumerate() {
        let info = RunInfo {
            next_run_start: runs.get(i + 1).map(|x| x.first_submit),
            ..*r
        };
        let res = analyze_next_run(series, &info, prev, baseline.as_ref(), cfg, time_base);
        prev = Some(PreviousRun::of(r, &res));
        out.push(res);
    }
    // Plausibility of the whole trace against the probe.
    let covered = out
        .iter()
        .filter(|r| !matches!(r, Err(AnalysisError::RunOutsideTrace { .. })))
        .count();
    let unmatched = out
        .iter()
        .filter(|r| {
            matches!(
                r,
                Err(AnalysisError::NoActivity { .. }
                    | AnalysisError::ActivityInProgress { .. }
                    | AnalysisError::ActivityEndsEarly { .. })
            )
        })
        .count();
    let span = |a: i64, z: i64| (z - a) as f64 / 1e9;
    let (trace_from, trace_to) = (series.first_time().0, series.end_time().0);
    let (runs_from, runs_to) = (
        runs.iter().map(|r| r.first_submit.0).min().unwrap_or(0),
        runs.iter().map(|r| r.last_complete.0).max().unwrap_or(0),
    );
    let numbers = format!(
        "the trace covers {:.3} s from {trace_from} ns, the probe's runs {:.3} s from {runs_from} ns",
        span(trace_from, trace_to),
        span(runs_from, runs_to)
    );
    let refuse = if time_base == TimeBase::Shared {
        None
    } else if !runs.is_empty() && covered == 0 && !series.is_empty() {
        Some(format!(
            "trace does not match the probe: none of its {} runs lies inside the trace ({numbers}); check the time origin (--time-origin-ns, start_time_utc_ns), --time-unit and sample_rate_hz",
            runs.len()
        ))
    } else if covered > 0 && unmatched as f64 > MAX_UNMATCHED_FRACTION * covered as f64 {
        Some(format!(
            "trace does not match the probe: {unmatched} of the {covered} runs inside the trace show no activity where the probe ran them ({numbers}); check sample_rate_hz (a wrong rate stretches the trace), --time-unit and the time origin (--time-origin-ns, start_time_utc_ns)"
        ))
    } else {
        None
    };
    if let Some(why) = refuse {
        out = runs
            .iter()
            .map(|_| Err(AnalysisError::TraceMismatch(why.clone())))
            .collect();
    } else if unmatched > 0 {
        warnings.push(format!(
            "{unmatched} of the {covered} runs inside the trace show no activity where the probe ran them; they get no energy"
        ));
    }
    if covered < runs.len() && covered > 0 {
        warnings.push(format!(
            "{} of {} runs are not covered by the trace ({numbers})",
            runs.len() - covered,
            runs.len()
        ));
    }
    ProbeAnalysis {
        baseline_source: if baseline.is_some() {
            BaselineSource::IdleWindow
        } else {
            BaselineSource::Local
        },
        baseline,
        runs: out,
        gap_samples,
        warnings,
    }
}

/// [`analyze_probe`], then every run's edges refined to the sample with the trace's own samples
/// (`crate::fine`): the import path for shunt traces, whose 1 ms windows would otherwise round each
/// edge to the window.
pub fn analyze_probe_fine(
    series: &PowerSeries,
    runs: &[RunInfo],
    idle: Option<(UnixNanos, UnixNanos)>,
    cfg: &RunDetectConfig,
    source: &mut dyn FineSamples,
) -> Result<ProbeAnalysis, TraceError> {
    let mut a = analyze_probe(series, runs, idle, cfg, TimeBase::Imported);
    let slack = i64::try_from(cfg.start_slack.0).unwrap_or(i64::MAX);
    let mut ctx = Vec::with_capacity(runs.len());
    for (i, r) in runs.iter().enumerate() {
        let prev = i.checked_sub(1).map(|j| {
            let c = runs[j].last_complete.0;
            match &a.runs[j] {
                Ok(e) => c.max(e.end.0),
                Err(_) => c,
            }
        });
        ctx.push(EdgeContext {
            lower: (r.first_submit.0.saturating_sub(slack)).max(prev.unwrap_or(i64::MIN)),
            limit: runs.get(i + 1).map_or(i64::MAX, |n| n.first_submit.0),
        });
    }
    let mut refs: Vec<Option<(&mut RunEnergy, EdgeContext)>> = a
        .runs
        .iter_mut()
        .zip(ctx)
        .map(|(r, c)| r.as_mut().ok().map(|r| (r, c)))
        .collect();
    refine(series, &mut refs, (cfg.k, cfg.min_spread.0), source)?;
    Ok(a)
}
