//! The live path's per-run energy against counters that move like the kernel's (issue 27): a power
//! model with known energy at every instant (the energy crate's truth generator, which shares no
//! code with the analysis), an energy counter that adds the model's exact energy every 976 µs (RAPL's
//! update period, docs/sources-and-drives.md §1.2; an INA2xx `energy1_input` behaves alike at its conversion
//! time) in whole µJ, and a recorder that reads it every 1 ms or 5 ms, late by up to 100 µs. Every
//! run is compared with the model's integral over the bounds the analysis reports for it. Add a
//! scenario by changing the schedule's ranges or the reader.

// Integration tests and their helpers: a panic with a message is the test's failure report
// (clippy.toml's allow-*-in-tests covers #[test] functions only, not the helpers they call).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../energy/tests/truth/mod.rs"]
mod truth;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use truth::{Model, Schedule, MS};
use wattflip_agent::energy::live::ZoneSeries;
use wattflip_agent::energy::{energy_of_recording, ProbeEnergy};
use wattflip_uflip::{ProbeReport, RunResult};

/// How close to a tail's true end the live path finds it on a counter series (its levels are
/// averaged over 10 ms, `docs/energy-method.md` §4 "Live runs").
const TAIL_END: i64 = 10 * MS;
/// UTC of the model's time 0.
const T0: i64 = 1_800_000_000_000_000_000;
/// RAPL's update period (docs/sources-and-drives.md §1.2).
const UPDATE: i64 = 976_000;

/// The counter's value (µJ) at instant `t`: the model's exact energy up to its last update.
fn counter(model: &Model, phase: i64, t: i64) -> u64 {
    let u = phase + (t - phase).div_euclid(UPDATE) * UPDATE;
    (model.integral(u.max(0)) * 1e6).floor() as u64
}

/// A recorder reading the counter every `period` (late by 0–100 µs, one read in 50 late by 0–3 ms)
/// from 0 to `to`, as the agent's recorder stores it: read instant, mean watts, interval.
fn record(model: &Model, to: i64, period: i64, seed: u64) -> ZoneSeries {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let phase = rng.random_range(0..UPDATE);
    let mut z = ZoneSeries { source: "rapl".into(), zone: "fixture/package-0".into(), scope: "package".into(), update_ns: UPDATE as u64, ..Default::default() };
    let mut prev: Option<(i64, u64)> = None;
    let mut k = 0i64;
    while k * period < to {
        let late = if rng.random_range(0..50) == 0 { rng.random_range(0..3 * MS) } else { rng.random_range(0..100_000) };
        let t = k * period + late;
        k += 1;
        if prev.is_some_and(|(p, _)| t <= p) {
            continue;
        }
        let c = counter(model, phase, t);
        if let Some((pt, pc)) = prev {
            let interval = t - pt;
            z.t.push(T0 + t);
            z.watts.push((c - pc) as f64 * 1e-6 / (interval as f64 * 1e-9));
            z.interval_ns.push(interval as u64);
        }
        prev = Some((t, c));
    }
    z
}

/// The probe report of `sched`: one run per schedule run, the fixture report's first run as the
/// template (so every field a real report has is there).
fn report_of(sched: &Schedule) -> ProbeReport {
    let mut report: ProbeReport = serde_json::from_str(include_str!("../../tests/fixtures/energy/quick-report.json")).expect("fixture report");
    let template: RunResult = report.runs[0].clone();
    report.runs = sched
        .runs
        .iter()
        .enumerate()
        .map(|(i, r)| RunResult {
            run_id: i,
            experiment: format!("exp{}", r.experiment),
            value: r.value,
            start_ns: (T0 + r.first_submit) as u64,
            end_ns: (T0 + r.last_complete) as u64,
            ..template.clone()
        })
        .collect();
    report.started_ns = (T0 + sched.runs[0].first_submit) as u64;
    report
}

/// Relative errors of every run against the model over its own reported bounds, by run length:
/// (< 10 ms, 10–100 ms, ≥ 100 ms), and the runs flagged low-confidence by length.
struct Errors {
    by_len: [Vec<f64>; 3],
    /// Per run: its length in read periods, its error, and whether it was flagged low-confidence.
    by_reads: Vec<(f64, f64, bool)>,
    problems: Vec<String>,
}

