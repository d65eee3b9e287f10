//! Power sources that appear after start-up are sampled like those found at start: a zone that
//! joins a running sampler reads on its own grid at its `power_interval` from the next window on
//! (exact counts on a virtual time base), and through `run`'s own pieces (rediscovery, placement,
//! the sampler threads) a zone that appears in a fixture tree gets window aggregates at the fast
//! rate, in the same windows as the zones found at start.

// Integration tests and their helpers: a panic with a message is the test's failure report
// (clippy.toml's allow-*-in-tests covers #[test] functions only, not the helpers they call).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wattflip_agent::app::samplers::{place, FastSamplers};
use wattflip_agent::app::ticks::{rediscover, Rediscovery, SamplerState};
use wattflip_agent::sensors::sampler::{run_joinable, Timebase};
use wattflip_agent::sensors::{discover_all, Discovered, SensorKinds};
use wattflip_proto::v1;

fn fixture(scenario: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sysfs").join(scenario).join("sys")
}

fn discover(root: &Path) -> Discovered {
    let runner: Arc<dyn wattflip_drives::CommandRunner> = Arc::new(wattflip_drives::SystemRunner::new());
    discover_all(root, &SensorKinds::default(), &runner)
}

/// Every sleep returns at once at the instant asked for: reading counts per window are exact.
struct VirtualTime(u64);

impl Timebase for VirtualTime {
    fn now(&mut self) -> (u64, i64) {
        (self.0, 1_700_000_000_000_000_000 + self.0 as i64)
    }

    fn sleep_until(&mut self, mono_ns: u64) {
        self.0 = self.0.max(mono_ns);
    }
}

/// (zone, readings) of each aggregate of a window.
type Window = Vec<(String, u32)>;

#[test]
fn a_zone_joining_a_running_sampler_gets_every_reading_of_its_grid_from_the_next_window() {
    let ms = Duration::from_millis;
    let rapl: Vec<_> = discover(&fixture("rapl-only")).power.into_iter().filter(|s| s.describe().zone == "package-0").map(|s| (s, ms(10))).collect();
    assert_eq!(rapl.len(), 1);
    let mut hwmon = discover(&fixture("ina226")).power;
    assert_eq!(hwmon.len(), 1);
    let (joins, joined) = std::sync::mpsc::channel();
    let mut late = Some(hwmon.remove(0));
    let mut windows: Vec<Window> = Vec::new();
    let stats = run_joinable(rapl, ms(100), &mut VirtualTime(0), Arc::new(AtomicBool::new(false)), &joined, |b| {
        windows.push(b.power.iter().map(|p| (p.zone.clone(), p.readings)).collect());
        // The hwmon zone turns up at the close of the second window, to be read every 1 ms.
        if windows.len() == 2 {
            joins.send((late.take().unwrap(), ms(1))).unwrap();
        }
        windows.len() < 5
    });
    let w = |rapl: u32, hwmon: Option<u32>| {
        let mut v = vec![("package-0".to_string(), rapl)];
        v.extend(hwmon.map(|n| ("ina226-0-0040/power1".to_string(), n)));
        v
    };
    // RAPL: 9 readings in the first window (the first read sets the counter's baseline), then 10.
    // hwmon: nothing before it joins, then all 100 instants of its 1 ms grid in every window.
    assert_eq!(windows, vec![w(9, None), w(10, None), w(10, Some(100)), w(10, Some(100)), w(10, Some(100))]);
    assert_eq!((stats.reads, stats.errors), (5 * 10 + 3 * 100, 0));
}

fn config(sys: &Path) -> wattflip_agent::config::Config {
    let text = format!(
        "[sampling]\ninterval = \"200ms\"\npower_interval = \"10ms\"\n[sources]\nsysfs_root = \"{}\"\n[tls]\ninsecure_plaintext_loopback_only = true\n",
        sys.display()
    );
    wattflip_agent::config::Config::from_str(Path::new("agent.toml"), &text).unwrap()
}

