//! Attaches a 95 % half-width to every energy figure of a probe (issue 37): the run's energy, its
//! energy above idle, its background tail, its J/MiB, and the idle baseline, from the source's
//! [`SourceModel`] (energy crate `uncertainty`, `docs/energy-method.md` §9). The live path builds
//! the model from the recorded zone ([`model_of_zone`]); trace import from its sample period and
//! its alignment residual ([`model_of_trace`], the residual 0 until the alignment reports one).
//! A new figure gets its `*_u95` field on the record and its line in [`attach`].

use super::live::ZoneSeries;
use super::source::SourceFacts;
use super::ProbeEnergy;
use wattflip_energy::{Bounded, IdleU, Joules, Nanos, PowerSeries, Reporting, RunFigures, SourceModel, Straddle, UnixNanos, Watts};

/// The model of a live zone: how it reports (a counter; `power*_average`, a moving average; a
/// value updated more slowly than it is read, sample-and-hold; else instantaneous), its update
/// and read periods and jitter as resolved and measured, the idle noise `noise_w`, and the
/// driver table's accuracy class.
pub fn model_of_zone(z: &ZoneSeries, facts: &SourceFacts, noise_w: f64) -> SourceModel {
    let reporting = if z.is_counter() {
        Reporting::Counter
    } else if z.path.ends_with("_average") {
        Reporting::MovingAverage
    } else if facts.update_ns > facts.read_ns.saturating_mul(3) / 2 {
        Reporting::SampleHold
    } else {
        Reporting::Instantaneous
    };
    let (accuracy, _) = crate::sensors::drivers::accuracy(&z.source, &z.driver);
    SourceModel {
        reporting,
        update: Nanos(facts.update_ns),
        read: Nanos(facts.read_ns),
        jitter: Nanos(facts.jitter_ns),
        // hwmon and powercap counters count µJ; power attributes are µW (the ABI's units), a
        // BMC's DCMI reading whole watts.
        resolution_j: Joules(if z.is_counter() { 1e-6 } else { 0.0 }),
        resolution_w: Watts(match (z.is_counter(), z.source.as_str()) {
            (true, _) => 0.0,
            (false, "ipmi") => 1.0,
            _ => 1e-6,
        }),
        noise: Watts(noise_w),
        accuracy,
        align: Nanos(0),
        // Only a counter slower than its reads has updates to place (`SourceModel::resolved`).
        placement: Nanos(if z.is_counter() && facts.update_ns as f64 > 1.25 * facts.read_ns as f64 {
            let moves = super::grid::moves_of(&z.t, &z.watts, &z.interval_ns);
            super::grid::placement_half_range(&moves, i64::try_from(facts.update_ns).unwrap_or(0)).and_then(|h| u64::try_from(h).ok()).unwrap_or(0)
        } else {
            0
        }),
        // The caller says when the counter is a held value counted by its updates.
        held: false,
    }
}

/// The model of an imported trace: each (decimated) sample the mean power over its `period`, the
/// trace's accuracy class `accuracy` (a scope and shunt: `drivers::accuracy("trace", "")`), and
/// the residual of its alignment with the probe (0 when none is known).
pub fn model_of_trace(period: Nanos, noise_w: f64, align_residual: Nanos) -> SourceModel {
    let (accuracy, _) = crate::sensors::drivers::accuracy("trace", "");
    SourceModel {
        reporting: Reporting::Instantaneous,
        update: period,
        read: period,
        jitter: Nanos(0),
        resolution_j: Joules(0.0),
        resolution_w: Watts(0.0),
        noise: Watts(noise_w),
        accuracy,
        align: align_residual,
        placement: Nanos(0),
        held: false,
    }
}

/// What the analysis can look up around a run of the recording, for its half-widths: `peak` a
/// run's highest power over one update near it (from its start to one update after its end;
/// `None`: its mean); `visible` the energy a held or averaged source shows above a baseline (its
/// third argument) around a run, as far as it spreads a run's energy, and over how long
/// ([`smear_margin_ns`]; `None` for other sources); `updates` the mean powers of the update
/// holding an instant and of its two neighbours, where the source resolves its updates
/// ([`updates_around`]; `None` elsewhere).
pub struct Around<'a> {
    pub peak: &'a dyn Fn(i64, i64) -> Option<f64>,
    pub visible: &'a dyn Fn(i64, i64, f64) -> Option<Visible>,
    pub updates: &'a dyn Fn(i64) -> Option<Straddle>,
}

