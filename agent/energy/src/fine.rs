//! Run edges refined to the sample (`docs/energy-method.md` §4, "Refinement to the sample"): after the
//! window-level analysis, the samples around each run's start and end are read back from the trace
//! (a second pass: one seek per edge for raw files, one streaming pass for CSV), each edge is moved
//! to the first/last sample whose short moving average leaves the idle band, and the edge windows'
//! energy is summed sample by sample. To support a new trace format, implement [`FineSamples`].

use crate::error::TraceError;
use crate::run::{hold_end, sample_at, Efficiency, EndFound, RunEnergy, RunInfo, StartFound};
use crate::series::PowerSeries;
use crate::stats;
use crate::trace::csv::{read_csv_samples, CsvOptions};
use crate::trace::raw::{read_raw_samples, Sidecar};
use crate::trace::ShuntCircuit;
use crate::units::{Joules, Nanos, UnixNanos, Watts};
use std::path::PathBuf;

/// A trace that can hand back its samples (UTC time, watts, NaN for gaps) in given time ranges.
pub trait FineSamples {
    fn fetch(&mut self, ranges: &[(UnixNanos, UnixNanos)]) -> Result<Vec<Vec<(UnixNanos, f64)>>, TraceError>;
}

/// A raw f32/i16 trace with its sidecar.
pub struct RawSamples {
    pub path: PathBuf,
    pub sidecar: Sidecar,
}

impl FineSamples for RawSamples {
    fn fetch(&mut self, ranges: &[(UnixNanos, UnixNanos)]) -> Result<Vec<Vec<(UnixNanos, f64)>>, TraceError> {
        read_raw_samples(&self.path, &self.sidecar, ranges)
    }
}

/// A CSV trace with the circuit and options it was imported with.
pub struct CsvSamples {
    pub path: PathBuf,
    pub circuit: ShuntCircuit,
    pub options: CsvOptions,
}

impl FineSamples for CsvSamples {
    fn fetch(&mut self, ranges: &[(UnixNanos, UnixNanos)]) -> Result<Vec<Vec<(UnixNanos, f64)>>, TraceError> {
        read_csv_samples(&self.path, self.circuit, &self.options, ranges)
    }
}

/// How far around the window-level edge the samples are read and searched (the window-level
/// refinement is within two 1 ms windows of the truth).
pub const EDGE_REACH: Nanos = Nanos(3_000_000);
/// Length of the moving average that decides whether a sample is outside the idle band (10 samples
/// at 100 kS/s): short enough for the 0.2 ms target, long enough to keep scope noise out.
pub const EDGE_AVERAGE: Nanos = Nanos(100_000);
/// Idle samples read for the per-sample noise (from the start of the baseline window).
pub const NOISE_WINDOW: Nanos = Nanos(50_000_000);

/// Samples of one range, with each sample's hold (to the next sample; the last one the interval
/// before it).
struct Fine {
    t: Vec<i64>,
    p: Vec<f64>,
}

impl Fine {
    fn new(v: &[(UnixNanos, f64)]) -> Fine {
        Fine { t: v.iter().map(|x| x.0 .0).collect(), p: v.iter().map(|x| x.1).collect() }
    }
    fn hold(&self, k: usize) -> i64 {
        if k + 1 < self.t.len() {
            self.t[k + 1] - self.t[k]
        } else if self.t.len() >= 2 {
            self.t[k] - self.t[k - 1]
        } else {
            0
        }
    }
    /// Energy (J), gap samples and gap time (ns) of the samples with times in `[from, to)`.
    fn energy(&self, from: i64, to: i64) -> (f64, u64, i64) {
        let (mut e, mut g, mut gns) = (0.0, 0u64, 0i64);
        let a = self.t.partition_point(|x| *x < from);
        for k in a..self.t.len() {
            if self.t[k] >= to {
                break;
            }
            if self.p[k].is_finite() {
                e += self.p[k] * self.hold(k) as f64 * 1e-9;
            } else {
                g += 1;
                gns += self.hold(k);
            }
        }
        (e, g, gns)
    }
    /// Index range of the samples with times in `[from, to)`.
    fn between(&self, from: i64, to: i64) -> (usize, usize) {
        let a = self.t.partition_point(|x| *x < from);
        (a, self.t.partition_point(|x| *x < to).max(a))
    }
    /// Centred moving average of `m` samples (gaps skipped) for each sample of `a..z`, using only
    /// samples of `a..z`; NaN where all are gaps.
    fn averaged(&self, m: usize, a: usize, z: usize) -> Vec<f64> {
        let p = &self.p[a..z];
        let n = p.len();
        let mut sum = vec![0.0; n + 1];
        let mut cnt = vec![0usize; n + 1];
        for k in 0..n {
            let ok = p[k].is_finite();
            sum[k + 1] = sum[k] + if ok { p[k] } else { 0.0 };
            cnt[k + 1] = cnt[k] + usize::from(ok);
        }
        let h = m / 2;
        (0..n)
            .map(|k| {
                let (a, z) = (k.saturating_sub(h), (k + h + 1).min(n));
                let c = cnt[z] - cnt[a];
                if c == 0 {
                    f64::NAN
                } else {
                    (sum[z] - sum[a]) / c as f64
                }
            })
            .collect()
    }
}

