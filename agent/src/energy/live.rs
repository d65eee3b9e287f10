//! Records power while a probe runs: a dedicated thread reads the given sensors every `period`
//! (RAPL updates about every 1 ms, so 1–10 ms is useful) on the monotonic clock mapped to UTC, the
//! same time base as the probe's run timestamps. Sleeping between reads keeps the recorder's own
//! CPU cost, and so its footprint in a RAPL trace, small. Also chooses the zone a probe's energy
//! is attributed to: one that includes the drive, never a CPU (RAPL) zone unless the operator
//! names it, because RAPL does not see the drive (docs/uflip-method.md §13).

use crate::clock::Clock;
use crate::sensors::PowerSensor;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wattflip_energy::{PowerSeries, UnixNanos, Watts};

/// Samples of one power zone.
#[derive(Debug, Clone, Default)]
pub struct ZoneSeries {
    pub source: String,
    pub zone: String,
    pub scope: String,
    /// `v1::Method` of the source (measured or estimated), for the streamed full-rate points.
    pub method: i32,
    pub t: Vec<i64>,
    pub watts: Vec<f64>,
    /// Per reading: the counter interval its watts are the mean of (0 for instantaneous sources).
    pub interval_ns: Vec<u64>,
    /// Per reading: its quality flags (a deactivated DCMI reading), sent on its full-rate point.
    pub flags: Vec<crate::sensors::Flags>,
    /// Read errors while recording (the zone keeps going).
    pub errors: u64,
    /// How often the source's value changes (`PowerSensor::update_period`; RAPL 976 µs), 0 when
    /// unknown: a counter's readings step by whole updates, so its detection levels are averaged
    /// over [`LEVEL_SPAN_UPDATES`] of them ([`ZoneSeries::series`]).
    pub update_ns: u64,
    /// Stalls of the recorder while recording this zone: (UTC ns of the late read, ns since the
    /// read before it), each longer than [`STALL_PERIODS`] reading periods.
    pub stalls: Vec<(i64, u64)>,
    /// The file (or command) the zone is read from (`PowerSource::path`): `power*_average` is a
    /// moving average (issue 37's uncertainty).
    pub path: String,
    /// The hwmon driver (`name` beside the file), the source's name otherwise: the driver table's
    /// accuracy class is looked up with it.
    pub driver: String,
}

impl ZoneSeries {
    pub fn label(&self) -> String {
        format!("{}:{}", self.source, self.zone)
    }

    /// The readings at their read instants, as streamed (`power` points): the idle profile counts
    /// and characterises these, so its `samples` are the points of its window.
    pub fn readings_series(&self) -> Option<PowerSeries> {
        PowerSeries::new(self.t.iter().map(|&t| UnixNanos(t)).collect(), self.watts.iter().map(|&w| Watts(w)).collect()).ok()
    }

    /// The zone's readings come from an energy counter (each measured an interval).
    pub fn is_counter(&self) -> bool {
        self.interval_ns.iter().any(|&iv| iv > 0)
    }

    /// Span over which the detection levels of this zone are averaged (ns; 0: a reading's own):
    /// [`LEVEL_SPAN_UPDATES`] updates of a counter whose update period is known.
    pub fn level_span_ns(&self) -> i64 {
        self.counter_update_ns().saturating_mul(LEVEL_SPAN_UPDATES)
    }

    /// The update period of a counter zone (ns; 0 for an instantaneous source or when unknown).
    pub(crate) fn counter_update_ns(&self) -> i64 {
        if self.is_counter() {
            i64::try_from(self.update_ns).unwrap_or(0)
        } else {
            0
        }
    }

    /// The readings as a power series, each placed over the time it measured
    /// (`docs/energy-method.md` §1, "Live readings"): a counter reading (its `interval_ns` > 0) is
    /// the mean over the interval that *ended* at its read, so it holds from `t − interval`; an
    /// instantaneous reading (`interval_ns` 0) stands for the power around its read instant, so it
    /// holds from the midpoint with the reading before it. Readings stored without intervals (an
    /// older `power.csv`) hold from their read instant. `None` when the readings are out of order.
    pub fn series(&self) -> Option<PowerSeries> {
        series_of(&self.t, &self.watts, &self.interval_ns, 0, (self.counter_update_ns(), self.held_lag_ns()))
    }

