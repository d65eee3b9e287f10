//! sysfs trees, merge, and discovery across nvme-cli and smartctl.

use crate::util::{fixture, fixtures_dir};
use std::collections::BTreeMap;
use std::sync::Arc;
use wattflip_drives::fake::{FakeNvme, ScriptedRunner, SetBehaviour};
use wattflip_drives::inventory::merge_nvme;
use wattflip_drives::nvme_cli::{parse_id_ctrl, parse_list, parse_smart_log};
use wattflip_drives::sysfs::scan_nvme;
use wattflip_drives::{discover, Celsius, Discovery, NvmeCli, Smartctl, ThermalSnapshot, Transport, Watts};

#[test]
fn sysfs_qemu_controller() {
    let scan = scan_nvme(&fixtures_dir().join("nvme/sysfs/qemu-7.2"));
    assert!(scan.problems.is_empty(), "{:?}", scan.problems);
    assert_eq!(scan.controllers.len(), 1);
    let c = &scan.controllers[0];
    assert_eq!((c.name.as_str(), c.model.as_str(), c.serial.as_str(), c.firmware.as_str()), ("nvme0", "QEMU NVMe Ctrl", "deadbeef", "7.2.22"));
    assert_eq!(c.transport.as_deref(), Some("pcie"));
    assert_eq!(c.address.as_deref(), Some("0000:00:04.0"));
    assert_eq!(c.namespaces.len(), 1);
    assert_eq!(c.namespaces[0].name, "nvme0n1");
    assert_eq!(c.namespaces[0].capacity_bytes, Some(1_073_741_824));
    assert_eq!(c.namespaces[0].logical_block_size, Some(512));
}

#[test]
fn sysfs_multipath_and_a_broken_controller() {
    let scan = scan_nvme(&fixtures_dir().join("nvme/sysfs/multipath"));
    let names: Vec<_> = scan.controllers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, vec!["nvme2", "nvme3"]);
    assert_eq!(scan.problems.len(), 1);
    let problem = scan.problems[0].to_string();
    assert!(problem.contains("nvme10/serial"), "{problem}");
    assert_eq!(scan.controllers[0].namespaces[0].name, "nvme1n1");
    assert_eq!(scan.controllers[0].namespaces[0].sysfs_name, "nvme1c2n1");

    let listed = parse_list(&fixture("nvme/constructed-nvme-cli-2.11-list-verbose-multipath.json")).expect("list");
    let drives = merge_nvme(&scan.controllers, &listed, &BTreeMap::new());
    assert_eq!(drives.len(), 1, "one namespace seen through two controllers");
    assert_eq!(drives[0].name, "/dev/nvme1n1");
    assert_eq!(drives[0].controller.as_deref(), Some("/dev/nvme2"));
    assert_eq!(drives[0].capacity_bytes, Some(3_840_755_982_336));
    assert_eq!(drives[0].logical_block_size, Some(4096));
    assert_eq!(drives[0].transport, Transport::Pcie);

    assert!(scan_nvme(&fixtures_dir().join("nvme/sysfs/does-not-exist")).controllers.is_empty());
}

