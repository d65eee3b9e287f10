//! Counted bounds of the throttling detector (issue 25), never timed: 10 M samples for 100 drives
//! (10 hosts × 10 drives, two temperature sources at 10 Hz, drive power at 1 Hz, a probe run a
//! minute, a hot minute every ten) keep the retained state at the same size from one cycle to the
//! next, the allocations per batch the same, and the detector's work per sample independent of the
//! retention window. The expected episodes come from the generator, not from the detector: one per
//! drive and hot minute (its run there is 20 % slower than the one before).
//!
//! A detector that replays its window per batch fails `work_per_sample_does_not_grow_with_the_retention`
//! (its work grows with the crossings the window holds).

#![allow(unsafe_code)] // the counting allocator
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

#[path = "../../agent/tests/support/counting_alloc.rs"]
mod counting_alloc;

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use wattflip_collector::analysis::throttle::{Bounds, ThrottleDetector};
use wattflip_proto::domain::{convert_batch, Batch};
use wattflip_proto::v1;

#[global_allocator]
static ALLOC: counting_alloc::Counting = counting_alloc::Counting;

/// Held by the tests that count: the counters are process-wide, so two counting at once would
/// see each other's allocations.
static COUNTING: std::sync::Mutex<()> = std::sync::Mutex::new(());

const S: i64 = 1_000_000_000;
const T0: i64 = 1_700_000_000 * S;
const HOSTS: usize = 10;
const DRIVES: usize = 10;
/// One cycle: 600 s, hot from 300 s to 360 s.
const CYCLE_S: i64 = 600;
/// Samples in one host's batch of one second: per drive 2 sources × 10 readings + 1 power.
const PER_DRIVE: usize = 21;

fn celsius_at(second: i64) -> f64 {
    let c = second.rem_euclid(CYCLE_S);
    if (300..360).contains(&c) {
        75.0
    } else {
        60.0
    }
}

/// One host's batch for second 0 (times are shifted per second by [`shift`]).
fn template(host: usize) -> Batch {
    let mut b = v1::Batch { agent_id: format!("h{host}"), sequence: 1, ..Default::default() };
    for d in 0..DRIVES {
        for source in ["hwmon", "nvme_cli"] {
            for k in 0..10 {
                b.temperature.push(v1::TemperatureSample {
                    time_ns: T0 + k * S / 10,
                    source: source.into(),
                    device: format!("nvme{d}"),
                    sensor: "Composite".into(),
                    celsius: 60.0,
                });
            }
        }
        b.power.push(v1::PowerSample {
            time_ns: T0,
            source: "nvme_estimate".into(),
            zone: format!("nvme{d}"),
            scope: "drive".into(),
            method: v1::Method::Estimated as i32,
            watts: Some(8.0),
            ..Default::default()
        });
    }
    convert_batch(&format!("h{host}"), b).unwrap()
}

/// Moves a template to `second` in place: times, temperatures, and a run at each minute mark.
fn shift(b: &mut Batch, second: i64) {
    let base = T0 + second * S;
    for (i, t) in b.temperature.iter_mut().enumerate() {
        t.time.0 = base + (i % 10) as i64 * S / 10;
        t.celsius.0 = celsius_at(second);
    }
    for p in &mut b.power {
        p.time.0 = base;
    }
    b.probe_runs.clear();
    if second % 60 == 0 {
        let mib = if celsius_at(second) > 70.0 { 800.0 } else { 1000.0 };
        for d in 0..DRIVES {
            b.probe_runs.push(v1::ProbeRun {
                run_id: format!("r{second}-{d}"),
                device: format!("nvme{d}n1"),
                pattern: "SW".into(),
                io_size_bytes: 131_072,
                start_ns: base,
                end_ns: base + S / 2,
                mib_per_s: mib,
                ..Default::default()
            });
        }
    }
}