fn errors(sched: &Schedule, model: &Model, e: &ProbeEnergy, period: i64) -> Errors {
    let truths = sched.truth(model, &[]);
    let mut out = Errors { by_len: [Vec::new(), Vec::new(), Vec::new()], by_reads: Vec::new(), problems: Vec::new() };
    let mut prev_end = i64::MIN;
    for m in &e.runs {
        let (s, z) = (m.trace_start_ns.unwrap() - T0, m.trace_end_ns.unwrap() - T0);
        let t = &truths[m.run_id];
        let r = &sched.runs[m.run_id];
        let truth = model.energy(s, z);
        let err = (m.energy_j - truth) / truth;
        if s < prev_end || z <= s || m.energy_j <= 0.0 {
            out.problems.push(format!("run {}: bounds [{s}, {z}) after {prev_end}, {} J", m.run_id, m.energy_j));
        }
        // The bounds themselves: from the first submit; to the work's end within two reads and
        // the tail-end resolution (`TAIL_END`), or (a tail too weak for the idle band) from the
        // last completion on. A cut is judged where the work did not end within `TAIL_END` of the
        // next run's first submit.
        let end_ok = (z - t.end).abs() <= 2 * period + TAIL_END || (z >= r.last_complete.min(t.end) && z <= t.end + 2 * period);
        let next = sched.runs.get(m.run_id + 1).map_or(i64::MAX, |n| n.first_submit);
        // The latest background work so far (an earlier run's tail may outlast this run).
        let work_end = sched.runs[..=m.run_id].iter().map(|x| x.last_complete + x.tail).max().unwrap_or(0);
        // A tail within 1.5 idle bands (a counter's steps set it) may not be seen.
        let weak = r.tail_w < 1.5 * m.idle_band_w.unwrap() && !m.tail_cut;
        let cut_ok = m.tail_cut == t.cut || (work_end - next).abs() <= TAIL_END + period || weak;
        let end_ok = end_ok && z <= next;
        if (s - r.first_submit).abs() > 2 * period || !end_ok || !cut_ok {
            out.problems.push(format!(
                "run {}: [{s}, {z}) vs truth [{}, {}) (first submit {}, last completion {}, tail {} W, band {:?}, {} {}, cut {} vs {})",
                m.run_id, t.start, t.end, r.first_submit, r.last_complete, r.tail_w, m.idle_band_w, m.start_found, m.end_found, m.tail_cut, t.cut
            ));
        }
        prev_end = z;
        let len = z - s;
        let class = if len < 10 * MS {
            0
        } else if len < 100 * MS {
            1
        } else {
            2
        };
        out.by_len[class].push(err.abs());
        out.by_reads.push(((len as f64 / period as f64), err.abs(), m.low_confidence));
    }
    out
}

fn median_max(v: &mut [f64]) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return (0.0, 0.0);
    }
    (v[v.len() / 2], v[v.len() - 1])
}

/// What [`measure`] found over all seeds.
struct Measured {
    by_len: [Vec<f64>; 3],
    by_reads: Vec<(f64, f64, bool)>,
    problems: Vec<String>,
    skipped: Vec<String>,
}

/// Random probes (runs of 2–400 ms, pauses of 2–100 ms, tails of 1–60 ms, some cut by the next
/// run) read at `period`: the per-run errors by length, and the problems found.
fn measure(period: i64, seeds: std::ops::Range<u64>) -> Measured {
    let mut out = Measured { by_len: [Vec::new(), Vec::new(), Vec::new()], by_reads: Vec::new(), problems: Vec::new(), skipped: Vec::new() };
    for seed in seeds {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let sched = truth::random_schedule(&mut rng, 30, (2.0, 400.0), (2.0, 100.0), (1.0, 60.0));
        let model = sched.model(seed);
        let zone = record(&model, sched.duration(), period, seed);
        let report = report_of(&sched);
        let e = energy_of_recording(&report, &zone, std::time::Duration::from_secs(1), None).expect("readings in order");
        out.skipped.extend(e.skipped.iter().map(|(r, why)| format!("seed {seed}: run {r}: {why}")));
        let errs = errors(&sched, &model, &e, period);
        out.problems.extend(errs.problems.into_iter().map(|p| format!("seed {seed}: {p}")));
        for (a, b) in out.by_len.iter_mut().zip(errs.by_len) {
            a.extend(b);
        }
        out.by_reads.extend(errs.by_reads);
    }
    out
}

