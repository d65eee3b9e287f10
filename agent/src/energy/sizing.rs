//! Runs sized to the power source (issue 37, `probe --energy-target`): from the source's model
//! (how it reports, its update period as resolved in the idle window, resolution, idle noise and
//! accuracy class: [`super::uncertain::model_of_zone`]) the shortest run whose energy the source
//! resolves to the target (relative 95 % half-width), and from each planned run's expected length
//! the IOCount multiplier that reaches it, within a time budget. Pure: [`plan`] takes numbers and
//! returns the [`SizePlan`] the probe prints before its first run, applies to the uFLIP plan
//! (`PlanOptions::io_scale`) and uses to give the runs that still miss the target their reason
//! ([`super::recorded::apply_target`]). A new way to reach the target (repeating a run back to
//! back) is a new field of [`SizePlan`] set in [`plan`].

use super::live::ZoneSeries;
use super::source::SourceFacts;
use super::uncertain::model_of_zone;
use std::time::Duration;
use wattflip_energy::{IdleU, Joules, Nanos, Reporting, RunFigures, SourceModel, Watts};

/// `--energy-budget`'s default: the extra run time the lengthened runs may add to a probe.
pub const DEFAULT_BUDGET: Duration = Duration::from_secs(600);

/// Runs are lengthened to this multiple of the shortest length that reaches the target: the
/// expected lengths are estimates (a pilot's, scaled), and a run a little short misses it.
pub const MARGIN: f64 = 1.1;

/// No run is sized beyond a day: a source that needs more cannot reach the target.
const LONGEST: f64 = 86_400.0;

/// The relative 95 % half-width of the energy of a run of `d` s at `power_w` on the source `m`,
/// as [`SourceModel::run`] gives it for the worst edges: a power reading's whole power steps at
/// both edges (an idle baseline of 0 W), a counter's whole power is at both edges (a cut tail);
/// a counter slower than its reads, the whole power steps at a cut tail inside an update.
pub fn relative_u95(m: &SourceModel, power_w: f64, d: f64) -> f64 {
    let p = if power_w.is_finite() && power_w > 0.0 { power_w } else { 1.0 };
    // A counter slower than its reads values each edge's update part by part: its worst edge is
    // a cut tail in the middle of an update with the idle baseline at 0 W (a quarter update at
    // the whole power), not the whole power over the update's phase.
    let resolved = m.reporting == Reporting::Counter && m.update.0 as f64 > 1.25 * m.read.0 as f64;
    let baseline = if m.reporting == Reporting::Counter && !resolved { p } else { 0.0 };
    let f = RunFigures {
        duration: Nanos((d * 1e9) as u64),
        energy: Joules(p * d),
        above_idle: Joules(p * d),
        background: Joules(0.0),
        background_duration: Nanos(0),
        mean: Watts(p),
        baseline: Watts(baseline),
        peak: Watts(p),
        tail_cut: true,
        split_start: false,
        split_end: false,
        start_updates: None,
        end_updates: None,
        visible_above: Joules(p * d),
    };
    let idle = IdleU { u95: Watts(0.0), statistical: Watts(0.0) };
    m.run(&f, &idle).energy.0 / (p * d)
}

/// The accuracy class alone, as a relative 95 % half-width: no run length goes below it.
pub fn class_u95(m: &SourceModel) -> f64 {
    wattflip_energy::uncertainty::expand(&[m.gain(1.0)], 0.0)
}

/// The shortest run (s) whose energy `m` resolves to `target` at `power_w`; `None` when the
/// accuracy class alone reaches the target or no run under a day does.
pub fn min_run_length(m: &SourceModel, power_w: f64, target: f64) -> Option<f64> {
    if class_u95(m) >= target || relative_u95(m, power_w, LONGEST) > target {
        return None;
    }
    // The half-width falls with the length (edges as 1/D, noise and resolution as 1/√D):
    // bisect on a log scale between 1 µs and a day.
    let (mut lo, mut hi) = (1e-6f64.ln(), LONGEST.ln());
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if relative_u95(m, power_w, mid.exp()) > target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(hi.exp())
}

