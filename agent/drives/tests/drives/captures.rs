//! Real captures from public projects (tests/fixtures/captures/, provenance in PROVENANCE.md):
//! each is parsed and every field wattflip stores is compared with the capture's `.expected`
//! file, written by reading the capture by hand. One test per capture; a capture without a test,
//! or a test without a capture, fails `every_capture_has_a_test`.
//!
//! To add a capture: copy it with its provenance line, write `NAME.expected` by reading it (the
//! keys are those [`stored`] prints), and add a `capture!` line.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::path::{Path, PathBuf};
use wattflip_drives::inventory::drive_from_smartctl;
use wattflip_drives::nvme_cli::{parse_id_ctrl, parse_list, parse_smart_log};
use wattflip_drives::smartctl::parse_report;
use wattflip_drives::Celsius;

pub fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/captures")
}

fn opt<T: Display>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

fn celsius(v: Option<Celsius>) -> String {
    opt(v.map(|c| c.value()))
}

fn list<T: Display>(v: impl IntoIterator<Item = T>) -> String {
    v.into_iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",")
}

/// Every field wattflip stores from one capture, as `key → value` (`-` = left out).
fn stored(rel: &str, text: &str) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        m.insert(k.to_string(), v);
    };
    if rel.starts_with("smartctl/") {
        let r = parse_report(text, "", rel).unwrap_or_else(|e| panic!("{rel}: {e}"));
        // What the inventory keeps of a smartctl-only drive must agree with the report.
        let d = drive_from_smartctl(&r);
        assert_eq!((d.capacity_bytes, d.logical_block_size, d.rotational), (r.capacity_bytes, r.logical_block_size, r.rotational()), "{rel}: inventory drive");
        put("exit", r.exit.0.to_string());
        put("version", opt(r.version.map(|(a, b)| format!("{a}.{b}"))));
        put("device", r.device.name.clone());
        put("protocol", r.device.protocol.clone());
        put("model", opt(r.model.clone()));
        put("serial", opt(r.serial.clone()));
        put("firmware", opt(r.firmware.clone()));
        put("capacity_bytes", opt(r.capacity_bytes));
        put("logical_block_size", opt(r.logical_block_size));
        put("rotation_rate_rpm", opt(r.rotation_rate_rpm));
        put("rotational", opt(r.rotational()));
        put("smart_passed", opt(r.smart_passed));
        put("temperature_c", celsius(r.temperature));
        put("power_on_hours", opt(r.power_on_hours));
        put("power_cycle_count", opt(r.power_cycle_count));
        put("problems", problems(&r.problems));
        match &r.nvme {
            None => {
                m.insert("nvme".into(), "-".into());
            }
            Some(n) => {
                let mut put = |k: &str, v: String| {
                    m.insert(format!("nvme.{k}"), v);
                };
                put("critical_warning", n.critical_warning.0.to_string());
                put("temperature_c", celsius(n.temperature));
                put("available_spare_pct", opt(n.available_spare_pct));
                put("percentage_used", opt(n.percentage_used));
                put("data_units_read", opt(n.data_units_read));
                put("data_units_written", opt(n.data_units_written));
                put("power_on_hours", opt(n.power_on_hours));
                put("power_cycles", opt(n.power_cycles));
                put("unsafe_shutdowns", opt(n.unsafe_shutdowns));
                put("media_errors", opt(n.media_errors));
                put("error_log_entries", opt(n.error_log_entries));
                put("warning_temp_time_min", opt(n.warning_temp_time_min));
                put("critical_temp_time_min", opt(n.critical_temp_time_min));
                put("sensors_c", list(n.sensors.iter().map(|c| celsius(*c))));
            }
        }
    } else if rel.contains("smart-log") {
        let l = parse_smart_log(text).unwrap_or_else(|e| panic!("{rel}: {e}"));
        put("critical_warning", l.critical_warning.0.to_string());
        put("composite_kelvin", opt(l.composite_kelvin));
        put("composite_c", celsius(l.composite));
        put("sensors_c", list(l.sensors.iter().enumerate().filter_map(|(i, c)| c.map(|c| format!("{}:{}", i + 1, c.value())))));
        put("available_spare_pct", opt(l.available_spare_pct));
        put("available_spare_threshold_pct", opt(l.available_spare_threshold_pct));
        put("percentage_used", opt(l.percentage_used));
        put("endurance_group_warning", opt(l.endurance_group_warning));
        put("data_units_read", opt(l.data_units_read));
        put("data_units_written", opt(l.data_units_written));
        put("host_read_commands", opt(l.host_read_commands));
        put("host_write_commands", opt(l.host_write_commands));
        put("controller_busy_time_min", opt(l.controller_busy_time_min));
        put("power_cycles", opt(l.power_cycles));
        put("power_on_hours", opt(l.power_on_hours));
        put("unsafe_shutdowns", opt(l.unsafe_shutdowns));
        put("media_errors", opt(l.media_errors));
        put("error_log_entries", opt(l.error_log_entries));
        put("warning_temp_time_min", opt(l.warning_temp_time_min));
        put("critical_temp_time_min", opt(l.critical_temp_time_min));
        for (i, t) in l.thermal_mgmt.iter().enumerate() {
            put(&format!("tmt{}.transitions", i + 1), opt(t.transitions));
            put(&format!("tmt{}.total_time_s", i + 1), opt(t.total_time_s));
        }
        put("problems", problems(&l.problems));
    } else if rel.contains("list") {
        let l = parse_list(text).unwrap_or_else(|e| panic!("{rel}: {e}"));
        put("namespaces", l.len().to_string());
        for (i, n) in l.iter().enumerate() {
            let mut put = |k: &str, v: String| {
                m.insert(format!("ns{i}.{k}"), v);
            };
            put("device_path", n.device_path.clone());
            put("controller", opt(n.controller.clone()));
            put("nsid", opt(n.nsid));
            put("model", n.model.clone());
            put("serial", n.serial.clone());
            put("firmware", n.firmware.clone());
            put("transport", opt(n.transport.clone()));
            put("capacity_bytes", opt(n.capacity_bytes));
            put("used_bytes", opt(n.used_bytes));
            put("sector_size", opt(n.sector_size));
            put("problems", problems(&n.problems));
        }
    } else if rel.contains("id-ctrl") {
        let id = parse_id_ctrl(text).unwrap_or_else(|e| panic!("{rel}: {e}"));
        put("vid", id.vid.to_string());
        put("ssvid", id.ssvid.to_string());
        put("serial", id.serial.clone());
        put("model", id.model.clone());
        put("firmware", id.firmware.clone());
        put("npss", id.npss.to_string());
        put("apsta", id.apsta.to_string());
        put("wctemp_kelvin", id.wctemp_kelvin.to_string());
        put("cctemp_kelvin", id.cctemp_kelvin.to_string());
        put("hctma", id.hctma.to_string());
        put("mntmt_kelvin", id.mntmt_kelvin.to_string());
        put("mxtmt_kelvin", id.mxtmt_kelvin.to_string());
        put("oncs", id.oncs.to_string());
        put("capacity_bytes", opt(id.capacity_bytes));
        put("problems", problems(&id.problems));
        put("power_states", id.power_states.len().to_string());
        for p in &id.power_states {
            let mut put = |k: &str, v: String| {
                m.insert(format!("ps{}.{k}", p.index), v);
            };
            put("max_power_w", opt(p.max_power.map(|w| w.value())));
            put("max_power_shown", p.max_power_text());
            put("operational", p.operational.to_string());
            put("entry_latency_us", p.entry_latency_us.to_string());
            put("exit_latency_us", p.exit_latency_us.to_string());
            put("relative", list([p.relative_read_throughput, p.relative_read_latency, p.relative_write_throughput, p.relative_write_latency]));
            put("idle_power_w", opt(p.idle_power.map(|w| w.value())));
            put("active_power_w", opt(p.active_power.map(|w| w.value())));
            put("active_power_workload", p.active_power_workload.to_string());
        }
    } else {
        panic!("{rel}: no parser for this capture kind");
    }
    m
}