    /// How long before its read a held power reading's value was measured (ns; issue 37): a value
    /// held for an update period is the mean over the update before it (INA2xx: conversion time ×
    /// averages; a PMBus `READ_PIN`; a BMC's sampling period), so on average it stands for the
    /// time one update before its read; a moving average (`power*_average`) for half its window
    /// before. 0 for counters (placed by their interval) and when the period is unknown.
    pub fn held_lag_ns(&self) -> i64 {
        if self.is_counter() {
            return 0;
        }
        let u = i64::try_from(self.update_ns).unwrap_or(0);
        if self.path.ends_with("_average") {
            u / 2
        } else {
            u
        }
    }
}

/// The series of readings `i0..` of `t`/`watts`/`interval_ns` (see [`ZoneSeries::series`]). The
/// last reading's hold ends at its read instant (a counter's interval, or half the spacing before
/// it for an instantaneous source).
fn series_of(t: &[i64], watts: &[f64], interval_ns: &[u64], i0: usize, (update, held): (i64, i64)) -> Option<PowerSeries> {
    let n = t.len().min(watts.len());
    if i0 >= n {
        return None;
    }
    if interval_ns.len() < n {
        let s = PowerSeries::new(t[i0..n].iter().map(|&t| UnixNanos(t)).collect(), watts[i0..n].iter().map(|&w| Watts(w)).collect()).ok()?;
        return Some(s);
    }
    let counter = interval_ns[i0..n].iter().any(|&iv| iv > 0);
    let span = update.max(0).saturating_mul(LEVEL_SPAN_UPDATES);
    if counter && span > 0 {
        let (t, w, iv) = (&t[i0..n], &watts[i0..n], &interval_ns[i0..n]);
        // Read faster than it updates, a counter moves at every read: each reading is a sample
        // over its interval, half an update earlier (its last update, on average).
        let moved = w.iter().zip(iv).filter(|(w, iv)| **w * **iv as f64 > 0.0).count();
        let (starts, energy, end) = if moved * 5 < w.len() * 4 {
            counter_samples(t, w, iv, update)
        } else {
            let lag = update / 2;
            let starts = t.iter().zip(iv).map(|(&t, &iv)| UnixNanos(t.saturating_sub(i64::try_from(iv).unwrap_or(i64::MAX)).saturating_sub(lag))).collect();
            (starts, w.iter().zip(iv).map(|(w, iv)| w * *iv as f64 * 1e-9).collect(), t[t.len() - 1] - lag)
        };
        // A counter moves in steps (RAPL every 976 µs): a reading holds 0, 1 or 2 of them, so its
        // own watts swing by a whole step. The energy stays each sample's own; the level the
        // detector compares with the idle band is the mean over the samples of the span before it
        // (never after it: the next run's first readings must not lift the end of this one's).
        let levels = span_levels(&starts, UnixNanos(end), &energy, span);
        return PowerSeries::new(starts, levels).ok()?.ending_at(UnixNanos(end))?.with_energies(energy);
    }
    let starts: Vec<UnixNanos> = (i0..n)
        .map(|i| {
            let iv = i64::try_from(interval_ns[i]).unwrap_or(i64::MAX);
            UnixNanos(if iv > 0 {
                t[i].saturating_sub(iv)
            } else if i > i0 {
                t[i - 1] + (t[i] - t[i - 1]) / 2 - held
            } else {
                t[i] - held
            })
        })
        .collect();
    let last = n - 1;
    let end = if interval_ns[last] > 0 {
        t[last]
    } else if n - i0 < 2 {
        t[last] - held
    } else {
        t[last] + (t[last] - t[last - 1]) / 2 - held
    };
    PowerSeries::new(starts, watts[i0..n].iter().map(|&w| Watts(w)).collect()).ok()?.ending_at(UnixNanos(end))
}

