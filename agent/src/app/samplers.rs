//! The fast power samplers of `run`: one thread per source (`sensors::sampler`), all windows
//! counted from one instant (the run's start), so every source's aggregates cover the same
//! windows. A source found after start-up ([`place`]) goes where it would have gone at start: the
//! sampler of its source at its `power_interval` (a new sampler thread if its source had none), or
//! the tick when it is read no faster than the tick. A new kind of power source needs nothing here:
//! `ticks::split_by_rate` groups sensors by their `source` name, one sampler per name.

use super::ticks::{split_by_rate, SamplerState, Timed};
use crate::clock::Clock;
use crate::config::Config;
use crate::sensors::sampler::{run_joinable, Joining, RealTime, SamplerStats};
use crate::sensors::{Discovered, PowerSensor};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use wattflip_proto::v1;

/// One sampler thread: its source, where sensors join it, and how to stop it.
struct Group {
    source: String,
    joins: std::sync::mpsc::Sender<Joining>,
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<SamplerStats>,
}

/// The running fast samplers, each sending its window aggregates to `tx`.
pub struct FastSamplers {
    groups: Vec<Group>,
    window: Duration,
    clock: Clock,
    /// Monotonic instant every sampler counts its grids and windows from.
    origin_ns: u64,
    tx: mpsc::Sender<v1::Batch>,
}

impl FastSamplers {
    /// No sampler yet; windows of `window` (the sampling interval) from now on.
    pub fn new(window: Duration, clock: Clock, tx: mpsc::Sender<v1::Batch>) -> Self {
        FastSamplers { groups: Vec::new(), window, clock, origin_ns: clock.now().0, tx }
    }

    /// Sensors of `source` join its sampler, or start one when the source has none (or its
    /// sampler has stopped: the exporter is gone).
    pub fn add(&mut self, source: String, sensors: Vec<Timed>) {
        // The newest sampler of the source (an older one may have stopped); a send fails, handing
        // the sensor back, only when that sampler has stopped too.
        let left: Vec<Timed> = match self.groups.iter().rev().find(|g| g.source == source) {
            Some(g) => sensors.into_iter().filter_map(|s| g.joins.send(s).err().map(|e| e.0)).collect(),
            None => sensors,
        };
        if left.is_empty() {
            return;
        }
        tracing::info!(source = %source, zones = left.len(), "fast power sampling");
        let stop = Arc::new(AtomicBool::new(false));
        let (joins, joined) = std::sync::mpsc::channel();
        let (flag, out, window, clock, origin) = (stop.clone(), self.tx.clone(), self.window, self.clock, self.origin_ns);
        let handle = std::thread::spawn(move || {
            let mut time = RealTime::starting_at(clock, origin);
            run_joinable(left, window, &mut time, flag, &joined, |b| out.blocking_send(b).is_ok())
        });
        self.groups.push(Group { source, joins, stop, handle });
    }

    /// Asks every sampler to stop; their threads, to be joined.
    pub fn stop(self) -> Vec<std::thread::JoinHandle<SamplerStats>> {
        for g in &self.groups {
            g.stop.store(true, Ordering::Relaxed);
        }
        self.groups.into_iter().map(|g| g.handle).collect()
    }
}

/// Places power sensors as `run` does at start-up: those read faster than the tick join the
/// sampler of their source, the rest are read on the tick (`found.power`, with their period in
/// `state.periods`).
pub fn place(cfg: &Config, sensors: Vec<Box<dyn PowerSensor>>, found: &mut Discovered, state: &mut SamplerState, fast: &mut FastSamplers) {
    let (groups, slow) = split_by_rate(cfg, sensors);
    for (s, period) in slow {
        found.power.push(s);
        state.periods.push(period);
    }
    for (source, sensors) in groups {
        fast.add(source, sensors);
    }
}
