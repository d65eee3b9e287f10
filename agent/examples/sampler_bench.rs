//! Benchmark of the fast power sampler: 8 hwmon power channels read at 1 kHz for a fixed time,
//! reporting the sampler's CPU share of one core and the timing jitter of its sampling grid
//! (issue: ≤ 2 % of one core, p99 jitter ≤ 200 µs). The channels are files in a temporary
//! hwmon-shaped tree (this machine has no power hwmon chip); real sysfs attributes cost a similar
//! open/read/close.
//!
//! Run: `cargo run --release -p wattflip-agent --example sampler_bench -- [seconds] [channels] [period_us]`

// A benchmark program, not shipped: a panic with a message is its failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wattflip_agent::clock::Clock;
use wattflip_agent::sensors::sampler::{percentile_us, run};
use wattflip_agent::sensors::{discover_all, SensorKinds};

/// utime + stime of this process in seconds (from /proc/self/stat; clock ticks of 10 ms).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // After the command name: field 3 is index 0, so utime (14) is 11 and stime (15) is 12.
    (ticks(11) + ticks(12)) / 100.0
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let secs: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(10);
    let channels: u32 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(8);
    let period_us: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let dir = tempfile::tempdir()?;
    let chip = dir.path().join("class/hwmon/hwmon0");
    std::fs::create_dir_all(&chip)?;
    std::fs::write(chip.join("name"), "bench\n")?;
    for n in 1..=channels {
        std::fs::write(chip.join(format!("power{n}_input")), format!("{}\n", 1_000_000 * n))?;
    }
    let runner: Arc<dyn wattflip_drives::CommandRunner> = Arc::new(wattflip_drives::SystemRunner::new());
    let found = discover_all(dir.path(), &SensorKinds { rapl: false, ..Default::default() }, &runner);
    assert_eq!(found.power.len(), channels as usize);
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    let handle = std::thread::spawn(move || {
        let mut batches = 0u64;
        let s = run(found.power, Duration::from_micros(period_us), Duration::from_secs(1), Clock::new(), flag, |_| {
            batches += 1;
            true
        });
        (s, batches)
    });
    std::thread::sleep(Duration::from_secs(secs));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (s, batches) = handle.join().map_err(|_| "the sampler thread panicked")?;
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    println!(
        "{channels} channels at {:.0} Hz for {wall:.1} s: {} reads ({} errors), {batches} window batches\n\
         CPU {:.3} s = {:.2} % of one core\n\
         grid lateness p50 {} µs, p99 {} µs, p99.9 {} µs, max {} µs",
        1e6 / period_us as f64,
        s.reads,
        s.errors,
        cpu,
        100.0 * cpu / wall,
        percentile_us(&s.lateness_us, 50.0),
        percentile_us(&s.lateness_us, 99.0),
        percentile_us(&s.lateness_us, 99.9),
        percentile_us(&s.lateness_us, 100.0),
    );
    Ok(())
}
