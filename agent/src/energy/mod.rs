//! Per-run energy for probes (docs/uflip-method.md §11): aligns a power series (live samples taken during the
//! probe, or an imported shunt trace) with the probe's runs and computes, with the
//! `wattflip-energy` crate, each run's energy, idle baseline, background-work tail, J/MiB, J/IO
//! and the background-work class of each experiment (the paper's Table 2). `live` records power
//! while a probe runs; `trace` imports oscilloscope or data-logger files. Both go through the energy
//! crate's one probe analysis (`analyze_probe`: one idle baseline per probe, runs bounded by their
//! neighbours, cut tails split, gaps counted, docs/energy-method.md §4): the live path through
//! [`analyze`] / [`energy_of_recording`], imported traces through [`analyze_trace`] (edges refined
//! to the sample, a trace that does not match the probe refused). A new way to obtain a power series
//! only has to produce a `PowerSeries` and call [`analyze`].

pub mod grid;
pub mod held;
pub mod interval;
pub mod live;
pub mod phase;
pub mod recorded;
pub mod sizing;
pub mod source;
pub mod trace;
pub mod uncertain;

pub use recorded::{energy_of_recording, energy_of_recording_in, Notice, Preparation};

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use wattflip_energy::{
    analyze_probe, analyze_probe_fine, classify, BackgroundObservation, BaselineSource, ClassifyConfig, FineSamples, PowerSeries, ProbeAnalysis,
    RunDetectConfig, RunInfo, TimeBase, TraceError, UnixNanos, ValueRuns,
};
use wattflip_uflip::{ProbeReport, RunResult, RunStatus};

/// The energy of one run, as stored next to the run's statistics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunEnergyRecord {
    /// The engine's run index (`RunResult::run_id`).
    pub run_id: usize,
    pub experiment: String,
    pub value: f64,
    pub repetition: u32,
    /// Which power source/zone the series came from.
    pub source: String,
    pub energy_j: f64,
    pub energy_above_idle_j: f64,
    pub background_energy_j: f64,
    pub background_s: f64,
    pub idle_baseline_w: f64,
    pub mean_w: f64,
    pub j_per_mib: Option<f64>,
    pub j_per_io: Option<f64>,
    pub datasheet_ratio: Option<f64>,
    /// How the run's start and end were found in the trace (`Threshold`, `ReturnedToIdle`, ...).
    pub start_found: String,
    pub end_found: String,
    /// The run's start and end as found in the power trace (UTC ns): first active sample, and the
    /// end of the last sample outside the idle band. `None` only in records written before they
    /// were kept (an older `energy.jsonl`, still read by `report --in` and `trace import`): absent, never a zero.
    #[serde(default)]
    pub trace_start_ns: Option<i64>,
    #[serde(default)]
    pub trace_end_ns: Option<i64>,
    /// Robust spread of the baseline, 1.4826·MAD (W).
    #[serde(default)]
    pub idle_spread_w: Option<f64>,
    /// Half-width of the idle band the run's edges were found with (W): power closer than this to
    /// the baseline is idle, so a weaker tail is not seen (docs/energy-method.md §4).
    #[serde(default)]
    pub idle_band_w: Option<f64>,
    /// Share of the run's time the power readings cover (1 = all of it; a stall of the recorder
    /// or a gap leaves part of the run's energy known only as a total over a longer interval).
    /// `None` in records written before it was kept.
    #[serde(default)]
    pub coverage: Option<f64>,
    /// The number is less certain than the method's figures (docs/energy-method.md §4, "Live
    /// runs"): the readings cover less than [`MIN_COVERAGE`] of the run, or a live run lasts
    /// fewer than [`LOW_CONFIDENCE_PERIODS`] reading periods.
    #[serde(default)]
    pub low_confidence: bool,
    /// Why the run is `low_confidence` (each reason with its numbers, `; `-separated); `None` when
    /// it is not, or in records written before reasons were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub low_confidence_reason: Option<String>,
    /// The idle baseline is unknown (the source did not change in the idle window):
    /// `idle_baseline_w` and `energy_above_idle_j` are then not values (never sent or shown).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub idle_unknown: bool,
    /// Half-widths of 95 % intervals (docs/energy-method.md §9): on `energy_j` (the energy over
    /// `[trace_start_ns, trace_end_ns)`), `energy_above_idle_j`, `background_energy_j`,
    /// `idle_baseline_w` and `j_per_mib`. `None` in records written before they were kept (and
    /// the idle ones when the baseline is unknown).
    #[serde(default)]
    pub energy_u95_j: Option<f64>,
    #[serde(default)]
    pub energy_above_idle_u95_j: Option<f64>,
    #[serde(default)]
    pub background_u95_j: Option<f64>,
    #[serde(default)]
    pub idle_u95_w: Option<f64>,
    #[serde(default)]
    pub j_per_mib_u95: Option<f64>,
    /// Background work was still going on at the next run's first IO: the tail was cut there and
    /// the energy split at that instant (interference); `background_s` is then a lower bound.
    #[serde(default)]
    pub tail_cut: bool,
    /// Gap samples (NaN/∞ in the trace) inside the run; they carry no energy.
    #[serde(default)]
    pub gap_samples: u64,
    /// The idle baseline used: `idle_window` (the probe's) or `local` (the idle before the run);
    /// empty in records written before it was kept.
    #[serde(default)]
    pub baseline_source: String,
    /// Background-work class of the run's experiment (filled by [`analyze`]).
    pub background_class: String,
}

