//! Background-work classes of the paper's Table 2 (`docs/uflip-method.md` §11.5) over one experiment's values, and
//! pause recommendations from measured tails (§11.6). Input is per-run [`BackgroundObservation`]s
//! (usually from [`RunEnergy`]). To add a class or change a rule, edit [`classify`] (the rules are
//! tried in a fixed order) and the table in `docs/energy-method.md`.

use crate::error::{AnalysisError, ConfigError};
use crate::run::RunEnergy;
use crate::stats;
use crate::units::{Joules, Nanos, UnixNanos};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The paper's classes of pattern-dependent background work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BackgroundClass {
    /// Several seconds, independent of the parameter.
    #[serde(rename = "Ex")]
    Extended,
    /// Sub-second, independent of the parameter.
    #[serde(rename = "S")]
    Small,
    /// Duration grows regularly with the parameter.
    #[serde(rename = "GWP")]
    GrowsWithParameter,
    /// Not significant.
    #[serde(rename = "NS")]
    NotSignificant,
    /// No post-run excursion at all (the table's "None").
    #[serde(rename = "None")]
    NoExcursion,
}

impl BackgroundClass {
    /// The paper's abbreviation.
    pub fn code(self) -> &'static str {
        match self {
            BackgroundClass::Extended => "Ex",
            BackgroundClass::Small => "S",
            BackgroundClass::GrowsWithParameter => "GWP",
            BackgroundClass::NotSignificant => "NS",
            BackgroundClass::NoExcursion => "None",
        }
    }
}

impl fmt::Display for BackgroundClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// What one run contributes to classification.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BackgroundObservation {
    /// Background duration (trace end − host's last completion).
    pub duration: Nanos,
    /// Energy above idle after the last completion.
    pub energy: Joules,
    /// The run's total energy.
    pub run_energy: Joules,
}

impl From<&RunEnergy> for BackgroundObservation {
    fn from(r: &RunEnergy) -> Self {
        BackgroundObservation { duration: r.background_duration, energy: r.energy_background, run_energy: r.energy_total }
    }
}

/// The repetitions (nbRun, usually 3) of one value of the experiment's varying parameter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValueRuns {
    /// The parameter value (IO size, shift, partitions, …), in the parameter's own unit.
    pub value: f64,
    pub runs: Vec<BackgroundObservation>,
}

/// Thresholds of the classifier (`docs/uflip-method.md` §11.5 proposal). Defaults in `Default`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClassifyConfig {
    /// Sample period of the traces (default 1 ms). A duration within one period is "no excursion".
    pub sample_period: Nanos,
    /// The detector's w (default 1 ms).
    pub min_duration: Nanos,
    /// NS when Σ background energy < this fraction of Σ run energy (default 0.01).
    pub ns_energy_fraction: f64,
    /// GWP needs Spearman ρ(value, duration) ≥ this (default 0.8) …
    pub gwp_min_spearman: f64,
    /// … over at least this many values (default 4) …
    pub gwp_min_values: usize,
    /// … and max/min of the per-value durations ≥ this (default 2).
    pub gwp_min_ratio: f64,
    /// Ex when the median of the per-value durations ≥ this (default 1 s); otherwise S.
    pub extended_min: Nanos,
}

impl Default for ClassifyConfig {
    fn default() -> Self {
        ClassifyConfig {
            sample_period: Nanos(1_000_000),
            min_duration: Nanos(1_000_000),
            ns_energy_fraction: 0.01,
            gwp_min_spearman: 0.8,
            gwp_min_values: 4,
            gwp_min_ratio: 2.0,
            extended_min: Nanos(1_000_000_000),
        }
    }
}

/// The class and the evidence behind it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Classification {
    pub class: BackgroundClass,
    /// `(value, median duration over its repetitions)`, in input order.
    pub durations: Vec<(f64, Nanos)>,
    /// Spearman ρ between value and duration, when defined.
    pub spearman: Option<f64>,
    /// Σ background energy / Σ run energy over all runs.
    pub energy_fraction: f64,
    /// Which rule decided, in words.
    pub reason: String,
}

