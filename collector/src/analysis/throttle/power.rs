//! One drive's power samples in time order, kept only as far as the episode rules can still use
//! them (issue 40: keeping every sample of the retention was ~650 KiB per drive at 1 Hz).
//!
//! Samples newer than the settle line (the lateness bound behind the drive's newest observation)
//! are kept as they came: a temperature arriving within the bound can still move a period over
//! them. Behind that line the periods are known, and a sample matters only as
//! - one of the last [`POWER_BASELINE_SAMPLES`] samples outside any hot period before an onset or
//!   before the line (a baseline, now or for a period still to come), or
//! - a hot sample lower than every later settled sample of its period: the lowest one gives the
//!   largest drop and, for any baseline, the last sample low enough to be a drop is one of these
//!   (a later sample low enough would be lower). Judging a period again from its onset over what
//!   is kept therefore gives the same episode as over every sample.
//!
//! Everything else behind the line is dropped by [`PowerLog::prune`], which walks only from the
//! last onset before what changed, so a batch costs the few samples it settles. What this gives
//! up: a temperature arriving later than the lateness bound that moves a period in the settled
//! part (already not repaired, see the module above) judges it over the kept samples only.
//!
//! To keep more for a new rule, mark it kept in `prune`'s walk.

use super::thermal::ThermalLog;
use super::POWER_BASELINE_SAMPLES;
use std::collections::VecDeque;

/// A dropped sample during a walk (no real sample is at i64::MIN: the retention drops it first).
const DROPPED: i64 = i64::MIN;

#[derive(Debug)]
pub struct PowerLog {
    /// (time, watts), strictly increasing in time.
    samples: VecDeque<(i64, f64)>,
    /// The settle line of the last walk: behind it the samples are pruned.
    walked_to: i64,
    /// The last onset before `walked_to`: decisions before it no longer change.
    resume_at: i64,
    /// Something arrived behind `walked_to`: the next walk starts at the oldest sample.
    rewalk: bool,
}

impl Default for PowerLog {
    fn default() -> Self {
        PowerLog { samples: VecDeque::new(), walked_to: i64::MIN, resume_at: i64::MIN, rewalk: false }
    }
}

impl PowerLog {
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Stores a sample (a resend replaces it).
    pub fn insert(&mut self, t: i64, watts: f64) {
        let i = self.samples.partition_point(|s| s.0 < t);
        if let Some(s) = self.samples.get_mut(i).filter(|s| s.0 == t) {
            s.1 = watts;
            return;
        }
        if self.samples.len() == self.samples.capacity() {
            // Grow by an eighth, not double: a drive's window is a hundred-odd samples and
            // doubling would leave up to half of it unused in every drive.
            self.samples.reserve_exact((self.samples.len() / 8).max(4));
        }
        self.samples.insert(i, (t, watts));
        self.touch(t);
    }

    /// An observation at `t` arrived: one behind the pruned part may change its periods.
    pub fn touch(&mut self, t: i64) {
        if t < self.walked_to {
            self.rewalk = true;
        }
    }

    /// Periods may have changed anywhere (new thresholds).
    pub fn invalidate(&mut self) {
        self.rewalk = true;
    }

    /// The samples at or after `t`.
    pub fn from(&self, t: i64) -> impl Iterator<Item = &(i64, f64)> {
        self.samples.range(self.samples.partition_point(|s| s.0 < t)..)
    }

    /// The samples before `t`, in time order.
    pub fn before(&self, t: i64) -> impl DoubleEndedIterator<Item = &(i64, f64)> {
        self.samples.range(..self.samples.partition_point(|s| s.0 < t))
    }

    /// Drops what is older than `cutoff` or beyond `max` samples, keeping the newest baseline.
    pub fn evict(&mut self, cutoff: i64, max: usize) {
        while self.samples.len() > POWER_BASELINE_SAMPLES && (self.samples.len() > max || self.samples.front().is_some_and(|s| s.0 < cutoff)) {
            self.samples.pop_front();
        }
    }

    /// Drops the samples behind `line` that no judgement can use any more (see the module).
    pub fn prune(&mut self, line: i64, thermal: &ThermalLog) {
        if line <= self.walked_to && !self.rewalk {
            return;
        }
        let start = if self.rewalk { i64::MIN } else { self.resume_at };
        let (lo, hi) = (self.samples.partition_point(|s| s.0 < start), self.samples.partition_point(|s| s.0 < line));
        let mut periods = thermal.periods_from(start).take_while(|p| p.onset_ns < line).peekable();
        let mut current = None;
        let mut resume_at = start;
        // The cool samples kept since the last onset (a ring of indices), and where the current
        // hot period's samples begin.
        let mut cool = [0usize; POWER_BASELINE_SAMPLES];
        let (mut cool_len, mut cool_head) = (0usize, 0usize);
        let mut hot_from = lo;
        let mut dropped = 0usize;
        for i in lo..hi {
            let t = self.samples[i].0;
            while let Some(p) = periods.next_if(|p| p.onset_ns <= t) {
                (current, resume_at) = (Some(p.end_ns), p.onset_ns);
                (cool_len, cool_head, hot_from) = (0, 0, i);
            }
            let hot = current.is_some_and(|end: Option<i64>| end.is_none_or(|e| t < e));
            if hot {
                // Earlier hot samples of the period at or above this one can no longer be the
                // lowest nor the last drop.
                let w = self.samples[i].1;
                for j in (hot_from..i).rev() {
                    match self.samples[j] {
                        (DROPPED, _) => {}
                        (_, v) if v >= w => {
                            self.samples[j].0 = DROPPED;
                            dropped += 1;
                        }
                        _ => break,
                    }
                }
            } else if cool_len == POWER_BASELINE_SAMPLES {
                self.samples[cool[cool_head]].0 = DROPPED;
                dropped += 1;
                cool[cool_head] = i;
                cool_head = (cool_head + 1) % POWER_BASELINE_SAMPLES;
            } else {
                cool[(cool_head + cool_len) % POWER_BASELINE_SAMPLES] = i;
                cool_len += 1;
            }
        }
        // An onset between the last sample and the line still starts the next walk.
        for p in periods {
            resume_at = p.onset_ns;
        }
        if dropped > 0 {
            self.samples.retain(|s| s.0 != DROPPED);
        }
        (self.walked_to, self.resume_at, self.rewalk) = (line, resume_at, false);
    }
}
