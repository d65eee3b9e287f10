//! Per-run energy (`docs/uflip-method.md` §11.2–§11.4, §11.7): idle baseline before the run, run start and end found
//! in the power trace with robust statistics, energy totals, J/IO and J/MiB, the background-work tail
//! after the last IO, and the datasheet-estimate ratio. Works on any [`PowerSeries`]. To change the
//! detector, keep [`RunDetectConfig`] the single home of its constants and document them in
//! `docs/energy-method.md`.

use crate::error::AnalysisError;
pub use crate::record::{Baseline, BaselineSource, Efficiency, EndFound, RunDetectConfig, RunEnergy, RunInfo, StartFound, TimeBase};
use crate::series::PowerSeries;
use crate::units::{Joules, Nanos, UnixNanos, Watts};

/// A sample holding longer than this many typical periods does not cover its time: the recorder
/// stalled (or the source skipped readings), so where its energy went inside it is unknown.
pub const MAX_HOLD_PERIODS: i64 = 4;

/// Share of `[start, end)` covered by holds of at most [`MAX_HOLD_PERIODS`] typical periods,
/// minus `gap_ns` (1 for an empty span).
pub fn coverage(series: &PowerSeries, start: i64, end: i64, gap_ns: f64) -> f64 {
    if end <= start || series.is_empty() {
        return 1.0;
    }
    let max_hold = i64::try_from(series.typical_period().0).unwrap_or(i64::MAX).saturating_mul(MAX_HOLD_PERIODS);
    let t = series.times();
    let mut uncovered = 0i64;
    // Before the first sample or after the last hold nothing covers the run.
    uncovered += (t[0].0.min(end) - start).max(0);
    uncovered += (end - series.end_time().0.max(start)).max(0);
    let (ja, jz) = (sample_at(series, start), sample_at(series, end - 1));
    for (j, tj) in t.iter().enumerate().take(jz + 1).skip(ja) {
        let (w0, w1) = (tj.0, hold_end(series, j));
        if w1 - w0 > max_hold && max_hold > 0 {
            uncovered += (w1.min(end) - w0.max(start)).max(0);
        }
    }
    let span = (end - start) as f64;
    ((span - uncovered as f64 - gap_ns) / span).clamp(0.0, 1.0)
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

/// Half-width of the idle band for sample `i`: `band` (set for a whole window's mean) widened by
/// √(whole / valid) when part of the sample's window is gap (NaN samples). The mean of a window's
/// few valid samples beside a gap is that much noisier, so at the whole-window band it left the
/// band often and, taken for activity, stretched a tail up to `hold` (§4 step 1). `period`: the
/// series' typical period (a whole window). An all-gap sample is never outside.
pub(crate) fn band_at(series: &PowerSeries, i: usize, band: f64, period: i64) -> f64 {
    let gap = i64::try_from(series.sample_gap_ns(i)).unwrap_or(i64::MAX);
    if gap == 0 || period <= 0 {
        return band;
    }
    // A window before a stretch of all-gap windows holds through them: its whole is one period.
    let dt = hold_end(series, i) - series.times()[i].0;
    let (whole, valid) = (dt.min(period), (dt - gap).max(0));
    match valid {
        0 => f64::INFINITY,
        v if v >= whole => band,
        v => band * (whole as f64 / v as f64).sqrt(),
    }
}

/// Valid (non-gap) time of sample `i`'s hold, in s.
fn valid_s(series: &PowerSeries, i: usize) -> f64 {
    let t = series.times();
    let dt = hold_end(series, i) - t[i].0;
    (dt - series.sample_gap_ns(i) as i64).max(0) as f64 * 1e-9
}

/// Power level (W) at which the sample holding a split instant is shared between the run before
/// and the run after it: the level of the sample before (the cut tail's), or a slow counter's
/// update's own mean; both runs book the same value and no joule is counted twice or lost.
fn split_level(series: &PowerSeries, at: i64) -> f64 {
    let j = sample_at(series, at);
    // A slow counter's sample is a whole update: shared in proportion (its own mean power), the
    // sample before may be a whole update away from the split.
    if series.levels_averaged() {
        series.own_power(j).0
    } else {
        series.powers()[j.saturating_sub(1)].0
    }
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
    match detect(series, run, (lower, split_start), baseline, cfg, time_base) {
        Err(AnalysisError::NoActivity { .. } | AnalysisError::ActivityInProgress { .. } | AnalysisError::ActivityEndsEarly { .. })
            if time_base == TimeBase::Shared =>
        {
            nominal(series, run, lower, baseline, cfg)
        }
        other => other,
    }
}

/// The run over its host window `[first_submit, last_complete)`, edge samples shared in proportion.
/// On a counter (each sample an update's or a read's exact energy) a sample holding an edge whose
/// part outside the run holds no other run's IO (`lower`: the previous run's end; the next run's
/// first submit) is not shared: before the start that part is valued at the baseline (it holds
/// idle or a neighbour's tail), and after the end the run keeps it, ending with the sample (its
/// background up to there is its own). `docs/energy-method.md` §4 step 2.
fn nominal(series: &PowerSeries, run: &RunInfo, lower: Option<UnixNanos>, baseline: &Baseline, cfg: &RunDetectConfig) -> Result<RunEnergy, AnalysisError> {
    let (start, mut end) = (run.first_submit.0, run.last_complete.0);
    let b = baseline.median.0;
    let t = series.times();
    let (ja, jz) = (sample_at(series, start), sample_at(series, (end - 1).max(start)));
    let slow = series.levels_averaged();
    let whole = |j: usize| series.sample_gap_ns(j) == 0;
    let update_end = t.get(jz + 1).map(|x| x.0).filter(|&z| slow && whole(jz) && z > end && run.next_run_start.is_none_or(|n| n.0 >= z));
    let idle_before = slow && whole(ja) && start > t[ja].0 && lower.is_none_or(|l| l.0 <= t[ja].0);
    if let Some(z) = update_end {
        end = z;
    }
    let jz = sample_at(series, (end - 1).max(start));
    let (from_level, to_level) = (series.own_power(ja).0, series.own_power(jz).0);
    let (mut total, gap_samples, gap_ns) = span_energy(series, start, from_level, end, to_level, None);
    let band = cfg.band(baseline);
    let duration = Nanos(u64::try_from(end - start).unwrap_or(0));
    // Σ (P − b)·Δ sample by sample, so a flat rail at the baseline gives exactly 0.
    let mut above = 0.0;
    for (j, tj) in t.iter().enumerate().take(jz + 1).skip(ja) {
        let (w0, w1) = (tj.0, hold_end(series, j));
        let inside = (w1.min(end) - w0.max(start)).max(0) as f64;
        let gap = series.sample_gap_ns(j) as f64 * inside / (w1 - w0).max(1) as f64;
        above += (series.own_power(j).0 - b) * (inside - gap) * 1e-9;
    }
    if idle_before {
        // The part before the start at the baseline, not at the update's mean: the rest is the run's.
        let extra = (from_level - b) * (start - t[ja].0) as f64 * 1e-9;
        total += extra;
        above += extra;
    }
    let energy_total = Joules(total);
    let energy_above_idle = Joules(above);
    let datasheet_estimate = run.datasheet_active.map(|w| w.times(duration));
    Ok(RunEnergy {
        run: *run,
        start: run.first_submit,
        end: UnixNanos(end),
        start_found: if idle_before { StartFound::NominalIdleBefore } else { StartFound::Nominal },
        end_found: if update_end.is_some() { EndFound::UpdateEnd } else { EndFound::Nominal },
        baseline: *baseline,
        threshold: Watts(b + band),
        band: Watts(band),
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
        coverage: coverage(series, start, end, gap_ns),
    })
}

fn detect(
    series: &PowerSeries,
    run: &RunInfo,
    (lower, split_start): (Option<UnixNanos>, bool),
    baseline: &Baseline,
    cfg: &RunDetectConfig,
    time_base: TimeBase,
) -> Result<RunEnergy, AnalysisError> {
    cfg.validate()?;
    check_covered(series, run)?;
    let (t, p) = (series.times(), series.powers());
    let n = t.len();
    let b = baseline.median.0;
    let band = cfg.band(baseline);
    let threshold = b + band;
    let period = series.typical_period();
    let per = i64::try_from(period.0).unwrap_or(i64::MAX);
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
            count = if p[i].0 - b > band_at(series, i, band, per) { count + 1 } else { 0 };
            if count >= need {
                found = Some(i + 1 - need);
                break;
            }
        }
        let Some(a) = found else {
            return Err(AnalysisError::NoActivity { from_ns: lower, to_ns: search_to, threshold_w: threshold, baseline_w: b });
        };
        if a == i0 && i0 > 0 && !after_previous && p[i0 - 1].0 - b > band_at(series, i0 - 1, band, per) && t[i0 - 1].0 < lower {
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
        if time_base == TimeBase::Shared {
            // A live series shares the probe's clock: the run starts at its first submit (never
            // before the previous run's end), the rise above only confirms it is visible. The part
            // of the reading holding that instant before it is idle (§4, "Live runs").
            let start = first.max(lower);
            (start, b, sample_at(series, start), StartFound::Trace)
        } else {
            (start, b, a, StartFound::Trace)
        }
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
        if (p[i].0 - b).abs() > band_at(series, i, band, per) {
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
    let span = ns(cfg.level_span);
    let refine_end = |last_out: usize| -> i64 {
        // Averaged levels stay outside the band up to a span after the work: refine from there.
        let j0 = if span > 0 { sample_at(series, t[last_out].0 - span).clamp(a, last_out) } else { last_out };
        let level = level_of(series, j0.saturating_sub(3).max(a)..j0, b, band, p[j0].0);
        let mut excess = 0.0;
        for j in j0..=last_out {
            excess += series.sample_energy(j) - b * valid_s(series, j);
        }
        let mut latest = hold_end(series, last_out);
        if last_out + 1 < n && hold_end(series, last_out + 1) <= limit {
            excess += series.sample_energy(last_out + 1) - b * valid_s(series, last_out + 1);
            latest = hold_end(series, last_out + 1);
        }
        if (level - b).abs() <= band {
            return hold_end(series, last_out);
        }
        let on_ns = (excess / (level - b) * 1e9).max(0.0);
        (t[j0].0 + on_ns.round() as i64).clamp(t[j0].0, latest)
    };
    let mut tail_cut = false;
    let (end, end_split) = match (end_found, stop) {
        (EndFound::NextRunStarted, Some(j)) => {
            // Cut only when the work was still going on when the next run began: the last whole
            // window before it is active and the refined end reaches its end.
            // On averaged levels (a live counter series) the last level before the next run is
            // the mean of the span before it: work above the band within that span is a cut.
            let active_to_the_end = if span > 0 {
                j > 0 && p[j - 1].0 - b > band
            } else {
                last_out + 1 == j && {
                    let wl = hold_end(series, last_out) - t[last_out].0;
                    refine_end(last_out) >= hold_end(series, last_out) - wl / 10
                }
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
    // On a live series the IOs themselves bound the run: it lasts at least until its last
    // completion (never past the next run's first submit).
    let end = if time_base == TimeBase::Shared { end.max(last.min(limit)) } else { end }.max(start);
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
        let from_level = if bg_from == start { start_level } else { series.own_power(sample_at(series, bg_from)).0 };
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
        // Never past the next run's first submit: a long hold there (a recorder stall) must not
        // push the next run's start after its first IO.
        activity_end: UnixNanos(if tail_cut { end } else { hold_end(series, last_out).max(end).min(limit.max(end)) }),
        coverage: coverage(series, start, end, gap_ns),
    })
}
