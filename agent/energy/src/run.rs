//! Per-run energy (`ufip.md` §11.2–§11.4, §11.7): idle baseline before the run, run start and end found
//! in the power trace with robust statistics, energy totals, J/IO and J/MiB, the background-work tail
//! after the last IO, and the datasheet-estimate ratio. Works on any [`PowerSeries`]. To change the
//! detector, keep [`RunDetectConfig`] the single home of its constants and document them in
//! `docs/energy-method.md`.

use crate::error::{AnalysisError, ConfigError};
use crate::series::PowerSeries;
use crate::stats;
use crate::units::{Joules, JoulesPerIo, JoulesPerMb, JoulesPerMib, Nanos, UnixNanos, Watts};
use serde::{Deserialize, Serialize};

/// Idle baseline: `b = median(P)` and `s = 1.4826·MAD(P)` over an idle window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    pub median: Watts,
    /// Robust spread, 1.4826·MAD (σ for normal noise).
    pub spread: Watts,
    pub samples: usize,
    pub from: UnixNanos,
    pub to: UnixNanos,
}

impl Baseline {
    /// Baseline of the samples with timestamps in `[from, to)`; needs at least `min_samples`.
    pub fn from_window(
        series: &PowerSeries,
        from: UnixNanos,
        to: UnixNanos,
        min_samples: usize,
    ) -> Result<Baseline, AnalysisError> {
        let ps: Vec<f64> = series
            .powers_between(from, to)
            .iter()
            .map(|w| w.0)
            .collect();
        let needed = min_samples.max(1);
        match stats::median_and_sigma(&ps) {
            Some((m, s)) if ps.len() >= needed => Ok(Baseline {
                median: Watts(m),
                spread: Watts(s),
                samples: ps.len(),
                from,
                to,
            }),
            _ => Err(AnalysisError::NotEnoughBaseline {
                from_ns: from.0,
                to_ns: to.0,
                found: ps.len(),
                needed,
            }),
        }
    }
}

/// Constants of the run detector (`ufip.md` §11.3). All configurable; defaults in `Default`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunDetectConfig {
    /// Length of the idle window before the run used for the baseline (default 1 s: the paper starts
    /// collecting about 1 s before the first IO).
    pub baseline_window: Nanos,
    /// The start is searched from `first_submit − start_slack`, and the baseline window ends there
    /// (default 50 ms; covers clock misalignment between host and trace).
    pub start_slack: Nanos,
    /// The quiet stretch that ends the run may begin at `last_complete − end_slack` (default 50 ms).
    pub end_slack: Nanos,
    /// Threshold multiplier k: active means `P > b + k·s`, idle means `|P − b| ≤ k·s` (default 5).
    pub k: f64,
    /// w: the start needs this long of consecutive samples above threshold (default 1 ms, at least
    /// one sample).
    pub min_duration: Nanos,
    /// T_hold: the end needs the trace back within `b ± k·s` for this long (default 1 s; make it
    /// longer than the idle-spike period for devices with periodic idle work).
    pub hold: Nanos,
    /// Floor for s, so a perfectly flat or quantised idle trace does not make every LSB of noise a
    /// deviation (default 1 mW; set to ≥ 1 LSB of the power sensor).
    pub min_spread: Watts,
    /// Fewest samples accepted in the baseline window (default 10).
    pub min_baseline_samples: usize,
}

impl Default for RunDetectConfig {
    fn default() -> Self {
        RunDetectConfig {
            baseline_window: Nanos(1_000_000_000),
            start_slack: Nanos(50_000_000),
            end_slack: Nanos(50_000_000),
            k: 5.0,
            min_duration: Nanos(1_000_000),
            hold: Nanos(1_000_000_000),
            min_spread: Watts(0.001),
            min_baseline_samples: 10,
        }
    }
}

impl RunDetectConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.k.is_finite() && self.k > 0.0) {
            return Err(ConfigError::new(
                "k",
                format!("must be > 0, got {}", self.k),
            ));
        }
        if self.baseline_window.0 == 0 {
            return Err(ConfigError::new("baseline_window", "must be > 0"));
        }
        if !(self.min_spread.0.is_finite() && self.min_spread.0 >= 0.0) {
            return Err(ConfigError::new(
                "min_spread",
                "must be a finite number ≥ 0",
            ));
        }
        Ok(())
    }
}

