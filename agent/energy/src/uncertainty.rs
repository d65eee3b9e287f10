//! The uncertainty of every energy figure (issue 37, `docs/energy-method.md` §9): half-widths of
//! 95 % intervals (`u95`) on a run's energy over the interval the record names, on its energy above
//! idle, its background tail, and on the idle baseline, from what limits them: how the source
//! reports ([`Reporting`]) and how often its value changes, the read period and jitter, its
//! resolution, the idle noise, its accuracy class and, for traces, the alignment residual. Each
//! contribution is a uniform error of half-range `a` (an edge's timing, the gain within its class)
//! or a normal one (noise); [`expand`] gives the 95 % half-width of their sum (the two largest
//! uniforms exactly, the rest in quadrature, GUM). To add a contribution, add a field to
//! [`SourceModel`] and a term to [`SourceModel::edge_half_range`] or [`SourceModel::run`].

use crate::units::{Joules, Nanos, Watts};
use serde::{Deserialize, Serialize};

/// How a source reports power.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reporting {
    /// An energy counter (RAPL, hwmon `energy*_input`): exact joules up to its last update.
    Counter,
    /// Each reading the mean power over its own sample interval (a trace, a source read no
    /// faster than it updates).
    Instantaneous,
    /// A value updated every `update` and held in between (PMBus `READ_PIN`, a BMC's DCMI power):
    /// a change is seen up to one update late.
    SampleHold,
    /// A moving average over `update` (ACPI `power*_average` over its averaging interval): a
    /// step is smeared over the window and seen up to one window late.
    MovingAverage,
}

impl Reporting {
    pub fn as_str(self) -> &'static str {
        match self {
            Reporting::Counter => "counter",
            Reporting::Instantaneous => "instantaneous",
            Reporting::SampleHold => "sample_and_hold",
            Reporting::MovingAverage => "moving_average",
        }
    }
}

/// What limits a source's figures.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SourceModel {
    pub reporting: Reporting,
    /// Update period (a moving average: its window); 0 when unknown (then the read period).
    pub update: Nanos,
    /// Read (or sample) period.
    pub read: Nanos,
    /// Measured read jitter (standard deviation of the reads' spacing).
    pub jitter: Nanos,
    /// Energy step of a counter (J), 0 for other sources.
    pub resolution_j: Joules,
    /// Power step of a power reading (W), 0 for a counter.
    pub resolution_w: Watts,
    /// Idle noise of the readings (1.4826·MAD, W).
    pub noise: Watts,
    /// Accuracy class: bound of the relative gain error (0.01 = ±1 %).
    pub accuracy: f64,
    /// Residual of a trace's time alignment with the probe (0 for live sources).
    pub align: Nanos,
}

/// What [`SourceModel::run`] needs of a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunFigures {
    /// Length of the interval the record names.
    pub duration: Nanos,
    pub energy: Joules,
    pub above_idle: Joules,
    pub background: Joules,
    /// Length of the background tail.
    pub background_duration: Nanos,
    pub mean: Watts,
    pub baseline: Watts,
    /// Highest mean power over one update near the run (from its start to one update after its
    /// end): a slow source shows a short run only there, averaged over its update.
    pub peak: Watts,
    /// The run's end was split at the next run's first IO (power still high there).
    pub tail_cut: bool,
    /// The run's start (end) shares the sample holding it with what lies before (after) it in
    /// proportion: the previous run's tail was cut there, or the run was measured over its host
    /// window (`Nominal`).
    pub split_start: bool,
    pub split_end: bool,
    /// The update holding the start (end) and its neighbours, where the source shows them (a
    /// counter slower than its reads); `None`: the run's step stands for what they would show.
    pub start_updates: Option<Straddle>,
    pub end_updates: Option<Straddle>,
    /// The energy above the baseline a held or averaged source shows from one update (a moving
    /// average: its window) before the run to one after it: the run's own above-idle energy as
    /// the source spreads it, and what of its neighbours' falls there. 0 where not known.
    pub visible_above: Joules,
}