/// Median and max error by length class, then by length in read periods, and the flagged runs.
fn report_line(period: i64, m: &mut Measured) -> String {
    let names = ["< 10 ms", "10-100 ms", ">= 100 ms"];
    let mut s = format!("reads every {} ms:", period / MS);
    for (name, v) in names.iter().zip(m.by_len.iter_mut()) {
        let (med, max) = median_max(v);
        s += &format!(" {name}: n {} median {:.3} % max {:.3} %;", v.len(), med * 100.0, max * 100.0);
    }
    for (lo, hi) in [(0.0, 2.0), (2.0, 4.0), (4.0, 10.0), (10.0, 20.0), (20.0, 1e9)] {
        let mut v: Vec<f64> = m.by_reads.iter().filter(|x| x.0 >= lo && x.0 < hi).map(|x| x.1).collect();
        let (med, max) = median_max(&mut v);
        s += &format!("\n  {lo}-{hi} reads: n {} median {:.3} % max {:.3} %", v.len(), med * 100.0, max * 100.0);
    }
    let flagged = m.by_reads.iter().filter(|x| x.2).count();
    s += &format!("\n  low_confidence: {flagged} of {}", m.by_reads.len());
    s
}

/// The largest error of the runs not flagged low-confidence.
fn max_unflagged(m: &Measured) -> f64 {
    m.by_reads.iter().filter(|x| !x.2).map(|x| x.1).fold(0.0, f64::max)
}

#[test]
fn counters_read_every_millisecond_give_each_runs_energy_over_its_bounds() {
    let mut m = measure(MS, 0..12);
    let line = report_line(MS, &mut m);
    eprintln!("{line}");
    assert!(m.problems.is_empty(), "{line}\n{}", m.problems.join("\n"));
    assert!(m.skipped.is_empty(), "{line}\n{}", m.skipped.join("\n"));
    let (mid_med, _) = median_max(&mut m.by_len[1]);
    let (long_med, long_max) = median_max(&mut m.by_len[2]);
    assert!(m.by_len[2].len() >= 40 && m.by_len[1].len() >= 40, "{line}");
    assert!(long_med <= 0.005 && long_max <= 0.015, "{line}");
    assert!(mid_med <= 0.02, "{line}");
}

#[test]
fn counters_read_every_five_milliseconds_flag_short_runs() {
    let mut m = measure(5 * MS, 0..12);
    let line = report_line(5 * MS, &mut m);
    eprintln!("{line}");
    assert!(m.problems.is_empty(), "{line}\n{}", m.problems.join("\n"));
    assert!(m.skipped.is_empty(), "{line}\n{}", m.skipped.join("\n"));
    let (long_med, long_max) = median_max(&mut m.by_len[2]);
    assert!(long_med <= 0.01 && long_max <= 0.03, "{line}");
    // Runs shorter than LOW_CONFIDENCE_PERIODS reads are flagged (the length in reads is measured
    // from the read grid, the flag from the median period: ±2 % at the boundary); the others stay
    // within 7.5 %.
    let min = wattflip_agent::energy::LOW_CONFIDENCE_PERIODS as f64;
    assert!(m.by_reads.iter().all(|x| x.2 == (x.0 < min) || (x.0 / min - 1.0).abs() < 0.02), "{line}");
    assert!(max_unflagged(&m) <= 0.075, "{line}");
}

/// The recorder of `record`, stalled for `stall` ns from `at` (a busy machine), then catching up
/// the missed grid instants 10 µs apart, as the recorder did before it skipped them.
fn record_with_stall(model: &Model, to: i64, period: i64, at: i64, stall: i64) -> ZoneSeries {
    let phase = 123_000;
    let mut z = ZoneSeries { source: "rapl".into(), zone: "fixture/package-0".into(), scope: "package".into(), update_ns: UPDATE as u64, ..Default::default() };
    let mut reads: Vec<i64> = (0..to / period).map(|k| k * period + 20_000).filter(|t| *t < at || *t >= at + stall).collect();
    let missed = stall / period;
    reads.extend((0..missed).map(|k| at + stall + 20_000 + k * 10_000));
    reads.sort_unstable();
    reads.dedup();
    let mut prev: Option<(i64, u64)> = None;
    for t in reads {
        let c = counter(model, phase, t);
        if let Some((pt, pc)) = prev {
            z.t.push(T0 + t);
            z.watts.push((c - pc) as f64 * 1e-6 / ((t - pt) as f64 * 1e-9));
            z.interval_ns.push((t - pt) as u64);
        }
        prev = Some((t, c));
    }
    z
}

