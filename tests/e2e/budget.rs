//! The power budget on a fleet of mixed scopes: four hosts, one per tier (a wall meter, two PSU
//! inputs, two rails, RAPL psys + an NVMe estimate), in two racks, each ALSO reporting
//! lower-tier scopes (so double counting would show), streamed as agents stream them (a `run`
//! Hello listing the host's power sources, then window batches; a `probe` session in the middle
//! with full-rate points) through the real collector into a real influxd. Every panel of
//! dashboards/power-budget.json and `wattflip-collector plan budget` are checked against sums
//! written out by hand from the watts below, and against each other.
//!
//! Why a gRPC client rather than agents on fixture trees: the numbers here are exact (one point
//! per zone per 10 s bucket, values in quarters of a watt, so every sum is exact in binary
//! floating point), which counters moving in real time cannot give; the messages are the agent's
//! own (the fields `agent/src/app/session.rs` and the samplers fill in).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio_stream::StreamExt as _;
use wattflip_e2e::*;
use wattflip_proto::v1::{self, agent_message::Kind, AgentMessage};

const DB: &str = "wf_budget";
/// Buckets of 10 s (the dashboard's `$__interval` here and `plan budget --bucket 10s`).
const BUCKET_NS: i64 = 10_000_000_000;
const BUCKETS: usize = 6;
const BUDGET_W: f64 = 1000.0;

