//! Real probes on files under O_DIRECT (in the target dir, on a disk-backed filesystem, never on
//! tmpfs): quick plan end to end, iolog and trace output, unsupported runs, parallel runs,
//! formats, preparation + calibration, and the tmpfs refusal.

// Integration tests and their helpers: a panic with a message is the test's failure report
// (clippy.toml's allow-*-in-tests covers #[test] functions only, not the helpers they call).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use wattflip_uflip::*;

fn work_dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("uflip-tests").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    assert!(target::supports_direct_io(&d), "{} must support O_DIRECT (not tmpfs)", d.display());
    d
}

#[derive(Default)]
struct Rec {
    planned: usize,
    started: Vec<usize>,
    finished: Vec<usize>,
}

impl Observer for Rec {
    fn planned(&mut self, total_runs: usize) {
        self.planned = total_runs;
    }
    fn run_started(&mut self, index: usize, _spec: &RunSpec) {
        self.started.push(index);
    }
    fn run_finished(&mut self, index: usize, _result: &RunResult) {
        self.finished.push(index);
    }
}

const MIB: u64 = 1 << 20;

#[test]
fn quick_plan_on_a_file() {
    let dir = work_dir("quick");
    let path = dir.join("probe.img");
    let t = Target::open(&TargetOptions::file(&path, 64 * MIB)).unwrap();
    assert_eq!(t.kind, TargetKind::File);
    assert_eq!(t.size, 64 * MIB);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 64 * MIB);
    let mut o = PlanOptions::quick(t.size);
    o.emit_fio_iolog = Some(dir.join("iolog"));
    o.trace_dir = Some(dir.join("trace"));
    let p = plan(&o);
    let mut rec = Rec::default();
    let rep = run(&t, &p, &mut rec).unwrap();
    assert_eq!(rec.planned, 12);
    assert_eq!(rec.started, (0..12).collect::<Vec<_>>());
    assert_eq!(rec.finished, (0..12).collect::<Vec<_>>());
    assert_eq!(rep.runs.len(), 12);
    assert!(rep.started_ns <= rep.runs[0].start_ns && rep.runs[11].end_ns <= rep.ended_ns);
    for (r, spec) in rep.runs.iter().zip(&p.runs) {
        assert_eq!(r.status, RunStatus::Ok, "{}", r.experiment);
        assert_eq!(r.target_kind, "file");
        assert_eq!(r.bench, "granularity");
        assert_eq!(r.varying, "io_size");
        assert_eq!(r.io_size_bytes as f64, r.value);
        let (count, ignore) = match r.pattern.as_str() {
            "SR" => (64, 0),
            "RR" => (128, 0),
            "SW" => (64, 0),
            "RW" => (128, 8),
            other => panic!("unexpected pattern {other}"),
        };
        assert_eq!((r.io_count, r.ignore_io, r.measured_ios), (count, ignore, count - ignore));
        assert!(r.min_us > 0.0 && r.min_us <= r.p50_us && r.p50_us <= r.p99_us && r.mean_us <= r.max_us);
        assert!(r.p99_us <= r.max_us * 1.001);
        assert!(r.iops > 0.0 && r.mib_per_s > 0.0);
        assert!((r.mib_per_s - r.iops * r.value / MIB as f64).abs() < 1e-6 * r.mib_per_s);
        assert!(r.start_ns < r.end_ns);
        assert_eq!(r.parameters["io_size"], r.io_size_bytes.to_string());
        assert_eq!(r.parameters["io_count"], count.to_string());
        // The iolog is exactly the generated sequence.
        let Work::Pattern(ps) = &spec.work else { panic!() };
        let ios = ps[0].generate().unwrap();
        assert_eq!(r.iolog_files.len(), 1);
        assert_eq!(std::fs::read_to_string(&r.iolog_files[0]).unwrap(), iolog::iolog_text(&path, &ios));
        // The trace has one line per IO with the same offsets.
        let trace = std::fs::read_to_string(r.trace_file.as_ref().unwrap()).unwrap();
        let offs: Vec<u64> = trace.lines().skip(1).map(|l| l.split(',').nth(2).unwrap().parse().unwrap()).collect();
        assert_eq!(offs, ios.iter().map(|io| io.offset).collect::<Vec<_>>());
    }
    let table = summary_table(&rep);
    assert_eq!(table.lines().count(), 13);
    assert!(table.lines().nth(1).unwrap().starts_with("granularity/SR"));
}

