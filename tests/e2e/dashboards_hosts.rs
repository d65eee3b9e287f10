//! Dashboards on a fleet whose hosts share device names: two hosts each with an `nvme0n1` of a
//! different model, sent through the real collector into a real influxd, and the panels that draw
//! per-drive curves run as Grafana runs them with host = All. Each drive is its own curve (keyed
//! by host and device), never one curve mixing hosts; a `$device` filter matches a controller and
//! its namespaces exactly (`nvme1` is not `nvme10n1`).

use crate::dashboards::{load, panel, resolution_vars, run, s, substitute};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;
use wattflip_e2e::fleet::{now_ns, send_through_collector};
use wattflip_e2e::*;
use wattflip_proto::v1;

const DB: &str = "wf_dash_hosts";
const HOST_A: &str = "e2e-share-a";
const HOST_B: &str = "e2e-share-b";
const SIZES_KIB: [u64; 3] = [4, 32, 128];

/// A granularity SW run of `device` at `kib` KiB: mean µs = `base` + KiB (so each host's curve is
/// known by hand), E = 1 + KiB / 100 J, a background tail of 0.2 s with a tenth of E.
fn run_of(device: &str, model: &str, bench: &str, kib: u64, start: i64, base: f64) -> v1::ProbeRun {
    let mean_us = base + kib as f64;
    let energy = 1.0 + kib as f64 / 100.0;
    v1::ProbeRun {
        run_id: format!("{device}-{bench}-{kib}-{start}"),
        device: device.into(),
        model: model.into(),
        serial: format!("S-{model}"),
        bench: bench.into(),
        experiment: format!("{bench}/SW"),
        pattern: "SW".into(),
        varying: "io_size".into(),
        value: (kib * 1024) as f64,
        start_ns: start,
        end_ns: start + 500_000_000,
        io_count: 1000,
        io_size_bytes: kib * 1024,
        mean_us,
        iops: 1e6 / mean_us,
        mib_per_s: 1e6 / mean_us * kib as f64 / 1024.0,
        target_kind: "block".into(),
        energy_j: Some(energy),
        energy_above_idle_j: Some(energy * 0.5),
        background_s: Some(0.2),
        background_energy_j: Some(energy * 0.1),
        background_class: "GWP".into(),
        ..Default::default()
    }
}

fn rows(x: &Value) -> Vec<Vec<f64>> {
    x["values"]
        .as_array()
        .map(|r| r.iter().map(|row| row.as_array().map(|c| c[1..].iter().filter_map(Value::as_f64).collect()).unwrap_or_default()).collect())
        .unwrap_or_default()
}