/// The readings of a counter read faster than it updates (fewer than 4 in 5 readings move it) as
/// one sample per update (`docs/energy-method.md` §1; issue 37): a reading that moved the counter
/// holds the energy up to the counter's last update, which lies in the last `min(update,
/// interval)` before the read: it is placed where that part and its neighbours' parts, mapped onto
/// it by whole updates, meet (`super::grid`: within a fraction of a read on a sensor whose clock
/// drifts against the reads, else within half a read, never half an update). A reading that did not move adds nothing and ends no sample: the
/// samples span the updates, and a run edge inside one shares only that update's energy. Returns
/// the samples' starts, their energies (J) and the last one's end.
fn counter_samples(t: &[i64], watts: &[f64], interval_ns: &[u64], update: i64) -> (Vec<UnixNanos>, Vec<f64>, i64) {
    let (mut starts, mut energy) = (Vec::new(), Vec::new());
    let (mut prev, mut pending) = (None::<i64>, 0.0f64);
    let placed = super::grid::place_updates(&super::grid::moves_of(t, watts, interval_ns), update);
    let mut next_move = 0usize;
    let first = t.first().copied().unwrap_or(0);
    for ((&ti, &w), &iv) in t.iter().zip(watts).zip(interval_ns) {
        let iv = i64::try_from(iv).unwrap_or(i64::MAX);
        let e = w * iv as f64 * 1e-9;
        // Readings before the counter's first move within an update of the recording's start say
        // nothing: that move holds a whole update, begun before them (starting its sample at the
        // first reading put up to an update's energy into less time: the 100 ms counter's idle
        // baseline read 1 % high over a 1 s window).
        if prev.is_none() && e <= 0.0 && ti - first <= update.saturating_add(iv.saturating_mul(2)) {
            continue;
        }
        pending += e;
        // A counter that stays put longer than an update and a read is stuck (or the source
        // idles at 0 W): its time is kept as 0 J samples of about an update, not one long hold.
        let still = prev.is_some_and(|p| ti - p <= update.saturating_add(iv.saturating_mul(2)));
        if e <= 0.0 && still {
            continue;
        }
        let at = if e > 0.0 { placed.get(next_move).map_or(ti - update.min(iv) / 2, |p| p.0) } else { ti };
        next_move += usize::from(e > 0.0);
        // The first reading holds the energy since the update before its own last one.
        let from = prev.unwrap_or(at.saturating_sub(update.max(iv))).min(at - 1);
        starts.push(UnixNanos(from));
        energy.push(pending);
        (prev, pending) = (Some(at), 0.0);
    }
    (starts, energy, prev.unwrap_or(0))
}

/// Counter updates over which a counter series' detection level is averaged
/// (`docs/energy-method.md` §4, "Live runs"): one update more or less moves a level by a tenth.
pub const LEVEL_SPAN_UPDATES: i64 = 10;

/// A sweep of the recorder later than this many reading periods (and [`STALL_MIN`]) after the one
/// before it is a stall: logged, kept on the zones and sent as a `power_recorder_stall` event.
pub const STALL_PERIODS: u32 = 4;

/// Mean power over each reading and the readings before it that began at most `span` ns before
/// it ended, from per-reading energies and contiguous holds (a trailing average: O(n), one pass).
fn span_levels(starts: &[UnixNanos], end: UnixNanos, energy: &[f64], span: i64) -> Vec<Watts> {
    let n = starts.len();
    let stop = |i: usize| if i + 1 < n { starts[i + 1].0 } else { end.0 };
    let mut lo = 0usize;
    let (mut e, mut ns) = (0.0f64, 0i64);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let m = stop(i);
        e += energy[i];
        ns += m - starts[i].0;
        while lo < i && starts[lo].0 < m - span {
            e -= energy[lo];
            ns -= stop(lo) - starts[lo].0;
            lo += 1;
        }
        out.push(Watts(if ns > 0 { e / (ns as f64 * 1e-9) } else { 0.0 }));
    }
    // The first readings have less than a span before them: they take the first full span's level
    // (the recording starts in the idle window, whose spread must not see single steps).
    if let Some(f) = (0..n).find(|&i| stop(i) - starts[0].0 >= span) {
        let first = out[f];
        out[..f].fill(first);
    }
    out
}

/// A stall is also at least this long (a 1 ms recorder on a loaded machine misses a few ticks
/// often; that is jitter, not a stall).
pub const STALL_MIN: Duration = Duration::from_millis(20);

/// The time since the previous sweep when it exceeds [`STALL_PERIODS`] periods and [`STALL_MIN`]
/// (a stall of the recorder: the machine was busy, the thread descheduled); marks this sweep.
fn stall_since(last: &mut Option<std::time::Instant>, period: Duration) -> Option<u64> {
    let now = std::time::Instant::now();
    let gap = last.replace(now).map(|l| now.duration_since(l))?;
    (gap > period.saturating_mul(STALL_PERIODS).max(STALL_MIN)).then(|| u64::try_from(gap.as_nanos()).unwrap_or(u64::MAX))
}

/// The hwmon driver of an attribute file: the chip's `name` beside it.
fn driver_of(path: &str) -> Option<String> {
    let dir = std::path::Path::new(path).parent()?;
    std::fs::read_to_string(dir.join("name")).ok().map(|n| n.trim().to_string()).filter(|n| !n.is_empty())
}