/// Sets the half-widths of every run of `e` and of its idle baseline from `m`; `window` is the
/// idle window's length (ns); `around` what the recording shows near each run. A run a held or
/// averaged source spreads over more than its length gets the bounded estimate when it is the
/// narrower.
pub fn attach(e: &mut ProbeEnergy, m: &SourceModel, window: Nanos, around: &Around) {
    let (peak, visible) = (around.peak, around.visible);
    let baseline = e.idle.as_ref().map(|i| i.median_w).or_else(|| e.runs.first().map(|r| r.idle_baseline_w)).unwrap_or(0.0);
    let idle = m.idle(Watts(baseline), window);
    if let Some(i) = e.idle.as_mut() {
        i.idle_u95_w = Some(idle.u95.0);
    }
    // Each run's IO, first submit to last completion: what may lie in an edge's far part. Its
    // measured tail too left the property test's coverage as it was and widened the 10 ms
    // counter's half-widths (3.06× the median error against 2.97× on one seed set).
    let busy: Vec<(i64, i64)> = e.runs.iter().filter_map(|r| Some((r.trace_start_ns?, r.trace_end_ns?))).collect();
    for r in &mut e.runs {
        let mut f = figures(r);
        if let (Some(a), Some(b)) = (r.trace_start_ns, r.trace_end_ns) {
            f.peak = Watts(peak(a, b).unwrap_or(r.mean_w));
            // Above the lowest baseline the idle window allows: a short run's spread energy is
            // small against the baseline's own uncertainty over the span it is looked for in.
            let floor = r.idle_baseline_w - wattflip_energy::uncertainty::K95 * idle.statistical.0;
            f.visible_above = Joules(visible(a, b, floor).map(|v| v.energy).unwrap_or(0.0));
            (f.start_updates, f.end_updates) = ((around.updates)(a), (around.updates)(b));
            if r.end_found == "UpdateEnd" {
                // The run ends with the update that holds its last IO: nothing of it lies beyond.
                f.end_updates = (around.updates)(b - 1).map(|w| Straddle { part_before: Nanos(w.part_before.0 + w.part_after.0), part_after: Nanos(0), ..w });
            }
            quiet_far_parts(&mut f, &busy, (a, b));
        }
        let idle_u = IdleU { u95: idle.u95, statistical: idle.statistical };
        let u = m.run(&f, &idle_u);
        if let Some(b) = bounded(r, m, baseline, &idle_u, visible).filter(|b| b.u95.energy.0 < u.energy.0) {
            apply_bounded(r, &b, baseline, idle.u95.0);
            continue;
        }
        // Without a baseline the run has no energy above idle to take the loss from.
        let shift = if r.idle_unknown { 0.0 } else { m.smear_shift(&f).0 };
        if shift > 0.0 {
            // A moving average's box keeps part of the run's step out of it: the middle of that
            // goes back in (`SourceModel::smear_shift`; the half-width keeps the other half).
            rescale(r, r.energy_j + shift);
            r.energy_above_idle_j += shift;
        }
        r.energy_u95_j = Some(u.energy.0);
        r.energy_above_idle_u95_j = (!r.idle_unknown).then_some(u.above_idle.0);
        r.background_u95_j = Some(u.background.0);
        r.idle_u95_w = (!r.idle_unknown).then_some(idle.u95.0);
        // J/MiB is the energy over a fixed byte count: the energy's relative half-width.
        r.j_per_mib_u95 = r.j_per_mib.filter(|_| r.energy_j > 0.0).map(|j| j * u.energy.0 / r.energy_j);
    }
    e.source_model = Some(*m);
}

