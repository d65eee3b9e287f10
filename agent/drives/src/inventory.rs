//! Drive inventory: merges sysfs (no privileges), `nvme list`, `nvme id-ctrl` (power states) and
//! `smartctl --scan-open` (SATA/SAS) into [`Drive`]s.
//!
//! Precedence: sysfs names the controller ↔ namespace relation (the `N` in `nvmeNn1` is the
//! subsystem instance, not the controller, under native multipath); `nvme list` fills capacity
//! and sector size where sysfs lacks them and covers hosts where sysfs is not mounted; id-ctrl adds
//! power states. One failing source only adds a line to [`Inventory::problems`]. To add a source,
//! give it a step in [`discover`] and a pure merge function with a fixture test.

use crate::command::{CommandError, Hint};
use crate::nvme_cli::{controller_of, IdCtrl, ListedNamespace, NvmeCli, NvmeError, PowerState};
use crate::powermode::Checked;
use crate::smartctl::{ScannedDevice, Smartctl, SmartctlError, SmartctlReport};
use crate::sysfs::{scan_nvme, SysfsController};
use crate::units::Celsius;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// How the drive is attached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Transport {
    /// NVMe over PCIe.
    Pcie,
    /// NVMe/TCP.
    Tcp,
    /// NVMe/RDMA.
    Rdma,
    /// NVMe/FC.
    Fc,
    /// NVMe loop (nvmet).
    Loop,
    /// SATA/ATA.
    Ata,
    /// SCSI/SAS.
    Scsi,
    /// Something else, as reported.
    Other(String),
    /// Not reported.
    Unknown,
}

impl Transport {
    /// From sysfs `transport`, nvme list `Transport` or smartctl `protocol`.
    pub fn parse(s: &str) -> Transport {
        match s.trim().to_ascii_lowercase().as_str() {
            "pcie" => Transport::Pcie,
            "tcp" => Transport::Tcp,
            "rdma" => Transport::Rdma,
            "fc" => Transport::Fc,
            "loop" => Transport::Loop,
            "ata" | "sat" | "sata" => Transport::Ata,
            "scsi" | "sas" => Transport::Scsi,
            "" => Transport::Unknown,
            other => Transport::Other(other.to_string()),
        }
    }
}

/// One drive (an NVMe namespace, or a SATA/SAS disk).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Drive {
    /// Block device (`/dev/nvme0n1`, `/dev/sda`); a controller without namespaces is listed by its
    /// controller node.
    pub name: String,
    /// NVMe controller node for admin commands (`/dev/nvme0`); `None` for ATA/SCSI.
    pub controller: Option<String>,
    /// smartctl's `-d` type the drive was found with (`sat`, `megaraid,1`, `sat+megaraid,0`):
    /// with `name` the drive's identity, since disks behind one RAID controller share a node
    /// (`/dev/bus/0`); `None` for NVMe drives found through sysfs or nvme-cli.
    #[serde(default)]
    pub device_type: Option<String>,
    /// Model.
    pub model: String,
    /// Serial.
    pub serial: String,
    /// Firmware revision.
    pub firmware: String,
    /// Capacity in bytes.
    pub capacity_bytes: Option<u64>,
    /// Logical block size in bytes.
    pub logical_block_size: Option<u32>,
    /// Transport.
    pub transport: Transport,
    /// Spinning media (`rotation_rate` ≠ 0); `Some(false)` for NVMe and SSDs, `None` if unknown.
    pub rotational: Option<bool>,
    /// NVMe power states (empty for ATA or when id-ctrl failed).
    pub power_states: Vec<PowerState>,
    /// NVMe WCTEMP (id-ctrl), when reported: the throttling detector's threshold.
    pub warning_temperature: Option<Celsius>,
    /// NVMe CCTEMP (id-ctrl), when reported.
    pub critical_temperature: Option<Celsius>,
}

/// What discovery found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Inventory {
    /// Drives, NVMe first in controller order, then smartctl-only drives.
    pub drives: Vec<Drive>,
    /// One line per failed source or device (the rest of the inventory is still valid).
    pub problems: Vec<String>,
}