/// Idle characterisation before a probe (docs/uflip-method.md §11.2): the device's idle power and the period of
/// its regular idle activity, when there is one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdleRecord {
    pub source: String,
    /// Start of the idle window (UTC ns) and its length.
    pub from_ns: i64,
    pub window_s: f64,
    pub median_w: f64,
    /// 1.4826·MAD of the idle samples.
    pub spread_w: f64,
    pub samples: usize,
    pub activity_period_s: Option<f64>,
    pub activity_correlation: Option<f64>,
    /// Energy above the idle median per activity period (J), when a period was found.
    pub activity_energy_j: Option<f64>,
    /// Half-width of the 95 % interval on `median_w` (docs/energy-method.md §9).
    #[serde(default)]
    pub idle_u95_w: Option<f64>,
}

/// Characterises the idle window `[from, to)` of `series`.
pub fn characterise_idle(series: &PowerSeries, from: UnixNanos, to: UnixNanos, source: &str) -> Option<IdleRecord> {
    characterise_idle_with(series, from, to, source, &wattflip_energy::IdleConfig::default())
}

/// [`characterise_idle`] with its parameters (fewer samples for a slow source's whole updates).
pub fn characterise_idle_with(series: &PowerSeries, from: UnixNanos, to: UnixNanos, source: &str, cfg: &wattflip_energy::IdleConfig) -> Option<IdleRecord> {
    let p = wattflip_energy::characterise_idle(series, from, to, cfg).ok()?;
    let median = p.baseline.median.0;
    let window_s = (to.0 - from.0) as f64 / 1e9;
    let period_s = p.spike_period.map(|n| n.as_secs_f64());
    Some(IdleRecord {
        source: source.to_string(),
        from_ns: from.0,
        window_s,
        median_w: median,
        spread_w: p.baseline.spread.0,
        samples: p.baseline.samples,
        activity_period_s: period_s,
        activity_correlation: p.spike_correlation,
        // Σ (P − median)·Δt over the window is the energy of what rises above the idle floor (the
        // median ignores short spikes); spread over the window's periods it is the energy of one.
        activity_energy_j: period_s.filter(|_| window_s > 0.0).map(|period| above(series, from, to, median) * period / window_s),
        idle_u95_w: None,
    })
}