pub struct PowerRecorder {
    stop: Arc<AtomicBool>,
    zones: LivePower,
    handle: std::thread::JoinHandle<()>,
}

/// The samples recorded so far, readable while the recorder runs: the per-run pause planner
/// analyses the runs of a probe as their tails end (docs/uflip-method.md §11.6, `docs/energy-method.md`).
#[derive(Debug, Clone, Default)]
pub struct LivePower(Arc<Mutex<Vec<ZoneSeries>>>);

impl LivePower {
    /// Already recorded zones (a finished recording, or a synthetic one in tests).
    pub fn from_zones(zones: Vec<ZoneSeries>) -> LivePower {
        LivePower(Arc::new(Mutex::new(zones)))
    }

    /// The detection-level span of the zone a probe's energy is attributed to
    /// ([`ZoneSeries::level_span_ns`]; 0 while there is none).
    pub fn level_span_ns(&self, prefer: Option<&str>) -> i64 {
        self.0.lock().ok().and_then(|zones| pick_for_drive(&zones, prefer).ok().map(ZoneSeries::level_span_ns)).unwrap_or(0)
    }

    /// A copy of the zone a probe's energy is attributed to, as recorded so far.
    pub fn snapshot(&self, prefer: Option<&str>) -> Option<ZoneSeries> {
        let zones = self.0.lock().ok()?;
        pick_for_drive(&zones, prefer).ok().cloned()
    }

    /// The samples at or after `from_ns` of the zone a probe's energy is attributed to
    /// ([`pick_for_drive`] with `prefer`); `None` while there is no such zone or too few samples.
    pub fn since(&self, prefer: Option<&str>, from_ns: i64) -> Option<PowerSeries> {
        let zones = self.0.lock().ok()?;
        let z = pick_for_drive(&zones, prefer).ok()?;
        let i = z.t.partition_point(|&t| t < from_ns);
        series_of(&z.t, &z.watts, &z.interval_ns, i, (z.counter_update_ns(), z.held_lag_ns()))
    }
}

impl PowerRecorder {
    /// Starts the recording thread; `clock` stamps the readings (the command's clock, so they
    /// share the time base of its other records).
    pub fn start(mut sensors: Vec<Box<dyn PowerSensor>>, period: Duration, clock: Clock) -> PowerRecorder {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let zones = LivePower::from_zones(
            sensors
                .iter()
                .map(|s| {
                    let d = s.describe();
                    let update_ns = u64::try_from(s.update_period().as_nanos()).unwrap_or(0);
                    let driver = if d.source == "hwmon" { driver_of(&d.path) } else { None }.unwrap_or_else(|| d.source.clone());
                    ZoneSeries { source: d.source, zone: d.zone, scope: d.scope, method: d.method, update_ns, path: d.path, driver, ..Default::default() }
                })
                .collect(),
        );
        let shared = zones.clone();
        let handle = std::thread::spawn(move || {
            let start = std::time::Instant::now();
            let mut k: u32 = 0;
            let mut sweep = Vec::with_capacity(sensors.len());
            let mut last_sweep: Option<std::time::Instant> = None;
            while !flag.load(Ordering::Relaxed) {
                let stall = stall_since(&mut last_sweep, period);
                // Read every sensor first, then append under the lock once per sweep: the lock is
                // never held across a sensor read, so a reader cannot delay the sampling grid.
                sweep.clear();
                for s in sensors.iter_mut() {
                    // Stamped at the read's own instant (the source times itself around the read).
                    let (mono0, utc0) = clock.now();
                    let (at, read) = s.read_timed(&mut || clock.now().0);
                    sweep.push((utc0.saturating_add(i64::try_from(at.saturating_sub(mono0)).unwrap_or(i64::MAX)), read));
                }
                if let Ok(mut out) = shared.0.lock() {
                    if let (Some(gap), Some((utc, _))) = (stall, sweep.first()) {
                        tracing::warn!(stall_ms = gap as f64 / 1e6, period = ?period, "power recorder stalled: runs overlapping it carry coverage < 1 and low_confidence");
                        out.iter_mut().for_each(|z| z.stalls.push((*utc, gap)));
                    }
                    for ((utc, read), z) in sweep.drain(..).zip(out.iter_mut()) {
                        match read {
                            Ok(Some(r)) => {
                                z.t.push(utc);
                                z.watts.push(r.watts.0);
                                z.interval_ns.push(r.interval_ns);
                                z.flags.push(r.flags);
                            }
                            Ok(None) => {}
                            Err(_) => z.errors += 1,
                        }
                    }
                }
                k = k.saturating_add(1);
                // Absolute deadlines: the sampling grid does not drift with read durations. A late
                // sweep skips the grid instants it missed instead of catching up with reads
                // microseconds apart (a counter's steps make such readings 0 W or far too high).
                let now = std::time::Instant::now();
                let due = u32::try_from(now.duration_since(start).as_nanos() / period.as_nanos().max(1)).unwrap_or(u32::MAX);
                k = k.max(due.saturating_add(1));
                let next = start + period.saturating_mul(k);
                if next > now {
                    std::thread::sleep(next - now);
                }
            }
        });
        PowerRecorder { stop, zones, handle }
    }

