//! Fast power sampling for `run` mode: a dedicated thread reads its power sources, each on its own
//! absolute monotonic grid (`sampling.power_interval` or the source's `[sampling.power_intervals]`
//! entry, 1 Hz up to 1 kHz, the RAPL update rate), and every `window` (the agent's sampling
//! interval) sends one aggregate per zone: mean, min and max watts, the window's energy from
//! counter sources, and the number of readings. Sending aggregates rather than every reading keeps
//! the wire and InfluxDB small (docs/sources-and-drives.md §4: "never stream raw samples") while the mean and the
//! energy stay exact. A failing source degrades only itself. `app::run` starts one thread per
//! source; a new way to aggregate a window is a field of the window aggregate built here.
//!
//! Honest at 1 kHz: each reading is stamped by the source around its own read (the midpoint of
//! the instants before and after, [`PowerSensor::read_timed`]), so a late tick does not shrink or
//! stretch an interval; and min/max are taken over spans of at least [`SPAN_UPDATES`] updates of
//! the source ([`PowerSensor::update_period`]: RAPL ≈ 976 µs), never over single readings: a
//! counter read every 1 ms that moves every 976 µs shows 0, 1 or 2 updates per reading, so
//! per-reading power swings between 0 and 2× the truth while the span's mean is within
//! 1/[`SPAN_UPDATES`] of it. Instantaneous sources (hwmon power, a BMC) hold their value between
//! updates, so their readings are their own spans. A source read faster than it updates is named in
//! the inventory ([`rate_note`]). A source found after start-up joins a running sampler
//! ([`run_joinable`]) and is read from then on exactly like one found at start.
use crate::clock::Clock;
use crate::sensors::{Flags, Notice, PowerReading, PowerSensor};
use hdrhistogram::Histogram;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use wattflip_proto::v1;

/// What the sampler measured about itself (for benchmarks and the run summary).
#[derive(Debug, Clone, Default)]
pub struct SamplerStats {
    pub reads: u64,
    pub errors: u64,
    pub windows: u64,
    /// Lateness of the grid ticks (actual − scheduled), for the jitter percentiles.
    pub lateness: Lateness,
}

/// Tick lateness in µs, in a histogram of fixed size allocated once: one entry per tick in a
/// `Vec` grew by 4 bytes a tick in a long-running agent (345 MB a day at 1 kHz) and allocated on
/// the hot path. Up to a minute (longer is clamped there), 3 significant digits, ≈ 140 KiB.
#[derive(Debug, Clone)]
pub struct Lateness(Option<Histogram<u64>>);

impl Default for Lateness {
    fn default() -> Self {
        // Fails only for invalid bounds, which these are not; `None` then records nothing.
        Lateness(Histogram::new_with_bounds(1, 60_000_000, 3).ok())
    }
}

impl Lateness {
    pub fn record(&mut self, us: u64) {
        if let Some(h) = &mut self.0 {
            h.saturating_record(us);
        }
    }

    /// The q-th percentile (0..=100) in µs; 0 when nothing was recorded.
    pub fn percentile(&self, q: f64) -> u64 {
        self.0.as_ref().map_or(0, |h| h.value_at_quantile(q / 100.0))
    }

    pub fn ticks(&self) -> u64 {
        self.0.as_ref().map_or(0, |h| h.len())
    }
}

/// Counter updates per min/max span: one update more or less moves a span's mean by ≤ 5 %.
pub const SPAN_UPDATES: u32 = 20;

/// What the inventory says about a source read every `period` that updates every `update`.
pub fn rate_note(period: Duration, update: Duration) -> Option<String> {
    (period < update).then(|| {
        format!(
            "read every {period:?} but the source updates every {update:?}: consecutive readings repeat; \
             mean and energy are exact, min/max are over spans of at least {SPAN_UPDATES} updates"
        )
    })
}