/// Classify one (device, experiment). Rules, first match wins:
/// 1. **None**: no run's background lasted more than one sample period.
/// 2. **NS**: max d(v) ≤ max(w, 3 sample periods), or Σ E_bg < `ns_energy_fraction` · Σ E_run.
/// 3. **GWP**: ≥ `gwp_min_values` values, ρ(v, d(v)) ≥ `gwp_min_spearman`, max/min ≥ `gwp_min_ratio`.
/// 4. **Ex**: median over values of d(v) ≥ `extended_min`.
/// 5. **S** otherwise.
///
/// d(v) is the median background duration over the repetitions of value v.
pub fn classify(values: &[ValueRuns], cfg: &ClassifyConfig) -> Result<Classification, AnalysisError> {
    if !(cfg.ns_energy_fraction.is_finite() && cfg.ns_energy_fraction >= 0.0) {
        return Err(ConfigError::new("ns_energy_fraction", "must be a finite number ≥ 0").into());
    }
    let mut durations = Vec::new();
    let (mut e_bg, mut e_run) = (0.0, 0.0);
    let mut longest = 0u64;
    for v in values {
        let ds: Vec<f64> = v.runs.iter().map(|r| r.duration.0 as f64).collect();
        let Some(d) = stats::median(&ds) else {
            continue;
        };
        for r in &v.runs {
            e_bg += r.energy.0.max(0.0);
            e_run += r.run_energy.0;
            longest = longest.max(r.duration.0);
        }
        durations.push((v.value, Nanos(d.round() as u64)));
    }
    if durations.is_empty() {
        return Err(AnalysisError::NoValues);
    }
    let energy_fraction = if e_run > 0.0 { e_bg / e_run } else { 0.0 };
    let xs: Vec<f64> = durations.iter().map(|d| d.0).collect();
    let ds: Vec<f64> = durations.iter().map(|d| d.1 .0 as f64).collect();
    let spearman = stats::spearman(&xs, &ds);
    let max_d = ds.iter().copied().fold(0.0, f64::max);
    let min_d = ds.iter().copied().fold(f64::INFINITY, f64::min);
    let med_d = stats::median(&ds).unwrap_or(0.0);
    let ns_limit = cfg.min_duration.0.max(cfg.sample_period.0.saturating_mul(3)) as f64;
    let done = |class, reason: String| Classification { class, durations: durations.clone(), spearman, energy_fraction, reason };
    if longest <= cfg.sample_period.0 {
        return Ok(done(BackgroundClass::NoExcursion, format!("no run's tail exceeded one sample period ({})", cfg.sample_period)));
    }
    if max_d <= ns_limit {
        return Ok(done(BackgroundClass::NotSignificant, format!("max d(v) {} ≤ {}", Nanos(max_d as u64), Nanos(ns_limit as u64))));
    }
    if energy_fraction < cfg.ns_energy_fraction {
        return Ok(done(
            BackgroundClass::NotSignificant,
            format!("background energy {:.3} % < {:.3} % of run energy", 100.0 * energy_fraction, 100.0 * cfg.ns_energy_fraction),
        ));
    }
    let ratio = if min_d > 0.0 { max_d / min_d } else { f64::INFINITY };
    if durations.len() >= cfg.gwp_min_values && spearman.is_some_and(|r| r >= cfg.gwp_min_spearman) && ratio >= cfg.gwp_min_ratio {
        return Ok(done(
            BackgroundClass::GrowsWithParameter,
            format!("ρ = {:.3} over {} values, max/min = {ratio:.2}", spearman.unwrap_or(0.0), durations.len()),
        ));
    }
    if med_d >= cfg.extended_min.0 as f64 {
        return Ok(done(BackgroundClass::Extended, format!("median d(v) {} ≥ {}", Nanos(med_d as u64), cfg.extended_min)));
    }
    Ok(done(BackgroundClass::Small, format!("median d(v) {} < {}", Nanos(med_d as u64), cfg.extended_min)))
}

/// Whether a run only reads (no background work is expected, §11.5) or includes writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IoMix {
    ReadOnly,
    WithWrites,
}

/// Pause rule of §11.6: `pause = max(min_pause, factor · bg_duration + return_to_idle)` for runs with
/// writes, `min_pause` for read-only runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PauseConfig {
    /// P_min (default 100 ms).
    pub min_pause: Nanos,
    /// Safety factor on the measured tail (default 1.5).
    pub factor: f64,
    /// The device's return-to-lowest-idle time from the idle characterisation (§11.2; default 0).
    pub return_to_idle: Nanos,
}

