//! `trace import` checks the trace's alignment with the probe instead of assuming it (issue 27): a
//! raw f32 trace of a real `probe --quick` schedule (the fixture report; 100 kS/s, scope-like
//! noise, from the energy crate's independent truth generator) written with its sidecar's start
//! off by 20 ms or its sample rate off by 0.2 % was imported with exit 0 and per-run errors of
//! 11–20 %. Now it is refused naming the estimated offset and rate error, and `--align auto`
//! corrects it and says by how much. Add a case as another sidecar error.

// Integration tests and their helpers: a panic with a message is the test's failure report
// (clippy.toml's allow-*-in-tests covers #[test] functions only, not the helpers they call).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../energy/tests/truth/mod.rs"]
mod truth;

#[path = "support/quick_schedule.rs"]
mod quick;

use quick::quick_schedule;
use std::path::Path;
use std::process::Command;
use truth::MS;

const RATE: f64 = 100_000.0;

/// The fixture probe's schedule with 4 ms tails after the sequential writes.
fn schedule() -> (wattflip_uflip::ProbeReport, truth::Schedule, i64) {
    quick_schedule(|pattern| if pattern == "SW" { 4 * MS } else { 0 })
}

/// Writes the result folder and the trace, its sidecar saying the trace starts at
/// `t0 + start_error` and is sampled at `RATE · (1 + rate_error)`.
fn folder(dir: &Path, start_error: i64, rate_error: f64) -> std::path::PathBuf {
    let (report, sched, t0) = schedule();
    std::fs::write(dir.join("report.json"), serde_json::to_string(&report).unwrap()).unwrap();
    let model = sched.model(27);
    let trace = truth::sample(&sched, &model, RATE, 0.0002, 0, 27);
    let path = dir.join("trace.bin");
    std::fs::write(&path, trace.volts.iter().flat_map(|v| (*v as f32).to_le_bytes()).collect::<Vec<u8>>()).unwrap();
    let sidecar = format!(
        "format = \"f32le\"\nsample_rate_hz = {}\nshunt_ohms = {}\nsupply_volts = {}\nstart_time_utc_ns = {}\n",
        RATE * (1.0 + rate_error),
        trace.shunt_ohms,
        trace.supply_volts,
        t0 + start_error
    );
    std::fs::write(dir.join("trace.toml"), sidecar).unwrap();
    path
}

/// `trace import` of `trace` into `dir`: success, stdout, stderr.
fn import(dir: &Path, trace: &Path, extra: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_wattflip-agent")).args(["trace", "import"]).arg(trace).arg("--in").arg(dir).args(extra).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn an_aligned_trace_is_imported_and_its_alignment_reported() {
    let dir = tempfile::tempdir().unwrap();
    let trace = folder(dir.path(), 0, 0.0);
    let (ok, stdout, stderr) = import(dir.path(), &trace, &[]);
    assert!(ok, "{stdout}\n{stderr}");
    let (o, e) = reported(&stdout, "alignment: ");
    assert!(o.abs() < 0.1 && e.abs() < 0.01, "{stdout}");
}

/// The offset (ms) and rate error (%) in the first line of `text` that holds `after`.
fn reported(text: &str, after: &str) -> (f64, f64) {
    let line = text.lines().find_map(|l| l.split_once(after).map(|x| x.1)).unwrap_or_else(|| panic!("no `{after}` in {text}"));
    let num = |key: &str| -> f64 { line.split_once(key).unwrap().1.split_whitespace().next().unwrap().parse().unwrap() };
    (num("offset "), num("rate error "))
}