/// One power channel of a host: (source, zone, scope, method, declared and enabled in the run
/// Hello, watts per bucket).
type Zone = (&'static str, &'static str, &'static str, v1::Method, bool, [f64; BUCKETS]);

const M: v1::Method = v1::Method::Measured;
const E: v1::Method = v1::Method::Estimated;

fn flat(w: f64) -> [f64; BUCKETS] {
    [w; BUCKETS]
}

/// The fleet: (agent id, rack, zones). Which zones count is written out by hand in `counted`.
fn fleet() -> Vec<(&'static str, &'static str, Vec<Zone>)> {
    vec![
        (
            "bud-wall",
            "ra",
            vec![
                ("ipmi", "dcmi", "wall", M, true, [300.0, 340.0, 310.0, 305.0, 320.0, 302.0]),
                ("rapl", "package-0", "package", M, true, flat(80.0)),
                ("rapl", "package-0/dram", "dram", M, true, flat(10.0)),
                ("rapl", "psys", "psys", M, true, flat(150.0)),
            ],
        ),
        (
            "bud-psu",
            "ra",
            vec![
                ("hwmon", "pmbus-0/pin", "psu_in", M, true, [120.0, 121.0, 119.0, 150.0, 122.0, 120.0]),
                ("hwmon", "pmbus-1/pin", "psu_in", M, true, [110.0, 111.0, 109.0, 140.0, 112.0, 110.0]),
                ("hwmon", "pmbus-0/pout1", "psu_out", M, true, flat(200.0)),
                ("hwmon", "ina226-0/power1", "rail", M, true, flat(60.0)),
                ("rapl", "package-0", "package", M, true, flat(50.0)),
            ],
        ),
        (
            "bud-rails",
            "rb",
            vec![
                ("hwmon", "ina3221-0/ch1", "rail", M, true, [40.0, 45.5, 41.0, 40.0, 60.25, 40.0]),
                ("hwmon", "ina3221-0/ch2", "rail", M, true, [25.0, 25.0, 25.75, 25.0, 30.0, 25.0]),
                ("rapl", "package-0", "package", M, true, flat(30.0)),
                ("rapl", "psys", "psys", M, true, flat(70.0)),
            ],
        ),
        (
            "bud-rapl",
            "rb",
            vec![
                // IPMI present but without DCMI readings: listed, not enabled, never sends.
                ("ipmi", "dcmi", "wall", M, false, flat(0.0)),
                ("rapl", "psys", "psys", M, true, [90.0, 95.0, 130.0, 92.0, 91.0, 90.0]),
                ("rapl", "package-0", "package", M, true, flat(60.0)),
                ("rapl", "package-0/dram", "dram", M, true, flat(8.0)),
                ("rapl", "package-0/core", "core", M, true, flat(40.0)),
                // The datasheet estimate of the NVMe drive's current power state (PSD max power).
                ("nvme_estimate", "nvme0", "drive", E, true, [8.25, 8.25, 8.25, 4.5, 8.25, 8.25]),
            ],
        ),
    ]
}

/// By hand: each host's tier tag, `plan budget`'s tier name, and the zones that make up its power.
const COUNTED: &[(&str, &str, &str, &[&str])] = &[
    ("bud-wall", "wall", "host meter", &["dcmi"]),
    ("bud-psu", "psu_in", "PSU input", &["pmbus-0/pin", "pmbus-1/pin"]),
    ("bud-rails", "rails", "rails", &["ina3221-0/ch1", "ina3221-0/ch2"]),
    ("bud-rapl", "rapl_nvme", "RAPL + NVMe estimate", &["psys", "nvme0"]),
];

/// Per rack and bucket, by hand from the tables above: ra = wall + both PSU inputs, rb = both
/// rails + psys + the drive estimate. The peaks fall in different buckets per host (the wall
/// meter's in bucket 1, the PSUs' in 3), so a sum of the hosts' own peaks (630 W) would differ
/// from the coincident peak (595 W).
const RACK_TOTALS: [(&str, [f64; BUCKETS]); 2] = [
    ("ra", [300.0 + 230.0, 340.0 + 232.0, 310.0 + 228.0, 305.0 + 290.0, 320.0 + 234.0, 302.0 + 230.0]),
    ("rb", [65.0 + 98.25, 70.5 + 103.25, 66.75 + 138.25, 65.0 + 96.5, 90.25 + 99.25, 65.0 + 98.25]),
];
/// Per host and bucket, by hand.
const HOST_TOTALS: [(&str, [f64; BUCKETS]); 4] = [
    ("bud-psu", [230.0, 232.0, 228.0, 290.0, 234.0, 230.0]),
    ("bud-rails", [65.0, 70.5, 66.75, 65.0, 90.25, 65.0]),
    ("bud-rapl", [98.25, 103.25, 138.25, 96.5, 99.25, 98.25]),
    ("bud-wall", [300.0, 340.0, 310.0, 305.0, 320.0, 302.0]),
];

fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

fn run_hello(host: &str, rack: &str, zones: &[Zone], t: i64) -> AgentMessage {
    let power_sources = zones
        .iter()
        .map(|(source, zone, scope, method, enabled, _)| v1::PowerSource {
            source: source.to_string(),
            zone: zone.to_string(),
            scope: scope.to_string(),
            method: *method as i32,
            counter: *source == "rapl",
            path: format!("/sys/fixture/{zone}"),
            enabled: *enabled,
            note: if *enabled { String::new() } else { "ipmitool: does not support DCMI power readings".into() },
            ..Default::default()
        })
        .collect();
    hello(host, rack, t, "run", Some(v1::Inventory { power_sources, ..Default::default() }))
}

fn hello(host: &str, rack: &str, t: i64, session: &str, inventory: Option<v1::Inventory>) -> AgentMessage {
    AgentMessage {
        kind: Some(Kind::Hello(v1::Hello {
            agent_id: host.into(),
            hostname: host.into(),
            agent_version: env!("CARGO_PKG_VERSION").into(),
            protocol_version: wattflip_proto::PROTOCOL_VERSION,
            labels: [("rack".to_string(), rack.to_string())].into(),
            inventory,
            time_ns: t,
            session: session.into(),
            // Per incarnation: `run` has its spool's, a one-off command its start time's.
            stream_epoch: if session == "run" { 7 } else { t as u64 / 1000 },
        })),
    }
}

/// The window batch of bucket `k`: one point per enabled zone, 1 s into the bucket.
fn window_batch(host: &str, zones: &[Zone], t0: i64, k: usize) -> AgentMessage {
    let t = t0 + k as i64 * BUCKET_NS + 1_000_000_000;
    let power = zones
        .iter()
        .filter(|z| z.4)
        .map(|(source, zone, scope, method, _, w)| v1::PowerSample {
            time_ns: t,
            source: source.to_string(),
            zone: zone.to_string(),
            scope: scope.to_string(),
            method: *method as i32,
            watts: Some(w[k]),
            // Counters carry their joules and interval, as RAPL's windows do (1 s here).
            joules: (*source == "rapl").then_some(w[k]),
            interval_ns: if *source == "rapl" { 1_000_000_000 } else { 0 },
            ..Default::default()
        })
        .collect();
    AgentMessage { kind: Some(Kind::Batch(v1::Batch { agent_id: host.into(), sequence: k as u64 + 1, power, ..Default::default() })) }
}

/// A probe's full-rate points (`rate=full`), far above the window means, in bucket 2: counted,
/// they would move every total.
fn full_rate_batch(host: &str, zone: (&str, &str, &str), t0: i64) -> AgentMessage {
    let power = (0..50)
        .map(|i| v1::PowerSample {
            time_ns: t0 + 2 * BUCKET_NS + 2_000_000_000 + i * 10_000_000,
            source: zone.0.into(),
            zone: zone.1.into(),
            scope: zone.2.into(),
            method: M as i32,
            watts: Some(900.0),
            interval_ns: 10_000_000,
            full_rate: true,
            ..Default::default()
        })
        .collect();
    AgentMessage { kind: Some(Kind::Batch(v1::Batch { agent_id: host.into(), sequence: 1, power, ..Default::default() })) }
}

/// The fleet through the collector: each host's run stream sends its Hello and buckets 0–2; then
/// a `probe` session (a Hello listing no sources, full-rate points) on two hosts; then the run
/// streams go on with buckets 3–5. Every batch is acknowledged (stored) before the next step.
fn stream_fleet(url: &str, t0: i64) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut runs: Vec<RunStream> = Vec::new();
        for (host, rack, zones) in fleet() {
            let identity = pki().issue(&format!("budget-{host}"), &[host], None);
            let channel = pki().channel(url, Some(identity)).await.expect("connect to the collector");
            let mut client = v1::ingest_client::IngestClient::new(channel);
            let (tx, rx) = tokio::sync::mpsc::channel(16);
            tx.send(run_hello(host, rack, &zones, fleet_now())).await.unwrap();
            let acks = client.stream(tokio_stream::wrappers::ReceiverStream::new(rx)).await.expect("open the run stream").into_inner();
            runs.push((host, zones, tx, acks));
        }
        send(&mut runs, t0, 0..3).await;
        // The probe sessions, while the run streams stay open: they must not change any tier.
        for (host, rack, zone) in [("bud-rails", "rb", ("hwmon", "ina3221-0/ch1", "rail")), ("bud-wall", "ra", ("ipmi", "dcmi", "wall"))] {
            let identity = pki().issue(&format!("budget-probe-{host}"), &[host], None);
            let channel = pki().channel(url, Some(identity)).await.expect("connect to the collector");
            let mut client = v1::ingest_client::IngestClient::new(channel);
            let msgs = vec![hello(host, rack, fleet_now(), "probe", Some(v1::Inventory::default())), full_rate_batch(host, zone, t0)];
            let mut acks = client.stream(tokio_stream::iter(msgs)).await.expect("open the probe stream").into_inner();
            let ack = tokio::time::timeout(Duration::from_secs(20), acks.next()).await.expect("ack within 20 s");
            assert_eq!(ack.expect("a reply").expect("no error").durable_sequence, 1, "{host} probe batch");
        }
        send(&mut runs, t0, 3..BUCKETS).await;
    });
}

