//! Start-up/running-phase calibration (spec §6.3): choose IgnoreIO and IOCount per baseline from a
//! long response-time series (the SIO preparation runs of §6.2), and [`spe_effect`]: what the SPE
//! run (SR, RW, SR back to back) says about reads after random writes.
//!
//! Pure functions on `&[f64]` so they can be tested on synthetic series. To change the rule, adjust
//! [`CalibrationRule`] (tolerance, number of periods, autocorrelation search range).

use serde::{Deserialize, Serialize};

/// Constants of the automatic rule ([Proposal] in §6.3, all configurable).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CalibrationRule {
    /// The cumulative mean of IOs k..n must stay within ±tolerance of the final mean (0.05 = ±5 %).
    pub tolerance: f64,
    /// IOCount = IgnoreIO + at least this many periods.
    pub periods: u64,
    /// Minimum autocorrelation at the chosen lag for the series to count as periodic.
    pub min_autocorrelation: f64,
    /// IOCount floor when no period is found (and when periods·period is shorter).
    pub min_running_ios: u64,
}

impl Default for CalibrationRule {
    fn default() -> Self {
        CalibrationRule { tolerance: 0.05, periods: 3, min_autocorrelation: 0.3, min_running_ios: 64 }
    }
}

/// Outcome of [`calibrate`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Start-up IOs to ignore.
    pub ignore_io: u64,
    /// IOs per run (IgnoreIO + running phase).
    pub io_count: u64,
    /// Running-phase period in IOs, if one was found.
    pub period: Option<u64>,
    /// False when the series was too noisy for the rule (IgnoreIO then 0).
    pub converged: bool,
}

/// IgnoreIO rule: the smallest k such that the cumulative mean of IOs k..j stays within
/// ±tolerance of the running-phase mean (IOs k..n) for every j. Three adjustments make it usable on
/// real series:
/// - j is only checked at whole multiples of the running phase's `period` (a periodic running
///   phase would otherwise fail right after its expensive IO);
/// - the shortest window checked is `w = max(period, n/100, w_noise)` IOs, where `w_noise =
///   (3·cv/tolerance)²` and cv is the coefficient of variation of period-block means in the second
///   half of the series: a window of pure running-phase noise then stays in the band (3σ), while a
///   clean synthetic series keeps a short window and an exact answer;
/// - `w` is capped at n/4; if still no k qualifies the series is too noisy to decide and
///   `(0, false)` is returned (take a longer SIO run or raise the tolerance).
///
/// Returns `(ignore_io, converged)`. Prefix sums make each check O(1).
pub fn ignore_io(series: &[f64], tolerance: f64, period: Option<u64>) -> (u64, bool) {
    let n = series.len();
    if n == 0 {
        return (0, true);
    }
    let mut prefix = vec![0.0; n + 1];
    for (i, x) in series.iter().enumerate() {
        prefix[i + 1] = prefix[i] + x;
    }
    let l = period.unwrap_or(1).max(1) as usize;
    // Noise of period-block means in the second half (surely running phase).
    let blocks: Vec<f64> = series[n / 2..].chunks_exact(l).map(|c| c.iter().sum::<f64>() / l as f64).collect();
    let w_noise = if blocks.len() >= 2 && tolerance > 0.0 {
        let m = blocks.iter().sum::<f64>() / blocks.len() as f64;
        let var = blocks.iter().map(|b| (b - m) * (b - m)).sum::<f64>() / blocks.len() as f64;
        let cv = if m.abs() > 0.0 { var.sqrt() / m.abs() } else { 0.0 };
        (((3.0 * cv / tolerance).powi(2)).ceil() as usize) * l
    } else {
        0
    };
    let w = (n / 100).max(l).max(w_noise).min((n / 4).max(l)).div_ceil(l) * l;
    'k: for k in 0..n.saturating_sub(w) {
        let final_mean = (prefix[n] - prefix[k]) / (n - k) as f64;
        let band = tolerance * final_mean.abs();
        let mut len = w;
        while k + len <= n {
            let m = (prefix[k + len] - prefix[k]) / len as f64;
            if (m - final_mean).abs() > band {
                continue 'k;
            }
            len += l;
        }
        return (k as u64, true);
    }
    (0, false)
}

/// Period (in IOs) of the running phase by autocorrelation: the lag in `2..=n/3` with the highest
/// autocorrelation, if that is ≥ `min_r` and a local maximum.
pub fn period(series: &[f64], min_r: f64) -> Option<u64> {
    let n = series.len();
    if n < 8 {
        return None;
    }
    let mean = series.iter().sum::<f64>() / n as f64;
    let var: f64 = series.iter().map(|x| (x - mean) * (x - mean)).sum();
    if var <= 0.0 {
        return None;
    }
    let ac = |lag: usize| -> f64 {
        let s: f64 = (0..n - lag).map(|i| (series[i] - mean) * (series[i + lag] - mean)).sum();
        s / var
    };
    let max_lag = n / 3;
    let acs: Vec<f64> = (0..=max_lag + 1).map(|l| if l < n { ac(l) } else { 0.0 }).collect();
    // First local maximum above min_r (the fundamental period, not a multiple of it).
    (2..=max_lag).find(|&l| acs[l] >= min_r && acs[l] >= acs[l - 1] && acs[l] >= acs[l + 1]).map(|l| l as u64)
}

