//! Benchmark of the fast power sampler against its floors: N hwmon power channels read at 1 kHz
//! for a fixed time, side by side (at the same time, in one process, three threads) with
//! - the **bare loop**: only sleeps to the same absolute grid with the same time base (the floor of
//!   the targets: CPU ≤ 1.10 × its CPU, p99 lateness ≤ its p99 + 20 µs), and
//! - the **reads floor**: the bare loop plus one `pread` of each channel into a stack buffer per
//!   tick, nothing else: the least any sampler that reads N separate attributes can cost.
//!
//! It reports each thread's CPU (from /proc/thread-self/schedstat, ns), grid lateness, read
//! syscalls per tick (/proc/thread-self/io `syscr`) and heap allocations per tick (a counting
//! allocator, per thread), and the sampler as ratios to both floors: the sampler over the reads
//! floor is its own overhead; the reads floor over the bare loop is what the kernel charges for
//! reading N files. On a VM the bare loop alone costs ~1–2.3 % of a core, so absolute targets would
//! measure the host. The channels are files in a temporary hwmon-shaped tree (this machine has no
//! power hwmon chip); real sysfs attributes cost a similar read.
//!
//! Run: `cargo run --release -p wattflip-agent --example sampler_bench -- [seconds] [channels] [period_us]`

// A benchmark program, not shipped: a panic with a message is its failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// The counting allocator (tests/support/counting_alloc.rs) is the one unsafe item: a `GlobalAlloc`
// that forwards to `System`.
#![allow(unsafe_code)]

use std::os::unix::fs::FileExt as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wattflip_agent::clock::Clock;
use wattflip_agent::sensors::sampler::{run, Lateness, RealTime, Timebase};
use wattflip_agent::sensors::{discover_all, SensorKinds};

/// Counts heap allocations made by threads that opted in (the sampler's), so "nothing allocated
/// per tick" is measured, not assumed.
#[path = "../tests/support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::{count_here, Counting, ALLOCS};

#[global_allocator]
static GLOBAL: Counting = Counting;

/// CPU time of the calling thread in seconds: the first field of /proc/thread-self/schedstat (ns).
fn thread_cpu_seconds() -> f64 {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    s.split_whitespace().next().and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) / 1e9
}

