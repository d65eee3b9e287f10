//! Energy counters whose file is re-created (issue 27): a writer replaces `energy_uj` (RAPL, kernel
//! `Documentation/power/powercap/powercap.rst`: `energy_uj`, `max_energy_range_uj`, `name`,
//! `enabled` per zone) and `energy1_input` (hwmon, `Documentation/hwmon/sysfs-interface.rst`:
//! cumulative µJ) by rename every 10 ms, as a driver rebind or a renaming writer does, at a known
//! constant power. A read that begins after a replacement must see the new file: the delta across
//! a reopened file is the energy of its interval, never lost and never late by more than one read. The tree is built here (no copy of a capture needed: the files hold one integer).

// Integration tests and their helpers: a panic with a message is the test's failure report
// (clippy.toml's allow-*-in-tests covers #[test] functions only, not the helpers they call).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wattflip_agent::sensors::{discover_all, SensorKinds};

/// A sysfs tree with one RAPL package zone and one hwmon chip with an energy counter.
fn tree(root: &Path) -> (PathBuf, PathBuf) {
    let rapl = root.join("class/powercap/intel-rapl:0");
    let hwmon = root.join("class/hwmon/hwmon0");
    std::fs::create_dir_all(&rapl).unwrap();
    std::fs::create_dir_all(&hwmon).unwrap();
    for (f, v) in [("name", "package-0"), ("energy_uj", "0"), ("max_energy_range_uj", "262143328850"), ("enabled", "1")] {
        std::fs::write(rapl.join(f), format!("{v}\n")).unwrap();
    }
    for (f, v) in [("name", "ina228"), ("energy1_input", "0"), ("energy1_label", "SSD 12V")] {
        std::fs::write(hwmon.join(f), format!("{v}\n")).unwrap();
    }
    (rapl.join("energy_uj"), hwmon.join("energy1_input"))
}

/// Replaces `path` with `value` behind a new inode.
fn replace(path: &Path, value: u64) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, format!("{value}\n")).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn energy_across_a_counter_file_replaced_every_10ms_is_read_at_the_next_read() {
    let dir = tempfile::tempdir().unwrap();
    let (rapl, hwmon) = tree(dir.path());
    let runner: Arc<dyn wattflip_drives::CommandRunner> = Arc::new(wattflip_drives::SystemRunner::new());
    let mut found = discover_all(dir.path(), &SensorKinds::default(), &runner).power;
    assert_eq!(found.len(), 2, "{:?}", found.iter().map(|s| s.describe().zone).collect::<Vec<_>>());
    // The first reads only set each counter's start (0 µJ).
    for s in found.iter_mut() {
        assert_eq!(s.read(0).unwrap(), None);
    }
    // The writer: 85 W on the package, 12 W on the rail, each file replaced every 10 ms; after each
    // replacement it publishes the value now behind the path.
    let stop = Arc::new(AtomicBool::new(false));
    let published: Arc<[AtomicU64; 2]> = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let (flag, shown, (r, h)) = (stop.clone(), published.clone(), (rapl.clone(), hwmon.clone()));
    let start = Instant::now();
    let writer = std::thread::spawn(move || {
        while !flag.load(Ordering::Relaxed) {
            let us = start.elapsed().as_micros() as u64;
            replace(&r, us * 85);
            shown[0].store(us * 85, Ordering::SeqCst);
            replace(&h, us * 12);
            shown[1].store(us * 12, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    // Reads every 1 ms for 0.5 s. A read that begins after a replacement sees its value: the
    // readings' sum (from 0 µJ, the value at the first read) reaches what was published before it.
    let mut sums = [0u64; 2];
    let mut late = Vec::new();
    for k in 0..500u64 {
        let before = [published[0].load(Ordering::SeqCst), published[1].load(Ordering::SeqCst)];
        for (i, s) in found.iter_mut().enumerate() {
            if let Some(r) = s.read((k + 1) * 1_000_000).unwrap() {
                sums[i] += (r.joules.unwrap().0 * 1e6).round() as u64;
            }
            if sums[i] < before[i] {
                late.push(format!("read {k}, {}: {} µJ read, {} µJ behind the path", s.describe().zone, sums[i], before[i]));
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    assert!(late.is_empty(), "{} of 1000 readings behind the file:\n{}", late.len(), late[..late.len().min(10)].join("\n"));
}
