//! Records power while a probe runs: a dedicated thread reads the given sensors every `period`
//! (RAPL updates about every 1 ms, so 1–10 ms is useful) on the monotonic clock mapped to UTC, the
//! same time base as the probe's run timestamps. Sleeping between reads keeps the recorder's own
//! CPU cost, and so its footprint in a RAPL trace, small.

use crate::runtime::Clock;
use crate::sensors::PowerSensor;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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

pub struct Recorder {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<Vec<ZoneSeries>>,
}

impl Recorder {
    pub fn start(mut sensors: Vec<Box<dyn PowerSensor>>, period: Duration) -> Recorder {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let clock = Clock::new();
            let mut out: Vec<ZoneSeries> = sensors
                .iter()
                .map(|s| {
                    let d = s.describe();
                    ZoneSeries { source: d.source, zone: d.zone, scope: d.scope, method: d.method, ..Default::default() }
                })
                .collect();
            let start = std::time::Instant::now();
            let mut k: u32 = 0;
            while !flag.load(Ordering::Relaxed) {
                for (s, z) in sensors.iter_mut().zip(out.iter_mut()) {
                    let (mono, utc) = clock.now();
                    match s.read(mono) {
                        Ok(Some(r)) => {
                            z.t.push(utc);
                            z.watts.push(r.watts.0);
                            z.interval_ns.push(r.interval_ns);
                        }
                        Ok(None) => {}
                        Err(_) => z.errors += 1,
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
            out
        });
        Recorder { stop, handle }
    }

    pub fn stop(self) -> Vec<ZoneSeries> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

/// The zone to attribute probe energy to: `prefer` (a zone name) when given, otherwise the most
/// drive-specific scope available (drive rail before PSU before CPU package).
pub fn pick<'a>(zones: &'a [ZoneSeries], prefer: Option<&str>) -> Option<&'a ZoneSeries> {
    if let Some(p) = prefer {
        return zones.iter().find(|z| z.zone == p || z.label() == p);
    }
    const ORDER: &[&str] = &["drive", "rail", "psu_out", "psu_in", "wall", "psys", "package"];
    ORDER
        .iter()
        .find_map(|scope| zones.iter().find(|z| z.scope == *scope && z.watts.len() > 1))
        .or_else(|| zones.iter().find(|z| z.watts.len() > 1))
}