/// The update of a counter slower than its reads that holds a run's edge: the mean powers of the
/// update before it, of it, and of the one after, how much of it lies before and after the edge,
/// and whether the report puts no other run's IO in its part beyond the edge (the part outside
/// the run: before a start, after an end).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Straddle {
    pub before: Watts,
    pub holding: Watts,
    pub after: Watts,
    pub part_before: Nanos,
    pub part_after: Nanos,
    pub far_quiet: bool,
}

/// 95 % half-widths of a run's figures.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RunU95 {
    pub energy: Joules,
    pub above_idle: Joules,
    pub background: Joules,
}

/// A run's figures from [`SourceModel::bounded`]: its energy and energy above idle (J), and their
/// half-widths (`background` unused: 0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounded {
    pub energy: Joules,
    pub above_idle: Joules,
    pub u95: RunU95,
}

/// The idle baseline's uncertainty: its 95 % half-width, and the standard uncertainty of its
/// statistics alone (no gain error: the gain is common to a run and its baseline).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct IdleU {
    pub u95: Watts,
    pub statistical: Watts,
}

fn ns(n: Nanos) -> f64 {
    n.0 as f64 * 1e-9
}

impl SourceModel {
    /// The update period in s, at least the read period (a value cannot be seen changing faster
    /// than it is read; an unknown period counts as the read period's bound).
    fn update_s(&self) -> f64 {
        ns(self.update).max(ns(self.read))
    }

    /// Half-range (s) of the time error at one edge of a run, per watt of the power step there:
    /// a counter's last update lies anywhere in one period (lag-corrected: ±U/2); a held value,
    /// placed one update earlier, stands for its whole update (±U/2) and is seen within a read; a
    /// moving average smears a step over its window;
    /// plus half a read for a split inside a reading, the jitter, and a trace's residual.
    fn edge_half_range(&self) -> f64 {
        let (u, r) = (self.update_s(), ns(self.read));
        let source = match self.reporting {
            // A counter's reading holds everything up to its last update, whatever the read
            // period: only the update's phase is unknown.
            // Slower than its reads, its last update lies inside the read that moved it (placed
            // at its middle: ±R/2); faster, anywhere in the last update.
            Reporting::Counter if self.resolved() => r / 2.0,
            Reporting::Counter => (if self.update.0 > 0 { ns(self.update) } else { r }) / 2.0,
            Reporting::Instantaneous => r / 2.0,
            // Lag-corrected by one update (the agent's `held_lag_ns`): where inside its update the
            // value changed is unknown to half an update, and the change is seen within a read.
            Reporting::SampleHold => (ns(self.update).max(0.0) + r.min(u)) / 2.0,
            // Lag-corrected by half the window: a step is smeared over the window.
            Reporting::MovingAverage => 0.5 * u + r / 2.0,
        };
        source + ns(self.jitter) + ns(self.align)
    }

    /// A counter that updates more slowly than it is read (by a quarter: then fewer than 4 in 5
    /// readings move it): each update is seen within one read, and the agent's samples span its
    /// updates (`live::counter_samples`).
    fn resolved(&self) -> bool {
        self.reporting == Reporting::Counter && self.update.0 as f64 > 1.25 * self.read.0 as f64
    }

    /// The part of [`SourceModel::edge_half_range`] that the smearing of a held value or moving
    /// average accounts for ([`SourceModel::smear`] models it instead of an edge shift).
    fn smear_s(&self) -> f64 {
        match self.reporting {
            Reporting::SampleHold => ns(self.update) / 2.0,
            Reporting::MovingAverage => 0.5 * self.update_s(),
            _ => 0.0,
        }
    }

