//! nvme-cli parsers against recorded (2.3) and constructed (1.16, 2.7, 2.11, 2.13) outputs.

use crate::util::fixture;
use wattflip_drives::command::Hint;
use wattflip_drives::nvme_cli::{
    parse_get_feature, parse_id_ctrl, parse_list, parse_smart_log, parse_version, FeatureCapabilities, NvmeStatus, PowerManagement,
};
use wattflip_drives::{Celsius, CommandOutput, Exit, Watts};

#[test]
fn list_nvme_cli_2_3_simple_layout() {
    let l = parse_list(&fixture("nvme/qemu-nvme-cli-2.3-list.json")).expect("parse");
    assert_eq!(l.len(), 1);
    let n = &l[0];
    assert_eq!(n.device_path, "/dev/nvme0n1");
    assert_eq!(n.controller.as_deref(), Some("/dev/nvme0"));
    assert_eq!(n.nsid, Some(1));
    assert_eq!(n.model, "QEMU NVMe Ctrl");
    assert_eq!(n.serial, "deadbeef");
    assert_eq!(n.firmware, "7.2.22");
    assert_eq!(n.sector_size, Some(512));
    assert_eq!(n.capacity_bytes, Some(1_073_741_824));
    assert_eq!(n.transport, None);
}

#[test]
fn list_nvme_cli_2_11_forced_verbose_layout() {
    let l = parse_list(&fixture("nvme/constructed-nvme-cli-2.11-list-verbose.json")).expect("parse");
    assert_eq!(l.len(), 1);
    let n = &l[0];
    assert_eq!(n.device_path, "/dev/nvme0n1");
    assert_eq!(n.controller.as_deref(), Some("/dev/nvme0"));
    assert_eq!(n.nsid, Some(1));
    assert_eq!((n.model.as_str(), n.serial.as_str(), n.firmware.as_str()), ("QEMU NVMe Ctrl", "deadbeef", "7.2.22"));
    assert_eq!(n.transport.as_deref(), Some("pcie"));
    assert_eq!(n.capacity_bytes, Some(1_073_741_824));
    assert_eq!(n.sector_size, Some(512));
}

#[test]
fn list_verbose_multipath_namespace_belongs_to_first_controller() {
    let l = parse_list(&fixture("nvme/constructed-nvme-cli-2.11-list-verbose-multipath.json")).expect("parse");
    assert_eq!(l.len(), 1);
    // Not /dev/nvme1: the 1 in nvme1n1 is the subsystem instance.
    assert_eq!(l[0].device_path, "/dev/nvme1n1");
    assert_eq!(l[0].controller.as_deref(), Some("/dev/nvme2"));
    assert_eq!(l[0].sector_size, Some(4096));
    assert_eq!(l[0].capacity_bytes, Some(3_840_755_982_336));
}

#[test]
fn list_nvme_cli_2_13_simple_layout_with_generic_path() {
    let l = parse_list(&fixture("nvme/constructed-nvme-cli-2.13-list.json")).expect("parse");
    let names: Vec<_> = l.iter().map(|n| (n.device_path.as_str(), n.nsid, n.sector_size)).collect();
    assert_eq!(names, vec![("/dev/nvme0n1", Some(1), Some(512)), ("/dev/nvme0n2", Some(2), Some(4096))]);
    assert!(parse_list("{\"NoDevices\":1}").is_err());
    assert!(parse_list("Failed to scan topology: No such file or directory").is_err());
}

