//! Run edges refined to the sample (`docs/energy-method.md` §4, "Refinement to the sample"): after the
//! window-level analysis, the samples around each run's start and end are read back from the trace
//! (a second pass: one seek per edge for raw files, one streaming pass for CSV), each edge is moved
//! to the first/last sample whose short moving average leaves the idle band, and the edge windows'
//! energy is summed sample by sample. To support a new trace format, implement [`FineSamples`].

use crate::error::TraceError;
use crate::run::Efficiency;
use crate::run::{hold_end, sample_at, RunEnergy, RunInfo};
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
    /// The next run's first submit (the end's upper bound).
    pub limit: i64,
}

/// Refine every analysed run to the sample. `runs[i]` is `Some((record, context))` for runs with
/// energy. Records are updated in place; the window-level values stay where the samples cannot be
/// read.
pub(crate) fn refine(
    series: &PowerSeries,
    runs: &mut [Option<(&mut RunEnergy, EdgeContext)>],
    (k, min_spread): (f64, f64),
    source: &mut dyn FineSamples,
) -> Result<(), TraceError> {
    // Ranges: per run the baseline's first NOISE_WINDOW, the start, the end and the last completion.
    let mut ranges = Vec::new();
    for (r, _) in runs.iter().flatten() {
        let b = &r.baseline;
        ranges.push((b.from, b.to.min(b.from.plus(NOISE_WINDOW))));
        ranges.push(edge_range(series, r.start.0));
        ranges.push(edge_range(series, r.end.0));
        ranges.push(edge_range(series, r.run.last_complete.0));
    }
    let fetched = source.fetch(&ranges)?;
    let mut it = fetched.chunks(4);
    for (r, ctx) in runs.iter_mut().flatten() {
        let Some([noise, s, e, c]) = it.next() else {
            break;
        };
        refine_one(series, r, ctx, (k, min_spread), &Fine::new(noise), &Fine::new(s), &Fine::new(e), &Fine::new(c));
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn refine_one(series: &PowerSeries, r: &mut RunEnergy, ctx: &EdgeContext, (k, min_spread): (f64, f64), noise: &Fine, s: &Fine, e: &Fine, c: &Fine) {
    let idle: Vec<f64> = noise.p.iter().copied().filter(|p| p.is_finite()).collect();
    let Some((b_s, sigma)) = stats::median_and_sigma(&idle) else {
        return;
    };
    if s.t.len() < 2 || e.t.len() < 2 {
        return;
    }
    let period = (s.t[1] - s.t[0]).max(1);
    let m = ((EDGE_AVERAGE.0 as i64 / period) as usize).max(1);
    // Floor: the detector's `min_spread` (a flat or quantised idle trace has σ = 0).
    let thr = k * (sigma / (m as f64).sqrt()).max(min_spread);
    let out = |p: f64| p.is_finite() && (p - b_s).abs() > thr;
    let mut start = r.start.0;
    if r.start_found == crate::run::StartFound::Trace {
        // Averages only over samples inside [lower, limit): a centred average reaching across a
        // bound would see the previous run's tail or the next run's first IO.
        let lo = ctx.lower.max(r.start.0 - EDGE_REACH.0 as i64);
        let (a, z) = s.between(lo, ctx.limit);
        let avg = s.averaged(m, a, z);
        if let Some(k0) = (a..z).find(|&i| out(avg[i - a])) {
            start = s.t[k0];
        }
    }
    let mut end = r.end.0;
    if !r.tail_cut {
        let hi = ctx.limit.min(r.end.0 + EDGE_REACH.0 as i64);
        let (a, z) = e.between(ctx.lower.max(start), ctx.limit);
        let avg = e.averaged(m, a, z);
        if let Some(k1) = (a..z).rev().find(|&i| e.t[i] < hi && out(avg[i - a])) {
            end = (e.t[k1] + e.hold(k1)).min(ctx.limit);
        }
    }
    let end = end.max(start);
    // Energy: whole windows inside [start, end) from the series, the edge windows from samples.
    let b = r.baseline.median.0;
    let (total, gaps, gap_ns) = span(series, start, end, &[s, e, c]);
    let valid = ((end - start) - gap_ns).max(0) as f64 * 1e-9;
    let last = r.run.last_complete.0;
    let bg_from = start.max(last);
    let background = if bg_from < end {
        let (eb, _, g) = span(series, bg_from, end, &[s, e, c]);
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
}

/// Energy, gap samples and gap time of `[from, to)`: windows wholly inside from the series, the
/// window holding each edge from the samples of whichever fetched range covers it whole.
fn span(series: &PowerSeries, from: i64, to: i64, fine: &[&Fine]) -> (f64, u64, i64) {
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