/// Marks each straddled edge whose part outside the run holds no other run's IO (`busy`: each
/// run's first submit to last completion) as quiet: there the outer update's level goes on, and
/// a tail that goes on past the update shows in it.
fn quiet_far_parts(f: &mut RunFigures, busy: &[(i64, i64)], (start, end): (i64, i64)) {
    let quiet = |from: i64, to: i64| !busy.iter().any(|&(s, z)| s != start && s < to && z > from);
    let ns = |n: Nanos| i64::try_from(n.0).unwrap_or(i64::MAX);
    if let Some(w) = f.start_updates.as_mut() {
        w.far_quiet = quiet(start.saturating_sub(ns(w.part_before)), start);
    }
    if let Some(w) = f.end_updates.as_mut() {
        w.far_quiet = quiet(end, end.saturating_add(ns(w.part_after)));
    }
}

/// What a held or averaged source shows above a baseline around a run: the energy (J) over the
/// region (s) its spreading reaches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Visible {
    pub energy: f64,
    pub region_s: f64,
}

/// The run's figures as the middle of what the source shows around it ([`SourceModel::bounded`])
/// for a run shorter than two of the source's updates (or windows); `None` otherwise. The caller
/// keeps them when their interval is the narrower: both are honest, this one is for runs whose
/// energy the source spreads over more than their length.
fn bounded(r: &super::RunEnergyRecord, m: &SourceModel, baseline: f64, idle: &IdleU, visible: &dyn Fn(i64, i64, f64) -> Option<Visible>) -> Option<Bounded> {
    let (a, b) = r.trace_start_ns.zip(r.trace_end_ns)?;
    let d = (b - a) as f64 * 1e-9;
    if r.idle_unknown || d >= 2.0 * m.update.0 as f64 * 1e-9 {
        return None;
    }
    // The idle window's baseline, not a local one: on a source this slow the pause before a run
    // holds its neighbours' spread energy, and a baseline from it hides the run's.
    let v = visible(a, b, baseline)?;
    Some(m.bounded(d, Watts(baseline), Joules(v.energy), v.region_s, idle))
}

/// Puts the bounded figures on the run: its energy and what follows from it, the half-widths.
fn apply_bounded(r: &mut super::RunEnergyRecord, b: &Bounded, baseline: f64, idle_u95: f64) {
    rescale(r, b.energy.0);
    r.energy_above_idle_j = b.above_idle.0;
    r.idle_baseline_w = baseline;
    r.baseline_source = "idle_window".into();
    r.energy_u95_j = Some(b.u95.energy.0);
    r.energy_above_idle_u95_j = Some(b.u95.above_idle.0);
    // Its background past the last IO is part of what the source cannot split.
    r.background_u95_j = Some(b.u95.energy.0);
    r.idle_u95_w = Some(idle_u95);
    r.flag("shorter than the source resolves: its energy is the middle of what the source shows around it, ± half of that");
    r.j_per_mib_u95 = r.j_per_mib.filter(|_| r.energy_j > 0.0).map(|j| j * b.u95.energy.0 / r.energy_j);
}

/// Gives the run the energy `energy` (J) and what follows from it. Figures per byte, per IO and
/// against the datasheet scale with the energy; from a run whose first figure was not positive
/// they cannot be rescaled and are left out, never zeroed.
fn rescale(r: &mut super::RunEnergyRecord, energy: f64) {
    let scale = (r.energy_j > 0.0).then(|| energy / r.energy_j);
    r.j_per_mib = r.j_per_mib.zip(scale).map(|(j, k)| j * k);
    r.j_per_io = r.j_per_io.zip(scale).map(|(j, k)| j * k);
    r.datasheet_ratio = r.datasheet_ratio.zip(scale).map(|(x, k)| x * k);
    if let Some(d) = r.trace_end_ns.zip(r.trace_start_ns).map(|(z, a)| (z - a) as f64 * 1e-9).filter(|d| *d > 0.0) {
        r.mean_w = energy / d;
    }
    r.energy_j = energy;
}

/// What a counter slower than its reads shows above `baseline` over the whole updates holding
/// `[from, to)` (one sample each, [`super::live`]'s `counter_samples`): their energy and span.
/// A run inside them has its energy above idle within it, however they split it. `None` where
/// the series has no such updates.
pub fn updates_holding(series: &PowerSeries, from: i64, to: i64, baseline: f64) -> Option<Visible> {
    let t = series.times();
    let i = series.index_at_or_after(UnixNanos(from.saturating_add(1))).checked_sub(1)?;
    let end = t.get(series.index_at_or_after(UnixNanos(to))).map_or(series.end_time().0, |x| x.0);
    shown_between(series, t[i].0, end, baseline)
}