/// What the probe knows about a run (host side, `CLOCK_REALTIME` aligned with the trace).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    pub first_submit: UnixNanos,
    pub last_complete: UnixNanos,
    /// Bytes transferred by the run's IOs.
    pub bytes: u64,
    /// Number of IOs in the run.
    pub ios: u64,
    /// When the next run starts, if any: the end search stops there (interference, §11.6).
    pub next_run_start: Option<UnixNanos>,
    /// Datasheet (or NVMe PSD) active power, for the §11.7 estimate.
    pub datasheet_active: Option<Watts>,
}

/// How the run start was determined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StartFound {
    /// First sample with `w` worth of consecutive samples above `b + k·s`.
    Trace,
    /// No deviation found: the host's first-submit time is used.
    Nominal,
}

/// How the run end was determined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndFound {
    /// The trace stayed within `b ± k·s` for `hold` after the end.
    ReturnedToIdle,
    /// The trace ended before `hold` of idle was seen; the end is the last deviation.
    TraceEnded,
    /// The next run started before the trace returned to idle: interference (§11.6).
    NextRunStarted,
    /// No start was found; the host's last-completion time is used.
    Nominal,
}

/// Energy per unit of work; `None` where the divisor is zero.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Efficiency {
    pub per_io: Option<JoulesPerIo>,
    pub per_mib: Option<JoulesPerMib>,
    pub per_mb: Option<JoulesPerMb>,
}

impl Efficiency {
    pub fn new(energy: Joules, bytes: u64, ios: u64) -> Efficiency {
        Efficiency {
            per_io: (ios > 0).then(|| JoulesPerIo(energy.0 / ios as f64)),
            per_mib: (bytes > 0).then(|| JoulesPerMib(energy.0 / (bytes as f64 / 1_048_576.0))),
            per_mb: (bytes > 0).then(|| JoulesPerMb(energy.0 / (bytes as f64 / 1e6))),
        }
    }
}

/// The per-run energy record of `ufip.md` §11.4.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunEnergy {
    pub run: RunInfo,
    /// Trace start of the run (timestamp of the first active sample).
    pub start: UnixNanos,
    /// Trace end of the run: the end of the last sample outside the idle band.
    pub end: UnixNanos,
    pub start_found: StartFound,
    pub end_found: EndFound,
    pub baseline: Baseline,
    /// `b + k·s` with s floored at `min_spread`.
    pub threshold: Watts,
    /// Half-width of the idle band, `k·s`.
    pub band: Watts,
    /// `end − start`.
    pub duration: Nanos,
    /// Σ P·Δ over `[start, end)`.
    pub energy_total: Joules,
    /// Σ (P − b)·Δ over `[start, end)`.
    pub energy_above_idle: Joules,
    /// Σ (P − b)·Δ over `[max(start, last_complete), end)`: the background-work tail's energy.
    pub energy_background: Joules,
    /// `end − last_complete` (0 if the trace was idle again before the last completion).
    pub background_duration: Nanos,
    pub mean_power: Watts,
    /// From `energy_total`.
    pub efficiency_total: Efficiency,
    /// From `energy_above_idle`.
    pub efficiency_above_idle: Efficiency,
    /// Datasheet active power × host duration (`last_complete − first_submit`).
    pub datasheet_estimate: Option<Joules>,
    /// `datasheet_estimate / energy_total` (the paper found 2–3 on whole benchmarks).
    pub datasheet_ratio: Option<f64>,
    /// Median sample spacing of the series analysed.
    pub sample_period: Nanos,
}

impl RunEnergy {
    /// The trace had not returned to idle when the next run started (§11.6).
    pub fn interference(&self) -> bool {
        self.end_found == EndFound::NextRunStarted
    }
}

/// Analyse one run, taking the baseline from the idle window just before it.
pub fn analyze_run(
    series: &PowerSeries,
    run: &RunInfo,
    cfg: &RunDetectConfig,
) -> Result<RunEnergy, AnalysisError> {
    cfg.validate()?;
    let to = run.first_submit.minus(cfg.start_slack);
    let from = to.minus(cfg.baseline_window);
    let baseline = Baseline::from_window(series, from, to, cfg.min_baseline_samples)?;
    analyze_run_with_baseline(series, run, &baseline, cfg)
}