#[test]
fn per_drive_curves_are_per_host_and_device_filters_are_exact() {
    let influx = Influx::start();
    let collector = Collector::start(&influx.url, DB);
    let t0 = now_ns() - 30_000_000_000;
    let s_ns = 1_000_000_000i64;
    for (h, (host, rack, model, base)) in [(HOST_A, "r1", "MODEL-A", 100.0), (HOST_B, "r2", "MODEL-B", 300.0)].into_iter().enumerate() {
        let mut batch = v1::Batch { agent_id: host.into(), sequence: 1, ..Default::default() };
        for (k, kib) in SIZES_KIB.iter().enumerate() {
            batch.probe_runs.push(run_of("nvme0n1", model, "granularity", *kib, t0 + (h * 3 + k) as i64 * s_ns, base));
        }
        if h == 0 {
            // Governor-sweep runs of two controllers whose names share a prefix.
            batch.probe_runs.push(run_of("nvme1n1", "MODEL-A", "governor_sweep", 128, t0 + 10 * s_ns, 50.0));
            batch.probe_runs.push(run_of("nvme10n1", "MODEL-A", "governor_sweep", 128, t0 + 11 * s_ns, 70.0));
        }
        send_through_collector(&collector.url, host, rack, batch);
    }
    let count = || {
        run(&influx.url, DB, "SELECT count(\"mean_us\") FROM \"probe_run\"")
            .ok()
            .and_then(|x| x.first().and_then(|s| s["values"][0][1].as_i64()))
            .filter(|n| *n == 8)
    };
    assert!(wait_for(Duration::from_secs(20), count).is_some(), "the runs never reached influxd:\n{}", collector.log());

    let dashboards: BTreeMap<String, Value> = load().into_iter().collect();
    let range = ((t0 - 60 * s_ns) / 1_000_000, (t0 + 60 * s_ns) / 1_000_000);
    let mut vars = resolution_vars(&influx.url, DB, &dashboards["device-energy-profile.json"], range).unwrap();
    // Grafana's "All" of a multi-value variable: an alternation of the (regex-escaped) values.
    vars.insert("host".into(), format!("({HOST_A}|{HOST_B})"));
    vars.insert("model".into(), "(MODEL-A|MODEL-B)".into());
    vars.insert("device".into(), "nvme0n1".into());
    let query = |file: &str, title: &str, vars: &BTreeMap<String, String>| {
        let p = panel(&dashboards[file], title);
        let q = substitute(s(&p["targets"][0]["query"]), vars, range.0, range.1);
        run(&influx.url, DB, &q).unwrap_or_else(|e| panic!("{title}: {e}\n  query: {q}"))
    };

    // Figure 4: one curve per host's nvme0n1, each its own host's mean µs (base + KiB).
    let fig4 = query("device-energy-profile.json", "Mean response time vs IO size (Figure 4)", &vars);
    let got: Vec<(&str, &str, Vec<Vec<f64>>)> = fig4.iter().map(|x| (s(&x["tags"]["host"]), s(&x["tags"]["device"]), rows(x))).collect();
    let curve = |base: f64| SIZES_KIB.iter().map(|k| vec![*k as f64, base + *k as f64]).collect::<Vec<_>>();
    assert_eq!(got, vec![(HOST_A, "nvme0n1", curve(100.0)), (HOST_B, "nvme0n1", curve(300.0))], "Figure 4: {fig4:?}");

    // Background work per experiment: one row per host's drive, its own sums (3 runs each).
    let bg = query("device-energy-profile.json", "Background work per experiment", &vars);
    let total: f64 = SIZES_KIB.iter().map(|k| 1.0 + *k as f64 / 100.0).sum();
    let got: Vec<(&str, &str, Vec<Vec<f64>>)> = bg.iter().map(|x| (s(&x["tags"]["host"]), s(&x["tags"]["experiment"]), rows(x))).collect();
    let want_row = vec![vec![0.2, 0.1 * total, total]];
    assert_eq!(got.len(), 2, "Background work per experiment: {bg:?}");
    for (i, host) in [HOST_A, HOST_B].into_iter().enumerate() {
        assert_eq!((got[i].0, got[i].1), (host, "granularity/SW"));
        let r = &got[i].2[0];
        assert!(r.len() == 3 && r.iter().zip(&want_row[0]).all(|(g, w)| (g - w).abs() <= 1e-9 * w.abs().max(1.0)), "{host}: {r:?}, want {want_row:?}");
    }

    // Throttling's governor-sweep panel with device = nvme1 (a controller, as its variable lists
    // them): nvme1's namespace only, never nvme10's.
    vars.insert("device".into(), "nvme1".into());
    let sweep = query("throttling.json", "Governor sweep: throughput vs power state", &vars);
    let got: Vec<(&str, &str)> = sweep.iter().map(|x| (s(&x["tags"]["host"]), s(&x["tags"]["device"]))).collect();
    assert_eq!(got, vec![(HOST_A, "nvme1n1")], "{sweep:?}");
    // The per-model EP curves are keyed by host too (checked on the query: no ladders here).
    let ep = s(&panel(&dashboards["energy-proportionality.json"], "Normalised power vs load")["targets"][0]["query"]).to_string();
    assert!(ep.contains("GROUP BY \"host\", \"model\", \"device\""), "{ep}");
}
