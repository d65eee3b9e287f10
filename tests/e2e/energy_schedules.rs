//! Per-run energy of imported shunt traces on the probe's REAL default schedules (issue 14): a real
//! `probe --quick` (10 ms pauses) and `--bench granularity --values small` (20–30 ms pauses) result
//! folder, a 100 kS/s raw f32 trace synthesised around its runs by the independent truth generator
//! of the energy crate (`agent/energy/tests/truth`), imported with the real agent binary; every run
//! checked against the analytic truth. Also the bad inputs of point 5 (a sidecar with half the
//! rate, a millisecond CSV read as seconds, a trace that ends mid-probe): a clear message and
//! nothing written for the affected runs.

#[path = "../../agent/energy/tests/truth/mod.rs"]
mod truth;

use std::path::{Path, PathBuf};
use std::process::Command;
use truth::{Schedule, MS, S};
use wattflip_e2e::*;

fn agent(args: &[&str]) -> std::process::Output {
    Command::new(bin("wattflip-agent", "wattflip-agent")).args(args).output().expect("run the agent")
}

fn jsonl(p: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).lines().map(|l| serde_json::from_str(l).expect("json line")).collect()
}

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// A probe's result folder and, for its measured runs in order, (run_id, start_ns, end_ns, pattern).
struct Probe {
    _dir: tempfile::TempDir,
    out: PathBuf,
    runs: Vec<(u64, i64, i64, String)>,
}