/// Σ (P − `b`)·Δt over the samples in `[from, to)`, each lasting until the next sample (the last
/// until `to`, at most one typical period).
fn above(series: &PowerSeries, from: UnixNanos, to: UnixNanos, b: f64) -> f64 {
    let (t, p) = (series.times(), series.powers());
    let a = series.index_at_or_after(from);
    let z = series.index_at_or_after(to).max(a);
    let last = series.typical_period().0 as i64;
    (a..z)
        .map(|i| {
            let next = t.get(i + 1).map(|n| n.0).unwrap_or(t[i].0 + last).min(to.0);
            (p[i].0 - b) * (next - t[i].0) as f64 / 1e9
        })
        .sum()
}

/// The pause to leave after write runs, from the longest background tail measured (the paper's
/// suggestion, docs/uflip-method.md §11.6): `max(min_pause, 1.5 · tail + return-to-idle)`.
pub fn recommended_pause(e: &ProbeEnergy) -> std::time::Duration {
    let longest = e.runs.iter().map(|r| r.background_s).fold(0.0f64, f64::max);
    let p = wattflip_energy::recommend_pause(
        wattflip_energy::Nanos::from_secs_f64(longest),
        wattflip_energy::IoMix::WithWrites,
        &wattflip_energy::PauseConfig::default(),
    );
    std::time::Duration::from_nanos(p.0)
}

/// Result of aligning one series with one probe.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProbeEnergy {
    /// Idle power before the probe, when it was recorded live.
    pub idle: Option<IdleRecord>,
    pub runs: Vec<RunEnergyRecord>,
    /// Runs that could not be analysed, with the reason (e.g. outside the trace).
    pub skipped: Vec<(usize, String)>,
    /// Experiment → (class code, the rule that decided).
    pub classes: BTreeMap<String, (String, String)>,
    /// Gap samples (NaN/∞) in the whole series.
    #[serde(default)]
    pub gap_samples: u64,
    /// Loud warnings of the analysis, with their numbers (some runs not covered, …).
    #[serde(default)]
    pub warnings: Vec<String>,
    /// Why the whole trace was refused (it does not match the probe); every run is then skipped.
    #[serde(default)]
    pub refused: Option<String>,
    /// An imported trace's time base against the probe's, from the runs' rises (`trace import`
    /// refuses one beyond the bounds, or corrects it with `--align auto`).
    #[serde(skip)]
    pub alignment: Option<wattflip_energy::Alignment>,
    /// How the idle window was placed after preparing the target (live probes).
    #[serde(default)]
    pub preparation: Option<Preparation>,
    /// The source's update period and how it moved in the idle window (live probes).
    #[serde(default)]
    pub source_facts: Option<source::SourceFacts>,
    /// Named warnings about the source (`source_update_period_unknown`, `source_counter_stuck`,
    /// …): printed, and sent as events of that kind.
    #[serde(default)]
    pub notices: Vec<Notice>,
    /// What the uncertainties were computed from.
    #[serde(default)]
    pub source_model: Option<wattflip_energy::SourceModel>,
}

impl ProbeEnergy {
    pub fn for_run(&self, run_id: usize) -> Option<&RunEnergyRecord> {
        self.runs.iter().find(|r| r.run_id == run_id)
    }
}

fn ns(t: u64) -> UnixNanos {
    UnixNanos(i64::try_from(t).unwrap_or(i64::MAX))
}

/// Analyses every measured run of `report` against `series` with the energy crate's probe analysis
/// (docs/energy-method.md §4): one idle baseline for the whole probe from `idle` (its idle
/// characterisation window), each run bounded by its neighbours, tails cut at the next run's first
/// IO, gaps counted. Without a usable idle window each run falls back to the checked local
/// baseline. `datasheet_w` is the "datasheet watts" (an NVMe drive's PSD max power of its power
/// state): each record then carries the ratio of that estimate × the run's duration to the
/// measured energy. The live path calls this directly; `trace import` through [`analyze_trace`].
pub fn analyze(
    report: &ProbeReport,
    series: &PowerSeries,
    idle: Option<(UnixNanos, UnixNanos)>,
    source: &str,
    cfg: &RunDetectConfig,
    datasheet_w: Option<f64>,
) -> ProbeEnergy {
    let (ok, infos) = measured_runs(report, datasheet_w);
    records(&ok, analyze_probe(series, &infos, idle, cfg, TimeBase::Shared), series, source, true)
}

