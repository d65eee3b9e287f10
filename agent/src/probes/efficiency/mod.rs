//! The efficiency preset (`probe --efficiency`, `docs/efficiency.md`): a ready-idle phase and the
//! classic IO profiles, each extended window by window until its trailing windows form a stable
//! measurement interval ([`stability`]) or its time budget ends, then the SNIA-Emerald-style
//! ratios of that interval ([`metrics`]) with their uncertainties. The phase loop
//! ([`measure_phase`]) takes its windows from a [`PhaseSource`]: the live one ([`run`]) drives
//! the uFLIP engine with power recorded; tests drive it with a truth generator. A new profile is a
//! [`Profile`] variant (its IO in `run::profile_load`); a new metric is a field in [`metrics`].
//! Per NVMe power state, [`states`] switches the drive and runs the phase loop
//! ([`measure_profiles`]) in each state.

pub mod metrics;
pub mod run;
pub mod stability;
pub mod states;

use serde::Serialize;
use stability::{Assessment, StabilityConfig};
use std::time::Duration;
use wattflip_energy::Joules;

/// An energy figure and the half-width of its 95 % interval; `u95` is `None` while unknown (the
/// source's uncertainty is not modelled), and every figure derived from it then says so.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct EnergyFigure {
    pub energy: Joules,
    pub u95: Option<Joules>,
}

/// The phases of the preset, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    /// Ready idle: the target open and filled, no IO (Emerald's "ready idle").
    ReadyIdle,
    /// Random 4 KiB reads, queue depth 1.
    RandomRead4k,
    /// Random 4 KiB writes.
    RandomWrite4k,
    /// Sequential 128 KiB reads.
    SeqRead128k,
    /// Sequential 128 KiB writes.
    SeqWrite128k,
    /// Random 4 KiB reads and writes interleaved, about 70 % reads (uFLIP's Mix; the nearest
    /// ratio it can interleave, 2 reads : 1 write, is recorded with the result).
    Mixed7030,
}

impl Profile {
    pub const ALL: [Profile; 6] =
        [Profile::ReadyIdle, Profile::RandomRead4k, Profile::RandomWrite4k, Profile::SeqRead128k, Profile::SeqWrite128k, Profile::Mixed7030];

    /// The name in files, tags and tables.
    pub fn name(self) -> &'static str {
        match self {
            Profile::ReadyIdle => "ready_idle",
            Profile::RandomRead4k => "rand_read_4k",
            Profile::RandomWrite4k => "rand_write_4k",
            Profile::SeqRead128k => "seq_read_128k",
            Profile::SeqWrite128k => "seq_write_128k",
            Profile::Mixed7030 => "mixed_70_30_4k",
        }
    }

    /// Whether the profile's headline ratio is throughput per watt (sequential) rather than
    /// operations per watt (random and mixed).
    pub fn sequential(self) -> bool {
        matches!(self, Profile::SeqRead128k | Profile::SeqWrite128k)
    }

    /// Whether the profile writes (needs the target's destroy consent).
    pub fn writes(self) -> bool {
        matches!(self, Profile::RandomWrite4k | Profile::SeqWrite128k | Profile::Mixed7030)
    }
}

/// One window of a phase as measured: its host interval, its IOs and its energy (`None` without a
/// power source).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Window {
    pub start_ns: i64,
    pub end_ns: i64,
    pub ios: u64,
    pub bytes: u64,
    pub energy: Option<EnergyFigure>,
}

impl Window {
    pub fn secs(&self) -> f64 {
        (self.end_ns - self.start_ns) as f64 / 1e9
    }
}

/// Where a phase's windows come from: the live target with power recorded, or a test's generator.
pub trait PhaseSource {
    type Error;
    /// Runs (or, for idle, waits) one more window of `profile` and returns it.
    fn next_window(&mut self, profile: Profile) -> Result<Window, Self::Error>;
    /// The energy over `[from_ns, to_ns)` as one figure (a measurement interval: its uncertainty
    /// is that of one interval, not a sum of the windows' ones); `None` without power.
    fn interval_energy(&mut self, from_ns: i64, to_ns: i64) -> Option<EnergyFigure>;
}

/// How long a phase may run, and its windows' length.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PhaseBudget {
    pub window: Duration,
    /// The phase ends unstable when its windows add up to this without a stable interval.
    pub budget: Duration,
}

/// A phase as measured: its windows, the interval the verdict is about and the interval's energy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Phase {
    pub profile: Profile,
    pub windows: Vec<Window>,
    /// First window of the measurement interval (the trailing windows from here).
    pub interval_from: usize,
    pub assessment: Assessment,
    /// The interval's energy, only for a stable interval.
    pub energy: Option<EnergyFigure>,
}

impl Phase {
    /// The measurement interval's windows.
    pub fn interval(&self) -> &[Window] {
        &self.windows[self.interval_from.min(self.windows.len())..]
    }

    /// `[start, end)` of the measurement interval (UTC ns).
    pub fn interval_span(&self) -> Option<(i64, i64)> {
        let w = self.interval();
        Some((w.first()?.start_ns, w.last()?.end_ns))
    }

    /// No power was recorded: the phase ran its minimum windows without a verdict.
    pub fn unmeasured(&self) -> bool {
        self.windows.iter().any(|w| w.energy.is_none())
    }
}

