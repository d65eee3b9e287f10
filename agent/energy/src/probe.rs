//! A whole probe's runs against one power series (`docs/energy-method.md` §4–§5): one idle baseline
//! per probe (its idle characterisation window), each run's search bounded by its neighbours, tails
//! cut and their energy split at the next run's first submit, and plausibility checks that refuse a
//! trace that does not match the probe (wrong rate, time unit or origin). The live path and trace
//! import both call [`analyze_probe`]; a new check belongs here, with its numbers in the message.

use crate::error::{AnalysisError, TraceError};
use crate::fine::{refine, EdgeContext, FineSamples};
use crate::run::{analyze_run_bounded, analyze_run_local, Baseline, BaselineSource, RunDetectConfig, RunEnergy, RunInfo, TimeBase};
use crate::series::PowerSeries;
use crate::units::{Nanos, UnixNanos};

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
    /// Its end as found in the trace, at least the end of its last window outside the idle band
    /// (its last completion if it got no energy).
    pub end: UnixNanos,
    /// Its tail was cut at this run's first submit.
    pub tail_cut: bool,
}

impl PreviousRun {
    pub fn of(run: &RunInfo, result: &Result<RunEnergy, AnalysisError>) -> PreviousRun {
        match result {
            Ok(e) => PreviousRun { last_complete: run.last_complete, end: e.end.max(e.activity_end), tail_cut: e.tail_cut },
            Err(_) => PreviousRun { last_complete: run.last_complete, end: run.last_complete, tail_cut: false },
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
        None if split => {
            Err(AnalysisError::NotEnoughBaseline { from_ns: run.first_submit.0, to_ns: run.first_submit.0, found: 0, needed: cfg.min_baseline_samples })
        }
        None => analyze_run_local(series, run, lower, cfg, time_base),
    }
}

/// Share of the runs inside the trace whose activity is not found above which the whole trace is
/// refused: it does not show the probe (a wrong sample rate stretches it, a wrong time unit or
/// origin moves it).
pub const MAX_UNMATCHED_FRACTION: f64 = 0.5;

/// A trace is refused as misaligned when its activity covers the runs' IO time this much better
/// (as a fraction of it) at some shift within ±[`MAX_LAG`] than as aligned, and that shift is
/// more than [`MIN_LAG`].
pub const MIN_GAIN: f64 = 0.2;
pub const MAX_LAG: Nanos = Nanos(1_000_000_000);
pub const MIN_LAG: Nanos = Nanos(5_000_000);

/// Prefix count of the grid instants `from + k·period` (k < n) whose sample is above `threshold`
/// (the sample holding each instant; none before the series or after its end).
pub(crate) fn active_prefix(series: &PowerSeries, from: i64, period: i64, n: usize, threshold: f64) -> Vec<u32> {
    let (t, p) = (series.times(), series.powers());
    let mut active = vec![0u32; n + 1];
    let mut i = 0usize;
    for k in 0..n {
        let at = from + k as i64 * period;
        while i + 1 < t.len() && t[i + 1].0 <= at {
            i += 1;
        }
        let on = at >= t[0].0 && at < series.end_time().0 && p[i].0 > threshold;
        active[k + 1] = active[k] + u32::from(on);
    }
    active
}

/// The shift (ns, trace relative to the probe) at which the trace's activity (samples above the
/// idle threshold) best covers the runs' IO time, with the covered fractions as aligned and at that
/// shift; `None` when the trace matches best (within [`MIN_GAIN`]) as aligned.
fn best_lag(series: &PowerSeries, runs: &[RunInfo], b: &Baseline, cfg: &RunDetectConfig) -> Option<(i64, f64, f64)> {
    let period = i64::try_from(series.typical_period().0).ok().filter(|p| *p > 0)?;
    let max_lag = i64::try_from(MAX_LAG.0).ok()? / period;
    let from = runs.first()?.first_submit.0 - (max_lag + 1) * period;
    let to = runs.iter().map(|r| r.last_complete.0).max()? + (max_lag + 1) * period;
    let n = usize::try_from((to - from) / period).ok()?;
    if n > 50_000_000 {
        return None;
    }
    let threshold = b.median.0 + cfg.k * b.spread.0.max(cfg.min_spread.0);
    let active = active_prefix(series, from, period, n, threshold);
    let idx = |at: i64| (((at - from) / period).max(0) as usize).min(n);
    let total: i64 = runs.iter().map(|r| (idx(r.last_complete.0) - idx(r.first_submit.0)) as i64).sum();
    if total <= 0 {
        return None;
    }
    let covered = |lag: i64| -> f64 {
        let c: i64 = runs
            .iter()
            .map(|r| {
                let (a, z) = (idx(r.first_submit.0 + lag * period), idx(r.last_complete.0 + lag * period));
                i64::from(active[z]) - i64::from(active[a.min(z)])
            })
            .sum();
        c as f64 / total as f64
    };
    let at_zero = covered(0);
    let (lag, best) = (-max_lag..=max_lag).map(|l| (l, covered(l))).fold((0, at_zero), |m, x| if x.1 > m.1 + 1e-12 { x } else { m });
    let lag_ns = lag * period;
    (lag_ns.unsigned_abs() > MIN_LAG.0 && best - at_zero > MIN_GAIN).then_some((lag_ns, at_zero, best))
}

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
    let baseline = idle.and_then(|(from, to)| match Baseline::from_window(series, from, to, cfg.min_baseline_samples) {
        Ok(b) => Some(b),
        Err(e) => {
            warnings.push(format!("the probe's idle window is not usable ({e}); each run uses the idle stretch before it"));
            None
        }
    });
    let gap_samples = (0..series.len()).map(|i| series.sample_gaps(i)).sum();
    let mut out = Vec::with_capacity(runs.len());
    let mut prev: Option<PreviousRun> = None;
    for (i, r) in runs.iter().enumerate() {
        let info = RunInfo { next_run_start: runs.get(i + 1).map(|x| x.first_submit), ..*r };
        let res = analyze_next_run(series, &info, prev, baseline.as_ref(), cfg, time_base);
        prev = Some(PreviousRun::of(r, &res));
        out.push(res);
    }
    // Plausibility of the whole trace against the probe.
    let (refuse, covered, unmatched, numbers) = plausibility(series, runs, &out, baseline.as_ref(), cfg, time_base);
    if let Some(why) = refuse {
        out = runs.iter().map(|_| Err(AnalysisError::TraceMismatch(why.clone()))).collect();
    } else if unmatched > 0 {
        warnings.push(format!("{unmatched} of the {covered} runs inside the trace show no activity where the probe ran them; they get no energy"));
    }
    if covered < runs.len() && covered > 0 {
        warnings.push(format!("{} of {} runs are not covered by the trace ({numbers})", runs.len() - covered, runs.len()));
    }
    ProbeAnalysis {
        baseline_source: if baseline.is_some() { BaselineSource::IdleWindow } else { BaselineSource::Local },
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
                Ok(e) => c.max(e.end.0).max(e.activity_end.0),
                Err(_) => c,
            }
        });
        ctx.push(EdgeContext {
            lower: (r.first_submit.0.saturating_sub(slack)).max(prev.unwrap_or(i64::MIN)),
            slack_from: r.first_submit.0.saturating_sub(slack),
            limit: runs.get(i + 1).map_or(i64::MAX, |n| n.first_submit.0),
        });
    }
    let mut refs: Vec<Option<(&mut RunEnergy, EdgeContext)>> = a.runs.iter_mut().zip(ctx).map(|(r, c)| r.as_mut().ok().map(|r| (r, c))).collect();
    refine(series, &mut refs, (cfg.k, cfg.min_spread.0), source)?;
    Ok(a)
}