/// The §6.3 rule: the period by autocorrelation of the second half of the series (surely past
/// start-up), IgnoreIO from [`ignore_io`], IOCount = IgnoreIO + max(periods·period, min_running_ios).
pub fn calibrate(series: &[f64], rule: &CalibrationRule) -> Calibration {
    let p = period(&series[series.len() / 2..], rule.min_autocorrelation);
    let (k, converged) = ignore_io(series, rule.tolerance, p);
    let run_len = p.map(|p| p * rule.periods).unwrap_or(0).max(rule.min_running_ios);
    Calibration { ignore_io: k, io_count: k + run_len, period: p, converged }
}

/// What the SPE run (§6.2) shows: are sequential reads right after random writes slower than the
/// same reads before them, by how much, and for how long. The time they stay slow is how long the
/// drive's asynchronous work after random writes lasts, i.e. the pause runs need between them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SpeEffect {
    /// Mean response time of the first SR leg, µs.
    pub sr_before_mean_us: f64,
    /// Mean response time of the RW leg, µs.
    pub rw_mean_us: f64,
    /// Mean response time of the second SR leg (right after the RW), µs.
    pub sr_after_mean_us: f64,
    /// `(sr_after − sr_before) / sr_before × 100`.
    pub slowdown_pct: f64,
    /// True when the second SR is slower than the first by more than the tolerance.
    pub slower: bool,
    /// IOs at the start of the second SR leg that are still slow: the smallest k after which every
    /// running mean of IOs k..j stays within +tolerance of the first SR's mean.
    pub slow_ios: u64,
    /// Their summed response time, µs: how long the background work lasted.
    pub slow_us: f64,
    /// False when the second SR never got back to the first SR's speed within the leg (the
    /// background work outlasts the leg; use a longer SPE leg or a longer pause).
    pub recovered: bool,
}

