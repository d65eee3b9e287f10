//! The dashboards read raw points or the 1-minute rollups by time range (docs/schema.md,
//! *Dashboards: resolution by range*), through the real collector's markers in a real influxd:
//! the `rp` variable (and the peak-field variables beside it) says `raw` for a range within a
//! day that starts inside the raw retention and `rollup_1m` for a longer range or one that starts
//! before it, the same in every dashboard; and the panels that read `power` and `temperature`
//! answer the same from either policy over whole minutes (peaks, energy and means exactly), equal
//! to the generator's numbers (tests/e2e/rollups.rs, quarters of a watt).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::dashboards::{load, panel, resolution_vars, run, s, substitute};
use crate::rollups::{collector, rolled_points, wait, watts, Stream, MINUTE_NS, PER_MINUTE, ZONES};
use serde_json::Value;
use std::collections::BTreeMap;
use wattflip_e2e::*;

const DB: &str = "wf_dash_rollups";
const DAY_MS: i64 = 86_400_000;

/// The resolution variables of every dashboard over `range`: all equal, returned once.
fn resolution(influx: &Influx, range: (i64, i64)) -> BTreeMap<String, String> {
    let mut all: BTreeMap<String, String> = BTreeMap::new();
    for (file, d) in load() {
        for (k, v) in resolution_vars(&influx.url, DB, &d, range).unwrap_or_else(|e| panic!("{file}: {e}")) {
            let prev = all.insert(k.clone(), v.clone());
            assert!(prev.as_ref().is_none_or(|p| *p == v), "{file}: `{k}` = {v}, another dashboard said {prev:?}");
        }
    }
    all
}

/// (tags, rows) of one panel's first target with `vars` over `range`.
fn panel_rows(influx: &Influx, file: &str, title: &str, vars: &BTreeMap<String, String>, range: (i64, i64)) -> Vec<(Value, Vec<Vec<Value>>)> {
    let d = load().into_iter().find(|(f, _)| f == file).unwrap().1;
    let q = substitute(s(&panel(&d, title)["targets"][0]["query"]), vars, range.0, range.1);
    let series = run(&influx.url, DB, &q).unwrap_or_else(|e| panic!("{title}: {e}\n  query: {q}"));
    series.iter().map(|x| (x["tags"].clone(), x["values"].as_array().unwrap().iter().map(|r| r.as_array().unwrap().clone()).collect())).collect()
}

