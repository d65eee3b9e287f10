//! The stability test of an efficiency phase (`docs/efficiency.md` §3): a measurement interval of
//! equal windows is stable when every window's efficiency lies within a band around the
//! interval's mean, and the least-squares trend over the interval is not significant (neither
//! statistically at 95 % nor larger than a tolerance). A new criterion is a field of
//! [`StabilityConfig`], its check in [`assess`] and a [`Reason`].

use serde::Serialize;

/// Constants of the stability test; defaults in `Default`, each documented in `docs/efficiency.md`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StabilityConfig {
    /// Windows in a measurement interval (the trailing ones are tested; default 10).
    pub min_windows: usize,
    /// Half-width of the band, relative to the interval's mean: every window's efficiency lies in
    /// `mean · (1 ± band)` (default 0.05).
    pub band: f64,
    /// A trend counts only when its change over the interval, relative to the mean, exceeds this
    /// (default 0.02): with many windows a statistically significant but negligible slope (a drive
    /// warming by a fraction of a percent) would otherwise never let a phase end.
    pub max_trend: f64,
}

impl Default for StabilityConfig {
    fn default() -> Self {
        StabilityConfig { min_windows: 10, band: 0.05, max_trend: 0.02 }
    }
}

/// Why an interval is not stable.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Reason {
    /// Fewer windows than an interval needs (the phase's budget ended first, or no power).
    TooFewWindows { have: usize, need: usize },
    /// A window's efficiency lies outside the band (its relative deviation from the mean).
    OutsideBand { window: usize, deviation: f64 },
    /// A significant trend: the fitted change over the interval relative to the mean, its t.
    Trend { change: f64, t: f64 },
    /// A window has no finite, positive efficiency (no energy, zero power).
    NotFinite { window: usize },
}

/// The test's result over one interval: its figures and, when not stable, why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Assessment {
    pub windows: usize,
    pub mean: f64,
    /// Largest |window − mean| / mean.
    pub max_deviation: f64,
    /// Fitted change over the interval (slope × span) relative to the mean.
    pub trend_change: f64,
    /// The slope's t statistic (∞ for a noise-free trend, 0 for a flat interval).
    pub trend_t: f64,
    pub reasons: Vec<Reason>,
}

impl Assessment {
    pub fn stable(&self) -> bool {
        self.reasons.is_empty()
    }
}

/// Two-sided 95 % quantile of Student's t with `df` degrees of freedom (table to 30; above,
/// 1.96 + 2.5/df, within 0.002 of the exact quantile).
pub fn t95(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080,
        2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        d if d <= 30 => T[d - 1],
        d => 1.96 + 2.5 / d as f64,
    }
}