/// `0`, or the problems themselves so a failure shows them.
fn problems(p: &[wattflip_drives::FieldProblem]) -> String {
    if p.is_empty() {
        "0".into()
    } else {
        list(p.iter().map(|p| p.to_string()))
    }
}

fn expected(path: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}: write it by reading the capture", path.display()));
    let mut m = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim_end();
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let (k, v) = line
            .split_once(" = ")
            .or_else(|| line.strip_suffix(" =").map(|k| (k, "")))
            .unwrap_or_else(|| panic!("{}:{}: not `key = value`", path.display(), n + 1));
        let dup = m.insert(k.trim().to_string(), v.to_string());
        assert!(dup.is_none(), "{}:{}: key twice", path.display(), n + 1);
    }
    m
}

fn check(rel: &str) {
    let json = corpus().join(format!("{rel}.json"));
    let text = std::fs::read_to_string(&json).unwrap_or_else(|e| panic!("{}: {e}", json.display()));
    let got = stored(rel, &text);
    let want = expected(&corpus().join(format!("{rel}.expected")));
    let keys: std::collections::BTreeSet<&String> = got.keys().chain(want.keys()).collect();
    let diffs: Vec<String> = keys
        .into_iter()
        .filter(|k| got.get(*k) != want.get(*k))
        .map(|k| {
            format!(
                "  {k}: stored {:?}, expected {:?}",
                got.get(k).map(String::as_str).unwrap_or("<no such field>"),
                want.get(k).map(String::as_str).unwrap_or("<not in .expected>")
            )
        })
        .collect();
    assert!(diffs.is_empty(), "{rel}:\n{}", diffs.join("\n"));
}

