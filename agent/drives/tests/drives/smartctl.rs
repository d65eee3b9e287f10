//! smartctl JSON for NVMe and SATA, exit bits, scan.

use crate::util::fixture;
use std::sync::Arc;
use wattflip_drives::fake::ScriptedRunner;
use wattflip_drives::smartctl::{parse_report, parse_scan, TemperatureOrigin};
use wattflip_drives::thermal::ThermalSource;
use wattflip_drives::{Celsius, Smartctl, SmartctlError, SmartctlExit, ThermalSnapshot};

#[test]
fn exit_bits_0_and_1_fail_the_call_bits_3_up_are_health() {
    let e = SmartctlExit(8);
    assert!(e.disk_failing() && !e.is_call_failure());
    assert_eq!(e.health_bits(), 8);
    assert!(SmartctlExit(1).is_call_failure() && SmartctlExit(1).command_line_error());
    assert!(SmartctlExit(2).is_call_failure() && SmartctlExit(2).device_open_failed());
    assert!(!SmartctlExit(4).is_call_failure() && SmartctlExit(4).command_failed());
    let all = SmartctlExit(0xf8);
    assert!(all.prefail_at_threshold() && all.attribute_past_threshold());
    assert!(all.error_log_entries() && all.self_test_errors() && !all.is_call_failure());
    assert_eq!(SmartctlExit(72).to_string(), "exit 72 (SMART status failing, error log has entries)");
}

#[test]
fn nvme_qemu_smartctl_7_3_with_warning_exit_8() {
    let r = parse_report(&fixture("smartctl/qemu-smartctl-7.3-nvme-H-A.json"), "", "smartctl --json -H -A /dev/nvme0").expect("exit 8 is data, not failure");
    assert_eq!(r.exit, SmartctlExit(8));
    assert_eq!(r.version, Some((7, 3)));
    assert_eq!(r.device.name, "/dev/nvme0");
    assert_eq!(r.device.protocol, "NVMe");
    assert_eq!(r.smart_passed, Some(false));
    // smartctl prints K − 273: 323 K is 50 °C here, 49.85 °C from nvme-cli.
    assert_eq!(r.temperature, Some(Celsius(50.0)));
    assert_eq!(r.temperature_origin, Some(TemperatureOrigin::Current));
    let nvme = r.nvme.as_ref().expect("nvme log");
    assert_eq!(nvme.critical_warning.0, 2);
    assert_eq!(nvme.temperature, Some(Celsius(50.0)));
    assert_eq!(nvme.data_units_read, Some(1));
    assert_eq!(nvme.warning_temp_time_min, Some(0));
    let t = ThermalSnapshot::from_smartctl(&r);
    assert_eq!(t.source, ThermalSource::Smartctl);
    assert_eq!(t.composite, Some(Celsius(50.0)));
    assert!(t.temperature_warning);
    assert_eq!(t.thermal_mgmt, None, "smartctl 7.3 prints TMT counters only as text");
    assert_eq!(t.throttled_since(&t), Some(true), "warning bit set");
}

#[test]
fn nvme_big_counters_prefer_the_string_copy() {
    let r = parse_report(&fixture("smartctl/constructed-smartctl-7.3-nvme-a-big-counters.json"), "", "x").expect("parse");
    let nvme = r.nvme.as_ref().expect("nvme");
    assert_eq!(nvme.data_units_read, Some(36_893_488_147_419_103_232));
    assert_eq!(nvme.data_units_written, Some(1_474_968_593));
    assert_eq!(nvme.sensors, vec![Some(Celsius(45.0)), Some(Celsius(57.0)), None, Some(Celsius(28.0))]);
    assert_eq!((nvme.warning_temp_time_min, nvme.critical_temp_time_min), (Some(12), Some(1)));
    assert_eq!(r.capacity_bytes, Some(500_107_862_016));
    assert_eq!(r.logical_block_size, Some(512));
    let t = ThermalSnapshot::from_smartctl(&r);
    assert_eq!(t.hottest(), Some(Celsius(57.0)));
}