    /// A handle to the samples recorded so far.
    pub fn live(&self) -> LivePower {
        self.zones.clone()
    }

    pub fn stop(self) -> Vec<ZoneSeries> {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.handle.join();
        self.zones.0.lock().map(|mut z| std::mem::take(&mut *z)).unwrap_or_default()
    }
}

/// Scopes whose power includes the drive's: its own rail, a PSU, the wall. RAPL's scopes
/// (package, core, uncore, dram, psys) are the CPU's side of a probe and never see the SSD
/// (docs/uflip-method.md §13).
pub const DRIVE_SCOPES: &[&str] = &["drive", "rail", "psu_out", "psu_in", "wall"];

/// Why a probe's energy has no zone to come from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoZone {
    /// `--power-zone` / `power_zone` names a zone that was not recorded.
    #[error("power zone `{wanted}` not found; zones: {zones}")]
    NotFound { wanted: String, zones: String },
    /// Drive-side zones exist but none produced two readings.
    #[error("no power zone produced samples ({zones})")]
    NoSamples { zones: String },
    /// Only CPU-side power (RAPL) was recorded: a number would be the CPU's energy, not the drive's.
    #[error(
        "drive energy not measurable here: the only power recorded is CPU-side ({zones}), which does not see the \
         drive (docs/uflip-method.md §13). A shunt monitor on the drive's supply (INA226/INA3221 in hwmon), a PMBus PSU, \
         IPMI DCMI ([sources] ipmi = true; whole system, long runs only) or an oscilloscope trace \
         (`wattflip-agent trace import`) would make it measurable; --power-zone / power_zone attributes a \
         CPU zone's energy to the probe explicitly"
    )]
    NotMeasurable { zones: String },
}

fn labels<'a>(zones: impl Iterator<Item = &'a ZoneSeries>) -> String {
    let v: Vec<String> = zones.map(|z| format!("{} ({})", z.label(), z.scope)).collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// The zone a probe's energy is attributed to: `prefer` when the operator named one (any scope,
/// RAPL included: their choice, and `energy_source` says which), otherwise the most drive-specific
/// of [`DRIVE_SCOPES`] with samples. Never a CPU zone on its own initiative.
pub fn pick_for_drive<'a>(zones: &'a [ZoneSeries], prefer: Option<&str>) -> Result<&'a ZoneSeries, NoZone> {
    if let Some(p) = prefer {
        return pick(zones, Some(p)).ok_or_else(|| NoZone::NotFound { wanted: p.to_string(), zones: labels(zones.iter()) });
    }
    let drive_side = || zones.iter().filter(|z| DRIVE_SCOPES.contains(&z.scope.as_str()));
    if drive_side().next().is_none() {
        return Err(NoZone::NotMeasurable { zones: labels(zones.iter()) });
    }
    DRIVE_SCOPES
        .iter()
        .find_map(|scope| zones.iter().find(|z| z.scope == *scope && z.watts.len() > 1))
        .ok_or_else(|| NoZone::NoSamples { zones: labels(drive_side()) })
}

