//! smartctl's exit status and version, read before its output (`smartctl.8`, EXIT STATUS; the
//! smartmontools man page at https://www.smartmontools.org/browser/trunk/smartmontools/smartctl.8.in):
//! the status is a bit mask, bit 0 "command line did not parse", bit 1 "device open failed, or the
//! device is in a low-power mode (`-n`)", bit 2 "some SMART or other ATA command failed, or a
//! checksum error", bit 3 "SMART status: disk failing", bit 4 "prefail attributes at or below
//! threshold", bit 5 "some attributes were at or below threshold in the past", bit 6 "the device
//! error log contains errors", bit 7 "the self-test log contains errors". Bits 0–1 mean the call
//! gave no data; bits 2–7 come with data. JSON output (`--json`) exists from smartmontools 7.0
//! on: an older smartctl is told to upgrade, not the parser to be extended. To recognise another
//! cause in a failed call's text, extend [`advice`].

use std::fmt;

/// smartctl's exit status bits (`smartctl.8`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SmartctlExit(pub u8);

impl SmartctlExit {
    /// Bit 0: command line did not parse (a bug on our side).
    pub fn command_line_error(self) -> bool {
        self.0 & 0x01 != 0
    }
    /// Bit 1: device open failed, IDENTIFY failed, or the device is in a low-power mode (`-n`).
    pub fn device_open_failed(self) -> bool {
        self.0 & 0x02 != 0
    }
    /// Bit 2: some SMART or other command failed; data is partial.
    pub fn command_failed(self) -> bool {
        self.0 & 0x04 != 0
    }
    /// Bit 3: SMART status "FAILING"; for NVMe this means critical_warning ≠ 0.
    pub fn disk_failing(self) -> bool {
        self.0 & 0x08 != 0
    }
    /// Bit 4: a prefail attribute is at or below its threshold.
    pub fn prefail_at_threshold(self) -> bool {
        self.0 & 0x10 != 0
    }
    /// Bit 5: an attribute was at or below its threshold in the past.
    pub fn attribute_past_threshold(self) -> bool {
        self.0 & 0x20 != 0
    }
    /// Bit 6: the error log has entries.
    pub fn error_log_entries(self) -> bool {
        self.0 & 0x40 != 0
    }
    /// Bit 7: the self-test log has errors.
    pub fn self_test_errors(self) -> bool {
        self.0 & 0x80 != 0
    }
    /// Bits 0 or 1: the call failed and there is no data.
    pub fn is_call_failure(self) -> bool {
        self.0 & 0x03 != 0
    }
    /// Bits 3–7: drive-health information (data valid).
    pub fn health_bits(self) -> u8 {
        self.0 & 0xf8
    }
}

impl fmt::Display for SmartctlExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            "command line error",
            "device open failed",
            "a command failed",
            "SMART status failing",
            "prefail attribute at threshold",
            "attribute past threshold",
            "error log has entries",
            "self-test log has errors",
        ];
        let set: Vec<&str> = (0..8).filter(|b| self.0 & (1 << b) != 0).map(|b| names[b]).collect();
        if set.is_empty() {
            write!(f, "exit 0")
        } else {
            write!(f, "exit {} ({})", self.0, set.join(", "))
        }
    }
}

/// What to do about a failed call, from its exit bits and what it printed.
pub(crate) fn advice(exit: SmartctlExit, text: &str) -> &'static str {
    let lower = text.to_ascii_lowercase();
    if lower.contains("unrecognized option") || lower.contains("unknown option") {
        "this smartctl does not know an option wattflip passes (JSON output needs smartmontools 7.0 or later): check `smartctl --version` and upgrade smartmontools"
    } else if exit.command_line_error() {
        "smartctl rejected the command line: check `smartctl --version` (wattflip needs 7.0 or later) and the `-d` type"
    } else if lower.contains("permission denied") || lower.contains("operation not permitted") {
        "needs root (or CAP_SYS_ADMIN + CAP_SYS_RAWIO): run as root or grant the capabilities"
    } else if lower.contains("standby") || lower.contains("sleep") {
        "the drive is in a low-power mode: no data this cycle, poll later"
    } else {
        "no data this cycle: check the device still exists"
    }
}

/// The oldest smartctl with `--json` (smartmontools 7.0, 2018-12-30).
pub const MIN_JSON_VERSION: (u32, u32) = (7, 0);

/// The version in `smartctl --version`'s first line: `smartctl 7.3 2022-02-28 r5338 […]` → (7, 3);
/// a development build's `smartctl pre-7.4 …` → (7, 4). `None` when the line is not of that form.
pub fn parse_version(stdout: &str) -> Option<(u32, u32)> {
    let mut words = stdout.lines().next()?.split_whitespace();
    if words.next()? != "smartctl" {
        return None;
    }
    let v = words.next()?;
    let (major, minor) = v.strip_prefix("pre-").unwrap_or(v).split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}
