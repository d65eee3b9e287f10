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

fn ladder_run(run_id: &str, pct: f64, start_ns: i64, secs: f64, watts: f64, idle: f64) -> v1::ProbeRun {
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
        idle_baseline_w: Some(idle),
        energy_source: "hwmon:rail".into(),
        ..Default::default()
    }
}

#[test]
fn collector_computes_energy_proportionality_from_ladders() {
    let influx = Influx::start();
    let collector = Collector::start(&influx.url, "wf_ep");
    let t0: i64 = 1_790_000_000_000_000_000;
    // Idle 2 W, 50 % at 3 W, 100 % at 4 W: ∫p = 0.75 → EP 0.5, dynamic range 0.5.
    let runs = vec![ladder_run("L1-0", 50.0, t0, 2.0, 3.0, 2.0), ladder_run("L1-1", 100.0, t0 + 3_000_000_000, 2.0, 4.0, 2.0)];
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let identity = pki().issue("ep-1", &["ep-1"], None);
        let mut client = IngestClient::new(pki().channel(&collector.url, Some(identity)).await.unwrap());
        let hello = AgentMessage { kind: Some(Kind::Hello(v1::Hello { agent_id: "ep-1".into(), time_ns: t0, ..Default::default() })) };
        let batch = AgentMessage { kind: Some(Kind::Batch(v1::Batch { agent_id: "ep-1".into(), sequence: 1, probe_runs: runs, ..Default::default() })) };
        let mut acks = client.stream(tokio_stream::iter(vec![hello, batch])).await.unwrap().into_inner();
        assert_eq!(acks.next().await.unwrap().unwrap().durable_sequence, 1);
    });
    let rows = influx.rows("wf_ep", "SELECT ep, dynamic_range, idle_w, peak_w, linear_deviation, gap_050, iops_per_w FROM energy_proportionality WHERE host = 'ep-1'");
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!((f(&r[1]), f(&r[2]), f(&r[3]), f(&r[4]), f(&r[5]), f(&r[6]), f(&r[7])), (0.5, 0.5, 2.0, 4.0, 0.0, 0.25, 2500.0));

    // The real agent's ladder on a flat 6 W rail: power does not follow load at all, EP 0.
    let dir = tempfile::Builder::new().prefix("wf-ladder-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (_sys_tmp, sys) = sysfs_tree(&["ina3221"]);
    let cfg = agent_config(
        dir.path(),
        &format!("agent_id = \"ladder-1\"\n[sources]\nsysfs_root = \"{}\"\n[drives]\nnvme_cli = false\nsmartctl = false\n{}", sys.display(), pki().agent_tls("ladder-1")),
    );
    let o = Command::new(bin("wattflip-agent", "wattflip-agent"))
        .args(["probe", "--ladder", "--ladder-levels", "50,100", "--ladder-hold", "300ms", "--size", "128MiB", "--power-zone", "ina3221-0-0041/SSD 12V"])
        .arg("--target").arg(dir.path().join("s.dat"))
        .arg("--out").arg(dir.path().join("out"))
        .arg("--config").arg(&cfg)
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
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as i64;
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
    // Wall power, one point per minute: rack r1 = h1 + h2, rack r2 = h3.
    for (host, rack, watts) in [("h1", "r1", [300.0, 500.0, 400.0]), ("h2", "r1", [200.0, 100.0, 350.0]), ("h3", "r2", [700.0, 800.0, 600.0])] {
        for (k, w) in watts.iter().enumerate() {
            lp.push_str(&format!("power,host={host},rack={rack},source=ipmi,zone=dcmi/system,scope=wall,method=measured watts={w} {}\n", base + (k as i64 + 2) * minute));
        }
    }
    write_lp(&influx, db, &lp);

    // power-cap: equal weights → saved (15 + 1)/2 = 8 W per drive × 3 drives; lost (70 + 0)/2 %.
    let p = plan_json(&influx, db, &["power-cap", "--model", "ACME-P1", "--state", "2"]);
    assert_eq!((p["drives"].as_u64(), f(&p["fleet_saved_w"]), f(&p["throughput_lost_pct"])), (Some(3), 24.0, 35.0));
    let mix = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(mix.path(), "[mix]\n\"SW:128KiB\" = 1\n\"RR:4KiB\" = 3\n").unwrap();
    let p = plan_json(&influx, db, &["power-cap", "--model", "ACME-P1", "--state", "2", "--mix", mix.path().to_str().unwrap()]);
    assert_eq!((f(&p["fleet_saved_w"]), f(&p["throughput_lost_pct"])), (13.5, 17.5));

    // budget: coincident rack totals per minute r1 = 500, 600, 750 and r2 = 700, 800, 600.
    let p = plan_json(&influx, db, &["budget", "--group-by", "rack", "--budget-w", "760"]);
    let groups: Vec<(String, u64, f64, f64, bool)> = p["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["group"].as_str().unwrap().into(), g["hosts"].as_u64().unwrap(), f(&g["peak_w"]), f(&g["headroom_w"]), g["exceeds"].as_bool().unwrap()))
        .collect();
    assert_eq!(groups, vec![("r1".into(), 2, 750.0, 10.0, false), ("r2".into(), 1, 800.0, -40.0, true)]);
    assert_eq!(p["scope"], "wall");
    let p = plan_json(&influx, db, &["budget", "--group-by", "host", "--budget-w", "760"]);
    let peaks: Vec<f64> = p["groups"].as_array().unwrap().iter().map(|g| f(&g["peak_w"])).collect();
    assert_eq!(peaks, vec![500.0, 350.0, 800.0]);

    // capacity: mean 4.4 W per drive → 22 drives in 100 W, 22 × 42 MiB/s, 22 × 10752 IOPS.
    let p = plan_json(&influx, db, &["capacity", "--model", "ACME-P1", "--budget-w", "100", "--workload", "RR:4KiB"]);
    assert!((f(&p["watts_per_drive"]) - 4.4).abs() < 1e-12);
    assert_eq!((p["drives"].as_u64(), f(&p["total_mib_per_s"]), f(&p["total_iops"])), (Some(22), 924.0, 236544.0));
    let (ok, table, _) = plan(&influx, db, &["capacity", "--model", "ACME-P1", "--budget-w", "100", "--workload", "RR:4KiB"]);
    assert!(ok && table.contains("→ 22 drives"), "{table}");

    // Bad input: clear messages, never a zero.
    let (ok, _, err) = plan(&influx, db, &["power-cap", "--model", "NOPE", "--state", "2"]);
    assert!(!ok && err.contains("unknown model `NOPE`") && err.contains("models seen: ACME-P1, OTHER-Z"), "{err}");
    let (ok, _, err) = plan(&influx, db, &["power-cap", "--model", "ACME-P1", "--state", "5"]);
    assert!(!ok && err.contains("power state 5") && err.contains("states measured: 0, 2"), "{err}");
    let (ok, _, err) = plan(&influx, db, &["budget", "--budget-w", "100", "--since", "1s"]);
    assert!(!ok && err.contains("no host power"), "{err}");
    let (ok, _, err) = plan(&influx, db, &["capacity", "--model", "OTHER-Z", "--budget-w", "100", "--workload", "RR:4KiB"]);
    assert!(!ok && err.contains("no Granularity probe of model OTHER-Z at RR:4KiB"), "{err}");
    let _ = Duration::ZERO;
}
