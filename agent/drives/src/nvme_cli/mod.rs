//! nvme-cli: [`NvmeCli`] builds argv for each subcommand, runs it through a [`CommandRunner`] and
//! hands stdout to a pure parser (one submodule per subcommand). Parsers accept every layout listed
//! in docs/sources-and-drives.md §6.3/§6.4 (nvme-cli 1.x, 2.3, 2.4+, forced-verbose 2.11/2.12).
//!
//! To support a new subcommand: add `fn` here that builds argv with **long options** (short ones
//! changed meaning in 2.7: `-v` became `--verbose`), and a parser module with fixture tests.

mod feature;
mod id_ctrl;
mod list;
mod smart_log;

pub use feature::{
    parse_get_feature, FeatureCapabilities, FeatureSelect, FeatureValue, NvmeStatus, PowerManagement, FID_INTEL_POWER_GOVERNOR, FID_POWER_MANAGEMENT,
};
pub use id_ctrl::{parse_id_ctrl, IdCtrl, PowerState};
pub use list::{controller_of, parse_list, ListedNamespace};
pub use smart_log::{parse_smart_log, CriticalWarning, SmartLog, ThermalMgmt};

use crate::command::{CommandError, CommandOutput, CommandRunner, Tool};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// An nvme-cli call failed or printed something we cannot read.
#[derive(Debug, thiserror::Error)]
pub enum NvmeError {
    /// Running the command failed (not found, timeout, non-zero exit with stderr and hint).
    #[error(transparent)]
    Command(#[from] CommandError),
    /// The output did not parse.
    #[error(
        "`{command}`: cannot read nvme-cli output as {what}: {detail}; save the output as a fixture \
         under tests/fixtures/nvme/ and extend the parser"
    )]
    Parse {
        /// Full command line.
        command: String,
        /// What we expected (e.g. "id-ctrl JSON").
        what: &'static str,
        /// What went wrong.
        detail: String,
    },
    /// A device argument that is not a `/dev/…` path (it would be taken as an option).
    #[error("device {device:?} is not a /dev path: refusing to pass it to nvme-cli")]
    BadDevice {
        /// The rejected argument.
        device: String,
    },
}

impl NvmeError {
    /// The NVMe status nvme-cli reported, if any (e.g. `0x410e` Feature Not Changeable).
    pub fn nvme_status(&self) -> Option<NvmeStatus> {
        match self {
            NvmeError::Command(e) => e.nvme_status(),
            _ => None,
        }
    }
}

/// nvme-cli's own version (`nvme version`), recorded with every capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmeCliVersion {
    /// Major.
    pub major: u32,
    /// Minor.
    pub minor: u32,
    /// The first line as printed, e.g. `nvme version 2.3 (git 2.3)`.
    pub raw: String,
}

impl fmt::Display for NvmeCliVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// Parses `nvme version 2.3 (git 2.3)` (Debian 12's "2.4+really2.3" prints 2.3, §6.1).
pub fn parse_version(stdout: &str) -> Option<NvmeCliVersion> {
    let line = stdout.lines().find(|l| l.trim_start().starts_with("nvme version"))?;
    let rest = line.trim_start().strip_prefix("nvme version")?.trim_start();
    let ver = rest.split_whitespace().next()?;
    let mut parts = ver.split(|c: char| !c.is_ascii_digit()).filter(|p| !p.is_empty());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
    Some(NvmeCliVersion { major, minor, raw: line.trim().to_string() })
}

/// nvme-cli behind a runner ([`Tool`]: program path, deadline, runner). Cheap to clone.
#[derive(Clone, Debug)]
pub struct NvmeCli {
    tool: Tool,
}

impl NvmeCli {
    /// `nvme` from PATH with [`crate::DEFAULT_TIMEOUT`].
    pub fn new(runner: Arc<dyn CommandRunner>) -> Self {
        NvmeCli { tool: Tool::new(runner, "nvme") }
    }

    /// Uses another executable (absolute path, or a fake in tests).
    pub fn with_program(self, program: impl Into<String>) -> Self {
        NvmeCli { tool: self.tool.with_program(program) }
    }

    /// Uses another deadline per call.
    pub fn with_timeout(self, timeout: Duration) -> Self {
        NvmeCli { tool: self.tool.with_timeout(timeout) }
    }

    /// The program that runs.
    pub fn program(&self) -> &str {
        self.tool.program()
    }

    /// Runs `nvme <args>` and requires exit 0.
    fn run_ok(&self, args: &[String]) -> Result<CommandOutput, NvmeError> {
        Ok(self.tool.run(args)?.into_success()?)
    }

