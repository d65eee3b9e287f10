//! Fast power sampling for `run` mode: a dedicated thread reads its power sources, each on its own
//! absolute monotonic grid (`sampling.power_interval` or the source's `[sampling.power_intervals]`
//! entry, 1 Hz up to 1 kHz, the RAPL update rate), and every `window` (the agent's sampling
//! interval) sends one aggregate per zone: mean, min and max watts, the window's energy from
//! counter sources, and the number of readings. Sending aggregates rather than every reading keeps
//! the wire and InfluxDB small (hardware.md §4: "never stream raw samples") while the mean and the
//! energy stay exact. A failing source degrades only itself. `app::run` starts one thread per
//! source; a new way to aggregate a window is a field of the window aggregate built here.
use crate::clock::Clock;
use crate::sensors::PowerSensor;
use std::collections::HashMap;
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
    /// Lateness of each grid tick (actual − scheduled), in µs, for the jitter percentiles.
    pub lateness_us: Vec<u32>,
}

#[derive(Default)]
struct Agg {
    n: u64,
    sum_w: f64,
    min_w: f64,
    max_w: f64,
    joules: f64,
    interval_ns: u64,
    counter: bool,
    last_utc: i64,
}

impl Agg {
    fn add(&mut self, watts: f64, joules: Option<f64>, interval_ns: u64, utc: i64) {
        if self.n == 0 {
            self.min_w = watts;
            self.max_w = watts;
        }
        self.n += 1;
        self.sum_w += watts;
        self.min_w = self.min_w.min(watts);
        self.max_w = self.max_w.max(watts);
        if let Some(j) = joules {
            self.counter = true;
            self.joules += j;
            self.interval_ns += interval_ns;
        }
        self.last_utc = utc;
    }

    fn sample(&self, d: &v1::PowerSource) -> v1::PowerSample {
        // Counter sources: the window's mean power is its energy over its time, exactly.
        let (watts, joules, interval_ns) = if self.counter && self.interval_ns > 0 {
            (self.joules / (self.interval_ns as f64 / 1e9), Some(self.joules), self.interval_ns)
        } else {
            (self.sum_w / self.n as f64, None, 0)
        };
        v1::PowerSample {
            time_ns: self.last_utc,
            source: d.source.clone(),
            zone: d.zone.clone(),
            scope: d.scope.clone(),
            method: d.method,
            watts: Some(watts),
            joules,
            interval_ns: i64::try_from(interval_ns).unwrap_or(i64::MAX),
            min_watts: (self.n > 1).then_some(self.min_w),
            max_watts: (self.n > 1).then_some(self.max_w),
            readings: u32::try_from(self.n).unwrap_or(u32::MAX),
            full_rate: false,
        }
    }
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

/// Like [`run`], but each sensor has its own period and its own grid (0, p, 2p... from the start),
/// on the time base `time`. Windows are [k·window, (k+1)·window): a reading due exactly at a
/// window's end belongs to the next window.
pub fn run_on(
    mut sensors: Vec<(Box<dyn PowerSensor>, Duration)>,
    window: Duration,
    time: &mut dyn Timebase,
    stop: Arc<AtomicBool>,
    mut emit: impl FnMut(v1::Batch) -> bool,
) -> SamplerStats {
    let descs: Vec<v1::PowerSource> = sensors.iter().map(|(s, _)| s.describe()).collect();
    let periods: Vec<u64> = sensors.iter().map(|(_, p)| u64::try_from(p.as_nanos()).unwrap_or(u64::MAX).max(1)).collect();
    let window_ns = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX).max(1);
    let mut aggs: Vec<Agg> = descs.iter().map(|_| Agg::default()).collect();
    let mut last_error: HashMap<usize, String> = HashMap::new();
    let mut events = Vec::new();
    let mut stats = SamplerStats::default();
    // Next due instant of each sensor on its own grid.
    let mut due: Vec<u64> = vec![0; sensors.len()];
    let mut window_end = window_ns;
    while !stop.load(Ordering::Relaxed) {
        let (now, _) = time.now();
        // The window closes before the readings due now, which belong to the next one.
        if now >= window_end {
            let mut b = v1::Batch { events: std::mem::take(&mut events), ..Default::default() };
            for (agg, d) in aggs.iter_mut().zip(&descs) {
                if agg.n > 0 {
                    b.power.push(agg.sample(d));
                }
                *agg = Agg::default();
            }
            stats.windows += 1;
            while window_end <= now {
                window_end = window_end.saturating_add(window_ns);
            }
            if (!b.power.is_empty() || !b.events.is_empty()) && !emit(b) {
                break;
            }
        }
        let earliest = due.iter().copied().filter(|&t| t <= now).min();
        if let Some(scheduled) = earliest {
            stats.lateness_us.push(u32::try_from((now - scheduled) / 1000).unwrap_or(u32::MAX));
        }
        for (i, (s, _)) in sensors.iter_mut().enumerate() {
            if due[i] > now {
                continue;
            }
            // A source that fell behind (a slow BMC command, a stalled thread) skips the ticks it
            // missed rather than reading the same value several times in a row to catch up.
            due[i] = (now / periods[i] + 1).saturating_mul(periods[i]);
            let (mono, utc) = time.now();
            stats.reads += 1;
            match s.read(mono) {
                Ok(Some(r)) => {
                    last_error.remove(&i);
                    aggs[i].add(r.watts.0, r.joules.map(|j| j.0), r.interval_ns, utc);
                }
                Ok(None) => {}
                Err(e) => {
                    stats.errors += 1;
                    let msg = e.to_string();
                    if last_error.get(&i) != Some(&msg) {
                        tracing::warn!(zone = %descs[i].zone, "{msg}");
                        events.push(v1::Event {
                            time_ns: utc,
                            kind: "sensor_error".into(),
                            severity: v1::Severity::Warning as i32,
                            device: descs[i].zone.clone(),
                            message: msg.clone(),
                            attributes: Default::default(),
                        });
                        last_error.insert(i, msg);
                    }
                }
            }
        }
        // Wake for the next reading or the window's end, whichever comes first, so a window of
        // slow sources is sent on time.
        let next = due.iter().copied().min().unwrap_or(window_end).min(window_end);
        time.sleep_until(next);
    }
    stats
}

/// p-th percentile (0..=100) of the lateness samples, in µs.
pub fn percentile_us(v: &[u32], p: f64) -> u32 {
    if v.is_empty() {
        return 0;
    }
    let mut s = v.to_vec();
    s.sort_unstable();
    let idx = ((p / 100.0) * (s.len() - 1) as f64).round() as usize;
    s[idx.min(s.len() - 1)]
}
