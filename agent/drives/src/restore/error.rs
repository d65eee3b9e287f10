//! What can go wrong arming, restoring or recovering a power state ([`RestoreError`]), each case
//! naming the state file or device and what to do. A new failure gets a variant here.

use crate::governor::{GovernorError, Knob};
use crate::nvme_cli::{NvmeError, NvmeStatus};
use std::io;
use std::path::PathBuf;

/// Arming, restoring or recovering failed. The state file is kept whenever the original state is
/// not verified, so [`recover`](super::recover) retries at the next start.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// State directory or file I/O.
    #[error(
        "state file {path}: {source}; the state directory must be writable, and without it the \
         agent must not change power states"
    )]
    Io {
        /// File or directory.
        path: PathBuf,
        /// OS error.
        #[source]
        source: io::Error,
    },
    /// A state file that does not parse.
    #[error(
        "state file {path} is unreadable ({detail}); restore by hand with `nvme set-feature <dev> \
         --feature-id=<fid> --value=<original>` and delete the file"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// A state file for this controller and feature already exists.
    #[error(
        "{path} already exists: an earlier run did not restore {device}; call recover() before \
         arming again (or another agent instance is running)"
    )]
    AlreadyArmed {
        /// Controller node.
        device: String,
        /// The existing file.
        path: PathBuf,
    },
    /// The current state is non-operational, so it could not be put back safely.
    #[error(
        "{device}: current PS{state} is non-operational (APST or the host put the drive there); \
         not arming: the governor could not restore it"
    )]
    OriginalNotRestorable {
        /// Controller node.
        device: String,
        /// The current state.
        state: u32,
    },
    /// The requested change was rejected before reaching the drive.
    #[error(transparent)]
    Governor(#[from] GovernorError),
    /// nvme-cli failed while arming or restoring.
    #[error("{device}: {source}; state file {path} is kept and recover() will retry at the next start")]
    Nvme {
        /// Controller node.
        device: String,
        /// The state file.
        path: PathBuf,
        /// The nvme-cli error.
        #[source]
        source: NvmeError,
    },
    /// The drive refused to take the original value back.
    #[error(
        "{device}: restoring {knob} {original} was refused with NVMe status {status}; state file \
         {path} is kept: check the drive by hand"
    )]
    Refused {
        /// Controller node.
        device: String,
        /// What was restored.
        knob: Knob,
        /// The original state.
        original: u32,
        /// The status.
        status: NvmeStatus,
        /// The state file.
        path: PathBuf,
    },
    /// Read-back after restore does not show the original value.
    #[error(
        "{device}: restored {knob} {expected} but read-back shows {observed}; state file {path} \
         is kept and recover() will retry"
    )]
    NotVerified {
        /// Controller node.
        device: String,
        /// What was restored.
        knob: Knob,
        /// The original state.
        expected: u32,
        /// What the drive reports.
        observed: u32,
        /// The state file.
        path: PathBuf,
    },
    /// The controller at the recorded path has another serial and no controller has the recorded
    /// one.
    #[error(
        "{device} now has serial {found:?}, not {expected:?}, and no controller has that serial; \
         state file {path} is kept (the drive may be gone)"
    )]
    SerialMismatch {
        /// Recorded controller node.
        device: String,
        /// Recorded serial.
        expected: String,
        /// Serial found at that node.
        found: String,
        /// The state file.
        path: PathBuf,
    },
    /// Another live process holds this drive's guard: it is changing the power state and will
    /// restore it itself.
    #[error(
        "{device} is held by another wattflip process ({owner}), which is changing its power state \
         and restores the original itself; wait for it to finish, or stop it (`kill -TERM <pid>`) \
         so its guard restores; state file {path} is left alone"
    )]
    HeldByLiveOwner {
        /// Controller node.
        device: String,
        /// "pid 1234 (alive, armed at 1764021600 s after the epoch)", or what is known.
        owner: String,
        /// Owner's pid, when its state file says.
        pid: Option<u32>,
        /// The state file.
        path: PathBuf,
    },
    /// The guard already restored (shutdown in progress): no more changes.
    #[error("{device}: the original state was already restored (shutdown in progress); not changing it again")]
    Finished {
        /// Controller node.
        device: String,
    },
}