fn detector(bounds: Bounds) -> ThrottleDetector {
    let mut d = ThrottleDetector::with_bounds(bounds);
    for h in 0..HOSTS {
        let limits = (0..DRIVES)
            .map(|i| v1::DriveThermalLimits { device: format!("nvme{i}"), warning_celsius: 70.0, namespaces: vec![format!("nvme{i}n1")], ..Default::default() })
            .collect();
        d.set_inventory(&format!("h{h}"), &v1::Inventory { drive_thermal_limits: limits, ..Default::default() });
    }
    d
}

/// What a run of `seconds` seconds left: samples fed, (host, device, onset) of every episode
/// emitted, and the allocations counted per cycle.
struct Fed {
    samples: u64,
    episodes: BTreeSet<(usize, String, i64)>,
    allocs_per_cycle: Vec<u64>,
}

/// `count`: count allocations (one test at a time: the counter is process-wide).
fn feed(d: &mut ThrottleDetector, seconds: i64, count: bool, mut at_cycle_end: impl FnMut(&ThrottleDetector, i64)) -> Fed {
    let mut batches: Vec<Batch> = (0..HOSTS).map(template).collect();
    let mut fed = Fed { samples: 0, episodes: BTreeSet::new(), allocs_per_cycle: Vec::new() };
    let mut allocs = 0;
    for second in 0..seconds {
        for (h, b) in batches.iter_mut().enumerate() {
            shift(b, second);
            let host = format!("h{h}");
            counting_alloc::count_here(count);
            let before = counting_alloc::ALLOCS.load(Ordering::Relaxed);
            let out = d.observe_batch(&host, b);
            allocs += counting_alloc::ALLOCS.load(Ordering::Relaxed) - before;
            counting_alloc::count_here(false);
            for e in out {
                fed.episodes.insert((h, e.device, e.time_ns));
            }
            fed.samples += (b.temperature.len() + b.power.len()) as u64;
        }
        if (second + 1) % CYCLE_S == 0 {
            fed.allocs_per_cycle.push(std::mem::take(&mut allocs));
            at_cycle_end(d, second);
        }
    }
    fed
}

#[test]
fn ten_million_samples_for_a_hundred_drives_keep_the_state_flat() {
    let _counting = COUNTING.lock().unwrap_or_else(|p| p.into_inner());
    // 30-minute retention: three cycles of crossings, runs and power are kept per drive.
    let bounds = Bounds { retention_ns: 1800 * S, ..Bounds::default() };
    let mut d = detector(bounds);
    let seconds = 10_000_000 / (HOSTS * DRIVES * PER_DRIVE) as i64 + CYCLE_S;
    let seconds = seconds - seconds % CYCLE_S;
    let mut retained = Vec::new();
    let fed = feed(&mut d, seconds, true, |d, _| retained.push(d.retained()));
    assert!(fed.samples >= 10_000_000, "fed {}", fed.samples);
    // After the retention has filled (cycle 4 on), every cycle end holds exactly the same.
    let steady = &retained[4..];
    assert!(steady.iter().all(|r| r == &steady[0]), "retained state changes from cycle to cycle: {retained:?}");
    let r = steady[0];
    assert_eq!(r.drives, HOSTS * DRIVES);
    // Per drive and source: the two crossings of each of the three cycles in the retention (it
    // starts 0.1 s before a cycle, the newest reading being at 599.9 s of one) and the newest.
    assert_eq!(r.thermal, HOSTS * DRIVES * 2 * (2 * 3 + 1), "thermal log {r:?}");
    // Runs: one a minute for 30 minutes. Power (one a second, 8 W throughout): as sent within the
    // lateness bound (480 s..599 s of the last cycle: 120), behind it the 10 before the line
    // (470..479 s) and, per hot minute in the retention (three), the 10 before its onset and its
    // last sample (none lower after it): 120 + 10 + 3 × 11 (it was all 1,800 of the retention).
    assert_eq!(r.runs, HOSTS * DRIVES * 30, "{r:?}");
    assert_eq!(r.power, HOSTS * DRIVES * (120 + 10 + 3 * 11), "{r:?}");
    // Episodes: the periods whose end is within the retention (three per drive).
    assert_eq!(r.episodes, HOSTS * DRIVES * 3, "{r:?}");
    // Allocations per cycle stay the same once the state is steady.
    let a = &fed.allocs_per_cycle[4..];
    let (lo, hi) = (a.iter().min().unwrap(), a.iter().max().unwrap());
    assert!(hi - lo <= lo / 100, "allocations per cycle move: {a:?}");
    // One episode per drive and hot minute whose onset is settled (2 minutes behind the end).
    let settled_cycles = (seconds - 120 - 300) / CYCLE_S + 1;
    assert_eq!(fed.episodes.len() as i64, settled_cycles * (HOSTS * DRIVES) as i64);
    assert_eq!(d.late_readings, 0);
}