/// Read-type syscalls of the calling thread so far (/proc/thread-self/io `syscr`; pread counts).
fn thread_read_syscalls() -> u64 {
    let s = std::fs::read_to_string("/proc/thread-self/io").unwrap_or_default();
    s.lines().find_map(|l| l.strip_prefix("syscr: ")).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

/// What one thread of the side-by-side run measured.
struct Side {
    lateness: Lateness,
    cpu_s: f64,
    ticks: u64,
    read_syscalls: u64,
}

/// A floor: the sampler's grid logic (due instants on an absolute grid, lateness measured the same
/// way, the same `RealTime` sleep), reading `files` once each per tick (none for the bare loop).
fn floor_loop(period_ns: u64, files: Vec<std::fs::File>, stop: Arc<AtomicBool>) -> Side {
    let cpu0 = thread_cpu_seconds();
    let mut time = RealTime::new(Clock::new());
    let mut due = 0u64;
    let mut lateness = Lateness::default();
    let mut buf = [0u8; 64];
    let (mut ticks, mut sink) = (0u64, 0usize);
    let sys0 = thread_read_syscalls();
    while !stop.load(Ordering::Relaxed) {
        let (now, _) = time.now();
        if now >= due {
            lateness.record((now - due) / 1000);
            due = (now / period_ns + 1).saturating_mul(period_ns);
            ticks += 1;
            for f in &files {
                sink = sink.wrapping_add(f.read_at(&mut buf, 0).unwrap_or(0));
            }
        }
        time.sleep_until(due);
    }
    let read_syscalls = thread_read_syscalls() - sys0;
    std::hint::black_box(sink);
    Side { lateness, cpu_s: thread_cpu_seconds() - cpu0, ticks, read_syscalls }
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
    let mut paths: Vec<PathBuf> = Vec::new();
    for n in 1..=channels {
        let p = chip.join(format!("power{n}_input"));
        std::fs::write(&p, format!("{}\n", 1_000_000 * n))?;
        paths.push(p);
    }
    let runner: Arc<dyn wattflip_drives::CommandRunner> = Arc::new(wattflip_drives::SystemRunner::new());
    let found = discover_all(dir.path(), &SensorKinds { rapl: false, ..Default::default() }, &runner);
    assert_eq!(found.power.len(), channels as usize);
    let files: Vec<std::fs::File> = paths.iter().map(std::fs::File::open).collect::<Result<_, _>>()?;
    let stop = Arc::new(AtomicBool::new(false));
    let period_ns = period_us * 1000;
    let t0 = Instant::now();
    let flag = stop.clone();
    let sampler = std::thread::spawn(move || {
        let c0 = thread_cpu_seconds();
        let sys0 = thread_read_syscalls();
        // Allocations are counted from here on; the first window's batch, the histogram and the
        // sensors' own state are allocated once, windows (1 s) allocate their batch.
        count_here(true);
        let mut windows = 0u64;
        let s = run(found.power, Duration::from_micros(period_us), Duration::from_secs(1), Clock::new(), flag, |_| {
            windows += 1;
            true
        });
        count_here(false);
        let ticks = s.lateness.ticks();
        (Side { lateness: s.lateness, cpu_s: thread_cpu_seconds() - c0, ticks, read_syscalls: thread_read_syscalls() - sys0 }, s.reads, s.errors, windows)
    });
    let flag = stop.clone();
    let bare = std::thread::spawn(move || floor_loop(period_ns, Vec::new(), flag));
    let flag = stop.clone();
    let reads = std::thread::spawn(move || floor_loop(period_ns, files, flag));
    std::thread::sleep(Duration::from_secs(secs));
    stop.store(true, Ordering::Relaxed);
    let (s, n_reads, errors, windows) = sampler.join().map_err(|_| "the sampler thread panicked")?;
    let bare = bare.join().map_err(|_| "the bare loop thread panicked")?;
    let reads = reads.join().map_err(|_| "the reads-floor thread panicked")?;
    let wall = t0.elapsed().as_secs_f64();
    let allocs = ALLOCS.load(Ordering::Relaxed);
    let pct = |side: &Side| 100.0 * side.cpu_s / wall;
    let line = |name: &str, side: &Side| {
        format!(
            "{name:<12} CPU {:.2} % of one core, {} ticks, {:.2} read syscalls per tick, lateness p50 {} µs, p99 {} µs, p99.9 {} µs, max {} µs",
            pct(side),
            side.ticks,
            side.read_syscalls as f64 / side.ticks.max(1) as f64,
            side.lateness.percentile(50.0),
            side.lateness.percentile(99.0),
            side.lateness.percentile(99.9),
            side.lateness.percentile(100.0),
        )
    };
    let p99 = |side: &Side| side.lateness.percentile(99.0) as i64;
    println!(
        "{channels} channels at {:.0} Hz for {wall:.1} s: {n_reads} reads ({errors} errors), {windows} window batches, \
         {allocs} heap allocations on the sampler thread ({:.4} per tick)\n{}\n{}\n{}\n\
         sampler / bare loop:   CPU x{:.3} (target ≤ 1.10), p99 lateness {:+} µs (target ≤ +20)\n\
         sampler / reads floor: CPU x{:.3}, p99 lateness {:+} µs (the sampler's own overhead)\n\
         reads floor / bare:    CPU x{:.3} (what {channels} preads per tick cost the kernel)",
        1e6 / period_us as f64,
        allocs as f64 / s.ticks.max(1) as f64,
        line("sampler", &s),
        line("bare loop", &bare),
        line("reads floor", &reads),
        s.cpu_s / bare.cpu_s,
        p99(&s) - p99(&bare),
        s.cpu_s / reads.cpu_s,
        p99(&s) - p99(&reads),
        reads.cpu_s / bare.cpu_s,
    );
    Ok(())
}
