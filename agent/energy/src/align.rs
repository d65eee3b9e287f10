//! Alignment of an imported trace with the probe's schedule, checked rather than assumed
//! (`docs/energy-method.md` §4, "Alignment"): the runs whose rise was found in the trace give, per
//! run, the trace's start minus the host's first submit; a robust line through them (Theil–Sen
//! slope, median intercept) is the trace's offset at the first run and its rate error. Fewer rises
//! than a rate needs check the offset alone; rises inside the pauses (an early clock, which makes
//! every run look cut) are searched for and counted, never replaced by a guess. An import beyond
//! [`MAX_OFFSET`] or [`MAX_RATE_ERROR`] is refused naming the estimate, or corrected with
//! [`Alignment::correct`] until [`Alignment::auto_step`] is done (`trace import --align auto`).
//! What is left is [`Alignment::residual`]. A new check of the time base goes here.

use crate::error::AnalysisError;
use crate::probe::{active_prefix, ProbeAnalysis};
use crate::record::{RunDetectConfig, RunInfo, StartFound};
use crate::series::PowerSeries;
use crate::stats::median;
use crate::units::{Nanos, UnixNanos};
use serde::{Deserialize, Serialize};

/// Largest accepted offset of the trace at the first run (the rise after a first submit is tens of
/// µs; a trace off by more moves energy between runs and tails).
pub const MAX_OFFSET: Nanos = Nanos(1_000_000);
/// Largest accepted rate error (0.05 %: 1.25 ms of drift over a 2.5 s probe).
pub const MAX_RATE_ERROR: f64 = 5e-4;
/// Fewest runs' rises for a rate estimate (fewer: the offset alone is checked).
pub const MIN_RUNS: usize = 3;
/// Pairs of runs closer than this do not give a slope (their edges' jitter would dominate it).
const MIN_PAIR_SPAN_NS: f64 = 50e6;
/// `--align auto` corrects until the residual offset is at most this…
pub const AUTO_MAX_OFFSET: Nanos = Nanos(100_000);
/// …and the residual rate error at most this (0.01 %).
pub const AUTO_MAX_RATE_ERROR: f64 = 1e-4;
/// Corrections `--align auto` applies at most (a coarse one, an early clock's, then the rises').
pub const AUTO_ROUNDS: usize = 6;
/// Where `--align auto` puts the rises: this long after their first submits, not on them. A rise
/// even microseconds before its first submit makes the analysis cut the previous run there and
/// split this one's energy at the first submit; a trace this much late costs nothing (the run's
/// edges are found in the trace). The device's own rise latency is part of the offset and cannot
/// be told from the clock's.
pub const AUTO_RISE_MARGIN: Nanos = Nanos(50_000);

/// What an estimate was made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlignBasis {
    /// The runs' rises found in the trace (to the sample where the analysis found them, to a
    /// fraction of a window in a pause).
    Rises,
    /// No usable rises: the grid search of [`coarse`] over the runs' activity (half a window,
    /// [`COARSE_RATE_STEP`]).
    Coarse,
}

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
    /// sidecar rate 0.2 % low); 0 when not estimated (`rate_estimated`).
    pub rate_error: f64,
    /// The rate error was estimated (≥ [`MIN_RUNS`] rises, far enough apart); otherwise only the
    /// offset was.
    pub rate_estimated: bool,
    /// Runs whose rise gave the estimate (0 for a coarse one).
    pub runs: usize,
    /// Of `runs`, those whose rise was found in the pause before their first submit (the trace's
    /// clock early: the analysis took each rise for the previous run's tail and cut it there).
    pub in_pause: usize,
    /// Runs inside the trace (the coarse search's input).
    pub covered: usize,
    pub basis: AlignBasis,
    /// Median |residual| of the rises around the line (ns); a coarse estimate's resolution.
    pub spread_ns: f64,
}

/// A signed clock offset, trace minus host (ns, fractional).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ClockOffset(pub f64);

/// A clock rate error: trace seconds per host second, minus 1 (dimensionless; 1e-4 = 0.01 %).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RateError(pub f64);

/// What is left of a trace's misalignment once `trace import` accepted it (the last estimate, not
/// corrected): an edge of a run at host time `t` may sit [`AlignmentResidual::shift_at`] off in
/// the trace. For the energy's uncertainty.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AlignmentResidual {
    /// At the first run's first submit (`reference`).
    pub offset: ClockOffset,
    /// 0 when `rate_checked` is false.
    pub rate_error: RateError,
    /// The rate was estimated; otherwise nothing is known of it beyond the check's bound.
    pub rate_checked: bool,
    pub reference: UnixNanos,
    pub basis: AlignBasis,
    /// Rises the estimate used.
    pub runs: usize,
    /// Their median |residual| around the line (ns): the scatter of one run's edge.
    pub spread: ClockOffset,
}

