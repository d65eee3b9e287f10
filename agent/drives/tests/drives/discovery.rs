//! Discovery reports what it could not read and reads drives the way an operator would want:
//! problems of `nvme list` reach the inventory with the documented fallback; smartctl's exit
//! status and stderr are read before its stdout; a sleeping SATA disk is not woken at discovery;
//! a RAID volume's `temperature.current: 0` is not 0 °C.

use crate::captures::corpus;
use crate::util::{fixture, fixtures_dir};
use std::sync::Arc;
use wattflip_drives::fake::{FakeNvme, ScriptedRunner, SetBehaviour};
use wattflip_drives::smartctl::parse_report;
use wattflip_drives::{discover, Discovery, NvmeCli, Smartctl, SmartctlError, Transport};

/// nvme-cli 2.x printed `PhysicalSize: -2147483648` for a 512 GB namespace (the real capture
/// tests/fixtures/captures/nvme-cli/libstorage-ng-2.x-list-verbose-lenovo-physicalsize-int32.json):
/// the drive's capacity is MaximumLBA × SectorSize = 1000215216 × 512 = 512110190592 bytes, and
/// the unreadable field and the fallback are one problem line of the inventory.
#[test]
fn an_unreadable_physical_size_falls_back_to_max_lba_times_sector_size_and_is_reported() {
    let list = std::fs::read_to_string(corpus().join("nvme-cli/libstorage-ng-2.x-list-verbose-lenovo-physicalsize-int32.json")).unwrap();
    let fake =
        Arc::new(FakeNvme::new().with_controller("/dev/nvme0", &fixture("nvme/qemu-nvme-cli-2.3-id-ctrl.json"), 0, SetBehaviour::Refuse).with_list(&list));
    let inv = discover(&Discovery { sysfs_root: fixtures_dir().join("nvme/sysfs/does-not-exist"), nvme: Some(NvmeCli::new(fake)), smartctl: None });
    let got: Vec<(&str, Option<u64>)> = inv.drives.iter().map(|d| (d.name.as_str(), d.capacity_bytes)).collect();
    assert_eq!(got, vec![("/dev/nvme0n1", Some(512_110_190_592))]);
    assert_eq!(inv.problems.len(), 1, "{:?}", inv.problems);
    let p = &inv.problems[0];
    assert!(p.starts_with("`nvme list`, /dev/nvme0n1: field `/dev/nvme0n1.PhysicalSize` = -2147483648 left out"), "{p}");
    assert!(p.contains("capacity taken as MaximumLBA × SectorSize = 512110190592 bytes instead"), "{p}");
}

/// A host without NVMe: nvme-cli 2.x exits 1 with "Failed to scan topology" when /sys/class/nvme
/// holds no controller. With sysfs showing none either, that is no drive and no problem (no
/// warning event from every such host); while sysfs shows a controller, it is a problem.
#[test]
fn nvme_cli_without_a_topology_is_a_problem_only_where_sysfs_shows_a_controller() {
    let stderr = "Failed to scan topology: No such file or directory\n";
    let runner = Arc::new(ScriptedRunner::new());
    runner.expect(&["nvme", "list", "-o", "json"], 1, "", stderr);
    let inv = discover(&Discovery { sysfs_root: fixtures_dir().join("nvme/sysfs/does-not-exist"), nvme: Some(NvmeCli::new(runner.clone())), smartctl: None });
    assert!(inv.drives.is_empty(), "{:?}", inv.drives);
    assert_eq!(inv.problems, Vec::<String>::new());
    assert_eq!(runner.remaining(), 0);

    runner.expect(&["nvme", "list", "-o", "json"], 1, "", stderr);
    let inv = discover(&Discovery { sysfs_root: fixtures_dir().join("nvme/sysfs/qemu-7.2"), nvme: Some(NvmeCli::new(runner.clone())), smartctl: None });
    let topology: Vec<&String> = inv.problems.iter().filter(|p| p.contains("Failed to scan topology")).collect();
    assert_eq!(topology.len(), 1, "{:?}", inv.problems);
    assert!(topology[0].starts_with("`nvme list -o json` failed with exit status 1"), "{}", topology[0]);
}

