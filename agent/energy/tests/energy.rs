//! Integration tests for wattflip-energy: synthetic traces with known energy, run boundaries and
//! background tails; CSV and raw traces written to temp files; checked-in fixtures under
//! `tests/fixtures/traces/` (see its README); malformed inputs. Add a case by building a trace with the
//! helpers below and asserting against the value computed by hand in the comment.

// Integration tests and their helpers: a panic with a message is the test's failure report
// (clippy.toml's allow-*-in-tests covers #[test] functions only, not the helpers they call).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use wattflip_energy::*;

const MS: i64 = 1_000_000;
const S: i64 = 1_000_000_000;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/traces")
}

/// R = 0.5 Ω, U = 4.25 V: V_shunt = 0.25 V gives I = 0.5 A, 4.0 V at the device, exactly 2 W.
fn circuit() -> ShuntCircuit {
    ShuntCircuit::new(Ohms(0.5), Volts(4.25)).expect("valid circuit")
}

fn rel(a: f64, b: f64) -> f64 {
    ((a - b) / b).abs()
}

/// Deterministic uniform noise in [-a, a] (xorshift64*), so every run of the tests sees the same trace.
struct Noise(u64);
impl Noise {
    fn next(&mut self, a: f64) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11;
        (x as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * a
    }
}

/// A 1 kHz power series from `t0` for `dur`, power given per time by `f`, plus ±`noise` W.
fn series(dur_ms: i64, noise: f64, seed: u64, f: impl Fn(i64) -> f64) -> PowerSeries {
    let mut n = Noise(seed);
    PowerSeries::from_samples((0..dur_ms).map(|i| {
        let t = i * MS;
        (UnixNanos(t), Watts(f(t) + n.next(noise)))
    }))
    .expect("valid series")
}

fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("write temp file");
    p
}

// ---------------------------------------------------------------------------------------------
// Known energy

#[test]
fn constant_two_watts_for_one_and_a_half_seconds_is_three_joules_raw_f32() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bytes: Vec<u8> = (0..1500).flat_map(|_| 0.25f32.to_le_bytes()).collect();
    let data = write_file(dir.path(), "const.f32", &bytes);
    write_file(dir.path(), "const.f32.json", br#"{"format": "f32le", "sample_rate_hz": 1000, "shunt_ohms": 0.5, "supply_volts": 4.25}"#);
    let sc = Sidecar::find_beside(&data).expect("sidecar");
    let s = integrate_raw(&data, &sc, Nanos::from_millis(100)).expect("integrate");
    assert!(rel(s.energy.0, 3.0) < 1e-12, "{}", s.energy);
    assert_eq!(s.samples, 1500);
    assert_eq!(s.duration, Nanos(1_500_000_000));
    assert_eq!(s.windows.len(), 15);
    for w in &s.windows {
        assert!(rel(w.mean.0, 2.0) < 1e-12 && rel(w.energy.0, 0.2) < 1e-12);
        assert_eq!((w.min, w.max), (Watts(2.0), Watts(2.0)));
    }
    assert_eq!(s.windows[3].offset, Nanos(300 * MS as u64));
    assert_eq!(s.start, None);
}

#[test]
fn constant_two_watts_csv_comma_header_comments_is_three_joules() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut csv = String::from("# logger export\ntime,V_shunt\n");
    for i in 0..1500 {
        csv.push_str(&format!("{:.3},0.25\n", i as f64 / 1000.0));
        if i == 700 {
            csv.push_str("# a comment in the middle\n\n");
        }
    }
    let p = write_file(dir.path(), "const.csv", csv.as_bytes());
    let s = integrate_csv(&p, circuit(), &CsvOptions::default()).expect("integrate");
    assert!(rel(s.energy.0, 3.0) < 1e-12, "{}", s.energy);
    assert_eq!(s.samples, 1500);
    assert_eq!(s.duration, Nanos(1_500_000_000));
    assert_eq!(s.windows.len(), 1500);
}