type RunStream = (&'static str, Vec<Zone>, tokio::sync::mpsc::Sender<AgentMessage>, tonic::Streaming<v1::Ack>);

/// Buckets `range` on every run stream, each acknowledged before the next.
async fn send(runs: &mut [RunStream], t0: i64, range: std::ops::Range<usize>) {
    for (host, zones, tx, acks) in runs.iter_mut() {
        for k in range.clone() {
            tx.send(window_batch(host, zones, t0, k)).await.unwrap();
            let ack = tokio::time::timeout(Duration::from_secs(20), acks.next()).await.expect("ack within 20 s");
            assert_eq!(ack.expect("a reply").expect("no error").durable_sequence, k as u64 + 1, "{host} bucket {k}");
        }
    }
}

fn fleet_now() -> i64 {
    wattflip_e2e::fleet::now_ns()
}

/// The dashboard's variables as Grafana substitutes them (its `host` variable at "All").
fn substitute(q: &str, vars: &BTreeMap<&str, String>, range_ms: (i64, i64)) -> String {
    let mut q = q.replace("$timeFilter", &format!("time >= {}ms and time <= {}ms", range_ms.0, range_ms.1)).replace("$__interval", "10s");
    for (k, v) in vars {
        q = q.replace(&format!("${k}"), v);
    }
    assert!(!q.contains('$') || q.contains("$/"), "unsubstituted variable in {q}");
    q
}

fn query(influx: &Influx, q: &str) -> Vec<Value> {
    let v: Value = reqwest::blocking::Client::new()
        .get(format!("{}/query", influx.url))
        .query(&[("db", DB), ("q", q), ("epoch", "ms")])
        .send()
        .expect("query InfluxDB")
        .json()
        .expect("JSON answer");
    assert!(v.pointer("/results/0/error").is_none(), "{v}\n  query: {q}");
    v.pointer("/results/0/series").and_then(Value::as_array).cloned().unwrap_or_default()
}

fn panel_query<'a>(d: &'a Value, title: &str) -> &'a str {
    let p = d["panels"].as_array().unwrap().iter().find(|p| p["title"] == title).unwrap_or_else(|| panic!("no panel `{title}`"));
    p["targets"][0]["query"].as_str().unwrap()
}

