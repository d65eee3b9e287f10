//! Alignment of an imported trace with the probe's schedule, checked rather than assumed
//! (`docs/energy-method.md` §4, "Alignment"): the runs whose rise was found in the trace give, per
//! run, the trace's start minus the host's first submit; a robust line through them (Theil–Sen
//! slope, median intercept) is the trace's offset at the first run and its rate error. An import
//! beyond [`MAX_OFFSET`] or [`MAX_RATE_ERROR`] is refused naming the estimate, or corrected with
//! [`Alignment::correct`] (`trace import --align auto`). A new check of the time base goes here.

use crate::probe::{active_prefix, ProbeAnalysis};
use crate::record::{RunDetectConfig, RunInfo, StartFound};
use crate::series::PowerSeries;
use crate::stats::median;
use crate::units::{Nanos, UnixNanos};

/// Largest accepted offset of the trace at the first run (the rise after a first submit is tens of
/// µs; a trace off by more moves energy between runs and tails).
pub const MAX_OFFSET: Nanos = Nanos(1_000_000);
/// Largest accepted rate error (0.05 %: 1.25 ms of drift over a 2.5 s probe).
pub const MAX_RATE_ERROR: f64 = 5e-4;
/// Fewest runs with a found rise for an estimate.
pub const MIN_RUNS: usize = 3;
/// Pairs of runs closer than this do not give a slope (their edges' jitter would dominate it).
const MIN_PAIR_SPAN_NS: f64 = 50e6;

/// The trace's time base against the probe's: trace time ≈ host time + `offset_ns` +
/// `rate_error`·(host time − `reference`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Alignment {
    /// The first run's first submit (host clock): where `offset_ns` applies.
    pub reference: UnixNanos,
    /// Trace minus host at the reference (ns); it includes the device's rise after the first
    /// submit (tens of µs).
    pub offset_ns: f64,
    /// Trace seconds per host second, minus 1 (+0.002: the trace's clock runs 0.2 % fast, e.g. a
    /// sidecar rate 0.2 % low).
    pub rate_error: f64,
    /// Runs whose rise gave the estimate.
    pub runs: usize,
    /// Median |residual| of those runs around the line (ns).
    pub spread_ns: f64,
}

impl Alignment {
    /// Within [`MAX_OFFSET`] and [`MAX_RATE_ERROR`].
    pub fn acceptable(&self) -> bool {
        self.offset_ns.abs() <= MAX_OFFSET.0 as f64 && self.rate_error.abs() <= MAX_RATE_ERROR
    }

    /// The estimate in words, for messages.
    pub fn describe(&self) -> String {
        format!(
            "offset {:+.3} ms at the first run, rate error {:+.4} % (from {} runs' rises, spread {:.3} ms; accepted: ±{} ms, ±{} %)",
            self.offset_ns / 1e6,
            self.rate_error * 100.0,
            self.runs,
            self.spread_ns / 1e6,
            MAX_OFFSET.0 as f64 / 1e6,
            MAX_RATE_ERROR * 100.0
        )
    }

    /// The host time of trace time `t` (ns): the inverse of the line.
    pub fn host_time(&self, t: f64) -> f64 {
        let r = self.reference.0 as f64;
        (t - self.offset_ns + self.rate_error * r) / (1.0 + self.rate_error)
    }

    /// A fixed-rate trace's corrected first-sample time (UTC ns) and sample rate (Hz).
    pub fn correct(&self, start: UnixNanos, rate_hz: f64) -> (UnixNanos, f64) {
        (UnixNanos(self.host_time(start.0 as f64).round() as i64), rate_hz * (1.0 + self.rate_error))
    }
}

/// The trace's alignment with `runs`: the coarse estimate of [`coarse`] when it is clearly beyond
/// the bounds (twice) or the rises are too few, else the rises' estimate of [`from_rises`] (which
/// resolves far below a window but needs the runs found where they are).
pub fn estimate(series: &PowerSeries, runs: &[RunInfo], analysis: &ProbeAnalysis, cfg: &RunDetectConfig) -> Option<Alignment> {
    // The rises are trusted when at least half of the runs gave one and they agree (a trace far off
    // finds a few runs' rises in the wrong place).
    let found = analysis.runs.iter().filter(|r| !matches!(r, Err(crate::error::AnalysisError::RunOutsideTrace { .. }))).count();
    let fine = from_rises(runs, analysis).filter(|f| 2 * f.runs >= found && f.spread_ns <= MAX_RISE_SPREAD.0 as f64);
    match fine {
        Some(f) => Some(f),
        None => analysis.baseline.as_ref().and_then(|b| coarse(series, runs, b.median.0 + cfg.band(b))),
    }
}

/// The rises' estimate is trusted when their median residual is at most this.
pub const MAX_RISE_SPREAD: Nanos = Nanos(250_000);