#[test]
fn csv_in_milliseconds_with_origin_and_no_header() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut csv = String::new();
    for i in 0..1500 {
        csv.push_str(&format!("{};2.5e-1\r\n", i));
    }
    let p = write_file(dir.path(), "ms.csv", csv.as_bytes());
    let opts =
        CsvOptions { time_unit: TimeUnit::Millis, time_origin: Some(UnixNanos(1_700_000_000 * S)), window: Nanos::from_millis(10), ..CsvOptions::default() };
    let s = integrate_csv(&p, circuit(), &opts).expect("integrate");
    assert!(rel(s.energy.0, 3.0) < 1e-12);
    assert_eq!(s.start, Some(UnixNanos(1_700_000_000 * S)));
    assert_eq!(s.windows.len(), 150);
    let ser = PowerSeries::from_trace(&s).expect("series");
    assert_eq!(ser.times()[1], UnixNanos(1_700_000_000 * S + 10 * MS));
}

#[test]
fn raw_i16_with_scale_and_offset_and_header_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    // 1/4096 V per count; zero offset 8 counts = 1/512 V. 1032 counts - 8 = 1024 = 0.25 V -> 2 W.
    let mut bytes = vec![0xAB; 16];
    bytes.extend((0..3000).flat_map(|_| 1032i16.to_le_bytes()));
    let data = write_file(dir.path(), "trace.i16", &bytes);
    let side = write_file(
        dir.path(),
        "trace.toml",
        b"format = \"i16le\"\nsample_rate_hz = 2000.0\nshunt_ohms = 0.5\nsupply_volts = 4.25\n\
          scale = 0.000244140625\noffset_volts = 0.001953125\nheader_bytes = 16\n\
          start_time_utc_ns = 42\n",
    );
    let sc = Sidecar::load(&side).expect("sidecar");
    assert_eq!(Sidecar::find_beside(&data).expect("found"), sc);
    let s = integrate_raw(&data, &sc, DEFAULT_WINDOW).expect("integrate");
    // 3000 samples at 2 kHz = 1.5 s at 2 W
    assert!(rel(s.energy.0, 3.0) < 1e-12, "{}", s.energy);
    assert_eq!(s.start, Some(UnixNanos(42)));
    assert_eq!(s.windows.len(), 1500);
    assert_eq!(s.windows[0].samples, 2);
}

#[test]
fn streaming_integrator_keeps_constant_memory_and_matches_the_oneshot_total() {
    let mut it = FixedRateIntegrator::new(circuit(), SampleFormat::F32le, Volts(1.0), Hertz(1e6), Nanos::from_millis(1)).expect("integrator");
    let chunk: Vec<u8> = (0..65_536).flat_map(|i| (0.2f32 + (i % 100) as f32 * 1e-3).to_le_bytes()).collect();
    let mut windows = 0usize;
    let mut expected = 0.0f64;
    for _ in 0..40 {
        it.push_bytes(&chunk);
        let w = it.drain_windows();
        assert!(w.len() <= 66, "windows are drained as they complete");
        windows += w.len();
    }
    for i in 0..65_536 {
        let v = (0.2f32 + (i % 100) as f32 * 1e-3) as f64;
        expected += v / 0.5 * (4.25 - v);
    }
    expected *= 40.0 / 1e6;
    let s = it.finish(None);
    windows += s.windows.len();
    assert_eq!(windows, (40 * 65_536usize).div_ceil(1000));
    assert!(rel(s.energy.0, expected) < 1e-9, "{} vs {expected}", s.energy);
    assert!(s.min_power.0 < s.mean_power.0 && s.mean_power.0 < s.max_power.0);
}

#[test]
fn fixture_scope_csv_semicolon_decimal_comma_is_two_joules() {
    let s = integrate_csv(fixtures().join("scope-semicolon-2J.csv"), circuit(), &CsvOptions::default()).expect("integrate");
    assert!(rel(s.energy.0, 2.0) < 1e-12, "{}", s.energy);
    assert_eq!(s.samples, 1000);
}

