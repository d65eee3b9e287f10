//! Power sources that appear while the agent runs (a second RAPL package whose driver loads late,
//! an INA226 hwmon chip) are sampled at their `power_interval` like the zones found at start-up,
//! not on the report tick: the real agent binary, a fixture tree changed under it, the window
//! aggregates in a real influxd. The agent scans sysfs again every 30 s, so this test runs ~40 s.

use std::time::Duration;
use wattflip_e2e::*;

const DB: &str = "wf_rediscovery";
const HOST: &str = "late-zones";

#[test]
fn zones_that_appear_while_running_get_window_aggregates_at_their_power_interval() {
    let influx = Influx::start();
    let collector = Collector::start(&influx.url, DB);
    let (tmp, sys) = sysfs_tree(&["vanished-zone"]);
    let pkg1 = sys.join("class/powercap/intel-rapl:1");
    let parked = tmp.path().join("intel-rapl-1");
    std::fs::rename(&pkg1, &parked).unwrap();
    let cfg = agent_config(
        tmp.path(),
        &format!(
            "agent_id = \"{HOST}\"\n[collector]\nurl = \"{}\"\n[sampling]\ninterval = \"500ms\"\npower_interval = \"50ms\"\n\
             [sources]\nsysfs_root = \"{}\"\n[drives]\nnvme_cli = false\nsmartctl = false\n{}",
            collector.url,
            sys.display(),
            pki().agent_tls(HOST)
        ),
    );
    // 72 ticks of 500 ms: the scan at 30 s, then about 6 s of the new zones.
    let mut agent = spawn_agent(tmp.path(), &["run", "--config", cfg.to_str().unwrap(), "--samples", "72"]);
    let stderr = tmp.path().join("agent.stderr");
    let started = wait_for(Duration::from_secs(30), || std::fs::read_to_string(&stderr).ok().filter(|e| e.contains("sensors discovered")));
    assert!(started.is_some(), "the agent did not start: {}", std::fs::read_to_string(&stderr).unwrap_or_default());
    std::fs::rename(&parked, &pkg1).unwrap();
    let status = std::process::Command::new("cp").arg("-a").arg(fixtures().join("sysfs/ina226/sys/class/hwmon")).arg(sys.join("class")).status().unwrap();
    assert!(status.success());
    let status = wait_child(&mut agent, Duration::from_secs(90), tmp.path());
    let log = std::fs::read_to_string(&stderr).unwrap();
    assert!(status.success(), "{log}");

    let rows = influx.rows(DB, &format!("SELECT message FROM event WHERE host = '{HOST}' AND kind = 'sensor_available'"));
    let mut messages: Vec<&str> = rows.iter().map(|r| r[1].as_str().unwrap()).collect();
    messages.sort();
    let ina = sys.join("class/hwmon/hwmon0/power1_input");
    let rapl = pkg1.join("energy_uj");
    assert_eq!(
        messages,
        vec![
            format!("new hwmon power source ina226-0-0040/power1 ({}), read every 50ms from now on", ina.display()),
            format!("new rapl power source package-1 ({}), read every 50ms from now on", rapl.display()),
        ],
        "{log}"
    );
    // Window aggregates: the 50 ms grid has 10 instants per 500 ms window. The first window of a
    // new zone is partial; a late read skips an instant rather than catching up. Read on the tick
    // instead, a zone would get one raw reading per window (no `readings` at all).
    for (zone, watts) in [("package-1", 0.0), ("ina226-0-0040/power1", 18.0)] {
        let rows = influx.rows(DB, &format!("SELECT readings, watts, min_watts, max_watts FROM power WHERE host = '{HOST}' AND zone = '{zone}'"));
        let readings: Vec<i64> = rows.iter().map(|r| r[1].as_i64().unwrap_or(-1)).collect();
        let full = &readings[1.min(readings.len())..];
        assert!(full.len() >= 6, "{zone}: {readings:?}");
        // Never more than the grid has; at least 3 even on a machine loaded by the other tests.
        assert!(full.iter().all(|n| (3..=10).contains(n)), "{zone}: {readings:?}");
        assert_eq!(full.iter().max(), Some(&10), "{zone}: {readings:?}");
        assert!(rows.iter().skip(1).all(|r| r[2].as_f64() == Some(watts) && r[3].as_f64() == Some(watts) && r[4].as_f64() == Some(watts)), "{zone}: {rows:?}");
    }
}