    /// A held value or moving average spreads a run's above-idle energy X (step a = X/D) over its
    /// update U (a window W): the part it moves out of the run's interval, and the step.
    /// Sample-and-hold: each update holds the mean of its own span, so a run edge inside an update
    /// at fraction f of it moves a·U·f(1 − f) out (at most U/4 per edge; two independent phases:
    /// 95 % of the sums below 0.48·a·U, about U/2); a run shorter than U, inside one or two
    /// updates, keeps D²/U to D²/(2U) of its length: X·(1 − D/(2U)) at most. A moving average
    /// (box of W centred by the lag correction) keeps D − W/4 of a run longer than W/2 (a·W/4 out)
    /// and D²/W of a shorter one: X·(1 − D/W). X is what the source shows around the run above
    /// the baseline (`visible_above`; its neighbours' spread energy makes it larger, never
    /// smaller), at least the run's own above-idle energy and the excess of its highest update
    /// (the peak's), plus twice the noise over its length.
    fn smear(&self, r: &RunFigures) -> (f64, f64) {
        let d = ns(r.duration).max(ns(self.read)).max(1e-9);
        let u = self.update_s();
        let update_excess = (r.peak.0 - r.baseline.0) * u;
        let x = r.visible_above.0.max(r.above_idle.0).max(update_excess).max(0.0) + 2.0 * self.noise.0 * d;
        let kept_out = match self.reporting {
            Reporting::SampleHold | Reporting::Counter if d < u => 1.0 - d / (2.0 * u),
            Reporting::SampleHold | Reporting::Counter => u / (2.0 * d),
            _ if d <= u / 2.0 => 1.0 - d / u,
            _ => u / (4.0 * d),
        };
        (x * kept_out.clamp(0.0, 1.0), x / d)
    }

    /// Standard uncertainty (J) of the noise aliased into `d` s of readings: none for a counter
    /// or averaged readings (they integrate everything), else σ·√(d·T) for independent values
    /// of length T.
    fn noise_j(&self, d: f64) -> f64 {
        match self.reporting {
            Reporting::Counter | Reporting::Instantaneous | Reporting::MovingAverage => 0.0,
            Reporting::SampleHold => self.noise.0 * (d * self.update_s()).sqrt(),
        }
    }

    /// Standard uncertainty (J) of the resolution over `d` s: a counter's step at each end, a
    /// power step's rounding averaged over the run's independent values.
    fn resolution_j(&self, d: f64) -> f64 {
        let per_value = self.resolution_w.0 / 12f64.sqrt();
        let values = (d / self.update_s().max(1e-9)).max(1.0);
        (2.0f64).sqrt() * self.resolution_j.0 / 12f64.sqrt() + per_value * d / values.sqrt()
    }

    /// The 95 % half-widths of a run's energy, energy above idle and background tail. `idle`: the
    /// probe's baseline uncertainty ([`SourceModel::idle`]).
    pub fn run(&self, r: &RunFigures, idle: &IdleU) -> RunU95 {
        let d = ns(r.duration);
        let (h, u) = (self.edge_half_range(), self.update_s());
        // The power at each edge that the time error multiplies: a counter's whole power (its
        // cumulative energy is off by P·δ), another source's step there (a shift of a flat level
        // changes nothing).
        let top = r.mean.0.max(r.peak.0);
        let (start, end) = match self.reporting {
            // The start edge has the idle power before it and the run's after it: a shift δ of
            // its update phase (uniform in ±h) moves b·|δ| one way and P·δ the other, the variance
            // of a uniform of half-range h·√((b² + P²)/2). P is the run's highest power (its mean
            // understates a run whose activity fills only part of it). The end edge has the
            // baseline on both sides, or the run's power where the next run cut its tail.
            Reporting::Counter => {
                let p = top.max(r.baseline.0);
                let start = ((r.baseline.0.powi(2) + p * p) / 2.0).sqrt();
                (start * h, if r.tail_cut { p * h } else { r.baseline.0 * h })
            }
            // A run shorter than an update shows its step only averaged over that update: the
            // step is its visible energy over its length, and no edge moves more than the run.
            Reporting::Instantaneous => {
                let mut step = (top - r.baseline.0).abs() + 2.0 * self.noise.0;
                if d < u {
                    step = step.max((r.peak.0 - r.baseline.0).abs() * u / d.max(ns(self.read)).max(1e-9));
                }
                let edge = step * h.min(d.max(ns(self.read)));
                (edge, edge)
            }
            // The source spreads the run's step over its update (or window): what it moves out of
            // the run's interval is one term, the read and jitter at each edge a small one.
            Reporting::SampleHold | Reporting::MovingAverage => {
                let (loss, step) = self.smear(r);
                (loss, step * (h - self.smear_s()).max(0.0))
            }
        };
        let edges = match self.reporting {
            _ if self.resolved() => self.resolved_edges(r, h),
            Reporting::SampleHold | Reporting::MovingAverage => [start, end, end, 0.0],
            _ => [start, end, 0.0, 0.0],
        };
        let stat2 = self.noise_j(d).powi(2) + self.resolution_j(d).powi(2);
        let energy = expand(&[edges[0], edges[1], edges[2], edges[3], self.gain(r.energy.0)], stat2);
        let above = expand(&[edges[0], edges[1], edges[2], edges[3], self.gain(r.above_idle.0)], stat2 + (d * idle.statistical.0).powi(2));
        let bd = ns(r.background_duration);
        // The tail's edge: the run's end edge, or what a held or averaged source moves out.
        let tail_edge = if edges[2] > 0.0 && !self.resolved() { edges[0] } else { edges[1] };
        let background = if bd > 0.0 {
            expand(&[tail_edge, self.gain(r.background.0)], self.noise_j(bd).powi(2) + (bd * idle.statistical.0).powi(2))
        } else {
            expand(&[self.gain(r.background.0)], 0.0)
        };
        RunU95 { energy: Joules(energy), above_idle: Joules(above), background: Joules(background) }
    }