/// What a held or averaged source shows above `baseline` over `[from, to)`: each sample's energy
/// over the part of its hold inside the span, less the baseline over the time the samples cover
/// there. (Whole samples whose hold starts in the span, against the span's length, left out up to
/// a sample at each end: with a DCMI reading's 1 s holds a run's whole second went missing, and
/// its figures covered 93.8 % of one seed set's runs.)
pub fn shown_between(series: &PowerSeries, from: i64, to: i64, baseline: f64) -> Option<Visible> {
    if to <= from || series.is_empty() {
        return None;
    }
    let t = series.times();
    let first = series.index_at_or_after(UnixNanos(from.saturating_add(1))).saturating_sub(1);
    let last = series.index_at_or_after(UnixNanos(to)).min(series.len());
    let (mut energy, mut covered) = (0.0, 0i64);
    for k in first..last {
        let (s, e) = (t[k].0, t.get(k + 1).map_or(series.end_time().0, |x| x.0));
        let inside = e.min(to) - s.max(from);
        if inside > 0 && e > s {
            energy += series.sample_energy(k) * inside as f64 / (e - s) as f64;
            covered += inside;
        }
    }
    let region_s = covered as f64 * 1e-9;
    Some(Visible { energy: energy - baseline * region_s, region_s })
}

/// The highest power `z` shows near the run `[from, to)`: a counter's over whole updates
/// ([`super::source::binned`] in spans of `span_ns`) up to one span and one update after its end;
/// a held value or moving average, its highest reading up to one update (`update_ns`, a moving
/// average's window) and one read (`read_ns`) after the end: those readings are the ones whose
/// update (or window) overlaps the run, later ones hold only what came after it.
pub fn peak_of_zone(z: &ZoneSeries, span_ns: i64, read_ns: i64, from: i64, to: i64) -> Option<f64> {
    let update = i64::try_from(z.update_ns.min(1_000_000_000)).unwrap_or(0);
    if z.is_counter() {
        let until = to.saturating_add(span_ns).saturating_add(update.min(span_ns));
        let s = super::source::binned(z, from, until, span_ns)?;
        return s.powers().iter().map(|w| w.0).filter(|w| w.is_finite()).reduce(f64::max);
    }
    let until = to.saturating_add(i64::try_from(z.update_ns).unwrap_or(i64::MAX).max(0)).saturating_add(read_ns.max(0));
    z.t.iter().zip(&z.watts).filter(|(t, w)| **t >= from && **t <= until && w.is_finite()).map(|(_, w)| *w).reduce(f64::max)
}

/// The sample of `series` holding `at` and its two neighbours, where a counter slower than its
/// reads has one sample per update (its levels averaged, `live::counter_samples`): their own mean
/// powers, how much of the middle one lies before and after `at`, and how well its two ends were
/// placed (`placed`). `None` for other series and at the recording's ends.
pub fn updates_around(series: &PowerSeries, at: i64, placed: &[(i64, i64)]) -> Option<Straddle> {
    if !series.levels_averaged() {
        return None;
    }
    let t = series.times();
    let j = series.index_at_or_after(UnixNanos(at.saturating_add(1))).checked_sub(1)?;
    if j + 1 >= series.len() {
        return None;
    }
    let part = |ns: i64| Nanos(u64::try_from(ns).unwrap_or(0));
    let own = |i: usize| series.own_power(i);
    // Whether the part beyond the edge is quiet is the report's to say ([`attach`]).
    Some(Straddle {
        before: own(j.checked_sub(1)?),
        holding: own(j),
        after: own(j + 1),
        part_before: part(at - t[j].0),
        part_after: part(t[j + 1].0 - at),
        far_quiet: false,
        placed_start: placed_at(placed, t[j].0),
        placed_end: placed_at(placed, t[j + 1].0),
    })
}

