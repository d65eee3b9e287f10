//! What a probe knows about the power source its energy comes from (issue 37): how often the
//! source's value changes (its update period: declared, read from sysfs, or measured from the
//! readings of the idle window — never the read period), and whether the source moved at all in
//! the idle window. A slow source changes its value every `update_ns` while the recorder reads it
//! every few ms, so most of its readings repeat (or, for a counter, read 0 W): the baseline and
//! the idle profile must look at whole updates. To add a way of knowing the period, add a variant
//! to [`UpdateFrom`] and set it in [`resolve`].

use super::live::ZoneSeries;
use serde::{Deserialize, Serialize};

/// Where a source's update period comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpdateFrom {
    /// The operator's config (`[sources.update_periods]`).
    Declared,
    /// The driver's sysfs attribute (`update_interval`, `power*_average_interval`) or the source's
    /// known rate (RAPL 976 µs, a BMC's 1 s).
    Sysfs,
    /// Measured from the spacing of the readings' changes in the idle window.
    Measured,
    /// Every reading of the idle window changed: the period is at most the read period (a bound).
    AtMostReadPeriod,
    /// Not known: nothing declared, no attribute, and the readings did not change often enough.
    Unknown,
}

impl UpdateFrom {
    pub fn as_str(self) -> &'static str {
        match self {
            UpdateFrom::Declared => "declared",
            UpdateFrom::Sysfs => "sysfs",
            UpdateFrom::Measured => "measured",
            UpdateFrom::AtMostReadPeriod => "at_most_read_period",
            UpdateFrom::Unknown => "unknown",
        }
    }
}

/// The facts about the probe's source, as used by the analysis and written to `energy.jsonl`'s
/// idle line and the summary.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SourceFacts {
    /// The update period used (ns); 0 when unknown.
    pub update_ns: u64,
    pub update_from: UpdateFrom,
    /// Median time between reads in the idle window (ns).
    pub read_ns: u64,
    /// Read jitter: 1.4826·MAD of the time between reads in the idle window (ns).
    #[serde(default)]
    pub jitter_ns: u64,
    /// Readings in the idle window, and how many of them changed the value (a counter: moved).
    pub idle_readings: usize,
    pub idle_changes: usize,
    /// The source is an energy counter.
    #[serde(default)]
    pub counter: bool,
}

impl SourceFacts {
    /// "100.0 ms (measured; read every 5.0 ms, 10 of 200 idle readings changed)".
    pub fn describe(&self) -> String {
        let period = if self.update_ns > 0 { format!("{:.1} ms", self.update_ns as f64 / 1e6) } else { "unknown".into() };
        format!(
            "{period} ({}; read every {:.1} ms, {} of {} idle readings changed)",
            self.update_from.as_str(),
            self.read_ns as f64 / 1e6,
            self.idle_changes,
            self.idle_readings
        )
    }

    /// The counter never moved in the idle window: its baseline is unknown (a power reading that
    /// stays the same is a value, a counter that stays the same read 0 W).
    pub fn stuck(&self) -> bool {
        self.counter && self.idle_readings > 1 && self.idle_changes == 0
    }
}

/// Whether reading `i` changed the source's value: a counter reading that holds energy, or an
/// instantaneous reading that differs from the one before it.
fn changed(z: &ZoneSeries, i: usize) -> bool {
    if z.interval_ns.get(i).copied().unwrap_or(0) > 0 {
        return z.watts[i] > 0.0;
    }
    i > 0 && z.watts[i] != z.watts[i - 1]
}