#[test]
fn zones_that_appear_after_start_up_are_sampled_at_their_power_interval() {
    let dir = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("cp").arg("-a").arg(fixture("vanished-zone")).arg(dir.path()).status().unwrap();
    assert!(status.success());
    let sys = dir.path().join("sys");
    // At start-up: one RAPL package; the second package's driver and an INA226 come later.
    let pkg1 = sys.join("class/powercap/intel-rapl:1");
    std::fs::rename(&pkg1, dir.path().join("later-rapl-1")).unwrap();
    let cfg = config(&sys);
    let clock = wattflip_agent::clock::Clock::new();
    let mut found = discover(&sys);
    let mut state = SamplerState { tick: cfg.sampling_interval, ..Default::default() };
    let known = found.power.iter().map(|s| s.describe()).map(|d| (d.source, d.zone)).collect();
    let (sysfs_root, kinds) = (sys.clone(), cfg.kinds.clone());
    state.rediscovery = Some(Rediscovery { sysfs_root, kinds, every: Duration::ZERO, known, last_ns: 0 });
    let (tx, mut rx) = tokio::sync::mpsc::channel::<v1::Batch>(1024);
    let mut fast = FastSamplers::new(cfg.sampling_interval, clock, tx);
    let power = std::mem::take(&mut found.power);
    place(&cfg, power, &mut found, &mut state, &mut fast);
    assert!(found.power.is_empty(), "at 10 ms every zone is sampled by a fast sampler, none on the 200 ms tick");

    std::thread::sleep(Duration::from_millis(300));
    std::fs::rename(dir.path().join("later-rapl-1"), &pkg1).unwrap();
    let status = std::process::Command::new("cp").arg("-a").arg(fixture("ina226").join("class/hwmon")).arg(sys.join("class")).status().unwrap();
    assert!(status.success());
    let mut batch = v1::Batch::default();
    let new = rediscover(&cfg, &clock, &mut batch, &mut state);
    let joined_at = Instant::now();
    let mut names: Vec<String> = new.iter().map(|s| s.describe().zone).collect();
    names.sort();
    assert_eq!(names, vec!["ina226-0-0040/power1".to_string(), "package-1".into()]);
    place(&cfg, new, &mut found, &mut state, &mut fast);
    assert!(found.power.is_empty(), "the new zones joined the fast samplers, not the tick");
    let messages: Vec<&str> = batch.events.iter().map(|e| e.message.as_str()).collect();
    assert!(messages.iter().all(|m| m.ends_with("read every 10ms from now on")), "{messages:?}");
    assert_eq!(messages.len(), 2);

    // Six windows after the join, then stop and collect every aggregate.
    std::thread::sleep(Duration::from_millis(1200).saturating_sub(joined_at.elapsed()));
    for h in fast.stop() {
        h.join().unwrap();
    }
    let mut per_zone: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    let mut batches: Vec<Vec<String>> = Vec::new();
    while let Ok(b) = rx.try_recv() {
        batches.push(b.power.iter().map(|p| p.zone.clone()).collect());
        for p in b.power {
            per_zone.entry(p.zone).or_default().push(p.readings);
        }
    }
    // The 10 ms grid has 20 instants per 200 ms window; a late read skips rather than catches up,
    // and a window a zone joined in midway has fewer. On the tick a zone would get 1 reading per
    // window (no aggregate at all: `readings` 0).
    for zone in ["package-0", "package-1", "ina226-0-0040/power1"] {
        let w = per_zone.get(zone).unwrap_or_else(|| panic!("no aggregate of {zone}: {per_zone:?}"));
        let full: Vec<u32> = w.iter().skip(1).copied().collect();
        assert!(full.len() >= 4, "{zone}: {w:?}");
        // Never more than the grid has; at least a quarter even on a loaded machine.
        assert!(full.iter().all(|&n| (5..=20).contains(&n)), "{zone}: {w:?}");
        assert_eq!(full.iter().max(), Some(&20), "{zone}: at least one window with every reading of the grid: {w:?}");
    }
    // The second package joined the RAPL sampler itself: from its first window on, its aggregate
    // travels in the same batch (the same window) as the first package's.
    let rapl: Vec<&Vec<String>> = batches.iter().filter(|b| b.contains(&"package-1".to_string())).collect();
    assert!(rapl.len() >= 5 && rapl.iter().all(|b| **b == ["package-0", "package-1"]), "{batches:?}");
}

/// `sampling.recheck_interval` bounds how long a replaced file's old value is read: with 20 ms, a
/// read 40 ms after the rename sees the new file; with 60 s it still reads the old one (the bound
/// is the setting, not a fixed 100 ms).
#[test]
fn a_replaced_attribute_is_seen_within_the_recheck_interval() {
    let read_after_replace = |recheck: Duration| {
        let dir = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("cp").arg("-a").arg(fixture("ina226")).arg(dir.path()).status().unwrap();
        assert!(status.success());
        let sys = dir.path().join("sys");
        let runner: Arc<dyn wattflip_drives::CommandRunner> = Arc::new(wattflip_drives::SystemRunner::new());
        let mut found = discover_all(&sys, &SensorKinds { recheck, ..Default::default() }, &runner).power;
        assert_eq!(found.len(), 1);
        let before = found[0].read(0).unwrap().unwrap().watts.0;
        // A writer that replaces the file (a new inode) instead of writing in place.
        let input = sys.join("class/hwmon/hwmon0/power1_input");
        let tmp = input.with_extension("new");
        std::fs::write(&tmp, "25000000\n").unwrap();
        std::fs::rename(&tmp, &input).unwrap();
        std::thread::sleep(Duration::from_millis(40));
        (before, found[0].read(0).unwrap().unwrap().watts.0)
    };
    assert_eq!(read_after_replace(Duration::from_millis(20)), (18.0, 25.0));
    assert_eq!(read_after_replace(Duration::from_secs(60)), (18.0, 18.0));
}

/// A sampler started after the run's origin (the first zone of a source found after start-up)
/// stays on the run's window grid: its first window is the one that holds its start, partial,
/// and it records no lateness for the grid instants before it existed.
#[test]
fn a_sampler_started_late_keeps_the_common_window_grid() {
    let ms = Duration::from_millis;
    let hwmon: Vec<_> = discover(&fixture("ina226")).power.into_iter().map(|s| (s, ms(10))).collect();
    let (_joins, joined) = std::sync::mpsc::channel();
    let mut windows = Vec::new();
    let stats = run_joinable(hwmon, ms(100), &mut VirtualTime(250_000_000), Arc::new(AtomicBool::new(false)), &joined, |b| {
        windows.push((b.power[0].readings, b.power[0].time_ns - 1_700_000_000_000_000_000));
        windows.len() < 3
    });
    // Window [200, 300 ms) from 250 ms: 250 .. 290; then every 10 ms instant of the next two.
    assert_eq!(windows, vec![(5, 290_000_000), (10, 390_000_000), (10, 490_000_000)]);
    assert_eq!((stats.windows, stats.lateness.percentile(100.0)), (3, 0));
}
