//! The NVMe power-state governor (FID 02h) on one controller ([`Controller`]), built on
//! `wattflip_drives::{Governor, RestoreGuard}`; the `governor` command is `app::governor`, the
//! sweep's measuring `probes::power_sweep`, the records `changes`.
//!
//! - `show` prints the power-state table, the current state and whether it is changeable, and the
//!   current Intel PowerGovernorMode (FID C6h) on allow-listed models.
//! - `set --state N` validates (operational states only), sets, reads back and records the
//!   outcome; the new state stays (an operator's explicit choice; it is lost at the next
//!   controller reset).
//! - `set --intel-mode N` (FID C6h, allow-listed Intel models only) arms a restore guard (state
//!   file first), sets and reads back the mode, holds it for `--hold` or until SIGTERM/SIGINT, then
//!   puts the original mode back ([`intel_mode_until_signal`]). Unlike PS selection, a vendor
//!   power cap survives controller resets and is invisible in the PSD table, so it is never left
//!   behind: on error and signal it is restored at once, after SIGKILL at the next start.
//! - `sweep` (`probes::power_sweep`) arms a restore guard (state file first), visits every operational state, measures the
//!   configured uFLIP patterns in each, and puts the original state back — on success, on error, on
//!   SIGTERM/SIGINT (the caller's signal task runs [`RestoreRegistry::restore_all`]) and, after
//!   SIGKILL, through [`super::changes::recover_records`], which `run` and every governor command call first.
//!
//! Power is recorded live in every state (from the change on, so the settle time is the idle
//! baseline): each sweep run carries its power state, the state's datasheet watts, its measured
//! mean power and its energy (docs/schema.md), or none of the power fields on a host without a
//! power source, which one `sweep_power_unavailable` event explains.
//!
//! Every attempted change is a `PowerStateChange` plus an `event` ([`ChangeLog`]). Results are written
//! to a local folder and, when a collector URL is given, streamed there. A change of the Intel mode
//! is recorded the same way, its from/to/observed being modes and its detail starting with
//! `Intel PowerGovernorMode (FID C6h)`. To add a knob, build its `Governor` from the [`Controller`]
//! and reuse the same recording.

use super::changes::{recover_records, ChangeLog};
use super::config::DrivesConfig;
use super::tools::{tag_of, DriveTools};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wattflip_drives::nvme_cli::controller_of;
use wattflip_drives::{
    CommandRunner, Governor, GovernorError, IdCtrl, IntelGovernorMode, Knob, NvmeCli, NvmeError, PowerManagement, RestoreError, RestoreGuard, SetOutcome,
    SweepError,
};
use wattflip_proto::v1;
use wattflip_proto::v1::PowerStateOutcome as Outcome;