#[test]
fn fixture_i16_step_energy_and_boundaries() {
    let data = fixtures().join("step-i16.bin");
    let sc = Sidecar::find_beside(&data).expect("sidecar");
    let s = integrate_raw(&data, &sc, DEFAULT_WINDOW).expect("integrate");
    assert!(rel(s.energy.0, 2.546875) < 1e-12, "{}", s.energy);
    let series = PowerSeries::from_trace(&s).expect("series");
    let t0 = 1_700_000_000 * S;
    let run =
        RunInfo { first_submit: UnixNanos(t0 + S), last_complete: UnixNanos(t0 + 1500 * MS), bytes: 0, ios: 0, next_run_start: None, datasheet_active: None };
    let cfg = RunDetectConfig { baseline_window: Nanos::from_millis(900), hold: Nanos::from_millis(400), ..RunDetectConfig::default() };
    let r = analyze_run(&series, &run, &cfg).expect("analyze");
    assert_eq!(r.start, UnixNanos(t0 + S));
    assert_eq!(r.end, UnixNanos(t0 + 1500 * MS));
    assert!(rel(r.energy_total.0, 1.0) < 1e-12);
    assert!(rel(r.energy_above_idle.0, 0.5 * (2.0 - 1.03125)) < 1e-12);
    assert_eq!(r.end_found, EndFound::ReturnedToIdle);
}

// ---------------------------------------------------------------------------------------------
// Run boundaries

/// Idle 1.0 W ± 0.05, 3.0 W ± 0.05 for [2.000, 3.000) s, 1 kHz, 6 s.
fn step_series() -> PowerSeries {
    series(6000, 0.05, 7, |t| if (2 * S..3 * S).contains(&t) { 3.0 } else { 1.0 })
}

fn step_run() -> RunInfo {
    RunInfo {
        first_submit: UnixNanos(2 * S),
        last_complete: UnixNanos(3 * S),
        bytes: 64 << 20,
        ios: 1000,
        next_run_start: None,
        datasheet_active: Some(Watts(2.4)),
    }
}

#[test]
fn step_from_idle_is_found_within_one_sample() {
    let s = step_series();
    let r = analyze_run(&s, &step_run(), &RunDetectConfig::default()).expect("analyze");
    assert_eq!(r.start_found, StartFound::Trace);
    assert_eq!(r.end_found, EndFound::ReturnedToIdle);
    assert!((r.start.0 - 2 * S).abs() <= MS, "start {}", r.start);
    assert!((r.end.0 - 3 * S).abs() <= MS, "end {}", r.end);
    assert!((r.baseline.median.0 - 1.0).abs() < 0.01, "{:?}", r.baseline);
    // uniform ±0.05: σ = 0.0289, 1.4826·MAD ≈ 1.4826 · 0.025 = 0.037
    assert!((r.baseline.spread.0 - 0.037).abs() < 0.006, "{:?}", r.baseline);
    assert_eq!(r.baseline.samples, 1000); // [0.95, 1.95) s
    assert!(rel(r.energy_total.0, 3.0) < 1e-3, "{}", r.energy_total);
    assert!(rel(r.energy_above_idle.0, 2.0) < 1e-3, "{}", r.energy_above_idle);
    assert!(rel(r.mean_power.0, 3.0) < 1e-3);
    // Refined inside the edge samples from their energy above idle (±0.05 W noise on a 2 W step).
    assert!((r.duration.0 as i64 - S).abs() <= 100_000, "{:?}", r.duration);
    assert!(r.background_duration.0 <= MS as u64);
    assert!(r.energy_background.0.abs() < 0.01);
    // J/IO, J/MiB and J/MB from the total energy
    let e = r.energy_total.0;
    let eff = r.efficiency_total;
    assert!(rel(eff.per_io.expect("ios").0, e / 1000.0) < 1e-12);
    assert!(rel(eff.per_mib.expect("bytes").0, e / 64.0) < 1e-12);
    assert!(rel(eff.per_mb.expect("bytes").0, e / 67.108864) < 1e-12);
    // datasheet 2.4 W × 1 s host duration vs ≈ 3 J measured
    assert!(rel(r.datasheet_estimate.expect("estimate").0, 2.4) < 1e-12);
    assert!(rel(r.datasheet_ratio.expect("ratio"), 0.8) < 1e-3);
    assert!(!r.interference());
}

