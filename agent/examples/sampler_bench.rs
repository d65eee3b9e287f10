//! Benchmark of the fast power sampler against its floor: 8 hwmon power channels read at 1 kHz for
//! a fixed time, side by side (at the same time, in one process) with a bare loop that only sleeps
//! to the same absolute 1 kHz grid with the same time base and does nothing else. It reports each
//! thread's CPU (from /proc/thread-self/schedstat, ns) and grid lateness, and the sampler's as
//! ratios to the bare loop's (targets: CPU ≤ 1.10 × the floor, p99 lateness ≤ floor + 20 µs): on a
//! VM the bare loop alone already costs ~2.3 % of a core, so absolute targets would measure the
//! host, not the sampler. The channels are files in a temporary hwmon-shaped tree (this machine
//! has no power hwmon chip); real sysfs attributes cost a similar read.
//!
//! Run: `cargo run --release -p wattflip-agent --example sampler_bench -- [seconds] [channels] [period_us]`

// A benchmark program, not shipped: a panic with a message is its failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wattflip_agent::clock::Clock;
use wattflip_agent::sensors::sampler::{percentile_us, run, RealTime, Timebase};
use wattflip_agent::sensors::{discover_all, SensorKinds};

/// CPU time of the calling thread in seconds: the first field of /proc/thread-self/schedstat (ns).
fn thread_cpu_seconds() -> f64 {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    s.split_whitespace().next().and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) / 1e9
}

/// The floor: the sampler's grid logic (due instants on an absolute grid, lateness measured the
/// same way, the same `RealTime` sleep) with no reads. Returns (lateness µs, CPU seconds).
fn bare_loop(period_ns: u64, clock: Clock, stop: Arc<AtomicBool>) -> (Vec<u32>, f64) {
    let cpu0 = thread_cpu_seconds();
    let mut time = RealTime::new(clock);
    let mut due = 0u64;
    let mut late = Vec::new();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let (now, _) = time.now();
        if now >= due {
            late.push(u32::try_from((now - due) / 1000).unwrap_or(u32::MAX));
            due = (now / period_ns + 1).saturating_mul(period_ns);
        }
        time.sleep_until(due);
    }
    (late, thread_cpu_seconds() - cpu0)
}

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
    // What one read costs on its own: the same channels read back to back in a tight loop on a
    // thread of their own (after the side-by-side run, so it does not disturb it).
    let mut probe = discover_all(dir.path(), &SensorKinds { rapl: false, ..Default::default() }, &runner).power;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    let handle = std::thread::spawn(move || {
        let mut batches = 0u64;
        let c0 = thread_cpu_seconds();
        let s = run(found.power, Duration::from_micros(period_us), Duration::from_secs(1), Clock::new(), flag, |_| {
            batches += 1;
            true
        });
        (s, batches, thread_cpu_seconds() - c0)
    });
    let flag = stop.clone();
    let bare = std::thread::spawn(move || bare_loop(period_us * 1000, Clock::new(), flag));
    std::thread::sleep(Duration::from_secs(secs));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (s, batches, cpu_sampler) = handle.join().map_err(|_| "the sampler thread panicked")?;
    let (bare_late, cpu_bare) = bare.join().map_err(|_| "the bare loop thread panicked")?;
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    let per_read_us = std::thread::spawn(move || {
        let clock = Clock::new();
        let rounds = 20_000u64;
        let c0 = thread_cpu_seconds();
        for _ in 0..rounds {
            for s in probe.iter_mut() {
                let mut now = || clock.now().0;
                let _ = s.read_timed(&mut now);
            }
        }
        (thread_cpu_seconds() - c0) * 1e6 / (rounds * probe.len().max(1) as u64) as f64
    })
    .join()
    .map_err(|_| "the read-cost thread panicked")?;
    // The sampler's CPU explained as the floor plus its reads: what is left is its own overhead.
    let reads_cpu = s.reads as f64 * per_read_us / 1e6;
    let p = |v: &[u32], q: f64| percentile_us(v, q);
    println!(
        "{channels} channels at {:.0} Hz for {wall:.1} s: {} reads ({} errors), {batches} window batches\n\
         process CPU {cpu:.3} s (both threads)\n\
         sampler   CPU {:.2} % of one core, lateness p50 {} µs, p99 {} µs, p99.9 {} µs, max {} µs\n\
         bare loop CPU {:.2} % of one core, lateness p50 {} µs, p99 {} µs, p99.9 {} µs, max {} µs\n\
         sampler / floor: CPU x{:.3} (target ≤ 1.10), p99 lateness {:+} µs (target ≤ +20)\n\
         one read (timed, back to back): {per_read_us:.2} µs CPU; the reads explain {:.2} % of one core, \
         leaving {:.2} % above the floor for cold reads and the sampler's own bookkeeping",
        1e6 / period_us as f64,
        s.reads,
        s.errors,
        100.0 * cpu_sampler / wall,
        p(&s.lateness_us, 50.0),
        p(&s.lateness_us, 99.0),
        p(&s.lateness_us, 99.9),
        p(&s.lateness_us, 100.0),
        100.0 * cpu_bare / wall,
        p(&bare_late, 50.0),
        p(&bare_late, 99.0),
        p(&bare_late, 99.9),
        p(&bare_late, 100.0),
        if cpu_bare > 0.0 { cpu_sampler / cpu_bare } else { f64::NAN },
        i64::from(p(&s.lateness_us, 99.0)) - i64::from(p(&bare_late, 99.0)),
        100.0 * reads_cpu / wall,
        100.0 * (cpu_sampler - cpu_bare - reads_cpu) / wall,
    );
    Ok(())
}