/// The windows around `at` ± [`EDGE_REACH`], as a whole-window time range.
fn edge_range(series: &PowerSeries, at: i64) -> (UnixNanos, UnixNanos) {
    let reach = EDGE_REACH.0 as i64;
    let a = sample_at(series, at - reach);
    let z = sample_at(series, at + reach);
    (series.times()[a], UnixNanos(hold_end(series, z)))
}

/// What the fine pass needs to know per run besides its record.
pub(crate) struct EdgeContext {
    /// The start search's lower bound (previous run's completion or end).
    pub lower: i64,
    /// `first_submit − start_slack`: the lower bound once the previous run's edges are refined.
    pub slack_from: i64,
    /// The next run's first submit (the end's upper bound).
    pub limit: i64,
}

/// The previous run as refined: its end, and whether its tail was cut at this run's first submit.
#[derive(Clone, Copy)]
struct Refined {
    end: i64,
    cut: bool,
}

/// The idle level and per-sample noise of a run's baseline, and the decision rule built on them.
struct Noise {
    b: f64,
    sigma: f64,
    k: f64,
    min_spread: f64,
    period: i64,
}

impl Noise {
    /// Samples averaged for a band that lets a step of `level` W above idle through at half its
    /// height (k·σ/√m ≤ level/2), at least [`EDGE_AVERAGE`], at most [`MAX_TAIL_AVERAGE`].
    fn samples_for(&self, level: f64) -> usize {
        let m0 = ((EDGE_AVERAGE.0 as i64 / self.period) as usize).max(1);
        let cap = ((MAX_TAIL_AVERAGE.0 as i64 / self.period) as usize).max(m0);
        if !(level.is_finite() && level > 0.0) {
            return m0;
        }
        let need = (2.0 * self.k * self.sigma / level).powi(2).ceil();
        (need.min(cap as f64) as usize).max(m0)
    }
    /// Half-width of the idle band for averages of `m` samples.
    fn band(&self, m: usize) -> f64 {
        self.k * (self.sigma / (m as f64).sqrt()).max(self.min_spread)
    }
}

/// Longest average over which the power just before the next run's first submit decides a cut:
/// work that ended more than this before it is not cut.
pub const CUT_AVERAGE: Nanos = Nanos(300_000);

/// Longest average the end search uses for a weak tail (its edge then moves by at most half of it).
pub const MAX_TAIL_AVERAGE: Nanos = Nanos(1_000_000);

/// Refine every analysed run to the sample, in execution order. `runs[i]` is `Some((record,
/// context))` for runs with energy. Records are updated in place; the window-level values stay
/// where the samples cannot be read. Each run's start is searched after the previous run's refined
/// end (nothing is counted twice), and a tail is cut only when the average of the samples just
/// before the next run's first submit is above the idle band.
pub(crate) fn refine(
    series: &PowerSeries,
    runs: &mut [Option<(&mut RunEnergy, EdgeContext)>],
    (k, min_spread): (f64, f64),
    source: &mut dyn FineSamples,
) -> Result<(), TraceError> {
    // Ranges: per run the baseline's first NOISE_WINDOW, the start, the end, the last completion
    // and the next run's first submit.
    let last = series.end_time().0 - 1;
    let mut ranges = Vec::new();
    for (r, ctx) in runs.iter().flatten() {
        let b = &r.baseline;
        ranges.push((b.from, b.to.min(b.from.plus(NOISE_WINDOW))));
        ranges.push(edge_range(series, r.start.0));
        ranges.push(edge_range(series, r.end.0));
        ranges.push(edge_range(series, r.run.last_complete.0));
        ranges.push(edge_range(series, ctx.limit.min(last)));
    }
    let fetched = source.fetch(&ranges)?;
    let mut it = fetched.chunks(5);
    let mut prev: Option<Refined> = None;
    for slot in runs.iter_mut() {
        let Some((r, ctx)) = slot else {
            prev = None;
            continue;
        };
        let Some([noise, s, e, c, l]) = it.next() else {
            break;
        };
        prev = refine_one(series, r, ctx, prev, (k, min_spread), &Fine::new(noise), [&Fine::new(s), &Fine::new(e), &Fine::new(c), &Fine::new(l)]);
    }
    Ok(())
}

