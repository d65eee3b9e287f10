//! Power-governor control: select an NVMe power state (FID 02h) or Intel's vendor
//! PowerGovernorMode (FID C6h), then read back and classify what the drive did.
//!
//! Rules (docs/sources-and-drives.md §5.3 "Governor rules"): only operational states (NOPS = 0, PS ≤ NPSS);
//! Intel C6h only on an allow-list keyed on `vid == 0x8086` and model; read back after every set;
//! never `--save`. The workload-hint bits of FID 02h are preserved when only the PS changes.
//! Changes must be wrapped in a [`crate::restore::RestoreGuard`] so the original state returns.
//!
//! To add a knob (e.g. OCP C7h), add a [`Knob`] variant with its FID, masks and validation.

use crate::nvme_cli::{FeatureCapabilities, FeatureSelect, IdCtrl, NvmeCli, NvmeError, NvmeStatus, PowerState, FID_INTEL_POWER_GOVERNOR, FID_POWER_MANAGEMENT};
use serde::{Deserialize, Serialize};
use std::fmt;

/// What the governor turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Knob {
    /// FID 02h Power Management, bits 4:0.
    PowerState,
    /// FID C6h Intel PowerGovernorMode, bits 7:0 (DC P3700 family).
    IntelPowerGovernor,
}

impl Knob {
    /// Feature identifier.
    pub fn feature_id(self) -> u8 {
        match self {
            Knob::PowerState => FID_POWER_MANAGEMENT,
            Knob::IntelPowerGovernor => FID_INTEL_POWER_GOVERNOR,
        }
    }
    /// The bits that hold the state.
    pub fn mask(self) -> u32 {
        match self {
            Knob::PowerState => 0x1f,
            Knob::IntelPowerGovernor => 0xff,
        }
    }
    /// Bits of the current value kept when setting a new state (FID 02h workload hint, 7:5).
    fn keep(self) -> u32 {
        match self {
            Knob::PowerState => 0xe0,
            Knob::IntelPowerGovernor => 0,
        }
    }
    /// The knob for a feature ID (used when reading state files).
    pub fn from_feature_id(fid: u8) -> Option<Knob> {
        match fid {
            FID_POWER_MANAGEMENT => Some(Knob::PowerState),
            FID_INTEL_POWER_GOVERNOR => Some(Knob::IntelPowerGovernor),
            _ => None,
        }
    }
}

impl fmt::Display for Knob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Knob::PowerState => f.write_str("power state (FID 02h)"),
            Knob::IntelPowerGovernor => f.write_str("Intel PowerGovernorMode (FID C6h)"),
        }
    }
}

/// Intel PowerGovernorMode values (SPDK `nvme_intel.h`, Intel blog; PCIe x4 figures).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum IntelGovernorMode {
    /// Mode 0: 25 W (40 W on x8 cards).
    Watts25 = 0,
    /// Mode 1: 20 W (35 W on x8 cards).
    Watts20 = 1,
    /// Mode 2: 10 W (25 W on x8 cards).
    Watts10 = 2,
}

impl IntelGovernorMode {
    /// From the feature value.
    pub fn from_value(v: u32) -> Option<Self> {
        match v & 0xff {
            0 => Some(Self::Watts25),
            1 => Some(Self::Watts20),
            2 => Some(Self::Watts10),
            _ => None,
        }
    }
    /// The feature value.
    pub fn value(self) -> u32 {
        self as u32
    }
}

/// Models known to implement FID C6h: the DC P3500/P3600/P3700/P3608 family (SPDK cites the
/// P3700 spec). Other Intel/Solidigm models are undocumented (docs/sources-and-drives.md §5.3, §12), so they are
/// not on the list; add a prefix here only after verifying on hardware.
const INTEL_C6_MODEL_PREFIXES: &[&str] = &["SSDPE2MD", "SSDPEDMD", "SSDPE2ME", "SSDPEDME", "SSDPE2MX", "SSDPEDMX", "SSDPECME"];

