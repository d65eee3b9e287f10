//! The live path after the recorder stopped (issue 37): the chosen zone's readings against the
//! probe's runs, with the idle window the probe recorded after preparing its target, the source's
//! update period resolved ([`super::source`]), and what follows from it: an idle baseline that is
//! "unknown" when the source did not move, an idle profile over whole updates, and runs shorter
//! than a few updates flagged with the reason. A new check on the source adds a [`Notice`] kind
//! here (printed, and sent as an event of that kind).

use super::source::{self, SourceFacts, UpdateFrom};
use super::{analyze, characterise_idle_with, live, live_detect_config_for, ProbeEnergy, LOW_CONFIDENCE_PERIODS};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use wattflip_energy::UnixNanos;
use wattflip_uflip::ProbeReport;

/// Where the probe put its idle window: after preparing the target (creating, filling or growing
/// it) and letting the device settle (UTC ns).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Preparation {
    pub from_ns: i64,
    pub to_ns: i64,
    pub settle_s: f64,
    pub idle_from_ns: i64,
    pub idle_to_ns: i64,
}

impl Preparation {
    /// One line for the summary and the report.
    pub fn describe(&self) -> String {
        format!(
            "idle window {:.3} s, measured on the idle device: after the target was prepared (opened, created or filled: {:.3} s) and {:.3} s of settling",
            (self.idle_to_ns - self.idle_from_ns) as f64 / 1e9,
            (self.to_ns - self.from_ns) as f64 / 1e9,
            (self.idle_from_ns - self.to_ns) as f64 / 1e9,
        )
    }
}

/// A named warning about the source: its `kind` is the event's kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    pub kind: String,
    pub message: String,
}

/// The source's update period is not known (not declared, no sysfs attribute, too few changes).
pub const UPDATE_PERIOD_UNKNOWN: &str = "source_update_period_unknown";
/// The source did not change in the idle window: its idle baseline is unknown.
pub const COUNTER_STUCK: &str = "source_counter_stuck";

/// [`energy_of_recording_in`] with the idle window `[started − idle, started)` of the report and
/// no declared update period (imported recordings and tests).
pub fn energy_of_recording(report: &ProbeReport, zone: &live::ZoneSeries, idle: Duration, datasheet_w: Option<f64>) -> Option<super::ProbeEnergy> {
    let first = i64::try_from(report.started_ns).unwrap_or(i64::MAX);
    let from = first.saturating_sub(i64::try_from(idle.as_nanos()).unwrap_or(0));
    energy_of_recording_in(report, zone, (UnixNanos(from), UnixNanos(first)), None, datasheet_w)
}