#[test]
fn sata_attributes_194_and_190() {
    let r = parse_report(&fixture("smartctl/constructed-smartctl-7.3-sata-a.json"), "", "x").expect("exit 64 is data");
    assert_eq!(r.exit, SmartctlExit(64));
    assert!(r.exit.error_log_entries());
    assert_eq!(r.device.protocol, "ATA");
    assert_eq!(r.model.as_deref(), Some("WATTFLIP CONSTRUCTED SATA SSD 500GB"));
    assert_eq!(r.temperature, Some(Celsius(33.0)));
    assert_eq!(r.temperature_origin, Some(TemperatureOrigin::Current));
    let a194 = r.attribute(194).expect("194");
    assert_eq!(a194.raw_value & 0xff, 33);
    assert_eq!(a194.raw_string, "33 (Min/Max 18/52)");
    assert_eq!(r.attribute(190).map(|a| a.raw_value & 0xff), Some(31));
    assert_eq!(r.power_on_hours, Some(12_345));
    assert_eq!(r.power_cycle_count, Some(321));
    assert!(r.nvme.is_none());

    let old = parse_report(&fixture("smartctl/constructed-smartctl-7.2-sata-a-no-temperature-key.json"), "", "x").expect("parse");
    assert_eq!(old.version, Some((7, 2)));
    assert_eq!(old.temperature, Some(Celsius(31.0)));
    assert_eq!(old.temperature_origin, Some(TemperatureOrigin::Attribute190));
}

#[test]
fn open_failure_is_an_error_that_says_what_to_do() {
    let err = parse_report(&fixture("smartctl/constructed-smartctl-7.3-nvme-open-failed.json"), "", "smartctl --json -a /dev/nvme0").expect_err("exit 2");
    let SmartctlError::CallFailed { exit, messages, .. } = &err else { panic!("{err:?}") };
    assert!(exit.device_open_failed());
    assert!(messages.contains("Permission denied"));
    let text = err.to_string();
    assert!(text.contains("smartctl --json -a /dev/nvme0") && text.contains("run as root"), "{text}");
}

#[test]
fn scan_open_lists_devices_and_open_errors() {
    let d = parse_scan(&fixture("smartctl/constructed-smartctl-7.3-scan-open.json"), "", "x").expect("scan");
    let names: Vec<_> = d.iter().map(|d| (d.name.as_str(), d.device_type.as_str(), d.open_error.is_some())).collect();
    assert_eq!(names, vec![("/dev/sda", "sat", false), ("/dev/sdb", "scsi", true), ("/dev/nvme0", "nvme", false)]);
    let none = parse_scan(&fixture("smartctl/constructed-smartctl-7.3-scan-open-no-disks.json"), "", "x").expect("scan");
    assert!(none.is_empty(), "no `devices` key: no disks, not an error");
}

#[test]
fn smartctl_runs_exact_argv_and_keeps_health_exit_codes() {
    let runner = Arc::new(ScriptedRunner::new());
    runner.expect(&["smartctl", "--json", "-a", "-d", "sat", "/dev/sda"], 64, &fixture("smartctl/constructed-smartctl-7.3-sata-a.json"), "");
    let smartctl = Smartctl::new(runner.clone());
    let r = smartctl.report("/dev/sda", Some("sat")).expect("report");
    assert_eq!(r.temperature, Some(Celsius(33.0)));
    assert_eq!(runner.remaining(), 0);
    assert!(smartctl.report("-x", None).is_err(), "options are not devices");
}

#[test]
fn smartctl_unreadable_fields_are_left_out_and_named() {
    let json = r#"{"smartctl":{"version":[7,3],"exit_status":0},
        "device":{"name":"/dev/nvme0","info_name":"/dev/nvme0","type":"nvme","protocol":"NVMe"},
        "model_name":"X","user_capacity":{"blocks":1,"bytes":"lots"},"nvme_total_capacity":1000,
        "logical_block_size":0,"temperature":{"current":35.5},
        "nvme_smart_health_information_log":{"critical_warning":0,"temperature":35,
          "unsafe_shutdowns":"7.000000","media_errors":-1}}"#;
    let r = wattflip_drives::smartctl::parse_report(json, "", "test").expect("parse");
    assert_eq!(r.capacity_bytes, Some(1000), "nvme_total_capacity when user_capacity is unreadable");
    assert_eq!(r.logical_block_size, None, "0 is unknown, not a block size");
    assert_eq!(r.temperature, Some(Celsius(35.0)), "the NVMe log's when temperature.current is not whole");
    let n = r.nvme.as_ref().expect("nvme log");
    assert_eq!((n.unsafe_shutdowns, n.media_errors), (Some(7), None));
    let named: Vec<&str> = r.problems.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(named, ["media_errors", "temperature.current", "user_capacity.bytes"]);
}