/// Whether an imported trace matches the probe: the refusal (every run then gets
/// `TraceMismatch`), the runs inside the trace, those without activity, and the spans compared.
fn plausibility(
    series: &PowerSeries,
    runs: &[RunInfo],
    out: &[Result<RunEnergy, AnalysisError>],
    baseline: Option<&Baseline>,
    cfg: &RunDetectConfig,
    time_base: TimeBase,
) -> (Option<String>, usize, usize, String) {
    let covered = out.iter().filter(|r| !matches!(r, Err(AnalysisError::RunOutsideTrace { .. }))).count();
    let unmatched = out
        .iter()
        .filter(|r| matches!(r, Err(AnalysisError::NoActivity { .. } | AnalysisError::ActivityInProgress { .. } | AnalysisError::ActivityEndsEarly { .. })))
        .count();
    let span = |a: i64, z: i64| (z - a) as f64 / 1e9;
    let (trace_from, trace_to) = (series.first_time().0, series.end_time().0);
    let (runs_from, runs_to) = (runs.iter().map(|r| r.first_submit.0).min().unwrap_or(0), runs.iter().map(|r| r.last_complete.0).max().unwrap_or(0));
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
    } else if covered > 0 && samples_within(series, runs_from, runs_to) < runs.len() {
        // Fewer samples over the runs than there are runs (a CSV in ms read as seconds): the
        // trace cannot resolve them, whether or not an idle window happens to hold enough.
        Some(format!(
            "trace does not match the probe: only {} of its samples fall within the probe's {} runs ({numbers}); check --time-unit, sample_rate_hz and the time origin (--time-origin-ns, start_time_utc_ns)",
            samples_within(series, runs_from, runs_to),
            runs.len()
        ))
    } else if covered > 0 && unmatched as f64 > MAX_UNMATCHED_FRACTION * covered as f64 {
        Some(format!(
            "trace does not match the probe: {unmatched} of the {covered} runs inside the trace show no activity where the probe ran them ({numbers}); check sample_rate_hz (a wrong rate stretches the trace), --time-unit and the time origin (--time-origin-ns, start_time_utc_ns)"
        ))
    } else if let Some((lag, at_zero, best)) = baseline.and_then(|b| best_lag(series, runs, b, cfg)) {
        Some(format!(
            "trace does not match the probe: its activity covers {:.0} % of the runs' IO time as aligned, {:.0} % when shifted by {:+.1} ms ({numbers}); check the time origin (--time-origin-ns, start_time_utc_ns), sample_rate_hz and --time-unit",
            at_zero * 100.0,
            best * 100.0,
            lag as f64 / 1e6
        ))
    } else {
        None
    };
    (refuse, covered, unmatched, numbers)
}

/// Samples of `series` from `from` to `to` (ns).
fn samples_within(series: &PowerSeries, from: i64, to: i64) -> usize {
    series.index_at_or_after(UnixNanos(to)).saturating_sub(series.index_at_or_after(UnixNanos(from)))
}
