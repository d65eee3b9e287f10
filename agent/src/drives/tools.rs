//! nvme-cli and smartctl on this host: which of them the agent may use ([`DriveTools`], from
//! `[drives]` in the config, each probed once through the runner), what they see
//! ([`DriveInventory`], from `wattflip_drives::discover`), and how that enriches the sysfs block
//! inventory of the Hello ([`DriveInventory::enrich`]).
//!
//! A missing tool or a host without drives is "not available on this host", never an error: the
//! note goes into the inventory and the other sources go on. To use another tool, add an
//! `Option<…>` field to [`DriveTools`] with its probe in [`DriveTools::probe`].

use super::config::DrivesConfig;
use std::path::Path;
use std::sync::Arc;
use wattflip_drives::{discover, CommandError, CommandRunner, Discovery, Drive, Inventory, NvmeCli, NvmeError, Smartctl, Transport};
use wattflip_proto::v1;

/// The tools the agent may run, each behind the same runner (real, or a fake in tests).
#[derive(Clone, Default)]
pub struct DriveTools {
    pub nvme: Option<NvmeCli>,
    pub smartctl: Option<Smartctl>,
    /// Why a tool is not used ("not available on this host: …").
    pub unavailable: Vec<String>,
}

impl std::fmt::Debug for DriveTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriveTools").field("nvme", &self.nvme).field("smartctl", &self.smartctl).field("unavailable", &self.unavailable).finish()
    }
}

impl DriveTools {
    /// Probes the enabled tools once (`nvme version`, `smartctl --version`): a tool that is not
    /// installed is left out with a note; one that runs but fails the probe is kept (the real
    /// commands will report their own errors, e.g. missing CAP_SYS_ADMIN).
    pub fn probe(cfg: &DrivesConfig, runner: Arc<dyn CommandRunner>) -> DriveTools {
        let mut t = DriveTools::default();
        if cfg.nvme_cli {
            let nvme = NvmeCli::new(runner.clone()).with_program(cfg.nvme_path.clone()).with_timeout(cfg.timeout);
            match nvme.version() {
                Err(NvmeError::Command(CommandError::NotFound { .. })) => {
                    t.unavailable.push(format!("nvme-cli: `{}` is not installed: install nvme-cli or set drives.nvme_path", cfg.nvme_path))
                }
                Ok(v) => {
                    tracing::info!(version = %v, program = %cfg.nvme_path, "nvme-cli found");
                    t.nvme = Some(nvme);
                }
                Err(e) => {
                    tracing::warn!("nvme-cli version probe failed (kept in use): {e}");
                    t.nvme = Some(nvme);
                }
            }
        } else {
            t.unavailable.push("nvme-cli: disabled by drives.nvme_cli = false".into());
        }
        if cfg.smartctl {
            let argv = vec![cfg.smartctl_path.clone(), "--version".to_string()];
            match runner.run(&argv, cfg.timeout) {
                Err(CommandError::NotFound { .. }) => {
                    t.unavailable.push(format!("smartctl: `{}` is not installed: install smartmontools or set drives.smartctl_path", cfg.smartctl_path))
                }
                other => {
                    let version = match &other {
                        Ok(out) => wattflip_drives::smartctl::parse_version(&out.stdout),
                        Err(e) => {
                            tracing::warn!("smartctl version probe failed (kept in use): {e}");
                            None
                        }
                    };
                    if let Some((major, minor)) = version.filter(|v| *v < wattflip_drives::smartctl::MIN_JSON_VERSION) {
                        // Its answers would not be JSON: the tool is the problem, not the parser.
                        t.unavailable.push(format!(
                            "smartctl: `{}` is smartctl {major}.{minor}, which has no JSON output (`--json` needs smartmontools 7.0 or later): upgrade smartmontools; SATA/SAS drives are not read until then",
                            cfg.smartctl_path
                        ));
                        return t;
                    }
                    if other.is_ok() && version.is_none() {
                        tracing::warn!("`{} --version` printed no version wattflip can read (kept in use)", cfg.smartctl_path);
                    }
                    t.smartctl = Some(Smartctl::new(runner).with_program(cfg.smartctl_path.clone()).with_timeout(cfg.timeout).with_nocheck(cfg.smart_nocheck));
                }
            }
        } else {
            t.unavailable.push("smartctl: disabled by drives.smartctl = false".into());
        }
        t
    }