/// The model of the zone `z` with `facts` resolved in the idle window `[from, to)`, with the
/// window's idle noise (1.4826·MAD of its readings), and the window's mean power: what [`plan`]
/// sizes the runs on.
pub fn idle_source(z: &ZoneSeries, facts: &SourceFacts, from: i64, to: i64) -> (SourceModel, f64) {
    let idle: Vec<f64> = z.t.iter().zip(&z.watts).filter(|(x, w)| **x >= from && **x < to && w.is_finite()).map(|(_, w)| *w).collect();
    let (_, noise) = wattflip_energy::stats::median_and_sigma(&idle).unwrap_or((0.0, 0.0));
    let power = if idle.is_empty() { 0.0 } else { idle.iter().sum::<f64>() / idle.len() as f64 };
    // A held value slower than its reads is analysed as a counter (`super::held`): sized as one.
    let counter = super::held::as_counter(z, facts.update_ns, facts.read_ns);
    let model = SourceModel { held: counter.is_some(), ..model_of_zone(counter.as_ref().unwrap_or(z), facts, noise) };
    (model, power)
}

/// What [`plan`] knows of a run of the probe's plan: its expected length, or `None` for a run
/// that is not sized (a format or preparation run).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlannedRun {
    pub expected: Option<Duration>,
}

/// How the runs are sized: per run of the plan (same order), its IOCount multiplier (1: as
/// planned) and why it will not reach the target, if it will not.
#[derive(Debug, Clone, PartialEq)]
pub struct SizePlan {
    pub target: f64,
    pub budget: Duration,
    /// The shortest run that reaches the target; `None` when the source cannot.
    pub min_run: Option<Duration>,
    /// The source's accuracy class (relative, ±).
    pub accuracy: f64,
    pub scale: Vec<f64>,
    pub reason: Vec<Option<String>>,
    /// Run time the lengthened runs add (expected).
    pub extra: Duration,
}

impl SizePlan {
    /// How many runs are lengthened.
    pub fn lengthened(&self) -> usize {
        self.scale.iter().filter(|s| **s > 1.0).count()
    }

    /// Undoes the lengthening of run `i` (the target's size has no room for it), with `why`;
    /// `expected` its expected length, to take its extra time back.
    pub fn refuse(&mut self, i: usize, expected: Duration, why: &str) {
        if let Some(s) = self.scale.get_mut(i).filter(|s| **s > 1.0) {
            self.extra = self.extra.saturating_sub(expected.mul_f64(*s - 1.0));
            *s = 1.0;
            self.reason[i] = Some(format!("not lengthened to reach the --energy-target {:.1} %: {why}", self.target * 100.0));
        }
    }

    /// The plan in one paragraph, printed before the first run: the target and budget, the
    /// source (`source`: its label, update period and how it reports), the shortest run, how
    /// many runs are lengthened, the extra time against the budget, and what cannot reach it.
    pub fn describe(&self, source: &str) -> String {
        let head = format!("--energy-target {:.1} % (--energy-budget {}): {source}", self.target * 100.0, humantime::format_duration(self.budget));
        let Some(min) = self.min_run else {
            return format!(
                "{head}: its accuracy class ±{:.1} % alone exceeds the target: no run can reach it (every run is low_confidence); no run is lengthened",
                self.accuracy * 100.0
            );
        };
        let missed = self.reason.iter().filter(|r| r.is_some()).count();
        let most = self.scale.iter().copied().fold(1.0f64, f64::max);
        let mut s = format!(
            "{head}: runs need {:.3} s to reach it ({:.3} s + {:.0} % margin); {} of {} runs lengthened (IOCount × up to {most:.1}), +{:.1} s of the {:.1} s budget",
            min.as_secs_f64() * MARGIN,
            min.as_secs_f64(),
            (MARGIN - 1.0) * 100.0,
            self.lengthened(),
            self.scale.len(),
            self.extra.as_secs_f64(),
            self.budget.as_secs_f64()
        );
        if missed > 0 {
            s.push_str(&format!("; {missed} runs cannot reach it (low_confidence, with the reason)"));
        }
        s
    }
}

