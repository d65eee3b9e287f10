//! The spine: agent on a fixture sysfs tree whose counters the test advances → collector →
//! InfluxDB; exact point counts and exact values read back over InfluxDB's HTTP API.

use std::time::Duration;
use wattflip_e2e::*;

const DB: &str = "wf_spine";
const HOST: &str = "e2e-node-1";
const TICKS: usize = 8;

/// RAPL zones of the two-sockets fixture with the energy (µJ) the test adds to each.
const ADVANCE: &[(&str, &str, u64)] = &[
    ("intel-rapl:0", "package-0", 3_000_000),
    ("intel-rapl:0:0", "package-0/core", 1_250_000),
    ("intel-rapl:0:1", "package-0/dram", 500_000),
    ("intel-rapl:1", "package-1", 2_000_000),
    ("intel-rapl:1:0", "package-1/core", 750_000),
    ("intel-rapl:1:1", "package-1/dram", 250_000),
    ("intel-rapl:2", "psys", 7_500_000),
];

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn agent_to_influx_exact_points_and_watts() {
    let influx = Influx::start();
    let collector = Collector::start(&influx.url, DB);
    let (tmp, sys) = sysfs_tree(&["two-sockets", "hwmon"]);
    let powercap = sys.join("class/powercap");
    // psys starts 2.5 J below its wrap point, so its advance wraps the counter.
    std::fs::write(powercap.join("intel-rapl:2/energy_uj"), format!("{}\n", 262_143_328_850u64 - 2_500_000)).unwrap();
    let cfg = agent_config(
        tmp.path(),
        &format!(
            "agent_id = \"{HOST}\"\n[labels]\nrack = \"r7\"\nrole = \"storage\"\n[collector]\nurl = \"{}\"\n\
             [sampling]\ninterval = \"200ms\"\n[sources]\nsysfs_root = \"{}\"\n\
             [drives]\nnvme_cli = false\nsmartctl = false\n{}",
            collector.url,
            sys.display(),
            pki().agent_tls(HOST)
        ),
    );
    let mut agent = spawn_agent(tmp.path(), &["run", "--config", cfg.to_str().unwrap(), "--samples", &TICKS.to_string()]);

    // Once the first tick's batch is stored (its ledger line on the agent's stderr: local, no
    // round trip through the collector and InfluxDB, which under load can outlast all the ticks),
    // every counter has its baseline and the advance lands in a later interval.
    let first = wait_for(Duration::from_secs(20), || {
        std::fs::read_to_string(tmp.path().join("agent.stderr")).ok().filter(|e| e.lines().any(|l| l.contains("wattflip::ledger") && l.contains("stored")))
    });
    assert!(first.is_some(), "the agent stored no batch; collector log:\n{}", collector.log());
    let before: Vec<u64> =
        ADVANCE.iter().map(|(id, _, _)| std::fs::read_to_string(powercap.join(id).join("energy_uj")).unwrap().trim().parse().unwrap()).collect();
    for ((id, _, add), old) in ADVANCE.iter().zip(&before) {
        let max: u64 = std::fs::read_to_string(powercap.join(id).join("max_energy_range_uj")).unwrap().trim().parse().unwrap();
        let new = (old + add) % max;
        overwrite_in_place(&powercap.join(id).join("energy_uj"), new);
    }
    let status = wait_child(&mut agent, Duration::from_secs(30), tmp.path());
    let stderr = std::fs::read_to_string(tmp.path().join("agent.stderr")).unwrap();
    assert!(status.success(), "agent failed:\n{stderr}");
    assert!(stderr.contains(&format!("{TICKS} ticks")), "{stderr}");

    // RAPL: one point per zone per tick after the baseline; energy sums to exactly the advance.
    for (_, zone, add) in ADVANCE {
        let q = format!("SELECT watts, joules, interval_ns FROM power WHERE host = '{HOST}' AND source = 'rapl' AND zone = '{zone}'");
        let rows = influx.rows(DB, &q);
        assert_eq!(rows.len(), TICKS - 1, "zone {zone}");
        let mut total = 0.0;
        for r in &rows {
            let (watts, joules, interval) = (f(&r[1]), f(&r[2]), f(&r[3]));
            assert!(interval > 0.0);
            // The exact relation between the stored fields, interval on the monotonic clock.
            assert_eq!(watts, joules / (interval / 1e9), "zone {zone} row {r:?}");
            total += joules;
        }
        assert_eq!(total, *add as f64 / 1e6, "zone {zone}: energy in InfluxDB");
        assert_eq!(rows.iter().filter(|r| f(&r[2]) > 0.0).count(), 1, "zone {zone}: one interval holds the advance");
    }
    // hwmon power meter: instantaneous 125 W on every tick.
    let rows = influx.rows(DB, &format!("SELECT watts FROM power WHERE host = '{HOST}' AND source = 'hwmon'"));
    assert_eq!(rows.len(), TICKS);
    assert!(rows.iter().all(|r| f(&r[1]) == 125.0), "{rows:?}");

    // Temperatures: four good sensors × TICKS, the garbage one only as an event.
    let series = influx.series(DB, &format!("SELECT count(celsius), max(celsius) FROM temperature WHERE host = '{HOST}' GROUP BY device, sensor"));
    let got: Vec<(String, String, f64, f64)> = series
        .iter()
        .map(|(t, rows)| (t["device"].as_str().unwrap().to_string(), t["sensor"].as_str().unwrap().to_string(), f(&rows[0][1]), f(&rows[0][2])))
        .collect();
    assert_eq!(
        got,
        vec![
            ("coretemp.0".into(), "Core 0".into(), TICKS as f64, 43.5),
            ("coretemp.0".into(), "Package id 0".into(), TICKS as f64, 45.0),
            ("coretemp.0".into(), "temp3".into(), TICKS as f64, 41.0),
            ("nvme0".into(), "Composite".into(), TICKS as f64, 49.85),
        ]
    );
    let events = influx.rows(DB, &format!("SELECT message FROM event WHERE host = '{HOST}' AND kind = 'sensor_error'"));
    assert_eq!(events.len(), 1, "a persistent sensor error is reported once: {events:?}");
    assert!(events[0][1].as_str().unwrap().contains("hwmon3/temp1_input: `garbage` is not an integer"));

    // Labels from the agent config are tags on every point.
    let rows = influx.rows(DB, "SELECT count(celsius) FROM temperature WHERE rack = 'r7' AND role = 'storage'");
    assert_eq!(f(&rows[0][1]), (4 * TICKS) as f64);
    // Inventory from the Hello, keyed by serial.
    let rows = influx.rows(DB, &format!("SELECT capacity_bytes, firmware, serial FROM inventory WHERE host = '{HOST}' AND device = 'nvme0n1'"));
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0][1].as_i64(), Some(1_073_741_824));
    assert_eq!(rows[0][2].as_str(), Some("7.2.0"));
    assert_eq!(rows[0][3].as_str(), Some("WF-SERIAL-0001"));
    let rows = influx.rows(DB, &format!("SELECT version, power_sources FROM agent WHERE host = '{HOST}'"));
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0][2].as_i64(), Some(8));
    drop(collector);
}

