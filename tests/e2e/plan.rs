//! Fleet analyses and planning: energy proportionality computed by the collector from load
//! ladders (a hand-made ladder with a known EP over gRPC, and the real agent's ladder), and the
//! three `wattflip-collector plan` commands on hand-made InfluxDB data with known answers.

use std::process::Command;
use std::time::Duration;
use tokio_stream::StreamExt as _;
use wattflip_e2e::*;
use wattflip_proto::v1::{self, agent_message::Kind, ingest_client::IngestClient, AgentMessage};

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn write_lp(influx: &Influx, db: &str, body: &str) {
    let c = reqwest::blocking::Client::new();
    let r = c.post(format!("{}/query", influx.url)).query(&[("q", format!("CREATE DATABASE \"{db}\""))]).send().unwrap();
    assert!(r.status().is_success());
    let r = c.post(format!("{}/write", influx.url)).query(&[("db", db), ("precision", "n")]).body(body.to_string()).send().unwrap();
    assert_eq!(r.status().as_u16(), 204, "{}", r.text().unwrap_or_default());
}

/// A ladder level of `secs` at `watts` (± its 95 % half-width), after an active idle of `idle`
/// (± its half-width): the energy's half-width is the power's over the run's duration.
fn ladder_run(run_id: &str, pct: f64, start_ns: i64, secs: f64, (watts, watts_u95): (f64, f64), (idle, idle_u95): (f64, f64)) -> v1::ProbeRun {
    v1::ProbeRun {
        run_id: run_id.into(),
        device: "nvme0n1".into(),
        model: "ACME-P1".into(),
        bench: "load_ladder".into(),
        experiment: "load_ladder/RR".into(),
        pattern: "RR".into(),
        varying: "load_pct".into(),
        value: pct,
        start_ns,
        end_ns: start_ns + (secs * 1e9) as i64,
        iops: 100.0 * pct,
        energy_j: Some(watts * secs),
        energy_u95_j: Some(watts_u95 * secs),
        idle_baseline_w: Some(idle),
        idle_u95_w: Some(idle_u95),
        energy_source: "hwmon:rail".into(),
        ..Default::default()
    }
}