/// The live path: `zone`'s readings against `report`'s runs, with `window` as the probe's idle
/// baseline and `declared` the operator's update period of the source, if any. `None` when the
/// readings are out of order.
pub fn energy_of_recording_in(
    report: &ProbeReport,
    zone: &live::ZoneSeries,
    window: (UnixNanos, UnixNanos),
    declared: Option<Duration>,
    datasheet_w: Option<f64>,
) -> Option<ProbeEnergy> {
    let facts = source::resolve(zone, declared, window.0 .0, window.1 .0);
    let mut z = zone.clone();
    if matches!(facts.update_from, UpdateFrom::Declared | UpdateFrom::Measured) {
        z.update_ns = facts.update_ns;
    }
    // A held value slower than its reads is analysed as the counter it amounts to (`held`).
    let counted = super::held::as_counter(&z, facts.update_ns, facts.read_ns);
    let held_counter = counted.is_some();
    if let Some(c) = counted {
        z = c;
    }
    // One read once per update, its phase fitted to the runs: the counter it amounts to (`phase`).
    let readings = z.clone();
    let fitted = fit_phase(&z, &facts, report, window);
    if let Some(c) = fitted.as_ref().and_then(|ph| super::phase::as_counter(&z, ph)) {
        z = c;
    }
    let fitted = fitted.filter(|_| z.is_counter());
    let series = z.series()?;
    let stuck = facts.stuck();
    // A stuck counter still bounds every run by the idle window (without it each run would look
    // for a baseline in its pause and none would get a total); its baseline is marked unknown below.
    let mut energy = analyze(report, &series, Some(window), &z.label(), &live_detect_config_for(&z), datasheet_w);
    energy.source_facts = Some(facts);
    if stuck {
        let why = format!(
            "{} did not change in the idle window ({} readings over {:.3} s): the idle baseline is unknown, not 0 W; energy above idle is not given",
            z.label(),
            facts.idle_readings,
            (window.1 .0 - window.0 .0) as f64 / 1e9
        );
        for r in &mut energy.runs {
            r.idle_unknown = true;
            r.flag("idle baseline unknown (the source did not change in the idle window)");
        }
        notice(&mut energy, COUNTER_STUCK, why);
    } else {
        energy.idle = idle_record(&z, window, &facts);
    }
    flag_short_runs(&mut energy, &facts, &z.label());
    let noise = energy.idle.as_ref().map(|i| i.spread_w).unwrap_or(0.0);
    let len = wattflip_energy::Nanos(u64::try_from(window.1 .0 - window.0 .0).unwrap_or(0));
    let span = i64::try_from(facts.update_ns.max(facts.read_ns)).unwrap_or(i64::MAX);
    let read = i64::try_from(facts.read_ns).unwrap_or(i64::MAX);
    // A placed held value's highest readings are its own (each the mean of its update).
    let peak = |a: i64, b: i64| super::uncertain::peak_of_zone(if fitted.is_some() { &readings } else { &z }, span, read, a, b);
    let margin = super::uncertain::smear_margin_ns(&z, read);
    // The series' samples start at the placed updates of a counter slower than its reads
    // (`live::counter_samples`) or of a held value placed by its phase; other sources place none.
    let slow_counter = (z.is_counter() && facts.update_ns as f64 > 1.25 * facts.read_ns as f64) || fitted.is_some();
    let visible = |a: i64, b: i64, baseline: f64| {
        if slow_counter {
            return super::uncertain::updates_holding(&series, a.saturating_sub(read), b.saturating_add(read), baseline);
        }
        let (from, to) = (a.saturating_sub(margin), b.saturating_add(margin));
        (margin > 0).then(|| super::uncertain::shown_between(&series, from, to, baseline)).flatten()
    };
    let moves = if slow_counter { super::grid::moves_of(&z.t, &z.watts, &z.interval_ns) } else { Vec::new() };
    let placed = match fitted {
        // Every sample of the placed counter is one update, its start and end known to the fit.
        Some(ph) => series.times().iter().map(|t| t.0).chain([series.end_time().0]).map(|t| (t, ph.half_range)).collect(),
        None => super::grid::place_updates(&moves, z.counter_update_ns()),
    };
    let updates = |at: i64| super::uncertain::updates_around(&series, at, &placed);
    let around = super::uncertain::Around { peak: &peak, visible: &visible, updates: &updates };
    let held = (held_counter || fitted.is_some()).then_some((zone, &readings));
    let model = model_of(&z, held, &facts, noise, fitted, window);
    super::uncertain::attach(&mut energy, &model, len, &around);
    Some(energy)
}

/// The phase of a held value read once per update, fitted to `report`'s runs against the
/// median of its readings in the idle window; `None` for other sources and where the fit does not
/// pin it (`phase::fit`).
fn fit_phase(z: &live::ZoneSeries, facts: &SourceFacts, report: &ProbeReport, (from, to): (UnixNanos, UnixNanos)) -> Option<super::phase::Phase> {
    let update = i64::try_from(facts.update_ns).ok()?;
    if !super::phase::once_per_update(z, facts.update_ns, facts.read_ns) {
        return None;
    }
    let mut idle: Vec<f64> = z.t.iter().zip(&z.watts).filter(|(t, w)| **t > from.0 && **t <= to.0 && w.is_finite()).map(|(_, w)| *w).collect();
    idle.sort_by(f64::total_cmp);
    let baseline = *idle.get(idle.len() / 2)?;
    let runs: Vec<(i64, i64)> =
        report.runs.iter().map(|r| (i64::try_from(r.start_ns).unwrap_or(i64::MAX), i64::try_from(r.end_ns).unwrap_or(i64::MAX))).collect();
    super::phase::fit(z, update, &runs, baseline)
}

/// The model of the analysed zone `z`. `held`: where it is a held value counted by its updates,
/// its own readings (as recorded, and before the phase's counter): each update's value carries the
/// reading's noise, the spread of the readings themselves in the idle window (the counter's
/// samples there mix whole and split updates); a phase-placed one also keeps its readings'
/// resolution and its placement is the fit's.
fn model_of(
    z: &live::ZoneSeries,
    held: Option<(&live::ZoneSeries, &live::ZoneSeries)>,
    facts: &SourceFacts,
    noise: f64,
    fitted: Option<super::phase::Phase>,
    (from, to): (UnixNanos, UnixNanos),
) -> wattflip_energy::SourceModel {
    let mut model = super::uncertain::model_of_zone(z, facts, noise);
    let Some((recorded, readings)) = held else {
        return model;
    };
    model.held = true;
    let idle: Vec<f64> = recorded.t.iter().zip(&recorded.watts).filter(|(t, w)| **t > from.0 && **t <= to.0 && w.is_finite()).map(|(_, w)| *w).collect();
    model.noise = wattflip_energy::Watts(wattflip_energy::stats::median_and_sigma(&idle).map_or(0.0, |m| m.1));
    if let Some(ph) = fitted {
        let own = super::uncertain::model_of_zone(readings, facts, noise);
        (model.placement, model.resolution_j, model.resolution_w) =
            (wattflip_energy::Nanos(u64::try_from(ph.half_range).unwrap_or(0)), own.resolution_j, own.resolution_w);
    }
    model
}