/// Reading power at 10 ms and reporting every 200 ms: window aggregates whose energy is still exact.
/// hwmon has its own rate (`[sampling.power_intervals]`), 50 ms: at most 4 readings per window.
#[test]
fn fast_power_sampling_sends_exact_window_aggregates() {
    let influx = Influx::start();
    let collector = Collector::start(&influx.url, "wf_fast");
    let (tmp, sys) = sysfs_tree(&["wrap", "hwmon"]);
    let energy = sys.join("class/powercap/intel-rapl:0/energy_uj");
    let cfg = agent_config(
        tmp.path(),
        &format!(
            "agent_id = \"fast-1\"\n[collector]\nurl = \"{}\"\n[sampling]\ninterval = \"200ms\"\npower_interval = \"10ms\"\n\
             [sampling.power_intervals]\nhwmon = \"50ms\"\n[sources]\nsysfs_root = \"{}\"\n{}",
            collector.url,
            sys.display(),
            pki().agent_tls("fast-1")
        ),
    );
    let mut agent = spawn_agent(tmp.path(), &["run", "--config", cfg.to_str().unwrap(), "--samples", "8"]);
    let seen = wait_for(Duration::from_secs(20), || {
        influx.try_rows("wf_fast", "SELECT count(watts) FROM power WHERE host = 'fast-1' AND source = 'hwmon'").filter(|r| !r.is_empty())
    });
    assert!(seen.is_some(), "no power reached InfluxDB:\n{}", collector.log());
    // 262143000000 → wraps at 262143328850 → 171150: exactly 0.5 J.
    overwrite_in_place(&energy, 171_150);
    let status = wait_child(&mut agent, Duration::from_secs(30), tmp.path());
    assert!(status.success(), "{}", std::fs::read_to_string(tmp.path().join("agent.stderr")).unwrap());

    let rows = influx.rows("wf_fast", "SELECT joules, watts, min_watts, max_watts, readings FROM power WHERE host = 'fast-1' AND source = 'rapl'");
    assert!(rows.len() >= 4, "{rows:?}");
    let total: f64 = rows.iter().map(|r| f(&r[1])).sum();
    assert_eq!(total, 0.5, "window energies add up to the counter's advance exactly");
    assert!(rows.iter().all(|r| r[5].as_i64().unwrap() >= 5), "each window aggregates many 10 ms readings: {rows:?}");
    assert!(rows.iter().all(|r| f(&r[3]) <= f(&r[2]) && f(&r[2]) <= f(&r[4])), "min ≤ mean ≤ max: {rows:?}");
    let rows = influx.rows("wf_fast", "SELECT watts, min_watts, max_watts FROM power WHERE host = 'fast-1' AND source = 'hwmon'");
    assert!(rows.iter().all(|r| f(&r[1]) == 125.0 && f(&r[2]) == 125.0 && f(&r[3]) == 125.0), "{rows:?}");
    // The 50 ms grid has 4 instants per 200 ms window, and a late read skips rather than catches up.
    let rows = influx.rows("wf_fast", "SELECT readings FROM power WHERE host = 'fast-1' AND source = 'hwmon'");
    assert!(!rows.is_empty() && rows.iter().all(|r| (2..=4).contains(&r[1].as_i64().unwrap())), "hwmon on its own 50 ms grid: {rows:?}");
}