/// The shortest span min/max are taken over for a source updating every `update`.
pub fn span_ns(update: Duration) -> u64 {
    u64::try_from(update.saturating_mul(SPAN_UPDATES).as_nanos()).unwrap_or(u64::MAX)
}

#[derive(Default)]
struct Agg {
    n: u64,
    sum_w: f64,
    /// Min/max of the instantaneous readings of this window.
    min_max: Option<(f64, f64)>,
    joules: f64,
    interval_ns: u64,
    counter: bool,
    last_utc: i64,
    /// Counter sources: the window's completed spans (joules, ns), and the one still open. Spans
    /// partition the window's energy (the open one joins the last at the close), so the window's
    /// mean is a weighted mean of its spans and min ≤ mean ≤ max always holds.
    spans: Vec<(f64, u64)>,
    open: (f64, u64),
    /// Union of the readings' flags: one deactivated DCMI reading flags its window.
    flags: Flags,
}

impl Agg {
    fn with_room(spans: u64) -> Self {
        Agg { spans: Vec::with_capacity(usize::try_from(spans).unwrap_or(0).min(1 << 16)), ..Agg::default() }
    }

    /// Empty for the next window, keeping the spans' room.
    fn clear(&mut self) {
        let mut spans = std::mem::take(&mut self.spans);
        spans.clear();
        *self = Agg { spans, ..Agg::default() };
    }

    fn add(&mut self, r: &PowerReading, utc: i64, span_min_ns: u64) {
        let (watts, joules, interval_ns) = (r.watts.0, r.joules.map(|j| j.0), r.interval_ns);
        self.flags = self.flags.union(r.flags);
        self.n += 1;
        self.sum_w += watts;
        match joules {
            Some(j) => {
                self.counter = true;
                self.joules += j;
                self.interval_ns += interval_ns;
                self.open = (self.open.0 + j, self.open.1 + interval_ns);
                if self.open.1 > 0 && self.open.1 >= span_min_ns {
                    self.spans.push(std::mem::take(&mut self.open));
                }
            }
            None => {
                self.min_max = Some(match self.min_max {
                    None => (watts, watts),
                    Some((lo, hi)) => (lo.min(watts), hi.max(watts)),
                });
            }
        }
        self.last_utc = utc;
    }

    /// Min/max over the window's spans (counters) or readings (instantaneous); none for a counter
    /// window that completed no span (shorter than the source's span).
    fn extremes(&self) -> Option<(f64, f64)> {
        if !self.counter {
            return self.min_max;
        }
        let last = self.spans.len().checked_sub(1)?;
        let open = self.open;
        let spans = self.spans.iter().enumerate().map(|(i, &(j, ns))| if i == last { (j + open.0, ns + open.1) } else { (j, ns) });
        spans.filter(|s| s.1 > 0).map(|s| s.0 / (s.1 as f64 / 1e9)).fold(None, |acc, w| {
            Some(match acc {
                None => (w, w),
                Some((lo, hi)) => (f64::min(lo, w), f64::max(hi, w)),
            })
        })
    }

    fn sample(&self, d: &v1::PowerSource) -> v1::PowerSample {
        // Counter sources: the window's mean power is its energy over its time, exactly.
        let (watts, joules, interval_ns) = if self.counter && self.interval_ns > 0 {
            (self.joules / (self.interval_ns as f64 / 1e9), Some(self.joules), self.interval_ns)
        } else {
            (self.sum_w / self.n as f64, None, 0)
        };
        // Min/max only when the window aggregates several readings.
        let min_max = self.extremes().filter(|_| self.n > 1);
        v1::PowerSample {
            time_ns: self.last_utc,
            source: d.source.clone(),
            zone: d.zone.clone(),
            scope: d.scope.clone(),
            method: d.method,
            watts: Some(watts),
            joules,
            interval_ns: i64::try_from(interval_ns).unwrap_or(i64::MAX),
            min_watts: min_max.map(|m| m.0),
            max_watts: min_max.map(|m| m.1),
            readings: u32::try_from(self.n).unwrap_or(u32::MAX),
            full_rate: false,
            flags: self.flags.words(),
            // Stamped when the batch is stored (export::totals), in sequence order.
            joules_total: None,
        }
    }
}