/// (tag value, values of column `col` per row) of each series.
fn by_tag(series: &[Value], tag: &str, col: usize) -> Vec<(String, Vec<f64>)> {
    series
        .iter()
        .map(|x| {
            let vals = x["values"].as_array().unwrap().iter().map(|r| r[col].as_f64().unwrap_or(f64::NAN)).collect();
            (x["tags"][tag].as_str().unwrap_or_default().to_string(), vals)
        })
        .collect()
}

fn plan_budget(influx: &Influx, group_by: &str, budget_w: f64) -> Value {
    let o = std::process::Command::new(bin("wattflip-collector", "wattflip-collector"))
        .args(["--influx-url", &influx.url, "--influx-db", DB, "plan", "budget", "--group-by", group_by, "--budget-w", &budget_w.to_string()])
        .args(["--bucket", "10s", "--since", "1h", "--json"])
        .output()
        .expect("run wattflip-collector plan budget");
    assert!(o.status.success(), "plan budget: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("plan budget: not JSON ({e})"))
}

#[test]
fn budget_dashboard_and_plan_budget_count_each_host_at_its_best_scope() {
    let influx = Influx::start();
    let collector = Collector::start(&influx.url, DB);
    // Six whole buckets, ending a minute before now (inside `plan --since 1h`).
    let t0 = (fleet_now() / BUCKET_NS - 12) * BUCKET_NS;
    stream_fleet(&collector.url, t0);
    // An acknowledgement means stored: every window point of every enabled zone is there.
    let points: usize = fleet().iter().map(|h| h.2.iter().filter(|z| z.4).count() * BUCKETS).sum();
    let stored = query(&influx, "SELECT count(\"watts\") FROM \"power\" WHERE \"rate\" != 'full'");
    assert_eq!(stored[0]["values"][0][1].as_u64(), Some(points as u64), "window points stored:\n{}", collector.log());

    // The tags the collector wrote: exactly each host's tier on exactly its zones, the probe's
    // full-rate points included (the probe Hello did not change the tier), nothing on the rest.
    let tagged = query(&influx, "SELECT count(\"watts\") FROM \"power\" GROUP BY \"host\", \"zone\", \"budget\", \"rate\"");
    let mut got: Vec<(String, String, String, String, u64)> = tagged
        .iter()
        .map(|x| {
            let t = |k: &str| x["tags"][k].as_str().unwrap_or_default().to_string();
            (t("host"), t("zone"), t("budget"), t("rate"), x["values"][0][1].as_u64().unwrap_or(0))
        })
        .collect();
    got.sort();
    let mut want: Vec<(String, String, String, String, u64)> = Vec::new();
    for (host, _, zones) in fleet() {
        let (_, tier, _, counted) = COUNTED.iter().find(|c| c.0 == host).unwrap();
        for z in zones.iter().filter(|z| z.4) {
            let tag = if counted.contains(&z.1) { tier.to_string() } else { String::new() };
            want.push((host.into(), z.1.into(), tag, String::new(), BUCKETS as u64));
        }
    }
    want.push(("bud-rails".into(), "ina3221-0/ch1".into(), "rails".into(), "full".into(), 50));
    want.push(("bud-wall".into(), "dcmi".into(), "wall".into(), "full".into(), 50));
    want.sort();
    assert_eq!(got, want, "budget tags per host and zone");

    // The dashboard, its variables as Grafana sets them on load.
    let d: Value = serde_json::from_str(&std::fs::read_to_string(dashboards_dir().join("power-budget.json")).unwrap()).unwrap();
    let names: Vec<&str> = d["templating"]["list"].as_array().unwrap().iter().map(|v| v["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["power_rp", "peak_watts", "host", "group_by", "budget_w"], "power-budget.json variables");
    let budget_var = d["templating"]["list"].as_array().unwrap().iter().find(|v| v["name"] == "budget_w").unwrap();
    assert_eq!(budget_var["current"]["value"], "1000");
    let var_query = |name: &str| d["templating"]["list"].as_array().unwrap().iter().find(|v| v["name"] == name).unwrap()["query"].as_str().unwrap();
    let hosts = query(&influx, var_query("host"));
    let host_values: Vec<&str> = hosts[0]["values"].as_array().unwrap().iter().map(|r| r[1].as_str().unwrap()).collect();
    assert_eq!(host_values, ["bud-psu", "bud-rails", "bud-rapl", "bud-wall"]);
    let range = ((t0 - 60 * 1_000_000_000) / 1_000_000, (t0 + 300 * 1_000_000_000) / 1_000_000);
    // The resolution variables from the collector's markers (no rollups here: the default policy).
    let resolved = |name: &str| {
        let q = var_query(name).replace("${__from}", &range.0.to_string()).replace("${__to}", &range.1.to_string());
        query(&influx, &q)[0]["values"][0][1].as_str().unwrap().to_string()
    };
    let (power_rp, peak_watts) = (resolved("power_rp"), resolved("peak_watts"));
    assert_eq!((power_rp.as_str(), peak_watts.as_str()), ("autogen", "watts"), "the resolution variables");
    let vars = |group_by: &str| -> BTreeMap<&str, String> {
        [
            ("host", format!("({})", host_values.join("|"))),
            ("group_by", group_by.to_string()),
            ("budget_w", "1000".to_string()),
            ("power_rp", power_rp.clone()),
            ("peak_watts", peak_watts.clone()),
        ]
        .into()
    };
    let run = |title: &str, group_by: &str| query(&influx, &substitute(panel_query(&d, title), &vars(group_by), range));

    for (group_by, truth) in [("rack", RACK_TOTALS.to_vec()), ("host", HOST_TOTALS.to_vec())] {
        // Power per group: every bucket's total, exactly (quarters of a watt add exactly).
        let totals = by_tag(&run("Power per $group_by", group_by), group_by, 1);
        let want: Vec<(String, Vec<f64>)> = truth.iter().map(|(g, v)| (g.to_string(), v.to_vec())).collect();
        assert_eq!(totals, want, "Power per {group_by}");
        // Bucket times: the six buckets from t0.
        let times: Vec<i64> = run("Power per $group_by", group_by)[0]["values"].as_array().unwrap().iter().map(|r| r[0].as_i64().unwrap()).collect();
        assert_eq!(times, (0..BUCKETS as i64).map(|k| (t0 + k * BUCKET_NS) / 1_000_000).collect::<Vec<_>>());
        // Headroom: the budget minus each total.
        let headroom = by_tag(&run("Headroom per $group_by", group_by), group_by, 1);
        let want: Vec<(String, Vec<f64>)> = truth.iter().map(|(g, v)| (g.to_string(), v.iter().map(|w| BUDGET_W - w).collect())).collect();
        assert_eq!(headroom, want, "Headroom per {group_by}");
        // Measured peak vs budget: the coincident peak, its headroom and share of the budget.
        let peak = run("Measured peak vs budget", group_by);
        let rows: Vec<(String, Vec<f64>)> = peak
            .iter()
            .map(|x| (x["tags"][group_by].as_str().unwrap().to_string(), x["values"][0].as_array().unwrap()[1..].iter().map(|v| v.as_f64().unwrap()).collect()))
            .collect();
        let want: Vec<(String, Vec<f64>)> = truth.iter().map(|(g, v)| (g.to_string(), vec![max(v), BUDGET_W - max(v), 100.0 * max(v) / BUDGET_W])).collect();
        assert_eq!(rows, want, "Measured peak vs budget per {group_by}");

        // plan budget on the same data gives the same per-group figures and names each tier.
        let plan = plan_budget(&influx, group_by, BUDGET_W);
        let groups: Vec<(String, f64, f64, u64, bool)> = plan["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| {
                (
                    g["group"].as_str().unwrap().to_string(),
                    g["peak_w"].as_f64().unwrap(),
                    g["headroom_w"].as_f64().unwrap(),
                    g["hosts"].as_u64().unwrap(),
                    g["exceeds"].as_bool().unwrap(),
                )
            })
            .collect();
        let from_dashboard: Vec<(String, f64, f64, u64, bool)> =
            rows.iter().map(|(g, r)| (g.clone(), r[0], r[1], if group_by == "rack" { 2 } else { 1 }, false)).collect();
        assert_eq!(groups, from_dashboard, "plan budget --group-by {group_by} vs the dashboard: {plan}");

        // Hosts counted per group and tier: by hand from COUNTED and the racks, and as plan
        // budget's coverage counts them.
        let counted = run("Hosts counted per $group_by and tier", group_by);
        let mut got: Vec<(String, String, u64)> = counted
            .iter()
            .map(|x| {
                (x["tags"][group_by].as_str().unwrap().to_string(), x["tags"]["budget"].as_str().unwrap().to_string(), x["values"][0][1].as_u64().unwrap())
            })
            .collect();
        got.sort();
        let mut want: Vec<(String, String, u64)> = COUNTED
            .iter()
            .map(|(h, tier, _, _)| {
                let rack = fleet().iter().find(|f| f.0 == *h).unwrap().1;
                (if group_by == "rack" { rack.to_string() } else { h.to_string() }, tier.to_string(), 1)
            })
            .collect();
        want.sort();
        assert_eq!(got, want, "Hosts counted per {group_by} and tier");
        let plan_tiers: Vec<(String, String, u64)> = {
            let mut v: Vec<(String, String, u64)> = plan["groups"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|g| {
                    g["counted"].as_array().unwrap().iter().map(|h| (g["group"].as_str().unwrap().to_string(), h["tier"].as_str().unwrap().to_string()))
                })
                .map(|(g, tier)| (g, COUNTED.iter().find(|c| c.2 == tier).unwrap().1.to_string(), 1))
                .collect();
            v.sort();
            v
        };
        assert_eq!(plan_tiers, want, "plan budget --group-by {group_by}: hosts per group and tier");
    }

    // Peak per host: the tier, the peak of the host's interval totals and their mean.
    let per_host = run("Peak per host", "rack");
    let got: Vec<(String, String, f64, f64)> = per_host
        .iter()
        .map(|x| {
            (
                x["tags"]["host"].as_str().unwrap().into(),
                x["tags"]["budget"].as_str().unwrap().into(),
                x["values"][0][1].as_f64().unwrap(),
                x["values"][0][2].as_f64().unwrap(),
            )
        })
        .collect();
    let want: Vec<(String, String, f64, f64)> =
        HOST_TOTALS.iter().map(|(h, v)| (h.to_string(), COUNTED.iter().find(|c| c.0 == *h).unwrap().1.to_string(), max(v), mean(v))).collect();
    assert_eq!(got.len(), want.len(), "Peak per host: {got:?}");
    for (g, w) in got.iter().zip(&want) {
        // The mean of six totals: a division, equal within rounding.
        assert!(g.0 == w.0 && g.1 == w.1 && g.2 == w.2 && (g.3 - w.3).abs() <= 1e-9 * w.3, "Peak per host: {g:?}, want {w:?}");
    }
    // Peak per host and zone: exactly the tagged zones, each at its own max and mean.
    let per_zone = run("Peak per host and zone", "rack");
    let mut got: Vec<(String, String, String, f64, f64)> = per_zone
        .iter()
        .map(|x| {
            let t = |k: &str| x["tags"][k].as_str().unwrap().to_string();
            (t("host"), t("budget"), t("zone"), x["values"][0][1].as_f64().unwrap(), x["values"][0][2].as_f64().unwrap())
        })
        .collect();
    got.sort_by(|a, b| (&a.0, &a.2).cmp(&(&b.0, &b.2)));
    let mut want: Vec<(String, String, String, f64, f64)> = Vec::new();
    for (host, _, zones) in fleet() {
        let (_, tier, _, counted) = COUNTED.iter().find(|c| c.0 == host).unwrap();
        for z in zones.iter().filter(|z| counted.contains(&z.1)) {
            want.push((host.into(), tier.to_string(), z.1.into(), max(&z.5), mean(&z.5)));
        }
    }
    want.sort_by(|a, b| (&a.0, &a.2).cmp(&(&b.0, &b.2)));
    assert_eq!(got.len(), want.len(), "Peak per host and zone: {got:?}");
    for (g, w) in got.iter().zip(&want) {
        assert!(g.0 == w.0 && g.1 == w.1 && g.2 == w.2 && g.3 == w.3 && (g.4 - w.4).abs() <= 1e-9 * w.4, "Peak per host and zone: {g:?}, want {w:?}");
    }

    // plan budget's tiers and scopes per host, its coverage lines, and `exceeds` under a budget
    // between the two racks' peaks (ra 595 W, rb 205 W).
    let plan = plan_budget(&influx, "rack", 590.0);
    let counted: Vec<Value> = plan["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["counted"].as_array().unwrap().iter().map(|h| json!([g["group"], h["host"], h["tier"], h["scopes"], h["peak_w"]])))
        .collect();
    assert_eq!(
        counted,
        vec![
            json!(["ra", "bud-psu", "PSU input", ["psu_in"], 290.0]),
            json!(["ra", "bud-wall", "host meter", ["wall"], 340.0]),
            json!(["rb", "bud-rails", "rails", ["rail"], 90.25]),
            json!(["rb", "bud-rapl", "RAPL + NVMe estimate", ["psys", "drive"], 138.25]),
        ],
        "{plan}"
    );
    for (g, exceeds) in plan["groups"].as_array().unwrap().iter().zip([true, false]) {
        assert_eq!(g["exceeds"].as_bool(), Some(exceeds), "{g}");
    }
    let coverage: Vec<&str> = plan["groups"].as_array().unwrap().iter().map(|g| g["coverage"].as_str().unwrap()).collect();
    assert_eq!(coverage, ["2 of 2 hosts counted (host meter 1, PSU input 1)", "2 of 2 hosts counted (rails 1, RAPL + NVMe estimate 1)"]);
    // The tier names of both agree with the table by hand.
    for (host, _, tier_name, _) in COUNTED {
        assert!(counted.iter().any(|c| c[1] == *host && c[2] == *tier_name), "{host}: {tier_name}");
    }
    assert!(collector.log().contains("power budget tier"), "the collector logs each host's tier:\n{}", collector.log());
}

fn dashboards_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../dashboards")
}