/// hwmon voltage and current channels reach InfluxDB as their own `electrical` points: one per
/// channel per tick, exact values, chip and channel (label) as tags.
#[test]
fn voltage_and_current_channels_are_their_own_points() {
    let influx = Influx::start();
    let collector = Collector::start(&influx.url, "wf_electrical");
    let (tmp, sys) = sysfs_tree(&["ina3221"]);
    let cfg = agent_config(
        tmp.path(),
        &format!(
            "agent_id = \"volts-1\"\n[collector]\nurl = \"{}\"\n[sampling]\ninterval = \"200ms\"\n[sources]\nsysfs_root = \"{}\"\n\
             [drives]\nnvme_cli = false\nsmartctl = false\n{}",
            collector.url,
            sys.display(),
            pki().agent_tls("volts-1")
        ),
    );
    let mut agent = spawn_agent(tmp.path(), &["run", "--config", cfg.to_str().unwrap(), "--samples", "3"]);
    let status = wait_child(&mut agent, Duration::from_secs(30), tmp.path());
    assert!(status.success(), "{}", std::fs::read_to_string(tmp.path().join("agent.stderr")).unwrap());
    let q = |channel: &str, field: &str| {
        influx.rows(
            "wf_electrical",
            &format!("SELECT count({field}), min({field}), max({field}) FROM electrical WHERE host = 'volts-1' AND chip = 'ina3221-0-0041' AND channel = '{channel}'"),
        )
    };
    // The collector's writer flushes on its own schedule: wait until the last tick is in.
    let all_in = wait_for(Duration::from_secs(20), || q("curr4", "amperes").first().filter(|r| r[1].as_i64() == Some(3)).cloned());
    assert!(all_in.is_some(), "{}", collector.log());
    for (channel, field, value) in [
        ("SSD 12V", "volts", 12.0),
        ("SSD 3V3", "volts", 3.3),
        ("in4", "volts", 0.005),
        ("in7", "volts", 0.015),
        ("curr2", "amperes", 1.0),
        ("curr4", "amperes", 1.5),
    ] {
        let r = q(channel, field);
        assert_eq!(r.len(), 1, "{channel}: {r:?}\n{}", collector.log());
        assert_eq!((r[0][1].as_i64(), f(&r[0][2]), f(&r[0][3])), (Some(3), value, value), "{channel}: {r:?}");
    }
}
