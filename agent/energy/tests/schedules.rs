//! Property tests of per-run energy on probe schedules with known truth (issue 14): random
//! schedules (pauses 10 ms..3 s, runs 5 ms..2 s, tails 0..3 s, tails into the next run, NaN gaps,
//! scope-like noise) sampled at 100 kS/s by the independent generator in `truth/`, written as CSV,
//! raw f32 and raw i16, imported and analysed like `trace import` does, and every run checked
//! against the targets. Seeded, a fixed number of cases. Add a scenario as a new `#[test]` calling
//! `check_case` with its schedule.

// Integration tests and their helpers: a panic with a message is the test's failure report
// (clippy.toml's allow-*-in-tests covers #[test] functions only, not the helpers they call).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod truth;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::io::Write;
use std::path::Path;
use truth::{Schedule, Trace, Truth, MS, S};
use wattflip_energy::*;

/// UTC of the trace's first sample.
const T0: i64 = 1_800_000_000_000_000_000;
const RATE: f64 = 100_000.0;
/// 0.2 mV of noise on a ≈ 10 mV idle shunt reading: ≈ 50 mW per sample.
const NOISE_V: f64 = 0.0002;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Format {
    Csv,
    F32,
    I16,
}

/// Write the trace in `format` under `dir` and import it like `trace import` (1 ms windows).
fn import(trace: &Trace, format: Format, dir: &Path) -> (PowerSeries, Box<dyn FineSamples>) {
    let circuit = ShuntCircuit::new(Ohms(trace.shunt_ohms), Volts(trace.supply_volts)).expect("circuit");
    let summary: (TraceSummary, Box<dyn FineSamples>) = match format {
        Format::Csv => {
            let path = dir.join("trace.csv");
            let mut f = std::io::BufWriter::new(std::fs::File::create(&path).expect("create csv"));
            writeln!(f, "time_s,v_shunt").expect("write");
            for (k, v) in trace.volts.iter().enumerate() {
                writeln!(f, "{:.5},{:.7e}", k as f64 / trace.rate, v).expect("write");
            }
            f.flush().expect("flush");
            drop(f);
            let opts = CsvOptions { time_origin: Some(UnixNanos(T0)), ..Default::default() };
            let summary = integrate_csv(&path, circuit, &opts).expect("csv import");
            (summary, Box::new(CsvSamples { path, circuit, options: opts }) as Box<dyn FineSamples>)
        }
        Format::F32 | Format::I16 => {
            let path = dir.join("trace.bin");
            let (name, scale, bytes): (&str, f64, Vec<u8>) = if format == Format::F32 {
                ("f32le", 1.0, trace.volts.iter().flat_map(|v| (*v as f32).to_le_bytes()).collect())
            } else {
                // i16 has no NaN: a gap is written as the most negative count and flagged by the
                // generator; here gaps are rare, so they are written as that count and counted
                // as data (the test then expects no gaps for i16).
                let scale = 1.0 / 65536.0;
                ("i16le", scale, trace.volts.iter().flat_map(|v| ((v / scale).round() as i16).to_le_bytes()).collect())
            };
            std::fs::write(&path, bytes).expect("write raw");
            let sidecar = format!(
                "format = \"{name}\"\nsample_rate_hz = {}\nshunt_ohms = {}\nsupply_volts = {}\nscale = {scale:e}\nstart_time_utc_ns = {T0}\n",
                trace.rate, trace.shunt_ohms, trace.supply_volts
            );
            let sc = Sidecar::parse(&sidecar, SidecarSyntax::Toml, &dir.join("trace.toml")).expect("sidecar");
            let summary = integrate_raw(&path, &sc, DEFAULT_WINDOW).expect("raw import");
            (summary, Box::new(RawSamples { path, sidecar: sc }) as Box<dyn FineSamples>)
        }
    };
    (PowerSeries::from_trace(&summary.0).expect("series"), summary.1)
}

fn run_infos(s: &Schedule) -> Vec<RunInfo> {
    s.runs
        .iter()
        .map(|r| RunInfo {
            first_submit: UnixNanos(T0 + r.first_submit),
            last_complete: UnixNanos(T0 + r.last_complete),
            bytes: 1 << 20,
            ios: 256,
            next_run_start: None,
            datasheet_active: None,
        })
        .collect()
}

