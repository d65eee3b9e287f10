//! The live path's per-run energy (issue 14) through a fixture power source: a 1 kHz recording of
//! a power model with known per-run truth (the energy crate's independent truth generator), laid
//! over the runs of a real `probe --quick` report (10 ms pauses, runs of 4–607 ms, tails after the
//! write runs, one longer than the pause), analysed by the same function the probe calls after it
//! stops recording. Add a scenario by changing the schedule built from the report.

// Integration tests and their helpers: a panic with a message is the test's failure report
// (clippy.toml's allow-*-in-tests covers #[test] functions only, not the helpers they call).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../energy/tests/truth/mod.rs"]
mod truth;

#[path = "support/quick_schedule.rs"]
mod quick;

use quick::quick_schedule;
use truth::MS;
use wattflip_agent::energy::live::ZoneSeries;
use wattflip_uflip::RunStatus;

#[test]
fn live_recording_at_1khz_gives_each_runs_known_energy() {
    let (report, sched, t0) = quick_schedule(|pattern| match pattern {
        "SW" => 40 * MS,
        "RW" => 4 * MS,
        _ => 0,
    });
    let runs: Vec<_> = report.runs.iter().filter(|r| r.status == RunStatus::Ok).collect();
    let model = sched.model(3);
    let truths = sched.truth(&model, &[]);
    // The fixture sensor: an energy counter read once per ms, each reading the mean power over the
    // millisecond that ended at its read (as the recorder stores `energy1_input` deltas), ±4 mW of
    // deterministic noise.
    let n = (sched.duration() / MS) as usize;
    let zone = ZoneSeries {
        source: "hwmon".into(),
        zone: "fixture/SSD 12V".into(),
        scope: "rail".into(),
        t: (0..n).map(|k| t0 + (k as i64 + 1) * MS).collect(),
        watts: (0..n)
            .map(|k| {
                let k = k as i64;
                model.energy(k * MS, (k + 1) * MS) / 1e-3 + 0.004 * (((k * 7919) % 9) as f64 / 4.0 - 1.0)
            })
            .collect(),
        interval_ns: vec![MS as u64; n],
        ..Default::default()
    };
    let e = wattflip_agent::energy::energy_of_recording(&report, &zone, std::time::Duration::from_secs(1), None).expect("readings in order");
    assert!(e.skipped.is_empty(), "{:?}", e.skipped);
    assert_eq!(e.runs.len(), runs.len());
    let mut problems = Vec::new();
    for ((r, t), m) in runs.iter().zip(&truths).zip(&e.runs) {
        assert_eq!(m.run_id, r.run_id);
        let err = (m.energy_j - t.energy) / t.energy;
        let limit = if t.end - t.start >= 100 * MS { 0.01 } else { 0.05 };
        if err.abs() > limit {
            problems.push(format!("run {}: {} J vs truth {} J ({:+.3} %)", r.run_id, m.energy_j, t.energy, err * 100.0));
        }
        let (s, z) = (m.trace_start_ns.expect("start") - t0, m.trace_end_ns.expect("end") - t0);
        if (s - t.start).abs() > MS || (z - t.end).abs() > MS {
            problems.push(format!("run {}: [{s}, {z}) vs truth [{}, {})", r.run_id, t.start, t.end));
        }
        if m.tail_cut != t.cut {
            problems.push(format!("run {}: tail_cut {} vs truth {}", r.run_id, m.tail_cut, t.cut));
        }
        assert_eq!(m.baseline_source, "idle_window");
        assert!((m.idle_baseline_w - 6.0).abs() < 0.005, "{m:?}");
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(truths.iter().any(|t| t.cut), "the schedule has a tail cut by the next run");
}