#[test]
fn a_trace_20ms_late_is_refused_naming_the_offset_and_corrected_with_align_auto() {
    let dir = tempfile::tempdir().unwrap();
    // The sidecar says the first sample is 20 ms earlier than it was: on the trace's time base
    // every rise comes 20 ms before its first submit.
    let trace = folder(dir.path(), -20 * MS, 0.0);
    let (ok, stdout, stderr) = import(dir.path(), &trace, &[]);
    assert!(!ok, "a misaligned trace was imported:\n{stdout}");
    let (o, _) = reported(&stderr, "trace not aligned with the probe: ");
    assert!((o + 20.0).abs() <= 1.5, "{stderr}");
    assert!(!dir.path().join("energy.jsonl").exists(), "nothing written on refusal");
    let (ok, stdout, stderr) = import(dir.path(), &trace, &["--align", "auto"]);
    assert!(ok, "{stdout}\n{stderr}");
    let (o, _) = reported(&stdout, "aligned: corrected by ");
    assert!((o + 20.0).abs() <= 1.5, "{stdout}");
    let (o, e) = reported(&stdout, "alignment: ");
    assert!(o.abs() <= 1.0 && e.abs() <= 0.05, "{stdout}");
    // The runs of 100 ms and more against the model over their own bounds: within 1 %.
    let (_, sched, t0) = schedule();
    let model = sched.model(27);
    let text = std::fs::read_to_string(dir.path().join("energy.jsonl")).unwrap();
    let mut checked = 0;
    for line in text.lines() {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        let (a, z) = (r["trace_start_ns"].as_i64().unwrap() - t0, r["trace_end_ns"].as_i64().unwrap() - t0);
        if z - a >= 100 * MS {
            let truth = model.energy(a, z);
            let err = (r["energy_j"].as_f64().unwrap() - truth) / truth;
            assert!(err.abs() <= 0.01, "run {}: {err:+.4} over [{a}, {z})\n{stdout}", r["run_id"]);
            checked += 1;
        }
    }
    assert!(checked >= 3, "{text}");
}

#[test]
fn a_sample_rate_off_by_0_2_percent_is_refused_naming_the_rate_error_and_corrected() {
    let dir = tempfile::tempdir().unwrap();
    // The sidecar's rate is 0.2 % high: the trace's clock runs 0.2 % slow against the host's.
    let trace = folder(dir.path(), 0, 0.002);
    let (ok, stdout, stderr) = import(dir.path(), &trace, &[]);
    assert!(!ok, "a misaligned trace was imported:\n{stdout}");
    assert!(stderr.contains("trace not aligned with the probe: offset "), "{stderr}");
    let (ok, stdout, stderr) = import(dir.path(), &trace, &["--align", "auto"]);
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("aligned: corrected by offset"), "{stdout}");
    let (o, e) = reported(&stdout, "alignment: ");
    assert!(o.abs() <= 1.0 && e.abs() <= 0.05, "{stdout}");
}

/// A CSV trace (`time,V_shunt`, seconds from its origin) whose `--time-origin-ns` is 20 ms early:
/// refused naming the offset; `--align auto` corrects the origin.
#[test]
fn a_csv_with_its_origin_20ms_off_is_refused_and_its_origin_corrected() {
    let dir = tempfile::tempdir().unwrap();
    let raw = folder(dir.path(), 0, 0.0);
    let samples: Vec<f32> = std::fs::read(&raw).unwrap().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    let mut csv = String::from("time_s,v_shunt\n");
    for (k, v) in samples.iter().enumerate() {
        csv.push_str(&format!("{:.5},{v:e}\n", k as f64 / RATE));
    }
    let path = dir.path().join("trace.csv");
    std::fs::write(&path, csv).unwrap();
    let (_, _, t0) = schedule();
    let origin = (t0 - 20 * MS).to_string();
    let args = ["--shunt-ohms", "0.05", "--supply-volts", "12", "--time-origin-ns", origin.as_str()];
    let (ok, stdout, stderr) = import(dir.path(), &path, &args);
    assert!(!ok, "a misaligned trace was imported:\n{stdout}");
    let (o, _) = reported(&stderr, "trace not aligned with the probe: ");
    assert!((o + 20.0).abs() <= 1.5, "{stderr}");
    let (ok, stdout, stderr) = import(dir.path(), &path, &[&args[..], &["--align", "auto"]].concat());
    assert!(ok, "{stdout}\n{stderr}");
    let (o, e) = reported(&stdout, "alignment: ");
    assert!(o.abs() <= 1.0 && e.abs() <= 0.05, "{stdout}");
}
