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
    pub fn from_window(series: &PowerSeries, from: UnixNanos, to: UnixNanos, min_samples: usize) -> Result<Baseline, AnalysisError> {
        let ps: Vec<f64> = series.powers_between(from, to).iter().map(|w| w.0).collect();
        let needed = min_samples.max(1);
        match stats::median_and_sigma(&ps) {
            Some((m, s)) if ps.len() >= needed => Ok(Baseline { median: Watts(m), spread: Watts(s), samples: ps.len(), from, to }),
            _ => Err(AnalysisError::NotEnoughBaseline { from_ns: from.0, to_ns: to.0, found: ps.len(), needed }),
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
}

impl RunEnergy {
    /// The trace had not returned to idle when the next run started (§11.6).
    pub fn interference(&self) -> bool {
        self.tail_cut
    }
}

/// Analyse one run on its own, taking the baseline from the idle window just before it (the
/// checked local fallback of [`analyze_probe`](crate::probe::analyze_probe)).
pub fn analyze_run(series: &PowerSeries, run: &RunInfo, cfg: &RunDetectConfig) -> Result<RunEnergy, AnalysisError> {
    analyze_run_local(series, run, None, cfg, TimeBase::Imported)
}

/// Local-baseline analysis with the previous run's end as a lower bound: the baseline window ends
/// at `first_submit − start_slack` and never reaches back before `lower`, so it cannot hold the
/// previous run's tail.
pub(crate) fn analyze_run_local(
    series: &PowerSeries,
    run: &RunInfo,
    lower: Option<UnixNanos>,
    cfg: &RunDetectConfig,
    time_base: TimeBase,
) -> Result<RunEnergy, AnalysisError> {
    cfg.validate()?;
    check_covered(series, run)?;
    let to = run.first_submit.minus(cfg.start_slack);
    let mut from = to.minus(cfg.baseline_window);
    if let Some(l) = lower {
        from = from.max(l);
    }
    let baseline = Baseline::from_window(series, from, to, cfg.min_baseline_samples)?;
    let mut e = analyze_run_bounded(series, run, (lower, false), &baseline, cfg, time_base)?;
    e.baseline_source = BaselineSource::Local;
    Ok(e)
}

/// Analyse one run against a baseline measured elsewhere (the §11.2 idle characterisation). The end
/// is bounded by `run.next_run_start`; the start search by `first_submit − start_slack` only (use
/// [`analyze_probe`](crate::probe::analyze_probe) for a whole probe: it also bounds each start by
/// the previous run).
pub fn analyze_run_with_baseline(series: &PowerSeries, run: &RunInfo, baseline: &Baseline, cfg: &RunDetectConfig) -> Result<RunEnergy, AnalysisError> {
    analyze_run_bounded(series, run, (None, false), baseline, cfg, TimeBase::Imported)
}

fn check_covered(series: &PowerSeries, run: &RunInfo) -> Result<(), AnalysisError> {
    if series.is_empty() {
        return Err(AnalysisError::EmptySeries);
    }
    let trace_end = series.end_time();
    if run.last_complete < run.first_submit || run.first_submit < series.first_time() || run.last_complete > trace_end {
        return Err(AnalysisError::RunOutsideTrace {
            first_submit_ns: run.first_submit.0,
            last_complete_ns: run.last_complete.0,
            trace_start_ns: series.first_time().0,
            trace_end_ns: trace_end.0,
        });
    }
    Ok(())
}

/// Index of the sample whose hold contains `at` (0 before the first sample).
pub(crate) fn sample_at(series: &PowerSeries, at: i64) -> usize {
    series.times().partition_point(|x| x.0 <= at).saturating_sub(1)
}

/// End of sample `i`'s hold.
pub(crate) fn hold_end(series: &PowerSeries, i: usize) -> i64 {
    match series.times().get(i + 1) {
        Some(t) => t.0,
        None => series.end_time().0,
    }
}

/// Valid (non-gap) time of sample `i`'s hold, in s.
fn valid_s(series: &PowerSeries, i: usize) -> f64 {
    let t = series.times();
    let dt = hold_end(series, i) - t[i].0;
    (dt - series.sample_gap_ns(i) as i64).max(0) as f64 * 1e-9
}

/// Power level (W) at which the sample holding a split instant is shared between the run before
/// and the run after it: the level of the sample before (the cut tail's), so both runs book the
/// same value and no joule is counted twice or lost.
fn split_level(series: &PowerSeries, at: i64) -> f64 {
    let j = sample_at(series, at);
    series.powers()[j.saturating_sub(1)].0
}

/// Energy (J), gap samples and gap time (ns) of `[from, to)`. Inside the sample holding `from`, the
/// part before `from` is valued at `from_level` W and removed; inside the one holding `to`, the
/// part after `to` is valued at `to_level` W and removed, or with `to_split` the run keeps
/// `to_split · (to − sample start)`.
fn span_energy(series: &PowerSeries, from: i64, from_level: f64, to: i64, to_level: f64, to_split: Option<f64>) -> (f64, u64, f64) {
    if to <= from {
        return (0.0, 0, 0.0);
    }
    let t = series.times();
    let ja = sample_at(series, from);
    let jz = sample_at(series, to - 1);
    let (mut e, mut gaps, mut gap_ns) = (0.0, 0.0, 0.0);
    for (j, tj) in t.iter().enumerate().take(jz + 1).skip(ja) {
        let (w0, w1) = (tj.0, hold_end(series, j));
        let dt = (w1 - w0).max(1) as f64;
        let inside = (w1.min(to) - w0.max(from)).max(0) as f64 / dt;
        gaps += series.sample_gaps(j) as f64 * inside;
        gap_ns += series.sample_gap_ns(j) as f64 * inside;
        let ej = series.sample_energy(j);
        if ja == jz {
            e += ej * inside;
            continue;
        }
        let mut part = ej;
        if j == ja && from > w0 {
            part -= from_level * (from - w0) as f64 * 1e-9;
        }
        if j == jz && to < w1 {
            part = match to_split {
                Some(l) => l * (to - w0) as f64 * 1e-9,
                None => part - to_level * (w1 - to) as f64 * 1e-9,
            };
        }
        e += part;
    }
    (e, gaps.round() as u64, gap_ns)
}

/// Mean power of the samples in `idx` that lie outside the idle band, or `fallback`.
fn level_of(series: &PowerSeries, idx: std::ops::Range<usize>, b: f64, band: f64, fallback: f64) -> f64 {
    let p = series.powers();
    let v: Vec<f64> = idx.filter(|&i| i < p.len() && (p[i].0 - b).abs() > band).map(|i| p[i].0).collect();
    if v.is_empty() {
        fallback
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// The run analysis shared by the live path and trace import. `lower`: the previous run's last
/// completion or found end, whichever is later (the start is searched no earlier); `split_start`:
/// the previous run's tail was cut at this run's first submit, so the run starts exactly there.
/// On a [`TimeBase::Shared`] series a run whose activity is not found is measured over its host
/// window instead.
pub(crate) fn analyze_run_bounded(
    series: &PowerSeries,
    run: &RunInfo,
    (lower, split_start): (Option<UnixNanos>, bool),
    baseline: &Baseline,
    cfg: &RunDetectConfig,
    time_base: TimeBase,
) -> Result<RunEnergy, AnalysisError> {
    match detect(series, run, lower, split_start, baseline, cfg) {
        Err(AnalysisError::NoActivity { .. } | AnalysisError::ActivityInProgress { .. } | AnalysisError::ActivityEndsEarly { .. })
            if time_base == TimeBase::Shared =>
        {
            nominal(series, run, baseline, cfg)
        }
        other => other,
    }
}

/// The run over its host window `[first_submit, last_complete)`, edge samples shared in proportion.
fn nominal(series: &PowerSeries, run: &RunInfo, baseline: &Baseline, cfg: &RunDetectConfig) -> Result<RunEnergy, AnalysisError> {
    let (start, end) = (run.first_submit.0, run.last_complete.0);
    let p = series.powers();
    let (from_level, to_level) = (p[sample_at(series, start)].0, p[sample_at(series, (end - 1).max(start))].0);
    let (total, gap_samples, gap_ns) = span_energy(series, start, from_level, end, to_level, None);
    let b = baseline.median.0;
    let s = baseline.spread.0.max(cfg.min_spread.0);
    let duration = Nanos(u64::try_from(end - start).unwrap_or(0));
    // Σ (P − b)·Δ sample by sample, so a flat rail at the baseline gives exactly 0.
    let t = series.times();
    let mut above = 0.0;
    for j in sample_at(series, start)..=sample_at(series, (end - 1).max(start)) {
        let (w0, w1) = (t[j].0, hold_end(series, j));
        let inside = (w1.min(end) - w0.max(start)).max(0) as f64;
        let gap = series.sample_gap_ns(j) as f64 * inside / (w1 - w0).max(1) as f64;
        above += (p[j].0 - b) * (inside - gap) * 1e-9;
    }
    let energy_total = Joules(total);
    let energy_above_idle = Joules(above);
    let datasheet_estimate = run.datasheet_active.map(|w| w.times(duration));
    Ok(RunEnergy {
        run: *run,
        start: run.first_submit,
        end: run.last_complete,
        start_found: StartFound::Nominal,
        end_found: EndFound::Nominal,
        baseline: *baseline,
        threshold: Watts(b + cfg.k * s),
        band: Watts(cfg.k * s),
        duration,
        energy_total,
        energy_above_idle,
        energy_background: Joules(0.0),
        background_duration: Nanos(0),
        mean_power: energy_total.over(duration).unwrap_or(Watts(0.0)),
        efficiency_total: Efficiency::new(energy_total, run.bytes, run.ios),
        efficiency_above_idle: Efficiency::new(energy_above_idle, run.bytes, run.ios),
        datasheet_estimate,
        datasheet_ratio: datasheet_estimate.filter(|_| total > 0.0).map(|e| e.0 / total),
        sample_period: series.typical_period(),
        tail_cut: false,
        gap_samples,
        gap_duration: Nanos(gap_ns.round() as u64),
        baseline_source: BaselineSource::IdleWindow,
        activity_end: run.last_complete,
    })
}

fn detect(
    series: &PowerSeries,
    run: &RunInfo,
    lower: Option<UnixNanos>,
    split_start: bool,
    baseline: &Baseline,
    cfg: &RunDetectConfig,
) -> Result<RunEnergy, AnalysisError> {
    cfg.validate()?;
    check_covered(series, run)?;
    let (t, p) = (series.times(), series.powers());
    let n = t.len();
    let b = baseline.median.0;
    let s = baseline.spread.0.max(cfg.min_spread.0);
    let band = cfg.k * s;
    let threshold = b + band;
    let period = series.typical_period();
    let need = if period.0 == 0 { 1 } else { cfg.min_duration.0.div_ceil(period.0).max(1) as usize };
    let ns = |d: Nanos| i64::try_from(d.0).unwrap_or(i64::MAX);
    let limit = run.next_run_start.map_or(i64::MAX, |x| x.0);
    let (first, last) = (run.first_submit.0, run.last_complete.0);

    // Start (§4 step 2), bounded below by the previous run.
    let (start, start_level, a, start_found) = if split_start {
        (first, split_level(series, first), sample_at(series, first), StartFound::SplitAtFirstSubmit)
    } else {
        let slack_from = first.saturating_sub(ns(cfg.start_slack));
        // Bounded by the previous run's end: the sample before the bound may hold the end of its
        // tail, which is not this run's activity already in progress.
        let after_previous = lower.is_some_and(|l| l.0 >= slack_from);
        let lower = slack_from.max(lower.map_or(i64::MIN, |l| l.0)).max(t[0].0);
        let search_to = (first.saturating_add(ns(cfg.start_slack))).min(limit);
        let i0 = series.index_at_or_after(UnixNanos(lower));
        let mut found = None;
        let mut count = 0usize;
        for i in i0..n {
            if t[i].0 > search_to {
                break;
            }
            count = if p[i].0 > threshold { count + 1 } else { 0 };
            if count >= need {
                found = Some(i + 1 - need);
                break;
            }
        }
        let Some(a) = found else {
            return Err(AnalysisError::NoActivity { from_ns: lower, to_ns: search_to, threshold_w: threshold, baseline_w: b });
        };
        if a == i0 && i0 > 0 && !after_previous && p[i0 - 1].0 > threshold && t[i0 - 1].0 < lower {
            return Err(AnalysisError::ActivityInProgress { at_ns: lower, watts: p[i0 - 1].0, threshold_w: threshold });
        }
        // Refine inside the edge windows: the energy above idle of the window before and of the
        // first active one, divided by the active level above idle, is the time the run was on in
        // them (a step from idle to the run's level; resolves far below one window).
        let level = level_of(series, a + 1..a + 4, b, band, p[a].0);
        let lo = if a > 0 && hold_end(series, a - 1) > lower { a - 1 } else { a };
        let mut excess = 0.0;
        for (j, tj) in t.iter().enumerate().take(a + 1).skip(lo) {
            let w0 = tj.0.max(lower);
            let frac = (hold_end(series, j) - w0) as f64 / (hold_end(series, j) - tj.0).max(1) as f64;
            excess += (series.sample_energy(j) - b * valid_s(series, j)) * frac;
        }
        let on_ns = (excess / (level - b) * 1e9).max(0.0);
        let edge = hold_end(series, a);
        let earliest = t[lo].0.max(lower);
        let start = (edge - on_ns.round() as i64).clamp(earliest, edge);
        (start, b, a, StartFound::Trace)
    };

    // End (§4 step 3), bounded above by the next run's first submit.
    let tail_from = (last.saturating_sub(ns(cfg.end_slack))).max(t[a].0);
    let hold = ns(cfg.hold);
    let mut last_out = a;
    let mut stop = None;
    let mut end_found = EndFound::TraceEnded;
    for i in a..n {
        if hold_end(series, i) > limit {
            stop = Some(i);
            end_found = EndFound::NextRunStarted;
            break;
        }
        if (p[i].0 - b).abs() > band {
            last_out = i;
            continue;
        }
        if t[i].0 >= tail_from {
            let quiet_from = hold_end(series, last_out).max(tail_from);
            if t[i].0 - quiet_from >= hold {
                end_found = EndFound::ReturnedToIdle;
                break;
            }
        }
    }
    // Refine like the start: the energy above idle of the last active window (and of the window
    // after it, when that one ends before the next run) over the tail's own level.
    let refine_end = |last_out: usize| -> i64 {
        let level = level_of(series, last_out.saturating_sub(3).max(a)..last_out, b, band, p[last_out].0);
        let mut excess = series.sample_energy(last_out) - b * valid_s(series, last_out);
        let mut latest = hold_end(series, last_out);
        if last_out + 1 < n && hold_end(series, last_out + 1) <= limit {
            excess += series.sample_energy(last_out + 1) - b * valid_s(series, last_out + 1);
            latest = hold_end(series, last_out + 1);
        }
        if (level - b).abs() <= band {
            return hold_end(series, last_out);
        }
        let on_ns = (excess / (level - b) * 1e9).max(0.0);
        (t[last_out].0 + on_ns.round() as i64).clamp(t[last_out].0, latest)
    };
    let mut tail_cut = false;
    let (end, end_split) = match (end_found, stop) {
        (EndFound::NextRunStarted, Some(j)) => {
            // Cut only when the work was still going on when the next run began: the last whole
            // window before it is active and the refined end reaches its end.
            let active_to_the_end = last_out + 1 == j && {
                let wl = hold_end(series, last_out) - t[last_out].0;
                refine_end(last_out) >= hold_end(series, last_out) - wl / 10
            };
            if active_to_the_end && j > a {
                tail_cut = true;
                (limit, Some(split_level(series, limit)))
            } else {
                end_found = EndFound::IdleBeforeNextRun;
                (refine_end(last_out).min(limit), None)
            }
        }
        _ if last_out + 1 >= n => (series.end_time().0, None),
        _ => (refine_end(last_out), None),
    };
    let end = end.max(start);
    if end < last.saturating_sub(ns(cfg.end_slack)) {
        return Err(AnalysisError::ActivityEndsEarly { end_ns: end, last_complete_ns: last, slack_ns: ns(cfg.end_slack) });
    }
    let (total, gap_samples, gap_ns) = span_energy(series, start, start_level, end, b, end_split);
    let duration = Nanos(u64::try_from(end - start).unwrap_or(0));
    let valid = ((end - start) as f64 - gap_ns).max(0.0) * 1e-9;
    let energy_total = Joules(total);
    let energy_above_idle = Joules(total - b * valid);
    let bg_from = start.max(last);
    let energy_background = if bg_from < end {
        let from_level = if bg_from == start { start_level } else { p[sample_at(series, bg_from)].0 };
        let (e, _, g) = span_energy(series, bg_from, from_level, end, b, end_split);
        Joules(e - b * ((end - bg_from) as f64 - g).max(0.0) * 1e-9)
    } else {
        Joules(0.0)
    };
    let datasheet_estimate = run.datasheet_active.map(|w| w.times(run.last_complete.since(run.first_submit)));
    let datasheet_ratio = datasheet_estimate.filter(|_| energy_total.0 > 0.0).map(|e| e.0 / energy_total.0);
    Ok(RunEnergy {
        run: *run,
        start: UnixNanos(start),
        end: UnixNanos(end),
        start_found,
        end_found,
        baseline: *baseline,
        threshold: Watts(threshold),
        band: Watts(band),
        duration,
        energy_total,
        energy_above_idle,
        energy_background,
        background_duration: Nanos(u64::try_from(end - last).unwrap_or(0)),
        mean_power: energy_total.over(duration).unwrap_or(Watts(0.0)),
        efficiency_total: Efficiency::new(energy_total, run.bytes, run.ios),
        efficiency_above_idle: Efficiency::new(energy_above_idle, run.bytes, run.ios),
        datasheet_estimate,
        datasheet_ratio,
        sample_period: period,
        tail_cut,
        gap_samples,
        gap_duration: Nanos(gap_ns.round() as u64),
        baseline_source: BaselineSource::IdleWindow,
        activity_end: UnixNanos(if tail_cut { end } else { hold_end(series, last_out).max(end) }),
    })
}
