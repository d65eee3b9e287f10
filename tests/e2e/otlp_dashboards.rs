//! The PromQL dashboards (`dashboards/prometheus/`, issue 28 item 4) against their InfluxQL
//! originals: the known fleet of `otlp_fleet.rs` through the real collector into both stores,
//! then every panel of the PromQL power budget and fleet overview run against the real
//! Prometheus and the panel of the same title in `dashboards/*.json` run against the real
//! influxd, with Grafana's variables substituted alike (group by rack, then by host; all hosts;
//! 10 s interval; the fleet's minute as the range); each group's numbers must be equal.

use crate::otlp_fleet::*;
use serde_json::Value;
use std::collections::BTreeMap;
use wattflip_e2e::prometheus::Prometheus;
use wattflip_e2e::*;

const DB: &str = "wf_otlp_dash";
/// InfluxDB tag → Prometheus label of the same thing.
const LABELS: &[(&str, &str)] = &[
    ("host", "instance"),
    ("budget", "wattflip_budget"),
    ("zone", "hw_name"),
    ("rack", "rack"),
    ("source", "wattflip_source"),
    ("scope", "wattflip_scope"),
    ("device", "hw_parent"),
    ("sensor", "hw_name"),
];

/// Grafana's variables as both dashboards are substituted: every host, scope, device and model.
fn substitute(q: &str, group_by: &str) -> String {
    let mut q =
        q.replace("$__interval", "10s").replace("$__range", "60s").replace("$budget_w", "1000").replace("$online_window", "1h").replace("$group_by", group_by);
    for v in ["$host", "$scope", "$device", "$model"] {
        q = q.replace(v, ".*");
    }
    q
}

/// What a panel shows per group: its numbers, or (`Agents online`) only which hosts, or (`Last
/// seen per host`) the time of each host's newest point, in seconds.
fn shown(title: &str, time_ns: Option<i64>, values: Vec<f64>) -> Vec<f64> {
    match title {
        "Agents online" => vec![],
        "Last seen per host" => vec![time_ns.unwrap_or_default() as f64 / 1e9],
        _ => values,
    }
}

fn dashboard(path: &str) -> BTreeMap<String, Value> {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../dashboards").join(path);
    let d: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    d["panels"].as_array().unwrap().iter().map(|p| (p["title"].as_str().unwrap().to_string(), p.clone())).collect()
}

/// A group's key: the Influx tags (or the Prometheus labels they map to) of a series.
type Key = BTreeMap<String, String>;

fn influx_panel(influx: &Influx, panel: &Value, group_by: &str, t0_ms: i64) -> BTreeMap<Key, Vec<f64>> {
    let q = panel["targets"][0]["query"].as_str().unwrap();
    let range = (t0_ms, t0_ms + 60_000);
    let mut q = substitute(&q.replace("$timeFilter", &format!("time >= {}ms and time <= {}ms", range.0, range.1)), group_by);
    // The resolution variables as Grafana sets them from the collector's markers.
    let mut res = BTreeMap::new();
    for (_, d) in crate::dashboards::load() {
        res.extend(crate::dashboards::resolution_vars(&influx.url, DB, &d, range).unwrap());
    }
    for (k, v) in &res {
        q = q.replace(&format!("${k}"), v);
    }
    let mut out = BTreeMap::new();
    for (tags, rows) in influx.series(DB, &q) {
        let key: Key = tags.as_object().map(|o| o.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect()).unwrap_or_default();
        // A time series: its column 1 per bucket (empty buckets left out); a table (one row):
        // every column after time.
        let values: Vec<f64> = if panel["type"] == "table" {
            rows[0][1..].iter().filter_map(Value::as_f64).collect()
        } else {
            rows.iter().filter_map(|r| r[1].as_f64()).collect()
        };
        let title = panel["title"].as_str().unwrap();
        if !values.is_empty() {
            out.insert(key, shown(title, rows.last().and_then(|r| r[0].as_i64()), values));
        }
    }
    out
}

fn prom_panel(prom: &Prometheus, panel: &Value, group_by: &str, keys: &[&str], t0_s: f64) -> BTreeMap<Key, Vec<f64>> {
    let label = LABELS.iter().find(|(i, _)| *i == group_by).map(|(_, p)| *p).unwrap_or(group_by);
    let mut out: BTreeMap<Key, Vec<f64>> = BTreeMap::new();
    for t in panel["targets"].as_array().unwrap() {
        let q = substitute(t["expr"].as_str().unwrap(), label);
        let series = if panel["type"] == "timeseries" { prom.range(&q, t0_s + 10.0, t0_s + 60.0, 10.0) } else { prom.series(&q, t0_s + 60.0) };
        for (labels, samples) in series {
            // Back to InfluxDB's tag names, keeping those the InfluxQL panel groups by.
            let key: Key = LABELS.iter().filter(|(i, _)| keys.contains(i)).filter_map(|(i, p)| labels.get(*p).map(|v| (i.to_string(), v.clone()))).collect();
            let title = panel["title"].as_str().unwrap();
            let values: Vec<f64> = samples.iter().map(|s| s.1).collect();
            let shown = shown(title, values.first().map(|v| (v * 1e9) as i64), values);
            out.entry(key).or_default().extend(shown);
        }
    }
    out
}

#[test]
fn every_promql_panel_equals_its_influxql_panel() {
    let prom = Prometheus::start();
    let influx = Influx::start();
    let extra = format!("{}\n[otlp]\nurl = \"{}\"\nrequired = true\nflush_interval = \"100ms\"\n", pki().collector_tls(), prom.otlp_url());
    let _collector = Collector::start_with(free_port(), &influx.url, DB, &extra);
    let t0 = fleet_t0();
    // The sink is required: once the last batch is acknowledged, both stores hold the fleet.
    stream(&_collector.url, t0);
    let (t0_s, t0_ms) = (t0 as f64 / 1e9, t0 / 1_000_000);
    let mut compared = 0;
    for (file, group_bys) in [("power-budget.json", &["rack", "host"][..]), ("fleet-overview.json", &["-"][..])] {
        let influx_panels = dashboard(file);
        let prom_panels = dashboard(&format!("prometheus/{file}"));
        let left_out: Vec<&String> = influx_panels.keys().filter(|t| !prom_panels.contains_key(*t)).collect();
        let expected: &[&str] = if file == "fleet-overview.json" { &["Agents", "Events", "Probe runs", "Source agreement per host"] } else { &[] };
        assert_eq!(left_out, expected, "{file}: panels without a PromQL twin (data the OTLP export does not carry)");
        for group_by in group_bys {
            for (title, pp) in &prom_panels {
                let want = influx_panel(&influx, &influx_panels[title], group_by, t0_ms);
                let keys: Vec<&str> = want.keys().next().map(|k| k.keys().map(String::as_str).collect()).unwrap_or_default();
                let got = prom_panel(&prom, pp, group_by, &keys, t0_s);
                assert!(!want.is_empty(), "{file} {title} by {group_by}: the InfluxQL panel shows nothing");
                assert_eq!(got, want, "{file} {title} (group by {group_by}): PromQL vs InfluxQL");
                compared += want.len();
            }
        }
    }
    assert!(compared > 40, "{compared} groups compared");
    let ra = influx_panel(&influx, &dashboard("power-budget.json")["Power per $group_by"], "rack", t0_ms);
    let by_hand: Vec<f64> = (0..BUCKETS).map(|k| HOST_POWER[0].1[k] + HOST_POWER[1].1[k]).collect();
    assert_eq!(ra[&[("rack".to_string(), "ra".to_string())].into_iter().collect::<Key>()], by_hand, "rack ra by hand");
}