/// Sizes `runs` on the source `m` (idle power `power_w`) for `target`: each run expected shorter
/// than [`MARGIN`] × the shortest length gets the multiplier that brings it there, the runs with
/// the least extra time first, as long as the extra time stays within `budget`; the others keep
/// their length and their reason. A source whose accuracy class alone exceeds the target
/// lengthens nothing and gives every run that reason.
pub fn plan(m: &SourceModel, power_w: f64, target: f64, budget: Duration, runs: &[PlannedRun]) -> SizePlan {
    let min = min_run_length(m, power_w, target);
    let mut p = SizePlan {
        target,
        budget,
        min_run: min.map(Duration::from_secs_f64),
        accuracy: m.accuracy,
        scale: vec![1.0; runs.len()],
        reason: vec![None; runs.len()],
        extra: Duration::ZERO,
    };
    let Some(min) = min else {
        let why = format!("the source's accuracy class ±{:.1} % alone exceeds the --energy-target {:.1} %", m.accuracy * 100.0, target * 100.0);
        p.reason = runs.iter().map(|r| r.expected.map(|_| why.clone())).collect();
        return p;
    };
    let needed = min * MARGIN;
    // (index, expected s, extra s) of the runs that need lengthening, cheapest first.
    let mut short: Vec<(usize, f64, f64)> = runs
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.expected.map(|e| (i, e.as_secs_f64())))
        .filter(|(_, e)| *e < needed)
        .map(|(i, e)| (i, e, needed - e))
        .collect();
    short.sort_by(|a, b| a.2.total_cmp(&b.2).then(a.0.cmp(&b.0)));
    let mut spent = 0.0;
    for (i, e, extra) in short {
        if e > 0.0 && spent + extra <= budget.as_secs_f64() {
            spent += extra;
            p.scale[i] = needed / e;
        } else {
            p.reason[i] = Some(format!(
                "not lengthened to reach the --energy-target {:.1} %: needs {needed:.3} s, expected {e:.3} s, over the --energy-budget {}",
                target * 100.0,
                humantime::format_duration(budget)
            ));
        }
    }
    p.extra = Duration::from_secs_f64(spent);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 100 ms sample-and-hold source read every 5 ms, without noise, resolution or jitter.
    fn held(accuracy: f64) -> SourceModel {
        SourceModel {
            reporting: Reporting::SampleHold,
            update: Nanos(100_000_000),
            read: Nanos(5_000_000),
            jitter: Nanos(0),
            resolution_j: Joules(0.0),
            resolution_w: Watts(0.0),
            noise: Watts(0.0),
            accuracy,
            align: Nanos(0),
            placement: Nanos(0),
            held: false,
        }
    }

    fn runs(s: &[f64]) -> Vec<PlannedRun> {
        s.iter().map(|&e| PlannedRun { expected: Some(Duration::from_secs_f64(e)) }).collect()
    }

    /// By hand: a held value spreads a run of D ≥ U at power P over its update: U/(2D) of the
    /// run's P·D, P·U/2 = 0.05·P, moves out; each edge keeps a read's worth of shift beyond the
    /// smear, P·((100 + 5)/2 − 100/2) ms = 0.0025·P, counted twice. With P = 3 W: uniforms 0.15,
    /// 0.0075, 0.0075 J; the two largest combine to 0.15 + 0.0075 − √(0.2·0.15·0.0075) = 0.1425,
    /// the third adds 0.0075²/3 in quadrature: u95 = √(0.1425² + 1.96²·0.0075²/3) = 0.14275251 J,
    /// ≤ 2 % of 3 W·D from D = 2.3792086 s; with the 10 % margin 2.6171294 s. Runs of 0.3, 1, 5
    /// and 2 s: multipliers 8.7237647, 2.6171294, 1 and 1.3085647, extra 2.3171294, 1.6171294, 0
    /// and 0.6171294 s; a 4 s budget takes the two cheapest (2.2342589 s), not the 0.3 s run.
    #[test]
    fn sample_and_hold_arithmetic_by_hand() {
        let m = held(0.0);
        let min = min_run_length(&m, 3.0, 0.02).unwrap();
        assert!((min - 2.379_208_6).abs() < 1e-6, "{min}");
        let p = plan(&m, 3.0, 0.02, Duration::from_secs(4), &runs(&[0.3, 1.0, 5.0, 2.0]));
        let want = [1.0, 2.617_129_4, 1.0, 1.308_564_7];
        for (got, want) in p.scale.iter().zip(want) {
            assert!((got - want).abs() < 1e-6, "{:?} vs {want:?}", p.scale);
        }
        assert!((p.extra.as_secs_f64() - 2.234_258_8).abs() < 1e-6, "{:?}", p.extra);
        assert_eq!(p.lengthened(), 2);
        assert_eq!(
            p.reason[0].as_deref(),
            Some("not lengthened to reach the --energy-target 2.0 %: needs 2.617 s, expected 0.300 s, over the --energy-budget 4s")
        );
        assert_eq!((p.reason[1].as_deref(), p.reason[2].as_deref(), p.reason[3].as_deref()), (None, None, None));
        // A budget of a minute lengthens all three: the 0.3 s run × 8.7237647.
        let p = plan(&m, 3.0, 0.02, Duration::from_secs(60), &runs(&[0.3, 1.0, 5.0, 2.0]));
        assert!((p.scale[0] - 8.723_764_7).abs() < 1e-5, "{:?}", p.scale);
        assert!((p.extra.as_secs_f64() - 4.551_388_2).abs() < 1e-5, "{:?}", p.extra);
    }

    /// A ±5 % class (a bound: its term is the whole 5 %) alone exceeds 2 %: nothing lengthened, every sized run
    /// given the reason, and the printed plan names the class.
    #[test]
    fn an_impossible_target_flags_every_run_and_is_named() {
        let mut r = runs(&[0.3, 10.0]);
        r.push(PlannedRun { expected: None });
        let p = plan(&held(0.05), 3.0, 0.02, DEFAULT_BUDGET, &r);
        assert_eq!(p.min_run, None);
        assert_eq!(p.scale, vec![1.0, 1.0, 1.0]);
        let why = "the source's accuracy class ±5.0 % alone exceeds the --energy-target 2.0 %";
        assert_eq!(p.reason, vec![Some(why.to_string()), Some(why.to_string()), None]);
        assert_eq!(
            p.describe("hwmon:psu"),
            "--energy-target 2.0 % (--energy-budget 10m): hwmon:psu: its accuracy class ±5.0 % alone exceeds the target: no run can reach it (every run is low_confidence); no run is lengthened"
        );
    }

    /// A counter updating every 1 ms with a 1.2 % class at 2 %: the class takes 1.14 % of it and the
    /// two edges (0.5 ms of the whole power each) the rest: the half-width at the shortest length
    /// is the target, and a run of 0.1 s already reaches it.
    #[test]
    fn a_fast_counter_needs_short_runs() {
        let m = SourceModel { reporting: Reporting::Counter, update: Nanos(1_000_000), accuracy: 0.012, ..held(0.0) };
        let min = min_run_length(&m, 5.0, 0.02).unwrap();
        assert!((relative_u95(&m, 5.0, min) - 0.02).abs() < 1e-9);
        assert!(min < 0.1, "{min}");
        let p = plan(&m, 5.0, 0.02, DEFAULT_BUDGET, &runs(&[0.1]));
        assert_eq!((p.scale, p.reason), (vec![1.0], vec![None]));
    }
}
