//! Runs measured over their host windows on a counter that updates more slowly than it is read
//! (issue 37): one sample per update, each holding the update's exact energy, none of the runs
//! visible to the detector. Where no other run's IO lies in the part of an update outside a run,
//! that part is not shared in proportion: before the start it is valued at the baseline, and the
//! run ends with the update that holds its last IO. Expected values by hand; add a case as a
//! `#[test]` with its arithmetic in its comment.

// Integration tests: a panic with a message is the test's failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use wattflip_energy::*;

const T0: i64 = 1_800_000_000_000_000_000;
const MS: i64 = 1_000_000;

fn run(first: i64, last: i64) -> RunInfo {
    RunInfo {
        first_submit: UnixNanos(T0 + first * MS),
        last_complete: UnixNanos(T0 + last * MS),
        bytes: 1 << 20,
        ios: 64,
        next_run_start: None,
        datasheet_active: None,
    }
}

/// A 100 ms counter at a 2 W idle (0.2 J per update) for 3 s; the updates 1.2–1.3 s (0.3 J),
/// 1.6–1.7 s (0.35 J) and 1.7–1.8 s (0.3 J) hold the runs' work. The detector's levels are flat
/// at 2 W: every run is nominal.
/// - A (1.23–1.25 s), alone in its update: 0.3 J less the 30 ms before it at 2 W = 0.24 J over
///   1.23–1.3 s, 0.1 J above idle (in proportion it got 3 W · 20 ms = 60 mJ, 20 mJ above idle).
/// - B (1.63–1.66 s): nothing before it in its update, C's IO after it from 1.68 s. Its start as
///   A's; its end shared in proportion at the update's 3.5 W: 3.5 W · 30 ms + 1.5 W · 30 ms =
///   0.15 J, 90 mJ above idle.
/// - C (1.68–1.75 s): B's IO before it in the update, so its start is shared (3.5 W · 20 ms =
///   70 mJ); nothing after it in its last update: + 0.3 J, 0.37 J over 1.68–1.8 s, 0.13 J above.
///   B and C book 0.52 J of the two updates' 0.65 J, the rest (30 ms at 2 W before B, 20 ms at
///   3.5 W between them) is nobody's: nothing counted twice.
#[test]
fn nominal_runs_on_a_slow_counter_keep_what_lies_in_their_updates_by_hand() {
    let n = 30;
    let times: Vec<(UnixNanos, Watts)> = (0..n).map(|k| (UnixNanos(T0 + k * 100 * MS), Watts(2.0))).collect();
    let energy: Vec<f64> = (0..n)
        .map(|k| match k {
            12 | 17 => 0.3,
            16 => 0.35,
            _ => 0.2,
        })
        .collect();
    let series = PowerSeries::from_samples(times).unwrap().ending_at(UnixNanos(T0 + n * 100 * MS)).unwrap().with_energies(energy).unwrap();
    let runs = [run(1230, 1250), run(1630, 1660), run(1680, 1750)];
    let a = analyze_probe(&series, &runs, Some((UnixNanos(T0), UnixNanos(T0 + 1000 * MS))), &RunDetectConfig::default(), TimeBase::Shared);
    let got: Vec<(StartFound, EndFound, i64, i64, f64, f64)> = a
        .runs
        .iter()
        .map(|r| {
            let r = r.as_ref().expect("nominal energy");
            (r.start_found, r.end_found, (r.start.0 - T0) / MS, (r.end.0 - T0) / MS, r.energy_total.0, r.energy_above_idle.0)
        })
        .collect();
    let want = [
        (StartFound::NominalIdleBefore, EndFound::UpdateEnd, 1230, 1300, 0.24, 0.1),
        (StartFound::NominalIdleBefore, EndFound::Nominal, 1630, 1660, 0.15, 0.09),
        (StartFound::Nominal, EndFound::UpdateEnd, 1680, 1800, 0.37, 0.13),
    ];
    for (g, w) in got.iter().zip(want) {
        assert_eq!((g.0, g.1, g.2, g.3), (w.0, w.1, w.2, w.3), "{got:?}");
        assert!((g.4 - w.4).abs() < 1e-12 && (g.5 - w.5).abs() < 1e-12, "energy {} J, above idle {} J; want {} and {}", g.4, g.5, w.4, w.5);
    }
}
