//! Sleeping disks stay asleep: smartctl's `-n POWERMODE` (`smartctl.8`, `--nocheck`) and what a
//! skipped read says.
//!
//! With `-n standby` smartctl first asks an ATA or SCSI drive for its power mode (CHECK POWER MODE,
//! or the SCSI sense data) and, when the drive is in that mode or a lower one, exits with status 2
//! (bit 1) **without** reading anything, printing `Device is in STANDBY mode, exit(2)` as an
//! `information` message and, for ATA, `power_mode {ata_value, name}` (smartmontools
//! `ataprint.cpp`, `scsiprint.cpp`; `smartctl.cpp` for `STANDBY (OS)`). A drive it did read carries
//! `power_mode` too (`ACTIVE or IDLE`). [`Smartctl::report_checked`] turns a skip into
//! [`Checked::Skipped`] with the drive's [`PowerMode`]: a fact to record, not an error. NVMe has no
//! such check (`-n` is ATA/SCSI only) and is never passed it. The mode words and their parsers
//! live in `smartctl_mode` (re-exported here), below the smartctl wrapper that reads a report's
//! mode through them; to support another mode name, extend [`PowerMode::from_smartctl`] there.

use crate::command::command_line;
use crate::smartctl::{parse_report, Smartctl, SmartctlError, SmartctlReport};
pub use crate::smartctl_mode::{parse_skip, report_mode, PowerCheck, PowerMode};
/// What a checked read gave.
#[derive(Debug, Clone, PartialEq)]
pub enum Checked {
    /// The drive was read (its `power_mode`, when smartctl printed one, is in [`Checked::mode`]).
    Report(Box<SmartctlReport>),
    /// smartctl left the drive alone: it is in this mode.
    Skipped(PowerMode),
}
impl Smartctl {
    /// `smartctl --json -a [-n CHECK] [-d TYPE] DEV`: a drive in `check`'s mode or lower is left
    /// alone ([`Checked::Skipped`]); `None` or an NVMe type passes no `-n`.
    pub fn report_checked(&self, device: &str, device_type: Option<&str>, check: Option<PowerCheck>) -> Result<Checked, SmartctlError> {
        let nvme = device_type == Some("nvme");
        let Some(check) = check.filter(|_| !nvme) else {
            return self.report(device, device_type).map(|r| Checked::Report(Box::new(r)));
        };
        let (stdout, stderr, argv) = self.run_report(device, device_type, &["-n", check.as_str()])?;
        if let Some(mode) = parse_skip(&stdout) {
            return Ok(Checked::Skipped(mode));
        }
        parse_report(&stdout, &stderr, &command_line(&argv)).map(|r| Checked::Report(Box::new(r)))
    }
}

impl Checked {
    /// The drive's power mode, when known (a skip always knows it).
    pub fn mode(&self) -> Option<PowerMode> {
        match self {
            Checked::Report(r) => r.power_mode,
            Checked::Skipped(m) => Some(*m),
        }
    }
}