/// The same feed with a 10-minute and a 6-hour retention: the work (observations applied to a
/// thermal state plus signals visited while judging) is the same within 5 %, and a few units per
/// sample. Replaying the window per batch would grow with the retention's crossings.
#[test]
fn work_per_sample_does_not_grow_with_the_retention() {
    let seconds = 2 * 3600;
    let mut work = Vec::new();
    for retention_s in [600, 6 * 3600] {
        let mut d = detector(Bounds { retention_ns: retention_s * S, ..Bounds::default() });
        let fed = feed(&mut d, seconds, false, |_, _| {});
        work.push((d.work(), fed.samples, fed.episodes.len()));
    }
    let (short, long) = (work[0], work[1]);
    assert_eq!(short.2, long.2, "the same episodes: {work:?}");
    assert!(long.0 as f64 <= short.0 as f64 * 1.05, "work grows with the retention: {work:?}");
    assert!(long.0 <= 3 * long.1, "more than 3 units of work per sample: {work:?}");
}

/// A reading older than the retention is counted, never placed.
#[test]
fn readings_past_the_retention_are_counted() {
    let mut d = detector(Bounds { retention_ns: 600 * S, ..Bounds::default() });
    feed(&mut d, 1200, false, |_, _| {});
    let mut late = template(0);
    shift(&mut late, 100); // 1,100 s behind the newest: past the 600 s retention
    d.observe_batch("h0", &late);
    assert_eq!(d.late_readings, (late.temperature.len() + late.power.len() + late.probe_runs.len()) as u64);
}

/// A fleet of one-drive hosts (10,000 agents behind one collector): the detector's state for a
/// host that has sent one second of readings is a few hundred bytes plus its log, not a mostly
/// empty 11-entry map node of whole drives (that was ~9.4 KiB per host: heaptrack at 2,000 agents).
#[test]
fn a_one_drive_host_costs_little_state() {
    let _counting = COUNTING.lock().unwrap_or_else(|p| p.into_inner());
    const FLEET: usize = 1000;
    let mut d = ThrottleDetector::with_bounds(Bounds::default());
    let batches: Vec<(String, Batch)> = (0..FLEET)
        .map(|h| {
            let mut b = v1::Batch { agent_id: format!("f{h}"), sequence: 1, ..Default::default() };
            b.temperature.push(v1::TemperatureSample {
                time_ns: T0,
                source: "hwmon".into(),
                device: "nvme0".into(),
                sensor: "Composite".into(),
                celsius: 40.0,
            });
            (format!("f{h}"), convert_batch(&format!("f{h}"), b).unwrap())
        })
        .collect();
    counting_alloc::count_here(true);
    let before = counting_alloc::LIVE_BYTES.load(Ordering::Relaxed);
    for (host, b) in &batches {
        d.observe_batch(host, b);
    }
    let kept = counting_alloc::LIVE_BYTES.load(Ordering::Relaxed).wrapping_sub(before);
    counting_alloc::count_here(false);
    let per_host = kept / FLEET as u64;
    assert!(per_host <= 3 * 1024, "{per_host} bytes of detector state per one-drive host");
}

