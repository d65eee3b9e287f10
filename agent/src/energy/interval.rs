//! The energy of a steady interval of a recording and its 95 % half-width: a slice of a load that
//! holds through it (the efficiency preset's measurement intervals, a load ladder's levels), not a
//! run that steps up from idle. Exact to the nanosecond at both edges ([`energy_over`]); its
//! half-width from the source model of [`super::uncertain`] ([`energy_u95`]). A new kind of
//! interval figure derives from these two.

use super::live::ZoneSeries;
use super::{source, uncertain};
use wattflip_energy::{IdleU, Joules, Nanos, PowerSeries, RunFigures, UnixNanos, Watts};

/// The 95 % half-width of the energy over `[from, to)` of `zone`'s recording, from the probe's
/// energy uncertainty model (`docs/energy-method.md` §9): the source's update period (declared
/// by sysfs or measured over the interval), how it reports, its resolution, read jitter and
/// accuracy class. A measurement interval is a slice of a steady load, not a step from idle: its
/// edges move a counter's energy by the power there, another source's by the power's swing
/// within the interval; the swing's spread is the noise a held value aliases. `None` when the
/// interval holds no reading to measure from.
pub fn energy_u95(zone: &ZoneSeries, series: &PowerSeries, from: i64, to: i64) -> Option<Joules> {
    let facts = source::resolve(zone, None, from, to);
    if facts.read_ns == 0 || to <= from {
        return None;
    }
    let powers: Vec<f64> = series.powers_between(UnixNanos(from), UnixNanos(to)).iter().map(|w| w.0).filter(|w| w.is_finite()).collect();
    let n = powers.len() as f64;
    let mean_reading = powers.iter().sum::<f64>() / n.max(1.0);
    let spread = (powers.iter().map(|w| (w - mean_reading).powi(2)).sum::<f64>() / (n - 1.0).max(1.0)).sqrt();
    let model = uncertain::model_of_zone(zone, &facts, if zone.is_counter() { 0.0 } else { spread });
    let energy = energy_over(series, from, to);
    let mean = Watts(energy.0 / ((to - from) as f64 * 1e-9));
    let span = i64::try_from(facts.update_ns.max(facts.read_ns)).unwrap_or(i64::MAX);
    let figures = RunFigures {
        duration: Nanos(u64::try_from(to - from).unwrap_or(0)),
        energy,
        above_idle: Joules(0.0),
        background: Joules(0.0),
        background_duration: Nanos(0),
        mean,
        baseline: mean,
        peak: Watts(uncertain::peak_of_zone(zone, span, i64::try_from(facts.read_ns).unwrap_or(0), from, to).unwrap_or(mean.0)),
        tail_cut: false,
        split_start: false,
        split_end: false,
        start_updates: None,
        end_updates: None,
        visible_above: Joules(0.0),
    };
    let idle = IdleU { u95: Watts(0.0), statistical: Watts(0.0) };
    Some(model.run(&figures, &idle).energy)
}

/// The energy over exactly `[from, to)`: every reading's hold clipped to the interval, a partly
/// covered hold counting its share of the reading's energy (`PowerSeries::energy_between` counts
/// whole readings, up to a reading period too much or too little at each edge: 8 % of a 60 ms
/// window read every 5 ms).
pub fn energy_over(series: &PowerSeries, from: i64, to: i64) -> Joules {
    let t = series.times();
    let end = series.end_time().0;
    let first = t.partition_point(|x| x.0 <= from).saturating_sub(1);
    let mut j = 0.0;
    for i in first..t.len() {
        let (a, b) = (t[i].0, t.get(i + 1).map_or(end, |n| n.0));
        if a >= to {
            break;
        }
        let overlap = b.min(to) - a.max(from);
        if overlap > 0 && b > a {
            j += series.sample_energy(i) * overlap as f64 / (b - a) as f64;
        }
    }
    Joules(j)
}