/// The half-range of the update placed at `at` (`placed`: instants and half-ranges in order, as
/// [`super::grid::place_updates`] gives them), 0 where none was placed there.
fn placed_at(placed: &[(i64, i64)], at: i64) -> Nanos {
    let i = placed.partition_point(|p| p.0 < at);
    Nanos(placed.get(i).filter(|p| p.0 == at).and_then(|p| u64::try_from(p.1).ok()).unwrap_or(0))
}

/// How far a held value or moving average of `z` spreads a run's energy beyond its edges (ns; 0
/// for counters): a held value, lag-corrected by one update, up to that update and half a read;
/// a moving average, centred by half its window, half the window and up to as much again for
/// its recomputation and reads (its recomputation period is not known: the window bounds it).
pub fn smear_margin_ns(z: &ZoneSeries, read_ns: i64) -> i64 {
    if z.is_counter() {
        return 0;
    }
    let update = i64::try_from(z.update_ns).unwrap_or(i64::MAX);
    if z.path.ends_with("_average") {
        update
    } else {
        update.saturating_add(read_ns / 2)
    }
}

fn figures(r: &super::RunEnergyRecord) -> RunFigures {
    let duration = r.trace_end_ns.zip(r.trace_start_ns).map(|(b, a)| u64::try_from(b - a).unwrap_or(0)).unwrap_or(0);
    RunFigures {
        duration: Nanos(duration),
        energy: Joules(r.energy_j),
        above_idle: Joules(r.energy_above_idle_j),
        background: Joules(r.background_energy_j),
        background_duration: Nanos((r.background_s * 1e9) as u64),
        mean: Watts(r.mean_w),
        baseline: Watts(r.idle_baseline_w),
        peak: Watts(r.mean_w),
        tail_cut: r.tail_cut,
        split_start: matches!(r.start_found.as_str(), "SplitAtFirstSubmit" | "Nominal"),
        split_end: r.end_found == "Nominal",
        start_updates: None,
        end_updates: None,
        visible_above: Joules(0.0),
    }
}