#[test]
fn id_ctrl_qemu_nvme_cli_2_3() {
    let id = parse_id_ctrl(&fixture("nvme/qemu-nvme-cli-2.3-id-ctrl.json")).expect("parse");
    assert_eq!(id.serial, "deadbeef");
    assert_eq!(id.model, "QEMU NVMe Ctrl");
    assert_eq!(id.firmware, "7.2.22");
    assert_eq!(id.npss, 0);
    assert!(!id.apst_supported());
    assert_eq!(id.wctemp_kelvin, 343);
    assert_eq!(id.warning_temperature(), Some(Celsius(69.85)));
    assert_eq!(id.critical_temperature(), Some(Celsius(99.85)));
    assert_eq!(id.power_states.len(), 1);
    let ps0 = &id.power_states[0];
    assert_eq!(ps0.index, 0);
    assert_eq!(ps0.max_power, Some(Watts(25.0)));
    assert!(ps0.operational);
    assert_eq!((ps0.entry_latency_us, ps0.exit_latency_us), (16, 4));
    assert_eq!((ps0.idle_power, ps0.active_power), (None, None));
}

#[test]
fn id_ctrl_psd_layouts_of_1_16_2_3_and_2_11_agree() {
    let v116 = parse_id_ctrl(&fixture("nvme/constructed-5ps-nvme-cli-1.16-id-ctrl.json")).expect("1.16");
    let v23 = parse_id_ctrl(&fixture("nvme/constructed-5ps-nvme-cli-2.3-id-ctrl.json")).expect("2.3");
    let v211 = parse_id_ctrl(&fixture("nvme/constructed-5ps-nvme-cli-2.11-id-ctrl.json")).expect("2.11");
    assert_eq!(v23.power_states, v211.power_states);
    assert_eq!(v23.power_states, v116.power_states);
    let ps = &v23.power_states;
    let summary: Vec<_> = ps.iter().map(|p| (p.index, p.max_power, p.operational)).collect();
    assert_eq!(
        summary,
        vec![
            (0, Some(Watts(7.5)), true),
            (1, Some(Watts(5.9)), true),
            (2, Some(Watts(3.6)), true),
            // MXPS = 1: 700 × 0.0001 W, not 7.00 W.
            (3, Some(Watts(0.07)), false),
            (4, Some(Watts(0.005)), false),
        ]
    );
    assert_eq!((ps[3].entry_latency_us, ps[3].exit_latency_us), (210, 1200));
    // IPS 1 → 0.0001 W, APS 2 → 0.01 W: a different coding from MXPS.
    assert_eq!(ps[0].idle_power, Some(Watts(0.3)));
    assert_eq!(ps[0].active_power, Some(Watts(5.2)));
    assert_eq!(ps[0].active_power_workload, 2);
    assert_eq!(ps[2].relative_write_latency, 2);
    assert!(v23.apst_supported() && v23.hctm_supported() && v23.select_supported());
}

#[test]
fn smart_log_qemu_nvme_cli_2_3_plain_and_human() {
    let log = parse_smart_log(&fixture("nvme/qemu-nvme-cli-2.3-smart-log.json")).expect("parse");
    assert_eq!(log.critical_warning.0, 2);
    assert!(log.critical_warning.temperature());
    assert!(!log.critical_warning.spare_below_threshold());
    assert_eq!(log.composite_kelvin, Some(323));
    assert_eq!(log.composite, Some(Celsius(49.85)));
    assert_eq!(log.sensors, [None; 8]);
    assert_eq!(log.data_units_read, Some(1));
    assert_eq!(log.data_units_written, Some(0));
    assert_eq!(log.host_read_commands, Some(4));
    assert_eq!(log.bytes_read(), Some(512_000));
    assert_eq!((log.warning_temp_time_min, log.critical_temp_time_min), (Some(0), Some(0)));
    assert_eq!(log.thermal_mgmt[0].transitions, Some(0));
    let human = parse_smart_log(&fixture("nvme/qemu-nvme-cli-2.3-smart-log-H.json")).expect("parse -H");
    assert_eq!(human, log, "-H only changes critical_warning into an object");
}