/// Worst errors over a case, for the report.
#[derive(Debug, Default, Clone, Copy)]
struct Worst {
    energy_long: f64,
    energy_short: f64,
    start_ns: i64,
    end_ns: i64,
    runs: usize,
}

/// Analyse and check every run against the targets of issue 14.
fn check_case(label: &str, sched: &Schedule, format: Format, gaps: usize, seed: u64) -> Worst {
    let model = sched.model(seed);
    let trace = truth::sample(sched, &model, RATE, NOISE_V, if format == Format::I16 { 0 } else { gaps }, seed);
    let truths = sched.truth(&model, &trace.gaps);
    let dir = tempfile::tempdir().expect("tempdir");
    let (series, mut fine) = import(&trace, format, dir.path());
    let runs = run_infos(sched);
    let idle = (UnixNanos(T0), UnixNanos(T0 + sched.lead - 50 * MS));
    let a = analyze_probe_fine(&series, &runs, Some(idle), &RunDetectConfig::default(), fine.as_mut()).expect("second pass");
    assert_eq!(a.baseline_source, BaselineSource::IdleWindow, "{label}");
    let mut w = Worst::default();
    let mut problems = Vec::new();
    for (i, (res, t)) in a.runs.iter().zip(&truths).enumerate() {
        let r = match res {
            Ok(r) => r,
            Err(e) => {
                problems.push(format!("run {i}: no energy: {e}"));
                continue;
            }
        };
        check_run(i, r, t, &sched.runs[i], &mut w, &mut problems);
    }
    // A cut tail is split at the next run's first submit: the two runs meet exactly there, so no
    // joule is counted twice or lost between them.
    for w in a.runs.windows(2) {
        if let [Ok(x), Ok(y)] = w {
            if x.tail_cut && x.end != y.start {
                problems.push(format!("cut at {} but the next run starts at {}", x.end.0 - T0, y.start.0 - T0));
            }
            if x.end > y.start {
                problems.push(format!("run ending at {} overlaps the next from {}", x.end.0 - T0, y.start.0 - T0));
            }
        }
    }
    let gap_total: u64 = a.runs.iter().filter_map(|r| r.as_ref().ok()).map(|r| r.gap_samples).sum();
    let gap_truth: u64 = trace
        .gaps
        .iter()
        .filter(|(g0, g1)| truths.iter().any(|t| *g0 >= t.start && *g1 <= t.end))
        .map(|(g0, g1)| ((g1 - g0) as f64 * RATE / 1e9).round() as u64)
        .sum();
    if gap_total != gap_truth {
        problems.push(format!("gap samples in runs: {gap_total}, truth {gap_truth}"));
    }
    let trace_gaps: u64 = trace.volts.iter().filter(|v| v.is_nan()).count() as u64;
    if a.gap_samples != trace_gaps {
        problems.push(format!("gap samples in the trace: {}, truth {trace_gaps}", a.gap_samples));
    }
    assert!(problems.is_empty(), "{label} ({format:?}, seed {seed}):\n{}", problems.join("\n"));
    w
}

fn check_run(i: usize, r: &RunEnergy, t: &Truth, run: &truth::Run, w: &mut Worst, problems: &mut Vec<String>) {
    let (start, end) = (r.start.0 - T0, r.end.0 - T0);
    let span = t.end - t.start;
    let err = (r.energy_total.0 - t.energy) / t.energy;
    let limit = if span >= 100 * MS {
        0.005
    } else if span >= 10 * MS {
        0.02
    } else {
        // Runs of 5..10 ms: no energy target in the issue; boundaries still to 0.2 ms, which
        // bounds the energy error at ≈ 0.4 ms of power over 5 ms.
        0.08
    };
    if err.abs() > limit {
        problems.push(format!(
            "run {i}: energy {:.6} J, truth {:.6} J ({:+.3} %, limit {} %), span {} ms",
            r.energy_total.0,
            t.energy,
            err * 100.0,
            limit * 100.0,
            span as f64 / 1e6
        ));
    }
    if span >= 100 * MS {
        w.energy_long = w.energy_long.max(err.abs());
    } else if span >= 10 * MS {
        w.energy_short = w.energy_short.max(err.abs());
    }
    let (ds, de) = ((start - t.start).abs(), (end - t.end).abs());
    w.start_ns = w.start_ns.max(ds);
    w.end_ns = w.end_ns.max(de);
    if ds > 200_000 || de > 200_000 {
        problems.push(format!("run {i}: start {start} end {end}, truth {} {} (Δ {ds} / {de} ns); run {:?}", t.start, t.end, run));
    }
    if r.tail_cut != t.cut {
        problems.push(format!("run {i}: tail_cut {}, truth {}", r.tail_cut, t.cut));
    }
    let bg = r.background_duration.0 as i64;
    if (bg - t.tail).abs() > (t.tail / 20).max(MS) {
        problems.push(format!("run {i}: tail {} ms, truth {} ms", bg as f64 / 1e6, t.tail as f64 / 1e6));
    }
    w.runs += 1;
}