/// Tests `values` (the windows' efficiencies, in time order, equal windows) as one interval.
pub fn assess(values: &[f64], cfg: &StabilityConfig) -> Assessment {
    let n = values.len();
    let mut a = Assessment { windows: n, mean: f64::NAN, max_deviation: f64::NAN, trend_change: f64::NAN, trend_t: f64::NAN, reasons: Vec::new() };
    if let Some(i) = values.iter().position(|v| !(v.is_finite() && *v > 0.0)) {
        a.reasons.push(Reason::NotFinite { window: i });
        return a;
    }
    let need = cfg.min_windows.max(3);
    if n < need {
        a.reasons.push(Reason::TooFewWindows { have: n, need });
        return a;
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    a.mean = mean;
    let (mut worst, mut at) = (0.0f64, 0usize);
    for (i, v) in values.iter().enumerate() {
        let d = (v - mean).abs() / mean;
        if d > worst {
            (worst, at) = (d, i);
        }
    }
    a.max_deviation = worst;
    if worst > cfg.band {
        a.reasons.push(Reason::OutsideBand { window: at, deviation: worst });
    }
    let (slope, t) = trend(values);
    a.trend_change = slope * (n - 1) as f64 / mean;
    a.trend_t = t;
    if t.abs() > t95(n - 2) && a.trend_change.abs() > cfg.max_trend {
        a.reasons.push(Reason::Trend { change: a.trend_change, t });
    }
    a
}

/// Least-squares slope of `values` against their index and its t statistic (slope / its
/// standard error; ±∞ when the residuals are zero and the slope is not, 0 when both are).
fn trend(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let xm = (n - 1.0) / 2.0;
    let ym = values.iter().sum::<f64>() / n;
    let sxx: f64 = (0..values.len()).map(|i| (i as f64 - xm).powi(2)).sum();
    let sxy: f64 = values.iter().enumerate().map(|(i, y)| (i as f64 - xm) * (y - ym)).sum();
    let slope = sxy / sxx;
    let rss: f64 = values.iter().enumerate().map(|(i, y)| (y - ym - slope * (i as f64 - xm)).powi(2)).sum();
    let se = (rss / (n - 2.0) / sxx).sqrt();
    // Residuals below rounding of the values themselves count as none.
    let t = if se > 1e-12 * ym.abs() {
        slope / se
    } else if slope.abs() > 1e-12 * ym.abs() {
        slope.signum() * f64::INFINITY
    } else {
        0.0
    };
    (slope, t)
}

/// The measurement interval of a growing phase: the trailing `min_windows` of `values` when they
/// are stable (their first index and assessment), otherwise the assessment that failed.
pub fn trailing_interval(values: &[f64], cfg: &StabilityConfig) -> (usize, Assessment) {
    let from = values.len().saturating_sub(cfg.min_windows.max(3));
    (from, assess(&values[from..], cfg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_noise_is_stable_and_a_drift_or_an_outlier_is_not() {
        let cfg = StabilityConfig::default();
        // Alternating ±1 % around 100 (by hand: mean 100, deviation 0.01; the alternation's
        // slope −5/82.5 per window is a change of −0.55 %, under the 2 % tolerance).
        let flat: Vec<f64> = (0..10).map(|i| if i % 2 == 0 { 101.0 } else { 99.0 }).collect();
        let a = assess(&flat, &cfg);
        assert!(a.stable(), "{a:?}");
        assert_eq!((a.mean, a.max_deviation), (100.0, 0.01));
        // 1 % per window: a fitted change of 9 % over ten windows, noise-free, so t = ∞.
        let drift: Vec<f64> = (0..10).map(|i| 100.0 + i as f64).collect();
        let a = assess(&drift, &cfg);
        assert_eq!(a.reasons, vec![Reason::Trend { change: 9.0 / 104.5, t: f64::INFINITY }]);
        // One window 10 % high out of ten: mean 101, deviation 9/101.
        let mut spike = vec![100.0; 10];
        spike[3] = 110.0;
        let a = assess(&spike, &cfg);
        assert_eq!(a.reasons[0], Reason::OutsideBand { window: 3, deviation: 9.0 / 101.0 });
        assert_eq!(assess(&[1.0, 1.0], &cfg).reasons, vec![Reason::TooFewWindows { have: 2, need: 10 }]);
        assert_eq!(assess(&[1.0, 0.0, 1.0], &cfg).reasons, vec![Reason::NotFinite { window: 1 }]);
    }

    #[test]
    fn a_trend_below_the_tolerance_is_accepted_and_t95_matches_the_table() {
        // 0.1 % per window: change 0.9/100.45 < 2 % although noise-free (t = ∞).
        let slow: Vec<f64> = (0..10).map(|i| 100.0 + 0.1 * i as f64).collect();
        assert!(assess(&slow, &StabilityConfig::default()).stable());
        assert_eq!((t95(1), t95(8), t95(30)), (12.706, 2.306, 2.042));
        // Exact 97.5 % quantiles: df 60 → 2.0003, df 120 → 1.9799.
        assert!((t95(60) - 2.0003).abs() < 0.002 && (t95(120) - 1.9799).abs() < 0.002);
    }
}