/// A request the governor will not send.
#[derive(Debug, thiserror::Error)]
pub enum GovernorError {
    /// The state is non-operational: the controller processes no IO there.
    #[error(
        "{controller}: PS{state} is non-operational (NOPS set: no IO is processed in it), refusing to \
         select it; operational states: {operational}"
    )]
    NonOperational {
        /// Controller node.
        controller: String,
        /// The rejected state.
        state: u32,
        /// The states that may be chosen, e.g. "PS0, PS1, PS2".
        operational: String,
    },
    /// The state is not in the PSD table (PS > NPSS).
    #[error("{controller}: PS{state} does not exist (the drive has PS0..=PS{max}); read id-ctrl again")]
    NoSuchState {
        /// Controller node.
        controller: String,
        /// The rejected state.
        state: u32,
        /// NPSS.
        max: u8,
    },
    /// The PSD table is empty.
    #[error("{controller}: no power-state table: read id-ctrl before building a governor")]
    NoPowerStates {
        /// Controller node.
        controller: String,
    },
    /// Not a PowerGovernorMode value.
    #[error("{controller}: Intel PowerGovernorMode {value} is not 0 (25 W), 1 (20 W) or 2 (10 W)")]
    BadIntelMode {
        /// Controller node.
        controller: String,
        /// The rejected value.
        value: u32,
    },
    /// The model is not on the C6h allow-list.
    #[error(
        "{controller}: {model:?} (vid {vid:#06x}) is not on the Intel PowerGovernorMode allow-list \
         (DC P3500/P3600/P3700/P3608); use FID 02h power states instead"
    )]
    IntelUnsupported {
        /// Controller node.
        controller: String,
        /// Model number.
        model: String,
        /// Vendor ID.
        vid: u16,
    },
}

/// What happened to a set request.
#[derive(Debug)]
pub enum SetOutcome {
    /// Read-back shows the requested state.
    Applied {
        /// The state before.
        previous: u32,
        /// The state now (= requested).
        current: u32,
    },
    /// The controller rejected the command with an NVMe status, e.g. `0x410e` Feature Not
    /// Changeable (QEMU, §10) or `0x4002` Invalid Field.
    Refused {
        /// The requested state.
        requested: u32,
        /// The status nvme-cli printed.
        status: NvmeStatus,
        /// nvme-cli's text for it.
        message: String,
    },
    /// The controller accepted the command but read-back does not show the requested state
    /// (usually the old one: some controllers silently ignore requests, nvme-cli#1580).
    Ignored {
        /// The requested state.
        requested: u32,
        /// The state before.
        previous: u32,
        /// What read-back shows.
        observed: u32,
    },
    /// Reading, setting or reading back failed for another reason (timeout, permission, …).
    Failed {
        /// The requested state.
        requested: u32,
        /// Why.
        error: NvmeError,
    },
}

impl SetOutcome {
    /// True for [`SetOutcome::Applied`].
    pub fn is_applied(&self) -> bool {
        matches!(self, SetOutcome::Applied { .. })
    }
}

impl fmt::Display for SetOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetOutcome::Applied { previous, current } => {
                write!(f, "applied: {previous} -> {current}")
            }
            SetOutcome::Refused { requested, status, message } => {
                write!(f, "refused {requested}: NVMe status {status} ({message}): {}", status.advice())
            }
            SetOutcome::Ignored { requested, previous, observed } => write!(f, "ignored: requested {requested}, was {previous}, read-back shows {observed}"),
            SetOutcome::Failed { requested, error } => {
                write!(f, "failed to set {requested}: {error}")
            }
        }
    }
}

/// One knob on one controller.
#[derive(Debug, Clone)]
pub struct Governor {
    nvme: NvmeCli,
    controller: String,
    knob: Knob,
    power_states: Vec<PowerState>,
}

impl Governor {
    /// FID 02h power states of `controller` (`/dev/nvme0`), with its PSD table from id-ctrl.
    pub fn power_state(nvme: NvmeCli, controller: impl Into<String>, power_states: Vec<PowerState>) -> Result<Self, GovernorError> {
        let controller = controller.into();
        if power_states.is_empty() {
            return Err(GovernorError::NoPowerStates { controller });
        }
        Ok(Governor { nvme, controller, knob: Knob::PowerState, power_states })
    }

    /// Intel FID C6h, only for allow-listed models.
    pub fn intel_power_governor(nvme: NvmeCli, controller: impl Into<String>, id: &IdCtrl) -> Result<Self, GovernorError> {
        let controller = controller.into();
        if !Self::intel_supported(id) {
            return Err(GovernorError::IntelUnsupported { controller, model: id.model.clone(), vid: id.vid });
        }
        Ok(Governor { nvme, controller, knob: Knob::IntelPowerGovernor, power_states: id.power_states.clone() })
    }