#[test]
fn dashboards_read_rollups_beyond_a_day_or_the_raw_retention_and_answer_the_same() {
    let influx = Influx::start();
    let c = collector(&influx, DB);
    // Six whole minutes three hours ago, two hosts: inside the 7-day raw retention.
    let t0 = (wattflip_e2e::fleet::now_ns() / MINUTE_NS - 180) * MINUTE_NS;
    let end = t0 + 6 * MINUTE_NS;
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        for (h, host) in ["dr-a", "dr-b"].into_iter().enumerate() {
            let mut st = Stream::open(&c.url, host, "rd").await;
            for m in 0..6 {
                st.send(h as i64, &ZONES, t0, m, 0..PER_MINUTE).await;
            }
        }
    });
    wait("every raw power point rolled up", || rolled_points(&influx, DB, t0, end) == 2 * 2 * 6 * PER_MINUTE);

    // Which policy each range reads.
    let now_ms = wattflip_e2e::fleet::now_ns() / 1_000_000;
    let window = (t0 / 1_000_000, end / 1_000_000 - 1);
    let raw = |rp: &str, power_rp: &str, c: &str, w: &str| {
        [("peak_celsius", c), ("peak_watts", w), ("power_rp", power_rp), ("rp", rp)].iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    };
    let (as_raw, as_rollup, as_hourly): (BTreeMap<String, String>, BTreeMap<String, String>, BTreeMap<String, String>) = (
        raw("raw", "raw", "celsius", "watts"),
        raw("rollup_1m", "rollup_1m", "peak_celsius", "peak_watts"),
        raw("rollup_1m", "rollup_1h", "peak_celsius", "peak_watts"),
    );
    assert_eq!(resolution(&influx, window), as_raw, "six minutes three hours ago");
    assert_eq!(resolution(&influx, (now_ms - DAY_MS + 60_000, now_ms)), as_raw, "the last 23 h 59 min");
    assert_eq!(resolution(&influx, (now_ms - DAY_MS - 60_000, now_ms)), as_rollup, "the last 24 h 1 min");
    assert_eq!(resolution(&influx, (now_ms - 7 * DAY_MS, now_ms)), as_rollup, "the last 7 days");
    // Beyond a week the power panels read the hourly tier, the others the minute rollups.
    assert_eq!(resolution(&influx, (now_ms - 30 * DAY_MS, now_ms)), as_hourly, "the last 30 days");
    assert_eq!(resolution(&influx, (now_ms - 10 * DAY_MS, now_ms - 10 * DAY_MS + 1_800_000)), as_rollup, "30 minutes ten days ago, before the raw retention");

    // The same panels over the same whole minutes from either policy.
    let mut vars = BTreeMap::from([
        ("host".to_string(), "(dr\\-a|dr\\-b)".to_string()),
        ("scope".to_string(), ".*".to_string()),
        ("device".to_string(), "nvme0".to_string()),
    ]);
    let both = |file: &str, title: &str, vars: &mut BTreeMap<String, String>| {
        vars.extend(as_raw.clone());
        let r = panel_rows(&influx, file, title, vars, window);
        vars.extend(as_rollup.clone());
        (r, panel_rows(&influx, file, title, vars, window))
    };
    // Energy: Σ joules per zone, exact; only the counter zone has any.
    let (raw_e, roll_e) = both("fleet-overview.json", "Energy in the range per zone", &mut vars);
    let energy: Vec<(String, f64)> = raw_e.iter().map(|(t, r)| (format!("{}/{}", s(&t["host"]), s(&t["zone"])), r[0][1].as_f64().unwrap())).collect();
    let want = |h: i64| (0..6).flat_map(|m| (0..PER_MINUTE).map(move |i| watts(h, 0, m, i) * 5.0)).sum::<f64>();
    assert_eq!(energy, vec![("dr-a/package-0".to_string(), want(0)), ("dr-b/package-0".to_string(), want(1))], "energy from raw points");
    assert_eq!(roll_e, raw_e, "energy from rollups");
    // Peaks and means per zone of the hosts' budget tier (the table of the power budget).
    let (raw_p, roll_p) = both("power-budget.json", "Peak per host and zone", &mut vars);
    assert!(!raw_p.is_empty(), "no budget-tier power in the window");
    for (tags, rows) in &raw_p {
        let (h, z) = (i64::from(s(&tags["host"]) == "dr-b"), i64::from(s(&tags["zone"]) == "dcmi"));
        let w: Vec<f64> = (0..6).flat_map(|m| (0..PER_MINUTE).map(move |i| watts(h, z, m, i))).collect();
        let (peak, mean) = (w.iter().copied().fold(f64::MIN, f64::max), w.iter().sum::<f64>() / w.len() as f64);
        assert_eq!((rows[0][1].as_f64(), rows[0][2].as_f64()), (Some(peak), Some(mean)), "{tags}: raw peak and mean");
    }
    assert_eq!(roll_p, raw_p, "peaks and means from rollups");
    // Temperatures: the highest reading of the window, whatever the buckets.
    let (raw_t, roll_t) = both("fleet-overview.json", "Temperatures", &mut vars);
    let top = |x: &[(Value, Vec<Vec<Value>>)]| {
        x.iter().map(|(t, r)| (s(&t["host"]).to_string(), r.iter().filter_map(|r| r[1].as_f64()).fold(f64::MIN, f64::max))).collect::<Vec<_>>()
    };
    let want_t = (0..6).flat_map(|m| (0..PER_MINUTE).map(move |i| 40.0 + 0.125 * ((i + m) % 9) as f64)).fold(f64::MIN, f64::max);
    assert_eq!(top(&raw_t), vec![("dr-a".to_string(), want_t), ("dr-b".to_string(), want_t)], "peak temperature from raw points");
    assert_eq!(top(&roll_t), top(&raw_t), "peak temperature from rollups");
    drop(c);
}

#[test]
fn markers_are_written_before_any_agent_has_and_without_warnings() {
    // A fresh influxd without the database: the collector creates it for its markers.
    let influx = Influx::start();
    let c = Collector::start(&influx.url, "wf_dash_fresh");
    let q = "SELECT last(\"rp\") FROM \"wattflip_resolution\"";
    let rp = || influx.try_rows("wf_dash_fresh", q).and_then(|r| r.first().and_then(|r| r[1].as_str().map(str::to_string)));
    assert_eq!(wait_for(std::time::Duration::from_secs(20), rp).as_deref(), Some("autogen"), "the default policy's marker:\n{}", c.log());
    assert!(!c.log().contains("resolution markers"), "the collector warned about its markers:\n{}", c.log());
}