/// [`analyze`] for an imported shunt trace: the run edges are then refined to the sample by a
/// second pass over the file (`fine`).
pub fn analyze_trace(
    report: &ProbeReport,
    series: &PowerSeries,
    idle: Option<(UnixNanos, UnixNanos)>,
    source: &str,
    cfg: &RunDetectConfig,
    datasheet_w: Option<f64>,
    fine: &mut dyn FineSamples,
) -> Result<ProbeEnergy, TraceError> {
    let (ok, infos) = measured_runs(report, datasheet_w);
    let a = analyze_probe_fine(series, &infos, idle, cfg, fine)?;
    // The edges are refined to the raw sample: their time error is a sample period, not the
    // decimated window's (each run's refinement records the period it found).
    let fine_period = a.runs.iter().filter_map(|r| r.as_ref().ok()).map(|r| r.sample_period).filter(|p| p.0 > 0).min();
    let alignment = wattflip_energy::align::estimate(series, &infos, &a, cfg);
    let mut e = ProbeEnergy { alignment, ..records(&ok, a, series, source, false) };
    let noise = e.runs.first().and_then(|r| r.idle_spread_w).unwrap_or(0.0);
    let window = idle.map(|(a, b)| wattflip_energy::Nanos(u64::try_from(b.0 - a.0).unwrap_or(0))).unwrap_or_default();
    let period = series.typical_period();
    let span = i64::try_from(period.0).unwrap_or(i64::MAX);
    let peak = |a: i64, b: i64| {
        let p = series.powers_between(UnixNanos(a.saturating_sub(span)), UnixNanos(b.saturating_add(span)));
        p.iter().map(|w| w.0).filter(|w| w.is_finite()).reduce(f64::max)
    };
    let model = uncertain::model_of_trace(fine_period.unwrap_or(period).min(period), noise, wattflip_energy::Nanos(0));
    uncertain::attach(&mut e, &model, window, &uncertain::Around { peak: &peak, visible: &|_, _, _| None, updates: &|_| None });
    Ok(e)
}

/// The probe's measured runs, in execution order, and what the analysis knows of each.
fn measured_runs(report: &ProbeReport, datasheet_w: Option<f64>) -> (Vec<&RunResult>, Vec<RunInfo>) {
    let ok: Vec<&RunResult> = report.runs.iter().filter(|r| r.status == RunStatus::Ok && r.bench != "format").collect();
    let infos = ok
        .iter()
        .map(|r| RunInfo {
            first_submit: ns(r.start_ns),
            last_complete: ns(r.end_ns),
            bytes: r.io_count.saturating_mul(r.io_size_bytes),
            ios: r.io_count,
            next_run_start: None,
            datasheet_active: datasheet_w.map(wattflip_energy::Watts),
        })
        .collect();
    (ok, infos)
}

/// Below this share of its time covered by readings a run's energy is flagged `low_confidence`.
pub const MIN_COVERAGE: f64 = 0.99;

/// A live run shorter than this many reading periods is flagged `low_confidence`: its two edge
/// readings carry most of its energy (docs/energy-method.md §4, "Live runs", for the figures).
pub const LOW_CONFIDENCE_PERIODS: u64 = 10;