#[test]
fn step_is_found_when_the_host_clock_is_a_bit_off() {
    let s = step_series();
    for skew in [-20 * MS, -3 * MS, 4 * MS, 30 * MS] {
        let run = RunInfo { first_submit: UnixNanos(2 * S + skew), last_complete: UnixNanos(3 * S + skew), ..step_run() };
        let r = analyze_run(&s, &run, &RunDetectConfig::default()).expect("analyze");
        assert!((r.start.0 - 2 * S).abs() <= MS, "skew {skew}: start {}", r.start);
        assert!((r.end.0 - 3 * S).abs() <= MS, "skew {skew}: end {}", r.end);
    }
}

#[test]
fn short_spikes_are_not_a_start() {
    // Idle spikes of one sample (periodic idle work) before the run; w = 3 ms needs three in a row.
    // The host clock is 100 ms early; the start is searched within start_slack of the first submit.
    let s = series(6000, 0.02, 9, |t| {
        if (2 * S..3 * S).contains(&t) {
            3.0
        } else if t % (100 * MS) == 0 {
            2.0
        } else {
            1.0
        }
    });
    let run = RunInfo { first_submit: UnixNanos(1900 * MS), ..step_run() };
    let cfg = RunDetectConfig {
        min_duration: Nanos::from_millis(3),
        start_slack: Nanos::from_millis(150),
        baseline_window: Nanos::from_millis(800),
        ..RunDetectConfig::default()
    };
    let r = analyze_run(&s, &run, &cfg).expect("analyze");
    assert!((r.start.0 - 2 * S).abs() <= 100_000, "{}", r.start);
}

#[test]
fn step_in_a_100khz_shunt_trace_through_the_whole_pipeline() {
    // 100 kHz raw f32 shunt trace: idle 0.125 V (1.03125 W), 0.25 V (2 W) in [2.0, 3.0) s, 5 s long.
    let dir = tempfile::tempdir().expect("tempdir");
    let fs = 100_000usize;
    let mut noise = Noise(11);
    let bytes: Vec<u8> = (0..5 * fs)
        .flat_map(|i| {
            let v = if (2 * fs..3 * fs).contains(&i) { 0.25 } else { 0.125 };
            ((v + noise.next(0.002)) as f32).to_le_bytes()
        })
        .collect();
    let data = write_file(dir.path(), "scope.f32", &bytes);
    let side = write_file(
        dir.path(),
        "scope.json",
        br#"{"format": "f32le", "sample_rate_hz": 100000, "shunt_ohms": 0.5, "supply_volts": 4.25,
            "start_time_utc_ns": 1000000000000}"#,
    );
    let sc = Sidecar::load(side).expect("sidecar");
    let s = integrate_raw(&data, &sc, DEFAULT_WINDOW).expect("integrate");
    let expected = 4.0 * 1.03125 + 2.0;
    assert!(rel(s.energy.0, expected) < 1e-3, "{} vs {expected}", s.energy);
    let series = PowerSeries::from_trace(&s).expect("series");
    let t0 = 1_000_000_000_000i64;
    let run =
        RunInfo { first_submit: UnixNanos(t0 + 2 * S), last_complete: UnixNanos(t0 + 3 * S), bytes: 0, ios: 0, next_run_start: None, datasheet_active: None };
    let r = analyze_run(&series, &run, &RunDetectConfig::default()).expect("analyze");
    assert!((r.start.0 - (t0 + 2 * S)).abs() <= MS, "start {}", r.start);
    assert!((r.end.0 - (t0 + 3 * S)).abs() <= MS, "end {}", r.end);
    assert!(rel(r.energy_total.0, 2.0) < 1e-3, "{}", r.energy_total);
}

