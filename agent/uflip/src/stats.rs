//! Per-run statistics (spec §8): running-phase (i ≥ IgnoreIO) mean, min, max, population std-dev
//! computed exactly from the nanosecond samples, and p50/p95/p99 from an hdrhistogram.
//!
//! To add a statistic, add a field to [`LatencyStats`], compute it in [`latency_stats`], and copy
//! it into [`crate::RunResult`] in `engine::finish`.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Response-time statistics in µs.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct LatencyStats {
    /// Samples used.
    pub n: u64,
    /// AvgIO (uFLIP's headline metric).
    pub mean_us: f64,
    /// MinIO.
    pub min_us: f64,
    /// MaxIO.
    pub max_us: f64,
    /// Population std-dev (divide by n, §8).
    pub stddev_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 95th percentile.
    pub p95_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
}

/// Statistics over `samples_ns` (already restricted to the running phase). Returns the histogram
/// too, so callers can merge or export it.
pub fn latency_stats<I: IntoIterator<Item = u64>>(samples_ns: I) -> (LatencyStats, Option<Histogram<u64>>) {
    // 3 significant digits, auto-resizing: 0.1 % resolution on percentiles.
    let mut hist = Histogram::<u64>::new(3).ok();
    let (mut n, mut sum, mut sumsq) = (0u64, 0u128, 0u128);
    let (mut min, mut max) = (u64::MAX, 0u64);
    for v in samples_ns {
        n += 1;
        sum += v as u128;
        sumsq += v as u128 * v as u128;
        min = min.min(v);
        max = max.max(v);
        if let Some(h) = hist.as_mut() {
            // record() auto-resizes; saturating_record would clamp to the initial range.
            if h.record(v).is_err() {
                h.saturating_record(v);
            }
        }
    }
    if n == 0 {
        return (LatencyStats::default(), hist);
    }
    let mean = sum as f64 / n as f64;
    // Population variance from exact integer sums (no catastrophic cancellation at ns scale).
    let var_num = (n as u128 * sumsq).saturating_sub(sum * sum) as f64;
    let var = var_num / (n as f64 * n as f64);
    let q = |p: f64| hist.as_ref().map(|h| h.value_at_quantile(p) as f64 / 1000.0).unwrap_or(0.0);
    let stats = LatencyStats {
        n,
        mean_us: mean / 1000.0,
        min_us: min as f64 / 1000.0,
        max_us: max as f64 / 1000.0,
        stddev_us: var.sqrt() / 1000.0,
        p50_us: q(0.50),
        p95_us: q(0.95),
        p99_us: q(0.99),
    };
    (stats, hist)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_moments_and_percentiles() {
        // 1..=100 µs in ns.
        let (s, _) = latency_stats((1..=100u64).map(|u| u * 1000));
        assert_eq!(s.n, 100);
        assert_eq!(s.mean_us, 50.5);
        assert_eq!(s.min_us, 1.0);
        assert_eq!(s.max_us, 100.0);
        // Population std-dev of 1..=100 = sqrt((100²−1)/12).
        assert!((s.stddev_us - ((100.0f64 * 100.0 - 1.0) / 12.0).sqrt()).abs() < 1e-9);
        // hdrhistogram at 3 significant digits reports the bucket's highest equivalent value.
        assert_eq!(s.p50_us, 50.015);
        assert_eq!(s.p95_us, 95.039);
        assert_eq!(s.p99_us, 99.007);
    }

    #[test]
    fn constant_and_empty() {
        let (s, _) = latency_stats(vec![2000u64; 10]);
        assert_eq!((s.mean_us, s.stddev_us, s.min_us, s.max_us), (2.0, 0.0, 2.0, 2.0));
        let (e, _) = latency_stats(Vec::<u64>::new());
        assert_eq!(e, LatencyStats::default());
    }
}