/// The efficiency one window shows for `profile`, the quantity whose stability is tested: idle
/// watts, IOs per joule (IOPS/W) for random and mixed profiles, MiB per joule (MiB/s/W) for
/// sequential ones; `None` without energy.
pub fn window_value(profile: Profile, w: &Window) -> Option<f64> {
    let e = w.energy?.energy.0;
    Some(match profile {
        Profile::ReadyIdle => e / w.secs(),
        p if p.sequential() => w.bytes as f64 / 1_048_576.0 / e,
        _ => w.ios as f64 / e,
    })
}

/// Runs windows of `profile` until the trailing `cfg.min_windows` are stable or the windows add
/// up to the budget. Without power, the phase runs its minimum windows and has no verdict.
pub fn measure_phase<S: PhaseSource>(profile: Profile, src: &mut S, cfg: &StabilityConfig, budget: &PhaseBudget) -> Result<Phase, S::Error> {
    let need = cfg.min_windows.max(3);
    let budget_ns = i64::try_from(budget.budget.as_nanos()).unwrap_or(i64::MAX);
    let mut windows: Vec<Window> = Vec::new();
    let mut values: Vec<f64> = Vec::new();
    let mut spent: i64 = 0;
    loop {
        let w = src.next_window(profile)?;
        spent = spent.saturating_add(w.end_ns - w.start_ns);
        let value = window_value(profile, &w);
        windows.push(w);
        let Some(v) = value else {
            if windows.len() >= need || spent >= budget_ns {
                let n = windows.len();
                let a = stability::assess(&[], cfg);
                return Ok(Phase { profile, windows, interval_from: n, assessment: a, energy: None });
            }
            continue;
        };
        values.push(v);
        let (from, a) = stability::trailing_interval(&values, cfg);
        // A window of zero length never ends a budget: the count bounds the loop as well.
        let over = spent >= budget_ns || windows.len() >= need.saturating_mul(1000);
        if a.stable() || over {
            let energy = if a.stable() { src.interval_energy(windows[from].start_ns, windows[windows.len() - 1].end_ns) } else { None };
            return Ok(Phase { profile, windows, interval_from: from, assessment: a, energy });
        }
    }
}

/// Runs the phases of `profiles` in order from `src`. An error while `stopping()` is a stop (the
/// probe's signal flag): the phases completed before it are returned with `true`, the phase in
/// progress is left out.
pub fn measure_profiles<S: PhaseSource>(
    profiles: &[Profile],
    src: &mut S,
    opts: &EfficiencyOptions,
    stopping: &dyn Fn() -> bool,
) -> Result<(Vec<Phase>, bool), S::Error> {
    let mut phases = Vec::new();
    for &p in profiles {
        match measure_phase(p, src, &opts.stability, &opts.budget) {
            Ok(phase) => phases.push(phase),
            Err(_) if stopping() => return Ok((phases, true)),
            Err(e) => return Err(e),
        }
        tracing::info!("efficiency phase {} of {} completed: {}", phases.len(), profiles.len(), p.name());
    }
    Ok((phases, false))
}

/// The preset's settings (`probe --efficiency-*`, `[[probes]]` `efficiency_*`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct EfficiencyOptions {
    pub stability: StabilityConfig,
    pub budget: PhaseBudget,
}

impl EfficiencyOptions {
    /// Checked settings: `windows` ≥ 3, band and trend percentages in (0, 100), a window longer
    /// than 0 and a budget of at least one interval. An error names the setting (`window`,
    /// `windows`, `budget`, `band`, `trend`) for the caller's flag or key.
    pub fn new(window: Duration, windows: usize, budget: Duration, band_pct: f64, trend_pct: f64) -> Result<EfficiencyOptions, (&'static str, String)> {
        if windows < 3 {
            return Err(("windows", format!("{windows}: an interval needs at least 3 windows (a trend needs a residual)")));
        }
        for (name, v) in [("band", band_pct), ("trend", trend_pct)] {
            if !(v.is_finite() && v > 0.0 && v < 100.0) {
                return Err((name, format!("{v}: a percentage above 0 and below 100")));
            }
        }
        if window.is_zero() {
            return Err(("window", "must be longer than 0".into()));
        }
        if budget < window.saturating_mul(u32::try_from(windows).unwrap_or(u32::MAX)) {
            return Err(("budget", format!("{budget:?} is shorter than one interval ({windows} windows of {window:?})")));
        }
        Ok(EfficiencyOptions {
            stability: StabilityConfig { min_windows: windows, band: band_pct / 100.0, max_trend: trend_pct / 100.0 },
            budget: PhaseBudget { window, budget },
        })
    }
}

/// A scheduled efficiency probe (`[[probes]]` with `efficiency = true`): its settings, the
/// capacity for W/TB of a file target and, with `power_states`, the states to run in.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduledEfficiency {
    pub options: EfficiencyOptions,
    pub capacity: Option<u64>,
    pub power_states: Option<states::PowerStatesArgs>,
}

impl Default for EfficiencyOptions {
    fn default() -> Self {
        EfficiencyOptions { stability: StabilityConfig::default(), budget: PhaseBudget { window: Duration::from_secs(1), budget: Duration::from_secs(120) } }
    }
}