#[test]
fn tail_cut_by_the_next_run_is_interference() {
    // 3 W run [2, 3) s then a 1.6 W tail until 5 s; the next run starts at 4 s.
    let s = series(8000, 0.05, 3, |t| match t {
        t if (2 * S..3 * S).contains(&t) => 3.0,
        t if (3 * S..5 * S).contains(&t) => 1.6,
        _ => 1.0,
    });
    let run = RunInfo { next_run_start: Some(UnixNanos(4 * S)), ..step_run() };
    let r = analyze_run(&s, &run, &RunDetectConfig::default()).expect("analyze");
    assert_eq!(r.end_found, EndFound::NextRunStarted);
    assert!(r.interference());
    assert!(interferes(&r, UnixNanos(4 * S)));
    // Without the next run, the whole tail is found.
    let r = analyze_run(&s, &step_run(), &RunDetectConfig::default()).expect("analyze");
    assert!((r.end.0 - 5 * S).abs() <= MS);
    assert!(!interferes(&r, UnixNanos(6 * S)));
    assert!(interferes(&r, UnixNanos(4 * S)));
}

#[test]
fn trace_too_short_for_hold_says_so() {
    let s = series(3500, 0.05, 5, |t| if (2 * S..3 * S).contains(&t) { 3.0 } else { 1.0 });
    let r = analyze_run(&s, &step_run(), &RunDetectConfig::default()).expect("analyze");
    assert_eq!(r.end_found, EndFound::TraceEnded);
    assert!((r.end.0 - 3 * S).abs() <= MS);
}

#[test]
fn a_run_invisible_in_power_gets_no_energy_and_says_why() {
    let s = series(6000, 0.05, 5, |_| 1.0);
    let e = analyze_run(&s, &step_run(), &RunDetectConfig::default()).expect_err("no activity");
    assert!(matches!(e, AnalysisError::NoActivity { from_ns: 1_950_000_000, to_ns: 2_050_000_000, .. }), "{e}");
    assert!(e.to_string().starts_with("activity not found in the trace: no power above"), "{e}");
}

#[test]
fn analysis_errors_name_the_problem() {
    let s = series(1000, 0.05, 5, |_| 1.0);
    let late = RunInfo { first_submit: UnixNanos(2 * S), ..step_run() };
    assert!(matches!(analyze_run(&s, &late, &RunDetectConfig::default()), Err(AnalysisError::RunOutsideTrace { .. })));
    let early = RunInfo { first_submit: UnixNanos(5 * MS), last_complete: UnixNanos(500 * MS), ..step_run() };
    let e = analyze_run(&s, &early, &RunDetectConfig::default()).expect_err("no baseline");
    assert!(matches!(e, AnalysisError::NotEnoughBaseline { found: 0, needed: 10, .. }), "{e}");
    let bad = RunDetectConfig { k: -1.0, ..RunDetectConfig::default() };
    let e = analyze_run(&step_series(), &step_run(), &bad).expect_err("bad k");
    assert!(e.to_string().starts_with("k:"), "{e}");
}

// ---------------------------------------------------------------------------------------------
// Background-work classes from traces with known tails

/// One run of 1 s at 3 W from t = 2 s, then a tail at 1.6 W for `tail_ms`, then idle at 1.0 W.
fn run_with_tail(tail_ms: i64, seed: u64) -> RunEnergy {
    let tail_end = 3 * S + tail_ms * MS;
    let s = series(3000 + tail_ms + 1500, 0.05, seed, |t| match t {
        t if (2 * S..3 * S).contains(&t) => 3.0,
        t if (3 * S..tail_end).contains(&t) => 1.6,
        _ => 1.0,
    });
    let r = analyze_run(&s, &step_run(), &RunDetectConfig::default()).expect("analyze");
    assert_eq!(r.end_found, EndFound::ReturnedToIdle);
    assert!((r.background_duration.0 as i64 - tail_ms * MS).abs() <= MS, "tail {tail_ms} ms measured {}", r.background_duration);
    // tail energy above idle: 0.6 W × tail (noise averages out to well under 1 %)
    let expected = 0.6 * tail_ms as f64 / 1000.0;
    assert!((r.energy_background.0 - expected).abs() <= 0.01 * expected.max(0.01), "{} vs {expected}", r.energy_background);
    r
}