/// Refines one run after `prev`; returns what the next run needs, or `None` when the samples could
/// not be read (the window-level values stay).
fn refine_one(
    series: &PowerSeries,
    r: &mut RunEnergy,
    ctx: &EdgeContext,
    prev: Option<Refined>,
    (k, min_spread): (f64, f64),
    noise: &Fine,
    fines: [&Fine; 4],
) -> Option<Refined> {
    let [s, e, c, l] = fines;
    let idle: Vec<f64> = noise.p.iter().copied().filter(|p| p.is_finite()).collect();
    let (b_s, sigma) = stats::median_and_sigma(&idle)?;
    if s.t.len() < 2 || e.t.len() < 2 {
        return None;
    }
    let nz = Noise { b: b_s, sigma, k, min_spread, period: (s.t[1] - s.t[0]).max(1) };
    let lower = prev.map_or(ctx.lower, |p| p.end.max(ctx.slack_from));
    let start = refine_start(r, ctx, prev, lower, &nz, s);
    // The tail's level above idle, for the end's average length: its samples after the last
    // completion (the window holding that instant also holds the run's own IO).
    let tail_level = tail_level(c, r, nz.b);
    let m_end = nz.samples_for(tail_level);
    // Cut: power above the band just before the next first submit, averaged over at most
    // CUT_AVERAGE (a longer average would reach back to this run's own last IOs).
    let m_cut = m_end.min(((CUT_AVERAGE.0 as i64 / nz.period) as usize).max(1));
    // Only samples whose whole hold lies before the next first submit: the one holding it already
    // holds the next run's rise.
    let before = ctx.limit.saturating_sub(nz.period - 1);
    let cut = ctx.limit < i64::MAX && last_level(l, start, before, m_cut).is_some_and(|p| p - nz.b > nz.band(m_cut));
    let end = if cut {
        ctx.limit
    } else {
        let search = if r.tail_cut { l } else { e };
        let hi = if r.tail_cut { ctx.limit } else { ctx.limit.min(r.end.0 + EDGE_REACH.0 as i64) };
        let (a, z) = search.between(lower.max(start), before);
        let avg = search.averaged(m_end, a, z);
        let thr = nz.band(m_end);
        match (a..z).rev().find(|&i| search.t[i] < hi && avg[i - a].is_finite() && (avg[i - a] - nz.b).abs() > thr) {
            Some(k1) => (search.t[k1] + search.hold(k1)).min(ctx.limit),
            None if r.tail_cut => r.run.last_complete.0.min(ctx.limit),
            None => r.end.0,
        }
    };
    if r.tail_cut != cut {
        r.tail_cut = cut;
        r.end_found = if cut { EndFound::NextRunStarted } else { EndFound::IdleBeforeNextRun };
    }
    let end = end.max(start);
    set_energy(series, r, (start, end), nz.period, &fines);
    Some(Refined { end, cut })
}

/// The run's start: exactly the first submit after a cut tail; otherwise the first sample whose
/// centred average (over samples in `[lower, limit)` only: an average reaching across a bound would
/// see the previous run's tail or the next run's first IO) leaves the idle band.
fn refine_start(r: &mut RunEnergy, ctx: &EdgeContext, prev: Option<Refined>, lower: i64, nz: &Noise, s: &Fine) -> i64 {
    match prev {
        Some(p) if p.cut => {
            r.start_found = StartFound::SplitAtFirstSubmit;
            return r.run.first_submit.0;
        }
        // The window level split here, the samples say the previous tail was over: search.
        Some(_) if r.start_found == StartFound::SplitAtFirstSubmit => r.start_found = StartFound::Trace,
        _ => {}
    }
    if r.start_found != StartFound::Trace {
        return r.start.0.max(lower);
    }
    let m = nz.samples_for(f64::NAN);
    let lo = lower.max(r.start.0.min(r.run.first_submit.0) - EDGE_REACH.0 as i64);
    let (a, z) = s.between(lo, ctx.limit);
    let avg = s.averaged(m, a, z);
    let thr = nz.band(m);
    // The start of the stretch outside the band that is going on at the first submit (or the first
    // one after it): a stretch that returned to idle before the first submit is the previous
    // run's last work (a decayed tail's remnant), not this run's rise.
    let first = r.run.first_submit.0;
    let mut cand = None;
    for i in a..z {
        if avg[i - a].is_finite() && (avg[i - a] - nz.b).abs() > thr {
            cand = cand.or(Some(i));
        } else if s.t[i] < first {
            cand = None;
        }
        if cand.is_some() && s.t[i] >= first {
            break;
        }
    }
    match cand {
        Some(k0) => s.t[k0],
        None => r.start.0.max(lower),
    }
}