/// The zone to attribute power to in the load ladder and the governor sweep, whose records say
/// which scope they measured (`scope` = `device` or `host`): `prefer` (a zone name) when given,
/// otherwise the most drive-specific scope available (drive rail before PSU before CPU package).
pub fn pick<'a>(zones: &'a [ZoneSeries], prefer: Option<&str>) -> Option<&'a ZoneSeries> {
    if let Some(p) = prefer {
        return zones.iter().find(|z| z.zone == p || z.label() == p);
    }
    const ORDER: &[&str] = &["drive", "rail", "psu_out", "psu_in", "wall", "psys", "package"];
    ORDER.iter().find_map(|scope| zones.iter().find(|z| z.scope == *scope && z.watts.len() > 1)).or_else(|| zones.iter().find(|z| z.watts.len() > 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(source: &str, zone: &str, scope: &str, n: usize) -> ZoneSeries {
        ZoneSeries { source: source.into(), zone: zone.into(), scope: scope.into(), t: (0..n as i64).collect(), watts: vec![1.0; n], ..Default::default() }
    }

    /// By hand: a counter updating every 100 ms at 32, 132 and 232 ms (2 W: 0.2 J each), read
    /// every 5 ms from 5 ms. The readings at 35, 135 and 235 ms moved it: each update lies in the
    /// 5 ms before, placed at its middle (32.5, 132.5, 232.5 ms), and the 0.2 J of the updates at
    /// 132 and 232 ms span 32.5–132.5 and 132.5–232.5 ms. (Each reading its own sample, half an
    /// update earlier, put 0.2 J into 80–85 ms and nothing elsewhere.) The first move holds the
    /// whole update before it: 0.2 J over −67.5–32.5 ms, not over 5–32.5 ms from the first
    /// reading (7.3 W for a counter at 2 W).
    #[test]
    fn a_slow_counters_samples_span_its_updates() {
        let ms = 1_000_000i64;
        let t: Vec<i64> = (1..=56).map(|k| k * 5 * ms).collect();
        let moved = |t: i64| [35, 135, 235].contains(&(t / ms));
        let watts = t.iter().map(|&t| if moved(t) { 0.2 / 0.005 } else { 0.0 }).collect();
        let z = ZoneSeries { t, watts, interval_ns: vec![5_000_000; 56], update_ns: 100_000_000, ..Default::default() };
        let s = z.series().unwrap();
        let times: Vec<i64> = s.times().iter().map(|u| u.0).collect();
        assert_eq!(times[times.len() - 2..], [32_500_000, 132_500_000], "{times:?}");
        assert_eq!(s.end_time().0, 232_500_000);
        let n = times.len();
        assert_eq!((s.sample_energy(n - 2), s.sample_energy(n - 1)), (0.2, 0.2));
        assert_eq!((times[0], n, s.sample_energy(0)), (-67_500_000, 3, 0.2), "{times:?}");
    }

    #[test]
    fn probe_energy_never_falls_back_to_a_cpu_zone() {
        let rapl = [zone("rapl", "package-0", "package", 50), zone("rapl", "package-0/dram", "dram", 50), zone("rapl", "psys", "psys", 50)];
        let e = pick_for_drive(&rapl, None).unwrap_err();
        assert_eq!(e, NoZone::NotMeasurable { zones: "rapl:package-0 (package), rapl:package-0/dram (dram), rapl:psys (psys)".into() });
        assert!(e.to_string().starts_with("drive energy not measurable here: the only power recorded is CPU-side (rapl:package-0 (package)"));
        assert!(e.to_string().contains("INA226/INA3221") && e.to_string().contains("--power-zone"), "{e}");
        // The operator's explicit choice stands, CPU zone or not.
        assert_eq!(pick_for_drive(&rapl, Some("package-0")).unwrap().label(), "rapl:package-0");
        assert_eq!(pick_for_drive(&rapl, Some("rapl:psys")).unwrap().label(), "rapl:psys");
        assert!(matches!(pick_for_drive(&rapl, Some("pmbus/pin")), Err(NoZone::NotFound { .. })));
        assert_eq!(pick_for_drive(&[], None).unwrap_err(), NoZone::NotMeasurable { zones: "none".into() });
        // With a drive-side zone, that one; PSU input before the wall; without samples, say so.
        let mixed = [rapl[0].clone(), zone("ipmi", "dcmi", "wall", 5), zone("hwmon", "pmbus/pin", "psu_in", 5)];
        assert_eq!(pick_for_drive(&mixed, None).unwrap().label(), "hwmon:pmbus/pin");
        let silent = [rapl[0].clone(), zone("hwmon", "ina226/power1", "rail", 1)];
        assert_eq!(pick_for_drive(&silent, None).unwrap_err(), NoZone::NoSamples { zones: "hwmon:ina226/power1 (rail)".into() });
        // The ladder and the sweep keep their host-scope fallback (their records name the scope).
        assert_eq!(pick(&rapl, None).unwrap().label(), "rapl:psys");
    }
}