/// A fixed number of seeded random schedules over the ranges, in one format.
fn random_cases(format: Format, cases: u64, seed0: u64) {
    let mut all = Worst::default();
    for c in 0..cases {
        let seed = seed0 + c;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let sched = truth::random_schedule(&mut rng, 8, (5.0, 2000.0), (10.0, 3000.0), (0.5, 3000.0));
        let w = check_case("random schedule", &sched, format, 3, seed);
        all.energy_long = all.energy_long.max(w.energy_long);
        all.energy_short = all.energy_short.max(w.energy_short);
        all.start_ns = all.start_ns.max(w.start_ns);
        all.end_ns = all.end_ns.max(w.end_ns);
        all.runs += w.runs;
    }
    eprintln!(
        "{format:?}: {} runs, worst energy error {:.3} % (≥ 100 ms), {:.3} % (≥ 10 ms), start {} µs, end {} µs",
        all.runs,
        all.energy_long * 100.0,
        all.energy_short * 100.0,
        all.start_ns / 1000,
        all.end_ns / 1000
    );
}

#[test]
fn random_schedules_raw_f32() {
    random_cases(Format::F32, 8, 1000);
}

#[test]
fn random_schedules_raw_i16() {
    random_cases(Format::I16, 4, 2000);
}

#[test]
fn random_schedules_csv() {
    random_cases(Format::Csv, 3, 3000);
}

/// The probe's own default schedules: `--quick` (10 ms pauses) and `small` (100 ms pauses), short
/// runs, some tails reaching into the next run, and long pauses for comparison.
#[test]
fn default_pauses_with_short_runs() {
    for (pause_ms, seed) in [(10.0, 11), (100.0, 12), (1000.0, 13), (3000.0, 14)] {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let sched = truth::random_schedule(&mut rng, 12, (5.0, 120.0), (pause_ms, pause_ms), (0.5, 300.0));
        check_case(&format!("pause {pause_ms} ms"), &sched, Format::F32, 2, seed);
    }
}

#[test]
fn truth_generator_conserves_energy() {
    // The generator's own check: the sampled trace integrates to the model's energy.
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let sched = truth::random_schedule(&mut rng, 4, (10.0, 50.0), (10.0, 50.0), (1.0, 20.0));
    let model = sched.model(7);
    let trace = truth::sample(&sched, &model, RATE, 0.0, 0, 7);
    let (r, u) = (trace.shunt_ohms, trace.supply_volts);
    let e: f64 = trace.volts.iter().map(|v| v / r * (u - v) / RATE).sum();
    let want = model.energy(0, (trace.volts.len() as f64 / RATE * 1e9).round() as i64);
    assert!(((e - want) / want).abs() < 1e-9, "{e} vs {want}");
    let _ = S;
}

