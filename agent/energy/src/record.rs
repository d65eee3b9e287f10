//! The types of the per-run analysis (`docs/energy-method.md` §4–§5): the idle [`Baseline`], the
//! detector's constants ([`RunDetectConfig`]), what the probe knows of a run ([`RunInfo`]) and the
//! per-run record ([`RunEnergy`]) with how its edges were found. The analysis itself is `run`;
//! a new field of the record is added here and filled there.

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
    /// 99th percentile of |P − median| in the window: the idle noise's reach, which a quantised
    /// source (a counter's steps) has far beyond 1.4826·MAD (`RunDetectConfig::idle_peak_margin`).
    #[serde(default)]
    pub peak: Watts,
}

impl Baseline {
    /// Baseline of the samples with timestamps in `[from, to)`; needs at least `min_samples`.
    pub fn from_window(series: &PowerSeries, from: UnixNanos, to: UnixNanos, min_samples: usize) -> Result<Baseline, AnalysisError> {
        let ps: Vec<f64> = series.powers_between(from, to).iter().map(|w| w.0).collect();
        let needed = min_samples.max(1);
        match stats::median_and_sigma(&ps) {
            Some((m, s)) if ps.len() >= needed => {
                // Averaged counter levels: the window's energy over its time is exact; their median
                // is biased by up to one counter step per span.
                let m = if series.levels_averaged() { mean_power(series, from, to).unwrap_or(m) } else { m };
                // The 99th percentile of |P − b|: the idle noise's reach, ignoring the odd
                // sample at the window's end that already holds the first run's start.
                let mut dev: Vec<f64> = ps.iter().map(|p| (p - m).abs()).collect();
                dev.sort_by(f64::total_cmp);
                let peak = dev.get((dev.len().saturating_sub(1)) * 99 / 100).copied().unwrap_or(0.0);
                Ok(Baseline { median: Watts(m), spread: Watts(s), samples: ps.len(), from, to, peak: Watts(peak) })
            }
            _ => Err(AnalysisError::NotEnoughBaseline { from_ns: from.0, to_ns: to.0, found: ps.len(), needed }),
        }
    }
}

/// Energy over valid time of the samples whose holds lie in `[from, to)`: a slow counter's sample
/// spans its update, and the last one starting in the window may hold the first run's start.
fn mean_power(series: &PowerSeries, from: UnixNanos, to: UnixNanos) -> Option<f64> {
    let (a, mut z) = (series.index_at_or_after(from), series.index_at_or_after(to));
    let t = series.times();
    while z > a && t[z - 1].0 + series.dt_ns(z - 1) > to.0 {
        z -= 1;
    }
    let (e, ns) = (a..z).fold((0.0, 0i64), |(e, ns), i| (e + series.sample_energy(i), ns + series.dt_ns(i) - series.sample_gap_ns(i) as i64));
    (ns > 0).then(|| e / (ns as f64 * 1e-9))
}

/// Constants of the run detector (`docs/uflip-method.md` §11.3). All configurable; defaults in `Default`.
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
    /// The idle band is at least this multiple of the idle window's 99th-percentile deviation
    /// from its median (default 0: off; the live path sets 1.5: a counter's readings step by whole updates,
    /// so their idle noise is not Gaussian and k·s would take single steps for activity; the
    /// margin covers a deviation a little larger than the idle window happened to show).
    pub idle_peak_margin: f64,
    /// The series' levels are trailing averages over this span (a live counter series, 10 ms):
    /// the last level outside the band can lie up to a span after the work's end, so the end is
    /// refined over the samples of that span (default 0: levels are the samples' own).
    pub level_span: Nanos,
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
            idle_peak_margin: 0.0,
            level_span: Nanos(0),
        }
    }
}