    /// Whether any tool is usable.
    pub fn any(&self) -> bool {
        self.nvme.is_some() || self.smartctl.is_some()
    }
}

/// What the tools (and `/sys/class/nvme`) found.
#[derive(Debug, Clone, Default)]
pub struct DriveInventory {
    pub drives: Vec<Drive>,
    /// One line per failed source or device.
    pub problems: Vec<String>,
    /// Tools not used, and "no drives" when the tools ran but found none.
    pub unavailable: Vec<String>,
}

/// `/dev/nvme0` → `nvme0`; the device tag of temperatures and SMART points.
pub fn tag_of(dev: &str) -> String {
    dev.strip_prefix("/dev/").unwrap_or(dev).to_string()
}

/// The device tag of a drive: its node's [`tag_of`], plus `:` and smartctl's `-d` type when the
/// type addresses one disk behind the node (`megaraid,1`, `sat+megaraid,0`, `cciss,2`: a type
/// with a disk number), so every disk behind a RAID controller's `/dev/bus/0` is its own series.
pub fn drive_tag(node: &str, device_type: Option<&str>) -> String {
    match device_type {
        Some(t) if t.contains(',') => format!("{}:{t}", tag_of(node)),
        _ => tag_of(node),
    }
}

/// A drive's identity: [`drive_tag`] of its node and `-d` type, the one key its inventory entry
/// (`StorageDevice.name`), its temperature and SMART points, its thermal limits and the drives
/// `inventory` prints are all under, so two disks behind one RAID node are two identities.
pub fn drive_identity(d: &Drive) -> String {
    drive_tag(&d.name, d.device_type.as_deref())
}

impl DriveInventory {
    /// Runs discovery with the usable tools.
    pub fn discover(tools: &DriveTools, sysfs_root: &Path) -> DriveInventory {
        let mut unavailable = tools.unavailable.clone();
        if !tools.any() {
            return DriveInventory { unavailable, ..Default::default() };
        }
        let Inventory { drives, problems } =
            discover(&Discovery { sysfs_root: sysfs_root.to_path_buf(), nvme: tools.nvme.clone(), smartctl: tools.smartctl.clone() });
        for p in &problems {
            tracing::warn!("drive discovery: {p}");
        }
        if drives.is_empty() {
            unavailable.push("drives: nvme-cli/smartctl found no NVMe or SATA drive on this host".into());
        }
        DriveInventory { drives, problems, unavailable }
    }

    /// Controllers (NVMe) and smartctl-only drives, each once: what the SMART monitor polls.
    pub fn health_devices(&self) -> Vec<HealthDevice> {
        let mut out: Vec<HealthDevice> = Vec::new();
        for d in &self.drives {
            let (node, nvme, device_type) = match &d.controller {
                Some(c) => (c.clone(), true, None),
                None => (d.name.clone(), false, d.device_type.clone()),
            };
            let tag = drive_tag(&node, device_type.as_deref());
            if out.iter().any(|h| h.tag == tag) {
                continue;
            }
            let identified = !(d.model.trim().is_empty() && d.serial.trim().is_empty());
            out.push(HealthDevice { tag, node, device_type, serial: d.serial.clone(), nvme, identified });
        }
        out
    }