/// Where to look.
#[derive(Debug, Clone)]
pub struct Discovery {
    /// sysfs root, normally `/sys`.
    pub sysfs_root: PathBuf,
    /// nvme-cli, if installed.
    pub nvme: Option<NvmeCli>,
    /// smartctl, if installed.
    pub smartctl: Option<Smartctl>,
}

fn no_topology(e: &NvmeError) -> bool {
    matches!(e, NvmeError::Command(CommandError::Failed { hint: Hint::NoNvme, .. }))
}

/// Runs every source and merges.
pub fn discover(d: &Discovery) -> Inventory {
    let mut problems = Vec::new();
    let scan = scan_nvme(&d.sysfs_root);
    problems.extend(scan.problems.iter().map(|e| e.to_string()));

    let mut listed = Vec::new();
    let mut id_ctrls = BTreeMap::new();
    if let Some(nvme) = &d.nvme {
        match nvme.list() {
            Ok(l) => listed = l,
            // nvme-cli 2.x exits 1 with "Failed to scan topology" where /sys/class/nvme has no
            // controller: on a host whose sysfs shows none either, that is no drive, not a fault.
            Err(e) if scan.controllers.is_empty() && no_topology(&e) => {}
            Err(e) => problems.push(e.to_string()),
        }
        // Fields `nvme list` printed but the parser could not use (and the fallbacks taken):
        // to the inventory's problems, which reach `inventory`, the log and an event.
        for ns in &listed {
            problems.extend(ns.problems.iter().map(|p| format!("`nvme list`, {}: {p}", ns.device_path)));
        }
        let mut controllers: Vec<String> = scan.controllers.iter().map(|c| format!("/dev/{}", c.name)).collect();
        controllers.extend(listed.iter().filter_map(|n| n.controller.clone()));
        controllers.sort();
        controllers.dedup();
        for ctrl in controllers {
            match nvme.id_ctrl(&ctrl) {
                Ok(id) => {
                    problems.extend(id.problems.iter().map(|p| format!("`nvme id-ctrl {ctrl}`: {p}")));
                    id_ctrls.insert(ctrl, id);
                }
                Err(e) => problems.push(e.to_string()),
            }
        }
    }
    let mut drives = merge_nvme(&scan.controllers, &listed, &id_ctrls);

    if let Some(smartctl) = &d.smartctl {
        match smartctl.scan_open() {
            Ok(devices) => {
                for dev in devices {
                    add_scanned(smartctl, &dev, &mut drives, &mut problems);
                }
            }
            Err(e) => problems.push(e.to_string()),
        }
    }
    Inventory { drives, problems }
}

/// One `smartctl --scan-open` entry: a new drive (one per (node, `-d` type): MegaRAID disks share
/// `/dev/bus/N`), or the smartctl view of an NVMe drive nvme-cli did not describe.
fn add_scanned(smartctl: &Smartctl, dev: &ScannedDevice, drives: &mut Vec<Drive>, problems: &mut Vec<String>) {
    if let Some(err) = &dev.open_error {
        problems.push(format!("smartctl cannot open {}: {err}", dev.name));
        return;
    }
    let device_type = (!dev.device_type.is_empty()).then(|| dev.device_type.clone());
    let known = drives.iter().any(|drv| {
        drv.controller.as_deref() == Some(dev.name.as_str()) || (drv.name == dev.name && (drv.device_type.is_none() || drv.device_type == device_type))
    });
    if known {
        // An NVMe drive nvme-cli did not describe (not installed, or id-ctrl failed): smartctl's
        // power states and thresholds stand in.
        let bare =
            drives.iter().any(|drv| drv.controller.as_deref() == Some(dev.name.as_str()) && drv.power_states.is_empty() && drv.warning_temperature.is_none());
        if bare {
            match smartctl.report(&dev.name, device_type.as_deref()) {
                Ok(r) => {
                    fill_from_smartctl(drives, &dev.name, &r);
                }
                Err(e) => problems.push(e.to_string()),
            }
        }
        return;
    }
    // `-n standby` (the configured check) on an ATA/SCSI drive's first read too: discovery must
    // not spin up a sleeping disk; NVMe types never get `-n` (`report_checked`).
    let nvme = dev.device_type == "nvme" || dev.protocol.eq_ignore_ascii_case("nvme");
    let check = smartctl.nocheck().filter(|_| !nvme);
    match smartctl.report_checked(&dev.name, device_type.as_deref(), check) {
        Ok(Checked::Report(r)) => {
            drives.push(Drive { device_type: device_type.or_else(|| Some(r.device.device_type.clone()).filter(|t| !t.is_empty())), ..drive_from_smartctl(&r) })
        }
        // Asleep: kept (the monitor polls it with the same check) with what the scan knows; its
        // identity is read once it is awake, never by waking it.
        Ok(Checked::Skipped(mode)) => {
            problems.push(format!(
                "{}{}: the drive is in {} mode; its identity is read when it is awake (wattflip does not wake it)",
                dev.name,
                device_type.as_deref().map(|t| format!(" (-d {t})")).unwrap_or_default(),
                mode.as_str()
            ));
            drives.push(drive_from_scan(dev, device_type));
        }
        // smartctl refuses the type itself (exit bit 0): no drive to poll, said once.
        Err(SmartctlError::CallFailed { exit, messages, .. }) if exit.command_line_error() => problems.push(format!(
            "smartctl refuses `-d {}` for {}: {messages}; the drive is not polled (check the controller's driver and smartctl's version)",
            dev.device_type, dev.name
        )),
        // Any other failure (a drive that hangs, a transient error) keeps the drive, with what the
        // scan knows: the monitor polls it and reports.
        Err(e) => {
            problems.push(e.to_string());
            drives.push(drive_from_scan(dev, device_type));
        }
    }
}