fn experiment(tail_ms: impl Fn(f64) -> i64) -> Vec<ValueRuns> {
    [1.0, 2.0, 4.0, 8.0]
        .iter()
        .enumerate()
        .map(|(i, &v)| ValueRuns {
            value: v,
            runs: (0..3).map(|rep| BackgroundObservation::from(&run_with_tail(tail_ms(v), (i * 3 + rep) as u64 + 1))).collect(),
        })
        .collect()
}

fn class_of(values: &[ValueRuns]) -> Classification {
    classify(values, &ClassifyConfig::default()).expect("classify")
}

#[test]
fn extended_tail_of_three_seconds() {
    let c = class_of(&experiment(|_| 3000));
    assert_eq!(c.class, BackgroundClass::Extended, "{}", c.reason);
    // §11.6: writes get 1.5 × 3 s
    let pause = recommend_pause(c.durations[0].1, IoMix::WithWrites, &PauseConfig::default());
    assert!((pause.0 as i64 - 4500 * MS).abs() <= 2 * MS, "{pause}");
}

#[test]
fn small_tail_of_three_hundred_milliseconds() {
    let c = class_of(&experiment(|_| 300));
    assert_eq!(c.class, BackgroundClass::Small, "{}", c.reason);
    let v = experiment(|_| 300);
    let pause = recommend_pause_for_value(&v[0].runs, IoMix::WithWrites, &PauseConfig::default());
    assert!((pause.0 as i64 - 450 * MS).abs() <= 2 * MS, "{pause}");
    assert_eq!(recommend_pause_for_value(&v[0].runs, IoMix::ReadOnly, &PauseConfig::default()), Nanos::from_millis(100));
}

#[test]
fn tail_growing_with_the_parameter() {
    let c = class_of(&experiment(|v| (100.0 * v) as i64));
    assert_eq!(c.class, BackgroundClass::GrowsWithParameter, "{}", c.reason);
    assert!(c.spearman.expect("rho") > 0.99);
}

#[test]
fn two_millisecond_tail_is_not_significant() {
    let c = class_of(&experiment(|_| 2));
    assert_eq!(c.class, BackgroundClass::NotSignificant, "{}", c.reason);
}

#[test]
fn no_tail_is_none() {
    let c = class_of(&experiment(|_| 0));
    assert_eq!(c.class, BackgroundClass::NoExcursion, "{}", c.reason);
    assert_eq!(c.class.to_string(), "None");
}

// ---------------------------------------------------------------------------------------------
// Malformed input

#[test]
fn csv_bad_number_names_file_line_and_column() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = write_file(dir.path(), "bad.csv", b"time,V\n0.000,0.25\n0.001,0.25\n0.002,0.2x5\n0.003,0.25\n");
    let e = integrate_csv(&p, circuit(), &CsvOptions::default()).expect_err("bad number");
    let msg = e.to_string();
    assert!(matches!(e, TraceError::Parse { line: 4, column: 2, .. }), "{msg}");
    assert!(msg.contains("bad.csv:4:") && msg.contains("column 2 (V_shunt)") && msg.contains("0.2x5"), "{msg}");

    let p = write_file(dir.path(), "badtime.csv", b"0.000,0.25\n1.0.0,0.25\n");
    let e = integrate_csv(&p, circuit(), &CsvOptions::default()).expect_err("bad time");
    assert!(matches!(e, TraceError::Parse { line: 2, column: 1, column_name: "time", .. }), "{e}");

    let p = write_file(dir.path(), "short.csv", b"0.000,0.25\n0.001\n");
    let e = integrate_csv(&p, circuit(), &CsvOptions::default()).expect_err("missing column");
    assert!(matches!(e, TraceError::MissingColumn { line: 2, needed: 2, found: 1, .. }), "{e}");

    let p = write_file(dir.path(), "back.csv", b"0.002,0.25\n0.001,0.25\n");
    let e = integrate_csv(&p, circuit(), &CsvOptions::default()).expect_err("backwards");
    assert!(matches!(e, TraceError::TimeBackwards { line: 2, .. }), "{e}");

    let p = write_file(dir.path(), "empty.csv", b"# nothing\ntime,V\n");
    let e = integrate_csv(&p, circuit(), &CsvOptions::default()).expect_err("empty");
    assert!(matches!(e, TraceError::Empty { .. }), "{e}");

    let e = integrate_csv(dir.path().join("absent.csv"), circuit(), &CsvOptions::default()).expect_err("absent");
    assert!(matches!(e, TraceError::Io { .. }) && e.to_string().contains("absent.csv"), "{e}");
}

