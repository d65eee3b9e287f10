//! A storage server's drives end to end (issue 26): the real agent `run` on NVMe native multipath
//! (`tests/fixtures/sysfs/nvme-multipath`: one dual-port drive behind nvme0 and nvme1, one behind
//! nvme2, hidden per-path disks), two SAS disks behind a MegaRAID controller sharing `/dev/bus/0`
//! (real smartctl 7.1 captures, tests/fixtures/captures/PROVENANCE.md) and a SATA disk asleep,
//! and one asleep at discovery that wakes up (issue 39: identified by the first poll that finds
//! it awake), through the fake tools, the real collector and influxd. Each drive is one identity (no
//! `nvme-subsys0`, no path disk), each RAID disk is read with its own `-d` type and is its own
//! series, and the sleeping disk is left asleep: a `drive_power_mode` point, not an error.

use crate::drives::{config_with, drive_fixtures, fake_nvme, fake_smartctl};
use std::time::Duration;
use wattflip_e2e::*;

const DB: &str = "wf_drives_fleet";
const HOST: &str = "e2e-drives";

#[test]
fn multipath_raid_and_sleeping_drives_reach_influx_as_one_identity_each() {
    let influx = Influx::start();
    let collector = Collector::start(&influx.url, DB);
    let tmp = tempfile::tempdir().unwrap();
    let sys = tmp.path().join("sys");
    std::fs::create_dir_all(&sys).unwrap();
    let fixture = fixtures().join("sysfs/nvme-multipath/sys/.");
    assert!(std::process::Command::new("cp").arg("-a").arg(&fixture).arg(&sys).status().unwrap().success());
    let nvme = fake_nvme(tmp.path(), "qemu-nvme-cli-2.3-id-ctrl.json", "qemu-nvme-cli-2.3-list.json", 0, "refuse");
    // nvme list is not what names the drives here (sysfs is): an empty list.
    std::fs::write(nvme.join("list.json"), "{\"Devices\":[]}\n").unwrap();
    let smartctl = fake_smartctl(tmp.path());
    std::fs::write(
        smartctl.join("scan.json"),
        r#"{"json_format_version":[1,0],"smartctl":{"version":[7,1],"exit_status":0},"devices":[
{"name":"/dev/nvme0","info_name":"/dev/nvme0","type":"nvme","protocol":"NVMe"},
{"name":"/dev/bus/0","info_name":"/dev/bus/0 [megaraid_disk_01]","type":"megaraid,1","protocol":"SCSI"},
{"name":"/dev/bus/0","info_name":"/dev/bus/0 [megaraid_disk_02]","type":"megaraid,2","protocol":"SCSI"},
{"name":"/dev/sdc","info_name":"/dev/sdc [SAT]","type":"sat","protocol":"ATA"},
{"name":"/dev/sdd","info_name":"/dev/sdd","type":"ata","protocol":"ATA"}]}"#,
    )
    .unwrap();
    let captures = fixtures().join("captures/smartctl");
    std::fs::rename(smartctl.join("report.json"), smartctl.join("report-nvme.json")).unwrap();
    std::fs::rename(smartctl.join("report.exit"), smartctl.join("report-nvme.exit")).unwrap();
    for (n, capture) in [(1, "sce-7.1-sas-megaraid1-toshiba-mg08sca16tey.json"), (2, "sce-7.1-sas-megaraid2-toshiba-mg08sca16tey.json")] {
        std::fs::copy(captures.join(capture), smartctl.join(format!("report-megaraid,{n}.json"))).unwrap();
    }
    std::fs::copy(drive_fixtures().join("smartctl/constructed-smartctl-7.4-sata-n-standby-skipped.json"), smartctl.join("report-sat.json")).unwrap();
    std::fs::write(smartctl.join("report-sat.exit"), "2\n").unwrap();
    // sdd: asleep at discovery (its first call), awake at the first poll.
    std::fs::copy(drive_fixtures().join("smartctl/constructed-smartctl-7.4-sata-n-standby-skipped.json"), smartctl.join("report-ata.json")).unwrap();
    std::fs::write(smartctl.join("report-ata.exit"), "2\n").unwrap();
    std::fs::write(smartctl.join("report-ata.sleeps"), "1\n").unwrap();
    std::fs::copy(drive_fixtures().join("smartctl/constructed-smartctl-7.3-sata-a.json"), smartctl.join("report-ata.awake.json")).unwrap();
    let cfg = config_with(tmp.path(), &collector.url, &nvme, Some(&smartctl), "");

    let mut child = spawn_agent(tmp.path(), &["run", "--config", cfg.to_str().unwrap(), "--samples", "3"]);
    let status = wait_child(&mut child, Duration::from_secs(90), tmp.path());
    let stderr = std::fs::read_to_string(tmp.path().join("agent.stderr")).unwrap();
    assert!(status.success(), "agent failed:\n{stderr}");

    // The inventory: two NVMe drives (no path disk), the two RAID disks and the SATA disks.
    let devices: Vec<String> = influx
        .series(DB, &format!("SELECT last(power_states) FROM inventory WHERE host = '{HOST}' GROUP BY device"))
        .iter()
        .map(|(t, _)| t["device"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(devices, vec!["bus/0:megaraid,1", "bus/0:megaraid,2", "nvme0n1", "nvme1n1", "sdc", "sdd"], "collector log:\n{}", collector.log());

    // Temperatures (series in InfluxDB's order: by device, then source): each NVMe drive under
    // its controller (nvme0, nvme2: never nvme-subsys0, and the second path nvme1 not as a drive of
    // its own), each RAID disk under its own tag with its captured value, none for the sleeping
    // disk, sdd's once it woke up. The fake nvme-cli emulates /dev/nvme0 only: nvme2's smart-log fails, which degrades
    // only that reading (smartctl still reads nvme2).
    let series = influx.series(DB, &format!("SELECT last(celsius) FROM temperature WHERE host = '{HOST}' GROUP BY source, device"));
    let got: Vec<(String, String, f64)> = series
        .iter()
        .map(|(t, rows)| (t["source"].as_str().unwrap_or("").into(), t["device"].as_str().unwrap_or("").into(), rows[0][1].as_f64().unwrap_or(f64::NAN)))
        .collect();
    let want: Vec<(String, String, f64)> = [
        ("smartctl", "bus/0:megaraid,1", 31.0),
        ("smartctl", "bus/0:megaraid,2", 30.0),
        ("nvme_cli", "nvme0", 49.85),
        ("smartctl", "nvme0", 50.0),
        ("smartctl", "nvme2", 50.0),
        ("smartctl", "sdd", 33.0),
    ]
    .iter()
    .map(|(s, d, c)| (s.to_string(), d.to_string(), *c))
    .collect();
    assert_eq!(got, want, "collector log:\n{}", collector.log());

    raid_identities_join_their_temperatures(&influx, &got);
    the_disk_asleep_at_discovery_is_identified_once(&influx);

    // The sleeping disk: its power mode, skipped, and no error about it.
    let rows = influx.rows(DB, &format!("SELECT mode, level, skipped FROM drive_power_mode WHERE host = '{HOST}' AND device = 'sdc'"));
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!((rows[0][1].as_str(), rows[0][2].as_i64(), rows[0][3].as_bool()), (Some("standby"), Some(1), Some(true)));
    let errors = influx.rows(DB, &format!("SELECT message FROM event WHERE host = '{HOST}' AND kind = 'sensor_error' AND device = 'sdc'"));
    assert!(errors.is_empty(), "{errors:?}");
    // Every smartctl poll of the SATA disk passed -n standby; the RAID disks their own types.
    let calls = std::fs::read_to_string(smartctl.join("calls")).unwrap();
    assert!(calls.lines().any(|l| l == "--json -a -n standby -d sat /dev/sdc"), "{calls}");
    assert!(calls.lines().any(|l| l == "--json -a -n standby -d megaraid,2 /dev/bus/0"), "{calls}");
    let sdd: Vec<&str> = calls.lines().filter(|l| l.ends_with("/dev/sdd")).collect();
    assert!(sdd.len() >= 2 && sdd.iter().all(|l| *l == "--json -a -n standby -d ata /dev/sdd"), "{calls}");
}

/// Each RAID disk's identity row and its temperature rows (`got`: source, device, °C) join by
/// `device`: one model per device, the temperature as captured.
fn raid_identities_join_their_temperatures(influx: &Influx, got: &[(String, String, f64)]) {
    let identity: std::collections::BTreeMap<String, String> = influx
        .series(DB, &format!("SELECT last(firmware) FROM inventory WHERE host = '{HOST}' AND device =~ /^bus/ GROUP BY device, model"))
        .iter()
        .map(|(t, _)| (t["device"].as_str().unwrap_or("").to_string(), t["model"].as_str().unwrap_or("").to_string()))
        .collect();
    let joined: Vec<(String, String, f64)> =
        got.iter().filter_map(|(_, device, c)| identity.get(device).map(|model| (device.clone(), model.clone(), *c))).collect();
    let want_joined = [("bus/0:megaraid,1", 31.0), ("bus/0:megaraid,2", 30.0)].map(|(d, c)| (d.to_string(), "TOSHIBA MG08SCA16TEY".to_string(), c));
    assert_eq!((identity.len(), joined), (2, want_joined.to_vec()), "{identity:?}");
}

/// The disk asleep at discovery: listed by the Hello without identity, then identified once by
/// the poll that found it awake (an `inventory` point with its model and serial, one event).
fn the_disk_asleep_at_discovery_is_identified_once(influx: &Influx) {
    let rows = influx.rows(DB, &format!("SELECT model, serial, capacity_bytes, firmware FROM inventory WHERE host = '{HOST}' AND device = 'sdd'"));
    let ids: Vec<(Option<&str>, Option<&str>, Option<i64>)> = rows.iter().map(|r| (r[1].as_str(), r[2].as_str(), r[3].as_i64())).collect();
    assert!(ids.contains(&(None, None, None)), "the Hello's entry: {rows:?}");
    assert_eq!(
        ids.iter().filter(|r| r.1.is_some()).collect::<Vec<_>>(),
        vec![&(Some("WATTFLIP CONSTRUCTED SATA SSD 500GB"), Some("S0SATA0000001"), Some(500_107_862_016))],
        "{rows:?}"
    );
    let identified = influx.rows(DB, &format!("SELECT message FROM event WHERE host = '{HOST}' AND kind = 'drive_identified' AND device = 'sdd'"));
    assert_eq!(identified.len(), 1, "{identified:?}");
}
