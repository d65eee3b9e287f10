//! A held value read once per update (a BMC's DCMI power: each reading the mean of the update
//! before an unknown but fixed instant) as the counter it amounts to (issue 37,
//! `docs/energy-method.md` §9): the phase of its updates is fitted to the probe's runs, and each
//! reading becomes its update's exact energy over the placed update, so the analysis values a
//! run's edges like a slower counter's instead of spreading the run over whole updates. Another
//! source joins by meeting [`once_per_update`].
//!
//! The fit: for a candidate phase each reading's update is known, and the readings are the
//! baseline plus each run's own level times its share of the update (a flat run, least squares
//! over the levels); the phase whose fit leaves the least squared residual wins. Its 95 %
//! half-range is where the residual rises by 3.84 residual variances (the profile of a one-
//! parameter fit); a fit no better than a quarter of an update is not used.

use super::live::ZoneSeries;

/// Candidate phases per update in the coarse pass, and across two coarse steps in the fine one.
const COARSE: i64 = 200;
const FINE: i64 = 40;
/// Passes of the non-negative fit of the runs' levels (bounded: a candidate phase costs at most
/// this many solves).
const NNLS_PASSES: usize = 8;

/// Update instants at `phase + k·update` (UTC ns), known to `half_range` ns (95 %).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Phase {
    pub phase: i64,
    pub update: i64,
    pub half_range: i64,
}

impl Phase {
    /// The end of the update a reading taken at `t` shows (the last one completed by then).
    pub fn end_before(&self, t: i64) -> i64 {
        self.phase + (t - self.phase).div_euclid(self.update) * self.update
    }
}

/// Drift allowed between the source's clock and the host's (a crystal's, 100 ppm): over the
/// probe it moves the phase, and the placement's half-range takes that in.
const DRIFT: f64 = 1e-4;

/// Whether `z` is a BMC's held value (not a counter, not a moving average) read about once per
/// update: each reading a new update's mean, none skipped. Only a BMC's: its updates are timed by
/// a crystal (ppm off the host's clock, [`DRIFT`]); a sensor chip's own oscillator is off by up
/// to ±0.5 % (`docs/energy-method.md` §9), which over a minute moves the phase by 300 ms.
pub fn once_per_update(z: &ZoneSeries, update_ns: u64, read_ns: u64) -> bool {
    let (u, r) = (update_ns as f64, read_ns as f64);
    z.source == "ipmi" && !z.is_counter() && !z.path.ends_with("_average") && update_ns > 0 && (r - u).abs() <= 0.05 * u
}

/// The phase of `z`'s updates (period `update` ns) fitted to the runs `runs` (first submit, last
/// completion) against the idle baseline `baseline` W; `None` when the readings do not pin it to
/// a quarter of an update (no run edge the fit can see, runs far shorter than an update) or runs
/// overlap. Its cost: 281 candidates, each the readings around the runs times the runs one
/// update overlaps, and at most [`NNLS_PASSES`] + 1 banded solves.
pub fn fit(z: &ZoneSeries, update: i64, runs: &[(i64, i64)], baseline: f64) -> Option<Phase> {
    let mut runs = runs.to_vec();
    runs.sort_unstable();
    // Runs that overlap (several at once) are not one level each over a flat baseline.
    if runs.windows(2).any(|w| w[1].0 < w[0].1) {
        return None;
    }
    let runs = &runs[..];
    let (first, last) = (runs.first()?.0, runs.iter().map(|r| r.1).max()?);
    let n = z.t.len().min(z.watts.len());
    if update <= 0 || !baseline.is_finite() {
        return None;
    }
    // The readings whose update may hold a run: from one update before the first to two after
    // (a reading that failed, not finite, says nothing of the phase).
    let (from, to) = (first.saturating_sub(update), last.saturating_add(update.saturating_mul(2)));
    let rows: Vec<(i64, f64)> = (0..n).filter(|&k| z.t[k] > from && z.t[k] < to && z.watts[k].is_finite()).map(|k| (z.t[k], z.watts[k] - baseline)).collect();
    if rows.len() < 3 {
        return None;
    }
    let ssr = |p: i64| residual(&rows, runs, update, p);
    let step = (update / COARSE).max(1);
    let coarse: Vec<(i64, f64)> = (0..COARSE).map(|i| i * step).map(|p| (p, ssr(p))).collect();
    let (best, _) = coarse.iter().copied().min_by(|a, b| a.1.total_cmp(&b.1))?;
    let fine_step = (2 * step / FINE).max(1);
    let fine: Vec<(i64, f64)> = (-FINE..=FINE).map(|i| best + i * fine_step).map(|p| (p, ssr(p))).collect();
    let (phase, min) = fine.iter().copied().min_by(|a, b| a.1.total_cmp(&b.1))?;
    let free = rows.len().saturating_sub(runs.len() + 1).max(1) as f64;
    let limit = min + 3.84 * min / free;
    // Every candidate within the limit, on either pass: how far from the best it lies (around
    // the circle of one update).
    let dist = |p: i64| {
        let d = (p - phase).rem_euclid(update);
        d.min(update - d)
    };
    let spread = coarse.iter().chain(&fine).filter(|c| c.1 <= limit).map(|c| dist(c.0)).max().unwrap_or(0);
    let half_range = spread.saturating_add(fine_step).saturating_add((DRIFT * last.saturating_sub(first) as f64) as i64);
    (half_range < update / 4).then_some(Phase { phase: phase.rem_euclid(update), update, half_range })
}

