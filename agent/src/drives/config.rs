//! `[drives]` of the agent config: which tools to use (nvme-cli, smartctl), their paths and
//! deadline, the SMART interval, power check and worker count, and the governor's state folder, consent and sweep settings.
//! [`DrivesConfig::from_raw`] checks them and reports each problem at its `drives.<key>` path. A
//! new drive setting is a field here, its check in `from_raw` and a line in
//! `agent/agent.example.toml`.

use super::sweep::SweepPattern;
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;
use wattflip_drives::PowerCheck;
use wattflip_infra::duration::{Bounded, DAY, HOUR};
use wattflip_infra::tomlcfg::Loader;

/// `[drives]`: nvme-cli and smartctl (inventory, temperatures, SMART) and the power governor.
#[derive(Debug, Clone, PartialEq)]
pub struct DrivesConfig {
    /// Use nvme-cli (inventory, power states, `smart-log` temperatures, governor).
    pub nvme_cli: bool,
    /// Use smartctl (SATA/SAS inventory, temperatures of every drive).
    pub smartctl: bool,
    /// The nvme-cli executable (name on PATH or absolute path).
    pub nvme_path: String,
    /// The smartctl executable.
    pub smartctl_path: String,
    /// Deadline of one tool call; the child is killed after it (docs/sources-and-drives.md §9: 10–15 s).
    pub timeout: Duration,
    /// How often SMART logs are read (temperatures from the tools, `nvme_smart`, critical warnings).
    pub smart_interval: Duration,
    /// smartctl's `-n` for ATA/SCSI drives: below which power mode a drive is left asleep
    /// (`never`, `sleep`, `standby`, `idle`; `smartctl.8`). Default `standby`.
    pub smart_nocheck: PowerCheck,
    /// Drive reads that may run at once (each drive on its own interval; a hung one delays only
    /// itself).
    pub smart_workers: usize,
    /// Where the governor's restore state files live (must survive a crash; not tmpfs on reboot is fine).
    pub state_dir: PathBuf,
    /// Serials of block devices a governor sweep may write to.
    pub destroy_consent: Vec<String>,
    /// Patterns a governor sweep measures in each power state.
    pub sweep_patterns: Vec<SweepPattern>,
    /// Pause after each power-state change before measuring (entry latency, thermal settling).
    pub sweep_settle: Duration,
    /// Shortest IO deadline of a sweep's measurements: an IO still in flight after
    /// max(this, 100 × the longest IO so far) is a device fault; the sweep stops and restores.
    pub io_deadline_floor: Duration,
}

