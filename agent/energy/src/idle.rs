//! Idle characterisation (`docs/uflip-method.md` §11.2): baseline b and spread s over a long idle window, and the
//! period of regular idle work (Intel and Memoright devices spike periodically while idle) found by
//! autocorrelation. The run detector's `hold` should exceed that period. To add an idle statistic, add
//! a field to [`IdleProfile`] and compute it in [`characterise_idle`].

use crate::error::{AnalysisError, ConfigError};
use crate::run::Baseline;
use crate::series::PowerSeries;
use crate::units::{Nanos, UnixNanos};
use serde::{Deserialize, Serialize};

/// Parameters of the idle characterisation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IdleConfig {
    /// A period is reported only if the autocorrelation peak reaches this (default 0.3).
    pub min_correlation: f64,
    /// The series is block-averaged down to at most this many points before the O(n²)
    /// autocorrelation (default 8192; 10 s at ≈ 1.2 ms resolution).
    pub max_points: usize,
    /// Fewest samples accepted (default 10).
    pub min_samples: usize,
}

impl Default for IdleConfig {
    fn default() -> Self {
        IdleConfig { min_correlation: 0.3, max_points: 8192, min_samples: 10 }
    }
}

/// What the idle window says about the device.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct IdleProfile {
    pub baseline: Baseline,
    /// Period of regular idle work, if the trace shows one.
    pub spike_period: Option<Nanos>,
    /// Autocorrelation at that period.
    pub spike_correlation: Option<f64>,
}

/// Characterise the idle samples with timestamps in `[from, to)` (record ≥ 10 s after ≥ 30 s without
/// IO, §11.2). Samples are assumed evenly spaced at the series' typical period.
pub fn characterise_idle(series: &PowerSeries, from: UnixNanos, to: UnixNanos, cfg: &IdleConfig) -> Result<IdleProfile, AnalysisError> {
    if !(cfg.min_correlation.is_finite() && cfg.min_correlation > 0.0) {
        return Err(ConfigError::new("min_correlation", "must be a finite number > 0").into());
    }
    let baseline = Baseline::from_window(series, from, to, cfg.min_samples)?;
    let xs: Vec<f64> = series.powers_between(from, to).iter().map(|w| w.0).collect();
    let block = xs.len().div_ceil(cfg.max_points.max(16));
    let ys: Vec<f64> = xs.chunks(block).map(|c| c.iter().sum::<f64>() / c.len() as f64).collect();
    let step_ns = series.typical_period().0 as f64 * block as f64;
    let (lag, r) = autocorrelation_period(&ys);
    let found = lag.filter(|_| r >= cfg.min_correlation);
    Ok(IdleProfile { baseline, spike_period: found.map(|l| Nanos((l as f64 * step_ns).round() as u64)), spike_correlation: found.map(|_| r) })
}

/// The lag of the highest autocorrelation peak after the first zero crossing, and its value.
fn autocorrelation_period(ys: &[f64]) -> (Option<usize>, f64) {
    let n = ys.len();
    if n < 8 {
        return (None, 0.0);
    }
    let m = ys.iter().sum::<f64>() / n as f64;
    let d: Vec<f64> = ys.iter().map(|y| y - m).collect();
    let var: f64 = d.iter().map(|x| x * x).sum();
    if var <= 0.0 {
        return (None, 0.0);
    }
    let max_lag = n / 2;
    // Normalised per overlapping pair so long lags are not penalised.
    let r: Vec<f64> = (0..max_lag)
        .map(|lag| {
            let s: f64 = d[..n - lag].iter().zip(&d[lag..]).map(|(a, b)| a * b).sum();
            s / var * n as f64 / (n - lag) as f64
        })
        .collect();
    let first_neg = (1..max_lag).find(|&l| r[l] <= 0.0).unwrap_or(max_lag);
    let best = (first_neg..max_lag).map(|l| r[l]).fold(0.0, f64::max);
    if best <= 0.0 {
        return (None, 0.0);
    }
    // The fundamental: the first local maximum within 10 % of the best peak.
    for l in first_neg..max_lag {
        let left = r[l - 1];
        let right = r.get(l + 1).copied().unwrap_or(f64::NEG_INFINITY);
        if r[l] >= 0.9 * best && r[l] >= left && r[l] >= right {
            return (Some(l), r[l]);
        }
    }
    (None, 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::Watts;

    fn idle(spikes: bool) -> PowerSeries {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        PowerSeries::from_samples((0..10_000i64).map(|i| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let noise = (seed % 1000) as f64 / 1000.0 * 0.02 - 0.01;
            let spike = if spikes && i % 500 < 20 { 0.3 } else { 0.0 };
            (UnixNanos(i * 1_000_000), Watts(0.5 + spike + noise))
        }))
        .unwrap_or_default()
    }

    #[test]
    fn periodic_idle_work_is_found() {
        let p = characterise_idle(&idle(true), UnixNanos(0), UnixNanos(i64::MAX), &IdleConfig::default()).unwrap_or_else(|e| panic!("{e}"));
        let period = p.spike_period.unwrap_or_default();
        assert!((period.0 as i64 - 500_000_000).abs() <= 2_000_000, "{period}");
        assert!((p.baseline.median.0 - 0.5).abs() < 0.01);
    }

    #[test]
    fn flat_idle_has_no_period() {
        let p = characterise_idle(&idle(false), UnixNanos(0), UnixNanos(i64::MAX), &IdleConfig::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.spike_period, None);
    }
}