#[test]
fn smart_log_locale_grouped_strings() {
    let log = parse_smart_log(&fixture("nvme/constructed-nvme-cli-2.3-smart-log-en_US-grouped.json")).expect("parse");
    assert_eq!(log.data_units_read, Some(12_345_678));
    assert_eq!(log.host_read_commands, Some(1_234_567_890));
    assert_eq!(log.power_on_hours, Some(2_000));
    assert_eq!(log.composite, Some(Celsius(36.85)));
    assert_eq!(log.sensors[0], Some(Celsius(36.85)));
    assert_eq!(log.percentage_used, Some(3));
}

#[test]
fn smart_log_nvme_cli_2_11_numbers_object_and_counters() {
    let log = parse_smart_log(&fixture("nvme/constructed-nvme-cli-2.11-smart-log.json")).expect("parse");
    assert_eq!(log.critical_warning.0, 0);
    assert_eq!(log.data_units_read, Some(36_893_488_147_419_103_232)); // 2^65: beyond u64 and f64-exact
    assert_eq!(log.data_units_written, Some(1_474_968_593));
    assert_eq!(log.composite, Some(Celsius(44.85)));
    assert_eq!(log.sensors[..5], [Some(Celsius(44.85)), Some(Celsius(56.85)), None, Some(Celsius(27.85)), None]);
    assert_eq!((log.warning_temp_time_min, log.critical_temp_time_min), (Some(12), Some(1)));
    assert_eq!((log.thermal_mgmt[0].transitions, log.thermal_mgmt[0].total_time_s), (Some(5), Some(1234)));
    assert_eq!((log.thermal_mgmt[1].transitions, log.thermal_mgmt[1].total_time_s), (Some(1), Some(17)));
    assert_eq!(log.available_spare_pct, Some(100));
    assert_eq!(log.percentage_used, Some(7));
    assert_eq!(log.error_log_entries, Some(17));
}

#[test]
fn smart_log_nvme_cli_2_7_capitalised_temperature() {
    let log = parse_smart_log(&fixture("nvme/constructed-nvme-cli-2.7-smart-log.json")).expect("parse");
    assert_eq!(log.composite_kelvin, Some(307));
    assert_eq!(log.composite, Some(Celsius(33.85)));
    assert_eq!(log.sensors[2], Some(Celsius(47.85)));
    assert!(parse_smart_log("{\"temperature\":300}").is_err(), "no critical_warning: not a smart-log");
}

#[test]
fn get_feature_text_captured_from_nvme_cli_2_3() {
    let v = parse_get_feature(&fixture("nvme/qemu-nvme-cli-2.3-get-feature-f2-H.stdout.txt")).expect("f2");
    assert_eq!((v.fid, v.select.as_str(), v.value), (Some(2), "Current", 0));
    assert_eq!(PowerManagement::from_value(v.value), PowerManagement { ps: 0, workload_hint: 0 });
    let caps = parse_get_feature(&fixture("nvme/qemu-nvme-cli-2.3-get-feature-f2-s3-H.stdout.txt")).expect("s3");
    assert_eq!(caps.select, "Supported capabilities");
    assert!(!FeatureCapabilities(caps.value).changeable());
    let caps4 = parse_get_feature(&fixture("nvme/qemu-nvme-cli-2.3-get-feature-f4-s3-H.stdout.txt")).expect("f4 s3");
    let c = FeatureCapabilities(caps4.value);
    assert!(c.changeable() && !c.saveable() && !c.per_namespace());
    let f4 = parse_get_feature(&fixture("nvme/qemu-nvme-cli-2.3-get-feature-f4-H.stdout.txt")).expect("f4");
    assert_eq!(f4.value, 319);
}

