//! The uncertainty of every energy figure (issue 37, `docs/energy-method.md` §9): half-widths of
//! 95 % intervals (`u95`) on a run's energy over the interval the record names, on its energy above
//! idle, its background tail, and on the idle baseline, from what limits them: how the source
//! reports ([`Reporting`]) and how often its value changes, the read period and jitter, its
//! resolution, the idle noise, its accuracy class and, for traces, the alignment residual. Each
//! contribution is a standard uncertainty (GUM: a uniform error of half-range `a` is `a/√3`),
//! combined in quadrature and expanded with k = 2. To add a contribution, add a field to
//! [`SourceModel`] and a term to [`SourceModel::edge_half_range`] or [`SourceModel::run`].

use crate::units::{Joules, Nanos, Watts};
use serde::{Deserialize, Serialize};

/// Coverage factor of the expanded uncertainty (≈ 95 % for the combined distributions here).
pub const K: f64 = 2.0;

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
    /// a counter's last update lies anywhere in one period (lag-corrected: ±U/2); a held value is
    /// seen up to one update late; a moving average smears a step over its window and lags it;
    /// plus half a read for a split inside a reading, the jitter, and a trace's residual.
    fn edge_half_range(&self) -> f64 {
        let (u, r) = (self.update_s(), ns(self.read));
        let source = match self.reporting {
            // A counter's reading holds everything up to its last update, whatever the read
            // period: only the update's phase is unknown.
            Reporting::Counter => (if self.update.0 > 0 { ns(self.update) } else { r }) / 2.0,
            Reporting::Instantaneous => r / 2.0,
            Reporting::SampleHold => u + r / 2.0,
            Reporting::MovingAverage => 1.5 * u + r / 2.0,
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
        let h = self.edge_half_range();
        // The power at each edge that the time error multiplies: a counter's whole power (its
        // cumulative energy is off by P·δ), another source's step there (a shift of a flat level
        // changes nothing).
        let top = r.mean.0.max(r.peak.0);
        let (p_start, p_end) = match self.reporting {
            Reporting::Counter => (top.max(r.baseline.0), if r.tail_cut { top.max(r.baseline.0) } else { r.baseline.0 }),
            _ => {
                let step = (top - r.baseline.0).abs() + 2.0 * self.noise.0;
                (step, step)
            }
        };
        let edges2 = ((p_start * h).powi(2) + (p_end * h).powi(2)) / 3.0;
        let stat2 = edges2 + self.noise_j(d).powi(2) + self.resolution_j(d).powi(2);
        let gain2 = |e: f64| (e * self.accuracy).powi(2) / 3.0;
        let energy = K * (stat2 + gain2(r.energy.0)).sqrt();
        let above = K * (stat2 + (d * idle.statistical.0).powi(2) + gain2(r.above_idle.0)).sqrt();
        let bd = ns(r.background_duration);
        let bg2 = if bd > 0.0 { (p_end * h).powi(2) / 3.0 + self.noise_j(bd).powi(2) + (bd * idle.statistical.0).powi(2) } else { 0.0 };
        let background = K * (bg2 + gain2(r.background.0)).sqrt();
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
        let gain2 = (baseline.0 * self.accuracy).powi(2) / 3.0;
        IdleU { u95: Watts(K * (statistical.powi(2) + gain2).sqrt()), statistical: Watts(statistical) }
    }
}

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

    /// By hand: a 100 ms sample-and-hold source read every 5 ms, a 3 W step over a 2 W idle:
    /// edge half-range 0.1025 s · 3 W = 0.3075 J per edge; u = √(2·0.3075²/3) = 0.25108 J; ×2.
    #[test]
    fn sample_and_hold_edges_by_hand() {
        let idle = IdleU { u95: Watts(0.0), statistical: Watts(0.0) };
        let u = model(Reporting::SampleHold, 100).run(&run(1000, 5.0, 2.0), &idle);
        let want = 2.0 * (2.0 * 0.3075f64.powi(2) / 3.0).sqrt();
        assert!((u.energy.0 - want).abs() < 1e-12, "{} vs {want}", u.energy.0);
    }

    /// By hand: a counter updating every 1 ms read every 5 ms: half-range 0.5 ms at each edge
    /// (the read period does not matter to a counter);
    /// 5 W at the start, 2 W at the end: u = √((5·5e-4)² + (2·5e-4)²)/√3 ·2; a 1 % class on 5 J
    /// adds 5·0.01/√3.
    #[test]
    fn counter_edges_and_gain_by_hand() {
        let idle = IdleU { u95: Watts(0.0), statistical: Watts(0.0) };
        let mut m = model(Reporting::Counter, 1);
        let u = m.run(&run(1000, 5.0, 2.0), &idle);
        let edges = ((5.0f64 * 5e-4).powi(2) + (2.0f64 * 5e-4).powi(2)) / 3.0;
        assert!((u.energy.0 - 2.0 * edges.sqrt()).abs() < 1e-12, "{u:?}");
        m.accuracy = 0.01;
        let u = m.run(&run(1000, 5.0, 2.0), &idle);
        let want = 2.0 * (edges + (5.0f64 * 0.01).powi(2) / 3.0).sqrt();
        assert!((u.energy.0 - want).abs() < 1e-12, "{} vs {want}", u.energy.0);
    }
}