/// Drive power as a real agent sends it (issue 40): 10 hosts × 8 NVMe drives, per drive one
/// composite temperature and one `nvme_estimate` drive-power sample a second, for 6 hours of
/// event time with the default bounds (6 h retention). The detector's heap, counted by the
/// allocator, is at most 4 KiB per drive and the same after 5 h as after 6 h (it was ~40 bytes
/// per power reading up to 16,384 readings: ~650 KiB per drive at the cap).
#[test]
fn drive_power_at_one_hertz_for_six_hours_keeps_a_few_kib_per_drive() {
    let _counting = COUNTING.lock().unwrap_or_else(|p| p.into_inner());
    const AGENTS: usize = 10;
    const NVME: usize = 8;
    let mut batches: Vec<Batch> = (0..AGENTS)
        .map(|h| {
            let mut b = v1::Batch { agent_id: format!("p{h}"), sequence: 1, ..Default::default() };
            for d in 0..NVME {
                b.temperature.push(v1::TemperatureSample {
                    time_ns: T0,
                    source: "hwmon".into(),
                    device: format!("nvme{d}"),
                    sensor: "Composite".into(),
                    celsius: 45.0,
                });
                b.power.push(v1::PowerSample {
                    time_ns: T0,
                    source: "nvme_estimate".into(),
                    zone: format!("nvme{d}"),
                    scope: "drive".into(),
                    method: v1::Method::Estimated as i32,
                    watts: Some(6.0),
                    ..Default::default()
                });
            }
            convert_batch(&format!("p{h}"), b).unwrap()
        })
        .collect();
    let hosts: Vec<String> = (0..AGENTS).map(|h| format!("p{h}")).collect();
    counting_alloc::count_here(true);
    let before = counting_alloc::LIVE_BYTES.load(Ordering::Relaxed);
    let mut d = ThrottleDetector::with_bounds(Bounds::default());
    let mut at_5h = 0;
    for second in 0..6 * 3600 {
        for (h, b) in batches.iter_mut().enumerate() {
            let t = T0 + second * S;
            for (i, x) in b.temperature.iter_mut().enumerate() {
                x.time.0 = t;
                // 44..46 °C, well below any threshold: no hot period.
                x.celsius.0 = 44.0 + ((second + i as i64) % 3) as f64;
            }
            for (i, p) in b.power.iter_mut().enumerate() {
                p.time.0 = t;
                // 5.5..7.0 W: a drive under a varying load.
                p.watts = Some(wattflip_proto::units::Watts(5.5 + ((second * 7 + i as i64) % 4) as f64 * 0.5));
            }
            assert!(d.observe_batch(&hosts[h], b).is_empty());
        }
        if second == 5 * 3600 - 1 {
            at_5h = counting_alloc::LIVE_BYTES.load(Ordering::Relaxed).wrapping_sub(before);
        }
    }
    let at_6h = counting_alloc::LIVE_BYTES.load(Ordering::Relaxed).wrapping_sub(before);
    counting_alloc::count_here(false);
    let drives = (AGENTS * NVME) as u64;
    assert_eq!(d.retained().drives, AGENTS * NVME);
    assert_eq!(d.late_readings, 0);
    let (per_drive_5h, per_drive_6h) = (at_5h / drives, at_6h / drives);
    eprintln!("detector state per drive: {per_drive_5h} bytes after 5 h, {per_drive_6h} bytes after 6 h");
    assert!(per_drive_6h <= 4096, "{per_drive_6h} bytes of detector state per drive after 6 h (5 h: {per_drive_5h})");
    assert!(at_6h.abs_diff(at_5h) <= drives * 64, "state still grows: {per_drive_5h} → {per_drive_6h} bytes per drive from 5 h to 6 h");
}
