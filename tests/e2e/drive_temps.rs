//! Drive temperatures from hwmon joined to their drives, end to end: the real agent on
//! tests/fixtures/sysfs/drive-temps (an `nvme` chip on PCI function 0000:3b:00.0, a `drivetemp`
//! chip on SCSI device 0:0:0:0; README there) with the fake nvme-cli (QEMU's controller at
//! /dev/nvme0, its smart-log 323 K) and a fake smartctl that finds /dev/sda (the constructed SATA
//! capture, 33 °C), through the collector into influxd. The hwmon readings carry the device tag of
//! the tools' readings of the same drive (`nvme0`, `sda`), and the inventory points name each
//! drive's controller and sysfs address, so the three join in one query each.

use crate::drives::{copy_exe, drive_fixtures, fake_nvme};
use std::time::Duration;
use wattflip_e2e::*;

const DB: &str = "wf_drive_temps";
const HOST: &str = "temps-1";

fn fake_smartctl_sda(dir: &std::path::Path) -> std::path::PathBuf {
    let d = dir.join("smartctl");
    std::fs::create_dir_all(&d).unwrap();
    let fx = drive_fixtures();
    copy_exe(&fx.join("fake-smartctl/smartctl"), &d.join("smartctl"));
    std::fs::write(
        d.join("scan.json"),
        r#"{"json_format_version":[1,0],"smartctl":{"version":[7,3],"exit_status":0},
"devices":[{"name":"/dev/sda","info_name":"/dev/sda [SAT]","type":"sat","protocol":"ATA"}]}"#,
    )
    .unwrap();
    std::fs::copy(fx.join("smartctl/constructed-smartctl-7.3-sata-a.json"), d.join("report.json")).unwrap();
    std::fs::write(d.join("report.exit"), "0\n").unwrap();
    // The agent also reads the NVMe controller through smartctl (`-d nvme`): QEMU's capture, 323 K.
    std::fs::copy(fx.join("smartctl/qemu-smartctl-7.3-nvme-H-A.json"), d.join("report-nvme.json")).unwrap();
    std::fs::write(d.join("report-nvme.exit"), "8\n").unwrap();
    d
}

#[test]
fn hwmon_drive_temperatures_join_the_tools_readings_and_the_inventory() {
    let influx = Influx::start();
    let collector = Collector::start(&influx.url, DB);
    let (tmp, sys) = sysfs_tree(&["drive-temps"]);
    let nvme = fake_nvme(tmp.path(), "qemu-nvme-cli-2.3-id-ctrl.json", "qemu-nvme-cli-2.3-list.json", 0, "refuse");
    let smartctl = fake_smartctl_sda(tmp.path());
    let cfg = agent_config(
        tmp.path(),
        &format!(
            "agent_id = \"{HOST}\"\n[collector]\nurl = \"{}\"\n[sampling]\ninterval = \"200ms\"\n[sources]\nsysfs_root = \"{}\"\n\
             [drives]\nnvme_path = \"{}\"\nsmartctl_path = \"{}\"\nsmart_interval = \"1h\"\ntimeout = \"10s\"\nstate_dir = \"{}\"\n{}",
            collector.url,
            sys.display(),
            nvme.join("nvme").display(),
            smartctl.join("smartctl").display(),
            tmp.path().join("state").display(),
            pki().agent_tls(HOST)
        ),
    );
    let mut agent = spawn_agent(tmp.path(), &["run", "--config", cfg.to_str().unwrap(), "--samples", "4"]);
    let status = wait_child(&mut agent, Duration::from_secs(60), tmp.path());
    assert!(status.success(), "{}", std::fs::read_to_string(tmp.path().join("agent.stderr")).unwrap());

    // One series per (drive, source, sensor): hwmon beside the tool that reads the same drive.
    let q = format!("SELECT last(celsius) FROM temperature WHERE host = '{HOST}' GROUP BY device, source, sensor");
    let want = 6;
    let all_in = wait_for(Duration::from_secs(20), || Some(influx.series(DB, &q)).filter(|s| s.len() >= want));
    let series = all_in.unwrap_or_else(|| panic!("{:?}\n{}", influx.series(DB, &q), collector.log()));
    let mut got: Vec<(String, String, String, f64)> = series
        .iter()
        .map(|(t, rows)| {
            let tag = |k: &str| t[k].as_str().unwrap_or("").to_string();
            (tag("device"), tag("source"), tag("sensor"), rows[0][1].as_f64().unwrap_or(f64::NAN))
        })
        .collect();
    got.sort_by(|a, b| (&a.0, &a.1, &a.2).cmp(&(&b.0, &b.1, &b.2)));
    let row = |d: &str, src: &str, s: &str, c: f64| (d.to_string(), src.to_string(), s.to_string(), c);
    assert_eq!(
        got,
        vec![
            row("nvme0", "hwmon", "Composite", 49.85),
            row("nvme0", "hwmon", "Sensor 1", 47.85),
            row("nvme0", "nvme_cli", "Composite", 49.85),
            // smartctl prints whole degrees, K − 273: 323 K → 50.
            row("nvme0", "smartctl", "Composite", 50.0),
            row("sda", "hwmon", "temp1", 33.0),
            row("sda", "smartctl", "Temperature", 33.0),
        ],
        "{}",
        collector.log()
    );

    // The inventory says where each drive sits: the join key of its hwmon chip.
    let q = format!("SELECT last(controller), last(sysfs_address) FROM inventory WHERE host = '{HOST}' GROUP BY device");
    let inv = influx.series(DB, &q);
    let mut got: Vec<(String, String, String)> = inv
        .iter()
        .map(|(t, rows)| {
            (t["device"].as_str().unwrap_or("").to_string(), rows[0][1].as_str().unwrap_or("").to_string(), rows[0][2].as_str().unwrap_or("").to_string())
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![("nvme0n1".to_string(), "nvme0".to_string(), "0000:3b:00.0".to_string()), ("sda".into(), "".into(), "0:0:0:0".into())],
        "{}",
        collector.log()
    );
}