/// Analyse one run against a baseline measured elsewhere (e.g. the §11.2 idle characterisation).
pub fn analyze_run_with_baseline(
    series: &PowerSeries,
    run: &RunInfo,
    baseline: &Baseline,
    cfg: &RunDetectConfig,
) -> Result<RunEnergy, AnalysisError> {
    cfg.validate()?;
    let (t, p) = (series.times(), series.powers());
    let n = t.len();
    if n == 0 {
        return Err(AnalysisError::EmptySeries);
    }
    let trace_end = series.end_time();
    if run.last_complete < run.first_submit
        || run.first_submit < series.first_time()
        || run.first_submit >= trace_end
    {
        return Err(AnalysisError::RunOutsideTrace {
            first_submit_ns: run.first_submit.0,
            last_complete_ns: run.last_complete.0,
            trace_start_ns: series.first_time().0,
            trace_end_ns: trace_end.0,
        });
    }
    let b = baseline.median.0;
    let s = baseline.spread.0.max(cfg.min_spread.0);
    let band = cfg.k * s;
    let threshold = b + band;
    let period = series.typical_period();
    let need = if period.0 == 0 {
        1
    } else {
        cfg.min_duration.0.div_ceil(period.0).max(1)
    };
    let limit = run.next_run_start.unwrap_or(UnixNanos(i64::MAX));

    // Start: first sample from first_submit − slack with `need` consecutive samples above threshold.
    let search_from = series.index_at_or_after(run.first_submit.minus(cfg.start_slack));
    let search_to = run.last_complete.plus(cfg.end_slack).min(limit);
    let mut start_idx = None;
    let mut count = 0u64;
    for i in search_from..n {
        if t[i] > search_to {
            break;
        }
        count = if p[i].0 > threshold { count + 1 } else { 0 };
        if count >= need {
            start_idx = Some(i + 1 - need as usize);
            break;
        }
    }

    let (start_idx, end_idx, start_found, end_found) = match start_idx {
        None => {
            let a = series.index_at_or_after(run.first_submit);
            let z = series.index_at_or_after(run.last_complete).max(a);
            (a, z, StartFound::Nominal, EndFound::Nominal)
        }
        Some(a) => {
            // End: the last deviation before a quiet stretch of `hold` that lies in the run's tail.
            let tail_from = run.last_complete.minus(cfg.end_slack).max(t[a]);
            let mut last_out = a;
            let mut found = EndFound::TraceEnded;
            for i in a..n {
                if t[i] >= limit {
                    found = EndFound::NextRunStarted;
                    break;
                }
                if (p[i].0 - b).abs() > band {
                    last_out = i;
                    continue;
                }
                if t[i] >= tail_from {
                    let quiet_from = t[last_out + 1].max(tail_from);
                    if t[i].0 - quiet_from.0 >= i64::try_from(cfg.hold.0).unwrap_or(i64::MAX) {
                        found = EndFound::ReturnedToIdle;
                        break;
                    }
                }
            }
            (a, last_out + 1, StartFound::Trace, found)
        }
    };
    let start = t[start_idx.min(n - 1)];
    let end = if end_idx < n { t[end_idx] } else { trace_end };
    let energy_total = series.energy_idx(start_idx, end_idx, Watts(0.0));
    let energy_above_idle = series.energy_idx(start_idx, end_idx, Watts(b));
    let bg_idx = series.index_at_or_after(run.last_complete).max(start_idx);
    let energy_background = series.energy_idx(bg_idx, end_idx, Watts(b));
    let duration = end.since(start);
    let datasheet_estimate = run
        .datasheet_active
        .map(|w| w.times(run.last_complete.since(run.first_submit)));
    let datasheet_ratio = datasheet_estimate
        .filter(|_| energy_total.0 > 0.0)
        .map(|e| e.0 / energy_total.0);
    Ok(RunEnergy {
        run: *run,
        start,
        end,
        start_found,
        end_found,
        baseline: *baseline,
        threshold: Watts(threshold),
        band: Watts(band),
        duration,
        energy_total,
        energy_above_idle,
        energy_background,
        background_duration: end.since(run.last_complete),
        mean_power: energy_total.over(duration).unwrap_or(Watts(0.0)),
        efficiency_total: Efficiency::new(energy_total, run.bytes, run.ios),
        efficiency_above_idle: Efficiency::new(energy_above_idle, run.bytes, run.ios),
        datasheet_estimate,
        datasheet_ratio,
        sample_period: period,
    })
}