/// Squared residual of the best flat levels of `runs` under the updates of phase `p`.
fn residual(rows: &[(i64, f64)], runs: &[(i64, i64)], update: i64, p: i64) -> f64 {
    let ph = Phase { phase: p, update, half_range: 0 };
    // Each row's overlaps: (run index, share of the update).
    let shares: Vec<Vec<(usize, f64)>> = rows
        .iter()
        .map(|&(t, _)| {
            let end = ph.end_before(t);
            let from = end - update;
            // Runs in order of their start (one at a time): those ending after the update began,
            // up to the first starting after it ended.
            let first = runs.partition_point(|r| r.1 <= from);
            runs[first..]
                .iter()
                .take_while(|r| r.0 < end)
                .enumerate()
                .filter_map(|(k, &(s, e))| {
                    let o = e.min(end) - s.max(from);
                    (o > 0).then(|| (first + k, o as f64 / update as f64))
                })
                .collect()
        })
        .collect();
    // A run's level above idle is not negative: without that a short run beside a long one's
    // edge takes whatever level makes any phase fit there (non-negative least squares, by
    // fixing the negative ones at 0 until none is left).
    let mut fixed = vec![false; runs.len()];
    let mut levels = solve_levels(rows, &shares, &fixed);
    // Each pass fixes every negative level at once: a few passes settle it.
    for _ in 0..NNLS_PASSES {
        let negative: Vec<usize> = (0..levels.len()).filter(|&i| !fixed[i] && levels[i] < 0.0).collect();
        if negative.is_empty() {
            break;
        }
        for i in negative {
            fixed[i] = true;
        }
        levels = solve_levels(rows, &shares, &fixed);
    }
    rows.iter().zip(&shares).map(|(&(_, y), s)| (y - s.iter().map(|&(i, a)| a * levels[i]).sum::<f64>()).powi(2)).sum()
}