    /// Fills the sysfs block inventory with what the tools know (identity where sysfs had none,
    /// power states, controller) and adds drives sysfs did not show (no sysfs, or SATA behind a
    /// HBA that only smartctl reaches).
    pub fn enrich(&self, devices: &mut Vec<v1::StorageDevice>) {
        for d in &self.drives {
            let name = drive_identity(d);
            let fill = |slot: &mut String, v: &str| {
                if slot.is_empty() {
                    *slot = v.trim().to_string();
                }
            };
            match devices.iter_mut().find(|s| s.name == name) {
                Some(s) => {
                    fill(&mut s.model, &d.model);
                    fill(&mut s.serial, &d.serial);
                    fill(&mut s.firmware, &d.firmware);
                    fill(&mut s.controller, &d.controller.as_deref().map(tag_of).unwrap_or_default());
                    // sysfs first; the tools fill what it could not read (or read as 0).
                    if s.capacity_bytes.unwrap_or(0) == 0 {
                        s.capacity_bytes = d.capacity_bytes.or(s.capacity_bytes);
                    }
                    if s.logical_block_size.unwrap_or(0) == 0 {
                        s.logical_block_size = d.logical_block_size.or(s.logical_block_size);
                    }
                    if s.rotational.is_none() {
                        s.rotational = d.rotational;
                    }
                    if s.power_states.is_empty() {
                        s.power_states = power_states(d);
                    }
                }
                None => devices.push(storage_device(d)),
            }
        }
        devices.sort_by(|a, b| a.name.cmp(&b.name));
    }

    /// WCTEMP/CCTEMP per controller, with the namespaces whose probe runs belong to it.
    pub fn thermal_limits(&self) -> Vec<v1::DriveThermalLimits> {
        let mut out: Vec<v1::DriveThermalLimits> = Vec::new();
        for d in &self.drives {
            if d.warning_temperature.is_none() && d.critical_temperature.is_none() {
                continue;
            }
            // The same tag as the drive's temperature and SMART points (`drive_tag`).
            let device = match &d.controller {
                Some(c) => tag_of(c),
                None => drive_identity(d),
            };
            let ns = drive_identity(d);
            match out.iter_mut().find(|l| l.device == device) {
                Some(l) => {
                    if !l.namespaces.contains(&ns) && ns != device {
                        l.namespaces.push(ns);
                    }
                }
                None => out.push(v1::DriveThermalLimits {
                    namespaces: if ns != device { vec![ns] } else { Vec::new() },
                    device,
                    serial: d.serial.trim().to_string(),
                    warning_celsius: d.warning_temperature.map(|c| c.0).unwrap_or(0.0),
                    critical_celsius: d.critical_temperature.map(|c| c.0).unwrap_or(0.0),
                }),
            }
        }
        out
    }
}

/// A drive the tools found, as the Hello inventory lists it (under [`drive_identity`]): what sysfs
/// did not show, or (the SMART monitor) a disk whose identity is read after discovery.
pub fn storage_device(d: &Drive) -> v1::StorageDevice {
    v1::StorageDevice {
        name: drive_identity(d),
        model: d.model.trim().to_string(),
        serial: d.serial.trim().to_string(),
        firmware: d.firmware.trim().to_string(),
        // What no tool reported stays absent (no field in the store), never 0/false.
        capacity_bytes: d.capacity_bytes,
        logical_block_size: d.logical_block_size,
        transport: transport_name(&d.transport, d.controller.is_some()),
        rotational: d.rotational,
        power_states: power_states(d),
        controller: d.controller.as_deref().map(tag_of).unwrap_or_default(),
        // Not in sysfs's block class, so no sysfs address.
        sysfs_address: String::new(),
    }
}

fn power_states(d: &Drive) -> Vec<v1::PowerStateDescriptor> {
    d.power_states
        .iter()
        .map(|p| v1::PowerStateDescriptor {
            state: u32::from(p.index),
            max_watts: p.max_power.map(|w| w.0).unwrap_or(0.0),
            operational: p.operational,
            entry_latency_us: p.entry_latency_us,
            exit_latency_us: p.exit_latency_us,
        })
        .collect()
}

/// One device the SMART monitor polls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthDevice {
    /// Node the tools are run on: `/dev/nvme0` (controller) or `/dev/sda`.
    pub node: String,
    /// Device tag of its points: `nvme0`, `sda`, `bus/0:megaraid,1` ([`drive_tag`]).
    pub tag: String,
    /// smartctl's `-d` type for this drive (`sat`, `megaraid,1`); `None`: NVMe (`-d nvme`) or none.
    pub device_type: Option<String>,
    pub serial: String,
    /// NVMe (smart-log applies) or not (smartctl only).
    pub nvme: bool,
    /// Whether discovery read its model or serial; not for a disk asleep then, or whose first
    /// report failed (`identify`: read by the first full report of a later poll).
    pub identified: bool,
}