/// Chooses 2 ms after a write run and 1 ms after a read run, naming the run it followed.
struct Chooser(Vec<(usize, usize)>);

impl Observer for Chooser {
    fn planned(&mut self, _total_runs: usize) {}
    fn run_started(&mut self, _index: usize, _spec: &RunSpec) {}
    fn run_finished(&mut self, _index: usize, _result: &RunResult) {}
    fn pause_between(&mut self, done: &RunSpec, result: &RunResult, next: &RunSpec) -> Pause {
        assert_eq!(result.run_id, done.index);
        self.0.push((done.index, next.index));
        let ms = if done.writes() { 2 } else { 1 };
        Pause { duration: std::time::Duration::from_millis(ms), source: format!("after-{}", done.index) }
    }
}

#[test]
fn each_run_records_the_pause_its_observer_chose_before_it() {
    let dir = work_dir("chosen-pauses");
    let t = Target::open(&TargetOptions::file(dir.join("probe.img"), 16 * MIB)).unwrap();
    let mut o = PlanOptions::quick(t.size);
    o.values.granularity_io_sizes = vec![4096];
    o.counts.io_count = [8, 8, 8, 8];
    o.counts.ignore_io = [0; 4];
    let p = plan(&o);
    let mut c = Chooser(Vec::new());
    let rep = run(&t, &p, &mut c).unwrap();
    // Asked once between each pair of consecutive runs, never after the last.
    assert_eq!(c.0, vec![(0, 1), (1, 2), (2, 3)]);
    let got: Vec<(&str, &str, &str, &str)> = rep
        .runs
        .iter()
        .map(|r| (r.pattern.as_str(), r.parameters["pause_before_us"].as_str(), r.parameters["pause_source"].as_str(), r.parameters["pause_method"].as_str()))
        .collect();
    assert_eq!(
        got,
        vec![("SR", "0", "first", "none"), ("RR", "1000", "after-0", "spin"), ("RW", "1000", "after-1", "spin"), ("SW", "2000", "after-2", "spin"),]
    );
    // The plan's own pause stays recorded as planned (10 ms in the quick plan).
    assert!(rep.runs.iter().all(|r| r.parameters["pause_after_us"] == "10000"));
}

#[test]
fn unsupported_alignment_is_reported_not_failed() {
    let dir = work_dir("unsupported");
    let mut opts = TargetOptions::file(dir.join("probe.img"), 16 * MIB);
    opts.logical_block_size = Some(4096); // behave like a 4Kn device (§9)
    let t = Target::open(&opts).unwrap();
    let mut o = PlanOptions::quick(t.size);
    o.benches = vec![Bench::Granularity, Bench::Alignment];
    o.values.granularity_io_sizes = vec![512, 4096];
    o.values.alignment_shifts = vec![0, 512];
    o.counts.io_count = [8, 8, 8, 8];
    o.counts.ignore_io = [0; 4];
    o.pause_between_runs = std::time::Duration::ZERO;
    let rep = run(&t, &plan(&o), &mut NullObserver).unwrap();
    let get = |exp: &str, v: f64| rep.runs.iter().find(|r| r.experiment == exp && r.value == v).unwrap();
    let path = dir.join("probe.img");
    assert_eq!(
        get("granularity/RR", 512.0).status,
        RunStatus::Unsupported { reason: format!("IOSize 512 B is not a multiple of the logical block size 4096 B of {}", path.display()) }
    );
    assert_eq!(
        get("alignment/SW", 512.0).status,
        RunStatus::Unsupported { reason: format!("IOShift 512 B is not a multiple of the logical block size 4096 B of {}", path.display()) }
    );
    assert_eq!(get("granularity/RR", 4096.0).status, RunStatus::Ok);
    assert_eq!(get("alignment/SW", 0.0).status, RunStatus::Ok);
    assert_eq!(get("granularity/RR", 512.0).io_count, 0);
    assert!(summary_table(&rep).contains("unsupported: IOShift 512 B"));
}