#[test]
fn csv_line_numbers_survive_block_boundaries() {
    // > 1 MiB so the bad line sits past the first read block.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut f = std::fs::File::create(dir.path().join("big.csv")).expect("create");
    for i in 0..100_000 {
        writeln!(f, "{:.6},0.250000", i as f64 * 1e-5).expect("write");
    }
    writeln!(f, "1.000000,oops").expect("write");
    drop(f);
    let e = integrate_csv(dir.path().join("big.csv"), circuit(), &CsvOptions::default()).expect_err("bad");
    assert!(matches!(e, TraceError::Parse { line: 100_001, column: 2, .. }), "{e}");
}

#[test]
fn sidecar_problems_name_file_and_every_key() {
    let e = Sidecar::load(fixtures().join("bad-sidecar.json")).expect_err("bad sidecar");
    let msg = e.to_string();
    let TraceError::Sidecar { path, problems } = &e else {
        panic!("wrong error {e:?}");
    };
    assert!(path.ends_with("bad-sidecar.json"));
    let keys: Vec<&str> = problems.iter().map(|p| p.key.as_str()).collect();
    for k in ["format", "shunt_ohms", "shunt_ohm"] {
        assert!(keys.contains(&k), "{k} missing from {msg}");
    }
    assert!(msg.contains("bad-sidecar.json") && msg.contains("key `shunt_ohms`: missing"), "{msg}");

    let dir = tempfile::tempdir().expect("tempdir");
    let p = write_file(dir.path(), "noscale.toml", b"format = \"i16le\"\nsample_rate_hz = 1e3\nshunt_ohms = 0.1\nsupply_volts = 0\n");
    let msg = Sidecar::load(&p).expect_err("no scale").to_string();
    assert!(msg.contains("noscale.toml") && msg.contains("key `scale`: missing"), "{msg}");
    assert!(msg.contains("key `supply_volts`: must be a finite number > 0"), "{msg}");

    let p = write_file(dir.path(), "syntax.json", b"{\"format\": ");
    let e = Sidecar::load(&p).expect_err("syntax");
    assert!(matches!(e, TraceError::SidecarSyntax { .. }) && e.to_string().contains("syntax.json"), "{e}");

    let e = Sidecar::find_beside(dir.path().join("lonely.f32")).expect_err("no sidecar");
    assert!(matches!(e, TraceError::NoSidecar { .. }) && e.to_string().contains("lonely.json"), "{e}");
}

#[test]
fn raw_trace_with_a_partial_sample_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = write_file(dir.path(), "odd.f32", &[0u8; 10]);
    let sc = Sidecar::parse(r#"{"format": "f32le", "sample_rate_hz": 10, "shunt_ohms": 1, "supply_volts": 5}"#, SidecarSyntax::Json, Path::new("inline.json"))
        .expect("sidecar");
    let e = integrate_raw(&data, &sc, DEFAULT_WINDOW).expect_err("truncated");
    assert!(matches!(e, TraceError::TruncatedSample { bytes: 10, sample_bytes: 4, .. }), "{e}");
    assert!(e.to_string().contains("odd.f32"));
}

#[test]
fn run_energy_serialises_to_json() {
    let r = analyze_run(&step_series(), &step_run(), &RunDetectConfig::default()).expect("analyze");
    let j = serde_json::to_value(&r).expect("json");
    assert_eq!(j["start_found"], "trace");
    assert_eq!(j["end_found"], "returned_to_idle");
    assert_eq!(j["start"], r.start.0);
    let c = class_of(&experiment(|_| 300));
    assert_eq!(serde_json::to_value(c.class).expect("json"), "S");
}
