//! Start-up/running-phase calibration (spec §6.3): choose IgnoreIO and IOCount per baseline from a
//! long response-time series (the SIO preparation runs of §6.2).
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
        CalibrationRule {
            tolerance: 0.05,
            periods: 3,
            min_autocorrelation: 0.3,
            min_running_ios: 64,
        }
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
    let blocks: Vec<f64> = series[n / 2..]
        .chunks_exact(l)
        .map(|c| c.iter().sum::<f64>() / l as f64)
        .collect();
    let w_noise = if blocks.len() >= 2 && tolerance > 0.0 {
        let m = blocks.iter().sum::<f64>() / blocks.len() as f64;
        let var = blocks.iter().map(|b| (b - m) * (b - m)).sum::<f64>() / blocks.len() as f64;
        let cv = if m.abs() > 0.0 {
            var.sqrt() / m.abs()
        } else {
            0.0
        };
        (((3.0 * cv / tolerance).powi(2)).ceil() as usize) * l
    } else {
        0
    };
    let w = (n / 100)
        .max(l)
        .max(w_noise)
        .min((n / 4).max(l))
        .div_ceil(l)
        * l;
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
        let s: f64 = (0..n - lag)
            .map(|i| (series[i] - mean) * (series[i + lag] - mean))
            .sum();
        s / var
    };
    let max_lag = n / 3;
    let acs: Vec<f64> = (0..=max_lag + 1)
        .map(|l| if l < n { ac(l) } else { 0.0 })
        .collect();
    // First local maximum above min_r (the fundamental period, not a multiple of it).
    (2..=max_lag)
        .find(|&l| acs[l] >= min_r && acs[l] >= acs[l - 1] && acs[l] >= acs[l + 1])
        .map(|l| l as u64)
}

/// The §6.3 rule: the period by autocorrelation of the second half of the series (surely past
/// start-up), IgnoreIO from [`ignore_io`], IOCount = IgnoreIO + max(periods·period, min_running_ios).
pub fn calibrate(series: &[f64], rule: &CalibrationRule) -> Calibration {
    let p = period(&series[series.len() / 2..], rule.min_autocorrelation);
    let (k, converged) = ignore_io(series, rule.tolerance, p);
    let run_len = p
        .map(|p| p * rule.periods)
        .unwrap_or(0)
        .max(rule.min_running_ios);
    Calibration {
        ignore_io: k,
        io_count: k + run_len,
        period: p,
        converged,
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
        assert_eq!(
            calibrate(&s, &CalibrationRule::default()),
            Calibration {
                ignore_io: 0,
                io_count: 64,
                period: None,
                converged: true
            }
        );
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
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
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
        let c2 = calibrate(
            &s,
            &CalibrationRule {
                min_running_ios: 0,
                ..CalibrationRule::default()
            },
        );
        assert_eq!(c2.io_count, 120 + 24);
    }

    #[test]
    fn long_period_sets_io_count() {
        // Period 100: 90 IOs at 50 µs, 10 at 550 µs; no start-up.
        let s: Vec<f64> = (0..3000)
            .map(|i| if i % 100 >= 90 { 550.0 } else { 50.0 })
            .collect();
        let c = calibrate(&s, &CalibrationRule::default());
        assert_eq!(c.period, Some(100));
        assert_eq!(c.ignore_io, 0);
        assert_eq!(c.io_count, 300);
    }

    #[test]
    fn too_noisy_series_does_not_converge() {
        // Alternating 10 and 1000 µs without a detectable period in 40 samples: w is capped at n/4.
        let s: Vec<f64> = (0..40)
            .map(|i| {
                if (i * 7 + i / 3) % 2 == 0 {
                    10.0
                } else {
                    1000.0
                }
            })
            .collect();
        let (k, ok) = ignore_io(&s, 0.05, None);
        assert_eq!((k, ok), (0, false));
    }
}