/// The event for a source's change of state.
pub fn notice_event(n: Notice, zone: &str, time_ns: i64) -> v1::Event {
    crate::events::event(time_ns, n.kind, n.severity, zone, n.message)
}

/// The sampler's time: monotonic ns since the sampler started (with the matching UTC ns), and a
/// sleep until a monotonic instant. The agent uses [`RealTime`]; tests use a virtual time base so
/// reading counts per window are exact rather than subject to the scheduler.
pub trait Timebase {
    fn now(&mut self) -> (u64, i64);
    fn sleep_until(&mut self, mono_ns: u64);
}

/// Wall time: the agent's [`Clock`], offset so the grid starts at the sampler's first tick.
pub struct RealTime {
    clock: Clock,
    start_ns: u64,
}

impl RealTime {
    pub fn new(clock: Clock) -> Self {
        RealTime { clock, start_ns: clock.now().0 }
    }

    /// Grids and windows counted from the monotonic instant `start_ns` (of `clock`), so samplers
    /// started at different times share one window grid.
    pub fn starting_at(clock: Clock, start_ns: u64) -> Self {
        RealTime { clock, start_ns }
    }
}

impl Timebase for RealTime {
    fn now(&mut self) -> (u64, i64) {
        let (mono, utc) = self.clock.now();
        (mono.saturating_sub(self.start_ns), utc)
    }

    fn sleep_until(&mut self, mono_ns: u64) {
        let now = self.now().0;
        if mono_ns > now {
            std::thread::sleep(Duration::from_nanos(mono_ns - now));
        }
    }
}

/// Runs until `stop`, reading every sensor every `period` on one absolute grid; every window,
/// `emit` gets a batch with one aggregate per zone (and events).
pub fn run(
    sensors: Vec<Box<dyn PowerSensor>>,
    period: Duration,
    window: Duration,
    clock: Clock,
    stop: Arc<AtomicBool>,
    emit: impl FnMut(v1::Batch) -> bool,
) -> SamplerStats {
    let sensors = sensors.into_iter().map(|s| (s, period)).collect();
    run_on(sensors, window, &mut RealTime::new(clock), stop, emit)
}

/// A sensor joining a running sampler (a source rediscovered after start-up), with its period.
pub type Joining = (Box<dyn PowerSensor>, Duration);

/// Like [`run`], but each sensor has its own period and its own grid (0, p, 2p... from the start),
/// on the time base `time`. Windows are [k·window, (k+1)·window): a reading due exactly at a
/// window's end belongs to the next window.
pub fn run_on(
    sensors: Vec<(Box<dyn PowerSensor>, Duration)>,
    window: Duration,
    time: &mut dyn Timebase,
    stop: Arc<AtomicBool>,
    emit: impl FnMut(v1::Batch) -> bool,
) -> SamplerStats {
    let (_none, joins) = std::sync::mpsc::channel();
    run_joinable(sensors, window, time, stop, &joins, emit)
}

/// One sensor of a sampler: its grid, its window aggregate and its last error.
struct Slot {
    sensor: Box<dyn PowerSensor>,
    desc: v1::PowerSource,
    period_ns: u64,
    span_min: u64,
    /// Next due instant on the sensor's own grid.
    due: u64,
    agg: Agg,
    last_error: Option<String>,
}