fn transport_name(t: &Transport, nvme: bool) -> String {
    match t {
        Transport::Ata => "sata".into(),
        Transport::Scsi => "scsi".into(),
        _ if nvme => "nvme".into(),
        Transport::Other(s) => s.to_ascii_lowercase(),
        _ => "other".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wattflip_drives::fake::{FakeNvme, ScriptedRunner, SetBehaviour};

    fn fixture(rel: &str) -> String {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("drives/tests/fixtures").join(rel);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    fn qemu_fake() -> Arc<FakeNvme> {
        Arc::new(FakeNvme::new().with_list(&fixture("nvme/qemu-nvme-cli-2.3-list.json")).with_controller(
            "/dev/nvme0",
            &fixture("nvme/qemu-nvme-cli-2.3-id-ctrl.json"),
            0,
            SetBehaviour::Refuse,
        ))
    }

    /// `smartctl --version` is read: smartctl 6.6 (Ubuntu 18.04's; banner as smartctl 6.6 prints
    /// it, e.g. in the Ubuntu forum outputs of `smartctl -a`) has no `--json`, so smartctl is not
    /// used and the note says to upgrade it; 7.3 and a `pre-7.4` build are used.
    #[test]
    fn smartctl_older_than_7_0_is_not_used_and_the_note_says_upgrade() {
        let cfg = DrivesConfig { nvme_cli: false, ..Default::default() };
        let banner = |v: &str| {
            format!(
                "smartctl {v} [x86_64-linux-4.15.0-20-generic] (local build)\nCopyright (C) 2002-16, Bruce Allen, Christian Franke, www.smartmontools.org\n"
            )
        };
        let runner = Arc::new(ScriptedRunner::new());
        runner.expect(&["smartctl", "--version"], 0, &banner("6.6 2016-05-31 r4324"), "");
        let t = DriveTools::probe(&cfg, runner.clone());
        assert!(t.smartctl.is_none());
        assert_eq!(
            t.unavailable[1],
            "smartctl: `smartctl` is smartctl 6.6, which has no JSON output (`--json` needs smartmontools 7.0 or later): upgrade smartmontools; SATA/SAS drives are not read until then"
        );
        for v in ["7.3 2022-02-28 r5338", "pre-7.4 2023-08-01 r5530"] {
            runner.expect(&["smartctl", "--version"], 0, &banner(v), "");
            assert!(DriveTools::probe(&cfg, runner.clone()).smartctl.is_some(), "{v}");
        }
        assert_eq!(runner.remaining(), 0);
    }

    #[test]
    fn missing_tools_are_not_available_notes() {
        let cfg = DrivesConfig { nvme_path: "/nonexistent/nvme".into(), smartctl_path: "/nonexistent/smartctl".into(), ..Default::default() };
        let t = DriveTools::probe(&cfg, Arc::new(wattflip_drives::SystemRunner::new()));
        assert!(!t.any());
        assert_eq!(
            t.unavailable,
            vec![
                "nvme-cli: `/nonexistent/nvme` is not installed: install nvme-cli or set drives.nvme_path".to_string(),
                "smartctl: `/nonexistent/smartctl` is not installed: install smartmontools or set drives.smartctl_path".to_string(),
            ]
        );
        let inv = DriveInventory::discover(&t, Path::new("/nonexistent-sys"));
        assert!(inv.drives.is_empty());
        assert_eq!(inv.unavailable.len(), 2);
    }

    /// A SAS drive seen only by smartctl, from a real smartctl 7.4 capture (Seagate ST373453LC,
    /// tests/fixtures/captures/PROVENANCE.md; the scan line is constructed): identity from the
    /// scsi_* fields and rotational from rotation_rate 15015 reach the inventory.
    #[test]
    fn sas_drive_from_smartctl_keeps_identity_and_rotation() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/captures/smartctl/sce-7.4-sas-seagate-st373453lc.json");
        let report = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let scan = r#"{"smartctl":{"version":[7,4],"exit_status":0},"devices":[{"name":"/dev/sdb","info_name":"/dev/sdb","type":"scsi","protocol":"SCSI"}]}"#;
        let runner = Arc::new(ScriptedRunner::new());
        runner.expect(&["smartctl", "--scan-open", "--json"], 0, scan, "");
        runner.expect(&["smartctl", "--json", "-a", "-n", "standby", "-d", "scsi", "/dev/sdb"], 0, &report, "");
        let t = DriveTools { nvme: None, smartctl: Some(wattflip_drives::Smartctl::new(runner.clone())), unavailable: Vec::new() };
        let inv = DriveInventory::discover(&t, Path::new("/nonexistent-sys"));
        assert!(inv.problems.is_empty(), "{:?}", inv.problems);
        let mut devices = Vec::new();
        inv.enrich(&mut devices);
        assert_eq!(devices.len(), 1);
        let d = &devices[0];
        assert_eq!((d.name.as_str(), d.model.as_str(), d.serial.as_str(), d.firmware.as_str()), ("sdb", "SEAGATE ST373453LC", "REDACTED", "DX10"));
        assert_eq!((d.capacity_bytes, d.logical_block_size, d.rotational), (Some(73_407_820_800), Some(512), Some(true)));
        assert_eq!(runner.remaining(), 0);
    }

    #[test]
    fn qemu_drive_enriches_the_block_inventory() {
        let cfg = DrivesConfig { smartctl: false, ..Default::default() };
        let t = DriveTools::probe(&cfg, qemu_fake());
        assert!(t.nvme.is_some());
        let inv = DriveInventory::discover(&t, Path::new("/nonexistent-sys"));
        assert!(inv.problems.is_empty(), "{:?}", inv.problems);
        // sysfs knew the namespace but not its identity: the tools fill it in.
        let mut devices = vec![v1::StorageDevice { name: "nvme0n1".into(), transport: "nvme".into(), ..Default::default() }];
        inv.enrich(&mut devices);
        assert_eq!(devices.len(), 1);
        let d = &devices[0];
        assert_eq!((d.model.as_str(), d.serial.as_str(), d.firmware.as_str()), ("QEMU NVMe Ctrl", "deadbeef", "7.2.22"));
        assert_eq!(d.controller, "nvme0");
        assert_eq!((d.capacity_bytes, d.logical_block_size, d.rotational), (Some(1_073_741_824), Some(512), Some(false)), "sysfs had none: the tools' values");
        assert_eq!(d.power_states, vec![v1::PowerStateDescriptor { state: 0, max_watts: 25.0, operational: true, entry_latency_us: 16, exit_latency_us: 4 }]);
        // Without sysfs the drive is added from nvme list.
        let mut none = Vec::new();
        inv.enrich(&mut none);
        assert_eq!(none.len(), 1);
        assert_eq!((none[0].name.as_str(), none[0].capacity_bytes, none[0].transport.as_str()), ("nvme0n1", Some(1_073_741_824), "nvme"));
        // nvme list's SectorSize; NVMe never rotates.
        assert_eq!((none[0].logical_block_size, none[0].rotational), (Some(512), Some(false)));
        assert_eq!(
            inv.thermal_limits(),
            vec![v1::DriveThermalLimits {
                device: "nvme0".into(),
                serial: "deadbeef".into(),
                warning_celsius: 69.85,
                critical_celsius: 99.85,
                namespaces: vec!["nvme0n1".into()],
            }]
        );
        assert_eq!(
            inv.health_devices(),
            vec![HealthDevice { node: "/dev/nvme0".into(), tag: "nvme0".into(), device_type: None, serial: "deadbeef".into(), nvme: true, identified: true }]
        );
    }

    #[test]
    fn no_drives_is_a_note_not_an_error() {
        let runner = ScriptedRunner::new();
        runner.expect(&["nvme", "version"], 0, "nvme version 2.3 (git 2.3)\n", "");
        runner.expect(&["nvme", "list", "-o", "json"], 0, "{\"Devices\":[]}\n", "");
        let cfg = DrivesConfig { smartctl: false, ..Default::default() };
        let runner = Arc::new(runner);
        let t = DriveTools::probe(&cfg, runner.clone());
        let inv = DriveInventory::discover(&t, Path::new("/nonexistent-sys"));
        assert_eq!(
            inv.unavailable,
            vec!["smartctl: disabled by drives.smartctl = false".to_string(), "drives: nvme-cli/smartctl found no NVMe or SATA drive on this host".to_string()]
        );
        assert_eq!(runner.remaining(), 0);
    }

    fn capture(name: &str) -> String {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/captures/smartctl").join(name);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    /// Disks behind a MegaRAID controller share one node, `/dev/bus/0`, and differ by their `-d`
    /// type (smartmontools `os_linux.cpp`, `linux_megaraid_device`; real smartctl 7.1 captures,
    /// tests/fixtures/captures/PROVENANCE.md): each (node, type) pair is its own drive, read with
    /// its type, its points tagged `bus/0:megaraid,N`. A type smartctl refuses (exit 1, "INVALID
    /// ARGUMENT TO -d") is one problem line, not a drive polled (and refused) every interval.
    #[test]
    fn megaraid_disks_on_one_node_are_each_a_drive_read_with_its_type() {
        let scan = r#"{"smartctl":{"version":[7,1],"exit_status":0},"devices":[
{"name":"/dev/bus/0","info_name":"/dev/bus/0 [megaraid_disk_00] [SAT]","type":"sat+megaraid,0","protocol":"ATA"},
{"name":"/dev/bus/0","info_name":"/dev/bus/0 [megaraid_disk_01]","type":"megaraid,1","protocol":"SCSI"},
{"name":"/dev/bus/0","info_name":"/dev/bus/0 [megaraid_disk_02]","type":"megaraid,2","protocol":"SCSI"},
{"name":"/dev/bus/0","info_name":"/dev/bus/0 [megaraid_disk_09]","type":"megaraid,9","protocol":"SCSI"}]}"#;
        let refused =
            r#"{"smartctl":{"version":[7,1],"exit_status":1,"messages":[{"string":"=======> INVALID ARGUMENT TO -d: megaraid,9","severity":"error"}]}}"#;
        let (sat0, sas1, sas2) = (
            capture("sce-7.1-sata-megaraid0-samsung-mz7kh480-exit4.json"),
            capture("sce-7.1-sas-megaraid1-toshiba-mg08sca16tey.json"),
            capture("sce-7.1-sas-megaraid2-toshiba-mg08sca16tey.json"),
        );
        let runner = Arc::new(ScriptedRunner::new());
        runner.expect(&["smartctl", "--scan-open", "--json"], 0, scan, "");
        runner.expect(&["smartctl", "--json", "-a", "-n", "standby", "-d", "sat+megaraid,0", "/dev/bus/0"], 4, &sat0, "");
        runner.expect(&["smartctl", "--json", "-a", "-n", "standby", "-d", "megaraid,1", "/dev/bus/0"], 0, &sas1, "");
        runner.expect(&["smartctl", "--json", "-a", "-n", "standby", "-d", "megaraid,2", "/dev/bus/0"], 0, &sas2, "");
        runner.expect(&["smartctl", "--json", "-a", "-n", "standby", "-d", "megaraid,9", "/dev/bus/0"], 1, refused, "");
        let t = DriveTools { nvme: None, smartctl: Some(wattflip_drives::Smartctl::new(runner.clone())), unavailable: Vec::new() };
        let inv = DriveInventory::discover(&t, Path::new("/nonexistent-sys"));
        assert_eq!(inv.problems.len(), 1, "{:?}", inv.problems);
        assert!(inv.problems[0].contains("INVALID ARGUMENT TO -d: megaraid,9"), "{}", inv.problems[0]);
        let mut devices = Vec::new();
        inv.enrich(&mut devices);
        let got: Vec<(&str, &str, &str, Option<bool>)> =
            devices.iter().map(|d| (d.name.as_str(), d.model.as_str(), d.transport.as_str(), d.rotational)).collect();
        assert_eq!(
            got,
            vec![
                ("bus/0:megaraid,1", "TOSHIBA MG08SCA16TEY", "scsi", Some(true)),
                ("bus/0:megaraid,2", "TOSHIBA MG08SCA16TEY", "scsi", Some(true)),
                ("bus/0:sat+megaraid,0", "MZ7KH480HAHQ0D3", "sata", Some(false)),
            ]
        );
        // The monitor reads each disk with its own type (and `-n standby`, as these captures were
        // taken): 30 °C, 31 °C and 30 °C as captured.
        runner.expect(&["smartctl", "--json", "-a", "-n", "standby", "-d", "sat+megaraid,0", "/dev/bus/0"], 4, &sat0, "");
        runner.expect(&["smartctl", "--json", "-a", "-n", "standby", "-d", "megaraid,1", "/dev/bus/0"], 0, &sas1, "");
        runner.expect(&["smartctl", "--json", "-a", "-n", "standby", "-d", "megaraid,2", "/dev/bus/0"], 0, &sas2, "");
        let mut m = super::super::monitor::DriveMonitor::new(t, inv.health_devices());
        let p = m.poll(&|| 1);
        let temps: Vec<(&str, f64)> = p.temperature.iter().map(|s| (s.device.as_str(), s.celsius)).collect();
        assert_eq!(temps, vec![("bus/0:sat+megaraid,0", 30.0), ("bus/0:megaraid,1", 31.0), ("bus/0:megaraid,2", 30.0)]);
        assert_eq!((p.errors, runner.remaining()), (0, 0), "{:?}", p.events);
    }

    /// NVMe native multipath (tests/fixtures/sysfs/nvme-multipath): one identity per drive. The
    /// block inventory, the thermal limits (which the collector's throttling detector keys by) and
    /// the SMART monitor's devices all name the dual-port drive's controller `nvme0` and the
    /// single-port one's `nvme2`: never `nvme-subsys0`, and the second path `nvme1` is not polled
    /// as a drive of its own.
    #[test]
    fn multipath_drive_has_one_identity_across_inventory_limits_and_smart() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sysfs/nvme-multipath/sys");
        let id = fixture("nvme/qemu-nvme-cli-2.3-id-ctrl.json");
        let fake = Arc::new(
            FakeNvme::new()
                .with_controller("/dev/nvme0", &id, 0, SetBehaviour::Refuse)
                .with_controller("/dev/nvme1", &id, 0, SetBehaviour::Refuse)
                .with_controller("/dev/nvme2", &id, 0, SetBehaviour::Refuse),
        );
        let t = DriveTools { nvme: Some(wattflip_drives::NvmeCli::new(fake)), smartctl: None, unavailable: Vec::new() };
        let inv = DriveInventory::discover(&t, &root);
        assert!(inv.problems.is_empty(), "{:?}", inv.problems);
        let mut devices = super::super::block::scan(&root);
        inv.enrich(&mut devices);
        let block: Vec<(&str, &str)> = devices.iter().map(|d| (d.name.as_str(), d.controller.as_str())).collect();
        assert_eq!(block, vec![("nvme0n1", "nvme0"), ("nvme1n1", "nvme2")]);
        let limits: Vec<(String, Vec<String>)> = inv.thermal_limits().into_iter().map(|l| (l.device, l.namespaces)).collect();
        assert_eq!(limits, vec![("nvme0".to_string(), vec!["nvme0n1".to_string()]), ("nvme2".to_string(), vec!["nvme1n1".to_string()])]);
        let polled: Vec<String> = inv.health_devices().into_iter().map(|h| h.tag).collect();
        assert_eq!(polled, vec!["nvme0", "nvme2"]);
    }
}
