//! A validated power series (strictly increasing UTC timestamps, finite watts) from any source: shunt
//! trace windows, hwmon/INA2xx polls, RAPL deltas. Each sample holds its power until the next one; the
//! last holds for the interval before it. A sample made from a trace window also carries that
//! window's exact energy and its gap samples (NaN/∞, which carry no energy), so per-run energy and
//! the trace total treat gaps alike (`docs/energy-method.md` §1). Add constructors here for new
//! sources; analyses take `&PowerSeries` only.

use crate::error::AnalysisError;
use crate::trace::{PowerWindow, TraceSummary};
use crate::units::{Joules, Nanos, UnixNanos, Watts};

/// Timestamps and powers, same length, timestamps strictly increasing, powers finite.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PowerSeries {
    t: Vec<UnixNanos>,
    p: Vec<Watts>,
    /// Per sample: its energy in J (gaps excluded); empty means `p·Δ` (no gaps).
    e: Vec<f64>,
    /// Per sample: gap samples inside its hold, and the time they cover (ns); empty means none.
    gaps: Vec<u64>,
    gap_ns: Vec<u64>,
    /// The powers are averages of quantised readings (a counter's), the energies exact
    /// ([`with_energies`](Self::with_energies)).
    averaged: bool,
    /// End of the last sample's hold when known (readings that each measured an interval);
    /// otherwise the last sample holds for the interval before it.
    end: Option<i64>,
}

impl PowerSeries {
    /// Build from parallel vectors, checking order and finiteness.
    pub fn new(t: Vec<UnixNanos>, p: Vec<Watts>) -> Result<Self, AnalysisError> {
        if t.len() != p.len() {
            return Err(AnalysisError::LengthMismatch { len: t.len(), powers: p.len() });
        }
        if t.is_empty() {
            return Err(AnalysisError::EmptySeries);
        }
        for i in 0..t.len() {
            if !p[i].0.is_finite() {
                return Err(AnalysisError::NotFinite { index: i, watts: p[i].0 });
            }
            if i > 0 && t[i] <= t[i - 1] {
                return Err(AnalysisError::NotIncreasing { index: i, t_ns: t[i].0, previous_ns: t[i - 1].0 });
            }
        }
        Ok(PowerSeries { t, p, e: Vec::new(), gaps: Vec::new(), gap_ns: Vec::new(), averaged: false, end: None })
    }

    /// Build from `(time, power)` pairs.
    pub fn from_samples(samples: impl IntoIterator<Item = (UnixNanos, Watts)>) -> Result<Self, AnalysisError> {
        let (t, p) = samples.into_iter().unzip();
        PowerSeries::new(t, p)
    }

    /// The same series with the last sample's hold ending at `end` (a reading that measured the
    /// interval up to its read instant); `None` when `end` is not after the last sample.
    pub fn ending_at(mut self, end: UnixNanos) -> Option<Self> {
        let last = self.t.last()?;
        if end <= *last {
            return None;
        }
        self.end = Some(end.0);
        Some(self)
    }

    /// The same series with each sample's energy given (J; a counter reading's exact energy),
    /// while its power stays the level the detector compares (`None` on a length mismatch or a
    /// non-finite energy).
    pub fn with_energies(mut self, energy: Vec<f64>) -> Option<Self> {
        if energy.len() != self.t.len() || energy.iter().any(|e| !e.is_finite()) {
            return None;
        }
        self.e = energy;
        self.averaged = true;
        Some(self)
    }

    /// The powers are averaged levels and the energies exact: a baseline takes the energy over
    /// the time (a median of quantised averages is biased by up to one counter step).
    pub fn levels_averaged(&self) -> bool {
        self.averaged
    }

    /// One sample per window (its mean power at the window start), anchored at `start`. Each sample
    /// keeps its window's exact energy and gap count.
    pub fn from_windows(start: UnixNanos, windows: &[PowerWindow]) -> Result<Self, AnalysisError> {
        Self::from_windows_of(start, windows, None)
    }

    /// Like [`from_windows`](Self::from_windows), knowing the window length: a stretch of windows
    /// that were all gap (absent from `windows`) becomes gap time and gap samples of the window
    /// before it, counted at that window's sample period.
    pub fn from_windows_of(start: UnixNanos, windows: &[PowerWindow], window: Option<Nanos>) -> Result<Self, AnalysisError> {
        let mut s = PowerSeries::from_samples(windows.iter().map(|w| (start.plus(w.offset), w.mean)))?;
        let n = windows.len();
        s.e = windows.iter().map(|w| w.energy.0).collect();
        s.gaps = Vec::with_capacity(n);
        s.gap_ns = Vec::with_capacity(n);
        for (i, w) in windows.iter().enumerate() {
            // Valid time of the window: energy / mean for both integrators (Σ P·Δ / mean P).
            let valid = if w.mean.0 != 0.0 && w.energy.0.is_finite() {
                w.energy.0 / w.mean.0 * 1e9
            } else {
                w.span.0 as f64 * w.samples as f64 / (w.samples + w.gap_samples).max(1) as f64
            };
            let period = if w.samples > 0 { valid / w.samples as f64 } else { 0.0 };
            let missing_ns = match (window, windows.get(i + 1)) {
                (Some(len), Some(next)) => next.offset.0.saturating_sub(w.offset.0 + len.0) as f64,
                _ => 0.0,
            };
            let missing = if period > 0.0 { (missing_ns / period).round() as u64 } else { 0 };
            s.gaps.push(w.gap_samples + missing);
            s.gap_ns.push((period * w.gap_samples as f64 + missing_ns).round() as u64);
        }
        Ok(s)
    }

