//! The probe command through the real binaries: the main job's local outputs, all nine
//! micro-benchmarks on a file, results through the collector into InfluxDB, scheduled probes in
//! `run` mode, and the CLI's refusal to write a device without consent.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use wattflip_e2e::*;

/// Scratch space on the target dir's filesystem: O_DIRECT needs a disk-backed one, not tmpfs.
fn disk_dir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("wf-probe-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn jsonl(p: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(p).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn agent(args: &[&str]) -> std::process::Output {
    Command::new(bin("wattflip-agent", "wattflip-agent")).args(args).output().unwrap()
}

#[test]
fn quick_probe_through_the_collector_into_influx() {
    let influx = Influx::start();
    let collector = Collector::start(&influx.url, "wf_probe");
    let dir = disk_dir();
    let out = dir.path().join("out");
    let cfg = agent_config(dir.path(), &format!("agent_id = \"probe-node\"\n[labels]\nrack = \"r3\"\n{}", pki().agent_tls("probe-node")));
    let target = dir.path().join("scratch.dat");
    let o = agent(&[
        "probe",
        "--quick",
        "--size",
        "256MiB",
        "--target",
        target.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--collector",
        &collector.url,
        "--config",
        cfg.to_str().unwrap(),
        "--io-trace",
        out.join("trace").to_str().unwrap(),
        "--emit-fio-iolog",
        out.join("iolog").to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout.contains("12 runs (0 unsupported)"), "{stdout}");
    assert!(stdout.contains("acknowledged"), "{stdout}");
    for f in ["report.json", "runs.jsonl", "probe_run.lp", "summary.txt", "report.html"] {
        assert!(out.join(f).is_file(), "missing {f}");
    }
    let runs = jsonl(&out.join("runs.jsonl"));
    assert_eq!(runs.len(), 12);
    // Every IO of every run in the per-IO trace, and the same sequence as a fio iolog v2.
    for r in &runs {
        let n = r["io_count"].as_u64().unwrap() as usize;
        let trace = r["trace_file"].as_str().unwrap();
        assert_eq!(std::fs::read_to_string(trace).unwrap().lines().count(), n + 1, "{trace}");
        let iolog = r["iolog_files"][0].as_str().unwrap();
        let text = std::fs::read_to_string(iolog).unwrap();
        assert!(text.starts_with("fio version 2 iolog\n"), "{iolog}");
        assert_eq!(text.lines().filter(|l| l.contains(" read ") || l.contains(" write ")).count(), n, "{iolog}");
    }
    let lp = std::fs::read_to_string(out.join("probe_run.lp")).unwrap();
    assert_eq!(lp.lines().count(), 12);
    assert!(lp.lines().all(|l| l.starts_with("probe_run,bench=granularity,device=file:scratch.dat,experiment=granularity/")));

    // InfluxDB holds exactly the local results, value for value.
    let q = "SELECT mean_us, p99_us, iops, value, run_id FROM probe_run WHERE host = 'probe-node' AND rack = 'r3' GROUP BY pattern";
    let series = influx.series("wf_probe", q);
    let patterns: BTreeSet<String> = series.iter().map(|(t, _)| t["pattern"].as_str().unwrap().to_string()).collect();
    assert_eq!(patterns, ["RR", "RW", "SR", "SW"].iter().map(|s| s.to_string()).collect());
    let mut stored = 0;
    for (tags, rows) in &series {
        let pattern = tags["pattern"].as_str().unwrap();
        let values: Vec<f64> = rows.iter().map(|r| r[4].as_f64().unwrap()).collect();
        assert_eq!(values, vec![4096.0, 32768.0, 131072.0], "pattern {pattern}");
        for r in rows {
            let local = runs.iter().find(|l| l["pattern"] == pattern && l["value"].as_f64() == r[4].as_f64()).unwrap();
            assert_eq!(r[1].as_f64(), local["mean_us"].as_f64(), "{pattern} mean_us");
            assert_eq!(r[2].as_f64(), local["p99_us"].as_f64());
            assert_eq!(r[3].as_f64(), local["iops"].as_f64());
            assert!(local["mean_us"].as_f64().unwrap() > 0.0);
            stored += 1;
        }
    }
    assert_eq!(stored, 12);
}

#[test]
fn all_nine_micro_benchmarks_on_a_file() {
    let dir = disk_dir();
    let out = dir.path().join("out");
    let target = dir.path().join("scratch.dat");
    let o = agent(&["probe", "--bench", "all", "--repetitions", "1", "--size", "1GiB", "--target", target.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let runs = jsonl(&out.join("runs.jsonl"));
    let benches: BTreeSet<&str> = runs.iter().map(|r| r["bench"].as_str().unwrap()).collect();
    assert_eq!(benches, ["alignment", "bursts", "granularity", "locality", "mix", "order", "parallelism", "partitioning", "pause"].into_iter().collect());
    let experiments: BTreeSet<&str> = runs.iter().map(|r| r["experiment"].as_str().unwrap()).collect();
    assert_eq!(experiments.len(), 34, "{experiments:?}");
    // uFLIP's order: read-only experiments (1–15) come before any write.
    let first_write = runs.iter().position(|r| r["pattern"].as_str().is_some_and(|p| p.contains('W'))).unwrap();
    assert!(runs[..first_write].iter().all(|r| r["experiment_number"].as_u64().unwrap() <= 15));
    assert!(runs.iter().all(|r| r["status"]["state"] == "ok"), "a 512-byte-sector file supports every run");
}

#[test]
fn scheduled_probes_in_run_mode_never_overlap_on_a_device() {
    let influx = Influx::start();
    let collector = Collector::start(&influx.url, "wf_sched");
    let dir = disk_dir();
    let (_sys_tmp, sys) = sysfs_tree(&["hwmon"]);
    let target = dir.path().join("sched.dat");
    let cfg = agent_config(
        dir.path(),
        &format!(
            "agent_id = \"sched-node\"\n[collector]\nurl = \"{}\"\n[sampling]\ninterval = \"100ms\"\n\
             [sources]\nsysfs_root = \"{}\"\nrapl = false\n\
             [[probes]]\nname = \"every-second\"\nschedule = \"* * * * * *\"\ntarget = \"{}\"\nsize = \"128MiB\"\nquick = true\n{}",
            collector.url,
            sys.display(),
            target.display(),
            pki().agent_tls("sched-node")
        ),
    );
    let mut child = spawn_agent(dir.path(), &["run", "--config", cfg.to_str().unwrap(), "--samples", "30"]);
    let status = wait_child(&mut child, Duration::from_secs(120), dir.path());
    assert!(status.success(), "{}", std::fs::read_to_string(dir.path().join("agent.stderr")).unwrap());
    let rows = influx.rows("wf_sched", "SELECT run_id, end_ns FROM probe_run WHERE host = 'sched-node'");
    // Group the runs of each probe by the probe's start (the run id prefix).
    let mut probes: std::collections::BTreeMap<String, (i64, i64, usize)> = Default::default();
    for r in &rows {
        let run_id = r[1].as_str().unwrap();
        let probe = run_id.split('-').next().unwrap().to_string();
        let (start, end) = (r[0].as_i64().unwrap(), r[2].as_i64().unwrap());
        let e = probes.entry(probe).or_insert((i64::MAX, 0, 0));
        e.0 = e.0.min(start);
        e.1 = e.1.max(end);
        e.2 += 1;
    }
    assert!(!probes.is_empty(), "the schedule fired at least once in 3 s");
    assert!(probes.values().all(|p| p.2 == 12), "every scheduled quick probe delivered its 12 runs: {probes:?}");
    let windows: Vec<(i64, i64)> = probes.values().map(|p| (p.0, p.1)).collect();
    for w in windows.windows(2) {
        assert!(w[0].1 <= w[1].0, "two probes overlapped on one device: {windows:?}");
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").unwrap().lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
}

/// Detaches the loop device on drop.
struct Loop(PathBuf);
impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.0).status();
    }
}

#[test]
fn the_cli_refuses_to_write_a_device_without_consent() {
    assert!(is_root(), "this test creates a loop device: run it as root, e.g. `sudo bash tests/run.sh`");
    assert!(Command::new("losetup").arg("--version").output().is_ok(), "losetup is missing: install Debian's `mount` package (bash tests/run.sh does)");
    let dir = disk_dir();
    let img = dir.path().join("disk.img");
    std::fs::File::create(&img).unwrap().set_len(64 << 20).unwrap();
    let o = Command::new("losetup").args(["-f", "--show"]).arg(&img).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dev = Loop(PathBuf::from(String::from_utf8(o.stdout).unwrap().trim()));
    let o = agent(&["probe", "--quick", "--target", dev.0.to_str().unwrap(), "--out", dir.path().join("out").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    let identity = format!("loop:{}", img.canonicalize().unwrap().display());
    assert!(err.contains(&identity), "the refusal names the device identity to consent: {err}");
    assert!(err.contains("consent"), "{err}");
    assert!(!dir.path().join("out/runs.jsonl").exists(), "nothing ran");
}

#[test]
fn calibration_is_stored_and_reused_by_the_next_probe() {
    let dir = disk_dir();
    let out = dir.path().join("out");
    let target = dir.path().join("cal.dat");
    let base = ["--size", "256MiB", "--target", target.to_str().unwrap(), "--out", out.to_str().unwrap()];
    let o = agent(&[&["probe", "--calibrate", "--repetitions", "1"][..], &base].concat());
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{stdout}{}", String::from_utf8_lossy(&o.stderr));
    let cal: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("calibration.json")).unwrap()).unwrap();
    assert_eq!(cal["target"].as_str(), Some(target.to_str().unwrap()));
    let counts: Vec<u64> = cal["counts"]["io_count"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    let ignore: Vec<u64> = cal["counts"]["ignore_io"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    assert_eq!(counts.len(), 4);
    assert!(counts.iter().zip(&ignore).all(|(c, i)| c > i), "IOCount covers IgnoreIO and a running phase: {counts:?} {ignore:?}");
    // The next full probe of the same target uses exactly these counts per baseline.
    let o = agent(&[&["probe", "--bench", "bursts", "--repetitions", "1"][..], &base].concat());
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{stdout}{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout.contains("using the calibration of"), "{stdout}");
    for r in jsonl(&out.join("runs.jsonl")) {
        let i = ["SR", "RR", "SW", "RW"].iter().position(|b| r["pattern"] == *b).unwrap();
        assert_eq!((r["io_count"].as_u64(), r["ignore_io"].as_u64()), (Some(counts[i]), Some(ignore[i])), "{}", r["experiment"]);
    }
}

#[test]
fn two_targets_calibrated_in_one_store_and_a_scheduled_probe_uses_its_own() {
    let influx = Influx::start();
    let collector = Collector::start(&influx.url, "wf_sched_cal");
    let dir = disk_dir();
    let out = dir.path().join("out");
    let (a, b) = (dir.path().join("a.dat"), dir.path().join("b.dat"));
    for t in [&a, &b] {
        let o = agent(&["probe", "--calibrate", "--repetitions", "1", "--size", "128MiB", "--target", t.to_str().unwrap(), "--out", out.to_str().unwrap()]);
        assert!(o.status.success(), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    }
    // Both calibrations are kept, one file per target, each naming its own.
    let mut files: Vec<PathBuf> = std::fs::read_dir(out.join("calibration")).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let stored: Vec<serde_json::Value> = files.iter().map(|f| serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap()).collect();
    let mut targets: Vec<&str> = stored.iter().map(|c| c["target"].as_str().unwrap()).collect();
    targets.sort();
    assert_eq!(targets, vec![a.to_str().unwrap(), b.to_str().unwrap()]);
    // calibration.json is the latest (B). A's own file gets counts no calibration would choose, so
    // the scheduled probe of A can only have them from A's entry.
    let latest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("calibration.json")).unwrap()).unwrap();
    assert_eq!(latest["target"].as_str(), b.to_str());
    let a_file = &files[stored.iter().position(|c| c["target"].as_str() == a.to_str()).unwrap()];
    let mut a_cal = stored.iter().find(|c| c["target"].as_str() == a.to_str()).unwrap().clone();
    a_cal["counts"] = serde_json::json!({"io_count": [96, 97, 98, 99], "ignore_io": [1, 2, 3, 4]});
    std::fs::write(a_file, serde_json::to_vec(&a_cal).unwrap()).unwrap();

    let cfg = agent_config(
        dir.path(),
        &format!(
            "agent_id = \"sched-cal\"\n[collector]\nurl = \"{}\"\n[sampling]\ninterval = \"100ms\"\n[sources]\nrapl = false\nhwmon = false\n\
             [[probes]]\nname = \"a\"\nschedule = \"* * * * * *\"\ntarget = \"{}\"\nsize = \"128MiB\"\nout = \"{}\"\n\
             bench = \"granularity\"\nio_sizes = [\"4KiB\"]\nrepetitions = 1\npower = false\n{}",
            collector.url,
            a.display(),
            out.display(),
            pki().agent_tls("sched-cal")
        ),
    );
    let mut child = spawn_agent(dir.path(), &["run", "--config", cfg.to_str().unwrap(), "--samples", "15"]);
    let status = wait_child(&mut child, Duration::from_secs(120), dir.path());
    assert!(status.success(), "{}", std::fs::read_to_string(dir.path().join("agent.stderr")).unwrap());
    let rows = influx.rows("wf_sched_cal", "SELECT pattern, io_count, ignore_io FROM probe_run WHERE host = 'sched-cal'");
    assert!(!rows.is_empty(), "the schedule fired at least once");
    assert_eq!(rows.len() % 4, 0, "granularity at 4 KiB: SR, RR, RW, SW per probe: {rows:?}");
    for r in &rows {
        let i = ["SR", "RR", "SW", "RW"].iter().position(|b| r[1] == *b).unwrap();
        assert_eq!((r[2].as_u64(), r[3].as_u64()), (Some(96 + i as u64), Some(1 + i as u64)), "{r:?}");
    }
}

/// Issue 38: `probe` handled no signal; a hangup (SIGHUP) or Ctrl-C killed it with a run half
/// done and nothing written. Now it stops between two IOs, writes the runs it completed, says so
/// and exits with an error, leaving the target file in place.
#[test]
fn a_probe_stops_cleanly_on_sighup_and_sigint_and_keeps_its_completed_runs() {
    for sig in ["HUP", "INT"] {
        let dir = disk_dir();
        let out = dir.path().join("out");
        let target = dir.path().join("scratch.dat");
        let args = [
            "probe",
            "--bench",
            "all",
            "--repetitions",
            "1",
            "--size",
            "256MiB",
            "--no-power",
            "--target",
            target.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        let mut child = spawn_agent(dir.path(), &args);
        // Long enough for the fill and some runs of the ~180 (the whole probe takes minutes).
        std::thread::sleep(Duration::from_secs(4));
        assert!(child.try_wait().unwrap().is_none(), "the probe ended before the signal");
        signal(&child, sig);
        let status = wait_child(&mut child, Duration::from_secs(30), dir.path());
        let stderr = std::fs::read_to_string(dir.path().join("agent.stderr")).unwrap();
        assert_eq!(status.code(), Some(1), "SIG{sig}: exited by the signal, not by the probe:\n{stderr}");
        let said = stderr.split("interrupted by a signal after ").nth(1).and_then(|r| r.split(' ').next()).and_then(|n| n.parse::<usize>().ok());
        let runs = if out.join("runs.jsonl").exists() { jsonl(&out.join("runs.jsonl")).len() } else { 0 };
        assert_eq!(said, Some(runs), "SIG{sig}: the runs said and the runs written:\n{stderr}");
        assert_eq!(std::fs::metadata(&target).unwrap().len(), 256 << 20, "SIG{sig}: the target file is kept");
    }
}

/// Starts the agent with `args`, waits for `marker` in its log (a unit of work completed), sends
/// SIGHUP and waits for it: its exit status, its stderr and the completed units it said it kept
/// ("interrupted by a signal after N …").
fn hangup_after(dir: &Path, args: &[&str], marker: &str) -> (std::process::ExitStatus, String, Option<usize>) {
    let mut child = spawn_agent(dir, args);
    let log = dir.join("agent.stderr");
    let seen = wait_for(Duration::from_secs(120), || std::fs::read_to_string(&log).ok().filter(|s| s.contains(marker)).map(|_| ()));
    assert!(seen.is_some(), "no `{marker}` in the log:\n{}", std::fs::read_to_string(&log).unwrap_or_default());
    assert!(child.try_wait().unwrap().is_none(), "the probe ended before the signal:\n{}", std::fs::read_to_string(&log).unwrap_or_default());
    signal(&child, "HUP");
    let status = wait_child(&mut child, Duration::from_secs(60), dir);
    let stderr = std::fs::read_to_string(&log).unwrap();
    let said = stderr.split("interrupted by a signal after ").nth(1).and_then(|r| r.split(' ').next()).and_then(|n| n.parse::<usize>().ok());
    (status, stderr, said)
}

/// Issue 38: `probe --ladder`, `--calibrate` and `--efficiency` handled no signal: a hangup killed
/// them with nothing written. Now each stops between two IOs, writes what it completed (ladder
/// levels, preparation runs, efficiency phases), says how many and exits with status 1.
#[test]
fn ladder_calibrate_and_efficiency_probes_stop_cleanly_on_sighup_and_keep_what_completed() {
    // The ladder: 2 patterns × 10 levels of 300 ms; the signal after its first level.
    let dir = disk_dir();
    let (out, target) = (dir.path().join("out"), dir.path().join("ladder.dat"));
    let args = ["probe", "--ladder", "--ladder-hold", "300ms", "--size", "128MiB", "--target", target.to_str().unwrap(), "--out", out.to_str().unwrap()];
    let (status, stderr, said) = hangup_after(dir.path(), &args, "ladder level 1 completed");
    assert_eq!(status.code(), Some(1), "--ladder: exited by the signal, not by the probe:\n{stderr}");
    let levels = if out.join("ladder.jsonl").exists() { jsonl(&out.join("ladder.jsonl")).len() } else { 0 };
    assert!((1..20).contains(&levels), "--ladder: the completed levels are written, not all 20: {levels}\n{stderr}");
    assert_eq!(said, Some(levels), "--ladder: the levels said and written:\n{stderr}");
    assert_eq!(std::fs::read_to_string(out.join("ladder.lp")).unwrap().lines().count(), levels);

    // Calibration: 5 long preparation runs; the signal after the first. Nothing is stored.
    let dir = disk_dir();
    let (out, target) = (dir.path().join("out"), dir.path().join("cal.dat"));
    let args = ["probe", "--calibrate", "--repetitions", "1", "--size", "256MiB", "--target", target.to_str().unwrap(), "--out", out.to_str().unwrap()];
    let (status, stderr, said) = hangup_after(dir.path(), &args, "run 1 of 5 completed");
    assert_eq!(status.code(), Some(1), "--calibrate: exited by the signal, not by the probe:\n{stderr}");
    let kept = out.join("calibration-interrupted/runs.jsonl");
    let runs = if kept.exists() { jsonl(&kept) } else { Vec::new() };
    assert!(!runs.is_empty() && runs.len() < 5 && runs[0]["experiment"] == "prepare/SPE", "--calibrate: {runs:?}\n{stderr}");
    assert_eq!(said, Some(runs.len()), "--calibrate: the runs said and written:\n{stderr}");
    assert!(!out.join("calibration.json").exists() && !out.join("calibration").exists(), "no partial calibration is stored");

    // Efficiency on the fixture's constant 18 W rail: 6 phases; the signal after the first.
    let dir = disk_dir();
    let (out, target) = (dir.path().join("out"), dir.path().join("eff.dat"));
    let (_sys_tmp, sys) = sysfs_tree(&["ina226"]);
    let body =
        format!("agent_id = \"eff-node\"\n[tls]\ninsecure_plaintext_loopback_only = true\n[sources]\nsysfs_root = \"{}\"\nrapl = false\n", sys.display());
    let cfg = agent_config(dir.path(), &body);
    let args = [
        "probe",
        "--efficiency",
        "--efficiency-window",
        "300ms",
        "--efficiency-windows",
        "3",
        "--efficiency-budget",
        "10s",
        "--config",
        cfg.to_str().unwrap(),
        "--size",
        "64MiB",
        "--target",
        target.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    let (status, stderr, said) = hangup_after(dir.path(), &args, "efficiency phase 1 of 6 completed");
    assert_eq!(status.code(), Some(1), "--efficiency: exited by the signal, not by the probe:\n{stderr}");
    let report = out.join("efficiency/report.json");
    let r: serde_json::Value = if report.exists() { serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap() } else { serde_json::json!({}) };
    let phases = r["phases"].as_array().map(Vec::len).unwrap_or(0);
    assert!((1..6).contains(&phases) && r["interrupted"] == true, "--efficiency: {r}\n{stderr}");
    assert_eq!(r["phases"][0]["profile"], "ready_idle");
    assert_eq!(said, Some(phases), "--efficiency: the phases said and written:\n{stderr}");
    assert_eq!(std::fs::read_to_string(out.join("efficiency/efficiency.lp")).unwrap().lines().count(), phases);
}