fn notice(e: &mut ProbeEnergy, kind: &str, message: String) {
    tracing::warn!(kind, "{message}");
    e.notices.push(Notice { kind: kind.to_string(), message });
}

/// The idle profile of the window: over whole updates of a source slower than its reads (its
/// repeated or 0 W readings would make the median and a "period" of their own), else over the
/// readings.
fn idle_record(z: &live::ZoneSeries, (from, to): (UnixNanos, UnixNanos), facts: &SourceFacts) -> Option<super::IdleRecord> {
    let slow = facts.update_ns > facts.read_ns.saturating_mul(3) / 2;
    let series = if slow { source::binned(z, from.0, to.0, i64::try_from(facts.update_ns).unwrap_or(i64::MAX))? } else { z.readings_series()? };
    let cfg = wattflip_energy::IdleConfig { min_samples: if slow { 3 } else { 10 }, ..Default::default() };
    characterise_idle_with(&series, from, to, &z.label(), &cfg)
}

/// Flags the runs shorter than [`LOW_CONFIDENCE_PERIODS`] update periods of the source (its value
/// changes that rarely, so the run's edges carry most of its energy), or every run when the
/// update period is unknown; a named notice says why.
fn flag_short_runs(e: &mut ProbeEnergy, facts: &SourceFacts, label: &str) {
    if facts.update_from == UpdateFrom::Unknown {
        let why = format!(
            "update period of {label} unknown: nothing declared ([sources.update_periods]), no sysfs update_interval, and {} of {} idle readings changed; every run is low_confidence",
            facts.idle_changes, facts.idle_readings
        );
        for r in &mut e.runs {
            r.flag("source update period unknown");
        }
        notice(e, UPDATE_PERIOD_UNKNOWN, why);
        return;
    }
    let min_ns = facts.update_ns.saturating_mul(LOW_CONFIDENCE_PERIODS);
    for r in &mut e.runs {
        let dur = r.trace_end_ns.zip(r.trace_start_ns).map(|(b, a)| b - a).unwrap_or(0);
        if facts.update_ns > facts.read_ns && u64::try_from(dur).unwrap_or(0) < min_ns {
            let reason = format!(
                "{:.1} ms long, under {LOW_CONFIDENCE_PERIODS} update periods of the source ({:.1} ms, {})",
                dur as f64 / 1e6,
                facts.update_ns as f64 / 1e6,
                facts.update_from.as_str()
            );
            r.flag(&reason);
        }
    }
}

/// The source cannot reach the requested `--energy-target` (its accuracy class alone is wider).
pub const CANNOT_REACH_TARGET: &str = "source_cannot_reach_target";

/// Parses `--energy-target`: a percentage (`2%`, `0.5 %`) in (0, 100], or `off`.
pub fn parse_target(s: &str) -> Result<Option<f64>, String> {
    let t = s.trim();
    if t == "off" {
        return Ok(None);
    }
    let pct: f64 = t.strip_suffix('%').unwrap_or(t).trim().parse().map_err(|_| format!("`{s}` is not a percentage; write e.g. 2% or off"))?;
    if !(pct > 0.0 && pct <= 100.0) {
        return Err(format!("`{s}` is outside (0, 100] %"));
    }
    Ok(Some(pct / 100.0))
}

/// Flags every run whose energy is not resolved to `target` (its `energy_u95_j` above
/// `target`·`energy_j`) with the reason, followed by the sizing's reason for that run when
/// `sized` gives one (`run_id` is the run's position in it); says so once when the source cannot
/// reach the target at all.
pub fn apply_target(e: &mut ProbeEnergy, target: f64, sized: Option<&super::sizing::SizePlan>) {
    if let Some(m) = e.source_model {
        if super::sizing::class_u95(&m) >= target {
            let why = format!(
                "{}: the accuracy class ±{:.1} % alone exceeds --energy-target {:.1} %: no run can reach it",
                e.runs.first().map(|r| r.source.as_str()).unwrap_or("source"),
                m.accuracy * 100.0,
                target * 100.0
            );
            notice(e, CANNOT_REACH_TARGET, why);
        }
    }
    for r in &mut e.runs {
        if let Some(u) = r.energy_u95_j.filter(|u| r.energy_j > 0.0 && *u > target * r.energy_j) {
            let mut reason = format!("±{:.2} % at 95 %, above the --energy-target {:.1} %", 100.0 * u / r.energy_j, target * 100.0);
            if let Some(why) = sized.and_then(|p| p.reason.get(r.run_id)).and_then(|w| w.as_deref()) {
                reason = format!("{reason} ({why})");
            }
            r.flag(&reason);
        }
    }
}
