//! Crash-safe restore of the original power state.
//!
//! Before the first change, [`RestoreGuard::arm`] reads the current value and writes a state file
//! (`wattflip-governor-<ctrl>-fid<FID>.json` in the agent's state directory, JSON
//! [`StateRecord`]: device, serial, original value, time, pid), atomically (temp file, fsync,
//! rename, fsync of the directory). The original comes back:
//! - on [`RestoreGuard::restore`] (normal end of a sweep) and on `Drop` (early return, error);
//! - on SIGTERM/SIGINT through a [`RestoreRegistry`] the agent's signal task calls
//!   ([`RestoreRegistry::restore_all`]); guard and registry share one lock per controller, so a
//!   restore never overlaps a set on the same controller (§9: one admin command at a time);
//! - after SIGKILL, a crash or power loss through [`recover`] at the next start.
//!
//! Ownership: the guard holds an exclusive `flock` on `<state file>.lock` for its whole life (the
//! kernel drops it when the owner exits, however it exits). [`recover`] only touches a state file
//! whose lock it can take, i.e. whose owner is gone; a live owner's file is left alone and reported
//! as [`RestoreError::HeldByLiveOwner`] with the owner's pid. [`RestoreGuard::arm`] takes the same
//! lock first, so two commands never change the same drive's knob at once. Lock files stay (they
//! are empty; deleting a lock file would race with its next user).
//!
//! A state file is deleted only after read-back shows the original value. FID 02h is not
//! persistent across a power cycle unless saved (§5.3) and we never save, so after a reboot the
//! restore is a verified no-op. The serial is checked so a renamed controller (`nvme0` ↔ `nvme1`
//! after a reboot) is not touched by mistake; the drive is then looked up by serial.
//!
//! To guard another knob, add it to [`crate::governor::Knob`]; the state file stores the FID.

use crate::governor::{Governor, Knob, SetOutcome};
use crate::nvme_cli::NvmeCli;
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

// The error type is its own file (this one was over 600 lines); re-exported where it was.
mod error;
pub use error::RestoreError;

/// Prefix of state files in the state directory.
pub const STATE_FILE_PREFIX: &str = "wattflip-governor-";
const FORMAT: u32 = 1;

/// The content of a state file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateRecord {
    /// Format version (1).
    pub format: u32,
    /// Controller node, e.g. `/dev/nvme0`.
    pub device: String,
    /// Serial number of the drive (empty if unknown: then no serial check on recover).
    pub serial: String,
    /// Feature ID (2 = power management, 0xC6 = Intel governor).
    pub feature_id: u8,
    /// The whole original feature value (for FID 02h including the workload hint).
    pub original_value: u32,
    /// The original state (PS or mode), i.e. `original_value & mask`.
    pub original_state: u32,
    /// When the guard was armed (wall clock, seconds since the Unix epoch; for humans).
    pub created_unix_s: u64,
    /// Process that armed it.
    pub pid: u32,
    /// That process's start time (clock ticks after boot, `/proc/PID/stat` field 22), so a reused
    /// pid is not mistaken for the owner; 0 in files written before it was recorded.
    #[serde(default)]
    pub pid_start_ticks: u64,
}

/// A verified restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreReport {
    /// Controller node that was restored (may differ from the record after a rename).
    pub device: String,
    /// Feature ID.
    pub feature_id: u8,
    /// The state read back (= original state).
    pub state: u32,
    /// `false` when the drive was already in the original state and nothing was sent.
    pub wrote: bool,
    /// The state file that was removed.
    pub state_file: PathBuf,
}

struct Core {
    governor: Governor,
    record: StateRecord,
    path: PathBuf,
    /// A restore was attempted: no further sets.
    closing: bool,
    /// The original is verified back and the file is gone.
    restored: bool,
    /// The ownership lock, held until the guard is gone (after its restore).
    _lock: fs::File,
}

fn lock(core: &Mutex<Core>) -> MutexGuard<'_, Core> {
    // A panic while holding the lock must not stop the restore: take the data anyway.
    core.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Changes one knob of one controller and guarantees the original comes back. See the module docs.
pub struct RestoreGuard {
    core: Arc<Mutex<Core>>,
}

impl std::fmt::Debug for RestoreGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let core = lock(&self.core);
        f.debug_struct("RestoreGuard").field("record", &core.record).field("path", &core.path).finish()
    }
}

/// The state file path for a controller and feature.
pub fn state_file_path(state_dir: &Path, device: &str, feature_id: u8) -> PathBuf {
    let base: String = device.rsplit('/').next().unwrap_or(device).chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    state_dir.join(format!("{STATE_FILE_PREFIX}{base}-fid{feature_id:02x}.json"))
}

