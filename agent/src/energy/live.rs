//! Records power while a probe runs: a dedicated thread reads the given sensors every `period`
//! (RAPL updates about every 1 ms, so 1–10 ms is useful) on the monotonic clock mapped to UTC, the
//! same time base as the probe's run timestamps. Sleeping between reads keeps the recorder's own
//! CPU cost, and so its footprint in a RAPL trace, small. Also chooses the zone a probe's energy
//! is attributed to: one that includes the drive, never a CPU (RAPL) zone unless the operator
//! names it, because RAPL does not see the drive (ufip.md §13).

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
}

impl ZoneSeries {
    pub fn label(&self) -> String {
        format!("{}:{}", self.source, self.zone)
    }

    pub fn series(&self) -> Option<PowerSeries> {
        PowerSeries::new(self.t.iter().map(|&t| UnixNanos(t)).collect(), self.watts.iter().map(|&w| Watts(w)).collect()).ok()
    }
}

pub struct PowerRecorder {
    stop: Arc<AtomicBool>,
    zones: LivePower,
    handle: std::thread::JoinHandle<()>,
}

/// The samples recorded so far, readable while the recorder runs: the per-run pause planner
/// analyses the runs of a probe as their tails end (ufip.md §11.6, `docs/energy-method.md`).
#[derive(Debug, Clone, Default)]
pub struct LivePower(Arc<Mutex<Vec<ZoneSeries>>>);

impl LivePower {
    /// Already recorded zones (a finished recording, or a synthetic one in tests).
    pub fn from_zones(zones: Vec<ZoneSeries>) -> LivePower {
        LivePower(Arc::new(Mutex::new(zones)))
    }

    /// The samples at or after `from_ns` of the zone a probe's energy is attributed to
    /// ([`pick_for_drive`] with `prefer`); `None` while there is no such zone or too few samples.
    pub fn since(&self, prefer: Option<&str>, from_ns: i64) -> Option<PowerSeries> {
        let zones = self.0.lock().ok()?;
        let z = pick_for_drive(&zones, prefer).ok()?;
        let i = z.t.partition_point(|&t| t < from_ns);
        PowerSeries::new(z.t[i..].iter().map(|&t| UnixNanos(t)).collect(), z.watts[i..].iter().map(|&w| Watts(w)).collect()).ok()
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
                    ZoneSeries { source: d.source, zone: d.zone, scope: d.scope, method: d.method, ..Default::default() }
                })
                .collect(),
        );
        let shared = zones.clone();
        let handle = std::thread::spawn(move || {
            let start = std::time::Instant::now();
            let mut k: u32 = 0;
            let mut sweep = Vec::with_capacity(sensors.len());
            while !flag.load(Ordering::Relaxed) {
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
                // Absolute deadlines: the sampling grid does not drift with read durations.
                let next = start + period.saturating_mul(k);
                let now = std::time::Instant::now();
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
/// (ufip.md §13).
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
         drive (ufip.md §13). A shunt monitor on the drive's supply (INA226/INA3221 in hwmon), a PMBus PSU, \
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