    /// The edge terms of a counter slower than its reads ([`SourceModel::resolved`]): each
    /// sample holds one update's exact energy, its instant known to `h` (half a read), and how
    /// much of the update holding an edge lies either side of it is known. An edge whose far part
    /// is valued at the baseline is off by what the power there differs from it over that part:
    /// that power lies between the update's own mean and its outer neighbour's. Where the report
    /// puts no other run's IO in that part (`far_quiet`), the outer neighbour's level goes on into
    /// it, and the update's own mean reaches at most `h` into it, as far as a boundary may be
    /// misplaced (a late read moves energy across one): the own mean over the whole part covered
    /// 99 % of such edges, whose errors were nearly all the gain's (10 ms updates: 2.9–3.2× the
    /// median error). An edge shared in
    /// proportion with what lies beyond it (a cut tail, a split start, a run measured over its
    /// host window) is off by the step between the two sides over (before · after)/U of it: the
    /// step the neighbouring updates show, plus what no update shows inside one (the powers there
    /// lie between the baseline and the run's peak: half that range; the whole range covered
    /// 99.2–99.6 %, padded); a burst inside the update (its mean outside its neighbours') by that
    /// excess over the run's part. A run inside one update keeps its share in proportion,
    /// what a held mean keeps ([`SourceModel::smear`]). The updates' instants are placed with one
    /// error δ through a probe (the read and update periods keep their phase): it moves both
    /// edges' far parts together, each valued at its own level, so a run whose two edges are
    /// valued at the baseline loses at one what it gains at the other (the whole top power over
    /// `h` before: 99.2 % covered, 4.2× the median error; `docs/energy-method.md` §9).
    fn resolved_edges(&self, r: &RunFigures, h: f64) -> [f64; 4] {
        let (d, u, b) = (ns(r.duration), self.update_s(), r.baseline.0);
        let top = r.mean.0.max(r.peak.0).max(b);
        let shared = |w: Option<Straddle>, run_after: bool| {
            w.map_or((top - b) * u / 4.0, |w| {
                let (p, c, n, tb, ta) = (w.before.0, w.holding.0, w.after.0, ns(w.part_before), ns(w.part_after));
                let burst = (c - p.max(n)).max(p.min(n) - c).max(0.0);
                ((n - p).abs() + (top - b) / 2.0) * tb * ta / (tb + ta).max(1e-9) + burst * if run_after { ta } else { tb }
            })
        };
        let valued = |w: Option<Straddle>, at_start: bool| {
            w.map_or(0.0, |w| {
                let (outer, part) = if at_start { (w.before.0, ns(w.part_before)) } else { (w.after.0, ns(w.part_after)) };
                let own = (w.holding.0 - b).abs() * if w.far_quiet { part.min(h) } else { part };
                ((outer - b).abs() * part).max(own)
            })
        };
        let start = if r.split_start { shared(r.start_updates, true) } else { valued(r.start_updates, true) };
        let end = if r.tail_cut || r.split_end { shared(r.end_updates, false) } else { valued(r.end_updates, false) };
        let inside = if d < u { self.smear(r).0 } else { 0.0 };
        // A placement error δ moves each edge's far part by δ at the level that part is valued
        // at (the baseline, or the shared update's own mean power): δ·(start level − end level).
        let level = |shared: bool, w: Option<Straddle>| if shared { w.map_or(top, |w| w.holding.0) } else { b };
        let phase = (level(r.split_start, r.start_updates) - level(r.tail_cut || r.split_end, r.end_updates)).abs() * h;
        [start, end, inside, phase]
    }