/// Issue 27: after a 92 ms stall of the recorder and its catch-up reads, a 27.7 ms run was written
/// with a negative energy, starting 88 ms after its first IO. Now every run is written from its
/// first IO with a positive energy, and the runs the stall overlaps carry their coverage and the
/// low-confidence flag; the others are fully covered.
#[test]
fn a_recorder_stall_leaves_no_negative_or_shifted_run_and_flags_what_it_overlaps() {
    let mut rng = ChaCha8Rng::seed_from_u64(27);
    let mut sched = truth::random_schedule(&mut rng, 12, (20.0, 60.0), (10.0, 40.0), (1.0, 5.0));
    // The stall covers the pause before run 6 and the first 32 ms of it.
    let r6 = sched.runs[6].clone();
    sched.runs[6].last_complete = r6.first_submit + 27_700_000;
    let (at, stall) = (r6.first_submit - 60 * MS, 92 * MS);
    let model = sched.model(27);
    let zone = record_with_stall(&model, sched.duration(), 5 * MS, at, stall);
    let e = energy_of_recording(&report_of(&sched), &zone, std::time::Duration::from_secs(1), None).expect("readings in order");
    assert!(e.skipped.is_empty(), "{:?}", e.skipped);
    assert_eq!(e.runs.len(), sched.runs.len());
    for m in &e.runs {
        let (s, z) = (m.trace_start_ns.unwrap() - T0, m.trace_end_ns.unwrap() - T0);
        let r = &sched.runs[m.run_id];
        assert!(m.energy_j > 0.0 && z > s, "{m:?}");
        assert_eq!(s, r.first_submit, "run {} starts at its first IO", m.run_id);
        let overlaps = s < at + stall && z > at;
        let c = m.coverage.unwrap();
        if overlaps {
            assert!(c < 0.99 && m.low_confidence, "run {} overlaps the stall: {m:?}", m.run_id);
        } else {
            assert_eq!(c, 1.0, "run {}: {m:?}", m.run_id);
        }
    }
    // Run 6 lies in the stall for its first 32 ms of 27.7 ms + tail: almost nothing covers it.
    let r = e.runs.iter().find(|m| m.run_id == 6).unwrap();
    assert!(r.coverage.unwrap() < 0.5, "{r:?}");
}

/// A counter source whose 20th read blocks for 120 ms (a recorder descheduled on a busy machine).
struct Stalling {
    reads: u32,
}

impl wattflip_agent::sensors::PowerSensor for Stalling {
    fn describe(&self) -> wattflip_proto::v1::PowerSource {
        wattflip_proto::v1::PowerSource { source: "fixture".into(), zone: "stall".into(), scope: "rail".into(), counter: true, ..Default::default() }
    }
    fn read(&mut self, _now_ns: u64) -> Result<Option<wattflip_agent::sensors::PowerReading>, wattflip_agent::sensors::SensorError> {
        self.reads += 1;
        if self.reads == 20 {
            std::thread::sleep(std::time::Duration::from_millis(120));
        }
        Ok(Some(wattflip_agent::sensors::PowerReading {
            watts: wattflip_proto::units::Watts(5.0),
            joules: None,
            interval_ns: 1,
            flags: wattflip_agent::sensors::Flags::NONE,
        }))
    }
}

/// Issue 27: after a stall the recorder caught up the grid instants it had missed with reads
/// microseconds apart (a counter's readings then 0 W or far too high), and nothing said it had
/// stalled. Now it skips the missed instants and records the stall (sent as an event).
#[test]
fn a_stalled_recorder_skips_the_missed_instants_and_records_the_stall() {
    let sensor = Stalling { reads: 0 };
    let rec =
        wattflip_agent::energy::live::PowerRecorder::start(vec![Box::new(sensor)], std::time::Duration::from_millis(5), wattflip_agent::clock::Clock::new());
    std::thread::sleep(std::time::Duration::from_millis(400));
    let zones = rec.stop();
    let z = &zones[0];
    assert!(z.stalls.iter().any(|&(_, gap)| gap >= 110_000_000), "stalls {:?}", z.stalls);
    // Catch-up reads come in a burst; a late wake-up followed by an on-time one gives a single
    // close pair at most (the next instant is a whole period later).
    let gaps: Vec<i64> = z.t.windows(2).map(|w| w[1] - w[0]).collect();
    let burst = gaps.windows(2).filter(|g| g[0] < 500_000 && g[1] < 500_000).count();
    assert_eq!(burst, 0, "consecutive readings less than 0.5 ms apart (catch-up reads): {gaps:?}");
}