/// A schedule of experiments whose background class is known by construction (the paper's Table
/// 2): 4 values × 3 repetitions each, runs of 20–80 ms.
fn class_schedule(seed: u64) -> (Schedule, Vec<(&'static str, BackgroundClass)>) {
    use rand::Rng;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // (name, class, tail in ms for value v, pause in ms)
    type Tail = fn(f64, &mut ChaCha8Rng) -> f64;
    let experiments: [(&str, BackgroundClass, Tail, i64); 5] = [
        ("none", BackgroundClass::NoExcursion, |_, _| 0.0, 100),
        ("not significant", BackgroundClass::NotSignificant, |_, r| r.random_range(1.6..2.4), 100),
        ("small", BackgroundClass::Small, |_, r| r.random_range(150.0..250.0), 500),
        ("grows", BackgroundClass::GrowsWithParameter, |v, r| 40.0 * 2f64.powf(v) * r.random_range(0.95..1.05), 700),
        ("extended", BackgroundClass::Extended, |_, r| r.random_range(1200.0..1500.0), 2000),
    ];
    let mut runs = Vec::new();
    let mut t = S;
    for (e, (_, _, tail, pause)) in experiments.iter().enumerate() {
        for v in 0..4 {
            for _ in 0..3 {
                let dur = (rng.random_range(20.0..80.0) * MS as f64) as i64;
                let tail = (tail(v as f64, &mut rng) * MS as f64) as i64;
                runs.push(truth::Run {
                    first_submit: t,
                    last_complete: t + dur,
                    latency: rng.random_range(0..100_000),
                    active_w: rng.random_range(1.0..3.0),
                    tail,
                    tail_w: rng.random_range(0.5..1.0),
                    experiment: e,
                    value: v as f64,
                });
                t += dur + pause * MS;
            }
        }
    }
    let classes = experiments.iter().map(|(n, c, _, _)| (*n, *c)).collect();
    (Schedule { idle_w: 2.4, runs, lead: S, trail: 2 * S }, classes)
}

#[test]
fn background_classes_from_measured_tails() {
    let seed = 41;
    let (sched, classes) = class_schedule(seed);
    let model = sched.model(seed);
    let trace = truth::sample(&sched, &model, RATE, NOISE_V, 0, seed);
    let dir = tempfile::tempdir().expect("tempdir");
    let (series, mut fine) = import(&trace, Format::F32, dir.path());
    let runs = run_infos(&sched);
    let idle = (UnixNanos(T0), UnixNanos(T0 + sched.lead - 50 * MS));
    let a = analyze_probe_fine(&series, &runs, Some(idle), &RunDetectConfig::default(), fine.as_mut()).expect("second pass");
    // The classifier's resolution is the detector's window (1 ms), not the refined edge.
    let cfg = ClassifyConfig { sample_period: series.typical_period(), ..Default::default() };
    let mut right = 0;
    for (e, (name, want)) in classes.iter().enumerate() {
        let values: Vec<ValueRuns> = (0..4)
            .map(|v| ValueRuns {
                value: v as f64,
                runs: sched
                    .runs
                    .iter()
                    .zip(&a.runs)
                    .filter(|(r, _)| r.experiment == e && r.value == v as f64)
                    .map(|(_, m)| BackgroundObservation::from(m.as_ref().expect("run analysed")))
                    .collect(),
            })
            .collect();
        let c = classify(&values, &cfg).expect("classify");
        assert_eq!(c.class, *want, "{name}: {}", c.reason);
        right += 12;
    }
    assert_eq!(right, sched.runs.len());
}

/// Writes `sched` as raw f32 with a sidecar saying `rate_hz`, imports it and analyses it.
fn analyse_raw_with_rate(sched: &Schedule, seed: u64, rate_hz: f64, truncate_to: Option<usize>) -> ProbeAnalysis {
    let model = sched.model(seed);
    let mut trace = truth::sample(sched, &model, RATE, NOISE_V, 0, seed);
    if let Some(n) = truncate_to {
        trace.volts.truncate(n);
    }
    trace.rate = rate_hz;
    let dir = tempfile::tempdir().expect("tempdir");
    let (series, mut fine) = import(&trace, Format::F32, dir.path());
    let idle = (UnixNanos(T0), UnixNanos(T0 + sched.lead - 50 * MS));
    analyze_probe_fine(&series, &run_infos(sched), Some(idle), &RunDetectConfig::default(), fine.as_mut()).expect("second pass")
}

fn quick_schedule(seed: u64) -> Schedule {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    truth::random_schedule(&mut rng, 24, (5.0, 120.0), (10.0, 10.0), (0.5, 30.0))
}

fn assert_refused(a: &ProbeAnalysis, words: &[&str]) {
    let why = a.refused().expect("refused");
    for w in words {
        assert!(why.contains(w), "{why}");
    }
    assert!(a.runs.iter().all(|r| matches!(r, Err(AnalysisError::TraceMismatch(_)))), "{:?}", a.runs);
}

#[test]
fn a_sidecar_with_half_the_rate_is_refused_with_the_numbers() {
    let sched = quick_schedule(51);
    let a = analyse_raw_with_rate(&sched, 51, RATE / 2.0, None);
    assert_refused(&a, &["trace does not match the probe", "runs inside the trace show no activity where the probe ran them", "sample_rate_hz"]);
    // The right rate: every run measured.
    let a = analyse_raw_with_rate(&sched, 51, RATE, None);
    assert!(a.refused().is_none() && a.runs.iter().all(Result::is_ok), "{:?}", a.runs.iter().filter(|r| r.is_err()).collect::<Vec<_>>());
}

#[test]
fn a_millisecond_csv_read_as_seconds_is_refused() {
    let sched = quick_schedule(52);
    let model = sched.model(52);
    let trace = truth::sample(&sched, &model, 10_000.0, NOISE_V, 0, 52);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ms.csv");
    let mut text = String::from("t_ms,v\n");
    for (k, v) in trace.volts.iter().enumerate() {
        text.push_str(&format!("{:.1},{v:.7e}\n", k as f64 / 10.0));
    }
    std::fs::write(&path, text).expect("write csv");
    let circuit = ShuntCircuit::new(Ohms(trace.shunt_ohms), Volts(trace.supply_volts)).expect("circuit");
    let analyse = |unit: TimeUnit| {
        let opts = CsvOptions { time_unit: unit, time_origin: Some(UnixNanos(T0)), ..Default::default() };
        let summary = integrate_csv(&path, circuit, &opts).expect("csv");
        let series = PowerSeries::from_trace(&summary).expect("series");
        let mut fine = CsvSamples { path: path.clone(), circuit, options: opts };
        let idle = (UnixNanos(T0), UnixNanos(T0 + sched.lead - 50 * MS));
        analyze_probe_fine(&series, &run_infos(&sched), Some(idle), &RunDetectConfig::default(), &mut fine).expect("second pass")
    };
    assert_refused(&analyse(TimeUnit::Seconds), &["trace does not match the probe", "--time-unit"]);
    let a = analyse(TimeUnit::Millis);
    assert!(a.refused().is_none() && a.runs.iter().all(Result::is_ok), "{:?}", a.runs.iter().filter(|r| r.is_err()).collect::<Vec<_>>());
}

#[test]
fn a_wrong_origin_is_refused() {
    let sched = quick_schedule(53);
    let model = sched.model(53);
    let trace = truth::sample(&sched, &model, RATE, NOISE_V, 0, 53);
    let dir = tempfile::tempdir().expect("tempdir");
    let (series, mut fine) = import(&trace, Format::F32, dir.path());
    // The probe's clock 400 ms (and 1 h) away from the trace's origin.
    for shift in [400 * MS, 3600 * S] {
        let runs: Vec<RunInfo> = run_infos(&sched)
            .into_iter()
            .map(|r| RunInfo { first_submit: r.first_submit.plus(Nanos(shift as u64)), last_complete: r.last_complete.plus(Nanos(shift as u64)), ..r })
            .collect();
        let idle = (UnixNanos(T0 + shift), UnixNanos(T0 + shift + sched.lead - 50 * MS));
        let a = analyze_probe_fine(&series, &runs, Some(idle), &RunDetectConfig::default(), fine.as_mut()).expect("second pass");
        assert_refused(&a, &["trace does not match the probe", "time origin"]);
    }
}

#[test]
fn runs_after_the_end_of_the_trace_are_not_covered() {
    let sched = quick_schedule(54);
    // Cut the trace in the middle of the probe.
    let mid = sched.runs[12].first_submit;
    let keep = (mid as f64 * RATE / 1e9) as usize;
    let a = analyse_raw_with_rate(&sched, 54, RATE, Some(keep));
    assert!(a.refused().is_none());
    for (i, r) in a.runs.iter().enumerate() {
        match r {
            Ok(_) => assert!(i < 12, "run {i} measured"),
            Err(e) => {
                assert!(i >= 11, "run {i}: {e}");
                assert!(e.to_string().starts_with("not covered by the trace: run ["), "run {i}: {e}");
            }
        }
    }
    assert!(a.warnings.iter().any(|w| w.contains("runs are not covered by the trace")), "{:?}", a.warnings);
}

#[test]
fn without_the_idle_window_each_run_uses_the_idle_after_the_previous_end() {
    // Run 0 has a 1.5 s tail that ends 300 ms before run 1; run 2 follows run 1 after 20 ms. The
    // local fallback must take run 1's baseline after run 0's tail (defect 3: a baseline from a
    // tail), and refuse run 2, whose pause holds too few idle windows.
    let run = |f: i64, d: i64, tail: i64| truth::Run {
        first_submit: f,
        last_complete: f + d,
        latency: 20_000,
        active_w: 2.0,
        tail,
        tail_w: 0.8,
        experiment: 0,
        value: 0.0,
    };
    let sched = Schedule {
        idle_w: 2.4,
        runs: vec![run(S + 200 * MS, 100 * MS, 1500 * MS), run(3100 * MS, 50 * MS, 0), run(3170 * MS, 50 * MS, 0)],
        lead: S,
        trail: 2 * S,
    };
    let model = sched.model(61);
    let trace = truth::sample(&sched, &model, RATE, NOISE_V, 0, 61);
    let truths = sched.truth(&model, &trace.gaps);
    let dir = tempfile::tempdir().expect("tempdir");
    let (series, mut fine) = import(&trace, Format::F32, dir.path());
    let a = analyze_probe_fine(&series, &run_infos(&sched), None, &RunDetectConfig::default(), fine.as_mut()).expect("second pass");
    assert_eq!(a.baseline_source, BaselineSource::Local);
    let r1 = a.runs[1].as_ref().expect("run 1");
    assert_eq!(r1.baseline_source, BaselineSource::Local);
    assert!((r1.baseline.median.0 - 2.4).abs() < 0.01, "{:?}", r1.baseline);
    assert!(r1.baseline.from.0 - T0 >= truths[0].end, "{:?} vs tail end {}", r1.baseline, truths[0].end);
    assert!(((r1.energy_total.0 - truths[1].energy) / truths[1].energy).abs() < 0.005);
    assert!(matches!(a.runs[2], Err(AnalysisError::NotEnoughBaseline { found: 0, needed: 10, .. })), "{:?}", a.runs[2]);
}

/// The live path's input: a sensor read every 1 ms (each reading the mean over its interval, like an
/// INA2xx conversion), as a `PowerSeries` straight from the readings, no trace file and no second
/// pass. Same analysis (`analyze_probe`); at 1 kHz edges are resolved inside the 1 ms readings by
/// the step model, so the bounds are looser than a 100 kS/s trace's.
#[test]
fn live_1khz_readings_with_known_truth() {
    for (pause_ms, seed) in [(10.0, 71), (100.0, 72), (1000.0, 73)] {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let sched = truth::random_schedule(&mut rng, 10, (20.0, 1500.0), (pause_ms, pause_ms), (3.0, 600.0));
        let model = sched.model(seed);
        let trace = truth::sample(&sched, &model, 1000.0, 0.0, 0, seed);
        let truths = sched.truth(&model, &trace.gaps);
        let (r, u) = (trace.shunt_ohms, trace.supply_volts);
        // ±5 mW of sensor noise (deterministic), on watts as a sensor reports them.
        let series = PowerSeries::from_samples(trace.volts.iter().enumerate().map(|(k, v)| {
            let noise = 0.005 * (((k * 7919) % 13) as f64 / 6.0 - 1.0);
            (UnixNanos(T0 + k as i64 * MS), Watts(v / r * (u - v) + noise))
        }))
        .expect("series");
        let idle = (UnixNanos(T0), UnixNanos(T0 + sched.lead - 50 * MS));
        let a = analyze_probe(&series, &run_infos(&sched), Some(idle), &RunDetectConfig::default(), TimeBase::Shared);
        let mut problems = Vec::new();
        for (i, (res, t)) in a.runs.iter().zip(&truths).enumerate() {
            let Ok(m) = res else {
                problems.push(format!("run {i}: {res:?}"));
                continue;
            };
            let err = (m.energy_total.0 - t.energy) / t.energy;
            let limit = if t.end - t.start >= 100 * MS { 0.01 } else { 0.05 };
            if err.abs() > limit {
                problems.push(format!("run {i}: energy {:+.3} % (limit {} %)", err * 100.0, limit * 100.0));
            }
            let (ds, de) = ((m.start.0 - T0 - t.start).abs(), (m.end.0 - T0 - t.end).abs());
            if ds > MS || de > MS {
                problems.push(format!("run {i}: start Δ {ds} ns, end Δ {de} ns"));
            }
            if m.tail_cut != t.cut {
                problems.push(format!("run {i}: tail_cut {} vs {}", m.tail_cut, t.cut));
            }
        }
        assert!(problems.is_empty(), "pause {pause_ms} ms:\n{}", problems.join("\n"));
    }
}

/// The probe's real `--quick` schedule (a recorded `report.json`, `tests/fixtures/energy/`): runs
/// of 4.3–607 ms, 10 ms pauses; tails after the write runs, the SW ones longer than the pause.
#[test]
fn real_quick_report_schedule_in_a_100ks_trace() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/energy/quick-report.json");
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture")).expect("json");
    let runs: Vec<(i64, i64, String)> = report["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| (r["start_ns"].as_i64().expect("start"), r["end_ns"].as_i64().expect("end"), r["pattern"].as_str().expect("pattern").to_string()))
        .collect();
    let origin = runs[0].0 - S;
    let sched = truth::probe_schedule(&runs.iter().map(|(s, e, pat)| (s - origin, e - origin, pat.as_str())).collect::<Vec<_>>());
    let truths = sched.truth(&sched.model(5), &[]);
    assert_eq!(truths.iter().filter(|t| t.cut).count(), 2, "the first two SW tails reach into the next run");
    check_case("real --quick schedule", &sched, Format::F32, 4, 5);
}

/// A flat rail (runs invisible in power): recorded live on the probe's own clock, each run is
/// measured over its host window (`Nominal`); the same series as an imported trace is refused.
#[test]
fn runs_invisible_in_power_nominal_live_refused_imported() {
    let series = PowerSeries::from_samples((0..4000).map(|k| (UnixNanos(T0 + k * MS), Watts(6.0)))).expect("series");
    let runs: Vec<RunInfo> = (0..4)
        .map(|i| RunInfo {
            first_submit: UnixNanos(T0 + S + i * 300 * MS),
            last_complete: UnixNanos(T0 + S + i * 300 * MS + 200 * MS),
            bytes: 1 << 20,
            ios: 256,
            next_run_start: None,
            datasheet_active: None,
        })
        .collect();
    let idle = Some((UnixNanos(T0), UnixNanos(T0 + S)));
    let live = analyze_probe(&series, &runs, idle, &RunDetectConfig::default(), TimeBase::Shared);
    for r in &live.runs {
        let r = r.as_ref().expect("nominal");
        assert_eq!((r.start_found, r.end_found), (StartFound::Nominal, EndFound::Nominal));
        assert_eq!((r.start, r.end), (r.run.first_submit, r.run.last_complete));
        assert!((r.energy_total.0 - 1.2).abs() < 1e-9, "{}", r.energy_total);
        assert!(r.energy_above_idle.0.abs() < 1e-9);
    }
    let imported = analyze_probe(&series, &runs, idle, &RunDetectConfig::default(), TimeBase::Imported);
    assert!(imported.refused().is_some_and(|w| w.contains("4 of the 4 runs inside the trace show no activity")), "{:?}", imported.refused());
}

/// Tails that end 0.6–2.7 ms before the next run's first submit (seen on a real `--values small`
/// schedule): neither the end nor the next start may be pulled across the gap by the next run's
/// IO or the previous tail (edge averages stay inside the run's bounds).
#[test]
fn tails_ending_just_before_the_next_run() {
    let mut rng = ChaCha8Rng::seed_from_u64(81);
    let mut sched = truth::random_schedule(&mut rng, 8, (30.0, 200.0), (25.0, 25.0), (1.0, 2.0));
    let n = sched.runs.len();
    for i in 0..n - 1 {
        let gap = sched.runs[i + 1].first_submit - sched.runs[i].last_complete;
        sched.runs[i].tail = gap - (600_000 + 300_000 * i as i64);
        sched.runs[i].tail_w = 0.8;
    }
    let truths = sched.truth(&sched.model(81), &[]);
    assert!(truths.iter().all(|t| !t.cut));
    check_case("tails just before the next run", &sched, Format::F32, 0, 81);
}