/// Why a run's energy is not a value to write, if it is not: a zero-length run, or a total that is
/// negative or not finite (power never is; the readings around it did not cover it). Zero stays a
/// value: a counter that did not move over the run said so.
fn not_a_value(e: &wattflip_energy::RunEnergy) -> Option<String> {
    if e.duration.0 == 0 {
        return Some(format!("zero-length run at {} ns: energy not written", e.start.0));
    }
    if !(e.energy_total.0.is_finite() && e.energy_total.0 >= 0.0) {
        return Some(format!(
            "energy {} J over [{}, {}) ns is negative (readings cover {:.1} % of the run): not written",
            e.energy_total.0,
            e.start.0,
            e.end.0,
            e.coverage * 100.0
        ));
    }
    None
}

/// Why the analysis itself flags run `e` (coverage, or a live run of few reading periods).
fn low_confidence_reason(e: &wattflip_energy::RunEnergy, live: bool) -> Option<String> {
    let mut why = Vec::new();
    if e.coverage < MIN_COVERAGE {
        why.push(format!("readings cover {:.1} % of the run", e.coverage * 100.0));
    }
    if live && e.duration.0 < e.sample_period.0.saturating_mul(LOW_CONFIDENCE_PERIODS) {
        why.push(format!(
            "{:.1} ms long, under {LOW_CONFIDENCE_PERIODS} reading periods of {:.1} ms",
            e.duration.0 as f64 / 1e6,
            e.sample_period.0 as f64 / 1e6
        ));
    }
    (!why.is_empty()).then(|| why.join("; "))
}

impl RunEnergyRecord {
    /// Flags the record `low_confidence`, adding `reason` to the ones it has.
    pub fn flag(&mut self, reason: &str) {
        self.low_confidence = true;
        self.low_confidence_reason = Some(match self.low_confidence_reason.take() {
            Some(r) => format!("{r}; {reason}"),
            None => reason.to_string(),
        });
    }
}

fn records(ok: &[&RunResult], a: ProbeAnalysis, series: &PowerSeries, source: &str, live: bool) -> ProbeEnergy {
    let mut out = ProbeEnergy { gap_samples: a.gap_samples, refused: a.refused().map(str::to_string), warnings: a.warnings.clone(), ..Default::default() };
    let mut per_experiment = PerExperiment::new();
    for (r, res) in ok.iter().zip(a.runs) {
        let e = match res {
            Ok(e) => e,
            Err(err) => {
                out.skipped.push((r.run_id, err.to_string()));
                continue;
            }
        };
        if let Some(why) = not_a_value(&e) {
            tracing::warn!(run = r.run_id, "{why}");
            out.skipped.push((r.run_id, why));
            continue;
        }
        per_experiment
            .entry(r.experiment.clone())
            .or_default()
            .entry(r.value.to_bits())
            .or_insert_with(|| (r.value, Vec::new()))
            .1
            .push(BackgroundObservation::from(&e));
        out.runs.push(RunEnergyRecord {
            run_id: r.run_id,
            experiment: r.experiment.clone(),
            value: r.value,
            repetition: r.repetition,
            source: source.to_string(),
            energy_j: e.energy_total.0,
            energy_above_idle_j: e.energy_above_idle.0,
            background_energy_j: e.energy_background.0,
            background_s: e.background_duration.as_secs_f64(),
            idle_baseline_w: e.baseline.median.0,
            mean_w: e.mean_power.0,
            j_per_mib: e.efficiency_total.per_mib.map(|x| x.0),
            j_per_io: e.efficiency_total.per_io.map(|x| x.0),
            datasheet_ratio: e.datasheet_ratio,
            start_found: format!("{:?}", e.start_found),
            end_found: format!("{:?}", e.end_found),
            trace_start_ns: Some(e.start.0),
            trace_end_ns: Some(e.end.0),
            idle_spread_w: Some(e.baseline.spread.0),
            idle_band_w: Some(e.band.0),
            coverage: Some(e.coverage),
            low_confidence: e.coverage < MIN_COVERAGE || (live && e.duration.0 < e.sample_period.0.saturating_mul(LOW_CONFIDENCE_PERIODS)),
            low_confidence_reason: low_confidence_reason(&e, live),
            idle_unknown: false,
            energy_u95_j: None,
            energy_above_idle_u95_j: None,
            background_u95_j: None,
            idle_u95_w: None,
            j_per_mib_u95: None,
            tail_cut: e.tail_cut,
            gap_samples: e.gap_samples,
            baseline_source: match e.baseline_source {
                BaselineSource::IdleWindow => "idle_window".into(),
                BaselineSource::Local => "local".into(),
            },
            background_class: String::new(),
        });
    }
    classify_experiments(&mut out, per_experiment, series);
    out
}