fn probe(extra: &[&str]) -> Probe {
    let dir = tempfile::Builder::new().prefix("wf-sched-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let out = dir.path().join("out");
    let target = dir.path().join("s.dat");
    let mut args = vec!["probe", "--no-power", "--size", "128MiB", "--target", target.to_str().expect("utf-8"), "--out", out.to_str().expect("utf-8")];
    args.extend_from_slice(extra);
    let o = agent(&args);
    assert!(o.status.success(), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).expect("report.json")).expect("report");
    let runs = report["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .filter(|r| r["status"]["state"] == "ok" && r["bench"] != "format")
        .map(|r| {
            let i = |k: &str| r[k].as_i64().unwrap_or_else(|| panic!("{k}: {r}"));
            (r["run_id"].as_u64().expect("run_id"), i("start_ns"), i("end_ns"), r["pattern"].as_str().expect("pattern").to_string())
        })
        .collect();
    Probe { _dir: dir, out, runs }
}

/// The trace's origin: 1 s (the probe's idle window) before the first run.
fn origin(p: &Probe) -> i64 {
    p.runs[0].1 - S
}

/// The model of a device behind the probe's runs (`truth::probe_schedule`): idle 2.4 W, 1.5–3 W
/// above it during each run, a 4 ms tail after RW (inside a 10 ms pause) and a 40 ms one after SW
/// (cut by the next run).
fn schedule(p: &Probe) -> Schedule {
    let t0 = origin(p);
    truth::probe_schedule(&p.runs.iter().map(|(_, s, e, pat)| (s - t0, e - t0, pat.as_str())).collect::<Vec<_>>())
}

/// Writes the trace as raw f32 with a sidecar saying `rate_hz`; returns its path.
fn write_f32(dir: &Path, trace: &truth::Trace, t0: i64, rate_hz: f64) -> PathBuf {
    let path = dir.join("scope.f32");
    let bytes: Vec<u8> = trace.volts.iter().flat_map(|v| (*v as f32).to_le_bytes()).collect();
    std::fs::write(&path, bytes).expect("write trace");
    let sidecar = format!(
        "{{\"format\": \"f32le\", \"sample_rate_hz\": {rate_hz}, \"shunt_ohms\": {}, \"supply_volts\": {}, \"start_time_utc_ns\": {t0}}}",
        trace.shunt_ohms, trace.supply_volts
    );
    std::fs::write(dir.join("scope.f32.json"), sidecar).expect("write sidecar");
    path
}

fn import(p: &Probe, trace: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["trace", "import", trace.to_str().expect("utf-8"), "--in", p.out.to_str().expect("utf-8")];
    args.extend_from_slice(extra);
    agent(&args)
}

fn check_schedule(label: &str, extra: &[&str], want_cut: bool) {
    let p = probe(extra);
    let sched = schedule(&p);
    let model = sched.model(7);
    let trace = truth::sample(&sched, &model, 100_000.0, 0.0002, 4, 7);
    let truths = sched.truth(&model, &trace.gaps);
    let t0 = origin(&p);
    let file = write_f32(p.out.parent().expect("dir"), &trace, t0, 100_000.0);
    let o = import(&p, &file, &[]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{label}: {stdout}{}", String::from_utf8_lossy(&o.stderr));
    let energy = jsonl(&p.out.join("energy.jsonl"));
    assert_eq!(energy.len(), p.runs.len(), "{label}: every run has its energy\n{stdout}");
    let mut problems = Vec::new();
    for ((id, ..), t) in p.runs.iter().zip(&truths) {
        let e = energy.iter().find(|e| e["run_id"].as_u64() == Some(*id)).unwrap_or_else(|| panic!("run {id}"));
        let span = t.end - t.start;
        let err = (f(&e["energy_j"]) - t.energy) / t.energy;
        let limit = if span >= 100 * MS {
            0.005
        } else if span >= 10 * MS {
            0.02
        } else {
            0.08
        };
        if err.abs() > limit {
            problems.push(format!("run {id}: {} J vs truth {} J ({:+.3} %, span {} ms)", e["energy_j"], t.energy, err * 100.0, span / 1_000_000));
        }
        let (s, z) = (e["trace_start_ns"].as_i64().expect("start") - t0, e["trace_end_ns"].as_i64().expect("end") - t0);
        if (s - t.start).abs() > 200_000 || (z - t.end).abs() > 200_000 {
            problems.push(format!("run {id}: [{s}, {z}) vs truth [{}, {})", t.start, t.end));
        }
        if e["tail_cut"].as_bool() != Some(t.cut) {
            problems.push(format!("run {id}: tail_cut {} vs truth {}", e["tail_cut"], t.cut));
        }
        let bg = (f(&e["background_s"]) * 1e9) as i64;
        if (bg - t.tail).abs() > (t.tail / 20).max(MS) {
            problems.push(format!("run {id}: tail {bg} ns vs truth {} ns", t.tail));
        }
        assert_eq!(e["baseline_source"], "idle_window", "{e}");
    }
    assert!(problems.is_empty(), "{label}:\n{}\n{stdout}", problems.join("\n"));
    assert_eq!(truths.iter().any(|t| t.cut), want_cut, "{label}: a tail cut by the next run in the schedule");
    let gaps: u64 = energy.iter().map(|e| e["gap_samples"].as_u64().expect("gap_samples")).sum();
    let in_runs: u64 = trace.gaps.iter().filter(|(a, z)| truths.iter().any(|t| *a >= t.start && *z <= t.end)).map(|(a, z)| ((z - a) / 10_000) as u64).sum();
    assert_eq!(gaps, in_runs, "{label}: gap samples inside runs");
    assert!(stdout.contains(&format!("{} gap samples", trace.volts.iter().filter(|v| v.is_nan()).count())), "{label}: {stdout}");
    // Measured tails feed --pause auto.
    assert!(std::fs::read_dir(p.out.join("tails")).expect("tails/").count() == 1, "{label}");
}

#[test]
fn imported_trace_on_the_quick_schedule_10ms_pauses() {
    check_schedule("--quick", &["--quick"], true);
}

#[test]
fn imported_trace_on_the_small_granularity_schedule() {
    check_schedule("--values small", &["--bench", "granularity", "--values", "small"], true);
}

#[test]
fn bad_traces_are_refused_and_nothing_is_written() {
    let p = probe(&["--quick"]);
    let sched = schedule(&p);
    let model = sched.model(8);
    let t0 = origin(&p);
    let dir = p.out.parent().expect("dir").to_path_buf();
    // A sidecar with half the true rate.
    let trace = truth::sample(&sched, &model, 100_000.0, 0.0002, 0, 8);
    let file = write_f32(&dir, &trace, t0, 50_000.0);
    let o = import(&p, &file, &[]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "half rate accepted: {}", String::from_utf8_lossy(&o.stdout));
    assert!(stderr.contains("trace does not match the probe") && stderr.contains("sample_rate_hz"), "{stderr}");
    // A CSV in milliseconds read as seconds.
    let slow = truth::sample(&sched, &model, 10_000.0, 0.0002, 0, 8);
    let csv = dir.join("scope.csv");
    let mut text = String::from("t_ms,v\n");
    for (k, v) in slow.volts.iter().enumerate() {
        text.push_str(&format!("{:.1},{v:.7e}\n", k as f64 / 10.0));
    }
    std::fs::write(&csv, text).expect("csv");
    let circuit = ["--shunt-ohms", "0.05", "--supply-volts", "12"];
    let origin_arg = t0.to_string();
    let mut args = circuit.to_vec();
    args.extend_from_slice(&["--time-origin-ns", &origin_arg]);
    let o = import(&p, &csv, &args);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "ms CSV as seconds accepted: {}", String::from_utf8_lossy(&o.stdout));
    assert!(stderr.contains("trace does not match the probe") && stderr.contains("--time-unit"), "{stderr}");
    assert!(!p.out.join("energy.jsonl").exists(), "energy.jsonl written for a refused trace");
    assert!(!p.out.join("tails").exists(), "tails/ written for a refused trace");
    // The same CSV with --time-unit ms is fine.
    args.extend_from_slice(&["--time-unit", "ms"]);
    let o = import(&p, &csv, &args);
    assert!(o.status.success(), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(jsonl(&p.out.join("energy.jsonl")).len(), p.runs.len());
    std::fs::remove_file(p.out.join("energy.jsonl")).expect("rm");
    // A trace that ends in the middle of the probe: the later runs are "not covered by the trace"
    // and get nothing.
    let mut short = truth::sample(&sched, &model, 100_000.0, 0.0002, 0, 8);
    let mid = sched.runs[6].first_submit;
    short.volts.truncate((mid / 10_000) as usize);
    let file = write_f32(&dir, &short, t0, 100_000.0);
    let o = import(&p, &file, &[]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{stdout}{}", String::from_utf8_lossy(&o.stderr));
    let covered: Vec<u64> = jsonl(&p.out.join("energy.jsonl")).iter().map(|e| e["run_id"].as_u64().expect("id")).collect();
    let want: Vec<u64> = p.runs.iter().take(6).map(|r| r.0).collect();
    assert_eq!(covered, want, "{stdout}");
    for (id, ..) in p.runs.iter().skip(6) {
        assert!(stdout.contains(&format!("run {id}: no energy: not covered by the trace")), "{stdout}");
    }
}