#[test]
fn parallel_degree_runs_threads_on_slices() {
    let dir = work_dir("parallel");
    let t = Target::open(&TargetOptions::file(dir.join("probe.img"), 32 * MIB)).unwrap();
    let mut o = PlanOptions::quick(t.size);
    o.benches = vec![Bench::Parallelism];
    o.values.parallel_degrees = vec![4];
    o.counts.io_count = [16, 16, 16, 16];
    o.counts.ignore_io = [2, 2, 2, 2];
    o.emit_fio_iolog = Some(dir.join("iolog"));
    let rep = run(&t, &plan(&o), &mut NullObserver).unwrap();
    assert_eq!(rep.runs.len(), 4);
    for r in &rep.runs {
        assert_eq!(r.status, RunStatus::Ok);
        assert_eq!((r.io_count, r.measured_ios), (64, 56));
        assert_eq!(r.iolog_files.len(), 4);
        assert_eq!(r.parameters["parallel_degree"], "4");
        assert_eq!(r.parameters["target_offset"].split(',').count(), 4);
        assert!(r.iolog_files[3].to_string_lossy().ends_with("-p3.iolog"));
    }
}

#[test]
fn pauses_and_bursts_are_outside_the_timing() {
    let dir = work_dir("pause");
    let t = Target::open(&TargetOptions::file(dir.join("probe.img"), 16 * MIB)).unwrap();
    let mut o = PlanOptions::quick(t.size);
    o.benches = vec![Bench::Pause, Bench::Bursts];
    o.values.pause_io_us = vec![2000];
    o.values.burst_io = vec![4];
    o.pause_burst_us = 5000;
    o.counts.io_count = [20, 20, 20, 20];
    o.counts.ignore_io = [0; 4];
    o.trace_dir = Some(dir.join("trace"));
    let p = plan(&o).read_only();
    let rep = run(&t, &p, &mut NullObserver).unwrap();
    assert_eq!(rep.runs.len(), 4);
    for r in &rep.runs {
        let trace = std::fs::read_to_string(r.trace_file.as_ref().unwrap()).unwrap();
        let rows: Vec<(u64, u64)> = trace
            .lines()
            .skip(1)
            .map(|l| {
                let f: Vec<&str> = l.split(',').collect();
                (f[5].parse().unwrap(), f[6].parse().unwrap())
            })
            .collect();
        assert_eq!(rows.len(), 20);
        for i in 0..19 {
            // The gap between IO i's completion and IO i+1's submission holds the busy-wait:
            // 2 ms after every IO (PIO) or 5 ms after every 4th IO (PBU), never inside the latency.
            let gap = rows[i + 1].0 - (rows[i].0 + rows[i].1);
            let want = if r.bench == "pause" {
                2_000_000
            } else if (i + 1) % 4 == 0 {
                5_000_000
            } else {
                0
            };
            assert!(gap >= want, "{} IO {i}: gap {gap} ns < {want}", r.experiment);
            assert!(rows[i].1 < 2_000_000_000);
        }
    }
}

#[test]
fn formats_cover_the_file() {
    let dir = work_dir("format");
    let t = Target::open(&TargetOptions::file(dir.join("probe.img"), 4 * MIB)).unwrap();
    for kind in [FormatKind::Sequential, FormatKind::Random] {
        let mut o = PlanOptions::quick(t.size);
        o.benches = vec![];
        o.format = Some(kind);
        o.prepare_pause = std::time::Duration::ZERO;
        o.emit_fio_iolog = Some(dir.join(kind.as_str()));
        let rep = run(&t, &plan(&o), &mut NullObserver).unwrap();
        assert_eq!(rep.runs.len(), 1);
        let r = &rep.runs[0];
        assert_eq!(r.status, RunStatus::Ok);
        assert_eq!(r.pattern, "FORMAT");
        assert_eq!(r.experiment, format!("format/{}", kind.as_str()));
        // Every byte written exactly once: the iolog's lengths add up to the file size.
        let log = std::fs::read_to_string(&r.iolog_files[0]).unwrap();
        let total: u64 = log.lines().filter(|l| l.contains(" write ")).map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap()).sum();
        assert_eq!(total, 4 * MIB);
        assert_eq!(r.io_count, log.lines().filter(|l| l.contains(" write ")).count() as u64);
    }
}