#[test]
fn collector_computes_energy_proportionality_from_ladders() {
    let influx = Influx::start();
    let collector = Collector::start(&influx.url, "wf_ep");
    let t0 = recent_origin_ns();
    // Idle 2 W, 50 % at 3 W, 100 % at 4 W: ∫p = 0.75 → EP 0.5, dynamic range 0.5. Half-widths
    // idle ±0.25 W, 50 % ±0.1875 W (±0.375 J over 2 s), 100 % ±0.375 W (±0.75 J). By hand,
    // trapezoid weights (0.25, 0.5, 0.25) over u = 0, 0.5, 1, EP = 2 − 2·Σw·P/P₁₀₀:
    // ∂EP/∂P = (−2·0.25/4, −2·0.5/4, −2·(0.25 − 0.75)/4) = (−0.125, −0.25, 0.25), terms
    // (0.03125, 0.046875, 0.09375) = (2, 3, 6)/64 → ep_u95 = 7/64 = 0.109375; DR = 1 − P₀/P₁₀₀:
    // terms 0.25/4 = 4/64 and 2·0.375/16 = 3/64 → dynamic_range_u95 = 5/64 = 0.078125;
    // IOPS/W = 10000/P₁₀₀: 10000·0.375/16 = 234.375.
    let runs =
        vec![ladder_run("L1-0", 50.0, t0, 2.0, (3.0, 0.1875), (2.0, 0.25)), ladder_run("L1-1", 100.0, t0 + 3_000_000_000, 2.0, (4.0, 0.375), (2.0, 0.25))];
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let identity = pki().issue("ep-1", &["ep-1"], None);
        let mut client = IngestClient::new(pki().channel(&collector.url, Some(identity)).await.unwrap());
        let hello = AgentMessage { kind: Some(Kind::Hello(v1::Hello { agent_id: "ep-1".into(), time_ns: t0, ..Default::default() })) };
        let batch = AgentMessage { kind: Some(Kind::Batch(v1::Batch { agent_id: "ep-1".into(), sequence: 1, probe_runs: runs, ..Default::default() })) };
        let mut acks = client.stream(tokio_stream::iter(vec![hello, batch])).await.unwrap().into_inner();
        assert_eq!(acks.next().await.unwrap().unwrap().durable_sequence, 1);
    });
    let rows =
        influx.rows("wf_ep", "SELECT ep, dynamic_range, idle_w, peak_w, linear_deviation, gap_050, iops_per_w FROM energy_proportionality WHERE host = 'ep-1'");
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!((f(&r[1]), f(&r[2]), f(&r[3]), f(&r[4]), f(&r[5]), f(&r[6]), f(&r[7])), (0.5, 0.5, 2.0, 4.0, 0.0, 0.25, 2500.0));
    let rows = influx.rows("wf_ep", "SELECT ep_u95, dynamic_range_u95, idle_w_u95, peak_w_u95, iops_per_w_u95 FROM energy_proportionality WHERE host = 'ep-1'");
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!((f(&r[1]), f(&r[2]), f(&r[3]), f(&r[4]), f(&r[5])), (0.109375, 0.078125, 0.25, 0.375, 234.375));
    // No inventory in that Hello: no capacity, so no ready-idle GB/W (never a zero).
    assert!(influx.rows("wf_ep", "SELECT ready_idle_gb_per_w FROM energy_proportionality WHERE host = 'ep-1'").is_empty());

    // With the drive in the inventory (two namespaces of one controller, 1.5 TB): 1500 GB / 2 W idle.
    rt.block_on(async {
        let identity = pki().issue("ep-2", &["ep-2"], None);
        let mut client = IngestClient::new(pki().channel(&collector.url, Some(identity)).await.unwrap());
        let ns = |name: &str, cap: u64| v1::StorageDevice {
            name: name.into(),
            model: "ACME-P1".into(),
            controller: "nvme0".into(),
            capacity_bytes: Some(cap),
            ..Default::default()
        };
        let inventory = v1::Inventory { storage_devices: vec![ns("nvme0n1", 1_000_000_000_000), ns("nvme0n2", 500_000_000_000)], ..Default::default() };
        let hello =
            AgentMessage { kind: Some(Kind::Hello(v1::Hello { agent_id: "ep-2".into(), time_ns: t0, inventory: Some(inventory), ..Default::default() })) };
        let runs =
            vec![ladder_run("L2-0", 50.0, t0, 2.0, (3.0, 0.1875), (2.0, 0.25)), ladder_run("L2-1", 100.0, t0 + 3_000_000_000, 2.0, (4.0, 0.375), (2.0, 0.25))];
        let batch = AgentMessage { kind: Some(Kind::Batch(v1::Batch { agent_id: "ep-2".into(), sequence: 1, probe_runs: runs, ..Default::default() })) };
        let mut acks = client.stream(tokio_stream::iter(vec![hello, batch])).await.unwrap().into_inner();
        assert_eq!(acks.next().await.unwrap().unwrap().durable_sequence, 1);
    });
    let rows = influx.rows("wf_ep", "SELECT ready_idle_gb_per_w, capacity_bytes, ep FROM energy_proportionality WHERE host = 'ep-2'");
    assert_eq!(rows.len(), 1);
    assert_eq!((f(&rows[0][1]), rows[0][2].as_i64(), f(&rows[0][3])), (750.0, Some(1_500_000_000_000), 0.5));

    // The real agent's ladder on a flat 6 W rail: power does not follow load at all, EP 0.
    let dir = tempfile::Builder::new().prefix("wf-ladder-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (_sys_tmp, sys) = sysfs_tree(&["ina3221"]);
    let cfg = agent_config(
        dir.path(),
        &format!(
            "agent_id = \"ladder-1\"\n[sources]\nsysfs_root = \"{}\"\n[drives]\nnvme_cli = false\nsmartctl = false\n{}",
            sys.display(),
            pki().agent_tls("ladder-1")
        ),
    );
    let o = Command::new(bin("wattflip-agent", "wattflip-agent"))
        .args(["probe", "--ladder", "--ladder-levels", "50,100", "--ladder-hold", "300ms", "--size", "128MiB", "--power-zone", "ina3221-0-0041/SSD 12V"])
        .arg("--target")
        .arg(dir.path().join("s.dat"))
        .arg("--out")
        .arg(dir.path().join("out"))
        .arg("--config")
        .arg(&cfg)
        .args(["--collector", &collector.url])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{stdout}{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout.contains("active idle: 6.000 W"), "{stdout}");
    let rows = influx.rows("wf_ep", "SELECT ep, dynamic_range, idle_w, levels FROM energy_proportionality WHERE host = 'ladder-1' GROUP BY pattern");
    assert_eq!(rows.len(), 1, "one series per pattern; first is RR");
    let series = influx.series("wf_ep", "SELECT ep, dynamic_range, idle_w, levels FROM energy_proportionality WHERE host = 'ladder-1' GROUP BY pattern");
    let patterns: Vec<&str> = series.iter().map(|(t, _)| t["pattern"].as_str().unwrap()).collect();
    assert_eq!(patterns, vec!["RR", "RW"]);
    for (_, rows) in &series {
        let r = &rows[0];
        assert!(f(&r[1]).abs() < 1e-9 && f(&r[2]).abs() < 1e-9, "flat power: EP and dynamic range 0, got {r:?}");
        assert_eq!((f(&r[3]), r[4].as_i64()), (6.0, Some(2)));
    }
    // The agent's levels carry the energy model's half-widths: on a flat rail only the INA3221's
    // accuracy class (±1.5 %, taken whole) is left, 0.015 × 6 W = 0.09 W for the idle and the
    // peak; DR = 1 − P₀/P₁₀₀ propagates both as independent (docs/energy-method.md §9.2, the
    // conservative choice): √((0.09/6)² + (6·0.09/36)²) = 0.015·√2 = 0.0212132.
    let rows = influx.rows("wf_ep", "SELECT ep_u95, dynamic_range_u95, idle_w_u95, peak_w_u95 FROM energy_proportionality WHERE host = 'ladder-1'");
    assert_eq!(rows.len(), 2, "{rows:?}");
    for r in &rows {
        assert!(f(&r[1]) > 0.0, "ep_u95 {r:?}");
        assert!((f(&r[2]) - 0.015 * 2f64.sqrt()).abs() < 1e-6, "dynamic_range_u95 {r:?}");
        assert!((f(&r[3]) - 0.09).abs() < 1e-6 && (f(&r[4]) - 0.09).abs() < 1e-6, "idle and peak u95 {r:?}");
    }
}