/// Runs per experiment and value, as the classifier takes them.
type PerExperiment = BTreeMap<String, BTreeMap<u64, (f64, Vec<BackgroundObservation>)>>;

/// The background-work class of each experiment (the paper's Table 2), set on its runs.
fn classify_experiments(out: &mut ProbeEnergy, per_experiment: PerExperiment, series: &PowerSeries) {
    // The classifier's resolution is the detector's (the series' period), not the refined edge.
    let ccfg = ClassifyConfig { sample_period: series.typical_period(), ..Default::default() };
    for (exp, values) in per_experiment {
        let values: Vec<ValueRuns> = values.into_values().map(|(value, runs)| ValueRuns { value, runs }).collect();
        if let Ok(c) = classify(&values, &ccfg) {
            out.classes.insert(exp, (c.class.code().to_string(), c.reason));
        }
    }
    for r in &mut out.runs {
        if let Some((code, _)) = out.classes.get(&r.experiment) {
            r.background_class = code.clone();
        }
    }
}

/// The detector for live recordings: the defaults, with an idle window of at least 3 readings (a
/// short `--idle` at a slow `--power-interval`).
pub fn live_detect_config() -> RunDetectConfig {
    RunDetectConfig { min_baseline_samples: 3, idle_peak_margin: 2.0, ..RunDetectConfig::default() }
}

/// [`live_detect_config`] for `zone`'s readings: a counter zone's levels may be averaged
/// ([`live::ZoneSeries::level_span_ns`]), which the end refinement must know.
pub fn live_detect_config_for(zone: &live::ZoneSeries) -> RunDetectConfig {
    let span = u64::try_from(zone.level_span_ns()).unwrap_or(0);
    RunDetectConfig { level_span: wattflip_energy::Nanos(span), ..live_detect_config() }
}

