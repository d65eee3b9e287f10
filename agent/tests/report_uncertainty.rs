//! Issue 37: the HTML report draws the energy's 95 % half-width as error bars on the energy per IO
//! and J/MB charts. A schedule of the truth generator read by a simulated 1 ms hwmon counter
//! (`support/simulated.rs`), analysed by the live path, rendered with and without the half-widths:
//! with them, each energy chart has one error bar (three SVG lines) per point more.

// Integration tests and their helpers: a panic with a message is the test's failure report
// (clippy.toml's allow-*-in-tests covers #[test] functions only, not the helpers they call).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../energy/tests/truth/mod.rs"]
mod truth;

#[path = "support/simulated.rs"]
mod simulated;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use simulated::{report_of, zone_of, Kind, T0};
use truth::{MS, S};
use wattflip_energy::UnixNanos;

#[test]
fn energy_charts_carry_error_bars_of_the_95_percent_half_width() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let sched = truth::random_schedule(&mut rng, 6, (50.0, 400.0), (20.0, 100.0), (1.0, 20.0));
    let model = sched.model(11);
    let kind = Kind::Counter { update: MS, read: 5 * MS, source: "hwmon", driver: "ina238", class: 0.012 };
    let z = zone_of(kind, &model, 1.0, sched.duration(), &mut rng);
    let report = report_of(&sched);
    let window = (UnixNanos(T0 + 10 * MS), UnixNanos(T0 + S - 10 * MS));
    let with = wattflip_agent::energy::energy_of_recording_in(&report, &z, window, None, None).unwrap();
    assert!(!with.runs.is_empty() && with.runs.iter().all(|r| r.energy_u95_j.is_some_and(|u| u > 0.0)));
    let mut without = with.clone();
    without.runs.iter_mut().for_each(|r| r.energy_u95_j = None);
    // plotters draws an error bar as three <line> elements (the bar and its two caps).
    let lines = |e| wattflip_agent::report::html::render_with_power(&report, Some(e), Vec::new()).matches("<line").count();
    let (a, b) = (lines(&with), lines(&without));
    // One bar per plotted point of the two energy charts: the runs share one bench and pattern,
    // so a point is a value (the mean of its repetitions).
    let points = {
        let mut keys: Vec<u64> = report.runs.iter().map(|r| r.value.to_bits()).collect();
        keys.sort();
        keys.dedup();
        keys.len()
    };
    assert_eq!(a - b, 2 * 3 * points, "{a} lines with the half-widths, {b} without");
}
