//! The ACPI power meter in the layout its driver creates (tests/fixtures/sysfs/acpi-power-meter:
//! `acpi_power_meter` registers the old way, so `power1_average` and `name` are in
//! `hwmon0/device/`, hwmon0 itself holds only its `device` link) on a host that also has RAPL
//! (`rapl-only`), through the real agent, collector and influxd: the meter's 372 W (the fixture's
//! `power1_average`, 372000000 µW) is stored with scope `wall` and is the host's budgeted power
//! (tag `budget` = `wall`); RAPL's points are stored but never budgeted.

use std::time::Duration;
use wattflip_e2e::*;

#[test]
fn acpi_meter_in_hwmon_device_folder_is_the_budgeted_host_power_not_rapl() {
    let influx = Influx::start();
    let collector = Collector::start(&influx.url, "wf_acpi_meter");
    let (tmp, sys) = sysfs_tree(&["acpi-power-meter", "rapl-only"]);
    let cfg = agent_config(
        tmp.path(),
        &format!(
            "agent_id = \"acpi-1\"\n[collector]\nurl = \"{}\"\n[sampling]\ninterval = \"200ms\"\n[sources]\nsysfs_root = \"{}\"\n\
             [drives]\nnvme_cli = false\nsmartctl = false\n{}",
            collector.url,
            sys.display(),
            pki().agent_tls("acpi-1")
        ),
    );
    let mut agent = spawn_agent(tmp.path(), &["run", "--config", cfg.to_str().unwrap(), "--samples", "4"]);
    let status = wait_child(&mut agent, Duration::from_secs(30), tmp.path());
    assert!(status.success(), "{}", std::fs::read_to_string(tmp.path().join("agent.stderr")).unwrap());
    let q = "SELECT mean(watts) FROM power WHERE host = 'acpi-1' AND budget = 'wall' GROUP BY zone, scope";
    let meter = wait_for(Duration::from_secs(20), || Some(influx.series("wf_acpi_meter", q)).filter(|s| !s.is_empty()));
    let meter = meter.unwrap_or_else(|| panic!("no budgeted wall power for acpi-1\n{}", collector.log()));
    let got: Vec<(String, String, f64)> = meter
        .iter()
        .map(|(t, rows)| {
            let tag = |k: &str| t[k].as_str().unwrap_or("").to_string();
            (tag("zone"), tag("scope"), rows[0][1].as_f64().unwrap_or(f64::NAN))
        })
        .collect();
    assert_eq!(got, vec![("power_meter-ACPI000D:00/power1".to_string(), "wall".to_string(), 372.0)], "{}", collector.log());
    // RAPL's zones are there (the host has them) but carry no budget tag: the meter is the host.
    let q = "SELECT count(watts) FROM power WHERE host = 'acpi-1' AND source = 'rapl' GROUP BY zone, budget";
    let rapl = wait_for(Duration::from_secs(20), || Some(influx.series("wf_acpi_meter", q)).filter(|s| !s.is_empty()));
    let rapl = rapl.unwrap_or_else(|| panic!("no RAPL points for acpi-1\n{}", collector.log()));
    for (t, _) in &rapl {
        assert_eq!(t["budget"].as_str().unwrap_or(""), "", "RAPL zone {} budgeted beside the ACPI meter", t["zone"]);
    }
}
