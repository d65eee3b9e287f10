//! The fast sampler's hot path allocates nothing: a counting allocator (counting only on the
//! sampler's thread) over thousands of 1 kHz ticks of RAPL counters and hwmon power channels
//! between two window closes. An allocation per tick is garbage per millisecond for the agent's
//! lifetime; a buffer that grows per tick (the lateness list once did) is a leak.

// The counting allocator (tests/support/counting_alloc.rs) is the one unsafe item: a `GlobalAlloc`
// that forwards to `System`.
#![allow(unsafe_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use wattflip_agent::sensors::sampler::{run_on, Timebase};
use wattflip_agent::sensors::{discover_all, SensorKinds};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::{count_here, Counting, ALLOCS};

#[global_allocator]
static GLOBAL: Counting = Counting;

fn fixture(scenario: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sysfs").join(scenario).join("sys")
}

/// Virtual time that counts ticks: allocations are counted between tick `from` and tick `to`
/// (inside one window), then the sampler is stopped.
struct Ticks {
    now: u64,
    ticks: u64,
    from: u64,
    to: u64,
    counted: Option<u64>,
    stop: Arc<AtomicBool>,
}

impl Timebase for Ticks {
    fn now(&mut self) -> (u64, i64) {
        (self.now, 1_700_000_000_000_000_000 + self.now as i64)
    }

    fn sleep_until(&mut self, mono_ns: u64) {
        self.now = self.now.max(mono_ns);
        self.ticks += 1;
        if self.ticks == self.from {
            ALLOCS.store(0, Ordering::Relaxed);
        } else if self.ticks == self.to {
            self.counted = Some(ALLOCS.load(Ordering::Relaxed));
            self.stop.store(true, Ordering::Relaxed);
        }
    }
}

#[test]
fn a_thousand_hz_sampler_allocates_nothing_per_tick() {
    let runner: Arc<dyn wattflip_drives::CommandRunner> = Arc::new(wattflip_drives::SystemRunner::new());
    let mut sensors = discover_all(&fixture("rapl-only"), &SensorKinds::default(), &runner).power;
    sensors.extend(discover_all(&fixture("ina226"), &SensorKinds::default(), &runner).power);
    let n = sensors.len();
    assert!(n >= 3, "fixtures rapl-only and ina226 give {n} power sources");
    let sensors: Vec<_> = sensors.into_iter().map(|s| (s, Duration::from_millis(1))).collect();
    let stop = Arc::new(AtomicBool::new(false));
    // Windows of 10 s: ticks 1,000 to 6,000 (1 s to 6 s) close none, so every allocation counted
    // there is one of the ticks'.
    let mut time = Ticks { now: 0, ticks: 0, from: 1_000, to: 6_000, counted: None, stop: stop.clone() };
    let mut windows = 0;
    count_here(true);
    let stats = run_on(sensors, Duration::from_secs(10), &mut time, stop, |_| {
        windows += 1;
        true
    });
    count_here(false);
    assert_eq!(windows, 0, "no window closed in the counted ticks");
    assert_eq!(stats.errors, 0, "the fixtures read cleanly");
    assert_eq!(stats.reads, 6_000 * n as u64, "every source read on every tick");
    assert_eq!(stats.lateness.ticks(), 6_000);
    assert_eq!(time.counted, Some(0), "heap allocations in 5,000 ticks of {n} sources");
}