/// Merges sysfs controllers, `nvme list` namespaces and id-ctrl results (keyed by controller
/// node, e.g. `/dev/nvme0`). Pure: tested with fixtures.
pub fn merge_nvme(sysfs: &[SysfsController], listed: &[ListedNamespace], id_ctrls: &BTreeMap<String, IdCtrl>) -> Vec<Drive> {
    let mut drives: Vec<Drive> = Vec::new();
    let states = |ctrl: &str| id_ctrls.get(ctrl).map(|id| id.power_states.clone()).unwrap_or_default();
    for c in sysfs {
        let ctrl = format!("/dev/{}", c.name);
        let id = id_ctrls.get(&ctrl);
        let pick = |s: &str, f: fn(&IdCtrl) -> &String| {
            if s.is_empty() {
                id.map(|i| f(i).clone()).unwrap_or_default()
            } else {
                s.to_string()
            }
        };
        let base = Drive {
            name: ctrl.clone(),
            controller: Some(ctrl.clone()),
            device_type: None,
            model: pick(&c.model, |i| &i.model),
            serial: pick(&c.serial, |i| &i.serial),
            firmware: pick(&c.firmware, |i| &i.firmware),
            capacity_bytes: id.and_then(id_capacity),
            logical_block_size: None,
            rotational: Some(false),
            transport: c.transport.as_deref().map(Transport::parse).unwrap_or(Transport::Unknown),
            power_states: states(&ctrl),
            warning_temperature: id.and_then(IdCtrl::warning_temperature),
            critical_temperature: id.and_then(IdCtrl::critical_temperature),
        };
        if c.namespaces.is_empty() {
            drives.push(base);
            continue;
        }
        // TNVMCAP is the whole controller's: a fallback only for its single namespace.
        let single = c.namespaces.len() == 1;
        for ns in &c.namespaces {
            let name = format!("/dev/{}", ns.name);
            if drives.iter().any(|d| d.name == name) {
                continue; // the same multipath namespace seen through another controller
            }
            let l = listed.iter().find(|l| l.device_path == name);
            drives.push(Drive {
                name,
                capacity_bytes: ns.capacity_bytes.or_else(|| l.and_then(|l| l.capacity_bytes)).or(if single { base.capacity_bytes } else { None }),
                logical_block_size: ns.logical_block_size.or_else(|| l.and_then(|l| l.sector_size)),
                ..base.clone()
            });
        }
    }
    for l in listed {
        if drives.iter().any(|d| d.name == l.device_path) {
            continue;
        }
        let controller = l.controller.clone().or_else(|| controller_of(&l.device_path));
        let id = controller.as_deref().and_then(|c| id_ctrls.get(c));
        let or_id = |s: &str, f: fn(&IdCtrl) -> &String| {
            if s.is_empty() {
                id.map(|i| f(i).clone()).unwrap_or_default()
            } else {
                s.to_string()
            }
        };
        drives.push(Drive {
            name: l.device_path.clone(),
            model: or_id(&l.model, |i| &i.model),
            serial: or_id(&l.serial, |i| &i.serial),
            firmware: or_id(&l.firmware, |i| &i.firmware),
            capacity_bytes: l.capacity_bytes,
            logical_block_size: l.sector_size,
            rotational: Some(false),
            transport: l.transport.as_deref().map(Transport::parse).unwrap_or(Transport::Unknown),
            power_states: controller.as_deref().map(states).unwrap_or_default(),
            warning_temperature: id.and_then(IdCtrl::warning_temperature),
            critical_temperature: id.and_then(IdCtrl::critical_temperature),
            controller,
            device_type: None,
        });
    }
    drives
}

