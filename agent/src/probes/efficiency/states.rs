//! The efficiency preset per NVMe power state (`probe --efficiency --power-states`,
//! `docs/efficiency.md` §7), built like the governor sweep (`probes::power_sweep`): the requested
//! states are checked against the drive's power-state table before anything changes, a restore
//! guard is armed (state file first), and each state is set, read back and, only when the
//! read-back shows it, measured with every phase (`measure`, the caller's phase loop). A state the
//! drive refuses, ignores or fails to set is reported `not_set` with the drive's answer and never
//! measured; the other states still run. The original state is put back at the end, after a phase
//! error, after a stop (the probe's SIGINT/SIGTERM/SIGHUP flag ends the phase loop) and, through
//! the guard's `Drop`, after a panic; after SIGKILL the state file makes the next `run` or
//! `governor` command restore it. A new per-state field is set in [`run_states`].

use super::Phase;
use crate::drives::changes::ChangeLog;
use crate::drives::governor::{Controller, GovernorCmdError};
use crate::probes::ProbeCmdError;
use serde::Serialize;
use std::path::Path;
use wattflip_drives::{Governor, RestoreGuard};
use wattflip_proto::v1::PowerStateOutcome as Outcome;

/// Which power states the preset runs in (`--power-states`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateSelection {
    /// Every operational state of the drive's table, in index order (as `governor sweep`).
    All,
    /// These states, in this order (`0,2` or `PS0,PS2`).
    List(Vec<u32>),
}

impl std::str::FromStr for StateSelection {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s.trim().eq_ignore_ascii_case("all") {
            return Ok(StateSelection::All);
        }
        let mut states: Vec<u32> = Vec::new();
        for part in s.split(',').map(str::trim) {
            let n = part.strip_prefix("PS").or_else(|| part.strip_prefix("ps")).unwrap_or(part);
            let v: u32 = n.parse().map_err(|_| format!("`{part}` is not a power state: write `all` or a list such as 0,2"))?;
            if !states.contains(&v) {
                states.push(v);
            }
        }
        Ok(StateSelection::List(states))
    }
}

/// The per-state runs' settings (`--power-states`, `[[probes]]` `power_states`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PowerStatesArgs {
    pub selection: StateSelection,
    /// The NVMe controller (`/dev/nvme0`); `None`: the target's own (an NVMe namespace).
    pub controller: Option<String>,
}

/// What became of one requested power state.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StateOutcome {
    pub state: u32,
    /// `measured`; `not_set` (the drive refused, ignored or failed the change: no figures);
    /// `failed` (a phase failed in it); `interrupted` (stopped during its phases: the completed
    /// ones are kept); `not_reached` (stopped or failed before it).
    pub status: &'static str,
    /// The drive's answer for `not_set`, the error for `failed`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub detail: String,
    /// The state's datasheet maximum power (PSD MP).
    pub max_watts: Option<f64>,
}

/// The phases measured in one state (`None`: the state the drive was in, not known).
#[derive(Debug, Clone, PartialEq)]
pub struct StatePhases {
    pub state: Option<u32>,
    pub phases: Vec<Phase>,
}

/// A per-state run: the phases of each measured state, what became of every requested state, the
/// original state (put back) and whether a stop ended it early.
#[derive(Debug, Clone, PartialEq)]
pub struct StatesRun {
    pub runs: Vec<StatePhases>,
    pub states: Vec<StateOutcome>,
    pub original: u32,
    pub interrupted: bool,
}

/// The phase loop of one state: its phases and whether a stop ended it.
pub type MeasureState<'a> = dyn FnMut(u32) -> Result<(Vec<Phase>, bool), ProbeCmdError> + 'a;

fn governor_error(e: impl Into<GovernorCmdError>) -> ProbeCmdError {
    ProbeCmdError::PowerStates(Box::new(e.into()))
}

/// The states to visit: every operational one for `All`; a listed state that does not exist or is
/// not operational is refused here, before the drive is touched.
pub fn resolve(ctl: &Controller, gov: &Governor, wanted: &StateSelection) -> Result<Vec<u32>, ProbeCmdError> {
    let states: Vec<u32> = match wanted {
        StateSelection::All => ctl.id.power_states.iter().filter(|p| p.operational).map(|p| u32::from(p.index)).collect(),
        StateSelection::List(l) => l.clone(),
    };
    for &s in &states {
        gov.validate(s).map_err(governor_error)?;
    }
    if states.is_empty() {
        return Err(ProbeCmdError::Input { path: ctl.controller.clone().into(), reason: "no operational power state to measure in".into() });
    }
    Ok(states)
}

