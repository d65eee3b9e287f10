//! An NVMe completion status as nvme-cli reports it, read from its stderr. A leaf: the command
//! runner classifies a failed command by it and the nvme-cli wrapper reports it, so it sits below
//! both (`crate::nvme_cli::NvmeStatus` re-exports it). A new status to recognise gets a predicate
//! here and a line in [`NvmeStatus::advice`].

use std::fmt;

/// An NVMe completion status as nvme-cli prints it: `(SCT << 8 | SC)` plus DNR `0x4000` and
/// More `0x2000`, e.g. `0x410e`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NvmeStatus(pub u16);

impl NvmeStatus {
    /// Finds `NVMe status: <name>: <text>(0xSSSS)` in stderr. Returns the status and the text
    /// between `NVMe status:` and the code. nvme-cli 2.x exits 1 for every error, so the status
    /// must come from here, not from the exit code (§6.2).
    pub fn from_stderr(stderr: &str) -> Option<(NvmeStatus, String)> {
        stderr.lines().find_map(|line| {
            let rest = line.trim().strip_prefix("NVMe status:")?;
            let open = rest.rfind('(')?;
            let inner = rest[open + 1..].trim_end().strip_suffix(')')?;
            let hex = inner.strip_prefix("0x").or_else(|| inner.strip_prefix("0X")).unwrap_or(inner);
            let code = u16::from_str_radix(hex, 16).ok()?;
            Some((NvmeStatus(code), rest[..open].trim().to_string()))
        })
    }

    /// Do Not Retry.
    pub fn dnr(self) -> bool {
        self.0 & 0x4000 != 0
    }
    /// Status Code Type.
    pub fn sct(self) -> u8 {
        ((self.0 >> 8) & 0x7) as u8
    }
    /// Status Code.
    pub fn sc(self) -> u8 {
        (self.0 & 0xff) as u8
    }
    fn key(self) -> (u8, u8) {
        (self.sct(), self.sc())
    }
    /// SCT 1 / SC 0Eh (`0x410e` with DNR).
    pub fn is_feature_not_changeable(self) -> bool {
        self.key() == (1, 0x0e)
    }
    /// SCT 1 / SC 0Dh (`0x410d`).
    pub fn is_feature_not_saveable(self) -> bool {
        self.key() == (1, 0x0d)
    }
    /// SCT 0 / SC 02h (`0x4002`): feature or value not supported.
    pub fn is_invalid_field(self) -> bool {
        self.key() == (0, 0x02)
    }

    /// What to do about this status.
    pub fn advice(self) -> &'static str {
        if self.is_feature_not_changeable() {
            "the controller does not allow changing this feature: leave the governor off for this drive"
        } else if self.is_feature_not_saveable() {
            "the feature cannot be saved: set it without --save"
        } else if self.is_invalid_field() {
            "the controller does not support this feature or value: check id-ctrl (npss, vendor) first"
        } else if self.dnr() {
            "the controller says retrying will not help"
        } else {
            "the command may succeed if retried later"
        }
    }
}

impl fmt::Display for NvmeStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#06x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_text() {
        let (s, msg) = NvmeStatus::from_stderr("NVMe status: Feature Not Changeable: The Feature Identifier is not able to be changed(0x410e)\n")
            .unwrap_or((NvmeStatus(0), String::new()));
        assert_eq!(s, NvmeStatus(0x410e));
        assert!(s.dnr() && s.is_feature_not_changeable());
        assert_eq!(msg, "Feature Not Changeable: The Feature Identifier is not able to be changed");
        assert_eq!(s.to_string(), "0x410e");
    }
}