impl RestoreGuard {
    /// Reads the current value, writes the state file, registers with `registry` (if given).
    /// Nothing is changed on the drive.
    pub fn arm(governor: Governor, serial: &str, state_dir: &Path, registry: Option<&RestoreRegistry>) -> Result<Self, RestoreError> {
        let device = governor.controller().to_string();
        let knob = governor.knob();
        fs::create_dir_all(state_dir).map_err(|source| RestoreError::Io { path: state_dir.into(), source })?;
        let path = state_file_path(state_dir, &device, knob.feature_id());
        let lock = take_lock(&path, &device)?;
        if path.exists() {
            return Err(RestoreError::AlreadyArmed { device, path });
        }
        let original_value = governor.read_raw().map_err(|source| RestoreError::Nvme { device: device.clone(), path: path.clone(), source })?;
        let original_state = original_value & knob.mask();
        if knob == Knob::PowerState {
            if let Some(ps) = governor.power_states().iter().find(|p| u32::from(p.index) == original_state) {
                if !ps.operational {
                    return Err(RestoreError::OriginalNotRestorable { device, state: original_state });
                }
            }
        }
        let record = StateRecord {
            format: FORMAT,
            device,
            serial: serial.trim().to_string(),
            feature_id: knob.feature_id(),
            original_value,
            original_state,
            created_unix_s: u64::try_from(wattflip_units::UnixNanos::now().0 / 1_000_000_000).unwrap_or(0),
            pid: std::process::id(),
            pid_start_ticks: start_ticks(Path::new("/proc/self/stat")).unwrap_or(0),
        };
        write_state_file(&path, &record)?;
        let core = Arc::new(Mutex::new(Core { governor, record, path, closing: false, restored: false, _lock: lock }));
        if let Some(registry) = registry {
            registry.register(&core);
        }
        Ok(RestoreGuard { core })
    }

    /// The recorded original.
    pub fn record(&self) -> StateRecord {
        lock(&self.core).record.clone()
    }

    /// The state file.
    pub fn state_file(&self) -> PathBuf {
        lock(&self.core).path.clone()
    }

    /// Sets a new state through the governor (validated: never a non-operational state).
    /// Fails with [`RestoreError::Finished`] once a restore has started (e.g. from a signal).
    pub fn set(&self, target: u32) -> Result<SetOutcome, RestoreError> {
        let core = lock(&self.core);
        if core.closing {
            return Err(RestoreError::Finished { device: core.record.device.clone() });
        }
        Ok(core.governor.set(target)?)
    }

    /// Restores the original, verifies it and removes the state file.
    pub fn restore(self) -> Result<RestoreReport, RestoreError> {
        let mut core = lock(&self.core);
        restore_core(&mut core)
    }
}

impl Drop for RestoreGuard {
    fn drop(&mut self) {
        let mut core = lock(&self.core);
        // An explicit or signal-driven restore already ran; if it failed, its state file stays
        // for recover() rather than hammering the drive again here.
        if core.closing {
            return;
        }
        match restore_core(&mut core) {
            Ok(r) => {
                tracing::info!(device = %r.device, state = r.state, "restored original power state on drop")
            }
            Err(e) => {
                tracing::error!(error = %e, "restoring the original power state on drop failed")
            }
        }
    }
}

fn restore_core(core: &mut Core) -> Result<RestoreReport, RestoreError> {
    core.closing = true;
    if core.restored {
        return Ok(RestoreReport {
            device: core.record.device.clone(),
            feature_id: core.record.feature_id,
            state: core.record.original_state,
            wrote: false,
            state_file: core.path.clone(),
        });
    }
    let report = restore_value(&core.governor, &core.record, &core.path)?;
    core.restored = true;
    Ok(report)
}

/// Puts `record.original_value` back on `governor`'s controller, verifies, removes `path`.
fn restore_value(governor: &Governor, record: &StateRecord, path: &Path) -> Result<RestoreReport, RestoreError> {
    let knob = governor.knob();
    let device = governor.controller().to_string();
    let mask = knob.mask();
    let expected = record.original_value & mask;
    let nvme_err = |source| RestoreError::Nvme { device: device.clone(), path: path.to_path_buf(), source };
    let current = governor.read_raw().map_err(nvme_err)?;
    let wrote = current & mask != expected;
    if wrote {
        match governor.write_and_check(record.original_value, current & mask) {
            SetOutcome::Applied { .. } => {}
            SetOutcome::Refused { status, .. } => return Err(RestoreError::Refused { device, knob, original: expected, status, path: path.to_path_buf() }),
            SetOutcome::Ignored { observed, .. } => return Err(RestoreError::NotVerified { device, knob, expected, observed, path: path.to_path_buf() }),
            SetOutcome::Failed { error, .. } => return Err(nvme_err(error)),
        }
    }
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => return Err(RestoreError::Io { path: path.to_path_buf(), source }),
    }
    if let Some(dir) = path.parent() {
        let _ = sync_dir(dir);
    }
    Ok(RestoreReport { device, feature_id: record.feature_id, state: expected, wrote, state_file: path.to_path_buf() })
}