impl Default for PauseConfig {
    fn default() -> Self {
        PauseConfig { min_pause: Nanos(100_000_000), factor: 1.5, return_to_idle: Nanos(0) }
    }
}

/// Pause after a run whose calibrated background tail is `bg_duration`.
pub fn recommend_pause(bg_duration: Nanos, mix: IoMix, cfg: &PauseConfig) -> Nanos {
    match mix {
        IoMix::ReadOnly => cfg.min_pause,
        IoMix::WithWrites => {
            let scaled = Nanos::from_secs_f64(cfg.factor.max(0.0) * bg_duration.as_secs_f64());
            cfg.min_pause.max(Nanos(scaled.0.saturating_add(cfg.return_to_idle.0)))
        }
    }
}

/// Pause for one (device, experiment, value) from its calibration repetitions: the rule applied to
/// the longest observed tail (conservative: a pause must cover every repetition).
pub fn recommend_pause_for_value(runs: &[BackgroundObservation], mix: IoMix, cfg: &PauseConfig) -> Nanos {
    let longest = runs.iter().map(|r| r.duration).max().unwrap_or(Nanos(0));
    recommend_pause(longest, mix, cfg)
}

/// A run interferes with the next one when its trace had not returned to the idle band by the time
/// the next run started (§11.6).
pub fn interferes(run: &RunEnergy, next_run_start: UnixNanos) -> bool {
    run.interference() || run.end > next_run_start
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(d_ms: u64, e_bg: f64, e_run: f64) -> BackgroundObservation {
        BackgroundObservation { duration: Nanos::from_millis(d_ms), energy: Joules(e_bg), run_energy: Joules(e_run) }
    }

    fn exp(ds: &[(f64, u64)], e_bg: f64) -> Vec<ValueRuns> {
        ds.iter().map(|&(v, d)| ValueRuns { value: v, runs: vec![obs(d, e_bg, 3.0); 3] }).collect()
    }

    fn class(v: &[ValueRuns]) -> BackgroundClass {
        classify(v, &ClassifyConfig::default()).map(|c| c.class).unwrap_or(BackgroundClass::NoExcursion)
    }

    #[test]
    fn each_rule() {
        assert_eq!(class(&exp(&[(1.0, 0), (2.0, 1)], 0.0)), BackgroundClass::NoExcursion);
        assert_eq!(class(&exp(&[(1.0, 2), (2.0, 3)], 0.1)), BackgroundClass::NotSignificant);
        // long but tiny in energy: 0.01 J of 3 J
        assert_eq!(class(&exp(&[(1.0, 500), (2.0, 500)], 0.01)), BackgroundClass::NotSignificant);
        assert_eq!(class(&exp(&[(1.0, 100), (2.0, 200), (4.0, 400), (8.0, 800)], 0.5)), BackgroundClass::GrowsWithParameter);
        // growing but only 3 values: not GWP; median 200 ms -> S
        assert_eq!(class(&exp(&[(1.0, 100), (2.0, 200), (4.0, 400)], 0.5)), BackgroundClass::Small);
        assert_eq!(class(&exp(&[(1.0, 3000), (2.0, 3100), (4.0, 2900), (8.0, 3000)], 2.0)), BackgroundClass::Extended);
        assert_eq!(classify(&[], &ClassifyConfig::default()), Err(AnalysisError::NoValues));
    }

    #[test]
    fn pauses() {
        let cfg = PauseConfig::default();
        assert_eq!(recommend_pause(Nanos::from_millis(2000), IoMix::ReadOnly, &cfg), Nanos::from_millis(100));
        assert_eq!(recommend_pause(Nanos::from_millis(10), IoMix::WithWrites, &cfg), Nanos::from_millis(100));
        assert_eq!(recommend_pause(Nanos::from_millis(2000), IoMix::WithWrites, &cfg), Nanos::from_millis(3000));
        let cfg = PauseConfig { return_to_idle: Nanos::from_millis(250), ..cfg };
        assert_eq!(recommend_pause_for_value(&[obs(100, 0.0, 1.0), obs(400, 0.0, 1.0)], IoMix::WithWrites, &cfg), Nanos::from_millis(850));
    }
}