/// Sets `state` through the guard and reads it back; records the attempt. Returns the state the
/// drive is in afterwards and, when it is not `state`, why.
fn switch(guard: &RestoreGuard, ctl: &Controller, gov: &Governor, rec: &mut ChangeLog, current: u32, state: u32) -> (u32, Option<String>) {
    let outcome = match guard.set(state) {
        Ok(o) => o,
        Err(e) => {
            let now = ctl.current(gov).unwrap_or(current);
            rec.change(&ctl.tag, &ctl.id.serial, current, state, now, Outcome::Failed, e.to_string());
            return (now, Some(e.to_string()));
        }
    };
    let now = ctl.record(rec, current, state, &outcome, gov);
    if !outcome.is_applied() {
        return (now, Some(outcome.to_string()));
    }
    // The set's own read-back showed it; a second read right before the phases confirms it held.
    match gov.current() {
        Ok(s) if s == state => (s, None),
        Ok(s) => (s, Some(format!("the set reported PS{state} applied, but a second read-back shows PS{s}"))),
        Err(e) => (now, Some(format!("reading the state back failed: {e}"))),
    }
}

/// Runs `measure` in each selected state of `ctl` (see the module docs). `state_dir` holds the
/// restore guard's state file. A phase error ends the run after the restore and is returned;
/// a failed restore is returned in preference to it (the drive is left changed).
pub fn run_states(
    ctl: &Controller,
    wanted: &StateSelection,
    state_dir: &Path,
    rec: &mut ChangeLog,
    measure: &mut MeasureState,
) -> Result<StatesRun, ProbeCmdError> {
    let gov = ctl.governor().map_err(governor_error)?;
    let states = resolve(ctl, &gov, wanted)?;
    let guard = RestoreGuard::arm(gov.clone(), &ctl.id.serial, state_dir, None).map_err(governor_error)?;
    let original = guard.record().original_state;
    let mut run = StatesRun { runs: Vec::new(), states: Vec::new(), original, interrupted: false };
    let (mut current, mut failure) = (original, None);
    for state in states {
        let max_watts = ctl.id.power_states.iter().find(|p| u32::from(p.index) == state).and_then(|p| p.max_power).map(|w| w.0);
        let outcome = |status, detail| StateOutcome { state, status, detail, max_watts };
        if failure.is_some() || run.interrupted {
            run.states.push(outcome("not_reached", String::new()));
            continue;
        }
        let (now, refused) = switch(&guard, ctl, &gov, rec, current, state);
        current = now;
        if let Some(why) = refused {
            tracing::warn!("{}: PS{state} not set, not measured: {why}", ctl.controller);
            run.states.push(outcome("not_set", why));
            continue;
        }
        match measure(state) {
            Ok((phases, stopped)) => {
                run.runs.push(StatePhases { state: Some(state), phases });
                run.states.push(outcome(if stopped { "interrupted" } else { "measured" }, String::new()));
                run.interrupted = stopped;
            }
            Err(e) => {
                run.states.push(outcome("failed", e.to_string()));
                failure = Some(e);
            }
        }
    }
    // Always restore, whatever happened above.
    restore(guard, ctl, current, original, rec)?;
    match failure {
        Some(e) => Err(e),
        None => Ok(run),
    }
}

/// Puts the original state back and records the outcome.
fn restore(guard: RestoreGuard, ctl: &Controller, current: u32, original: u32, rec: &mut ChangeLog) -> Result<(), ProbeCmdError> {
    match guard.restore() {
        Ok(rep) => {
            let how = if rep.wrote { "written back and verified" } else { "still in place" };
            rec.change(
                &ctl.tag,
                &ctl.id.serial,
                current,
                rep.state,
                rep.state,
                Outcome::Restored,
                format!("efficiency per state finished: original PS{} {how}", rep.state),
            );
            Ok(())
        }
        Err(e) => {
            rec.change(&ctl.tag, &ctl.id.serial, current, original, current, Outcome::Failed, format!("restoring the original state failed: {e}"));
            Err(governor_error(e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selections_parse_as_the_flag_writes_them() {
        assert_eq!("all".parse::<StateSelection>(), Ok(StateSelection::All));
        assert_eq!("0, PS2,0".parse::<StateSelection>(), Ok(StateSelection::List(vec![0, 2])));
        assert_eq!("x".parse::<StateSelection>(), Err("`x` is not a power state: write `all` or a list such as 0,2".to_string()));
    }
}