#[test]
fn set_feature_errors_captured_from_nvme_cli_2_3() {
    let stderr = fixture("nvme/qemu-nvme-cli-2.3-set-feature-f2-v1.stderr.txt");
    let (status, message) = NvmeStatus::from_stderr(&stderr).expect("status");
    assert_eq!(status, NvmeStatus(0x410e));
    assert!(status.is_feature_not_changeable() && status.dnr());
    assert_eq!(message, "Feature Not Changeable: The Feature Identifier is not able to be changed");

    let (saveable, _) = NvmeStatus::from_stderr(&fixture("nvme/qemu-nvme-cli-2.3-set-feature-f2-v0-s.stderr.txt")).expect("status");
    assert_eq!(saveable, NvmeStatus(0x410d));
    assert!(saveable.is_feature_not_saveable());

    // The error a caller sees carries argv, exit status, stderr and what to do.
    let out = CommandOutput {
        argv: ["nvme", "set-feature", "/dev/nvme0", "--feature-id=2", "--value=1"].map(String::from).to_vec(),
        exit: Exit::Code(1),
        stdout: String::new(),
        stderr,
    };
    let err = out.into_success().expect_err("exit 1");
    assert_eq!(err.nvme_status(), Some(NvmeStatus(0x410e)));
    let text = err.to_string();
    assert!(text.contains("`nvme set-feature /dev/nvme0 --feature-id=2 --value=1`"), "{text}");
    assert!(text.contains("exit status 1"), "{text}");
    assert!(text.contains("(0x410e)"), "{text}");
    assert!(text.contains("leave the governor off"), "{text}");
    assert_eq!(Hint::from_stderr("Failed to scan topology: No such file or directory"), Hint::NoNvme);
}

#[test]
fn set_feature_success_line_is_not_mistaken_for_a_value() {
    // `set-feature:` lines must not be read as get-feature output.
    assert!(parse_get_feature(&fixture("nvme/qemu-nvme-cli-2.3-set-feature-f4-v0x13f.stdout.txt")).is_err());
    assert_eq!(parse_version("nvme version 2.3 (git 2.3)\n").map(|v| v.to_string()), Some("2.3".into()));
}

/// nvme-cli 2.1–2.1.2 printed the 128-bit counters with `"%Lf"`. Constructed from the FireCuda
/// capture's values (no public capture of this form was found; PROVENANCE.md).
#[test]
fn smart_log_percent_lf_decimal_strings_are_whole_numbers() {
    let log = parse_smart_log(
        r#"{"critical_warning":0,"temperature":310,"avail_spare":100,"spare_thresh":5,
        "percent_used":2,"data_units_read":"9898518.000000","data_units_written":"136157684.000000",
        "power_on_hours":"4974.000000","unsafe_shutdowns":"39.000000","media_errors":"0.000000"}"#,
    )
    .expect("parse");
    assert_eq!(log.power_on_hours, Some(4974));
    assert_eq!(log.data_units_read, Some(9_898_518));
    assert_eq!(log.data_units_written, Some(136_157_684));
    assert_eq!(log.unsafe_shutdowns, Some(39));
    assert_eq!(log.media_errors, Some(0));
    assert_eq!(log.composite, Some(Celsius(36.85)));
    assert!(log.problems.is_empty(), "{:?}", log.problems);
}

#[test]
fn smart_log_unreadable_field_is_left_out_and_named() {
    let log = parse_smart_log(
        r#"{"critical_warning":0,"temperature":"3100.5","power_on_hours":"12.5",
        "unsafe_shutdowns":39,"percent_used":300}"#,
    )
    .expect("one bad field does not lose the log");
    assert_eq!(log.composite_kelvin, None);
    assert_eq!(log.composite, None);
    assert_eq!(log.power_on_hours, None);
    assert_eq!(log.percentage_used, None);
    assert_eq!(log.unsafe_shutdowns, Some(39));
    let named: Vec<(&str, &str)> = log.problems.iter().map(|p| (p.field.as_str(), p.raw.as_str())).collect();
    assert_eq!(named, [("temperature", "\"3100.5\""), ("percent_used", "300"), ("power_on_hours", "\"12.5\""),]);
    assert_eq!(
        log.problems[2].to_string(),
        "field `power_on_hours` = \"12.5\" left out: not a whole number (fraction .5) or an \
         ambiguous locale grouping; save the output as a fixture and extend the parser"
    );
}