/// Compare the two SR legs of an SPE run (series in µs, one value per IO). `tolerance` as in
/// [`CalibrationRule::tolerance`]; the shortest window checked is `max(n/100, (3·cv/tolerance)²)`
/// IOs (capped at n/4), cv being the first SR leg's per-IO coefficient of variation, so plain read
/// noise does not count as slowness.
pub fn spe_effect(sr_before: &[f64], rw: &[f64], sr_after: &[f64], tolerance: f64) -> SpeEffect {
    let mean = |v: &[f64]| {
        if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    let before = mean(sr_before);
    let after = mean(sr_after);
    let limit = before * (1.0 + tolerance);
    let cv = if before > 0.0 && !sr_before.is_empty() {
        let var = sr_before.iter().map(|x| (x - before) * (x - before)).sum::<f64>() / sr_before.len() as f64;
        var.sqrt() / before
    } else {
        0.0
    };
    let n = sr_after.len();
    let w_noise = if tolerance > 0.0 { ((3.0 * cv / tolerance).powi(2)).ceil() as usize } else { 0 };
    let w = (n / 100).max(w_noise).min((n / 4).max(1)).max(1);
    let mut prefix = vec![0.0; n + 1];
    for (i, x) in sr_after.iter().enumerate() {
        prefix[i + 1] = prefix[i] + x;
    }
    // Only "slower" counts: reads that got faster after the writes (a cache) are not slow.
    let recovered_at = (0..n.saturating_sub(w) + 1).find(|&k| (k + w..=n).all(|j| (prefix[j] - prefix[k]) / (j - k) as f64 <= limit));
    let (slow_ios, recovered) = match recovered_at {
        Some(k) => (k, true),
        None => (n, false),
    };
    SpeEffect {
        sr_before_mean_us: before,
        rw_mean_us: mean(rw),
        sr_after_mean_us: after,
        slowdown_pct: if before > 0.0 { (after - before) / before * 100.0 } else { 0.0 },
        slower: after > limit,
        slow_ios: slow_ios as u64,
        slow_us: prefix[slow_ios],
        recovered,
    }
}

impl SpeEffect {
    /// One line for people: the verdict, the means and how long the reads stayed slow.
    pub fn describe(&self) -> String {
        let means = format!("SR {:.1} µs before, {:.1} µs after RW ({:.1} µs)", self.sr_before_mean_us, self.sr_after_mean_us, self.rw_mean_us);
        if !self.slower && self.slow_ios == 0 {
            return format!("SPE: reads after random writes are not slower ({:+.1} %; {means})", self.slowdown_pct);
        }
        let how_long = if self.recovered {
            format!("slow for the first {} IOs ({:.1} ms): let runs pause at least that long", self.slow_ios, self.slow_us / 1000.0)
        } else {
            format!("still slow at the end of the leg ({} IOs, {:.1} ms): lengthen the SPE legs or the pause", self.slow_ios, self.slow_us / 1000.0)
        };
        format!("SPE: reads after random writes are {:.1} % slower ({means}); {how_long}", self.slowdown_pct)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_series_needs_no_ignore() {
        let s = vec![100.0; 1000];
        assert_eq!(ignore_io(&s, 0.05, None), (0, true));
        assert_eq!(period(&s, 0.3), None);
        assert_eq!(calibrate(&s, &CalibrationRule::default()), Calibration { ignore_io: 0, io_count: 64, period: None, converged: true });
    }

    #[test]
    fn cheap_start_up_is_found() {
        // 50 cheap buffered writes (10 µs) then a running phase at 1000 µs: IgnoreIO = 50.
        let mut s = vec![10.0; 50];
        s.extend(std::iter::repeat_n(1000.0, 950));
        assert_eq!(ignore_io(&s, 0.05, None), (50, true));
        assert_eq!(calibrate(&s, &CalibrationRule::default()).ignore_io, 50);
    }

    #[test]
    fn noisy_running_phase() {
        // 200 start-up IOs at 300 µs, then 100 µs ± 8 % deterministic noise (period-free LCG).
        let mut s = vec![300.0; 200];
        let mut x: u64 = 12345;
        for _ in 0..2800 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let u = (x >> 11) as f64 / (1u64 << 53) as f64; // [0, 1)
            s.push(100.0 * (0.92 + 0.16 * u));
        }
        let c = calibrate(&s, &CalibrationRule::default());
        assert_eq!(c.ignore_io, 200);
        assert_eq!(c.period, None);
        assert_eq!(c.io_count, 264);
    }

    #[test]
    fn dear_start_up_with_periodic_running_phase() {
        // 120 slow IOs (5000 µs), then a period-8 pattern: 7 IOs at 100 µs and one erase at 900 µs.
        let mut s = vec![5000.0; 120];
        for i in 0..2000 {
            s.push(if i % 8 == 7 { 900.0 } else { 100.0 });
        }
        let c = calibrate(&s, &CalibrationRule::default());
        assert_eq!(c.ignore_io, 120);
        assert_eq!(c.period, Some(8));
        assert_eq!(c.io_count, 120 + 64); // 3 × 8 = 24 < 64 floor
        let c2 = calibrate(&s, &CalibrationRule { min_running_ios: 0, ..CalibrationRule::default() });
        assert_eq!(c2.io_count, 120 + 24);
    }

    #[test]
    fn long_period_sets_io_count() {
        // Period 100: 90 IOs at 50 µs, 10 at 550 µs; no start-up.
        let s: Vec<f64> = (0..3000).map(|i| if i % 100 >= 90 { 550.0 } else { 50.0 }).collect();
        let c = calibrate(&s, &CalibrationRule::default());
        assert_eq!(c.period, Some(100));
        assert_eq!(c.ignore_io, 0);
        assert_eq!(c.io_count, 300);
    }

    #[test]
    fn too_noisy_series_does_not_converge() {
        // Alternating 10 and 1000 µs without a detectable period in 40 samples: w is capped at n/4.
        let s: Vec<f64> = (0..40).map(|i| if (i * 7 + i / 3) % 2 == 0 { 10.0 } else { 1000.0 }).collect();
        let (k, ok) = ignore_io(&s, 0.05, None);
        assert_eq!((k, ok), (0, false));
    }

    #[test]
    fn spe_reads_slow_after_random_writes() {
        // 500 SR at 100 µs; 500 RW at 2000 µs; then 40 SR at 600 µs (background work) and 460 at 100.
        let before = vec![100.0; 500];
        let rw = vec![2000.0; 500];
        let mut after = vec![600.0; 40];
        after.extend(std::iter::repeat_n(100.0, 460));
        let e = spe_effect(&before, &rw, &after, 0.05);
        assert_eq!(
            e,
            SpeEffect {
                sr_before_mean_us: 100.0,
                rw_mean_us: 2000.0,
                sr_after_mean_us: 140.0,
                slowdown_pct: 40.0,
                slower: true,
                slow_ios: 40,
                slow_us: 24000.0,
                recovered: true,
            }
        );
        assert_eq!(
            e.describe(),
            "SPE: reads after random writes are 40.0 % slower (SR 100.0 µs before, 140.0 µs after RW \
             (2000.0 µs)); slow for the first 40 IOs (24.0 ms): let runs pause at least that long"
        );
    }

    #[test]
    fn spe_unaffected_and_never_recovering() {
        let flat = vec![100.0; 200];
        let e = spe_effect(&flat, &[300.0; 200], &flat, 0.05);
        assert_eq!((e.slower, e.slow_ios, e.slow_us, e.recovered), (false, 0, 0.0, true));
        assert_eq!(e.slowdown_pct, 0.0);
        assert_eq!(e.describe(), "SPE: reads after random writes are not slower (+0.0 %; SR 100.0 µs before, 100.0 µs after RW (300.0 µs))");
        // Slow to the end: not recovered, the whole leg counts.
        let e = spe_effect(&flat, &[300.0; 200], &[150.0; 200], 0.05);
        assert_eq!((e.slower, e.slow_ios, e.slow_us, e.recovered), (true, 200, 30000.0, false));
        assert_eq!(e.slowdown_pct, 50.0);
    }
}