/// The update period of `z` measured from its readings in `[from, to)`: the mean spacing of the
/// readings that changed the value, when fewer than all of them did (then each change is one
/// update, or a run of updates between two reads); no period when fewer than 3 changed.
pub fn measure(z: &ZoneSeries, from: i64, to: i64) -> Measured {
    let n = z.t.len().min(z.watts.len());
    let idx: Vec<usize> = (0..n).filter(|&i| z.t[i] >= from && z.t[i] < to).collect();
    let gaps: Vec<f64> = idx.windows(2).map(|w| (z.t[w[1]] - z.t[w[0]]) as f64).collect();
    let (read, jitter) = wattflip_energy::stats::median_and_sigma(&gaps).unwrap_or((0.0, 0.0));
    // The first reading of the window has no predecessor inside it (an instantaneous source).
    let moved: Vec<i64> = idx.iter().skip(usize::from(!z.is_counter())).filter(|&&i| changed(z, i)).map(|&i| z.t[i]).collect();
    let considered = idx.len().saturating_sub(usize::from(!z.is_counter()));
    let period = match moved.len() {
        k if k < 3 || k == considered => None,
        k => u64::try_from((moved[k - 1] - moved[0]) / (k as i64 - 1)).ok(),
    };
    Measured { period, readings: considered, changes: moved.len(), read_ns: read.max(0.0) as u64, jitter_ns: jitter.max(0.0) as u64 }
}

/// What [`measure`] found in the readings of a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Measured {
    /// Mean spacing of the changes (ns), when it could be measured.
    pub period: Option<u64>,
    pub readings: usize,
    pub changes: usize,
    pub read_ns: u64,
    pub jitter_ns: u64,
}

/// The update period to use for `z` with the idle window `[from, to)`: declared, else the
/// source's own (sysfs), else measured; with every reading changing, the read period as a bound.
pub fn resolve(z: &ZoneSeries, declared: Option<std::time::Duration>, from: i64, to: i64) -> SourceFacts {
    let Measured { period, readings, changes, read_ns, jitter_ns } = measure(z, from, to);
    let (update_ns, update_from) = match (declared, z.update_ns, period) {
        (Some(d), _, _) => (u64::try_from(d.as_nanos()).unwrap_or(u64::MAX), UpdateFrom::Declared),
        (None, u, _) if u > 0 => (u, UpdateFrom::Sysfs),
        (None, _, Some(m)) => (m, UpdateFrom::Measured),
        (None, _, None) if readings > 1 && changes == readings => (read_ns, UpdateFrom::AtMostReadPeriod),
        _ => (0, UpdateFrom::Unknown),
    };
    SourceFacts { update_ns, update_from, read_ns, jitter_ns, idle_readings: readings, idle_changes: changes, counter: z.is_counter() }
}

/// The readings of `[from, to)` re-binned into spans of at least `span_ns` (the update period): the
/// mean power over each span (energy over time for a counter, time-weighted for instantaneous
/// readings). Each span starts at a reading (a counter's ends at one that moved it, so it holds
/// whole updates); the last partial span is dropped. The idle profile
/// is computed over these, so a slow source's repeated (or 0 W) readings neither pull its median
/// nor make a "period" of its own update rhythm.
pub fn binned(z: &ZoneSeries, from: i64, to: i64, span_ns: i64) -> Option<wattflip_energy::PowerSeries> {
    use wattflip_energy::{UnixNanos, Watts};
    let n = z.t.len().min(z.watts.len());
    let idx: Vec<usize> = (0..n).filter(|&i| z.t[i] >= from && z.t[i] < to).collect();
    let (mut times, mut powers) = (Vec::new(), Vec::new());
    let (mut start, mut e, mut ns) = (None::<i64>, 0.0f64, 0i64);
    for w in idx.windows(2) {
        let (a, b) = (w[0], w[1]);
        // Reading b covers (t[a], t[b]]: a counter's mean over it, an instantaneous value held.
        let dt = z.t[b] - z.t[a];
        let watts = if z.interval_ns.get(b).copied().unwrap_or(0) > 0 { z.watts[b] } else { z.watts[a] };
        let s = *start.get_or_insert(z.t[a]);
        e += watts * dt as f64 * 1e-9;
        ns += dt;
        // A counter's bin closes at a reading that moved it: it then holds whole updates.
        if z.t[b] - s >= span_ns.max(1) && (!z.is_counter() || changed(z, b)) {
            times.push(UnixNanos(s));
            powers.push(Watts(e / (ns as f64 * 1e-9)));
            (start, e, ns) = (None, 0.0, 0);
        }
    }
    wattflip_energy::PowerSeries::new(times, powers).ok()
}
