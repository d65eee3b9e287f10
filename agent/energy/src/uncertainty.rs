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
    /// Half-range of a uniform with the spread of a counter's update placements (the root mean
    /// square of their half-ranges, from the agent's vernier over neighbouring reads; a counter
    /// slower than its reads only), 0 when not measured: then half a read.
    #[serde(default)]
    pub placement: Nanos,
    /// A held power value counted by its updates (a counter here, each sample one update's
    /// reading): unlike a true counter's, every sample carries the reading's own noise.
    #[serde(default)]
    pub held: bool,
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
    /// Half-ranges within which the holding update's start and end were placed (0: not known,
    /// the model's edge half-range).
    pub placed_start: Nanos,
    pub placed_end: Nanos,
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
            // Slower than its reads, its last update lies inside the read that moved it (±R/2),
            // or where its neighbours' reads put it (`placement`); faster, anywhere in the last
            // update.
            Reporting::Counter if self.resolved() => {
                if self.placement.0 > 0 {
                    ns(self.placement).min(r / 2.0)
                } else {
                    r / 2.0
                }
            }
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
        self.reporting == Reporting::Counter && (self.update.0 as f64 > 1.25 * self.read.0 as f64 || self.placement.0 > 0)
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

    /// The middle of what a moving average moves out of a run longer than half its window: its
    /// box, centred by the lag correction, keeps D − W/4 of the run's step (a·W/4 out, half at
    /// each edge, whatever the edges' phase), so the run's measured energy lies low by up to
    /// that much; half of it is added back and half stays in the smear term, both from the run's
    /// own measured energy above idle (its neighbours' spread energy moves in as well, which the
    /// term's X covers). 0 for other sources and shorter runs: a held value's loss depends on
    /// where its updates fall, and the property test's held values are counted by their updates
    /// or read once per update, so a shift there would be unmeasured.
    pub fn smear_shift(&self, r: &RunFigures) -> Joules {
        let (d, w) = (ns(r.duration), self.update_s());
        if self.reporting != Reporting::MovingAverage || d <= w / 2.0 {
            return Joules(0.0);
        }
        Joules(r.above_idle.0.max(0.0) * (w / (4.0 * d)).min(1.0) / 2.0)
    }

    /// Standard uncertainty (J) of the noise aliased into `d` s of readings: none for a counter
    /// or averaged readings (they integrate everything), else σ·√(d·T) for independent values
    /// of length T (a held value counted by its updates too).
    fn noise_j(&self, d: f64) -> f64 {
        match self.reporting {
            Reporting::Counter if self.held => self.noise.0 * (d * self.update_s()).sqrt(),
            Reporting::Counter | Reporting::Instantaneous | Reporting::MovingAverage => 0.0,
            Reporting::SampleHold => self.noise.0 * (d * self.update_s()).sqrt(),
        }
    }

    /// Standard uncertainty (J) of the resolution over `d` s: a counter's step at each end, a
    /// power step's rounding averaged over the run's independent values (where the noise dithers
    /// it; else [`SourceModel::rounding`]).
    fn resolution_j(&self, d: f64) -> f64 {
        let per_value = if self.dithered() { self.resolution_w.0 / 12f64.sqrt() } else { 0.0 };
        let values = (d / self.update_s().max(1e-9)).max(1.0);
        (2.0f64).sqrt() * self.resolution_j.0 / 12f64.sqrt() + per_value * d / values.sqrt()
    }

    /// Whether a power reading's rounding is independent from one value to the next: its idle
    /// readings vary by at least half a step (a BMC's whole watts on a busy platform), so the
    /// noise dithers the rounding.
    fn dithered(&self) -> bool {
        self.noise.0 >= self.resolution_w.0 / 2.0
    }

    /// Half-range (J) of the rounding over `d` s where the noise does not dither it: a steady
    /// level reads the same step every time, off by up to half a step all along (whole-watt DCMI
    /// readings of a quiet rail, rounded independently in the model, covered 82–91 % of the
    /// property test's runs). 0 where it is dithered ([`SourceModel::resolution_j`]).
    fn rounding(&self, d: f64) -> f64 {
        if self.dithered() {
            0.0
        } else {
            self.resolution_w.0 / 2.0 * d
        }
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
                (loss - self.smear_shift(r).0, step * (h - self.smear_s()).max(0.0))
            }
        };
        let edges = match self.reporting {
            _ if self.resolved() => self.resolved_edges(r, h),
            Reporting::SampleHold | Reporting::MovingAverage => [start, end, end, 0.0],
            Reporting::Counter => [start, end, self.far_end(r), 0.0],
            _ => [start, end, 0.0, 0.0],
        };
        let stat2 = self.noise_j(d).powi(2) + self.resolution_j(d).powi(2);
        // A part of an update valued at the baseline carries the baseline's own error.
        let at_baseline = self.valued_far_s(r) * idle.statistical.0;
        // The updates inside the run round alike; each one holding an edge by its own level.
        let (inner, edge) = (self.rounding(d), self.rounding(u));
        let energy = expand(&[edges[0], edges[1], edges[2], edges[3], self.gain(r.energy.0), inner, edge, edge], stat2 + at_baseline.powi(2));
        let above = expand(&[edges[0], edges[1], edges[2], edges[3], self.gain(r.above_idle.0), inner, edge, edge], stat2 + (d * idle.statistical.0).powi(2));
        let bd = ns(r.background_duration);
        // The tail's edge: the run's end edge, or what a held or averaged source moves out.
        let tail_edge = if edges[2] > 0.0 && !self.resolved() { edges[0] } else { edges[1] };
        let background = if bd > 0.0 {
            expand(&[tail_edge, self.gain(r.background.0), self.rounding(bd)], self.noise_j(bd).powi(2) + (bd * idle.statistical.0).powi(2))
        } else {
            expand(&[self.gain(r.background.0)], 0.0)
        };
        RunU95 { energy: Joules(energy), above_idle: Joules(above), background: Joules(background) }
    }

    /// A counter read more slowly than it updates (not [`SourceModel::resolved`]) whose run ends
    /// inside a reading: the part of that reading after the end is valued at the baseline and the
    /// run takes the rest, but where the run's tail goes on past its end the power there is the
    /// tail's, which the next reading shows (its excess over the baseline, over that part). A
    /// refined end lies inside the tail whenever the tail is below the run's level: on seeds
    /// 600000+ those runs of the 1 ms counter were 1.1 mJ high at the median and 90 % covered.
    fn far_end(&self, r: &RunFigures) -> f64 {
        if r.tail_cut || r.split_end {
            return 0.0;
        }
        r.end_updates.map_or(0.0, |w| (w.after.0 - r.baseline.0).max(0.0) * ns(w.part_after))
    }

    /// How long the parts of the updates holding a resolved counter's edges that lie outside the
    /// run and are valued at the baseline are, in s (0 for other sources).
    fn valued_far_s(&self, r: &RunFigures) -> f64 {
        if !self.resolved() {
            return 0.0;
        }
        let start = r.start_updates.filter(|_| !r.split_start).map_or(0.0, |w| ns(w.part_before));
        let end = r.end_updates.filter(|_| !(r.tail_cut || r.split_end)).map_or(0.0, |w| ns(w.part_after));
        start + end
    }

    /// The edge terms of a counter slower than its reads ([`SourceModel::resolved`]): each
    /// sample holds one update's exact energy, its instant known to `h` (half a read, or what the
    /// neighbouring reads leave: [`SourceModel::placement`]), and how
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
    /// what a held mean keeps ([`SourceModel::smear`]). Each edge's placement error moves its far
    /// part at the level it is valued at, within the half-range its boundary was placed to
    /// (`Straddle::placed_start`, `placed_end`; else `h`); the two edges' errors are independent,
    /// as a sensor's clock drifts against the reads (`docs/energy-method.md` §9). A run that
    /// ends with its update (`UpdateEnd`: the straddle has nothing after the edge) has no far part
    /// there and shares nothing inside the update; the placement moves the power at the update's
    /// end, which the next update's mean stands for.
    fn resolved_edges(&self, r: &RunFigures, h: f64) -> [f64; 4] {
        let (d, u, b) = (ns(r.duration), self.update_s(), r.baseline.0);
        let top = r.mean.0.max(r.peak.0).max(b);
        // `seen`: the part of the neighbours' step this edge counts (its own by default).
        let shared = |w: Option<Straddle>, run_after: bool, seen: Option<f64>| {
            w.map_or((top - b) * u / 4.0, |w| {
                let (p, c, n, tb, ta) = (w.before.0, w.holding.0, w.after.0, ns(w.part_before), ns(w.part_after));
                let burst = (c - p.max(n)).max(p.min(n) - c).max(0.0);
                seen.unwrap_or((n - p).abs() * split_weight(w)) + (top - b) / 2.0 * split_weight(w) + burst * if run_after { ta } else { tb }
            })
        };
        // Each edge's far part ends at one placed boundary of its update: known to that
        // boundary's own half-range where the placement says (from the reads' own instants, so
        // their jitter is in it; wider than half a read where the sampler stalled and no
        // neighbour says which update a long read interval ends), else to the model's `h`.
        let edge_h = |w: Option<Straddle>, at_start: bool| {
            let placed = w.map_or(0, |w| if at_start { w.placed_start.0 } else { w.placed_end.0 });
            if placed > 0 {
                ns(Nanos(placed))
            } else {
                h
            }
        };
        let valued = |w: Option<Straddle>, at_start: bool| {
            w.map_or(0.0, |w| {
                let (outer, part) = if at_start { (w.before.0, ns(w.part_before)) } else { (w.after.0, ns(w.part_after)) };
                let own = (w.holding.0 - b).abs() * if w.far_quiet { part.min(edge_h(Some(w), at_start)) } else { part };
                ((outer - b).abs() * part).max(own)
            })
        };
        let shared_end = r.tail_cut || r.split_end;
        // Shared in proportion at both ends, each split errs by the step its neighbours show
        // times tb·ta/U, the start's one way and the end's the other: what cancels between them
        // counts once, half at each edge (as one edge's term, `expand` would take it for a single
        // uniform, the wider; docs/energy-method.md §9, stop 57).
        let centre = |w: Straddle| (w.before.0 - w.after.0) * split_weight(w);
        let both = match (r.start_updates, r.end_updates) {
            (Some(a), Some(z)) if r.split_start && shared_end => Some((centre(a) - centre(z)).abs() / 2.0),
            _ => None,
        };
        let start = if r.split_start { shared(r.start_updates, true, both) } else { valued(r.start_updates, true) };
        let end = if shared_end { shared(r.end_updates, false, both) } else { valued(r.end_updates, false) };
        let update_end = !(r.tail_cut || r.split_end) && r.end_updates.is_some_and(|w| w.part_after.0 == 0);
        let inside = if d < u && (r.split_start || !update_end) { self.smear(r).0 } else { 0.0 };
        // A placement error moves each edge's far part at the level that part is valued at (the
        // baseline, or the shared update's own mean power). The two edges' errors are independent
        // uniforms (their sum's variance as one uniform's): the sensor's oscillator is not the
        // host's, so its updates drift through the reads instead of keeping one phase (a common
        // error, level difference · h, covered 91–93 % of the 10 ms counter's runs once the
        // simulated sensors drifted; `docs/energy-method.md` §9).
        let level = |shared: bool, w: Option<Straddle>| if shared { w.map_or(top, |w| w.holding.0) } else { b };
        let start_level = level(r.split_start, r.start_updates);
        let end_level = match r.end_updates {
            // An end at its update's end: the power there lies between that update's and the next's.
            Some(w) if update_end => w.after.0,
            w => level(r.tail_cut || r.split_end, w),
        };
        let phase = (start_level * edge_h(r.start_updates, true)).hypot(end_level * edge_h(r.end_updates, false));
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
        let u_energy = above + expand(&[self.gain(energy), self.rounding(region)], stat2);
        let u_above = above + expand(&[self.gain(above), self.rounding(region)], stat2 + (d * idle.statistical.0).powi(2));
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
            Reporting::Counter if !self.held => 0.0,
            _ => 1.25 * self.noise.0 / independent.sqrt(),
        };
        let edges = match self.reporting {
            // A window edge lies anywhere in an update, or within its placement of one where
            // each update is seen ([`SourceModel::resolved`]).
            Reporting::Counter => baseline.0 * if self.resolved() { self.edge_half_range() } else { self.update_s() / 2.0 } * (2.0f64 / 3.0).sqrt() / w,
            _ => 0.0,
        };
        // A baseline of readings that do not dither their step is that step's rounding off.
        let resolution = (self.resolution_j(w) / w).hypot(self.rounding(1.0) / 3f64.sqrt());
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

/// tb·ta/U of the update holding a shared edge: split in proportion, the edge errs by the step
/// between the update's two sides times this.
fn split_weight(w: Straddle) -> f64 {
    let (tb, ta) = (ns(w.part_before), ns(w.part_after));
    tb * ta / (tb + ta).max(1e-9)
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
mod tests;