#[test]
fn preparation_runs_feed_calibration() {
    let dir = work_dir("prepare");
    let t = Target::open(&TargetOptions::file(dir.join("probe.img"), 32 * MIB)).unwrap();
    let mut o = PlanOptions::quick(t.size);
    o.benches = vec![];
    o.prepare = true;
    o.io_size = 4096;
    o.spe_io_count = 32;
    o.prepare_io_count = 256;
    o.prepare_pause = std::time::Duration::ZERO;
    let rep = run(&t, &plan(&o), &mut NullObserver).unwrap();
    // SPE is one run of three legs (§6.2), then the four SIO runs.
    assert_eq!(rep.runs.len(), 1 + 4);
    assert_eq!(rep.runs[0].series_us.len(), 3 * 32);
    assert!(rep.runs[1..].iter().all(|r| r.series_us.len() == 256));
    let table = calibrate_from_report(&rep, &CalibrationRule { min_running_ios: 50, ..CalibrationRule::default() }, &BaselineTable::spec_defaults());
    for b in Baseline::ALL {
        assert!(table.count(b) >= 50 + table.ignore(b), "{b}: {:?}", table);
        assert!(table.ignore(b) < 256);
    }
}

/// The SPE run for real on a file under /var/tmp (disk-backed, O_DIRECT works): one run, three
/// legs back to back on one clock, no pause inside, each leg with its own statistics, and a verdict.
#[test]
fn spe_is_one_run_of_three_back_to_back_legs() {
    let dir = Path::new("/var/tmp/wattflip-uflip-tests/spe");
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let t = Target::open(&TargetOptions::file(dir.join("probe.img"), 16 * MIB)).unwrap();
    let mut o = PlanOptions::quick(t.size);
    o.benches = vec![];
    o.prepare = true;
    o.io_size = 4096;
    o.spe_io_count = 64;
    o.prepare_io_count = 16;
    o.repetitions = 1;
    o.prepare_pause = std::time::Duration::from_millis(20);
    let p = plan(&o);
    let rep = run(&t, &p, &mut NullObserver).unwrap();
    let spe = &rep.runs[0];
    assert_eq!(spe.experiment, "prepare/SPE");
    assert_eq!(spe.pattern, "SR-RW-SR");
    assert_eq!(spe.status, RunStatus::Ok);
    assert_eq!((spe.io_count, spe.series_us.len()), (3 * 64, 3 * 64));
    assert_eq!(spe.parameters["legs"], "SR,RW,SR");
    assert_eq!(spe.parameters["leg_io_count"], "64,64,64");
    assert_eq!(spe.parameters["pause_after_us"], "20000");
    let legs: Vec<(u32, &str, u64)> = spe.legs.iter().map(|l| (l.leg, l.pattern.as_str(), l.stats.n)).collect();
    assert_eq!(legs, vec![(0, "SR", 64), (1, "RW", 64), (2, "SR", 64)]);
    // Back to back: each leg starts after the previous one ended, with far less than the 20 ms
    // between-run pause in between (only the loop's own clock reads separate them).
    for w in spe.legs.windows(2) {
        assert!(w[0].end_ns <= w[1].start_ns);
        assert!(w[1].start_ns - w[0].end_ns < 5_000_000, "{:?}", spe.legs);
    }
    assert_eq!((spe.start_ns, spe.end_ns), (spe.legs[0].start_ns, spe.legs[2].end_ns));
    // The SIO run after SPE waited out SPE's pause.
    assert!(rep.runs[1].start_ns - spe.end_ns >= 20_000_000);
    // Each leg's mean is the mean of its slice of the series (the running average restarts).
    for (l, chunk) in spe.legs.iter().zip(spe.series_us.chunks(64)) {
        let m = chunk.iter().sum::<f64>() / 64.0;
        assert!((l.stats.mean_us - m).abs() < 0.01 + m * 1e-9, "{} vs {m}", l.stats.mean_us);
    }
    let e = spe_from_report(&rep, &CalibrationRule::default()).unwrap();
    assert_eq!(e.sr_before_mean_us, spe.series_us[..64].iter().sum::<f64>() / 64.0);
    assert_eq!(e.sr_after_mean_us, spe.series_us[128..].iter().sum::<f64>() / 64.0);
    let summary = summary_table(&rep);
    assert!(summary.contains(&e.describe()), "{summary}");
    assert!(summary.lines().last().unwrap().starts_with("SPE: reads after random writes are "));
}

