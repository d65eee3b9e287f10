//! wattflip drives: what the agent knows about its SSDs and the one knob it turns.
//!
//! Layout (one module per tool or concern; extend by adding a module and re-exporting it here; a
//! new external tool is a wrapper holding a [`Tool`], like [`NvmeCli`] and [`Smartctl`]):
//! - [`command`]: the [`CommandRunner`] seam every external tool goes through (argv, `LC_ALL=C`,
//!   deadline, kill on timeout), [`Tool`] (one program behind a runner: path and deadline, the
//!   plumbing of every tool wrapper) and [`CommandError`], which keeps argv, exit status and stderr.
//! - `fake` (feature `test-support` only): scripted and emulating runners for tests.
//! - [`nvme_cli`]: nvme-cli wrappers and parsers (`list`, `id-ctrl`, `smart-log`, `get/set-feature`),
//!   tolerant of the nvme-cli 2.3 and later layouts (docs/sources-and-drives.md §6).
//! - [`smartctl`]: `smartctl --json` scan and health reports for NVMe and ATA, exit bits decoded (§7).
//! - [`smartctl_exit`]: smartctl's exit bits and version, read before its output (7.0+ for JSON).
//! - [`smartctl_nvme`]: smartctl's NVMe power states and thresholds (when nvme-cli is absent).
//! - [`powermode`]: `-n standby` so sleeping disks stay asleep; a skipped read is a power mode.
//! - [`smartctl_mode`]: the power-mode words and their parsers, shared by `smartctl` and `powermode`.
//! - [`sysfs`]: `/sys/class/nvme` inventory without privileges; the sysfs root is a parameter.
//! - [`inventory`]: merges the sources into [`Drive`]s.
//! - [`thermal`]: one thermal snapshot type from either tool, with throttle detection (§8).
//! - [`governor`]: FID 02h power states and Intel FID C6h PowerGovernorMode, with read-back (§5.3).
//! - [`restore`]: state file + [`RestoreGuard`] + [`RestoreRegistry`] + [`recover`] so the
//!   original power state always comes back, even after SIGKILL.
//! - [`sweep`]: the order in which a governor sweep visits operational states.
//! - [`crosscheck`]: one drive seen by several sources must agree on identity and temperature.
//! - [`units`]: [`Celsius`] and [`Watts`].
//!
//! Library code never panics; every error names the command, device or file involved and says what
//! to do next.

pub mod command;
pub mod crosscheck;
#[cfg(any(test, feature = "test-support"))]
pub mod fake;
pub mod governor;
pub mod inventory;
mod jsonutil;
pub mod nvme_cli;
pub mod nvme_status;
pub mod powermode;
pub mod restore;
pub mod smartctl;
pub mod smartctl_exit;
pub mod smartctl_mode;
pub mod smartctl_nvme;
pub mod sweep;
pub mod sysfs;
pub mod thermal;
pub mod units;

pub use command::{CommandError, CommandOutput, CommandRunner, Exit, SystemRunner, Tool, DEFAULT_TIMEOUT};
pub use crosscheck::{cross_check, Disagreement, SourceView};
pub use governor::{Governor, GovernorError, IntelGovernorMode, Knob, SetOutcome};
pub use inventory::{discover, Discovery, Drive, Inventory, Transport};
pub use jsonutil::FieldProblem;
pub use nvme_cli::{CriticalWarning, FeatureCapabilities, IdCtrl, ListedNamespace, NvmeCli, NvmeError, NvmeStatus, PowerManagement, PowerState, SmartLog};
pub use powermode::{Checked, PowerCheck, PowerMode};
pub use restore::{recover, Recovery, RestoreError, RestoreGuard, RestoreRegistry, RestoreReport, StateRecord};
pub use smartctl::{Smartctl, SmartctlError, SmartctlExit, SmartctlReport};
pub use sweep::{plan_sweep, StepPurpose, SweepError, SweepOrder, SweepPlan, SweepStep};
pub use thermal::ThermalSnapshot;
pub use units::{Celsius, Watts};