    /// A run the source does not resolve in time (a held value or moving average whose update or
    /// window is longer than the run): it shows `visible` J above the baseline over the `region`
    /// s around the run (the run, its own background past its bounds, neighbours' spread energy),
    /// and cannot say which part of it fell inside the run's `d` s. The run's energy above idle
    /// lies in [0, visible] however it splits, so the estimate is the middle of that range and the
    /// half-width half of it, added to (not combined with) the baseline's, noise's and gain's
    /// share: the truth often lies at an end of the range (a run without background), where only
    /// those terms cover it. `docs/energy-method.md` §9.3.
    pub fn bounded(&self, d: f64, baseline: Watts, visible: Joules, region: f64, idle: &IdleU) -> Bounded {
        let x = visible.0.max(0.0);
        let above = x / 2.0;
        let energy = baseline.0 * d + above;
        // The visible energy is a sum over the region less the baseline over it.
        let stat2 = self.noise_j(region).powi(2) + (region * idle.statistical.0).powi(2);
        let u_energy = above + expand(&[self.gain(energy)], stat2);
        let u_above = above + expand(&[self.gain(above)], stat2 + (d * idle.statistical.0).powi(2));
        Bounded {
            energy: Joules(energy),
            above_idle: Joules(above),
            u95: RunU95 { energy: Joules(u_energy), above_idle: Joules(u_above), background: Joules(0.0) },
        }
    }

    /// The idle baseline's uncertainty over a window of length `window`: the noise over its
    /// independent values (a median's efficiency, 1.25), a counter's two window edges, the
    /// resolution, and the gain for the 95 % half-width.
    pub fn idle(&self, baseline: Watts, window: Nanos) -> IdleU {
        let w = ns(window).max(1e-9);
        let independent = (w / self.update_s().max(1e-9)).max(1.0);
        let noise = match self.reporting {
            Reporting::Counter => 0.0,
            _ => 1.25 * self.noise.0 / independent.sqrt(),
        };
        let edges = match self.reporting {
            Reporting::Counter => baseline.0 * self.update_s() / 2.0 * (2.0f64 / 3.0).sqrt() / w,
            _ => 0.0,
        };
        let resolution = self.resolution_j(w) / w;
        let statistical = (noise.powi(2) + edges.powi(2) + resolution.powi(2)).sqrt();
        IdleU { u95: Watts(expand(&[self.gain(baseline.0)], statistical.powi(2))), statistical: Watts(statistical) }
    }

    /// The half-range of the gain error on `value`, as [`expand`] takes it: the accuracy class is
    /// a bound (the datasheet's maximum), and every run of a device shares its one gain, so a
    /// probe's runs are covered together or not at all: alone, the term's 95 % half-width is the
    /// whole class (a uniform's is 0.95 of its half-range).
    pub fn gain(&self, value: f64) -> f64 {
        value * self.accuracy / 0.95
    }
}

/// 95 % half-width of a sum of independent uniform errors (half-ranges `a`) and a normal one
/// (variance `normal`): the two largest uniforms combined exactly (their sum is a trapezoid:
/// q = a1 + a2 − √(0.2·a1·a2) when a2 ≥ 0.05·a1, else at most 0.95·a1 + a2), the others and the
/// normal part in quadrature as standard uncertainties, expanded with 1.96.
pub fn expand(a: &[f64], normal: f64) -> f64 {
    let mut v: Vec<f64> = a.iter().map(|x| x.abs()).filter(|x| *x > 0.0 && x.is_finite()).collect();
    v.sort_by(|x, y| y.total_cmp(x));
    let (a1, a2) = (v.first().copied().unwrap_or(0.0), v.get(1).copied().unwrap_or(0.0));
    let q12 = if a2 >= 0.05 * a1 { a1 + a2 - (0.2 * a1 * a2).sqrt() } else { 0.95 * a1 + a2 };
    let rest: f64 = v.iter().skip(2).map(|x| x * x / 3.0).sum::<f64>() + normal.max(0.0);
    K95 * ((q12 / K95).powi(2) + rest).sqrt()
}