/// The lock file of a state file.
pub fn lock_file_path(state_file: &Path) -> PathBuf {
    state_file.with_extension("lock")
}

/// Process start time in clock ticks after boot: field 22 of `/proc/PID/stat` (after the `)` that
/// closes the command name, which may itself contain spaces and parentheses).
fn start_ticks(stat: &Path) -> Option<u64> {
    let text = fs::read_to_string(stat).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    // After ")": field 3 (state) is the first; field 22 is the 20th.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Takes the exclusive ownership lock of `state_file` without waiting. When another process holds
/// it, says who (from the state file it wrote).
fn take_lock(state_file: &Path, device: &str) -> Result<fs::File, RestoreError> {
    let lock_path = lock_file_path(state_file);
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock_path)
        .map_err(|source| RestoreError::Io { path: lock_path.clone(), source })?;
    match rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(f),
        Err(e) if e == rustix::io::Errno::WOULDBLOCK => {
            let record = read_record(state_file).ok();
            let owner = match &record {
                Some(r) => {
                    let alive = r.pid_start_ticks != 0 && start_ticks(Path::new(&format!("/proc/{}/stat", r.pid))) == Some(r.pid_start_ticks);
                    format!("pid {}{}, armed at {} s after the epoch", r.pid, if alive { " (alive)" } else { "" }, r.created_unix_s)
                }
                None => format!("the holder of {}", lock_path.display()),
            };
            Err(RestoreError::HeldByLiveOwner { device: device.to_string(), owner, pid: record.map(|r| r.pid), path: state_file.to_path_buf() })
        }
        Err(e) => Err(RestoreError::Io { path: lock_path, source: e.into() }),
    }
}

fn write_state_file(path: &Path, record: &StateRecord) -> Result<(), RestoreError> {
    let io_err = |source| RestoreError::Io { path: path.to_path_buf(), source };
    let json = serde_json::to_vec_pretty(record).map_err(|e| RestoreError::Io { path: path.to_path_buf(), source: io::Error::other(e) })?;
    let tmp = path.with_extension("json.tmp");
    let mut f = fs::File::create(&tmp).map_err(io_err)?;
    f.write_all(&json).map_err(io_err)?;
    f.write_all(b"\n").map_err(io_err)?;
    f.sync_all().map_err(io_err)?;
    drop(f);
    fs::rename(&tmp, path).map_err(io_err)?;
    if let Some(dir) = path.parent() {
        sync_dir(dir).map_err(io_err)?;
    }
    Ok(())
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

/// Restores every live guard on demand, e.g. from the agent's SIGTERM/SIGINT task:
///
/// ```no_run
/// # use wattflip_drives::RestoreRegistry;
/// let registry = RestoreRegistry::new();
/// // pass `Some(&registry)` to every RestoreGuard::arm, then in the signal task:
/// for result in registry.restore_all() {
///     if let Err(e) = result { eprintln!("{e}"); }
/// }
/// ```
///
/// Cloning shares the registry. It holds weak references: a dropped guard has already restored
/// (or left its state file for [`recover`]).
#[derive(Clone, Default)]
pub struct RestoreRegistry {
    inner: Arc<Mutex<Vec<Weak<Mutex<Core>>>>>,
}

impl std::fmt::Debug for RestoreRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestoreRegistry").field("pending", &self.pending()).finish()
    }
}

impl RestoreRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    fn register(&self, core: &Arc<Mutex<Core>>) {
        let mut list = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        list.retain(|w| w.strong_count() > 0);
        list.push(Arc::downgrade(core));
    }

    /// Guards that are alive and not yet restored.
    pub fn pending(&self) -> usize {
        let list = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        list.iter().filter_map(Weak::upgrade).filter(|c| !lock(c).restored).count()
    }

    /// Restores every pending guard (waiting for an in-flight set on the same controller to
    /// finish first). Later `set` calls on those guards fail with [`RestoreError::Finished`].
    pub fn restore_all(&self) -> Vec<Result<RestoreReport, RestoreError>> {
        let cores: Vec<Arc<Mutex<Core>>> = {
            let list = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            list.iter().filter_map(Weak::upgrade).collect()
        };
        cores
            .iter()
            .filter_map(|c| {
                let mut core = lock(c);
                if core.restored {
                    core.closing = true;
                    return None;
                }
                Some(restore_core(&mut core))
            })
            .collect()
    }
}