/// Mean power above idle `b` of the samples from 100 µs after the last completion to the
/// window-level end (at most [`EDGE_REACH`]); 0 when there are fewer than 20 (no tail to speak of).
fn tail_level(c: &Fine, r: &RunEnergy, b: f64) -> f64 {
    let last = r.run.last_complete.0;
    let (a, z) = c.between(last + EDGE_AVERAGE.0 as i64, r.end.0.min(last + EDGE_REACH.0 as i64));
    let v: Vec<f64> = c.p[a..z].iter().copied().filter(|p| p.is_finite()).collect();
    if v.len() < 20 {
        return 0.0;
    }
    v.iter().sum::<f64>() / v.len() as f64 - b
}

/// Mean power of the last `m` samples before `limit` (at or after `from`), gaps skipped.
fn last_level(l: &Fine, from: i64, limit: i64, m: usize) -> Option<f64> {
    let (a, z) = l.between(from, limit);
    let v: Vec<f64> = l.p[a.max(z.saturating_sub(m))..z].iter().copied().filter(|p| p.is_finite()).collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// The record's bounds and energies from `[start, end)`, edge windows summed sample by sample.
fn set_energy(series: &PowerSeries, r: &mut RunEnergy, (start, end): (i64, i64), period: i64, fines: &[&Fine; 4]) {
    let b = r.baseline.median.0;
    let (total, gaps, gap_ns) = span(series, start, end, fines);
    let valid = ((end - start) - gap_ns).max(0) as f64 * 1e-9;
    let last = r.run.last_complete.0;
    let bg_from = start.max(last);
    let background = if bg_from < end {
        let (eb, _, g) = span(series, bg_from, end, fines);
        eb - b * ((end - bg_from) - g).max(0) as f64 * 1e-9
    } else {
        0.0
    };
    let run: RunInfo = r.run;
    r.start = UnixNanos(start);
    r.end = UnixNanos(end);
    r.duration = Nanos(u64::try_from(end - start).unwrap_or(0));
    r.energy_total = Joules(total);
    r.energy_above_idle = Joules(total - b * valid);
    r.energy_background = Joules(background);
    r.background_duration = Nanos(u64::try_from(end - last).unwrap_or(0));
    r.mean_power = r.energy_total.over(r.duration).unwrap_or(Watts(0.0));
    r.efficiency_total = Efficiency::new(r.energy_total, run.bytes, run.ios);
    r.efficiency_above_idle = Efficiency::new(r.energy_above_idle, run.bytes, run.ios);
    r.datasheet_ratio = r.datasheet_estimate.filter(|_| total > 0.0).map(|d| d.0 / total);
    r.gap_samples = gaps;
    r.gap_duration = Nanos(u64::try_from(gap_ns).unwrap_or(0));
    r.sample_period = Nanos(u64::try_from(period).unwrap_or(0));
    r.coverage = 1.0 - (gap_ns as f64 / (end - start).max(1) as f64).clamp(0.0, 1.0);
}

/// Energy, gap samples and gap time of `[from, to)`: windows wholly inside from the series, the
/// window holding each edge from the samples of whichever fetched range covers it whole.
fn span(series: &PowerSeries, from: i64, to: i64, fine: &[&Fine; 4]) -> (f64, u64, i64) {
    if to <= from {
        return (0.0, 0, 0);
    }
    let t = series.times();
    let (ja, jz) = (sample_at(series, from), sample_at(series, to - 1));
    let (mut e, mut g, mut gns) = (0.0, 0u64, 0i64);
    for (j, tj) in t.iter().enumerate().take(jz + 1).skip(ja) {
        let (w0, w1) = (tj.0, hold_end(series, j));
        if w0 >= from && w1 <= to {
            e += series.sample_energy(j);
            g += series.sample_gaps(j);
            gns += series.sample_gap_ns(j) as i64;
            continue;
        }
        let (a, z) = (w0.max(from), w1.min(to));
        // A fetched range covering the whole window, so the samples are all there.
        let cover = fine.iter().find(|f| f.t.first().is_some_and(|x| *x <= w0) && f.t.last().is_some_and(|x| *x + f.hold(f.t.len() - 1) >= w1));
        match cover {
            Some(f) => {
                let (x, y, z2) = f.energy(a, z);
                e += x;
                g += y;
                gns += z2;
            }
            None => {
                let frac = (z - a) as f64 / (w1 - w0).max(1) as f64;
                e += series.sample_energy(j) * frac;
            }
        }
    }
    (e, g, gns)
}