impl AlignmentResidual {
    /// Trace minus host at host time `t`.
    pub fn shift_at(&self, t: UnixNanos) -> ClockOffset {
        ClockOffset(self.offset.0 + self.rate_error.0 * (t.0 - self.reference.0) as f64)
    }
}

impl Alignment {
    /// Within [`MAX_OFFSET`] and (when estimated) [`MAX_RATE_ERROR`], and not an early clock
    /// ([`Alignment::early_clock`]) by more than [`AUTO_MAX_OFFSET`]: its runs' energy would be
    /// split at their first submits, a short run's by tens of percent.
    pub fn acceptable(&self) -> bool {
        let early = self.early_clock() && self.offset_ns < -(AUTO_MAX_OFFSET.0 as f64);
        self.offset_ns.abs() <= MAX_OFFSET.0 as f64 && self.rate_error.abs() <= MAX_RATE_ERROR && !early
    }

    /// At least a quarter of the rises used lie in the pause before their run's first submit:
    /// the trace's clock is early (a stray burst in a pause is one run, not a quarter of them).
    pub fn early_clock(&self) -> bool {
        self.in_pause > 0 && 4 * self.in_pause >= self.runs
    }

    /// The correction `--align auto` applies for this estimate: by the offset less
    /// [`AUTO_RISE_MARGIN`], so that the rises land just after their first submits.
    pub fn correction(&self) -> Alignment {
        Alignment { offset_ns: self.offset_ns - AUTO_RISE_MARGIN.0 as f64, ..*self }
    }