#[derive(Debug, thiserror::Error)]
pub enum GovernorCmdError {
    #[error("the governor needs nvme-cli, which is not available on this host: {0}")]
    NoNvmeCli(String),
    #[error("`{0}` is not an NVMe device node: pass a controller such as /dev/nvme0 or a namespace such as /dev/nvme0n1")]
    NotNvme(String),
    #[error(transparent)]
    Nvme(#[from] NvmeError),
    #[error(transparent)]
    Governor(#[from] GovernorError),
    #[error(transparent)]
    Restore(#[from] RestoreError),
    #[error("{controller}: cannot plan the sweep: {source}")]
    Sweep { controller: String, source: SweepError },
    /// The sweep's target could not be opened (`probes::ProbeCmdError`, kept as it was).
    #[error(transparent)]
    Target(Box<dyn std::error::Error + Send + Sync>),
    #[error("sweep target: {0}")]
    Engine(#[from] wattflip_uflip::ProbeError),
    #[error("{controller}: Intel PowerGovernorMode {mode} was not applied: {outcome}; the original mode was put back")]
    IntelNotApplied { controller: String, mode: u32, outcome: String },
    #[error("{controller}: PS{state} was not applied: {outcome}")]
    NotApplied { controller: String, state: u32, outcome: String },
    #[error("interrupted by a signal; the original power state was put back")]
    Interrupted,
    #[error("cannot write results to {path}: {source}")]
    Output { path: PathBuf, source: std::io::Error },
    #[error("the collector at {url} did not acknowledge the results; they are in {dir}")]
    NotDelivered { url: String, dir: PathBuf },
    #[error("the sweep thread stopped unexpectedly: {0}; run `wattflip-agent governor show` to restore from the state file")]
    Thread(String),
}

/// One controller opened for governor commands.
pub struct Controller {
    pub nvme: NvmeCli,
    /// `/dev/nvme0`.
    pub controller: String,
    /// `nvme0`.
    pub tag: String,
    pub id: IdCtrl,
}

impl Controller {
    /// Probes nvme-cli, recovers leftover state files (recorded in `rec`), reads id-ctrl.
    pub fn open(drives: &DrivesConfig, device: &str, runner: Arc<dyn CommandRunner>, rec: &mut ChangeLog) -> Result<Controller, GovernorCmdError> {
        let tools = DriveTools::probe(drives, runner);
        let why = || tools.unavailable.iter().filter(|n| n.starts_with("nvme-cli")).cloned().collect::<Vec<_>>().join("; ");
        let nvme = tools.nvme.clone().ok_or_else(|| GovernorCmdError::NoNvmeCli(why()))?;
        let controller = controller_of(device).filter(|_| device.starts_with("/dev/")).ok_or_else(|| GovernorCmdError::NotNvme(device.into()))?;
        recover_records(&drives.state_dir, &nvme, rec);
        let id = nvme.id_ctrl(&controller)?;
        Ok(Controller { tag: tag_of(&controller), nvme, controller, id })
    }

    pub fn governor(&self) -> Result<Governor, GovernorError> {
        Governor::power_state(self.nvme.clone(), self.controller.clone(), self.id.power_states.clone())
    }

    /// The power-state table and current state, for humans.
    pub fn show(&self) -> String {
        let mut s = String::new();
        let id = &self.id;
        let _ = writeln!(
            s,
            "{} ({}): model {}, serial {}, firmware {}, {} power state(s)",
            self.controller,
            self.nvme.program(),
            id.model.trim(),
            id.serial.trim(),
            id.firmware.trim(),
            id.power_states.len()
        );
        let gov = self.governor();
        match gov.as_ref().map(|g| (g.read_raw(), g.capabilities())) {
            Ok((Ok(raw), caps)) => {
                let pm = PowerManagement::from_value(raw);
                let caps = match caps {
                    Ok(c) => format!(
                        "{}, {}",
                        if c.changeable() { "changeable" } else { "NOT changeable (SEL 3)" },
                        if c.saveable() { "saveable" } else { "not saveable" }
                    ),
                    Err(e) => format!("capabilities unknown: {e}"),
                };
                let _ = writeln!(s, "current: PS{} (workload hint {}); {caps}", pm.ps, pm.workload_hint);
            }
            Ok((Err(e), _)) => {
                let _ = writeln!(s, "current: unknown: {e}");
            }
            Err(e) => {
                let _ = writeln!(s, "current: unknown: {e}");
            }
        }
        s.push_str(&super::report::power_state_table(&id.power_states));
        let limit = |c: Option<wattflip_drives::Celsius>| c.map(|c| c.to_string()).unwrap_or_else(|| "not reported".into());
        let _ = writeln!(s, "thresholds: warning {}, critical {}", limit(id.warning_temperature()), limit(id.critical_temperature()));
        let intel = match self.intel_governor() {
            Err(_) => "not on the allow-list for this model".to_string(),
            Ok(g) => match g.current() {
                Ok(m) => format!("mode {m} ({})", intel_mode_watts(m)),
                Err(e) => format!("supported by this model, current mode unknown: {e}"),
            },
        };
        let _ = writeln!(s, "Intel PowerGovernorMode (FID C6h): {intel}");
        s
    }

    /// The Intel FID C6h governor; fails unless the model is on the allow-list.
    pub fn intel_governor(&self) -> Result<Governor, GovernorError> {
        Governor::intel_power_governor(self.nvme.clone(), self.controller.clone(), &self.id)
    }

    /// Reads the current state for a record; `None` when the read fails.
    pub fn current(&self, gov: &Governor) -> Option<u32> {
        gov.current().ok()
    }

    /// Records one set outcome. Returns the state the drive is in afterwards.
    pub fn record(&self, rec: &mut ChangeLog, from: u32, to: u32, outcome: &SetOutcome, gov: &Governor) -> u32 {
        let (kind, observed) = match outcome {
            SetOutcome::Applied { current, .. } => (Outcome::Applied, *current),
            SetOutcome::Ignored { observed, .. } => (Outcome::Ignored, *observed),
            SetOutcome::Refused { .. } => (Outcome::Refused, self.current(gov).unwrap_or(from)),
            SetOutcome::Failed { .. } => (Outcome::Failed, self.current(gov).unwrap_or(from)),
        };
        rec.change(&self.tag, &self.id.serial, from, to, observed, kind, outcome.to_string());
        observed
    }
}

/// `governor set`: validate, set, read back, record. The state is kept.
pub fn set(s: &Controller, state: u32, rec: &mut ChangeLog) -> Result<(), GovernorCmdError> {
    let gov = s.governor()?;
    if let Err(e) = gov.validate(state) {
        rec.event("power_state_rejected", v1::Severity::Warning, &s.tag, e.to_string());
        return Err(e.into());
    }
    let from = gov.current()?;
    let outcome = gov.set(state)?;
    s.record(rec, from, state, &outcome, &gov);
    if !outcome.is_applied() {
        return Err(GovernorCmdError::NotApplied { controller: s.controller.clone(), state, outcome: outcome.to_string() });
    }
    Ok(())
}

/// The cap of an Intel PowerGovernorMode on PCIe x4 cards (docs/sources-and-drives.md §5.3).
pub fn intel_mode_watts(mode: u32) -> &'static str {
    match IntelGovernorMode::from_value(mode) {
        Some(IntelGovernorMode::Watts25) => "25 W",
        Some(IntelGovernorMode::Watts20) => "20 W",
        Some(IntelGovernorMode::Watts10) => "10 W",
        None => "undocumented",
    }
}

/// `governor set --intel-mode`: arm a restore guard (state file before the change), set the mode
/// and read it back, hold it for `hold` (`None`: until the signal), then restore the original and
/// verify. The end of the hold and a signal are both normal ends; a mode the drive refuses or
/// ignores is restored at once and returned as an error. After SIGKILL the state file makes the
/// next `run` or `governor` command restore it ([`recover_records`]).
pub async fn intel_mode_until_signal(
    state_dir: &Path,
    s: &Controller,
    mode: u32,
    hold: Option<Duration>,
    rec: &Mutex<ChangeLog>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<String, GovernorCmdError> {
    let lock = || rec.lock().unwrap_or_else(|p| p.into_inner());
    let gov = s.intel_governor()?;
    // Rejected before the state file exists: nothing to restore.
    if let Err(e) = gov.validate(mode) {
        lock().event("power_state_rejected", v1::Severity::Warning, &s.tag, e.to_string());
        return Err(e.into());
    }
    // Poll the signal future once before touching the drive: that installs the SIGTERM/SIGINT
    // handlers, so a signal during the set is caught and restored instead of killing the process.
    let mut shutdown = std::pin::pin!(shutdown);
    let early = tokio::select! {
        biased;
        _ = shutdown.as_mut() => true,
        _ = std::future::ready(()) => false,
    };
    if early {
        return Ok(format!("{}: interrupted by a signal before the change; nothing was changed\n", s.controller));
    }
    let guard = RestoreGuard::arm(gov, &s.id.serial, state_dir, None)?;
    let original = guard.record().original_state;
    let knob = Knob::IntelPowerGovernor;
    let (tag, serial) = (s.tag.as_str(), s.id.serial.as_str());
    let detail = |what: String| format!("{knob}: {what}");
    let outcome = guard.set(mode)?;
    let (observed, kind) = observed_and_kind(&outcome, original);
    lock().change_of(knob, tag, serial, original, mode, observed, kind, detail(outcome.to_string()));
    let mut text = String::new();
    let held = if outcome.is_applied() {
        let _ = writeln!(
            text,
            "{}: Intel PowerGovernorMode {mode} ({}) applied and verified; original mode {original} saved in {}",
            s.controller,
            intel_mode_watts(mode),
            guard.state_file().display()
        );
        hold_until(hold, shutdown.as_mut()).await
    } else {
        "not applied".to_string()
    };
    // Restore on a blocking thread: nvme-cli children, and a signal must not be able to cut it.
    let restored = tokio::task::spawn_blocking(move || guard.restore()).await.map_err(|e| GovernorCmdError::Thread(e.to_string()))?;
    match restored {
        Ok(rep) => {
            lock().change_of(
                knob,
                tag,
                serial,
                observed,
                rep.state,
                rep.state,
                Outcome::Restored,
                detail(format!("{held}: original mode {} {}", rep.state, if rep.wrote { "written back and verified" } else { "still in place" })),
            );
            let _ = writeln!(text, "{}: {held}; original Intel PowerGovernorMode {} restored and verified", s.controller, rep.state);
        }
        Err(e) => {
            lock().change_of(knob, tag, serial, observed, original, observed, Outcome::Failed, detail(format!("restoring the original mode failed: {e}")));
            return Err(e.into());
        }
    }
    if !outcome.is_applied() {
        return Err(GovernorCmdError::IntelNotApplied { controller: s.controller.clone(), mode, outcome: outcome.to_string() });
    }
    Ok(text)
}

/// The mode the drive is in after a set, and the outcome's kind for the record.
fn observed_and_kind(outcome: &SetOutcome, original: u32) -> (u32, Outcome) {
    match outcome {
        SetOutcome::Applied { current, .. } => (*current, Outcome::Applied),
        SetOutcome::Ignored { observed, .. } => (*observed, Outcome::Ignored),
        SetOutcome::Refused { .. } => (original, Outcome::Refused),
        SetOutcome::Failed { .. } => (original, Outcome::Failed),
    }
}

/// Holds a mode for `hold` (`None`: until the signal) or until the signal; says which ended it.
async fn hold_until(hold: Option<Duration>, mut shutdown: std::pin::Pin<&mut impl std::future::Future<Output = ()>>) -> String {
    match hold {
        Some(d) => {
            tokio::select! {
                _ = tokio::time::sleep(d) => format!("held for {}", humantime::format_duration(d)),
                _ = shutdown.as_mut() => "interrupted by a signal".to_string(),
            }
        }
        None => {
            shutdown.as_mut().await;
            "held until a signal".to_string()
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::clock::Clock;
    use crate::config::Config;
    use wattflip_drives::fake::{FakeNvme, SetBehaviour};

    // Shared with the governor sweep's tests (probes::power_sweep).
    pub(crate) fn fixture(rel: &str) -> String {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("drives/tests/fixtures").join(rel);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    pub(crate) fn config(state_dir: &Path) -> Config {
        let mut c = Config::from_str(Path::new("t.toml"), "agent_id = \"t1\"\n[tls]\ninsecure_plaintext_loopback_only = true\n").unwrap();
        c.drives.state_dir = state_dir.to_path_buf();
        c.drives.smartctl = false;
        c.drives.sweep_settle = Duration::ZERO;
        c.sysfs_root = PathBuf::from("/nonexistent-sys");
        c
    }

    pub(crate) fn five_states(behaviour: SetBehaviour, power_value: u32) -> Arc<FakeNvme> {
        Arc::new(
            FakeNvme::new()
                .with_controller("/dev/nvme0", &fixture("nvme/constructed-5ps-nvme-cli-2.3-id-ctrl.json"), power_value, behaviour)
                .with_smart_log("/dev/nvme0", &fixture("nvme/qemu-nvme-cli-2.3-smart-log.json")),
        )
    }

    fn changes(rec: &ChangeLog) -> Vec<(u32, u32, u32, i32)> {
        rec.batch.power_state_changes.iter().map(|c| (c.from_state, c.to_state, c.observed_state, c.outcome)).collect()
    }

    #[test]
    fn set_refused_is_recorded_and_the_state_is_intact() {
        let dir = tempfile::tempdir().unwrap();
        let fake = Arc::new(FakeNvme::new().with_controller("/dev/nvme0", &fixture("nvme/qemu-nvme-cli-2.3-id-ctrl.json"), 0, SetBehaviour::Refuse));
        let mut rec = ChangeLog::new(Clock::new());
        let s = Controller::open(&config(dir.path()).drives, "/dev/nvme0n1", fake.clone(), &mut rec).unwrap();
        assert_eq!(s.controller, "/dev/nvme0");
        let e = set(&s, 0, &mut rec).unwrap_err();
        assert!(e.to_string().starts_with("/dev/nvme0: PS0 was not applied: refused 0: NVMe status 0x410e"), "{e}");
        assert_eq!(changes(&rec), vec![(0, 0, 0, Outcome::Refused as i32)]);
        assert_eq!(rec.batch.events[0].kind, "power_state_change");
        assert_eq!(fake.feature("/dev/nvme0", 2), Some(0));
        // PS1 does not exist on QEMU's one-state controller: rejected before reaching the drive.
        let e = set(&s, 1, &mut rec).unwrap_err();
        assert!(e.to_string().contains("PS1 does not exist"), "{e}");
        assert_eq!(fake.set_calls(), 1);
        assert_eq!(rec.batch.events[1].kind, "power_state_rejected");
    }

    #[test]
    fn an_intel_mode_the_drive_ignores_or_refuses_is_restored_at_once_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config(dir.path());
        let fake = Arc::new(
            FakeNvme::new()
                .with_controller("/dev/nvme0", &fixture("nvme/constructed-intel-p3700-nvme-cli-2.3-id-ctrl.json"), 0, SetBehaviour::Ignore)
                .with_feature("/dev/nvme0", 0xc6, 1),
        );
        let rec = Mutex::new(ChangeLog::new(Clock::new()));
        let s = Controller::open(&cfg.drives, "/dev/nvme0", fake.clone(), &mut rec.lock().unwrap()).unwrap();
        assert!(s.show().contains("\nIntel PowerGovernorMode (FID C6h): mode 1 (20 W)\n"), "{}", s.show());
        let rt = tokio::runtime::Runtime::new().unwrap();
        // Never resolves: the outcome alone ends the command.
        let run = |mode| rt.block_on(intel_mode_until_signal(&cfg.drives.state_dir, &s, mode, None, &rec, std::future::pending::<()>()));
        let e = run(2).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/dev/nvme0: Intel PowerGovernorMode 2 was not applied: ignored: requested 2, was 1, read-back shows 1; the original mode was put back"
        );
        fake.set_behaviour("/dev/nvme0", SetBehaviour::Refuse);
        let e = run(0).unwrap_err();
        assert!(e.to_string().starts_with("/dev/nvme0: Intel PowerGovernorMode 0 was not applied: refused 0: NVMe status 0x410e"), "{e}");
        let (ig, rf, rs) = (Outcome::Ignored as i32, Outcome::Refused as i32, Outcome::Restored as i32);
        assert_eq!(changes(&rec.lock().unwrap()), vec![(1, 2, 1, ig), (1, 1, 1, rs), (1, 0, 1, rf), (1, 1, 1, rs)]);
        let events: Vec<String> = rec.lock().unwrap().batch.events.iter().map(|e| e.message.clone()).collect();
        assert!(events[0].starts_with("nvme0: Intel mode 1 -> Intel mode 2: ignored: Intel PowerGovernorMode (FID C6h): "), "{events:?}");
        // FID C6h only: FID 02h untouched, and no state file left.
        assert_eq!((fake.feature("/dev/nvme0", 0xc6), fake.feature("/dev/nvme0", 2)), (Some(1), Some(0)));
        let json = std::fs::read_dir(dir.path()).unwrap().flatten().filter(|e| e.path().extension().is_some_and(|x| x == "json")).count();
        assert_eq!(json, 0, "state file removed (lock files stay)");
        // A mode outside 0..2 is rejected before the state file.
        let e = run(5).unwrap_err();
        assert_eq!(e.to_string(), "/dev/nvme0: Intel PowerGovernorMode 5 is not 0 (25 W), 1 (20 W) or 2 (10 W)");
    }

    #[test]
    fn set_applies_and_ignored_is_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let fake = five_states(SetBehaviour::Honour, 0);
        let mut rec = ChangeLog::new(Clock::new());
        let s = Controller::open(&config(dir.path()).drives, "/dev/nvme0", fake.clone(), &mut rec).unwrap();
        set(&s, 2, &mut rec).unwrap();
        assert_eq!(fake.feature("/dev/nvme0", 2), Some(2));
        fake.set_behaviour("/dev/nvme0", SetBehaviour::Ignore);
        assert!(set(&s, 1, &mut rec).is_err());
        assert_eq!(changes(&rec), vec![(0, 2, 2, Outcome::Applied as i32), (2, 1, 2, Outcome::Ignored as i32)]);
        // Non-operational PS3/PS4 of the fixture are never sent.
        assert!(set(&s, 4, &mut rec).unwrap_err().to_string().contains("non-operational"));
        assert_eq!(fake.set_calls(), 2);
    }
}