macro_rules! captures {
    ($($name:ident => $rel:literal,)*) => {
        $(#[test] fn $name() { check($rel); })*
        const ALL: &[&str] = &[$($rel),*];
    };
}

captures! {
    smartctl_7_1_nvme_hgst_sn200 => "smartctl/sce-7.1-nvme-hgst-sn200",
    smartctl_7_1_nvme_intel_p3700 => "smartctl/sce-7.1-nvme-intel-p3700",
    smartctl_7_1_sata_hdd_wd_hc550_exit64 => "smartctl/sce-7.1-sata-hdd-wd-hc550-exit64",
    smartctl_7_1_sata_ssd_samsung_pm893 => "smartctl/sce-7.1-sata-ssd-samsung-pm893",
    smartctl_7_1_sas_megaraid1_toshiba_mg08sca16tey => "smartctl/sce-7.1-sas-megaraid1-toshiba-mg08sca16tey",
    smartctl_7_1_sas_megaraid2_toshiba_mg08sca16tey => "smartctl/sce-7.1-sas-megaraid2-toshiba-mg08sca16tey",
    smartctl_7_1_sata_megaraid0_samsung_mz7kh480_exit4 => "smartctl/sce-7.1-sata-megaraid0-samsung-mz7kh480-exit4",
    smartctl_7_3_nvme_crucial_p2 => "smartctl/sce-7.3-nvme-crucial-p2",
    smartctl_7_3_nvme_intel_p4510 => "smartctl/sce-7.3-nvme-intel-p4510",
    smartctl_7_3_nvme_micron_7450 => "smartctl/sce-7.3-nvme-micron-7450",
    smartctl_7_3_nvme_samsung_970_evo_plus => "smartctl/sce-7.3-nvme-samsung-970-evo-plus",
    smartctl_7_3_nvme_samsung_pm1725a_critical_warning => "smartctl/sce-7.3-nvme-samsung-pm1725a-critical-warning",
    smartctl_7_3_sas_hitachi_h109060 => "smartctl/sce-7.3-sas-hitachi-h109060",
    smartctl_7_3_sata_hdd_hgst_7k4000_exit64 => "smartctl/sce-7.3-sata-hdd-hgst-7k4000-exit64",
    smartctl_7_3_sata_hdd_seagate_st3200820as_exit64 => "smartctl/sce-7.3-sata-hdd-seagate-st3200820as-exit64",
    smartctl_7_3_sata_hdd_seagate_st500nm0011 => "smartctl/sce-7.3-sata-hdd-seagate-st500nm0011",
    smartctl_7_3_sata_hdd_wd_red_5400 => "smartctl/sce-7.3-sata-hdd-wd-red-5400",
    smartctl_7_3_sata_ssd_kingston_a400_exit4 => "smartctl/sce-7.3-sata-ssd-kingston-a400-exit4",
    smartctl_7_3_sata_ssd_samsung_sm843t => "smartctl/sce-7.3-sata-ssd-samsung-sm843t",
    smartctl_7_4_sas_hp_mas3735nc => "smartctl/sce-7.4-sas-hp-mas3735nc",
    smartctl_7_4_sas_seagate_st373453lc => "smartctl/sce-7.4-sas-seagate-st373453lc",
    smartctl_6_7_sas_seagate_st1200mm0088 => "smartctl/scrutiny-6.7-sas-seagate-st1200mm0088",
    smartctl_7_0_nvme_corsair_mp510 => "smartctl/scrutiny-7.0-nvme-corsair-mp510",
    smartctl_7_0_sata_hdd_wd140edfz => "smartctl/scrutiny-7.0-sata-hdd-wd140edfz",
    smartctl_7_0_sata_ssd_samsung_860_evo => "smartctl/scrutiny-7.0-sata-ssd-samsung-860-evo",
    smartctl_7_1_nvme_intel_660p => "smartctl/scrutiny-7.1-nvme-intel-660p",
    smartctl_7_1_sata_hdd_hitachi_exit216 => "smartctl/scrutiny-7.1-sata-hdd-hitachi-exit216",
    smartctl_7_2_nvme_kioxia_cd6_info => "smartctl/scrutiny-7.2-nvme-kioxia-cd6-info",
    nvme_cli_1_x_id_ctrl_wdc_sn730 => "nvme-cli/ironic-python-agent-1.x-id-ctrl-wdc-sn730",
    nvme_cli_2_11_list_verbose_firecuda => "nvme-cli/netdata-2.11-list-verbose-firecuda",
    nvme_cli_2_x_list_verbose_physicalsize_int32 => "nvme-cli/libstorage-ng-2.x-list-verbose-lenovo-physicalsize-int32",
    nvme_cli_2_11_smart_log_firecuda_thermal => "nvme-cli/netdata-2.11-smart-log-firecuda-thermal",
    nvme_cli_2_3_list_simple_firecuda => "nvme-cli/netdata-2.3-list-simple-firecuda",
    nvme_cli_list_simple_firecuda => "nvme-cli/netdata-godplugin-list-simple-firecuda",
    nvme_cli_smart_log_firecuda => "nvme-cli/netdata-godplugin-smart-log-firecuda",
    nvme_cli_smart_log_firecuda_float => "nvme-cli/netdata-godplugin-smart-log-firecuda-float",
    nvme_cli_smart_log_firecuda_string => "nvme-cli/netdata-godplugin-smart-log-firecuda-string",
}

#[test]
fn every_capture_has_a_test_and_an_expected_file() {
    let mut found = Vec::new();
    for dir in ["smartctl", "nvme-cli"] {
        let entries = std::fs::read_dir(corpus().join(dir)).unwrap_or_else(|e| panic!("{}: {e}", corpus().join(dir).display()));
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(stem) = name.strip_suffix(".json") {
                found.push(format!("{dir}/{stem}"));
                assert!(corpus().join(dir).join(format!("{stem}.expected")).is_file(), "{dir}/{stem}: no .expected file");
            }
        }
    }
    found.sort();
    let mut listed: Vec<String> = ALL.iter().map(|s| s.to_string()).collect();
    listed.sort();
    assert_eq!(found, listed, "captures on disk vs captures! list");
    assert!(found.len() >= 30, "corpus has {} captures", found.len());
    let provenance = std::fs::read_to_string(corpus().join("PROVENANCE.md")).unwrap_or_else(|e| panic!("PROVENANCE.md: {e}"));
    for f in &found {
        assert!(provenance.contains(&format!("{f}.json")), "{f}.json has no provenance line in PROVENANCE.md");
    }
}