    /// The summary's windows as a series; a trace without a UTC start is anchored at 0.
    pub fn from_trace(summary: &TraceSummary) -> Result<Self, AnalysisError> {
        PowerSeries::from_windows_of(summary.start.unwrap_or(UnixNanos(0)), &summary.windows, Some(summary.window))
    }

    pub fn len(&self) -> usize {
        self.t.len()
    }
    pub fn is_empty(&self) -> bool {
        self.t.is_empty()
    }
    pub fn times(&self) -> &[UnixNanos] {
        &self.t
    }
    pub fn powers(&self) -> &[Watts] {
        &self.p
    }
    pub fn first_time(&self) -> UnixNanos {
        self.t.first().copied().unwrap_or_default()
    }
    /// End of the covered time: the last timestamp plus the last interval.
    pub fn end_time(&self) -> UnixNanos {
        let n = self.t.len();
        if let (Some(end), true) = (self.end, n > 0) {
            return UnixNanos(end);
        }
        match n {
            0 => UnixNanos(0),
            1 => self.t[0],
            _ => UnixNanos(self.t[n - 1].0 + (self.t[n - 1].0 - self.t[n - 2].0)),
        }
    }

    /// Hold duration of sample `i` in ns.
    pub(crate) fn dt_ns(&self, i: usize) -> i64 {
        let n = self.t.len();
        if i + 1 < n {
            self.t[i + 1].0 - self.t[i].0
        } else if let Some(end) = self.end.filter(|_| i + 1 == n) {
            end - self.t[i].0
        } else if n >= 2 {
            self.t[n - 1].0 - self.t[n - 2].0
        } else {
            0
        }
    }

    /// Median spacing between samples (0 for a single sample).
    pub fn typical_period(&self) -> Nanos {
        let d: Vec<f64> = self.t.windows(2).map(|w| (w[1].0 - w[0].0) as f64).collect();
        Nanos(crate::stats::median(&d).unwrap_or(0.0) as u64)
    }

    /// Index of the first sample with `t >= at` (len if none).
    pub fn index_at_or_after(&self, at: UnixNanos) -> usize {
        self.t.partition_point(|x| *x < at)
    }

    /// Energy of sample `i`'s hold in J (gap time carries none).
    pub fn sample_energy(&self, i: usize) -> f64 {
        match self.e.get(i) {
            Some(e) => *e,
            None => self.p[i].0 * self.dt_ns(i) as f64 * 1e-9,
        }
    }

    /// Sample `i`'s own mean power: its energy over its hold. A counter's samples carry levels
    /// averaged over several updates for the detector ([`PowerSeries::levels_averaged`]): the
    /// part of a sample cut off at a run's edge is worth its own power, not that average.
    /// Elsewhere the sample's power.
    pub fn own_power(&self, i: usize) -> Watts {
        let dt = self.dt_ns(i);
        if self.averaged && dt > 0 {
            Watts(self.sample_energy(i) / (dt as f64 * 1e-9))
        } else {
            self.p[i]
        }
    }

    /// Gap samples inside sample `i`'s hold.
    pub fn sample_gaps(&self, i: usize) -> u64 {
        self.gaps.get(i).copied().unwrap_or(0)
    }

    /// Time of sample `i`'s hold covered by gaps (ns).
    pub fn sample_gap_ns(&self, i: usize) -> u64 {
        self.gap_ns.get(i).copied().unwrap_or(0)
    }

    /// Energy of samples with index in `[from, to)`; with `minus`, of `P − minus` over their valid
    /// (non-gap) time (may be negative).
    pub(crate) fn energy_idx(&self, from: usize, to: usize, minus: Watts) -> Joules {
        let mut j = 0.0;
        for i in from..to.min(self.len()) {
            let valid = (self.dt_ns(i) - self.sample_gap_ns(i) as i64).max(0) as f64;
            j += self.sample_energy(i) - minus.0 * valid * 1e-9;
        }
        Joules(j)
    }

    /// Energy of the samples whose timestamps lie in `[from, to)`.
    pub fn energy_between(&self, from: UnixNanos, to: UnixNanos) -> Joules {
        self.energy_idx(self.index_at_or_after(from), self.index_at_or_after(to), Watts(0.0))
    }

    /// Powers of the samples whose timestamps lie in `[from, to)`.
    pub fn powers_between(&self, from: UnixNanos, to: UnixNanos) -> &[Watts] {
        let a = self.index_at_or_after(from);
        let b = self.index_at_or_after(to).max(a);
        &self.p[a..b]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation() {
        assert_eq!(PowerSeries::new(vec![], vec![]), Err(AnalysisError::EmptySeries));
        assert!(matches!(
            PowerSeries::from_samples([(UnixNanos(1), Watts(1.0)), (UnixNanos(1), Watts(1.0))]),
            Err(AnalysisError::NotIncreasing { index: 1, .. })
        ));
        assert!(matches!(PowerSeries::from_samples([(UnixNanos(1), Watts(f64::NAN))]), Err(AnalysisError::NotFinite { index: 0, .. })));
    }

    #[test]
    fn constant_two_watts_for_one_and_a_half_seconds() {
        let s = PowerSeries::from_samples((0..1500).map(|i| (UnixNanos(i * 1_000_000), Watts(2.0)))).unwrap_or_default();
        let e = s.energy_between(UnixNanos(0), UnixNanos(i64::MAX));
        assert!((e.0 - 3.0).abs() < 3.0 * 1e-12, "{e}");
        assert_eq!(s.end_time(), UnixNanos(1_500_000_000));
        assert_eq!(s.typical_period(), Nanos(1_000_000));
    }
}