/// Plain-text energy table for the probe summary.
pub fn summary_table(e: &ProbeEnergy) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let source = e.runs.first().map(|r| r.source.as_str()).unwrap_or("-");
    let _ = writeln!(s, "Energy per run (source {source}; idle baseline subtracted in \"above idle\")");
    let _ = writeln!(
        s,
        "{:<24} {:>10} {:>4} {:>10} {:>9} {:>12} {:>10} {:>8} {:>4} {:>6} {:>10}  class",
        "experiment", "value", "rep", "total J", "±95% J", "above idle J", "bg J", "bg s", "cut", "gaps", "J/MiB"
    );
    for r in &e.runs {
        let above = if r.idle_unknown { "unknown".to_string() } else { format!("{:.4}", r.energy_above_idle_j) };
        let _ = writeln!(
            s,
            "{:<24} {:>10} {:>4} {:>10.4} {:>9} {:>12} {:>10.4} {:>8.3} {:>4} {:>6} {:>10}  {}",
            r.experiment,
            r.value,
            r.repetition,
            r.energy_j,
            r.energy_u95_j.map(|u| format!("{u:.4}")).unwrap_or_else(|| "-".into()),
            above,
            r.background_energy_j,
            r.background_s,
            if r.tail_cut { "yes" } else { "-" },
            r.gap_samples,
            r.j_per_mib.map(|x| format!("{x:.4}")).unwrap_or_else(|| "-".into()),
            r.background_class
        );
    }
    if e.runs.iter().any(|r| r.tail_cut) {
        let _ = writeln!(s, "cut: background work still going on at the next run's first IO; the energy is split there and bg s is a lower bound");
    }
    for r in e.runs.iter().filter(|r| r.low_confidence) {
        let _ = writeln!(s, "low confidence: run {}: {}", r.run_id, r.low_confidence_reason.as_deref().unwrap_or("readings missing"));
    }
    for n in &e.notices {
        let _ = writeln!(s, "warning [{}]: {}", n.kind, n.message);
    }
    if e.gap_samples > 0 {
        let _ = writeln!(s, "Gaps: {} samples (NaN) in the trace; they carry no energy, in the runs as in the total", e.gap_samples);
    }
    for w in &e.warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    for (run, why) in &e.skipped {
        let _ = writeln!(s, "run {run}: no energy: {why}");
    }
    if let Some(p) = &e.preparation {
        let _ = writeln!(s, "Idle baseline: {}", p.describe());
    }
    if let Some(f) = &e.source_facts {
        let _ = writeln!(s, "Source update period: {}", f.describe());
    }
    if let Some(i) = &e.idle {
        let period = i.activity_period_s.map(|p| format!(", regular idle activity every {p:.3} s")).unwrap_or_default();
        let energy = i.activity_energy_j.map(|j| format!(", {j:.4} J above idle each")).unwrap_or_default();
        let u95 = i.idle_u95_w.map(|u| format!(", ±{u:.3} W at 95 %")).unwrap_or_default();
        let _ = writeln!(s, "Idle before the probe: {:.3} W (spread {:.3} W, {} samples{u95}){period}{energy}", i.median_w, i.spread_w, i.samples);
    }
    let _ = writeln!(s, "Recommended pause after write runs (1.5 × longest tail + return to idle): {:?}", recommended_pause(e));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1 kHz, 1 W floor with a 4 W spike for 10 ms every 250 ms: a 2 s idle window.
    fn spiky() -> PowerSeries {
        let t0 = 1_800_000_000_000_000_000i64;
        let (t, p): (Vec<_>, Vec<_>) =
            (0..2000i64).map(|i| (UnixNanos(t0 + i * 1_000_000), wattflip_energy::Watts(if i % 250 < 10 { 4.0 } else { 1.0 }))).unzip();
        PowerSeries::new(t, p).unwrap()
    }

    #[test]
    fn idle_characterisation_finds_the_period_and_the_energy_of_each_spike() {
        let s = spiky();
        let from = s.first_time();
        let to = UnixNanos(from.0 + 2_000_000_000);
        let r = characterise_idle(&s, from, to, "hwmon:x").unwrap();
        assert_eq!((r.from_ns, r.window_s, r.samples), (from.0, 2.0, 2000));
        assert_eq!((r.median_w, r.spread_w), (1.0, 0.0));
        assert_eq!(r.activity_period_s, Some(0.25));
        // Each spike: 3 W above the floor for 10 ms = 0.03 J.
        assert!((r.activity_energy_j.unwrap() - 0.03).abs() < 1e-12, "{r:?}");
        assert!(summary_table(&ProbeEnergy { idle: Some(r), ..Default::default() })
            .contains("Idle before the probe: 1.000 W (spread 0.000 W, 2000 samples), regular idle activity every 0.250 s, 0.0300 J above idle each"));
    }

    #[test]
    fn a_flat_idle_has_no_activity() {
        let t0 = 1_800_000_000_000_000_000i64;
        let s = PowerSeries::new((0..100).map(|i| UnixNanos(t0 + i * 1_000_000)).collect(), vec![wattflip_energy::Watts(6.0); 100]).unwrap();
        let r = characterise_idle(&s, s.first_time(), UnixNanos(t0 + 100_000_000), "hwmon:x").unwrap();
        assert_eq!((r.median_w, r.spread_w, r.samples, r.window_s), (6.0, 0.0, 100, 0.1));
        assert_eq!((r.activity_period_s, r.activity_correlation, r.activity_energy_j), (None, None, None));
    }
}