fn plan(influx: &Influx, db: &str, args: &[&str]) -> (bool, String, String) {
    let o = Command::new(bin("wattflip-collector", "wattflip-collector"))
        .args(["--influx-url", &influx.url, "--influx-db", db, "plan"])
        .args(args)
        .output()
        .unwrap();
    (o.status.success(), String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

fn plan_json(influx: &Influx, db: &str, args: &[&str]) -> serde_json::Value {
    let mut a = args.to_vec();
    a.push("--json");
    let (ok, out, err) = plan(influx, db, &a);
    assert!(ok, "{out}{err}");
    serde_json::from_str(&out).unwrap()
}

#[test]
fn planning_commands_answer_known_questions() {
    let influx = Influx::start();
    let db = "wf_plan";
    let now = wattflip_proto::units::UnixNanos::now().0;
    let minute = 60_000_000_000i64;
    let base = (now / minute) * minute - 10 * minute;
    let mut lp = String::new();
    // Inventory: three ACME-P1 drives on two hosts, one OTHER-Z.
    for (host, dev, model) in [("h1", "nvme0n1", "ACME-P1"), ("h1", "nvme1n1", "ACME-P1"), ("h2", "nvme0n1", "ACME-P1"), ("h3", "sda", "OTHER-Z")] {
        lp.push_str(&format!("inventory,host={host},device={dev},model={model},serial=S-{host}-{dev} capacity_bytes=1000i {base}\n"));
    }
    // Governor sweeps: state 0 (uncapped) and state 2.
    for (i, (state, pattern, watts, mib)) in
        [(0, "SW:128KiB", 25.0, 2000.0), (0, "RR:4KiB", 10.0, 400.0), (2, "SW:128KiB", 10.0, 600.0), (2, "RR:4KiB", 9.0, 400.0)].iter().enumerate()
    {
        lp.push_str(&format!(
            "probe_run,host=h1,device=nvme0n1,model=ACME-P1,bench=governor_sweep,experiment=governor_sweep/{pattern},pattern={} value={state},mib_per_s={mib},energy_j={watts},duration_s=1 {}\n",
            &pattern[..2],
            base + i as i64 * 1_000_000_000
        ));
    }
    // Granularity RR 4 KiB runs with energy: 4 W and 4.8 W.
    for (i, (e, mib, iops)) in [(2.0, 40.0, 10240.0), (2.4, 44.0, 11264.0)].iter().enumerate() {
        lp.push_str(&format!(
            "probe_run,host=h2,device=nvme0n1,model=ACME-P1,bench=granularity,experiment=granularity/RR,pattern=RR value=4096,energy_j={e},duration_s=0.5,mib_per_s={mib},iops={iops} {}\n",
            base + minute + i as i64 * 1_000_000_000
        ));
    }
    // Host power of mixed scopes, one point per minute (k = 0, 1, 2) from base + 2 min:
    // rack r1: h1 and h2 with a wall meter (h1's RAPL package must not be added to it), h4 with
    //   RAPL psys (its package zone is inside psys) plus an NVMe estimate, and full-rate psys points
    //   at 300 W that must not count; h5 with only `core` (no host-level scope); h6 known from its
    //   Hello only.
    // rack r2: h3 with a wall meter, h7 with two PSU inputs, h8 with two rails.
    // (host, rack, source, zone, scope, watts per minute)
    type Series<'a> = (&'a str, &'a str, &'a str, &'a str, &'a str, [f64; 3]);
    let series: &[Series] = &[
        ("h1", "r1", "ipmi", "dcmi/system", "wall", [300.0, 500.0, 400.0]),
        ("h1", "r1", "rapl", "package-0", "package", [100.0, 100.0, 100.0]),
        ("h2", "r1", "ipmi", "dcmi/system", "wall", [200.0, 100.0, 350.0]),
        ("h4", "r1", "rapl", "psys", "psys", [50.0, 60.0, 70.0]),
        ("h4", "r1", "rapl", "package-0", "package", [40.0, 40.0, 40.0]),
        ("h4", "r1", "nvme_estimate", "nvme0", "drive", [8.25, 8.25, 8.25]),
        ("h5", "r1", "rapl", "package-0/core", "core", [30.0, 30.0, 30.0]),
        ("h3", "r2", "ipmi", "dcmi/system", "wall", [700.0, 800.0, 600.0]),
        ("h7", "r2", "hwmon", "pmbus-0/pin1", "psu_in", [150.0, 160.0, 155.0]),
        ("h7", "r2", "hwmon", "pmbus-1/pin1", "psu_in", [150.0, 170.0, 145.0]),
        ("h8", "r2", "hwmon", "ina226-0/12V", "rail", [20.0, 25.0, 30.0]),
        ("h8", "r2", "hwmon", "ina226-1/5V", "rail", [10.0, 10.0, 12.0]),
    ];
    for (host, rack, source, zone, scope, watts) in series {
        for (k, w) in watts.iter().enumerate() {
            lp.push_str(&format!(
                "power,host={host},rack={rack},source={source},zone={zone},scope={scope},method=measured watts={w} {}\n",
                base + (k as i64 + 2) * minute
            ));
        }
    }
    for k in 0..3 {
        for ms in [0, 5, 10] {
            lp.push_str(&format!(
                "power,host=h4,rack=r1,source=rapl,zone=psys,scope=psys,method=measured,rate=full watts=300 {}\n",
                base + (k + 2) * minute + ms * 1_000_000
            ));
        }
    }
    for host in ["h1", "h6"] {
        lp.push_str(&format!("agent,host={host},rack=r1,session=run version=\"0.1.0\",power_sources=0i {}\n", base));
    }
    // Capacity at a float boundary: 2.1 J over 0.7 s is 3 W, and 30 W hold 10 drives.
    lp.push_str(&format!(
        "probe_run,host=h2,device=nvme1n1,model=ACME-Q,bench=granularity,experiment=granularity/RR,pattern=RR value=4096,energy_j=2.1,duration_s=0.7,mib_per_s=40,iops=10240 {}\n",
        base + minute
    ));
    write_lp(&influx, db, &lp);

    // power-cap: equal weights → saved (15 + 1)/2 = 8 W per drive × 3 drives; lost (70 + 0)/2 %.
    let p = plan_json(&influx, db, &["power-cap", "--model", "ACME-P1", "--state", "2"]);
    assert_eq!((p["drives"].as_u64(), f(&p["fleet_saved_w"]), f(&p["throughput_lost_pct"])), (Some(3), 24.0, 35.0));
    let mix = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(mix.path(), "[mix]\n\"SW:128KiB\" = 1\n\"RR:4KiB\" = 3\n").unwrap();
    let p = plan_json(&influx, db, &["power-cap", "--model", "ACME-P1", "--state", "2", "--mix", mix.path().to_str().unwrap()]);
    assert_eq!((f(&p["fleet_saved_w"]), f(&p["throughput_lost_pct"])), (13.5, 17.5));

    // budget per rack, each host by its best scope: per minute
    // r1 = h1 300 + h2 200 + h4 (50 + 8.25) = 558.25, then 668.25, 828.25 → peak 828.25;
    // r2 = h3 700 + h7 300 + h8 30 = 1030, then 800 + 330 + 35 = 1165, 600 + 300 + 42 = 942 → 1165.
    let p = plan_json(&influx, db, &["budget", "--group-by", "rack", "--budget-w", "1000"]);
    let groups: Vec<(String, u64, f64, f64, bool)> = p["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["group"].as_str().unwrap().into(), g["hosts"].as_u64().unwrap(), f(&g["peak_w"]), f(&g["headroom_w"]), g["exceeds"].as_bool().unwrap()))
        .collect();
    assert_eq!(groups, vec![("r1".into(), 3, 828.25, 171.75, false), ("r2".into(), 3, 1165.0, -165.0, true)]);
    let coverage: Vec<&str> = p["groups"].as_array().unwrap().iter().map(|g| g["coverage"].as_str().unwrap()).collect();
    assert_eq!(
        coverage,
        vec![
            "3 of 5 hosts counted (host meter 2, RAPL + NVMe estimate 1); missing: h5 (only scopes core: none is host-level), h6 (no power data in the last 30d)",
            "3 of 3 hosts counted (host meter 1, PSU input 1, rails 1)",
        ]
    );
    let h4 = p["groups"][0]["counted"].as_array().unwrap().iter().find(|h| h["host"] == "h4").unwrap().clone();
    assert_eq!(h4, serde_json::json!({"host": "h4", "tier": "RAPL + NVMe estimate", "scopes": ["psys", "drive"], "peak_w": 78.25}));
    let (ok, table, _) = plan(&influx, db, &["budget", "--group-by", "rack", "--budget-w", "1000"]);
    let r2: Vec<&str> = table.lines().find(|l| l.starts_with("r2 ")).map(|l| l.split_whitespace().collect()).unwrap_or_default();
    assert!(
        ok && r2 == ["r2", "3", "1165.0", "-165.0", "EXCEEDS"] && table.contains("\n  3 of 3 hosts counted (host meter 1, PSU input 1, rails 1)\n"),
        "{table}"
    );
    let p = plan_json(&influx, db, &["budget", "--group-by", "host", "--budget-w", "1000"]);
    let peaks: Vec<(String, Option<f64>)> =
        p["groups"].as_array().unwrap().iter().map(|g| (g["group"].as_str().unwrap().into(), g["peak_w"].as_f64())).collect();
    let want: Vec<(String, Option<f64>)> = [
        ("h1", Some(500.0)),
        ("h2", Some(350.0)),
        ("h3", Some(800.0)),
        ("h4", Some(78.25)),
        ("h5", None),
        ("h6", None),
        ("h7", Some(330.0)),
        ("h8", Some(42.0)),
    ]
    .into_iter()
    .map(|(h, w)| (h.to_string(), w))
    .collect();
    assert_eq!(peaks, want);
    // Input checks: a budget that is not a positive number, a label no host has.
    for bad in ["NaN", "0", "-5", "inf"] {
        let arg = format!("--budget-w={bad}");
        let (ok, _, err) = plan(&influx, db, &["budget", "--group-by", "rack", &arg]);
        assert!(!ok && err.contains(&format!("--budget-w {bad}: the budget must be a positive, finite number of watts")), "{bad}: {err}");
    }
    let (ok, _, err) = plan(&influx, db, &["budget", "--group-by", "row", "--budget-w", "1000"]);
    assert!(!ok && err.contains("--group-by `row`: no host has the label `row`; labels: rack"), "{err}");
    let (ok, _, err) = plan(&influx, db, &["capacity", "--model", "ACME-P1", "--budget-w", "NaN", "--workload", "RR:4KiB"]);
    assert!(!ok && err.contains("--budget-w NaN: the budget must be a positive, finite number of watts"), "{err}");
    let p = plan_json(&influx, db, &["capacity", "--model", "ACME-Q", "--budget-w", "30", "--workload", "RR:4KiB"]);
    assert_eq!((p["drives"].as_u64(), f(&p["total_mib_per_s"])), (Some(10), 400.0));

    // capacity: mean 4.4 W per drive → 22 drives in 100 W, 22 × 42 MiB/s, 22 × 10752 IOPS.
    let p = plan_json(&influx, db, &["capacity", "--model", "ACME-P1", "--budget-w", "100", "--workload", "RR:4KiB"]);
    assert!((f(&p["watts_per_drive"]) - 4.4).abs() < 1e-12);
    assert_eq!((p["drives"].as_u64(), f(&p["total_mib_per_s"]), f(&p["total_iops"])), (Some(22), 924.0, 236544.0));
    let (ok, table, _) = plan(&influx, db, &["capacity", "--model", "ACME-P1", "--budget-w", "100", "--workload", "RR:4KiB"]);
    assert!(ok && table.contains("→ 22 drives"), "{table}");

    // Bad input: clear messages, never a zero.
    let (ok, _, err) = plan(&influx, db, &["power-cap", "--model", "NOPE", "--state", "2"]);
    assert!(!ok && err.contains("unknown model `NOPE`") && err.contains("models seen: ACME-P1, ACME-Q, OTHER-Z"), "{err}");
    let (ok, _, err) = plan(&influx, db, &["power-cap", "--model", "ACME-P1", "--state", "5"]);
    assert!(!ok && err.contains("power state 5") && err.contains("states measured: 0, 2"), "{err}");
    let (ok, _, err) = plan(&influx, db, &["budget", "--budget-w", "100", "--since", "1s"]);
    assert!(!ok && err.contains("no host power"), "{err}");
    let (ok, _, err) = plan(&influx, db, &["capacity", "--model", "OTHER-Z", "--budget-w", "100", "--workload", "RR:4KiB"]);
    assert!(!ok && err.contains("no Granularity probe of model OTHER-Z at RR:4KiB"), "{err}");
    let _ = Duration::ZERO;
}

#[test]
fn fleet_rollups_answer_known_questions() {
    let influx = Influx::start();
    let db = "wf_rollup";
    let now = wattflip_proto::units::UnixNanos::now().0;
    let (sec, day) = (1_000_000_000i64, 86_400_000_000_000i64);
    let base = now - 3600 * sec;
    let mut lp = String::new();
    // Inventory: ACME-P1 on h1 (two drives, firmware F1) and h2 (F2); OTHER-Z on h3.
    for (host, dev, model, fw) in
        [("h1", "nvme0n1", "ACME-P1", "F1"), ("h1", "nvme1n1", "ACME-P1", "F1"), ("h2", "nvme0n1", "ACME-P1", "F2"), ("h3", "sda", "OTHER-Z", "Z9")]
    {
        lp.push_str(&format!("inventory,host={host},device={dev},model={model},serial=S-{host}-{dev} capacity_bytes=1000i,firmware=\"{fw}\" {base}\n"));
    }
    // Probe runs with energy: (host, device, firmware, pattern, IO size, idle W, J/MiB, class, datasheet ratio).
    let runs = [
        ("h1", "nvme0n1", "F1", "RR", 4096, 2.0, 0.5, "NS", Some(1.5)),
        ("h1", "nvme0n1", "F1", "RR", 4096, 2.5, 0.75, "S", Some(2.5)),
        ("h1", "nvme0n1", "F1", "SW", 131072, 2.75, 0.125, "None", None),
        ("h1", "nvme1n1", "F1", "RR", 4096, 3.5, 1.0, "S", Some(1.0)),
        ("h2", "nvme0n1", "F2", "RR", 4096, 5.0, 2.0, "GWP", Some(3.0)),
        ("h2", "nvme0n1", "F2", "SW", 131072, 6.0, 0.25, "None", None),
    ];
    for (i, (host, dev, fw, pattern, size, idle, j, class, ratio)) in runs.iter().enumerate() {
        let ratio = ratio.map(|r| format!(",datasheet_ratio={r}")).unwrap_or_default();
        lp.push_str(&format!(
            "probe_run,host={host},device={dev},model=ACME-P1,firmware={fw},bench=granularity,experiment=granularity/{pattern},pattern={pattern} \
             value={size},duration_s=1,energy_j=3,idle_baseline_w={idle},j_per_mib={j},background_class=\"{class}\"{ratio} {}\n",
            base + i as i64 * sec
        ));
    }
    // A governor sweep's idle baseline is that of a low power state: not the drive's idle.
    lp.push_str(&format!("probe_run,host=h1,device=nvme0n1,model=ACME-P1,firmware=F1,bench=governor_sweep,experiment=governor_sweep/RR:4KiB,pattern=RR value=4,duration_s=1,idle_baseline_w=0.5 {}\n", base + 10 * sec));
    // Temperatures on distinct UTC days (24 h apart): h1/nvme0 3 days (twice on one), h1/nvme1 2,
    // h2/nvme0 3, h3/sda 1; a CPU sensor is no drive.
    for (host, dev, days) in [("h1", "nvme0", 3), ("h1", "nvme1", 2), ("h2", "nvme0", 3), ("h3", "sda", 1), ("h1", "coretemp.0", 3)] {
        for k in 0..days {
            lp.push_str(&format!("temperature,host={host},device={dev},sensor=Composite,source=hwmon celsius=40 {}\n", now - k * day - 2 * sec));
        }
    }
    lp.push_str(&format!("temperature,host=h1,device=nvme0,sensor=Composite,source=hwmon celsius=41 {}\n", now - 3 * sec));
    // Throttle episodes: two on h1/nvme0 (the first written at onset and again at its end, one
    // point), one on h2/nvme0.
    for (host, t, ongoing) in [("h1", base, true), ("h1", base, false), ("h1", base + 60 * sec, false), ("h2", base, false)] {
        lp.push_str(&format!("throttle_event,host={host},device=nvme0,trigger=temperature duration_s=5,ongoing={ongoing} {t}\n"));
    }
    // Efficiency phases (issue 42): ready idle stable on h1/nvme0n1 (F1: 2 ± 0.25 W/TB, 8 W of
    // unknown half-width) and h2/nvme0n1 (F2: 3 ± 0.5 W/TB, 12 ± 1 W); h1/nvme1n1's unstable (no
    // figure), and an older stable phase of h1/nvme0n1 that its latest one replaces.
    for (host, dev, fw, verdict, fields, t) in [
        ("h1", "nvme0n1", "F1", "stable", "watts_per_tb=5,watts=20", base),
        ("h1", "nvme0n1", "F1", "stable", "watts_per_tb=2,watts_per_tb_u95=0.25,watts=8", base + sec),
        ("h2", "nvme0n1", "F2", "stable", "watts_per_tb=3,watts_per_tb_u95=0.5,watts=12,watts_u95=1", base + sec),
        ("h1", "nvme1n1", "F1", "unstable", "max_deviation=0.2", base + sec),
    ] {
        lp.push_str(&format!(
            "device_efficiency,host={host},device={dev},model=ACME-P1,firmware={fw},profile=ready_idle,verdict={verdict} windows=10i,{fields} {t}\n"
        ));
    }
    write_lp(&influx, db, &lp);

    // Per model.
    let r = plan_json(&influx, db, &["rollup"]);
    let groups = r["groups"].as_array().unwrap();
    assert_eq!(groups.iter().map(|g| g["model"].as_str().unwrap()).collect::<Vec<_>>(), vec!["ACME-P1", "OTHER-Z"]);
    let acme = &groups[0];
    assert!(acme.get("firmware").is_none(), "{acme}");
    let idle = &acme["idle"];
    // Per device medians 2.5, 3.5, 5.5 (the sweep's 0.5 W left out).
    assert_eq!((idle["devices"].as_u64(), f(&idle["min_w"]), f(&idle["median_w"]), f(&idle["p90_w"]), f(&idle["max_w"])), (Some(3), 2.5, 3.5, 5.5, 5.5));
    let jpm: Vec<(String, u64, f64, u64, u64)> = acme["j_per_mib"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (
                j["pattern"].as_str().unwrap().into(),
                j["io_size_bytes"].as_u64().unwrap(),
                f(&j["j_per_mib"]),
                j["runs"].as_u64().unwrap(),
                j["devices"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(jpm, vec![("RR".into(), 4096, 1.0625, 4, 3), ("SW".into(), 131072, 0.1875, 2, 2)]);
    let bg: Vec<(String, String, serde_json::Value)> = acme["background"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["experiment"].as_str().unwrap().into(), b["class"].as_str().unwrap().into(), b["devices"].clone()))
        .collect();
    assert_eq!(
        bg,
        vec![
            ("granularity/RR".into(), "S".into(), serde_json::json!({"GWP": 1, "S": 2})),
            ("granularity/SW".into(), "None".into(), serde_json::json!({"None": 2})),
        ]
    );
    let t = &acme["throttle"];
    assert_eq!((t["devices"].as_u64(), t["device_days"].as_u64(), t["events"].as_u64(), f(&t["events_per_device_day"])), (Some(3), Some(8), Some(3), 0.375));
    let d = &acme["datasheet_ratio"];
    assert_eq!((d["devices"].as_u64(), f(&d["mean"]), f(&d["min"]), f(&d["max"])), (Some(3), 2.0, 1.0, 3.0));
    // Efficiency: the median of the two devices' latest W/TB, bounded by the medians of their
    // intervals' ends (1.75, 2.5 → 2.125; 2.25, 3.5 → 2.875); the watts unbounded (h1's has no
    // half-width); the unstable phase counted.
    let e = &acme["efficiency"][0];
    assert_eq!((e["profile"].as_str(), e["devices"].as_u64(), e["unstable_phases"].as_u64()), (Some("ready_idle"), Some(2), Some(1)), "{e}");
    let (w, p) = (&e["figures"][0], &e["figures"][1]);
    assert_eq!(
        (w["metric"].as_str(), f(&w["median"]), f(&w["low95"]), f(&w["high95"]), f(&w["min"]), f(&w["max"])),
        (Some("watts_per_tb"), 2.5, 2.125, 2.875, 2.0, 3.0)
    );
    assert_eq!((p["metric"].as_str(), f(&p["median"]), p["low95"].is_null(), p["high95"].is_null()), (Some("watts"), 10.0, true, true));
    // OTHER-Z: observed for a day without throttling (a measured zero), nothing else measured.
    let other = &groups[1];
    assert_eq!(
        (other["throttle"]["device_days"].as_u64(), other["throttle"]["events"].as_u64(), f(&other["throttle"]["events_per_device_day"])),
        (Some(1), Some(0), 0.0)
    );
    assert!(other["idle"].is_null() && other["datasheet_ratio"].is_null() && other["j_per_mib"].as_array().unwrap().is_empty(), "{other}");
    assert!(r["missing"].as_object().unwrap().is_empty(), "{r}");

    // Per model and firmware.
    let r = plan_json(&influx, db, &["rollup", "--by", "model,firmware", "--model", "ACME-P1"]);
    let groups = r["groups"].as_array().unwrap();
    assert_eq!(groups.iter().map(|g| g["firmware"].as_str().unwrap()).collect::<Vec<_>>(), vec!["F1", "F2"]);
    let (f1, f2) = (&groups[0], &groups[1]);
    assert_eq!((f(&f1["idle"]["median_w"]), f(&f1["idle"]["p90_w"]), f(&f2["idle"]["median_w"])), (3.0, 3.5, 5.5));
    assert_eq!((f(&f1["j_per_mib"][0]["j_per_mib"]), f1["j_per_mib"][0]["runs"].as_u64(), f(&f2["j_per_mib"][0]["j_per_mib"])), (0.75, Some(3), 2.0));
    assert_eq!((f1["background"][0]["class"].as_str(), f2["background"][0]["class"].as_str()), (Some("S"), Some("GWP")));
    assert_eq!((f1["throttle"]["device_days"].as_u64(), f(&f1["throttle"]["events_per_device_day"])), (Some(5), 0.4));
    assert_eq!((f2["throttle"]["events"].as_u64(), f(&f2["throttle"]["events_per_device_day"])), (Some(1), 1.0 / 3.0));
    assert_eq!((f(&f1["datasheet_ratio"]["mean"]), f(&f2["datasheet_ratio"]["mean"])), (1.5, 3.0));
    let (e1, e2) = (&f1["efficiency"][0]["figures"][0], &f2["efficiency"][0]["figures"][0]);
    assert_eq!((f(&e1["median"]), f(&e1["low95"]), f(&e1["high95"]), f1["efficiency"][0]["unstable_phases"].as_u64()), (2.0, 1.75, 2.25, Some(1)));
    assert_eq!((f(&e2["median"]), f(&e2["low95"]), f(&e2["high95"]), f2["efficiency"][0]["unstable_phases"].as_u64()), (3.0, 2.5, 3.5, Some(0)));
    let (ok, table, _) = plan(&influx, db, &["rollup", "--by", "model,firmware", "--model", "ACME-P1"]);
    assert!(
        ok && table.contains("== model ACME-P1 firmware F1") && table.contains("idle W over 2 devices: min 2.500  median 3.000  p90 3.500  max 3.500"),
        "{table}"
    );

    // Only some roll-ups for a model that has only some: the rest are listed as missing.
    let r = plan_json(&influx, db, &["rollup", "--model", "OTHER-Z"]);
    let missing: Vec<&str> = r["missing"].as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(missing, vec!["background", "datasheet", "efficiency", "idle", "j-per-mib"]);

    // Bad input: clear messages, never zeros.
    let (ok, _, err) = plan(&influx, db, &["rollup", "--model", "NOPE"]);
    assert!(!ok && err.contains("unknown model `NOPE`") && err.contains("models seen: ACME-P1, OTHER-Z"), "{err}");
    let (ok, _, err) = plan(&influx, db, &["rollup", "--model", "OTHER-Z", "--metric", "idle"]);
    assert!(!ok && err.contains("no data for the `idle` roll-up of model OTHER-Z in the last 30d") && err.contains("idle_baseline_w"), "{err}");
    let (ok, _, err) = plan(&influx, db, &["rollup", "--since", "1s"]);
    assert!(!ok && err.contains("no inventory or probe data at all in the last 1s") && err.contains("time range is empty"), "{err}");
    let (ok, _, err) = plan(&influx, db, &["rollup", "--since", "0d"]);
    assert!(!ok && err.contains("--since `0d`: the time range is empty"), "{err}");
    let (ok, _, err) = plan(&influx, db, &["rollup", "--by", "rack"]);
    assert!(!ok && err.contains("--by `rack`"), "{err}");
    let (ok, _, err) = plan(&influx, db, &["rollup", "--metric", "watts"]);
    assert!(!ok && err.contains("--metric `watts`: unknown roll-up"), "{err}");
    // The other plans: unknown model and an empty time range.
    let (ok, _, err) = plan(&influx, db, &["capacity", "--model", "NOPE", "--budget-w", "100", "--workload", "RR:4KiB"]);
    assert!(!ok && err.contains("unknown model `NOPE`") && err.contains("models seen: ACME-P1, OTHER-Z"), "{err}");
    for args in [
        &["capacity", "--model", "ACME-P1", "--budget-w", "100", "--workload", "RR:4KiB", "--since", "1s"][..],
        &["power-cap", "--model", "ACME-P1", "--state", "2", "--since", "1s"],
    ] {
        let (ok, _, err) = plan(&influx, db, args);
        assert!(!ok && err.contains("no inventory or probe data at all in the last 1s: the time range is empty"), "{args:?}: {err}");
    }
}

#[test]
fn ladder_mix_climbs_the_uflip_rr_rw_mix() {
    let influx = Influx::start();
    let collector = Collector::start(&influx.url, "wf_mix");
    let dir = tempfile::Builder::new().prefix("wf-ladder-mix-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (_sys_tmp, sys) = sysfs_tree(&["ina3221"]);
    let cfg = agent_config(
        dir.path(),
        &format!(
            "agent_id = \"mix-1\"\n[sources]\nsysfs_root = \"{}\"\n[drives]\nnvme_cli = false\nsmartctl = false\n{}",
            sys.display(),
            pki().agent_tls("mix-1")
        ),
    );
    let o = Command::new(bin("wattflip-agent", "wattflip-agent"))
        .args(["probe", "--ladder", "--ladder-patterns", "RR", "--ladder-mix", "70", "--ladder-levels", "50,100", "--ladder-hold", "300ms", "--size", "128MiB"])
        .args(["--power-zone", "ina3221-0-0041/SSD 12V"])
        .arg("--target")
        .arg(dir.path().join("m.dat"))
        .arg("--out")
        .arg(dir.path().join("out"))
        .arg("--config")
        .arg(&cfg)
        .args(["--collector", &collector.url])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{stdout}{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout.contains("--ladder-mix 70: uFLIP's Mix interleaves ratio 2, 66.7 % reads"), "{stdout}");
    assert!(stdout.contains("MIX (RR-RW ratio 2, 66.7 % reads): maximum"), "{stdout}");
    let series = influx.series("wf_mix", "SELECT ep, levels, iops_per_w FROM energy_proportionality WHERE host = 'mix-1' GROUP BY pattern, experiment");
    let keys: Vec<(&str, &str)> = series.iter().map(|(t, _)| (t["pattern"].as_str().unwrap(), t["experiment"].as_str().unwrap())).collect();
    assert_eq!(keys, vec![("MIX", "load_ladder/MIX"), ("RR", "load_ladder/RR")]);
    for (_, rows) in &series {
        // Flat 6 W rail: EP 0; two levels; IOPS/W (random IO) present.
        assert!(f(&rows[0][1]).abs() < 1e-9 && rows[0][2].as_i64() == Some(2) && f(&rows[0][3]) > 0.0, "{rows:?}");
    }
}