/// TNVMCAP in bytes, when it fits a u64 (16 EiB).
fn id_capacity(id: &IdCtrl) -> Option<u64> {
    id.capacity_bytes.and_then(|c| u64::try_from(c).ok())
}

/// A drive seen only by smartctl (SATA/SAS, or NVMe where sysfs and nvme-cli are unavailable).
pub fn drive_from_smartctl(r: &SmartctlReport) -> Drive {
    let nvme = r.device.protocol.eq_ignore_ascii_case("nvme") || r.device.device_type == "nvme";
    Drive {
        name: r.device.name.clone(),
        controller: nvme.then(|| controller_of(&r.device.name)).flatten(),
        device_type: Some(r.device.device_type.clone()).filter(|t| !t.is_empty()),
        model: r.model.clone().unwrap_or_default(),
        serial: r.serial.clone().unwrap_or_default(),
        firmware: r.firmware.clone().unwrap_or_default(),
        capacity_bytes: r.capacity_bytes,
        logical_block_size: r.logical_block_size,
        rotational: r.rotational(),
        transport: if nvme { Transport::Unknown } else { Transport::parse(&r.device.protocol) },
        power_states: r.nvme_capabilities.power_states.clone(),
        warning_temperature: r.nvme_capabilities.warning_temperature,
        critical_temperature: r.nvme_capabilities.critical_temperature,
    }
}

/// Fills the NVMe drives of `controller` that no nvme-cli id-ctrl described (no power states, no
/// thresholds) from smartctl's capabilities. Returns whether any drive took something.
fn fill_from_smartctl(drives: &mut [Drive], controller: &str, r: &SmartctlReport) -> bool {
    let caps = &r.nvme_capabilities;
    let mut filled = false;
    for d in drives.iter_mut().filter(|d| d.controller.as_deref() == Some(controller)) {
        if d.power_states.is_empty() && !caps.power_states.is_empty() {
            d.power_states = caps.power_states.clone();
            filled = true;
        }
        if d.warning_temperature.is_none() && d.critical_temperature.is_none() {
            (d.warning_temperature, d.critical_temperature) = (caps.warning_temperature, caps.critical_temperature);
            filled |= caps.warning_temperature.is_some() || caps.critical_temperature.is_some();
        }
    }
    filled
}

/// A scanned drive whose first report failed: identity unknown (empty, filled by a later
/// inventory), kept so that it is polled and its failures are reported where an operator looks.
fn drive_from_scan(dev: &ScannedDevice, device_type: Option<String>) -> Drive {
    let nvme = dev.protocol.eq_ignore_ascii_case("nvme") || dev.device_type == "nvme";
    Drive {
        name: dev.name.clone(),
        controller: nvme.then(|| controller_of(&dev.name)).flatten(),
        device_type,
        model: String::new(),
        serial: String::new(),
        firmware: String::new(),
        capacity_bytes: None,
        logical_block_size: None,
        transport: if nvme { Transport::Unknown } else { Transport::parse(&dev.protocol) },
        rotational: None,
        power_states: Vec::new(),
        warning_temperature: None,
        critical_temperature: None,
    }
}
