//! The fixture `probe --quick` report (`tests/fixtures/energy/quick-report.json`: 10 ms pauses,
//! runs of 4–607 ms) as a truth schedule for the energy crate's generator (`truth`, declared by
//! the including test): idle 6 W from 1 s before the first run, each run 1–2 W above it after a
//! 40 µs rise, its tail as `tail(pattern)` at 0.6 W. Included by `#[path]` where a test needs a
//! real schedule; add a parameter here rather than a copy there.

use crate::truth::{self, Schedule, S};
use wattflip_uflip::{ProbeReport, RunStatus};

/// The report, the schedule of its completed runs (times from `t0`), and `t0` (UTC ns).
pub fn quick_schedule(tail: impl Fn(&str) -> i64) -> (ProbeReport, Schedule, i64) {
    let report: ProbeReport = serde_json::from_str(include_str!("../../../tests/fixtures/energy/quick-report.json")).expect("fixture report");
    let t0 = i64::try_from(report.started_ns).expect("ns") - S;
    let runs = report.runs.iter().filter(|r| r.status == RunStatus::Ok);
    let sched = Schedule {
        idle_w: 6.0,
        runs: runs
            .enumerate()
            .map(|(i, r)| truth::Run {
                first_submit: r.start_ns as i64 - t0,
                last_complete: r.end_ns as i64 - t0,
                latency: 40_000,
                active_w: 1.0 + 0.5 * (i % 3) as f64,
                tail: tail(&r.pattern),
                tail_w: 0.6,
                experiment: 0,
                value: 0.0,
            })
            .collect(),
        lead: S,
        trail: S,
    };
    (report, sched, t0)
}