/// Least-squares levels of the runs not `fixed` at 0: the normal equations, banded (an update
/// overlaps neighbouring runs only, so a probe of thousands of runs costs its runs times the band
/// squared), by Cholesky with a small ridge so a run no update sees (or a fixed one) gets 0.
fn solve_levels(rows: &[(i64, f64)], shares: &[Vec<(usize, f64)>], fixed: &[bool]) -> Vec<f64> {
    let n = fixed.len();
    let band = shares.iter().flat_map(|s| s.iter().flat_map(move |a| s.iter().map(move |b| a.0.abs_diff(b.0)))).max().unwrap_or(0);
    // m[i][band − (i − k)] holds entry (i, k) for k in i − band ..= i.
    let mut m = vec![vec![0.0; band + 1]; n];
    let mut c = vec![0.0; n];
    for (&(_, y), s) in rows.iter().zip(shares) {
        for &(i, a) in s.iter().filter(|(i, _)| !fixed[*i]) {
            c[i] += a * y;
            for &(k, b) in s.iter().filter(|(k, _)| !fixed[*k] && *k <= i) {
                m[i][band - (i - k)] += a * b;
            }
        }
    }
    let ridge = 1e-9 * m.iter().map(|r| r[band]).fold(0.0, f64::max).max(1e-12);
    for r in &mut m {
        r[band] += ridge;
    }
    let at = |m: &[Vec<f64>], i: usize, k: usize| m[i][band - (i - k)];
    for i in 0..n {
        let lo = i.saturating_sub(band);
        for j in lo..=i {
            let sum: f64 = (lo.max(j.saturating_sub(band))..j).map(|k| at(&m, i, k) * at(&m, j, k)).sum();
            let v = if i == j { (at(&m, i, i) - sum).max(1e-300).sqrt() } else { (at(&m, i, j) - sum) / at(&m, j, j) };
            m[i][band - (i - j)] = v;
        }
    }
    let mut x = c;
    for i in 0..n {
        let lo = i.saturating_sub(band);
        x[i] = (x[i] - (lo..i).map(|k| at(&m, i, k) * x[k]).sum::<f64>()) / at(&m, i, i);
    }
    for i in (0..n).rev() {
        let hi = (i + band + 1).min(n);
        x[i] = (x[i] - (i + 1..hi).map(|k| at(&m, k, i) * x[k]).sum::<f64>()) / at(&m, i, i);
    }
    x
}