/// Every temperature parsed from the corpus, as (capture, sensor, °C).
fn corpus_temperatures() -> Vec<(String, String, f64)> {
    let mut out = Vec::new();
    for rel in ALL {
        let text = std::fs::read_to_string(corpus().join(format!("{rel}.json"))).unwrap_or_else(|e| panic!("{rel}: {e}"));
        let mut push = |sensor: String, c: Option<Celsius>| {
            if let Some(c) = c {
                out.push((rel.to_string(), sensor, c.value()));
            }
        };
        if rel.starts_with("smartctl/") {
            let r = parse_report(&text, "", rel).unwrap_or_else(|e| panic!("{rel}: {e}"));
            push("Temperature".into(), r.temperature);
            for (i, c) in r.nvme.iter().flat_map(|n| n.sensors.iter()).enumerate() {
                push(format!("Sensor {}", i + 1), *c);
            }
        } else if rel.contains("smart-log") {
            let l = parse_smart_log(&text).unwrap_or_else(|e| panic!("{rel}: {e}"));
            push("Composite".into(), l.composite);
            for (i, c) in l.sensors.iter().enumerate() {
                push(format!("Sensor {}", i + 1), *c);
            }
        }
    }
    out
}

/// The collector validates every batch (wattflip_proto::domain::convert_batch) and rejects one
/// with a temperature outside -273.15..500 °C, so one misread field (310.0 K read as 3,100 K)
/// used to lose the whole batch. Every temperature from the corpus must pass that check.
#[test]
fn collector_accepts_every_corpus_temperature() {
    use wattflip_proto::domain::convert_batch;
    use wattflip_proto::v1;
    let temps = corpus_temperatures();
    // Counted by hand: 27 smartctl readings (all but the -i only KIOXIA; 3 of them the MegaRAID
    // disks), 13 NVMe sensors (4+1+3+2+3), 4 smart-log composites.
    assert_eq!(temps.len(), 44, "temperatures in the corpus");
    let batch = |celsius: &[f64]| v1::Batch {
        agent_id: "a1".into(),
        sequence: 1,
        temperature: celsius
            .iter()
            .map(|c| v1::TemperatureSample {
                time_ns: 1_700_000_000_000_000_000,
                source: "smartctl".into(),
                device: "nvme0".into(),
                sensor: "Composite".into(),
                celsius: *c,
            })
            .collect(),
        ..Default::default()
    };
    let all: Vec<f64> = temps.iter().map(|t| t.2).collect();
    let accepted = convert_batch("a1", batch(&all)).map(|b| b.temperature.len());
    assert_eq!(accepted.ok(), Some(44), "{temps:?}");
    for (rel, sensor, c) in &temps {
        assert!((0.0..=60.0).contains(c), "{rel} {sensor}: {c} °C is not a drive temperature");
    }
    // The old misreading of the float capture's 310.0 K as 3,100 K: the collector refuses it.
    assert!(convert_batch("a1", batch(&[3100.0 - 273.15])).is_err());
}