impl RunDetectConfig {
    /// Half-width of the idle band for `baseline`: k·max(s, `min_spread`), and at least
    /// `idle_peak_margin` times the idle window's peak deviation.
    pub fn band(&self, baseline: &Baseline) -> f64 {
        let band = self.k * baseline.spread.0.max(self.min_spread.0);
        band.max(self.idle_peak_margin * baseline.peak.0)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.k.is_finite() && self.k > 0.0) {
            return Err(ConfigError::new("k", format!("must be > 0, got {}", self.k)));
        }
        if self.baseline_window.0 == 0 {
            return Err(ConfigError::new("baseline_window", "must be > 0"));
        }
        if !(self.min_spread.0.is_finite() && self.min_spread.0 >= 0.0) {
            return Err(ConfigError::new("min_spread", "must be a finite number ≥ 0"));
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
    /// First window with `w` worth of consecutive windows above `b + k·s`, refined inside the edge
    /// windows from their energy above idle (§4 of `docs/energy-method.md`).
    Trace,
    /// Live recordings only (the series is on the probe's own clock): no rise was found, the host's
    /// first submit is used (a run invisible in power, e.g. reads on a coarse sensor).
    Nominal,
    /// As `Nominal`, on a counter slower than its reads: the part of the update holding the first
    /// submit that lies before it holds no other run's IO and is valued at the idle baseline.
    NominalIdleBefore,
    /// The previous run's tail was still going on at this run's first submit: the energy is split
    /// at that instant and this run starts there.
    SplitAtFirstSubmit,
}

/// How the run end was determined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndFound {
    /// The trace stayed within `b ± k·s` for `hold` after the end.
    ReturnedToIdle,
    /// The trace was back within `b ± k·s` before the next run's first submit (shorter than
    /// `hold`: the pause was short, but the run's work was over).
    IdleBeforeNextRun,
    /// The trace ended before `hold` of idle was seen; the end is the last deviation.
    TraceEnded,
    /// Background work was still going on at the next run's first submit: the tail was cut there
    /// (interference, §11.6) and the energy split at that instant.
    NextRunStarted,
    /// Live recordings only: no rise was found, the host's last completion is used.
    Nominal,
    /// As `Nominal`, on a counter slower than its reads, where the update holding the last
    /// completion holds no other run's IO after it: the run ends with that update and keeps its
    /// background up to there.
    UpdateEnd,
}

/// How the series' clock relates to the probe's run timestamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeBase {
    /// Recorded by the agent during the probe, on the probe's own clock (the live path): a run
    /// whose activity is not seen in power is measured over its host window (`Nominal`), and the
    /// trace is never refused as misaligned.
    Shared,
    /// Imported and aligned by the user (origin, rate, time unit): a run whose activity is not
    /// found gets no energy, and a trace that does not match the probe is refused.
    Imported,
}

/// Which idle baseline a run was measured against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum BaselineSource {
    /// The probe's idle characterisation window (the normal case, live and imported).
    #[default]
    IdleWindow,
    /// Fallback: the idle stretch just before the run, after the previous run's end (used only
    /// when the probe's idle window is not in the trace).
    Local,
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

/// The per-run energy record of `docs/uflip-method.md` §11.4.
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
    /// Background work was still going on at the next run's first submit: the tail was cut there
    /// and `background_duration` is a lower bound (interference, §11.6).
    pub tail_cut: bool,
    /// Gap samples (NaN/∞ in the trace) inside `[start, end)`, and the time they cover. Gaps carry no
    /// energy, in the run as in the trace total.
    pub gap_samples: u64,
    pub gap_duration: Nanos,
    pub baseline_source: BaselineSource,
    /// End of the last sample outside the idle band, unrefined (window resolution; `end` for a
    /// cut or nominal run): the next run's start is searched from here, so a tail's last
    /// partly-idle window is never taken for the next run's rise.
    pub activity_end: UnixNanos,
    /// Share of `[start, end)` that the series covers with readings no longer than
    /// [`MAX_HOLD_PERIODS`] typical periods and not gap time (1 when fully covered): a longer
    /// hold is a stall of the recorder, whose energy is known only as a total over it.
    pub coverage: f64,
}

impl RunEnergy {
    /// The trace had not returned to idle when the next run started (§11.6).
    pub fn interference(&self) -> bool {
        self.tail_cut
    }
}
