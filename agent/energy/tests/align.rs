//! Alignment of imported traces against the truth (issue 37, "alignment that never invents"): the
//! independent generator in `truth/` samples a probe schedule exactly; the trace's clock error is
//! put in its sidecar only (a start `offset` off and a sample rate `rate` off), so the true
//! misalignment is known in closed form ([`truth_alignment`]) and shares no code with `align`.
//! Checked: exactly aligned traces (the minimal two-run schedules and a full 106-run one) are
//! never refused; offsets of −3…+3 ms and ±50 ms and rate errors of 0.1–1 % are estimated from the
//! rises the message counts; `auto` corrects to a residual within its bounds and the runs' energy
//! is then within a stated error of the truth. Add a case as another (schedule, clock error) pair.

// Integration tests and their helpers: a panic with a message is the test's failure report
// (clippy.toml's allow-*-in-tests covers #[test] functions only, not the helpers they call).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod truth;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::Path;
use truth::{Run, Schedule, MS, S};
use wattflip_energy::align::{self, Alignment};
use wattflip_energy::*;

/// UTC of the trace's first sample.
const T0: i64 = 1_800_000_000_000_000_000;
const RATE: f64 = 100_000.0;
const NOISE_V: f64 = 0.0002;
/// The device's rise after the first submit, in every schedule here (part of the offset the rises
/// measure).
const LATENCY: i64 = 40_000;

/// A run of `len` ns from `at`, with a tail of `tail` ns.
fn run(at: i64, len: i64, tail: i64, i: usize) -> Run {
    Run { first_submit: at, last_complete: at + len, latency: LATENCY, active_w: 1.0 + 0.5 * (i % 3) as f64, tail, tail_w: 0.6, experiment: 0, value: 0.0 }
}

/// A probe's minimal schedule: two runs of `a` and `b` ms, a 10 ms pause between them.
fn two_runs(a: i64, b: i64) -> Schedule {
    let runs = vec![run(S, a * MS, 0, 0), run(S + (a + 10) * MS, b * MS, 0, 1)];
    Schedule { idle_w: 6.0, runs, lead: S, trail: S }
}

/// A full schedule like a probe's: 106 runs of 2–300 ms (log-uniform), 10 ms pauses; a third of
/// the runs have a 4 ms tail (inside the pause), a sixth a 40 ms one (cut by the next run).
fn full_schedule(seed: u64) -> Schedule {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut t = S;
    let mut runs = Vec::new();
    for i in 0..106 {
        let len = (rng.random_range(2f64.ln()..300f64.ln()).exp() * MS as f64) as i64;
        let tail = match i % 6 {
            0 | 3 => 4 * MS,
            5 => 40 * MS,
            _ => 0,
        };
        runs.push(run(t, len, tail, i));
        t += len + 10 * MS;
    }
    let mut s = Schedule { idle_w: 6.0, runs, lead: S, trail: S };
    s.avoid_ambiguous_tails();
    s
}

/// A trace's clock error, written into its sidecar: the first sample is said to be at
/// `T0 + offset` (truly at `T0`) and the rate `RATE·(1 + rate)`.
#[derive(Debug, Clone, Copy)]
struct Clock {
    offset: i64,
    rate: f64,
}

/// The true alignment, from the sidecar's error alone: true instant `t` gets trace time
/// `T0 + offset + (t − T0)/(1 + rate)`, so at the first run's first submit `f` the offset is that
/// minus `f` (plus the device's rise, which the rises measure too) and the rate error 1/(1+rate) − 1.
fn truth_alignment(sched: &Schedule, c: Clock) -> (f64, f64) {
    let f = sched.runs[0].first_submit as f64;
    let trace_f = c.offset as f64 + f / (1.0 + c.rate);
    (trace_f - f + LATENCY as f64, 1.0 / (1.0 + c.rate) - 1.0)
}

