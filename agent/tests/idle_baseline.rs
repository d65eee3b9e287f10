//! Issue 37: the idle baseline is measured on an idle device. A real probe on a new scratch file
//! with a fixture power source whose truth is independent of the agent: 5 W idle, 8 W from the
//! moment the file appears until 200 ms after it reaches its full size (the fill, then the
//! device's write-back), watched by a thread of this test that polls the file, not by the probe.
//! Before the fix the probe filled the target after its idle window, right before its first run,
//! so the idle baseline read the fill. Add a case by changing the truth's power levels.

// Integration tests and their helpers: a panic with a message is the test's failure report
// (clippy.toml's allow-*-in-tests covers #[test] functions only, not the helpers they call).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wattflip_agent::probes::{self, EnergyOptions, Host, PauseChoice, ProbeArgs, ValuesProfile};
use wattflip_agent::sensors::{Flags, PowerReading, PowerSensor, SensorError};
use wattflip_proto::units::Watts;

const IDLE_W: f64 = 5.0;
const FILL_W: f64 = 8.0;
/// The device keeps writing back this long after the file reached its size.
const WRITE_BACK: Duration = Duration::from_millis(200);
const SIZE: u64 = 32 << 20;

/// When the file first appeared and when it first had its full size, as the watcher saw them.
#[derive(Default)]
struct Seen {
    appeared: Option<Instant>,
    full: Option<Instant>,
}

/// Polls `path` every 0.5 ms until `stop`.
fn watch(path: PathBuf, seen: Arc<Mutex<Seen>>, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            if let Ok(m) = std::fs::metadata(&path) {
                let now = Instant::now();
                let mut s = seen.lock().unwrap();
                s.appeared.get_or_insert(now);
                if m.len() >= SIZE {
                    s.full.get_or_insert(now);
                }
            }
            std::thread::sleep(Duration::from_micros(500));
        }
    })
}

/// The truth at `now`: fill power from the file's appearance to `WRITE_BACK` after it was full.
struct Truth(Arc<Mutex<Seen>>);

impl PowerSensor for Truth {
    fn describe(&self) -> wattflip_proto::v1::PowerSource {
        wattflip_proto::v1::PowerSource { source: "fixture".into(), zone: "ssd-12v".into(), scope: "rail".into(), ..Default::default() }
    }
    fn read(&mut self, _now_ns: u64) -> Result<Option<PowerReading>, SensorError> {
        let s = self.0.lock().unwrap();
        let busy = s.appeared.is_some() && s.full.is_none_or(|f| f.elapsed() < WRITE_BACK);
        let w = if busy { FILL_W } else { IDLE_W };
        Ok(Some(PowerReading { watts: Watts(w), joules: None, interval_ns: 0, flags: Flags::NONE }))
    }
    fn update_period(&self) -> Duration {
        Duration::from_millis(1)
    }
}

fn work_dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("idle-baseline").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    assert!(wattflip_uflip::target::supports_direct_io(&d), "{} must support O_DIRECT (not tmpfs)", d.display());
    d
}

#[test]
fn the_idle_window_comes_after_the_fill_and_reads_the_idle_device() {
    let dir = work_dir("fill");
    let target = dir.join("scratch.dat");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch(target.clone(), seen.clone(), stop.clone());
    let args = ProbeArgs {
        target: target.clone(),
        size: SIZE,
        benches: vec![wattflip_uflip::Bench::Granularity],
        quick: true,
        values: ValuesProfile::Quick,
        overrides: Default::default(),
        format: None,
        repetitions: Some(1),
        out: dir.join("out"),
        emit_fio_iolog: None,
        io_trace: None,
        destroy_consent: vec![],
        overwrite_signatures: false,
        seed: Some(7),
        read_only: false,
        pause: PauseChoice::Fixed(Duration::from_millis(5)),
        counts: None,
        stop: None,
    };
    let opts = EnergyOptions {
        sysfs_root: dir.join("no-sys"),
        kinds: Default::default(),
        period: Duration::from_millis(1),
        // Shorter than the fill (≈ 200 ms here): a window over the fill reads it.
        idle: Duration::from_millis(50),
        settle: Duration::from_millis(400),
        tail: Duration::from_millis(50),
        zone: None,
        drives: Default::default(),
        energy_target: None,
        energy_budget: std::time::Duration::from_secs(600),
    };
    let host = Host { clock: wattflip_agent::clock::Clock::new(), runner: Arc::new(wattflip_drives::SystemRunner::new()) };
    let m = probes::run_probe_recorded(&args, false, &opts, vec![Box::new(Truth(seen.clone()))], &host).unwrap();
    stop.store(true, Ordering::Relaxed);
    watcher.join().unwrap();
    let e = m.energy.expect("energy");
    let idle = e.idle.as_ref().expect("idle profile");
    assert_eq!(idle.median_w, IDLE_W, "idle baseline over the fill: {idle:?}");
    assert!(!e.runs.is_empty());
    for r in &e.runs {
        assert_eq!(r.idle_baseline_w, IDLE_W, "run {}", r.run_id);
    }
    let p = e.preparation.expect("preparation recorded");
    assert!(p.idle_from_ns - p.to_ns >= 400_000_000, "{p:?}");
    let summary = wattflip_agent::energy::summary_table(&e);
    assert!(summary.contains("measured on the idle device: after the target was prepared"), "{summary}");
}