/// The normal distribution's two-sided 95 % coverage factor.
pub const K95: f64 = 1.96;

#[cfg(test)]
mod tests {
    use super::*;

    fn model(reporting: Reporting, update_ms: u64) -> SourceModel {
        SourceModel {
            reporting,
            update: Nanos(update_ms * 1_000_000),
            read: Nanos(5_000_000),
            jitter: Nanos(0),
            resolution_j: Joules(0.0),
            resolution_w: Watts(0.0),
            noise: Watts(0.0),
            accuracy: 0.0,
            align: Nanos(0),
        }
    }

    fn run(d_ms: u64, mean: f64, baseline: f64) -> RunFigures {
        let d = d_ms as f64 / 1e3;
        RunFigures {
            duration: Nanos(d_ms * 1_000_000),
            energy: Joules(mean * d),
            above_idle: Joules((mean - baseline) * d),
            background: Joules(0.0),
            background_duration: Nanos(0),
            mean: Watts(mean),
            baseline: Watts(baseline),
            peak: Watts(mean),
            tail_cut: false,
            split_start: false,
            split_end: false,
            start_updates: None,
            end_updates: None,
            visible_above: Joules((mean - baseline) * d),
        }
    }

    /// The 95 % quantiles by hand: one uniform ±a: 0.95·a; two equal (a triangle on ±2a): the
    /// tails beyond q hold (2a − q)²/(4a²) = 5 %, q = (2 − √0.2)·a; a normal: 1.96·σ.
    #[test]
    fn expand_by_hand() {
        assert!((expand(&[1.0], 0.0) - 0.95).abs() < 1e-12);
        assert!((expand(&[1.0, 1.0], 0.0) - (2.0 - 0.2f64.sqrt())).abs() < 1e-12);
        assert!((expand(&[], 4.0) - 3.92).abs() < 1e-12);
    }

    /// By hand: a 100 ms sample-and-hold source read every 10 ms, a 3 W step over a 2 W idle.
    /// A 1 s run: X = 3 J, U/(2D) = 0.05 of it moved out: 0.15 J; each edge's read, half a read
    /// (5 ms) · 3 W = 15 mJ: q = 0.165 − √(0.2·0.15·0.015) J with the second 15 mJ in quadrature.
    /// A 20 ms run (its update shows 2 + 3·0.02/0.1 = 2.6 W, it and its surroundings 60 mJ above
    /// idle): 1 − D/(2U) = 0.9 of 60 mJ out, 54 mJ; the same 15 mJ edges.
    #[test]
    fn sample_and_hold_spreading_by_hand() {
        let idle = IdleU { u95: Watts(0.0), statistical: Watts(0.0) };
        let mut m = model(Reporting::SampleHold, 100);
        m.read = Nanos(10_000_000);
        let by_hand = |loss: f64, edge: f64| {
            let q = loss + edge - (0.2 * loss * edge).sqrt();
            1.96 * ((q / 1.96).powi(2) + edge * edge / 3.0).sqrt()
        };
        let u = m.run(&run(1000, 5.0, 2.0), &idle);
        let want = by_hand(0.15, 0.015);
        assert!((u.energy.0 - want).abs() < 1e-12, "{} vs {want}", u.energy.0);
        let short = RunFigures { peak: Watts(2.6), visible_above: Joules(0.06), ..run(20, 5.0, 2.0) };
        let u = m.run(&short, &idle);
        let want = by_hand(0.054, 0.015);
        assert!((u.energy.0 - want).abs() < 1e-12, "{} vs {want}", u.energy.0);
    }