#[test]
fn discover_nvme_and_sata_with_partial_failures() {
    let id = fixture("nvme/qemu-nvme-cli-2.3-id-ctrl.json");
    let fake = Arc::new(
        FakeNvme::new()
            .with_controller("/dev/nvme0", &id, 0, SetBehaviour::Refuse)
            .with_list(&fixture("nvme/qemu-nvme-cli-2.3-list.json"))
            .with_smart_log("/dev/nvme0", &fixture("nvme/qemu-nvme-cli-2.3-smart-log.json")),
    );
    let smart = Arc::new(ScriptedRunner::new());
    smart.expect(&["smartctl", "--scan-open", "--json"], 0, &fixture("smartctl/constructed-smartctl-7.3-scan-open.json"), "").expect(
        &["smartctl", "--json", "-a", "-n", "standby", "-d", "sat", "/dev/sda"],
        64,
        &fixture("smartctl/constructed-smartctl-7.3-sata-a.json"),
        "",
    );
    let nvme = NvmeCli::new(fake);
    let inv =
        discover(&Discovery { sysfs_root: fixtures_dir().join("nvme/sysfs/qemu-7.2"), nvme: Some(nvme.clone()), smartctl: Some(Smartctl::new(smart.clone())) });
    assert_eq!(smart.remaining(), 0, "the NVMe drive is not queried again through smartctl");
    assert_eq!(inv.drives.len(), 2);
    let d = &inv.drives[0];
    assert_eq!((d.name.as_str(), d.controller.as_deref()), ("/dev/nvme0n1", Some("/dev/nvme0")));
    assert_eq!((d.model.as_str(), d.serial.as_str(), d.firmware.as_str()), ("QEMU NVMe Ctrl", "deadbeef", "7.2.22"));
    assert_eq!((d.capacity_bytes, d.logical_block_size), (Some(1_073_741_824), Some(512)));
    assert_eq!(d.transport, Transport::Pcie);
    assert_eq!(d.power_states.len(), 1);
    assert_eq!(d.power_states[0].max_power, Some(Watts(25.0)));
    // QEMU's WCTEMP 343 K / CCTEMP 373 K (docs/sources-and-drives.md §10), for the collector's throttle detector.
    assert_eq!((d.warning_temperature, d.critical_temperature), (Some(Celsius(69.85)), Some(Celsius(99.85))));
    let s = &inv.drives[1];
    assert_eq!(s.warning_temperature, None);
    assert_eq!((s.name.as_str(), s.controller.as_deref(), &s.transport), ("/dev/sda", None, &Transport::Ata));
    assert_eq!(s.capacity_bytes, Some(500_107_862_016));
    assert_eq!(inv.problems.len(), 1);
    assert!(inv.problems[0].contains("/dev/sdb") && inv.problems[0].contains("Permission denied"));

    // Temperatures of the same drive through nvme-cli.
    let log = nvme.smart_log("/dev/nvme0").expect("smart-log");
    let t = ThermalSnapshot::from_smart_log(&log);
    assert_eq!(t.composite, Some(Celsius(49.85)));
    assert_eq!(t.hottest(), Some(Celsius(49.85)));
    assert_eq!(t.throttled_since(&t), Some(true), "critical_warning bit 1 is set in the capture");
}

#[test]
fn throttle_detection_between_snapshots() {
    let before = ThermalSnapshot::from_smart_log(&parse_smart_log(&fixture("nvme/constructed-nvme-cli-2.7-smart-log.json")).expect("parse"));
    assert_eq!(before.throttled_since(&before), Some(false));
    let after = ThermalSnapshot::from_smart_log(&parse_smart_log(&fixture("nvme/constructed-nvme-cli-2.11-smart-log.json")).expect("parse"));
    assert_eq!(after.throttled_since(&before), Some(true));
    assert_eq!(after.hottest(), Some(Celsius(56.85)));
    let id = parse_id_ctrl(&fixture("nvme/constructed-5ps-nvme-cli-2.3-id-ctrl.json")).expect("parse");
    assert_eq!(id.warning_temperature(), Some(Celsius(84.85)));
}

/// TNVMCAP from a real nvme-cli 1.x id-ctrl (WDC SN730, 256060514304 bytes) is the capacity of a
/// controller's only namespace when neither sysfs nor `nvme list` gave one, and of a controller
/// without namespaces; never of one namespace among several. NVMe drives are not rotational.
#[test]
fn capacity_falls_back_to_tnvmcap_for_a_single_namespace() {
    use wattflip_drives::sysfs::{SysfsController, SysfsNamespace};
    let capture = crate::captures::corpus().join("nvme-cli/ironic-python-agent-1.x-id-ctrl-wdc-sn730.json");
    let text = std::fs::read_to_string(&capture).expect("capture");
    let id = parse_id_ctrl(&text).expect("parse");
    let ns = |n: &str| SysfsNamespace { name: n.into(), sysfs_name: n.into(), capacity_bytes: None, logical_block_size: None };
    let ctrl = |name: &str, namespaces: Vec<SysfsNamespace>| SysfsController {
        name: name.into(),
        model: String::new(),
        serial: String::new(),
        firmware: String::new(),
        transport: Some("pcie".into()),
        address: None,
        namespaces,
    };
    let sysfs = [ctrl("nvme0", vec![ns("nvme0n1")]), ctrl("nvme1", vec![ns("nvme1n1"), ns("nvme1n2")]), ctrl("nvme2", vec![])];
    let ids: BTreeMap<String, _> = ["/dev/nvme0", "/dev/nvme1", "/dev/nvme2"].iter().map(|c| (c.to_string(), id.clone())).collect();
    let drives = merge_nvme(&sysfs, &[], &ids);
    type Row<'a> = (&'a str, Option<u64>, Option<u32>, Option<bool>, &'a str);
    let got: Vec<Row> = drives.iter().map(|d| (d.name.as_str(), d.capacity_bytes, d.logical_block_size, d.rotational, d.model.as_str())).collect();
    let m = "WDC PC SN730 SDBQNTY-256G-1001";
    assert_eq!(
        got,
        [
            ("/dev/nvme0n1", Some(256_060_514_304), None, Some(false), m),
            ("/dev/nvme1n1", None, None, Some(false), m),
            ("/dev/nvme1n2", None, None, Some(false), m),
            ("/dev/nvme2", Some(256_060_514_304), None, Some(false), m),
        ]
    );
}

