//! Simulated power sources for the energy tests of issue 37: the readings an energy counter, a
//! held (sample-and-hold) value or a moving average give of a truth model (the energy crate's
//! truth generator, `agent/energy/tests/truth`), stored as the agent's recorder stores them, and
//! the probe report of a schedule. Shared through `#[path]` by `energy_uncertainty.rs` and
//! `energy_slow_sources.rs`; add a kind of source as a [`Kind`] and its readings in [`zone_of`].

#![allow(dead_code)]

use super::truth::{Model, Schedule, MS};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use wattflip_agent::energy::live::ZoneSeries;
use wattflip_uflip::{ProbeReport, RunResult};

/// UTC of the model's time 0.
pub const T0: i64 = 1_800_000_000_000_000_000;

#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// An energy counter updating every `update`, read every `read` (ns); its driver.
    Counter { update: i64, read: i64, source: &'static str, driver: &'static str, class: f64 },
    /// A held value: the mean power of the last `update`, updated every `update`, read every `read`.
    SampleHold { update: i64, read: i64, source: &'static str, driver: &'static str, class: f64 },
    /// A moving average over `window`, recomputed every `update`, read every `read`.
    MovingAverage { window: i64, update: i64, read: i64, class: f64 },
    /// A shunt trace at 10, 20, 50 or 100 kS/s (drawn per schedule), decimated to 1 ms windows
    /// and refined to the sample like `trace import`.
    Trace { class: f64 },
}

/// Read instants every `read` from `read` to `to`, late by 0–100 µs (one in 50 by up to 3 ms).
pub fn read_times(rng: &mut ChaCha8Rng, read: i64, to: i64) -> Vec<i64> {
    let mut out: Vec<i64> = Vec::new();
    let mut k = 1i64;
    while k * read < to {
        let late = if rng.random_range(0..50) == 0 { rng.random_range(0..3 * MS) } else { rng.random_range(0..100_000) };
        let t = k * read + late;
        k += 1;
        if out.last().is_none_or(|&p| t > p) {
            out.push(t);
        }
    }
    out
}

/// The source's readings of `model` over `[0, to)`, its power scaled by `gain`, as the agent's
/// recorder stores them (read instants in UTC, watts, the counter interval or 0).
pub fn zone_of(kind: Kind, model: &Model, gain: f64, to: i64, rng: &mut ChaCha8Rng) -> ZoneSeries {
    let mut z = ZoneSeries { zone: "fixture".into(), scope: "rail".into(), ..Default::default() };
    match kind {
        Kind::Counter { update, read, source, driver, .. } => {
            (z.source, z.driver, z.update_ns, z.path) = (source.into(), driver.into(), update as u64, "/sys/fixture/energy1_input".into());
            let update = own_clock(update, driver, rng);
            let phase = rng.random_range(0..update);
            let counter = |t: i64| {
                let u = phase + (t - phase).div_euclid(update) * update;
                (gain * model.integral(u.max(0)) * 1e6).floor()
            };
            let times = read_times(rng, read, to);
            for w in times.windows(2) {
                let dt = w[1] - w[0];
                z.t.push(T0 + w[1]);
                z.watts.push((counter(w[1]) - counter(w[0])) * 1e-6 / (dt as f64 * 1e-9));
                z.interval_ns.push(dt as u64);
            }
        }
        Kind::SampleHold { update, read, source, driver, .. } => {
            (z.source, z.driver, z.update_ns, z.path) = (source.into(), driver.into(), update as u64, "/sys/fixture/power1_input".into());
            let update = own_clock(update, driver, rng);
            let phase = rng.random_range(0..update);
            held(&mut z, rng, read, to, |t| {
                let u = phase + (t - phase).div_euclid(update) * update;
                gain * model.energy(u - update, u) / (update as f64 * 1e-9)
            });
        }
        Kind::MovingAverage { window, update, read, .. } => {
            (z.source, z.driver, z.update_ns, z.path) = ("hwmon".into(), "power_meter".into(), window as u64, "/sys/fixture/power1_average".into());
            let phase = rng.random_range(0..update);
            held(&mut z, rng, read, to, |t| {
                let u = phase + (t - phase).div_euclid(update) * update;
                gain * model.energy(u - window, u) / (window as f64 * 1e-9)
            });
        }
        Kind::Trace { .. } => unreachable!("traces are a series, not a zone"),
    }
    z
}

/// The update period `nominal` as a chip timed by its own oscillator keeps it: off by up to
/// ±0.5 %, drawn per device. TI's INA237/238/239 datasheets (SBOSA20, SLYS025, SLYS027: §"Integrated
/// Precision Oscillator") trim the oscillator that times their conversions to under 0.5 % at room
/// temperature (the INA234's conversion times are specified ±5 % over temperature, SBOS844), and a
/// PSU's PMBus controller is assumed to be no better. So the updates drift against the host's
/// reads instead of meeting every read at the same phase, which a period that divides the read
/// period exactly would do. RAPL (the CPU's own clock) and the BMC- or firmware-timed sources
/// (IPMI, ACPI) keep their nominal period.
fn own_clock(nominal: i64, driver: &str, rng: &mut ChaCha8Rng) -> i64 {
    if !matches!(driver, "ina238" | "ina226" | "pmbus") {
        return nominal;
    }
    (nominal as f64 * (1.0 + rng.random_range(-0.005..0.005))).round() as i64
}

/// The step a BMC's DCMI reading is rounded to (W).
pub const IPMI_STEP_W: f64 = 1.0;

/// Instantaneous readings of `value(t)` at the read instants, with ±10 mW of reading noise (drawn
/// once per distinct value, so a held value reads the same until it changes). A BMC's DCMI reading
/// is in whole watts (the DCMI specification's Get Power Reading response, and `ipmitool dcmi
/// power reading`'s output): rounded, which the reading noise of a quiet rail does not dither.
pub fn held(z: &mut ZoneSeries, rng: &mut ChaCha8Rng, read: i64, to: i64, value: impl Fn(i64) -> f64) {
    let (mut last, mut noisy) = (f64::NAN, 0.0);
    for t in read_times(rng, read, to) {
        let v = value(t);
        if v != last {
            (last, noisy) = (v, v + rng.random_range(-0.01..0.01));
        }
        z.t.push(T0 + t);
        z.watts.push(if z.source == "ipmi" { (noisy / IPMI_STEP_W).round() * IPMI_STEP_W } else { noisy });
        z.interval_ns.push(0);
    }
}

/// The probe report of `sched` (the fixture report's first run as the template).
pub fn report_of(sched: &Schedule) -> ProbeReport {
    let mut report: ProbeReport = serde_json::from_str(include_str!("../../../tests/fixtures/energy/quick-report.json")).expect("fixture report");
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