impl Slot {
    /// A sensor on the grid of its period, read at once (due at the grid instant at or before `now`,
    /// so a sensor joining at a window's close reads the whole next window like one there from the
    /// start, and a sampler started late records no lateness for the instants before it began); its
    /// aggregate has room for every span a window of `window_ns` can hold, kept across
    /// windows, so nothing is allocated per tick.
    fn new(sensor: Box<dyn PowerSensor>, period: Duration, now: u64, window_ns: u64) -> Slot {
        let period_ns = u64::try_from(period.as_nanos()).unwrap_or(u64::MAX).max(1);
        let (desc, span_min) = (sensor.describe(), span_ns(sensor.update_period()));
        let agg = Agg::with_room(window_ns / span_min.max(1) + 2);
        Slot { sensor, desc, period_ns, span_min, due: (now / period_ns).saturating_mul(period_ns), agg, last_error: None }
    }

    /// Reads the sensor (it is due at `tick`, the tick's monotonic and UTC instants) into its
    /// window aggregate; events for its notices and for each distinct error.
    fn read(&mut self, tick: (u64, i64), time: &mut dyn Timebase, events: &mut Vec<v1::Event>, stats: &mut SamplerStats) {
        // A source that fell behind (a slow BMC command, a stalled thread) skips the ticks it
        // missed rather than reading the same value several times in a row to catch up.
        self.due = (tick.0 / self.period_ns + 1).saturating_mul(self.period_ns);
        let (utc, result) = timed_read(self.sensor.as_mut(), time, tick);
        stats.reads += 1;
        events.extend(self.sensor.take_notices().into_iter().map(|n| notice_event(n, &self.desc.zone, utc)));
        match result {
            Ok(Some(r)) => {
                self.last_error = None;
                self.agg.add(&r, utc, self.span_min);
            }
            Ok(None) => {}
            Err(e) => {
                stats.errors += 1;
                let msg = e.to_string();
                if self.last_error.as_ref() != Some(&msg) {
                    tracing::warn!(zone = %self.desc.zone, "{msg}");
                    events.push(crate::events::event(utc, "sensor_error", v1::Severity::Warning, &self.desc.zone, msg.clone()));
                    self.last_error = Some(msg);
                }
            }
        }
    }
}

/// Like [`run_on`], and sensors sent on `joins` join while it runs (looked for on every wake-up,
/// at least once a window): each on its own grid from the instant it joins, in the same windows
/// and batches as the others. This is how a source rediscovered after start-up gets the rate of
/// one found at start.
pub fn run_joinable(
    sensors: Vec<(Box<dyn PowerSensor>, Duration)>,
    window: Duration,
    time: &mut dyn Timebase,
    stop: Arc<AtomicBool>,
    joins: &std::sync::mpsc::Receiver<Joining>,
    mut emit: impl FnMut(v1::Batch) -> bool,
) -> SamplerStats {
    let window_ns = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX).max(1);
    // A sampler started after its time base's origin (a source's first zone found after start-up)
    // begins in the window that holds its start.
    let start = time.now().0;
    let mut slots: Vec<Slot> = sensors.into_iter().map(|(s, p)| Slot::new(s, p, start, window_ns)).collect();
    let mut events = Vec::new();
    let mut stats = SamplerStats::default();
    let mut window_end = (start / window_ns).saturating_add(1).saturating_mul(window_ns);
    while !stop.load(Ordering::Relaxed) {
        let (now, utc_now) = time.now();
        // The window closes before the readings due now, which belong to the next one.
        if now >= window_end {
            let mut b = v1::Batch { events: std::mem::take(&mut events), ..Default::default() };
            for slot in slots.iter_mut() {
                if slot.agg.n > 0 {
                    b.power.push(slot.agg.sample(&slot.desc));
                }
                slot.agg.clear();
            }
            stats.windows += 1;
            while window_end <= now {
                window_end = window_end.saturating_add(window_ns);
            }
            if (!b.power.is_empty() || !b.events.is_empty()) && !emit(b) {
                break;
            }
        }
        // An empty channel costs a lock-free check and allocates nothing.
        slots.extend(joins.try_iter().map(|(s, p)| Slot::new(s, p, now, window_ns)));
        let earliest = slots.iter().map(|s| s.due).filter(|&t| t <= now).min();
        if let Some(scheduled) = earliest {
            stats.lateness.record((now - scheduled) / 1000);
        }
        for slot in slots.iter_mut().filter(|s| s.due <= now) {
            slot.read((now, utc_now), time, &mut events, &mut stats);
        }
        // Wake for the next reading or the window's end, whichever comes first, so a window of
        // slow sources is sent on time.
        let next = slots.iter().map(|s| s.due).min().unwrap_or(window_end).min(window_end);
        time.sleep_until(next);
    }
    stats
}