impl Default for DrivesConfig {
    fn default() -> Self {
        DrivesConfig {
            nvme_cli: true,
            smartctl: true,
            nvme_path: "nvme".into(),
            smartctl_path: "smartctl".into(),
            timeout: wattflip_drives::DEFAULT_TIMEOUT,
            smart_interval: Duration::from_secs(60),
            smart_nocheck: PowerCheck::Standby,
            // Enough that a few hung drives leave most workers to the others; cheap (idle threads).
            smart_workers: 8,
            state_dir: PathBuf::from("/var/lib/wattflip"),
            destroy_consent: Vec::new(),
            sweep_patterns: SweepPattern::defaults(),
            sweep_settle: Duration::from_secs(1),
            io_deadline_floor: Duration::from_secs(30),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct RawDrives {
    pub nvme_cli: Option<bool>,
    pub smartctl: Option<bool>,
    pub nvme_path: Option<String>,
    pub smartctl_path: Option<String>,
    pub timeout: Option<String>,
    pub smart_interval: Option<String>,
    pub smart_nocheck: Option<String>,
    pub smart_workers: Option<usize>,
    pub state_dir: Option<PathBuf>,
    pub destroy_consent: Option<Vec<String>>,
    pub sweep_patterns: Option<Vec<String>>,
    pub sweep_settle: Option<String>,
    pub io_deadline_floor: Option<String>,
}

/// `drives.sweep_settle` (and `governor sweep --settle`): the settle time after each power-state change.
pub const SWEEP_SETTLE: Bounded = Bounded::new(Duration::ZERO, HOUR);

impl DrivesConfig {
    /// Checks `[drives]`; problems go to `l` and the defaults stand in.
    pub fn from_raw(r: RawDrives, l: &mut Loader) -> DrivesConfig {
        let d = DrivesConfig::default();
        let dur = |key: &str, v: Option<String>, default: Duration, min: Duration, max: Duration, l: &mut Loader| {
            Bounded::new(min, max).read(key, v.as_deref(), default, l)
        };
        let timeout = dur("drives.timeout", r.timeout, d.timeout, Duration::from_millis(100), Duration::from_secs(600), l);
        // SMART reads are admin commands: more often than every second only perturbs the drive.
        let smart_interval = dur("drives.smart_interval", r.smart_interval, d.smart_interval, Duration::from_secs(1), DAY, l);
        let sweep_settle = SWEEP_SETTLE.read("drives.sweep_settle", r.sweep_settle.as_deref(), d.sweep_settle, l);
        let io_deadline_floor = dur("drives.io_deadline_floor", r.io_deadline_floor, d.io_deadline_floor, Duration::from_secs(1), HOUR, l);
        let (smart_nocheck, smart_workers) = smart_reads(r.smart_nocheck, r.smart_workers, &d, l);
        let mut tool = |key: &str, v: Option<String>, default: String| match v {
            Some(p) if p.trim().is_empty() || p.contains(char::is_whitespace) => {
                l.problem(key, format!("`{p}` is not an executable name or path"));
                default
            }
            Some(p) => p,
            None => default,
        };
        let nvme_path = tool("drives.nvme_path", r.nvme_path, d.nvme_path);
        let smartctl_path = tool("drives.smartctl_path", r.smartctl_path, d.smartctl_path);
        let destroy_consent = r.destroy_consent.unwrap_or_default();
        for (i, s) in destroy_consent.iter().enumerate() {
            if s.trim().is_empty() {
                l.problem(format!("drives.destroy_consent[{i}]"), "empty serial: name the drive whose data may be destroyed");
            }
        }
        let sweep_patterns = match r.sweep_patterns {
            None => d.sweep_patterns,
            Some(list) if list.is_empty() => {
                l.problem("drives.sweep_patterns", "empty: list at least one pattern such as \"SW:128KiB\"");
                d.sweep_patterns
            }
            Some(list) => {
                let mut out = Vec::new();
                for (i, s) in list.iter().enumerate() {
                    match s.parse::<SweepPattern>() {
                        Ok(p) => out.push(p),
                        Err(e) => l.problem(format!("drives.sweep_patterns[{i}]"), e),
                    }
                }
                out
            }
        };
        let state_dir = r.state_dir.unwrap_or(d.state_dir);
        l.check_dir("drives.state_dir", &state_dir);
        DrivesConfig {
            nvme_cli: r.nvme_cli.unwrap_or(d.nvme_cli),
            smartctl: r.smartctl.unwrap_or(d.smartctl),
            nvme_path,
            smartctl_path,
            timeout,
            smart_interval,
            smart_nocheck,
            smart_workers,
            state_dir,
            destroy_consent,
            sweep_patterns,
            sweep_settle,
            io_deadline_floor,
        }
    }
}

/// `drives.smart_nocheck` and `drives.smart_workers`, checked; the defaults stand in for bad values.
fn smart_reads(nocheck: Option<String>, workers: Option<usize>, d: &DrivesConfig, l: &mut Loader) -> (PowerCheck, usize) {
    let nocheck = match nocheck {
        None => d.smart_nocheck,
        Some(v) => PowerCheck::parse(&v).unwrap_or_else(|| {
            l.problem("drives.smart_nocheck", format!("`{v}` is not one of never, sleep, standby, idle (smartctl's -n modes)"));
            d.smart_nocheck
        }),
    };
    let workers = match workers {
        Some(n) if !(1..=256).contains(&n) => {
            l.problem("drives.smart_workers", format!("{n} is outside 1..=256"));
            d.smart_workers
        }
        Some(n) => n,
        None => d.smart_workers,
    };
    (nocheck, workers)
}