    fn argv_line(&self, args: &[String]) -> String {
        self.tool.command_line(args)
    }

    /// `nvme version`.
    pub fn version(&self) -> Result<NvmeCliVersion, NvmeError> {
        let args = vec!["version".to_string()];
        let out = self.run_ok(&args)?;
        parse_version(&out.stdout).ok_or_else(|| NvmeError::Parse {
            command: self.argv_line(&args),
            what: "`nvme version` text",
            detail: format!("no `nvme version X.Y` line in {:?}", out.stdout),
        })
    }

    /// `nvme list -o json`: every namespace, in either layout.
    pub fn list(&self) -> Result<Vec<ListedNamespace>, NvmeError> {
        let args = strings(&["list", "-o", "json"]);
        let out = self.run_ok(&args)?;
        parse_list(&out.stdout).map_err(|detail| NvmeError::Parse { command: self.argv_line(&args), what: "`nvme list` JSON", detail })
    }

    /// `nvme id-ctrl DEV -o json`.
    pub fn id_ctrl(&self, controller: &str) -> Result<IdCtrl, NvmeError> {
        let args = vec!["id-ctrl".to_string(), dev(controller)?, "-o".into(), "json".into()];
        let out = self.run_ok(&args)?;
        parse_id_ctrl(&out.stdout).map_err(|detail| NvmeError::Parse { command: self.argv_line(&args), what: "id-ctrl JSON", detail })
    }

    /// `nvme smart-log DEV -o json` (no `--verbose`: it does not exist in 2.3, §6.1).
    pub fn smart_log(&self, controller: &str) -> Result<SmartLog, NvmeError> {
        let args = vec!["smart-log".to_string(), dev(controller)?, "-o".into(), "json".into()];
        let out = self.run_ok(&args)?;
        parse_smart_log(&out.stdout).map_err(|detail| NvmeError::Parse { command: self.argv_line(&args), what: "smart-log JSON", detail })
    }

    /// `nvme get-feature DEV --feature-id=F [--sel=S]`, text output (no JSON before 2.7, §6.2).
    pub fn get_feature(&self, controller: &str, fid: u8, sel: FeatureSelect) -> Result<u32, NvmeError> {
        let mut args = vec!["get-feature".to_string(), dev(controller)?, fid_arg(fid)];
        if sel != FeatureSelect::Current {
            args.push(format!("--sel={}", sel as u8));
        }
        let out = self.run_ok(&args)?;
        parse_get_feature(&out.stdout).map(|v| v.value).map_err(|detail| NvmeError::Parse { command: self.argv_line(&args), what: "get-feature text", detail })
    }

    /// `nvme set-feature DEV --feature-id=F --value=V` (long options: `-v` changed meaning in 2.7).
    /// Never `--save`: the agent's changes must vanish on power cycle (§5.3).
    pub fn set_feature(&self, controller: &str, fid: u8, value: u32) -> Result<(), NvmeError> {
        let args = vec!["set-feature".to_string(), dev(controller)?, fid_arg(fid), format!("--value={value}")];
        self.run_ok(&args).map(|_| ())
    }
}

/// `--feature-id=2` as docs/sources-and-drives.md §6.1 writes it; vendor FIDs in hex (`--feature-id=0xc6`), which
/// nvme-cli parses with `strtoul(.., 0)` like decimal.
fn fid_arg(fid: u8) -> String {
    if fid < 0x10 {
        format!("--feature-id={fid}")
    } else {
        format!("--feature-id={fid:#x}")
    }
}

fn strings(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// Only `/dev/…` paths go into argv: anything else could be read as an option.
fn dev(device: &str) -> Result<String, NvmeError> {
    if device.starts_with("/dev/") && !device.contains(char::is_whitespace) {
        Ok(device.to_string())
    } else {
        Err(NvmeError::BadDevice { device: device.to_string() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        let v = parse_version("nvme version 2.3 (git 2.3)\nlibnvme version 1.3 (git 1.3)\n");
        assert_eq!(v.map(|v| (v.major, v.minor)), Some((2, 3)));
        let v = parse_version("nvme version 2.11 (git 2.11)\n");
        assert_eq!(v.map(|v| (v.major, v.minor)), Some((2, 11)));
        assert!(parse_version("garbage").is_none());
    }

    #[test]
    fn devices_are_checked() {
        assert!(dev("/dev/nvme0").is_ok());
        assert!(dev("--help").is_err());
    }
}