/// Reads `s` at its own instant: the UTC of that instant (on the monotonic clock, from the tick's
/// (monotonic, UTC) pair `base`, so no extra clock read per channel) and the reading.
fn timed_read(
    s: &mut dyn PowerSensor,
    time: &mut dyn Timebase,
    base: (u64, i64),
) -> (i64, Result<Option<crate::sensors::PowerReading>, crate::sensors::SensorError>) {
    let (mono0, utc0) = base;
    let (at, result) = s.read_timed(&mut || time.now().0);
    (utc0.saturating_add(i64::try_from(at.saturating_sub(mono0)).unwrap_or(i64::MAX)), result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wattflip_proto::units::{Joules, Watts};

    /// A counter reading without flags.
    fn counter(watts: f64, joules: f64, interval_ns: u64) -> PowerReading {
        PowerReading { watts: Watts(watts), joules: Some(Joules(joules)), interval_ns, flags: Flags::NONE }
    }

    /// Energy that arrives in the window's last, incomplete span still counts in its min/max: the
    /// open span joins the last complete one, so min ≤ mean ≤ max holds (a counter that wrapped
    /// 2 ms before the window closed).
    #[test]
    fn a_trailing_partial_span_joins_the_last_one() {
        let mut a = Agg::default();
        for k in 0..10 {
            a.add(&counter(0.0, 0.0, 2_000_000), k, 20_000_000);
        }
        a.add(&counter(250.0, 0.5, 2_000_000), 10, 20_000_000);
        let s = a.sample(&v1::PowerSource::default());
        assert_eq!(s.joules, Some(0.5));
        assert_eq!(s.interval_ns, 22_000_000);
        let mean = 0.5 / 0.022;
        assert_eq!((s.watts, s.min_watts, s.max_watts), (Some(mean), Some(mean), Some(mean)));
        // Too short a window for one span: no min/max rather than per-reading extremes.
        let mut b = Agg::default();
        b.add(&counter(0.0, 0.0, 2_000_000), 0, 20_000_000);
        b.add(&counter(250.0, 0.5, 2_000_000), 1, 20_000_000);
        let s = b.sample(&v1::PowerSource::default());
        assert_eq!((s.min_watts, s.max_watts, s.readings), (None, None, 2));
    }

    /// A window holding one deactivated DCMI reading among activated ones is flagged as a whole:
    /// its mean includes that reading's watts.
    #[test]
    fn a_window_carries_the_union_of_its_readings_flags() {
        let bmc = |w: f64, flags: Flags| PowerReading { watts: Watts(w), joules: None, interval_ns: 0, flags };
        let mut a = Agg::default();
        a.add(&bmc(197.0, Flags::NONE), 1, 0);
        a.add(&bmc(319.0, Flags::DEACTIVATED), 2, 0);
        a.add(&bmc(197.0, Flags::NONE), 3, 0);
        let s = a.sample(&v1::PowerSource::default());
        assert_eq!((s.watts, s.min_watts, s.max_watts, s.flags), (Some(237.66666666666666), Some(197.0), Some(319.0), vec!["deactivated".to_string()]));
        let mut b = Agg::default();
        b.add(&bmc(197.0, Flags::NONE), 1, 0);
        assert_eq!(b.sample(&v1::PowerSource::default()).flags, Vec::<String>::new());
    }
}