/// The cross-check on a real output: nvme-cli's composite from the 2.11 smart-log (324 K) against a
/// hwmon reading of the same Kelvin value (agrees) and one 10 °C hotter (disagrees, by +10 °C).
#[test]
fn cross_check_on_captures() {
    use wattflip_drives::crosscheck::{cross_check, Disagreement, SourceView, DEFAULT_TEMPERATURE_TOLERANCE};
    let path = corpus().join("nvme-cli/netdata-2.11-smart-log-firecuda-thermal.json");
    let log = parse_smart_log(&std::fs::read_to_string(path).expect("capture")).expect("parse");
    let nvme = SourceView::nvme_cli(None, Some(&log));
    assert_eq!(nvme.temperature, Some(Celsius(50.85)));
    let agree = SourceView::hwmon(Celsius::from_millidegrees(50_850));
    assert_eq!(cross_check(&[nvme.clone(), agree], DEFAULT_TEMPERATURE_TOLERANCE), []);
    let hot = SourceView::hwmon(Celsius::from_millidegrees(60_850));
    assert_eq!(
        cross_check(&[nvme, hot], DEFAULT_TEMPERATURE_TOLERANCE),
        [Disagreement::Temperature { reference: ("nvme-cli".into(), Celsius(50.85)), other: ("hwmon".into(), Celsius(60.85)), delta: 60.85 - 50.85 }]
    );
}