/// What [`recover`] did with one state file.
#[derive(Debug)]
pub struct Recovery {
    /// The state file.
    pub path: PathBuf,
    /// Its content, if it parsed.
    pub record: Option<StateRecord>,
    /// The restore, or why the file was kept.
    pub result: Result<RestoreReport, RestoreError>,
}

/// At start-up: restores every state file left in `state_dir` by a crashed run, verifies, and
/// removes the files whose original state is back. A file whose owner is still alive (it holds the
/// ownership lock) is left alone: its entry is [`RestoreError::HeldByLiveOwner`]. A missing
/// directory means nothing to do.
pub fn recover(state_dir: &Path, nvme: &NvmeCli) -> Result<Vec<Recovery>, RestoreError> {
    let entries = match fs::read_dir(state_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(RestoreError::Io { path: state_dir.into(), source }),
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(STATE_FILE_PREFIX)))
        .collect();
    paths.sort();
    let mut out = Vec::new();
    for path in paths {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if name.ends_with(".json.tmp") {
            // A crash between create and rename: nothing was changed yet (arm writes the file
            // before the first set), so the half-written file can go, unless its owner is alive
            // and about to rename it.
            let state = path.with_extension("");
            if take_lock(&state, "").is_ok() {
                let _ = fs::remove_file(&path);
            }
            continue;
        }
        if !name.ends_with(".json") {
            continue;
        }
        let record = match read_record(&path) {
            Ok(r) => r,
            Err(e) => {
                out.push(Recovery { path, record: None, result: Err(e) });
                continue;
            }
        };
        // Held while restoring, so no new guard arms on the drive in between.
        let result = take_lock(&path, &record.device).and_then(|_lock| {
            // The owner may have finished (and removed the file) while we waited for nothing.
            if !path.exists() {
                return Ok(None);
            }
            recover_one(&path, &record, nvme).map(Some)
        });
        let result = match result {
            Ok(None) => continue,
            Ok(Some(r)) => Ok(r),
            Err(e) => Err(e),
        };
        out.push(Recovery { path, record: Some(record), result });
    }
    Ok(out)
}

fn read_record(path: &Path) -> Result<StateRecord, RestoreError> {
    let text = fs::read_to_string(path).map_err(|source| RestoreError::Io { path: path.into(), source })?;
    let record: StateRecord = serde_json::from_str(&text).map_err(|e| RestoreError::Corrupt { path: path.into(), detail: e.to_string() })?;
    if record.format != FORMAT {
        return Err(RestoreError::Corrupt { path: path.into(), detail: format!("unknown format {}", record.format) });
    }
    Ok(record)
}

fn recover_one(path: &Path, record: &StateRecord, nvme: &NvmeCli) -> Result<RestoreReport, RestoreError> {
    let knob = Knob::from_feature_id(record.feature_id)
        .ok_or_else(|| RestoreError::Corrupt { path: path.into(), detail: format!("feature {:#04x} is not a governor knob", record.feature_id) })?;
    let device = locate(path, record, nvme)?;
    let governor = Governor::for_restore(nvme.clone(), device, knob);
    restore_value(&governor, record, path)
}

/// The controller that has the recorded serial: the recorded node if its serial matches (or the
/// serial cannot be read: the restore itself will then report the real problem), else the
/// controller `nvme list` shows with that serial.
fn locate(path: &Path, record: &StateRecord, nvme: &NvmeCli) -> Result<String, RestoreError> {
    if record.serial.is_empty() {
        return Ok(record.device.clone());
    }
    let found = match nvme.id_ctrl(&record.device) {
        Ok(id) if id.serial == record.serial => return Ok(record.device.clone()),
        Ok(id) => id.serial,
        Err(_) => String::new(),
    };
    if let Ok(list) = nvme.list() {
        if let Some(ctrl) = list.iter().find(|n| n.serial == record.serial).and_then(|n| n.controller.clone()) {
            return Ok(ctrl);
        }
    }
    if found.is_empty() {
        return Ok(record.device.clone());
    }
    Err(RestoreError::SerialMismatch { device: record.device.clone(), expected: record.serial.clone(), found, path: path.into() })
}