    /// By hand: a 20 ms run over a 2 W baseline on a source held for 100 ms shows 60 mJ above
    /// the baseline over 225 ms around it. Its energy is 2 W · 20 ms + 30 mJ = 70 mJ, its energy
    /// above idle 30 mJ, each ± 30 mJ plus the rest: with a 5 % class, 70 mJ · 0.05 / 0.95 =
    /// 3.684 mJ of gain (alone: 0.95 of it) and the baseline's 10 mW over 225 ms (2.25 mJ, in
    /// quadrature): 30 + 1.96 · √((3.5/1.96)² + 2.25²) = 35.630 mJ. A negative sum is none above.
    #[test]
    fn a_run_shorter_than_the_update_takes_the_middle_of_what_is_shown() {
        let idle = IdleU { u95: Watts(0.0), statistical: Watts(0.01) };
        let m = SourceModel { accuracy: 0.05, ..model(Reporting::SampleHold, 100) };
        let b = m.bounded(0.02, Watts(2.0), Joules(0.06), 0.225, &idle);
        assert!((b.energy.0 - 0.07).abs() < 1e-12, "{}", b.energy.0);
        assert!((b.above_idle.0 - 0.03).abs() < 1e-12, "{}", b.above_idle.0);
        let gain: f64 = 0.95 * 0.07 * 0.05 / 0.95;
        let want = 0.03 + 1.96 * ((gain / 1.96).powi(2) + 0.00225f64.powi(2)).sqrt();
        assert!((b.u95.energy.0 - want).abs() < 1e-12, "{} vs {want}", b.u95.energy.0);
        assert!((want - 0.035630).abs() < 1e-6, "{want}");
        let none = m.bounded(0.02, Watts(2.0), Joules(-0.001), 0.225, &idle);
        assert_eq!((none.energy.0, none.above_idle.0), (0.04, 0.0));
    }

    /// By hand: a counter updating every 100 ms read every 5 ms (each update placed within half
    /// a read, h = 2.5 ms), a 1 s run at 5 W over 2 W. Edges valued at the baseline with idle
    /// updates beyond them, the updates holding them 20 ms outside the run (4.4 W: 20 ms at 2 W,
    /// 80 at 5): the outer idle updates' level over those 20 ms (nothing) or the holding update's
    /// 2.4 W over the baseline over h of them (6 mJ, uniform, at each edge), and the common
    /// placement moves both far parts at the baseline: nothing. q = 12 − √(0.2 · 6 · 6) mJ. A
    /// start shared in proportion, half of its update on each side, between updates at 2 and 5 W
    /// (their mean 3.5 W, no burst): (3 W seen + 1.5 W unseen, half the run's range) · 50 · 50 /
    /// 100 ms = 112.5 mJ and the valued end's 6 mJ: q = 118.5 − √(0.2 · 112.5 · 6) mJ, with the
    /// placement (3.5 W there against 2 W at the valued end, over h: 3.75 mJ) in quadrature. A
    /// 20 ms run inside one update that shows
    /// 2.6 W keeps 1 − D/(2U) = 0.9 of its 60 mJ as a held mean does (54 mJ): 0.95 · 54 mJ. With
    /// another run's IO before the steady run's start, its 20 ms there count at the holding
    /// update's 2.4 W (48 mJ): q = 54 − √(0.2 · 48 · 6) mJ.
    #[test]
    fn a_slow_counters_edges_by_hand() {
        let idle = IdleU { u95: Watts(0.0), statistical: Watts(0.0) };
        let m = model(Reporting::Counter, 100);
        let ms = |x: u64| Nanos(x * 1_000_000);
        let starts = Straddle { before: Watts(2.0), holding: Watts(4.4), after: Watts(5.0), part_before: ms(20), part_after: ms(80), far_quiet: true };
        let ends = Straddle { before: Watts(5.0), holding: Watts(4.4), after: Watts(2.0), part_before: ms(80), part_after: ms(20), far_quiet: true };
        let steady = RunFigures { start_updates: Some(starts), end_updates: Some(ends), ..run(1000, 5.0, 2.0) };
        let u = m.run(&steady, &idle);
        let q = 0.012 - (0.2f64 * 0.006 * 0.006).sqrt();
        assert!((u.energy.0 - q).abs() < 1e-12, "{} vs {q}", u.energy.0);
        let half = Straddle { before: Watts(2.0), holding: Watts(3.5), after: Watts(5.0), part_before: ms(50), part_after: ms(50), far_quiet: true };
        let u = m.run(&RunFigures { split_start: true, start_updates: Some(half), end_updates: Some(ends), ..run(1000, 5.0, 2.0) }, &idle);
        // The two largest, 112.5 and the valued end's 6 mJ, exactly; the placement in quadrature.
        let q12 = 0.1185 - (0.2f64 * 0.1125 * 0.006).sqrt();
        let q = 1.96 * ((q12 / 1.96).powi(2) + 0.00375f64.powi(2) / 3.0).sqrt();
        assert!((u.energy.0 - q).abs() < 1e-12, "{} vs {q}", u.energy.0);
        let u = m.run(&RunFigures { peak: Watts(2.6), ..run(20, 5.0, 2.0) }, &idle);
        assert!((u.energy.0 - 0.95 * 0.054).abs() < 1e-12, "{}", u.energy.0);
        // Another run's IO in the start's far part: the holding update's level over all 20 ms.
        let busy_start = Straddle { far_quiet: false, ..starts };
        let u = m.run(&RunFigures { start_updates: Some(busy_start), ..steady }, &idle);
        let q = 0.054 - (0.2f64 * 0.048 * 0.006).sqrt();
        assert!((u.energy.0 - q).abs() < 1e-12, "{} vs {q}", u.energy.0);
    }

