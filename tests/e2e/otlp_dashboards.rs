//! The PromQL dashboards (`dashboards/prometheus/`, issue 28 item 4) against their InfluxQL
//! originals: the known fleet of `otlp_fleet.rs` through the real collector into both stores,
//! then every panel of the PromQL power budget run against the real Prometheus and the panel of
//! the same title in `dashboards/power-budget.json` run against the real influxd, with Grafana's
//! variables substituted alike (group by rack, then by host; all hosts; 10 s interval; the fleet's
//! minute as the range); each group's numbers must be equal.

use crate::otlp_fleet::*;
use serde_json::Value;
use std::collections::BTreeMap;
use wattflip_e2e::prometheus::Prometheus;
use wattflip_e2e::*;

const DB: &str = "wf_otlp_dash";
/// InfluxDB tag → Prometheus label of the same thing.
const LABELS: &[(&str, &str)] = &[("host", "instance"), ("budget", "wattflip_budget"), ("zone", "hw_name"), ("rack", "rack")];

fn dashboard(path: &str) -> BTreeMap<String, Value> {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../dashboards").join(path);
    let d: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    d["panels"].as_array().unwrap().iter().map(|p| (p["title"].as_str().unwrap().to_string(), p.clone())).collect()
}

/// A group's key: the Influx tags (or the Prometheus labels they map to) of a series.
type Key = BTreeMap<String, String>;

fn influx_panel(influx: &Influx, panel: &Value, group_by: &str, t0_ms: i64) -> BTreeMap<Key, Vec<f64>> {
    let q = panel["targets"][0]["query"].as_str().unwrap();
    let q = q
        .replace("$timeFilter", &format!("time >= {t0_ms}ms and time <= {}ms", t0_ms + 60_000))
        .replace("$__interval", "10s")
        .replace("$group_by", group_by)
        .replace("$budget_w", "1000")
        .replace("/^$host$/", "/^.*$/");
    let mut out = BTreeMap::new();
    for (tags, rows) in influx.series(DB, &q) {
        let key: Key = tags.as_object().map(|o| o.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect()).unwrap_or_default();
        // A time series: its column 1 per bucket; a table (one row): every column after time.
        let values: Vec<f64> = if panel["type"] == "table" { rows[0][1..].iter().map(|v| v.as_f64().unwrap()).collect() } else { rows.iter().map(|r| r[1].as_f64().unwrap()).collect() };
        out.insert(key, values);
    }
    out
}

fn prom_panel(prom: &Prometheus, panel: &Value, group_by: &str, keys: &[&str], t0_s: f64) -> BTreeMap<Key, Vec<f64>> {
    let label = LABELS.iter().find(|(i, _)| *i == group_by).map(|(_, p)| *p).unwrap();
    let mut out: BTreeMap<Key, Vec<f64>> = BTreeMap::new();
    for t in panel["targets"].as_array().unwrap() {
        let q = t["expr"].as_str().unwrap().replace("$__interval", "10s").replace("$__range", "60s").replace("$group_by", label).replace("$budget_w", "1000").replace("$host", ".*");
        let series = if panel["type"] == "table" { prom.series(&q, t0_s + 60.0) } else { prom.range(&q, t0_s + 10.0, t0_s + 60.0, 10.0) };
        for (labels, samples) in series {
            // Back to InfluxDB's tag names, keeping those the InfluxQL panel groups by.
            let key: Key = LABELS.iter().filter(|(i, _)| keys.contains(i)).filter_map(|(i, p)| labels.get(*p).map(|v| (i.to_string(), v.clone()))).collect();
            out.entry(key).or_default().extend(samples.iter().map(|s| s.1));
        }
    }
    out
}

#[test]
fn every_promql_budget_panel_equals_its_influxql_panel() {
    let prom = Prometheus::start();
    let influx = Influx::start();
    let extra = format!("{}\n[otlp]\nurl = \"{}\"\nrequired = true\nflush_interval = \"100ms\"\n", pki().collector_tls(), prom.otlp_url());
    let _collector = Collector::start_with(free_port(), &influx.url, DB, &extra);
    let t0 = fleet_t0();
    // The sink is required: once the last batch is acknowledged, both stores hold the fleet.
    stream(&_collector.url, t0);
    let (t0_s, t0_ms) = (t0 as f64 / 1e9, t0 / 1_000_000);
    let influx_panels = dashboard("power-budget.json");
    let prom_panels = dashboard("prometheus/power-budget.json");
    assert_eq!(prom_panels.keys().collect::<Vec<_>>(), influx_panels.keys().collect::<Vec<_>>(), "the same panels");
    let mut compared = 0;
    for group_by in ["rack", "host"] {
        for (title, ip) in &influx_panels {
            let want = influx_panel(&influx, ip, group_by, t0_ms);
            let keys: Vec<&str> = want.keys().next().map(|k| k.keys().map(String::as_str).collect()).unwrap_or_default();
            let got = prom_panel(&prom, &prom_panels[title], group_by, &keys, t0_s);
            assert!(!want.is_empty(), "{title} by {group_by}: the InfluxQL panel shows nothing");
            assert_eq!(got, want, "{title} (group by {group_by}): PromQL vs InfluxQL");
            compared += want.len();
        }
    }
    // Racks ra, rb and three hosts; zones: 1 + 2 + 1 tier zones (wall; psys, drive; package, DRAM).
    assert!(compared > 20, "{compared} groups compared");
    let ra = influx_panel(&influx, &influx_panels["Power per $group_by"], "rack", t0_ms);
    let by_hand: Vec<f64> = (0..BUCKETS).map(|k| HOST_POWER[0].1[k] + HOST_POWER[1].1[k]).collect();
    assert_eq!(ra[&[("rack".to_string(), "ra".to_string())].into_iter().collect::<Key>()], by_hand, "rack ra by hand");
}