/// The raw f32 trace of `sched` with its sidecar (clock error `c`) under `dir`.
fn write_trace(sched: &Schedule, c: Clock, dir: &Path, seed: u64) -> (std::path::PathBuf, Sidecar) {
    let model = sched.model(seed);
    let trace = truth::sample(sched, &model, RATE, NOISE_V, 0, seed);
    let path = dir.join("trace.bin");
    std::fs::write(&path, trace.volts.iter().flat_map(|v| (*v as f32).to_le_bytes()).collect::<Vec<u8>>()).unwrap();
    let text = format!(
        "format = \"f32le\"\nsample_rate_hz = {}\nshunt_ohms = {}\nsupply_volts = {}\nstart_time_utc_ns = {}\n",
        RATE * (1.0 + c.rate),
        trace.shunt_ohms,
        trace.supply_volts,
        T0 + c.offset
    );
    (path.clone(), Sidecar::parse(&text, SidecarSyntax::Toml, &dir.join("trace.toml")).unwrap())
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

/// Imports the trace with `sidecar` and analyses it like `trace import`: the analysis and its
/// alignment estimate.
fn analyse(path: &Path, sidecar: &Sidecar, sched: &Schedule) -> (ProbeAnalysis, Option<Alignment>) {
    let summary = integrate_raw(path, sidecar, DEFAULT_WINDOW).unwrap();
    let series = PowerSeries::from_trace(&summary).unwrap();
    let mut fine = RawSamples { path: path.to_owned(), sidecar: sidecar.clone() };
    let runs = run_infos(sched);
    let idle = (UnixNanos(T0 + sched.lead - S), UnixNanos(T0 + sched.lead - 50 * MS));
    let cfg = RunDetectConfig::default();
    let a = analyze_probe_fine(&series, &runs, Some(idle), &cfg, &mut fine).unwrap();
    let est = align::estimate(&series, &runs, &a, &cfg);
    (a, est)
}

/// One check of a trace with clock error `c`: the estimate and the analysis it came from.
struct Case {
    sched: Schedule,
    analysis: ProbeAnalysis,
    est: Alignment,
    _dir: tempfile::TempDir,
}

fn case(sched: Schedule, c: Clock, seed: u64) -> Case {
    let dir = tempfile::tempdir().unwrap();
    let (path, sidecar) = write_trace(&sched, c, dir.path(), seed);
    let (analysis, est) = analyse(&path, &sidecar, &sched);
    let est = est.unwrap_or_else(|| panic!("{c:?}: no alignment estimate"));
    Case { sched, analysis, est, _dir: dir }
}

/// The number in `text` right after `key` (e.g. "from " → runs).
fn number_after(text: &str, key: &str) -> usize {
    let rest = text.split_once(key).unwrap_or_else(|| panic!("no `{key}` in: {text}")).1;
    rest.split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap()
}

/// Runs whose start the analysis found as a rise in the trace.
fn rises(a: &ProbeAnalysis) -> usize {
    a.runs.iter().filter(|r| r.as_ref().is_ok_and(|e| e.start_found == StartFound::Trace)).count()
}

#[test]
fn exactly_aligned_two_run_schedules_are_accepted_with_the_offset_checked_alone() {
    let mut problems = Vec::new();
    for (i, (a, b)) in [(5, 5), (20, 300), (300, 20), (100, 100), (3, 600)].into_iter().enumerate() {
        let c = case(two_runs(a, b), Clock { offset: 0, rate: 0.0 }, 40 + i as u64);
        let text = c.est.describe();
        if !c.est.acceptable() {
            problems.push(format!("{a} + {b} ms: refused: {text}"));
        }
        // Two rises give no rate: the message says so and names the runs it used.
        if !text.contains("rate not estimated") || number_after(&text, "from ") != 2 {
            problems.push(format!("{a} + {b} ms: {text} ({} rises found)", rises(&c.analysis)));
        }
        if (c.est.offset_ns - LATENCY as f64).abs() > RISE_BIAS_NS {
            problems.push(format!("{a} + {b} ms: offset {} ns, truth {LATENCY}", c.est.offset_ns));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The analysis' refined rise sits up to ≈ 50 µs before the model's (its centred average leaves
/// the idle band early on scope noise; `schedules.rs` bounds starts at 57 µs): the rises' offset is
/// checked to this.
const RISE_BIAS_NS: f64 = 60_000.0;
/// Runs after a cut tail whose own rise still stands out above the tail are found by the analysis
/// too: the rises counted may exceed [`visible_rises`] by a few (80 of 77 on seed 7).
const COUNT_SLACK: usize = 5;

/// Runs whose rise a correct analysis can see: the first, and every one after a run whose work
/// (IO and tail) was over before it (from the truth: not cut).
fn visible_rises(sched: &Schedule, seed: u64) -> usize {
    let model = sched.model(seed);
    let t = sched.truth(&model, &[]);
    1 + t.windows(2).filter(|w| !w[0].cut).count()
}

#[test]
fn an_exactly_aligned_full_schedule_is_accepted_from_its_runs_rises() {
    let sched = full_schedule(7);
    let visible = visible_rises(&sched, 7);
    let c = case(sched, Clock { offset: 0, rate: 0.0 }, 7);
    let text = c.est.describe();
    assert!(c.est.acceptable(), "refused: {text}");
    assert!(number_after(&text, "from ").abs_diff(visible) <= COUNT_SLACK, "{visible} rises visible: {text}");
    assert!((c.est.offset_ns - LATENCY as f64).abs() <= RISE_BIAS_NS && c.est.rate_error.abs() <= 1e-5, "{text}");
}

/// Offsets of −3…+3 ms (an early clock puts each run's rise in the pause before it, and the
/// analysis takes it for the previous run's tail): estimated within 0.1 ms of the truth from the
/// rises actually there, named with their count, refused beyond +1 ms and, early, beyond −0.1 ms
/// (the runs' energy would be split at their first submits).
#[test]
fn offsets_of_minus_3_to_plus_3_ms_are_estimated_from_the_rises_there_and_refused_beyond_1_ms() {
    let sched = full_schedule(11);
    let visible = visible_rises(&sched, 11);
    let mut problems = Vec::new();
    for off_us in [-3000, -2500, -2000, -1500, -1200, -500, 500, 1200, 2000, 3000] {
        let c = case(sched.clone(), Clock { offset: off_us * 1000, rate: 0.0 }, 11);
        let (truth_o, _) = truth_alignment(&c.sched, Clock { offset: off_us * 1000, rate: 0.0 });
        let text = c.est.describe();
        eprintln!("{off_us} µs: {text}");
        let runs = text.split_once("from ").and_then(|(_, r)| r.split_whitespace().next()?.parse::<usize>().ok());
        if (c.est.offset_ns - truth_o).abs() > 100_000.0
            || c.est.acceptable() != (-1e5..=1e6).contains(&truth_o)
            || runs.is_none_or(|n| n.abs_diff(visible) > COUNT_SLACK)
        {
            problems.push(format!("{off_us} µs (truth {:+.3} ms, {visible} rises visible): {text}", truth_o / 1e6));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// ±50 ms (beyond the start search of a run) and rate errors of 0.1–1 %: refused in check mode,
/// the offset named within 2 ms and the rate within 0.05 % (the coarse search's figures; `auto`
/// refines them from the rises, `trace_align_auto.rs`), and the message
/// never claims more runs' rises than the trace shows.
#[test]
fn far_offsets_and_rate_errors_are_refused_naming_the_estimate() {
    let sched = full_schedule(13);
    let visible = visible_rises(&sched, 13);
    let mut problems = Vec::new();
    for clock in [(50_000_000, 0.0), (-50_000_000, 0.0), (0, 0.001), (0, -0.001), (0, 0.003), (0, 0.01), (0, -0.01)] {
        let clock = Clock { offset: clock.0, rate: clock.1 };
        let c = case(sched.clone(), clock, 13);
        let (o, e) = truth_alignment(&c.sched, clock);
        let text = c.est.describe();
        eprintln!("{clock:?}: {text}");
        let claimed = text.split_once("from ").and_then(|(_, r)| r.split_whitespace().next()?.parse::<usize>().ok()).unwrap_or(0);
        if c.est.acceptable() || (c.est.offset_ns - o).abs() > 2e6 || (c.est.rate_error - e).abs() > 5e-4 || claimed > visible + COUNT_SLACK {
            problems.push(format!("{clock:?} (truth {:+.3} ms, {:+.4} %; {visible} rises visible): {text}", o / 1e6, e * 100.0));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