    /// By hand: a moving average over 1 s read every 10 ms, 3 W over 2 W idle. A 2 s run (longer
    /// than W/2): W/4 · 3 W = 0.75 J out, edges half a read · 3 W = 15 mJ. A 100 ms run, 0.3 J
    /// above idle: 1 − D/W = 0.9 of it, 0.27 J.
    #[test]
    fn moving_average_spreading_by_hand() {
        let idle = IdleU { u95: Watts(0.0), statistical: Watts(0.0) };
        let mut m = model(Reporting::MovingAverage, 1000);
        m.read = Nanos(10_000_000);
        // Two uniforms combined exactly (a trapezoid, or 0.95·a1 + a2 when a2 < 0.05·a1), the
        // third in quadrature.
        let by_hand = |loss: f64, edge: f64| {
            let q = if edge >= 0.05 * loss { loss + edge - (0.2 * loss * edge).sqrt() } else { 0.95 * loss + edge };
            1.96 * ((q / 1.96).powi(2) + edge * edge / 3.0).sqrt()
        };
        let u = m.run(&run(2000, 5.0, 2.0), &idle);
        let want = by_hand(0.75, 0.015);
        assert!((u.energy.0 - want).abs() < 1e-12, "{} vs {want}", u.energy.0);
        let u = m.run(&RunFigures { peak: Watts(2.3), ..run(100, 5.0, 2.0) }, &idle);
        let want = by_hand(0.27, 0.015);
        assert!((u.energy.0 - want).abs() < 1e-12, "{} vs {want}", u.energy.0);
    }

    /// By hand: a counter updating every 1 ms read every 5 ms: half-range 0.5 ms at each edge
    /// (the read period does not matter to a counter). The start has 2 W before it and 5 W after:
    /// √((2² + 5²)/2) W = √14.5 W, 0.5·√14.5 mJ; the end 2 W on both sides: 1 mJ; q = a1 + a2 −
    /// √(0.2·a1·a2). A 0.4 % class on 5 J is a bound: half-range 20/0.95 mJ, with the start edge
    /// exactly, the 1 mJ end edge in quadrature.
    #[test]
    fn counter_edges_and_gain_by_hand() {
        let idle = IdleU { u95: Watts(0.0), statistical: Watts(0.0) };
        let mut m = model(Reporting::Counter, 1);
        let u = m.run(&run(1000, 5.0, 2.0), &idle);
        let start = 0.5e-3 * 14.5f64.sqrt();
        assert!((u.energy.0 - (start + 1e-3 - (0.2f64 * start * 1e-3).sqrt())).abs() < 1e-12, "{u:?}");
        m.accuracy = 0.004;
        let u = m.run(&run(1000, 5.0, 2.0), &idle);
        let gain = 0.02 / 0.95;
        let q = gain + start - (0.2f64 * gain * start).sqrt();
        let want = 1.96 * ((q / 1.96).powi(2) + 1e-6 / 3.0).sqrt();
        assert!((u.energy.0 - want).abs() < 1e-12, "{} vs {want}", u.energy.0);
    }
}
