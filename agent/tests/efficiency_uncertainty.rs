//! Issue 42: the efficiency preset's energy over a measurement interval carries the energy
//! model's 95 % half-width, and it is honest. A long steady load (the energy crate's truth
//! generator: ±10 % ripple in 1–3 ms chunks, sharing no code with the agent) is read by simulated
//! slow sources, with a gain error drawn within the accuracy class per interval; intervals of 2–20 s are
//! cut anywhere inside the load, as the preset's windows are. Per kind the half-width must cover
//! the model's energy on ≥ 95 % of the intervals and not be padded (median half-width ≤ 3× the
//! median error, or ≤ 0.2 % of the energy).

// Integration tests and their helpers: a panic with a message is the test's failure report
// (clippy.toml's allow-*-in-tests covers #[test] functions only, not the helpers they call).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../energy/tests/truth/mod.rs"]
mod truth;

#[path = "support/simulated.rs"]
mod simulated;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use simulated::{zone_of, Kind, T0};
use truth::{MS, S};
use wattflip_agent::energy::interval::{energy_over, energy_u95};

const KINDS: &[(&str, Kind, f64)] = &[
    ("hwmon counter 1 ms", Kind::Counter { update: MS, read: 5 * MS, source: "hwmon", driver: "ina238", class: 0.012 }, 0.012),
    ("hwmon counter 100 ms", Kind::Counter { update: 100 * MS, read: 5 * MS, source: "hwmon", driver: "ina238", class: 0.012 }, 0.012),
    ("PMBus sample-and-hold 100 ms", Kind::SampleHold { update: 100 * MS, read: 5 * MS, source: "hwmon", driver: "pmbus", class: 0.05 }, 0.05),
    ("ACPI 1 s moving average", Kind::MovingAverage { window: S, update: 100 * MS, read: 5 * MS, class: 0.05 }, 0.05),
];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
fn an_intervals_energy_half_width_covers_the_truth_on_slow_sources_and_is_not_padded() {
    let load = 120 * S;
    let sched = truth::probe_schedule(&[(S, S + load, "SR")]);
    let mut failures = Vec::new();
    for (k, (name, kind, class)) in KINDS.iter().enumerate() {
        let (mut covered, mut errs, mut halfs, mut energies) = (0usize, Vec::new(), Vec::new(), Vec::new());
        // 12 models and source phases; 100 intervals cut from each, each with its own gain error.
        let n = 12 * 100;
        for seed in (k as u64 * 1000)..(k as u64 * 1000 + 12) {
            let model = sched.model(seed);
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let z = zone_of(*kind, &model, 1.0, sched.duration(), &mut rng);
            let series = z.series().expect("readings in order");
            for _ in 0..100 {
                let len = rng.random_range(2 * S..20 * S);
                let from = rng.random_range(3 * S..S + load - len - S);
                let (a, b) = (T0 + from, T0 + from + len);
                // The source reads `gain` off, drawn per interval (readings scale with it, so the
                // energy over the same readings does): the accuracy class as an independent draw.
                let gain = 1.0 + rng.random_range(-class..*class);
                let measured = gain * energy_over(&series, a, b).0;
                let u = energy_u95(&z, &series, a, b).expect("a stated half-width").0;
                let truth = model.energy(from, from + len);
                let err = (measured - truth).abs();
                covered += usize::from(err <= u);
                errs.push(err);
                halfs.push(u);
                energies.push(truth);
            }
        }
        let share = covered as f64 / n as f64;
        let (me, mh, mj) = (median(errs), median(halfs), median(energies));
        println!(
            "{name:<30} coverage {:5.1} %  median error {:.4} J  median half-width {:.4} J  ({:.3} % of {:.1} J)",
            share * 100.0,
            me,
            mh,
            100.0 * mh / mj,
            mj
        );
        if share < 0.95 {
            failures.push(format!("{name}: covers {:.1} % < 95 %", share * 100.0));
        }
        if mh > 3.0 * me && mh > 0.002 * mj {
            failures.push(format!("{name}: padded, median half-width {:.2}× the median error", mh / me));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