/// A call that failed before printing anything (exit 2, bit 1: the device could not be opened)
/// is that failure, with its exit bits and stderr: not "not JSON … extend the parser".
#[test]
fn smartctl_exit_status_and_stderr_are_read_before_its_output() {
    let runner = Arc::new(ScriptedRunner::new());
    runner.expect(&["smartctl", "--json", "-a", "-d", "sat", "/dev/sdb"], 2, "", "Smartctl open device: /dev/sdb failed: Permission denied\n");
    let err = Smartctl::new(runner.clone()).report("/dev/sdb", Some("sat")).unwrap_err();
    assert!(matches!(err, SmartctlError::CallFailed { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "`smartctl --json -a -d sat /dev/sdb`: exit 2 (device open failed): Smartctl open device: /dev/sdb failed: Permission denied; \
         needs root (or CAP_SYS_ADMIN + CAP_SYS_RAWIO): run as root or grant the capabilities"
    );
    // smartctl 6.x does not know `--json` (exit 1, a usage message on stdout): upgrade the tool.
    runner.expect(&["smartctl", "--json", "-a", "-d", "sat", "/dev/sdb"], 1, "=======> UNRECOGNIZED OPTION: json\n", "");
    let err = Smartctl::new(runner.clone()).report("/dev/sdb", Some("sat")).unwrap_err().to_string();
    assert!(err.contains("exit 1 (command line error): =======> UNRECOGNIZED OPTION: json"), "{err}");
    assert!(err.ends_with("JSON output needs smartmontools 7.0 or later): check `smartctl --version` and upgrade smartmontools"), "{err}");
    assert_eq!(runner.remaining(), 0);
}

/// Discovery's first `smartctl -a` of a SATA disk carries `-n standby`: a spun-down disk is not
/// woken (smartctl answers exit 2 with its power mode, the constructed fixture of
/// agent/drives/tests/fixtures/smartctl/README.md), kept with what the scan knows, and the
/// problem says its identity is read once it is awake.
#[test]
fn a_sleeping_disk_is_not_woken_at_discovery() {
    let smart = Arc::new(ScriptedRunner::new());
    let scan = r#"{"smartctl":{"version":[7,4],"exit_status":0},"devices":[{"name":"/dev/sdc","info_name":"/dev/sdc [SAT]","type":"sat","protocol":"ATA"}]}"#;
    smart.expect(&["smartctl", "--scan-open", "--json"], 0, scan, "");
    smart.expect(
        &["smartctl", "--json", "-a", "-n", "standby", "-d", "sat", "/dev/sdc"],
        2,
        &fixture("smartctl/constructed-smartctl-7.4-sata-n-standby-skipped.json"),
        "",
    );
    let inv = discover(&Discovery { sysfs_root: fixtures_dir().join("nvme/sysfs/does-not-exist"), nvme: None, smartctl: Some(Smartctl::new(smart.clone())) });
    assert_eq!(smart.remaining(), 0, "no other call (none without -n)");
    let got: Vec<(&str, Option<&str>, &Transport, &str)> =
        inv.drives.iter().map(|d| (d.name.as_str(), d.device_type.as_deref(), &d.transport, d.serial.as_str())).collect();
    assert_eq!(got, vec![("/dev/sdc", Some("sat"), &Transport::Ata, "")]);
    assert_eq!(
        inv.problems,
        vec!["/dev/sdc (-d sat): the drive is in standby mode; its identity is read when it is awake (wattflip does not wake it)".to_string()]
    );
}

/// A RAID volume answers `temperature.current: 0` (constructed fixture, README there): no
/// temperature, never 0 °C; its identity is still read.
#[test]
fn a_raid_volumes_zero_temperature_is_not_available() {
    let r = parse_report(&fixture("smartctl/constructed-smartctl-7.3-scsi-raid-volume-temperature-0.json"), "", "x").unwrap();
    assert_eq!((r.temperature, r.model.as_deref(), r.capacity_bytes), (None, Some("DELL PERC H730P Mini"), Some(1_599_304_892_416)));
}
