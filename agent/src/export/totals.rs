//! The agent's running energy totals (issue 38): every window aggregate of a counter zone gets
//! `joules_total`, the zone's joules since the energy epoch's start (`joules_total_start_ns` of
//! the batch), stamped as the batch is stored ([`Totaled`] wraps the backlog), so the spooled
//! batch and every resend of it carry the same value and the collector's OTLP counter is a
//! function of the data, not of the collector's memory. A restarted agent continues each zone's
//! total, and keeps the epoch's start, from the newest batches its spool holds
//! ([`EnergyTotals::resume`]); without a spool (or with a new one) the epoch starts with the
//! process, a counter reset that Prometheus reads as one.

use crate::export::backlog::{Backlog, BacklogError, Count};
use std::collections::HashMap;
use wattflip_proto::v1;

/// How many of the spool's newest batches a restarted agent reads back for its zones' totals (a
/// zone absent from all of them starts again from 0 J).
pub const RESUME_BATCHES: usize = 256;

/// Each counter zone's joules since `start_ns`, by (source, zone).
#[derive(Debug, Clone, PartialEq)]
pub struct EnergyTotals {
    start_ns: i64,
    zones: HashMap<(String, String), f64>,
}

/// The window aggregates of counters: the samples that carry a total.
fn counted(s: &v1::PowerSample) -> Option<f64> {
    s.joules.filter(|j| !s.full_rate && j.is_finite() && *j >= 0.0)
}

impl EnergyTotals {
    /// A new epoch starting at `start_ns` (UTC ns): every zone at 0 J.
    pub fn new(start_ns: i64) -> EnergyTotals {
        EnergyTotals { start_ns, zones: HashMap::new() }
    }

    /// The totals the stored batches `newest_first` end with: the newest batch that carries
    /// totals gives the epoch's start, and each zone its newest total among the batches of that
    /// epoch. No such batch (a new spool, or one written by an agent without totals): a new epoch
    /// from `now_ns`.
    pub fn resume(newest_first: impl IntoIterator<Item = v1::Batch>, now_ns: i64) -> EnergyTotals {
        let mut t: Option<EnergyTotals> = None;
        for b in newest_first {
            if b.joules_total_start_ns == 0 || t.as_ref().is_some_and(|t| t.start_ns != b.joules_total_start_ns) {
                continue;
            }
            let t = t.get_or_insert_with(|| EnergyTotals::new(b.joules_total_start_ns));
            let mut samples: Vec<&v1::PowerSample> = b.power.iter().filter(|s| s.joules_total.is_some()).collect();
            samples.sort_by_key(|s| std::cmp::Reverse(s.time_ns));
            for s in samples {
                t.zones.entry((s.source.clone(), s.zone.clone())).or_insert(s.joules_total.unwrap_or(0.0));
            }
        }
        t.unwrap_or_else(|| EnergyTotals::new(now_ns))
    }

    /// The epoch's start (UTC ns).
    pub fn start_ns(&self) -> i64 {
        self.start_ns
    }

    /// Zones with a total.
    pub fn zones(&self) -> usize {
        self.zones.len()
    }

    /// Adds each counter window's joules to its zone's total, in time order, and writes the total
    /// into the sample (and the epoch's start into the batch when a sample got one).
    pub fn stamp(&mut self, b: &mut v1::Batch) {
        let mut order: Vec<usize> = (0..b.power.len()).filter(|&i| counted(&b.power[i]).is_some()).collect();
        if order.is_empty() {
            return;
        }
        order.sort_by_key(|&i| b.power[i].time_ns);
        for i in order {
            let s = &mut b.power[i];
            let total = self.zones.entry((s.source.clone(), s.zone.clone())).or_insert(0.0);
            *total += counted(s).unwrap_or(0.0);
            s.joules_total = Some(*total);
        }
        b.joules_total_start_ns = self.start_ns;
    }
}

/// A backlog whose batches get their energy totals as they are stored.
pub struct Totaled {
    inner: Box<dyn Backlog>,
    totals: EnergyTotals,
}

impl Totaled {
    pub fn new(inner: Box<dyn Backlog>, totals: EnergyTotals) -> Totaled {
        Totaled { inner, totals }
    }
}

impl Backlog for Totaled {
    fn push(&mut self, mut b: v1::Batch) -> Result<Count, BacklogError> {
        self.totals.stamp(&mut b);
        self.inner.push(b)
    }
    fn ack(&mut self, seq: u64) -> Count {
        self.inner.ack(seq)
    }
    fn next_after(&mut self, seq: u64) -> Option<v1::Batch> {
        self.inner.next_after(seq)
    }
    fn has_after(&self, seq: u64) -> bool {
        self.inner.has_after(seq)
    }
    fn remove(&mut self, seq: u64) {
        self.inner.remove(seq)
    }
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn maintain(&mut self) {
        self.inner.maintain()
    }
}

#[cfg(test)]
#[path = "totals_tests.rs"]
mod tests;