/// Adds the residual of an imported trace's time alignment (after `--align` checked or corrected
/// it) to every run's half-widths: a time error `residual` at each edge moves the run's step
/// there by `step · residual`, combined in quadrature with what is there (independent terms).
pub fn add_align_residual(e: &mut ProbeEnergy, residual: Nanos) {
    let r = residual.0 as f64 * 1e-9;
    for run in &mut e.runs {
        let step = (run.mean_w - run.idle_baseline_w).abs();
        // Two edges, each a uniform error of half-range step·r: u² = 2·(step·r)²/3.
        let extra2 = 2.0 * (step * r).powi(2) / 3.0;
        let widen = |u95: f64| wattflip_energy::uncertainty::K95 * ((u95 / wattflip_energy::uncertainty::K95).powi(2) + extra2).sqrt();
        run.energy_u95_j = run.energy_u95_j.map(widen);
        run.energy_above_idle_u95_j = run.energy_above_idle_u95_j.map(widen);
        if let (Some(j), Some(u)) = (run.j_per_mib, run.energy_u95_j) {
            run.j_per_mib_u95 = (run.energy_j > 0.0).then(|| j * u / run.energy_j);
        }
    }
    if let Some(m) = e.source_model.as_mut() {
        m.align = residual;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(energy_j: f64) -> super::super::RunEnergyRecord {
        serde_json::from_value(serde_json::json!({
            "run_id": 3, "experiment": "RR", "value": 4096.0, "repetition": 0, "source": "hwmon:psu",
            "energy_j": energy_j, "energy_above_idle_j": 0.001, "background_energy_j": 0.0, "background_s": 0.0,
            "idle_baseline_w": 2.5, "mean_w": 3.0, "j_per_mib": 0.02, "j_per_io": 0.0001, "datasheet_ratio": 1.5,
            "start_found": "Nominal", "end_found": "Nominal", "trace_start_ns": 1_000_000_000i64, "trace_end_ns": 1_020_000_000i64,
            "background_class": "none"
        }))
        .unwrap()
    }

    fn bounded_figures() -> Bounded {
        let u95 = wattflip_energy::RunU95 { energy: Joules(0.036), above_idle: Joules(0.035), background: Joules(0.0) };
        Bounded { energy: Joules(0.07), above_idle: Joules(0.03), u95 }
    }

    /// A 20 ms run first measured at 0.035 J becomes 0.07 J: its mean 3.5 W (0.07 J over
    /// 20 ms), its per-byte, per-IO and datasheet figures twice what they were, the idle
    /// window's 2.0 W baseline, and the reason. From a first energy of 0 J nothing can be
    /// rescaled: those figures are left out, never 0.
    #[test]
    fn a_bounded_run_takes_its_energy_and_what_follows_from_it() {
        let mut r = record(0.035);
        apply_bounded(&mut r, &bounded_figures(), 2.0, 0.01);
        assert_eq!((r.energy_j, r.energy_above_idle_j, r.idle_baseline_w), (0.07, 0.03, 2.0));
        assert!((r.mean_w - 3.5).abs() < 1e-12, "{}", r.mean_w);
        assert_eq!((r.j_per_mib, r.j_per_io, r.datasheet_ratio), (Some(0.04), Some(0.0002), Some(3.0)));
        assert_eq!((r.energy_u95_j, r.energy_above_idle_u95_j, r.idle_u95_w), (Some(0.036), Some(0.035), Some(0.01)));
        assert!(r.low_confidence && r.low_confidence_reason.as_deref().is_some_and(|w| w.starts_with("shorter than the source resolves")));
        let mut z = record(0.0);
        apply_bounded(&mut z, &bounded_figures(), 2.0, 0.01);
        assert_eq!((z.j_per_mib, z.j_per_io, z.datasheet_ratio, z.j_per_mib_u95), (None, None, None, None));
        assert!((z.mean_w - 3.5).abs() < 1e-12, "{}", z.mean_w);
    }

    /// A 20 ms run, 1 mJ above idle, on a 10 ms moving average: its box keeps W/(4D) = 1/8 of
    /// that out, and half of it, 62.5 µJ, goes back into its energy and its energy above idle.
    /// With the idle baseline unknown there is no energy above idle to take it from: unchanged.
    #[test]
    fn a_moving_averages_loss_goes_back_only_where_the_baseline_is_known() {
        let m = SourceModel {
            reporting: Reporting::MovingAverage,
            update: Nanos(10_000_000),
            read: Nanos(1_000_000),
            jitter: Nanos(0),
            resolution_j: Joules(0.0),
            resolution_w: Watts(0.0),
            noise: Watts(0.0),
            accuracy: 0.0,
            align: Nanos(0),
            placement: Nanos(0),
            held: false,
        };
        let around = Around { peak: &|_, _| None, visible: &|_, _, _| None, updates: &|_| None };
        let attached = |idle_unknown: bool| {
            let mut e = ProbeEnergy { runs: vec![super::super::RunEnergyRecord { idle_unknown, ..record(0.035) }], ..Default::default() };
            attach(&mut e, &m, Nanos(1_000_000_000), &around);
            let r = &e.runs[0];
            (r.energy_j, r.energy_above_idle_j)
        };
        let (energy, above) = attached(false);
        assert!((energy - 0.0350625).abs() < 1e-15 && (above - 0.0010625).abs() < 1e-15, "{energy} {above}");
        assert_eq!(attached(true), (0.035, 0.001));
    }

    /// Runs at 1.00–1.02 s and 1.05–1.08 s, edges straddled by updates reaching 10 ms beyond
    /// them: the first run's start (0.99–1.00 s) and end (1.02–1.03 s) parts hold no other run's
    /// IO; the second's start part (1.04–1.05 s) neither; with 35 ms beyond the first run's
    /// end, the second run's first submit lies in it.
    #[test]
    fn an_edge_is_quiet_where_no_other_runs_io_lies_beyond_it() {
        let w = |before_ms: u64, after_ms: u64| Straddle {
            before: Watts(2.0),
            holding: Watts(3.0),
            after: Watts(4.0),
            part_before: Nanos(before_ms * 1_000_000),
            part_after: Nanos(after_ms * 1_000_000),
            far_quiet: false,
            placed_start: Nanos(0),
            placed_end: Nanos(0),
        };
        let busy = [(1_000_000_000, 1_020_000_000), (1_050_000_000, 1_080_000_000)];
        let mut f = figures(&record(0.06));
        (f.start_updates, f.end_updates) = (Some(w(10, 5)), Some(w(5, 10)));
        quiet_far_parts(&mut f, &busy, (1_000_000_000, 1_020_000_000));
        assert_eq!((f.start_updates.map(|w| w.far_quiet), f.end_updates.map(|w| w.far_quiet)), (Some(true), Some(true)));
        f.end_updates = Some(w(5, 35));
        quiet_far_parts(&mut f, &busy, (1_000_000_000, 1_020_000_000));
        assert_eq!(f.end_updates.map(|w| w.far_quiet), Some(false));
        f.start_updates = Some(w(10, 5));
        quiet_far_parts(&mut f, &busy, (1_050_000_000, 1_080_000_000));
        assert_eq!(f.start_updates.map(|w| w.far_quiet), Some(true));
        f.start_updates = Some(w(40, 5));
        quiet_far_parts(&mut f, &busy, (1_050_000_000, 1_080_000_000));
        assert_eq!(f.start_updates.map(|w| w.far_quiet), Some(false), "the first run's IO ends at 1.02 s, inside 1.01–1.05 s");
    }

    /// A slow counter's updates at 0, 100, 200 and 300 ms (to 400 ms) holding 0.2, 0.5, 0.3 and
    /// 0.2 J, over a 2 W baseline: a span inside the second update shows its 0.5 J less 0.2 J of
    /// baseline; one reaching into the third, both updates' 0.8 J less 0.4 J.
    #[test]
    fn a_slow_counters_updates_show_what_they_hold_around_a_span() {
        let ms = |m: i64| UnixNanos(m * 1_000_000);
        let series = PowerSeries::new(vec![ms(0), ms(100), ms(200), ms(300)], vec![Watts(2.0); 4])
            .ok()
            .and_then(|s| s.ending_at(ms(400)))
            .and_then(|s| s.with_energies(vec![0.2, 0.5, 0.3, 0.2]))
            .expect("a series");
        let v = updates_holding(&series, ms(115).0, ms(185).0, 2.0).expect("inside the series");
        assert!((v.energy - 0.3).abs() < 1e-12 && (v.region_s - 0.1).abs() < 1e-12, "{v:?}");
        let v = updates_holding(&series, ms(145).0, ms(255).0, 2.0).expect("inside the series");
        assert!((v.energy - 0.4).abs() < 1e-12 && (v.region_s - 0.2).abs() < 1e-12, "{v:?}");
        let v = updates_holding(&series, ms(345).0, ms(399).0, 2.0).expect("the last update");
        assert!((v.energy - 0.0).abs() < 1e-12 && (v.region_s - 0.1).abs() < 1e-12, "{v:?}");
        assert_eq!(updates_holding(&series, -ms(10).0, ms(50).0, 2.0), None, "before the first update");
    }

    /// A DCMI reading's holds of 1 s at 4, 6 and 5 W from 0 to 3 s, over a 4 W baseline: a span
    /// inside the middle second shows its 6 W over the span (the samples starting in it, none,
    /// had shown −3.2 J); one across three holds shows each over its part; past the series' end
    /// nothing is shown and no baseline is taken away.
    #[test]
    fn a_held_source_shows_each_hold_over_its_part_of_a_span() {
        let ms = |m: i64| UnixNanos(m * 1_000_000);
        let series = PowerSeries::new(vec![ms(0), ms(1000), ms(2000)], vec![Watts(4.0), Watts(6.0), Watts(5.0)])
            .ok()
            .and_then(|s| s.ending_at(ms(3000)))
            .expect("a series");
        let near = |v: Option<Visible>, energy: f64, region_s: f64| v.is_some_and(|v| (v.energy - energy).abs() < 1e-9 && (v.region_s - region_s).abs() < 1e-9);
        assert!(near(shown_between(&series, ms(1100).0, ms(1900).0, 4.0), 1.6, 0.8));
        assert!(near(shown_between(&series, ms(500).0, ms(2250).0, 4.0), 2.25, 1.75));
        assert!(near(shown_between(&series, ms(2500).0, ms(4000).0, 4.0), 0.5, 0.5));
        assert_eq!(shown_between(&series, ms(10).0, ms(10).0, 4.0), None);
    }
}
