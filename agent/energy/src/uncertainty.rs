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
}

/// 95 % half-widths of a run's figures.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RunU95 {
    pub energy: Joules,
    pub above_idle: Joules,
    pub background: Joules,
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
            // A run of at least two updates has its own mean at its start; a shorter one is seen
            // only in the update it falls into (its peak).
            Reporting::Counter => {
                let start = if d >= 2.0 * u { r.mean.0 } else { top }.max(r.baseline.0);
                (start * h, if r.tail_cut { start * h } else { r.baseline.0 * h })
            }
            // A run shorter than an update shows its step only averaged over that update: the
            // step is its visible energy over its length, and no edge moves more than the run.
            _ => {
                let mut step = (top - r.baseline.0).abs() + 2.0 * self.noise.0;
                if d < u {
                    step = step.max((r.peak.0 - r.baseline.0).abs() * u / d.max(ns(self.read)).max(1e-9));
                }
                (step * h.min(d.max(ns(self.read))), step * h.min(d.max(ns(self.read))))
            }
        };
        let stat2 = self.noise_j(d).powi(2) + self.resolution_j(d).powi(2);
        let energy = expand(&[start, end, r.energy.0 * self.accuracy], stat2);
        let above = expand(&[start, end, r.above_idle.0 * self.accuracy], stat2 + (d * idle.statistical.0).powi(2));
        let bd = ns(r.background_duration);
        let background = if bd > 0.0 {
            expand(&[end, r.background.0 * self.accuracy], self.noise_j(bd).powi(2) + (bd * idle.statistical.0).powi(2))
        } else {
            expand(&[r.background.0 * self.accuracy], 0.0)
        };
        RunU95 { energy: Joules(energy), above_idle: Joules(above), background: Joules(background) }
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
        IdleU { u95: Watts(expand(&[baseline.0 * self.accuracy], statistical.powi(2))), statistical: Watts(statistical) }
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

    /// By hand: a 100 ms sample-and-hold source read every 5 ms, a 3 W step over a 2 W idle:
    /// edge half-range (0.1 + 0.005)/2 s · 3 W = 0.1575 J at each edge; two equal uniforms.
    #[test]
    fn sample_and_hold_edges_by_hand() {
        let idle = IdleU { u95: Watts(0.0), statistical: Watts(0.0) };
        let u = model(Reporting::SampleHold, 100).run(&run(1000, 5.0, 2.0), &idle);
        let want = 0.1575 * (2.0 - 0.2f64.sqrt());
        assert!((u.energy.0 - want).abs() < 1e-12, "{} vs {want}", u.energy.0);
    }

    /// By hand: a counter updating every 1 ms read every 5 ms: half-range 0.5 ms at each edge
    /// (the read period does not matter to a counter); 5 W at the start, 2 W at the end: 2.5 mJ
    /// and 1 mJ, q = 3.5 mJ − √(0.2·2.5·1) mJ. A 0.4 % class on 5 J (±20 mJ) and the 2.5 mJ edge:
    /// q = 22.5 − √(0.2·20·2.5) mJ, the 1 mJ edge in quadrature.
    #[test]
    fn counter_edges_and_gain_by_hand() {
        let idle = IdleU { u95: Watts(0.0), statistical: Watts(0.0) };
        let mut m = model(Reporting::Counter, 1);
        let u = m.run(&run(1000, 5.0, 2.0), &idle);
        assert!((u.energy.0 - (3.5e-3 - (0.2f64 * 2.5e-3 * 1e-3).sqrt())).abs() < 1e-12, "{u:?}");
        m.accuracy = 0.004;
        let u = m.run(&run(1000, 5.0, 2.0), &idle);
        let q = 0.0225 - (0.2f64 * 0.02 * 2.5e-3).sqrt();
        let want = 1.96 * ((q / 1.96).powi(2) + 1e-6 / 3.0).sqrt();
        assert!((u.energy.0 - want).abs() < 1e-12, "{} vs {want}", u.energy.0);
    }
}