/// Without nvme-cli, smartctl's own NVMe power-state table and composite thresholds fill the drive
/// sysfs found (fixture README: smartmontools `nvmeprint.cpp`). The five states are those
/// nvme-cli reads from the same drive's id-ctrl (`constructed-5ps-*`), less the idle/active power
/// and workload smartctl's JSON does not carry for the inventory; thresholds are smartctl's
/// whole degrees (358 K − 273 = 85 °C).
#[test]
fn smartctl_power_states_and_thresholds_when_nvme_cli_is_absent() {
    let smart = Arc::new(ScriptedRunner::new());
    let scan = r#"{"smartctl":{"version":[7,4],"exit_status":0},"devices":[{"name":"/dev/nvme0","info_name":"/dev/nvme0","type":"nvme","protocol":"NVMe"}]}"#;
    smart.expect(&["smartctl", "--scan-open", "--json"], 0, scan, "");
    smart.expect(&["smartctl", "--json", "-a", "-d", "nvme", "/dev/nvme0"], 0, &fixture("smartctl/constructed-smartctl-7.4-nvme-a-5ps.json"), "");
    let inv = discover(&Discovery { sysfs_root: fixtures_dir().join("nvme/sysfs/qemu-7.2"), nvme: None, smartctl: Some(Smartctl::new(smart.clone())) });
    assert!(inv.problems.is_empty(), "{:?}", inv.problems);
    assert_eq!(smart.remaining(), 0);
    assert_eq!(inv.drives.len(), 1);
    let d = &inv.drives[0];
    assert_eq!((d.name.as_str(), d.controller.as_deref()), ("/dev/nvme0n1", Some("/dev/nvme0")));
    let mut want = parse_id_ctrl(&fixture("nvme/constructed-5ps-nvme-cli-2.11-id-ctrl.json")).expect("parse").power_states;
    for p in &mut want {
        (p.idle_power, p.active_power, p.active_power_workload) = (None, None, 0);
    }
    assert_eq!(d.power_states, want);
    assert_eq!((d.warning_temperature, d.critical_temperature), (Some(Celsius(85.0)), Some(Celsius(85.0))));
}

/// A drive that already hangs at start-up (its first report runs into the tool deadline) stays in
/// the inventory with what the scan knows, so the monitor polls it and its failures are reported,
/// instead of being dropped with one log line.
#[test]
fn a_drive_that_hangs_at_discovery_is_kept_from_the_scan() {
    let smart = Arc::new(ScriptedRunner::new());
    let scan = r#"{"smartctl":{"version":[7,4],"exit_status":0},"devices":[{"name":"/dev/sdc","info_name":"/dev/sdc [SAT]","type":"sat","protocol":"ATA"}]}"#;
    smart.expect(&["smartctl", "--scan-open", "--json"], 0, scan, "");
    smart.expect_timeout(&["smartctl", "--json", "-a", "-n", "standby", "-d", "sat", "/dev/sdc"]);
    let inv = discover(&Discovery { sysfs_root: fixtures_dir().join("nvme/sysfs/does-not-exist"), nvme: None, smartctl: Some(Smartctl::new(smart)) });
    assert_eq!(inv.problems.len(), 1, "{:?}", inv.problems);
    assert!(inv.problems[0].contains("/dev/sdc"), "{}", inv.problems[0]);
    let got: Vec<(&str, Option<&str>, &Transport, &str)> =
        inv.drives.iter().map(|d| (d.name.as_str(), d.device_type.as_deref(), &d.transport, d.model.as_str())).collect();
    assert_eq!(got, vec![("/dev/sdc", Some("sat"), &Transport::Ata, "")]);
}