#[test]
fn plan_for_a_bigger_device_is_refused() {
    let dir = work_dir("fit");
    let t = Target::open(&TargetOptions::file(dir.join("probe.img"), 4 * MIB)).unwrap();
    let err = run(&t, &plan(&PlanOptions::quick(8 * MIB)), &mut NullObserver).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ProbeError::PlanDoesNotFit { plan_size, target_size, .. } if plan_size == 8 * MIB && target_size == 4 * MIB));
    assert!(msg.contains("probe.img"), "{msg}");
}

#[test]
fn tmpfs_is_refused_with_the_path() {
    let shm = Path::new("/dev/shm");
    let is_tmpfs = std::fs::read_to_string("/proc/self/mountinfo")
        .map(|m| m.lines().any(|l| l.split(' ').nth(4) == Some("/dev/shm") && l.contains(" - tmpfs ")))
        .unwrap_or(false);
    assert!(
        is_tmpfs && shm.is_dir(),
        "this test needs the usual tmpfs at /dev/shm (a container without one: \
         `mount -t tmpfs tmpfs /dev/shm` as root)"
    );
    let path = shm.join(format!("uflip-test-{}.img", std::process::id()));
    let err = Target::open(&TargetOptions::file(&path, MIB)).unwrap_err();
    assert!(matches!(err, TargetError::DirectIoUnsupported { .. }));
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()) && msg.contains("O_DIRECT"), "{msg}");
    assert!(!path.exists(), "the probe file we created must be removed again");
}

/// Stops the probe from another thread once `after` runs have finished.
struct StopAfter {
    after: usize,
    finished: usize,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Observer for StopAfter {
    fn planned(&mut self, _total_runs: usize) {}
    fn run_started(&mut self, index: usize, _spec: &RunSpec) {
        if index == self.after {
            // Mid-run, from another thread, as a signal handler's flag would be set.
            let stop = self.stop.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(2));
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
            });
        }
    }
    fn run_finished(&mut self, _index: usize, _result: &RunResult) {
        self.finished += 1;
    }
}

#[test]
fn a_stop_request_keeps_the_completed_runs() {
    let dir = work_dir("stop");
    let t = Target::open(&TargetOptions::file(dir.join("probe.img"), 64 * MIB)).unwrap();
    let p = plan(&PlanOptions::quick(t.size));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut o = StopAfter { after: 3, finished: 0, stop: stop.clone() };
    let started = std::time::Instant::now();
    let err = run_until(&t, &p, &mut o, &stop).unwrap_err();
    let ProbeError::Interrupted(rep) = err else { panic!("interrupted, got {err}") };
    // The runs that completed are exactly those reported; the one in progress was abandoned
    // between two IOs and nothing after it started.
    assert_eq!(rep.runs.iter().map(|r| r.run_id).collect::<Vec<_>>(), (0..o.finished).collect::<Vec<_>>());
    assert!((3..12).contains(&o.finished), "{} runs finished", o.finished);
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}