/// `z` as a counter with one sample per update placed by `ph`: each reading its update's energy
/// over the update. `None` where two readings show one update or one is missing between them (a
/// stalled read), or a reading failed (not finite): the counter would have a hole or a double.
pub fn as_counter(z: &ZoneSeries, ph: &Phase) -> Option<ZoneSeries> {
    let n = z.t.len().min(z.watts.len());
    let ends: Vec<i64> = z.t[..n].iter().map(|&t| ph.end_before(t)).collect();
    if n < 2 || ends.windows(2).any(|w| w[1] - w[0] != ph.update) || z.watts[..n].iter().any(|w| !w.is_finite()) {
        return None;
    }
    let iv = u64::try_from(ph.update).ok()?;
    // A counter read at every update holds its samples half an update before the read
    // (`live::series_of`): the read instant is put there so the sample is the placed update.
    let t = ends.iter().map(|&e| e + ph.update / 2).collect();
    Some(ZoneSeries { t, watts: z.watts[..n].to_vec(), interval_ns: vec![iv; n], update_ns: iv, ..z.clone() })
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    /// Readings every second (late by `late(k)` ns) of updates ending at `phase + k·S`, each the
    /// mean of a flat rail at 3 W with the runs' levels on it, computed by hand from the overlaps.
    fn readings(phase: i64, runs: &[(i64, i64, f64)], to: i64, late: impl Fn(i64) -> i64) -> ZoneSeries {
        let mut z = ZoneSeries { source: "ipmi".into(), driver: "ipmi".into(), path: "dcmi".into(), update_ns: S as u64, ..Default::default() };
        for k in 1..to / S {
            let t = k * S + late(k);
            let end = phase + (t - phase).div_euclid(S) * S;
            let above: f64 = runs.iter().map(|&(s, e, w)| w * (e.min(end) - s.max(end - S)).max(0) as f64 / S as f64).sum();
            z.t.push(t);
            z.watts.push(3.0 + above);
        }
        z
    }

    #[test]
    fn the_phase_of_exact_readings_is_found_and_the_counter_holds_each_update_where_it_was() {
        let runs = [(5_300_000_000, 9_100_000_000, 2.0), (9_400_000_000, 9_450_000_000, 1.0), (9_700_000_000, 14_250_000_000, 0.7)];
        let z = readings(370_000_000, &runs, 20 * S, |k| (k * 37_000) % 100_000);
        let spans: Vec<(i64, i64)> = runs.iter().map(|r| (r.0, r.1)).collect();
        let ph = fit(&z, S, &spans, 3.0).expect("a fit");
        assert!((ph.phase - 370_000_000).abs() <= ph.half_range, "{ph:?}");
        // The fine grid's step twice, and 100 ppm of drift over the 8.95 s from the first run's
        // start to the last one's end.
        assert!(ph.half_range <= 2 * (2 * S / COARSE / FINE) + 895_000, "exact readings pin it to the fine grid: {ph:?}");
        let c = as_counter(&z, &ph).expect("no stall");
        // The reading at 7.0001 s shows the update [5.37, 6.37) s: 3 W + 2 W × 1.0 s.
        let k = z.t.iter().position(|&t| t / S == 7).unwrap();
        assert_eq!(c.interval_ns[k], S as u64);
        assert_eq!(c.t[k] - S / 2 - S, ph.phase + 5 * S, "the sample starts where its update did");
        assert!((c.watts[k] - 5.0).abs() < 1e-12);
        // And the series the analysis integrates holds it there, with its update's energy.
        let series = c.series().expect("a series");
        assert_eq!(series.times()[k].0, ph.phase + 5 * S);
        assert!((series.sample_energy(k) - 5.0).abs() < 1e-9, "{}", series.sample_energy(k));
    }

    #[test]
    fn runs_no_update_can_place_and_stalled_reads_are_refused() {
        // Two runs of 5 ms: every phase explains them (each lies inside one update).
        let runs = [(5_300_000_000, 5_305_000_000, 2.0), (8_100_000_000, 8_105_000_000, 2.0)];
        let z = readings(370_000_000, &runs, 12 * S, |_| 0);
        let spans: Vec<(i64, i64)> = runs.iter().map(|r| (r.0, r.1)).collect();
        assert_eq!(fit(&z, S, &spans, 3.0), None);
        // Two runs at once are not one level each: not fitted, however long they are.
        let long = [(5_300_000_000, 9_100_000_000, 2.0), (8_000_000_000, 12_000_000_000, 1.0)];
        let z2 = readings(370_000_000, &long, 16 * S, |_| 0);
        assert_eq!(fit(&z2, S, &[(5_300_000_000, 9_100_000_000), (8_000_000_000, 12_000_000_000)], 3.0), None);
        let ph = Phase { phase: 370_000_000, update: S, half_range: 1_000_000 };
        let mut stalled = z.clone();
        stalled.t.remove(4);
        stalled.watts.remove(4);
        assert!(as_counter(&z, &ph).is_some());
        assert!(as_counter(&stalled, &ph).is_none(), "a missing update is a hole, not a longer one");
        let mut failed = z.clone();
        failed.watts[4] = f64::NAN;
        assert!(as_counter(&failed, &ph).is_none(), "a failed reading is a hole too");
    }

    /// Bad input degrades the fit, never the agent: failed readings (NaN) are left out and the
    /// phase is still found; a report whose last completion does not fit in i64 (read as
    /// i64::MAX) gives no fit and no overflow.
    #[test]
    fn failed_readings_and_a_run_end_past_i64_do_not_break_the_fit() {
        let runs = [(5_300_000_000, 9_100_000_000, 2.0), (9_700_000_000, 14_250_000_000, 0.7)];
        let mut z = readings(370_000_000, &runs, 20 * S, |_| 0);
        (z.watts[3], z.watts[11]) = (f64::NAN, f64::NAN);
        let spans: Vec<(i64, i64)> = runs.iter().map(|r| (r.0, r.1)).collect();
        let ph = fit(&z, S, &spans, 3.0).expect("a fit from the other readings");
        assert!((ph.phase - 370_000_000).abs() <= ph.half_range, "{ph:?}");
        assert_eq!(fit(&z, S, &[(5_300_000_000, i64::MAX)], 3.0), None);
        assert_eq!(fit(&z, S, &spans, f64::NAN), None, "no baseline, no fit");
    }

    #[test]
    fn only_a_held_value_read_about_once_per_update_qualifies() {
        let z = readings(0, &[], 4 * S, |_| 0);
        assert!(once_per_update(&z, S as u64, S as u64 + 40_000_000));
        assert!(!once_per_update(&z, S as u64, S as u64 / 2), "read twice per update: `held`'s");
        let avg = ZoneSeries { path: "power1_average".into(), ..z.clone() };
        assert!(!once_per_update(&avg, S as u64, S as u64));
        let chip = ZoneSeries { source: "hwmon".into(), driver: "ina226".into(), ..z.clone() };
        assert!(!once_per_update(&chip, S as u64, S as u64), "a chip's own oscillator drifts through the reads");
    }
}
