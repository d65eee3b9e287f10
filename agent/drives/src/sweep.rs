//! Governor sweep planner: which power states to visit, in which order, ending with the original.
//!
//! Only operational states are visited (a non-operational state processes no IO, §5.2). The plan
//! always ends with a [`StepPurpose::Restore`] step back to the original state, even when the last
//! measured state is the original, so the agent's loop needs no special case. The IO measurement
//! itself is the agent's job. To add an ordering, add a [`SweepOrder`] variant and one sort arm.

use crate::nvme_cli::PowerState;
use crate::units::Watts;
use serde::{Deserialize, Serialize};

/// Visit order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum SweepOrder {
    /// PS0, PS1, … (by NVMe convention PS0 is the highest-power state).
    #[default]
    IndexAscending,
    /// Deepest operational state first.
    IndexDescending,
    /// By reported max power, highest first; unreported power last; ties by index.
    MaxPowerDescending,
}

/// Why a step is in the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StepPurpose {
    /// Set this state and measure.
    Measure,
    /// Put the original state back (last step).
    Restore,
}

/// One step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepStep {
    /// Power state to select.
    pub state: u8,
    /// Measure or restore.
    pub purpose: StepPurpose,
    /// Its max power, for labelling results.
    pub max_power: Option<Watts>,
}

/// The ordered steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepPlan {
    /// The state the drive was in (restored at the end).
    pub original: u8,
    /// Steps in order; the last one is always `Restore` to `original`.
    pub steps: Vec<SweepStep>,
}

impl SweepPlan {
    /// All states in visiting order, the final restore included.
    pub fn states(&self) -> Vec<u8> {
        self.steps.iter().map(|s| s.state).collect()
    }
}

/// A sweep that cannot be planned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SweepError {
    /// No operational states in the table.
    #[error("no operational power state to sweep: read id-ctrl again")]
    NoOperationalStates,
    /// The original state is not in the table.
    #[error("the original state PS{0} is not in the power-state table: re-read it before planning")]
    OriginalUnknown(u8),
    /// The original state is non-operational: the sweep could not end there.
    #[error("the original state PS{0} is non-operational: a sweep cannot return to it")]
    OriginalNonOperational(u8),
}

/// Plans a sweep over the operational states of `states`, ending with `original`.
pub fn plan_sweep(states: &[PowerState], original: u8, order: SweepOrder) -> Result<SweepPlan, SweepError> {
    let mut visit: Vec<&PowerState> = states.iter().filter(|p| p.operational).collect();
    if visit.is_empty() {
        return Err(SweepError::NoOperationalStates);
    }
    let orig = states.iter().find(|p| p.index == original).ok_or(SweepError::OriginalUnknown(original))?;
    if !orig.operational {
        return Err(SweepError::OriginalNonOperational(original));
    }
    visit.dedup_by_key(|p| p.index);
    match order {
        SweepOrder::IndexAscending => visit.sort_by_key(|p| p.index),
        SweepOrder::IndexDescending => visit.sort_by_key(|p| std::cmp::Reverse(p.index)),
        SweepOrder::MaxPowerDescending => visit.sort_by(|a, b| {
            let pa = a.max_power.map(|w| w.0).unwrap_or(f64::NEG_INFINITY);
            let pb = b.max_power.map(|w| w.0).unwrap_or(f64::NEG_INFINITY);
            pb.total_cmp(&pa).then(a.index.cmp(&b.index))
        }),
    }
    let mut steps: Vec<SweepStep> = visit.iter().map(|p| SweepStep { state: p.index, purpose: StepPurpose::Measure, max_power: p.max_power }).collect();
    steps.push(SweepStep { state: original, purpose: StepPurpose::Restore, max_power: orig.max_power });
    Ok(SweepPlan { original, steps })
}