/// Grid of the coarse search: offsets within ±[`COARSE_OFFSET`] in steps of half a window,
/// rate errors within ±[`COARSE_RATE`] in steps of [`COARSE_RATE_STEP`].
pub const COARSE_OFFSET: Nanos = Nanos(60_000_000);
pub const COARSE_RATE: f64 = 0.03;
pub const COARSE_RATE_STEP: f64 = 2.5e-4;

/// The offset and rate error at which the trace's activity (samples above `threshold`) best covers
/// the runs' IO time (from first submit to last completion) and rises at their first submits, on
/// a grid; ties go to the smaller correction. Resolution: a window (1 ms for a trace) and [`COARSE_RATE_STEP`].
pub fn coarse(series: &PowerSeries, runs: &[RunInfo], threshold: f64) -> Option<Alignment> {
    let period = i64::try_from(series.typical_period().0).ok().filter(|p| *p > 0)?;
    let f0 = runs.iter().map(|r| r.first_submit.0).min()?;
    let reach = COARSE_OFFSET.0 as i64 + (COARSE_RATE * (runs.iter().map(|r| r.last_complete.0).max()? - f0) as f64) as i64;
    let from = f0 - reach - period;
    let n = usize::try_from((runs.iter().map(|r| r.last_complete.0).max()? + reach + period - from) / period).ok()?;
    if n > 50_000_000 {
        return None;
    }
    let active = active_prefix(series, from, period, n, threshold);
    let idx = |at: f64| (((at - from as f64) / period as f64).max(0.0) as usize).min(n);
    let total: f64 = runs.iter().map(|r| (r.last_complete.0 - r.first_submit.0).max(0) as f64).sum();
    if total <= 0.0 {
        return None;
    }
    // Covered IO time (windows) plus, per run, a rise at its first submit (idle two windows before,
    // active one window after) worth its share of the IO time: coverage alone is flat wherever
    // activity runs on past the runs (tails, short pauses); the rises are sharp.
    let on = |k: usize| k < n && active[k + 1] > active[k];
    let rise_worth = total / period as f64 / runs.len() as f64;
    let score = |o: f64, e: f64| -> f64 {
        let map = |h: i64| h as f64 + o + e * (h - f0) as f64;
        runs.iter()
            .map(|r| {
                let (a, z) = (idx(map(r.first_submit.0)), idx(map(r.last_complete.0)));
                let rise = a >= 2 && !on(a - 2) && on(a + 1);
                f64::from(active[z.max(a)] - active[a]) + if rise { rise_worth } else { 0.0 }
            })
            .sum::<f64>()
    };
    let step_o = (period / 2).max(1) as f64;
    let (no, ne) = ((COARSE_OFFSET.0 as f64 / step_o) as i64, (COARSE_RATE / COARSE_RATE_STEP).round() as i64);
    let grid = || (-ne..=ne).flat_map(move |ke| (-no..=no).map(move |ko| (ko as f64 * step_o, ke as f64 * COARSE_RATE_STEP)));
    let best = grid().map(|(o, e)| score(o, e)).fold(f64::MIN, f64::max);
    // Ties go to the smallest correction.
    let size = |(o, e): (f64, f64)| o.abs() / MAX_OFFSET.0 as f64 + e.abs() / MAX_RATE_ERROR;
    let (o, e) = grid().filter(|&(o, e)| score(o, e) >= best).min_by(|a, b| size(*a).total_cmp(&size(*b)))?;
    Some(Alignment { reference: UnixNanos(f0), offset_ns: o, rate_error: e, runs: runs.len(), spread_ns: period as f64 })
}

/// The alignment estimated from the runs whose rise the analysis found in the trace (`Trace`
/// starts); `None` with fewer than [`MIN_RUNS`].
pub fn from_rises(runs: &[RunInfo], analysis: &ProbeAnalysis) -> Option<Alignment> {
    let pts: Vec<(f64, f64)> = runs
        .iter()
        .zip(&analysis.runs)
        .filter_map(|(r, res)| {
            res.as_ref().ok().filter(|e| e.start_found == StartFound::Trace).map(|e| (r.first_submit.0 as f64, (e.start.0 - r.first_submit.0) as f64))
        })
        .collect();
    if pts.len() < MIN_RUNS {
        return None;
    }
    let reference = pts.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let mut slopes = Vec::new();
    for (i, a) in pts.iter().enumerate() {
        for b in &pts[i + 1..] {
            let dx = b.0 - a.0;
            if dx.abs() >= MIN_PAIR_SPAN_NS {
                slopes.push((b.1 - a.1) / dx);
            }
        }
    }
    let slope = median(&slopes).unwrap_or(0.0);
    let intercepts: Vec<f64> = pts.iter().map(|(x, d)| d - slope * (x - reference)).collect();
    let offset = median(&intercepts)?;
    let residuals: Vec<f64> = intercepts.iter().map(|c| (c - offset).abs()).collect();
    Some(Alignment {
        reference: UnixNanos(reference as i64),
        offset_ns: offset,
        rate_error: slope,
        runs: pts.len(),
        spread_ns: median(&residuals).unwrap_or(0.0),
    })
}