    /// The estimate in words, for messages: what it was made from, how many runs' rises.
    pub fn describe(&self) -> String {
        let bounds = format!("accepted: ±{} ms, ±{} %", MAX_OFFSET.0 as f64 / 1e6, MAX_RATE_ERROR * 100.0);
        let rate = if self.rate_estimated { format!("rate error {:+.4} %", self.rate_error * 100.0) } else { "rate not estimated".to_owned() };
        let from = match self.basis {
            AlignBasis::Coarse => format!(
                "coarse search over {} runs' activity, no run's rise usable; grid {:.3} ms{}",
                self.covered,
                self.spread_ns / 2e6,
                if self.rate_estimated { format!(", {} %", COARSE_RATE_STEP * 100.0) } else { String::new() }
            ),
            AlignBasis::Rises => format!("from {} runs' rises, spread {:.3} ms", self.runs, self.spread_ns / 1e6),
        };
        let few = if self.rate_estimated {
            String::new()
        } else {
            format!("; a rate needs {MIN_RUNS} runs' rises at least {} ms apart: the offset is checked alone", MIN_PAIR_SPAN_NS / 1e6)
        };
        let early = if self.in_pause > 0 {
            format!(
                "; {} of these rises lie in the pause before their run's first submit: the trace's clock is early and those runs looked cut by the next (accepted early: {} ms)",
                self.in_pause,
                AUTO_MAX_OFFSET.0 as f64 / 1e6
            )
        } else {
            String::new()
        };
        format!("offset {:+.3} ms at the first run, {rate} ({from}{few}{early}; {bounds})", self.offset_ns / 1e6)
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

    /// What is left when this estimate is accepted uncorrected.
    pub fn residual(&self) -> AlignmentResidual {
        AlignmentResidual {
            offset: ClockOffset(self.offset_ns),
            rate_error: RateError(if self.rate_estimated { self.rate_error } else { 0.0 }),
            rate_checked: self.rate_estimated,
            reference: self.reference,
            basis: self.basis,
            runs: self.runs,
            spread: ClockOffset(self.spread_ns),
        }
    }

    /// `--align auto`, given this estimate of the trace as corrected so far after `rounds`
    /// corrections: done (within [`AUTO_MAX_OFFSET`] and [`AUTO_MAX_RATE_ERROR`], confirmed by
    /// the runs' rises, none of them early), correct again (by [`Alignment::correction`]), or
    /// refuse with the reason.
    pub fn auto_step(&self, rounds: usize) -> AutoStep {
        let within = self.offset_ns.abs() <= AUTO_MAX_OFFSET.0 as f64 && self.rate_error.abs() <= AUTO_MAX_RATE_ERROR && !self.early_clock();
        match (within, self.basis) {
            (true, AlignBasis::Rises) => AutoStep::Done(self.residual()),
            (true, AlignBasis::Coarse) => AutoStep::Refuse(format!(
                "after {rounds} corrections no run's rise is found where the trace now puts it, so the alignment cannot be confirmed to {} ms: {}",
                AUTO_MAX_OFFSET.0 as f64 / 1e6,
                self.describe()
            )),
            (false, _) if rounds >= AUTO_ROUNDS => AutoStep::Refuse(format!(
                "still beyond ±{} ms, ±{} % after {rounds} corrections: {}",
                AUTO_MAX_OFFSET.0 as f64 / 1e6,
                AUTO_MAX_RATE_ERROR * 100.0,
                self.describe()
            )),
            (false, _) => AutoStep::Correct,
        }
    }
}

/// The next step of `--align auto` ([`Alignment::auto_step`]).
#[derive(Debug, Clone, PartialEq)]
pub enum AutoStep {
    Done(AlignmentResidual),
    /// Correct the trace by the estimate and estimate again.
    Correct,
    Refuse(String),
}

/// The trace's alignment with `runs`: from the runs' rises ([`from_rises`], with the rises an
/// early clock puts in the pauses, [`pause_rises`]) when at least half of the runs inside the
/// trace gave one and they agree; else the coarse search of [`coarse`] (its rate only with enough
/// runs for one).
pub fn estimate(series: &PowerSeries, runs: &[RunInfo], analysis: &ProbeAnalysis, cfg: &RunDetectConfig) -> Option<Alignment> {
    // A trace far off finds a few runs' rises in the wrong place: trusted only when at least half
    // of the runs gave one and they agree.
    let covered = analysis.runs.iter().filter(|r| !matches!(r, Err(AnalysisError::RunOutsideTrace { .. }))).count();
    let mut pts = rise_points(runs, analysis);
    let in_pause = analysis.baseline.as_ref().map_or_else(Vec::new, |b| pause_rises(series, runs, analysis, b.median.0, cfg.band(b)));
    pts.extend(in_pause.iter().copied());
    let fine = fit(&pts).filter(|f| 2 * f.runs >= covered && f.spread_ns <= MAX_RISE_SPREAD.0 as f64);
    match fine {
        Some(f) => Some(Alignment { in_pause: in_pause.len(), covered, ..f }),
        None => analysis.baseline.as_ref().and_then(|b| coarse(series, runs, b.median.0 + cfg.band(b))).map(|c| Alignment { covered, ..c }),
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
/// a grid; ties go to the smaller correction. Resolution: a window (1 ms for a trace) and
/// [`COARSE_RATE_STEP`]; with fewer than [`MIN_RUNS`] runs, or none [`MIN_PAIR_SPAN_NS`] apart,
/// the offset alone (a rate from two runs would be invented).
pub fn coarse(series: &PowerSeries, runs: &[RunInfo], threshold: f64) -> Option<Alignment> {
    let period = i64::try_from(series.typical_period().0).ok().filter(|p| *p > 0)?;
    let f0 = runs.iter().map(|r| r.first_submit.0).min()?;
    let last = runs.iter().map(|r| r.last_complete.0).max()?;
    let with_rate = runs.len() >= MIN_RUNS && runs.iter().map(|r| r.first_submit.0).max()? - f0 >= MIN_PAIR_SPAN_NS as i64;
    let rate_reach = if with_rate { COARSE_RATE } else { 0.0 };
    let reach = COARSE_OFFSET.0 as i64 + (rate_reach * (last - f0) as f64) as i64;
    let from = f0 - reach - period;
    let n = usize::try_from((last + reach + period - from) / period).ok()?;
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
    let (no, ne) = ((COARSE_OFFSET.0 as f64 / step_o) as i64, (rate_reach / COARSE_RATE_STEP).round() as i64);
    let grid = || (-ne..=ne).flat_map(move |ke| (-no..=no).map(move |ko| (ko as f64 * step_o, ke as f64 * COARSE_RATE_STEP)));
    let best = grid().map(|(o, e)| score(o, e)).fold(f64::MIN, f64::max);
    // Ties go to the smallest correction.
    let size = |(o, e): (f64, f64)| o.abs() / MAX_OFFSET.0 as f64 + e.abs() / MAX_RATE_ERROR;
    let (o, e) = grid().filter(|&(o, e)| score(o, e) >= best).min_by(|a, b| size(*a).total_cmp(&size(*b)))?;
    Some(Alignment {
        reference: UnixNanos(f0),
        offset_ns: o,
        rate_error: e,
        rate_estimated: with_rate,
        runs: 0,
        in_pause: 0,
        covered: runs.len(),
        basis: AlignBasis::Coarse,
        spread_ns: period as f64,
    })
}

/// (host first submit, trace rise − first submit) of each run whose rise the analysis found in the
/// trace (`Trace` starts).
fn rise_points(runs: &[RunInfo], analysis: &ProbeAnalysis) -> Vec<(f64, f64)> {
    runs.iter()
        .zip(&analysis.runs)
        .filter_map(|(r, res)| {
            res.as_ref().ok().filter(|e| e.start_found == StartFound::Trace).map(|e| (r.first_submit.0 as f64, (e.start.0 - r.first_submit.0) as f64))
        })
        .collect()
}

/// The alignment estimated from the runs whose rise the analysis found in the trace (`Trace`
/// starts); `None` without any.
pub fn from_rises(runs: &[RunInfo], analysis: &ProbeAnalysis) -> Option<Alignment> {
    fit(&rise_points(runs, analysis))
}

/// A robust line through (host first submit, trace rise − first submit): the Theil–Sen slope over
/// pairs at least [`MIN_PAIR_SPAN_NS`] apart (with [`MIN_RUNS`] points and as many such pairs;
/// otherwise no rate, the offset alone) and the median intercept.
fn fit(pts: &[(f64, f64)]) -> Option<Alignment> {
    let reference = pts.iter().map(|p| p.0).reduce(f64::min)?;
    let mut slopes = Vec::new();
    for (i, a) in pts.iter().enumerate() {
        for b in &pts[i + 1..] {
            let dx = b.0 - a.0;
            if dx.abs() >= MIN_PAIR_SPAN_NS {
                slopes.push((b.1 - a.1) / dx);
            }
        }
    }
    let rate_estimated = pts.len() >= MIN_RUNS && slopes.len() >= MIN_RUNS;
    let slope = if rate_estimated { median(&slopes).unwrap_or(0.0) } else { 0.0 };
    let intercepts: Vec<f64> = pts.iter().map(|(x, d)| d - slope * (x - reference)).collect();
    let offset = median(&intercepts)?;
    let residuals: Vec<f64> = intercepts.iter().map(|c| (c - offset).abs()).collect();
    Some(Alignment {
        reference: UnixNanos(reference as i64),
        offset_ns: offset,
        rate_error: slope,
        rate_estimated,
        runs: pts.len(),
        in_pause: 0,
        covered: pts.len(),
        basis: AlignBasis::Rises,
        spread_ns: median(&residuals).unwrap_or(0.0),
    })
}

/// Idle windows a rise in a pause needs before it: one idle window could be a gap between a
/// tail's bursts.
const PAUSE_IDLE_WINDOWS: usize = 2;

/// The rises an early clock puts in the pauses: for each run without a found rise after a run
/// whose tail the analysis cut at its first submit, the last rise between the previous run's last
/// completion and this first submit that follows [`PAUSE_IDLE_WINDOWS`] idle windows (`b ± band`)
/// (a tail really cut by the run goes on through the pause without one). Refined inside its window
/// from the window's energy above idle, as (host first submit, rise − first submit).
fn pause_rises(series: &PowerSeries, runs: &[RunInfo], analysis: &ProbeAnalysis, b: f64, band: f64) -> Vec<(f64, f64)> {
    let (t, p) = (series.times(), series.powers());
    let quiet = |i: usize| (p[i].0 - b).abs() <= band && series.sample_gaps(i) == 0;
    let mut out = Vec::new();
    for (i, r) in runs.iter().enumerate().skip(1) {
        let split = matches!(&analysis.runs[i], Ok(e) if e.start_found == StartFound::SplitAtFirstSubmit);
        let prev_cut = matches!(&analysis.runs[i - 1], Ok(e) if e.tail_cut);
        if !(split && prev_cut) {
            continue;
        }
        let (lo, hi) = (series.index_at_or_after(runs[i - 1].last_complete), series.index_at_or_after(r.first_submit));
        // The last window in [lo, hi) that leaves the idle band upwards after enough idle ones.
        let Some(j) = (lo + PAUSE_IDLE_WINDOWS..hi.min(t.len())).rev().find(|&j| p[j].0 - b > band && (j - PAUSE_IDLE_WINDOWS..j).all(&quiet)) else {
            continue;
        };
        // The active level just after the rise; the window's energy above idle over it is the
        // time the run was on inside the window.
        let after: Vec<f64> = (j + 1..(j + 4).min(t.len())).map(|k| p[k].0).filter(|w| w - b > band).collect();
        let level = if after.is_empty() { p[j].0 } else { after.iter().sum::<f64>() / after.len() as f64 };
        let end = t.get(j + 1).map_or(series.end_time().0, |x| x.0);
        let on = ((p[j].0 - b) / (level - b)).clamp(0.0, 1.0) * (end - t[j].0) as f64;
        out.push((r.first_submit.0 as f64, end as f64 - on - r.first_submit.0 as f64));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An estimate from `runs` rises, `in_pause` of them in pauses, at offset `o_us` and rate `e`.
    fn est(o_us: f64, e: f64, runs: usize, in_pause: usize, basis: AlignBasis) -> Alignment {
        Alignment {
            reference: UnixNanos(0),
            offset_ns: o_us * 1e3,
            rate_error: e,
            rate_estimated: runs >= MIN_RUNS,
            runs,
            in_pause,
            covered: 12,
            basis,
            spread_ns: 2e3,
        }
    }

    #[test]
    fn auto_is_done_only_on_rises_within_0_1_ms_and_0_01_percent_none_early() {
        let done = |a: Alignment| matches!(a.auto_step(1), AutoStep::Done(_));
        assert!(done(est(41.0, 6e-6, 10, 0, AlignBasis::Rises)));
        assert!(done(est(-99.0, -9e-5, 10, 2, AlignBasis::Rises)), "2 of 10 in pauses is not an early clock");
        assert!(!done(est(-3.0, 0.0, 10, 6, AlignBasis::Rises)), "6 of 10 rises before their submits: correct again");
        assert!(!done(est(101.0, 0.0, 10, 0, AlignBasis::Rises)));
        assert!(!done(est(0.0, 1.1e-4, 10, 0, AlignBasis::Rises)));
        // Two rises: the offset alone, within 0.1 ms, is done (the rate not checked).
        let two = est(40.0, 0.0, 2, 0, AlignBasis::Rises);
        assert_eq!(two.auto_step(0), AutoStep::Done(two.residual()));
        assert!(!two.residual().rate_checked);
    }

    #[test]
    fn auto_refuses_a_coarse_confirmation_and_too_many_rounds_naming_why() {
        let AutoStep::Refuse(why) = est(0.0, 0.0, 0, 0, AlignBasis::Coarse).auto_step(2) else { panic!("a coarse estimate cannot confirm 0.1 ms") };
        assert!(why.contains("after 2 corrections no run's rise is found"), "{why}");
        let AutoStep::Refuse(why) = est(300.0, 0.0, 10, 0, AlignBasis::Rises).auto_step(AUTO_ROUNDS) else { panic!("rounds are bounded") };
        assert!(why.contains("still beyond ±0.1 ms, ±0.01 % after 6 corrections: offset +0.300 ms"), "{why}");
        assert_eq!(est(300.0, 0.0, 10, 0, AlignBasis::Rises).auto_step(AUTO_ROUNDS - 1), AutoStep::Correct);
    }

    #[test]
    fn check_refuses_an_early_clock_beyond_0_1_ms_and_names_the_rises_used() {
        // 0.46 ms early, 75 of 76 rises in pauses (the 106-run schedule's figures): refused,
        // though within ±1 ms; the same offset late is accepted.
        let early = est(-460.0, 0.0, 76, 75, AlignBasis::Rises);
        assert!(!early.acceptable());
        assert!(early.describe().contains("from 76 runs' rises, spread 0.002 ms; 75 of these rises lie in the pause"), "{}", early.describe());
        assert!(est(460.0, 0.0, 76, 0, AlignBasis::Rises).acceptable());
        assert!(est(-60.0, 0.0, 76, 75, AlignBasis::Rises).acceptable());
        let two = est(40.0, 0.0, 2, 0, AlignBasis::Rises);
        assert!(two.describe().contains("rate not estimated (from 2 runs' rises"), "{}", two.describe());
        let coarse = est(1500.0, 0.0, 0, 0, AlignBasis::Coarse);
        assert!(coarse.describe().contains("coarse search over 12 runs' activity, no run's rise usable"), "{}", coarse.describe());
    }

    #[test]
    fn the_residual_shifts_an_edge_by_the_offset_and_the_rate_over_the_time_since_the_reference() {
        let a = Alignment { reference: UnixNanos(1_000_000_000), ..est(40.0, 1e-5, 10, 0, AlignBasis::Rises) };
        let r = a.residual();
        // 40 µs at the reference, + 1e-5 × 2 s = 20 µs two seconds later.
        assert_eq!(r.shift_at(UnixNanos(3_000_000_000)), ClockOffset(60_000.0));
        assert_eq!((r.offset, r.rate_error, r.rate_checked), (ClockOffset(40_000.0), RateError(1e-5), true));
        // The correction leaves the rises 50 µs after their submits.
        assert_eq!(a.correction().offset_ns, -10_000.0);
    }
}