    /// Whether FID C6h is allow-listed for this controller.
    pub fn intel_supported(id: &IdCtrl) -> bool {
        let model = id.model.trim();
        let model = model.strip_prefix("INTEL").map(str::trim_start).unwrap_or(model);
        id.vid == 0x8086 && INTEL_C6_MODEL_PREFIXES.iter().any(|p| model.starts_with(p))
    }

    /// For restoring a recorded value: no PSD table needed, no validation (the value was read
    /// from the drive itself).
    pub(crate) fn for_restore(nvme: NvmeCli, controller: impl Into<String>, knob: Knob) -> Self {
        Governor { nvme, controller: controller.into(), knob, power_states: Vec::new() }
    }

    /// The knob.
    pub fn knob(&self) -> Knob {
        self.knob
    }
    /// The controller node.
    pub fn controller(&self) -> &str {
        &self.controller
    }
    /// The PSD table.
    pub fn power_states(&self) -> &[PowerState] {
        &self.power_states
    }
    /// The nvme-cli handle.
    pub fn nvme(&self) -> &NvmeCli {
        &self.nvme
    }

    /// The whole feature value (DW0), e.g. PS and WH for FID 02h.
    pub fn read_raw(&self) -> Result<u32, NvmeError> {
        self.nvme.get_feature(&self.controller, self.knob.feature_id(), FeatureSelect::Current)
    }

    /// The current state (PS, or the governor mode).
    pub fn current(&self) -> Result<u32, NvmeError> {
        Ok(self.read_raw()? & self.knob.mask())
    }

    /// SEL = 3 capabilities (changeable, saveable). QEMU reports 0 for FID 02h.
    pub fn capabilities(&self) -> Result<FeatureCapabilities, NvmeError> {
        self.nvme.get_feature(&self.controller, self.knob.feature_id(), FeatureSelect::Supported).map(FeatureCapabilities)
    }

    /// Checks a target without touching the drive.
    pub fn validate(&self, target: u32) -> Result<(), GovernorError> {
        match self.knob {
            Knob::IntelPowerGovernor => match IntelGovernorMode::from_value(target) {
                Some(_) if target <= 0xff => Ok(()),
                _ => Err(GovernorError::BadIntelMode { controller: self.controller.clone(), value: target }),
            },
            Knob::PowerState => {
                let max = self.power_states.iter().map(|p| p.index).max().unwrap_or(0);
                let Some(ps) = self.power_states.iter().find(|p| u32::from(p.index) == target) else {
                    return Err(GovernorError::NoSuchState { controller: self.controller.clone(), state: target, max });
                };
                if !ps.operational {
                    let operational = self.power_states.iter().filter(|p| p.operational).map(|p| format!("PS{}", p.index)).collect::<Vec<_>>().join(", ");
                    return Err(GovernorError::NonOperational { controller: self.controller.clone(), state: target, operational });
                }
                Ok(())
            }
        }
    }

    /// Validates, reads the current value, sets `target` (keeping the workload hint), reads back.
    pub fn set(&self, target: u32) -> Result<SetOutcome, GovernorError> {
        self.validate(target)?;
        Ok(self.write_verified(target))
    }

    /// Set and read back without validation (restore path and `set`).
    pub(crate) fn write_verified(&self, target: u32) -> SetOutcome {
        let mask = self.knob.mask();
        let target = target & mask;
        let before = match self.read_raw() {
            Ok(v) => v,
            Err(error) => return SetOutcome::Failed { requested: target, error },
        };
        let value = (before & self.knob.keep()) | target;
        self.write_and_check(value, before & mask)
    }

    /// Sends exactly `value` (all bits), then compares the masked read-back with `value`.
    pub(crate) fn write_and_check(&self, value: u32, previous: u32) -> SetOutcome {
        let mask = self.knob.mask();
        let requested = value & mask;
        if let Err(error) = self.nvme.set_feature(&self.controller, self.knob.feature_id(), value) {
            return match error.nvme_status() {
                Some(status) => {
                    let message = match &error {
                        NvmeError::Command(crate::command::CommandError::Failed { stderr, .. }) => {
                            NvmeStatus::from_stderr(stderr).map(|(_, m)| m).unwrap_or_default()
                        }
                        _ => String::new(),
                    };
                    SetOutcome::Refused { requested, status, message }
                }
                None => SetOutcome::Failed { requested, error },
            };
        }
        match self.read_raw() {
            Ok(now) if now & mask == requested => SetOutcome::Applied { previous, current: requested },
            Ok(now) => SetOutcome::Ignored { requested, previous, observed: now & mask },
            Err(error) => SetOutcome::Failed { requested, error },
        }
    }
}
