//! The efficiency preset through the collector (issue 42): `probe --efficiency --collector` on a
//! scratch file with the fixture shunt monitor (a flat 6 W rail) sends its phases, and the
//! `device_efficiency` points the collector writes into InfluxDB are the lines of the agent's own
//! `efficiency.lp`, tag for tag and value for value; `plan rollup --metric efficiency` reads them.

use std::collections::BTreeMap;
use std::process::Command;
use wattflip_e2e::*;

/// A value of a line-protocol field or tag, as InfluxDB's JSON answer gives it back.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Text(String),
    Int(i64),
    Float(f64),
}

/// One line of `efficiency.lp` as (column → value), `time` included. The agent's lines have no
/// escaped characters in keys or tag values, and no comma or quote inside a string field.
fn parse_line(line: &str) -> BTreeMap<String, Value> {
    let (head, rest) = line.split_once(' ').unwrap();
    let (fields, time) = rest.rsplit_once(' ').unwrap();
    let mut cols = BTreeMap::from([("time".to_string(), Value::Int(time.parse().unwrap()))]);
    for tag in head.split(',').skip(1) {
        let (k, v) = tag.split_once('=').unwrap();
        cols.insert(k.into(), Value::Text(v.into()));
    }
    for field in fields.split(',') {
        let (k, v) = field.split_once('=').unwrap();
        let v = match (v.strip_prefix('"').and_then(|s| s.strip_suffix('"')), v.strip_suffix('i')) {
            (Some(s), _) => Value::Text(s.into()),
            (None, Some(i)) => Value::Int(i.parse().unwrap()),
            (None, None) => Value::Float(v.parse().unwrap()),
        };
        cols.insert(k.into(), v);
    }
    cols
}

/// Whether InfluxDB's JSON value is the line's value, exactly: both sides print the shortest
/// decimal that round-trips, and this crate's serde_json parses floats exactly (`float_roundtrip`).
fn same(line: &Value, stored: &serde_json::Value) -> bool {
    match line {
        Value::Text(s) => stored.as_str() == Some(s),
        Value::Int(i) => stored.as_i64() == Some(*i),
        Value::Float(f) => stored.as_f64() == Some(*f),
    }
}

#[test]
fn probe_efficiency_sends_its_phases_and_influx_holds_its_lp_lines() {
    let influx = Influx::start();
    let collector = Collector::start(&influx.url, "wf_efficiency");
    let dir = tempfile::Builder::new().prefix("wf-eff-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (_sys_tmp, sys) = sysfs_tree(&["ina3221"]);
    let cfg = agent_config(
        dir.path(),
        &format!(
            "agent_id = \"eff-e2e\"\n[labels]\nrack = \"r9\"\n[sources]\nsysfs_root = \"{}\"\nrapl = false\n{}",
            sys.display(),
            pki().agent_tls("eff-e2e")
        ),
    );
    let out = dir.path().join("out");
    let target = dir.path().join("eff.dat");
    // Short windows and a wide band: the verdicts are about the flat rail, not the test machine's
    // IO rate.
    let args = [
        "probe",
        "--efficiency",
        "--size",
        "32MiB",
        "--target",
        target.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--config",
        cfg.to_str().unwrap(),
        "--collector",
        &collector.url,
        "--power-zone",
        "ina3221-0-0041/SSD 12V",
        "--power-interval",
        "2ms",
        "--efficiency-window",
        "100ms",
        "--efficiency-windows",
        "3",
        "--efficiency-budget",
        "2s",
        "--efficiency-band",
        "90",
        "--efficiency-trend",
        "90",
        "--capacity",
        "3TB",
    ];
    let o = Command::new(bin("wattflip-agent", "wattflip-agent")).args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{stdout}{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout.contains("acknowledged"), "{stdout}");
    let lp = std::fs::read_to_string(out.join("efficiency/efficiency.lp")).unwrap();
    let lines: Vec<BTreeMap<String, Value>> = lp.lines().map(parse_line).collect();
    assert_eq!(lines.len(), 6, "{lp}");

    let v = influx.query("wf_efficiency", "SELECT * FROM device_efficiency WHERE host = 'eff-e2e'");
    let series = &v["results"][0]["series"][0];
    let cols: Vec<&str> = series["columns"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    let rows = series["values"].as_array().unwrap();
    assert_eq!(rows.len(), 6, "{v}");
    // Every stored point is a line of the file (InfluxDB orders by time, as the file does), with
    // exactly the line's columns: nothing added, nothing missing, every value the same.
    for (row, line) in rows.iter().zip(&lines) {
        let stored: BTreeMap<&str, &serde_json::Value> = cols.iter().copied().zip(row.as_array().unwrap()).filter(|(_, x)| !x.is_null()).collect();
        assert_eq!(stored.keys().copied().collect::<Vec<_>>(), line.keys().map(String::as_str).collect::<Vec<_>>(), "{row}\n{line:?}");
        for (k, want) in line {
            assert!(same(want, stored[k.as_str()]), "{k}: line {want:?}, stored {}", stored[k.as_str()]);
        }
    }
    // The figures themselves: 6 W on 3 TB of ready idle, and each active phase's IOPS per 6 W.
    let get = |i: usize, k: &str| match lines[i].get(k) {
        Some(Value::Float(f)) => *f,
        other => panic!("{k} of phase {i}: {other:?}\n{lp}"),
    };
    assert_eq!(lines[0]["profile"], Value::Text("ready_idle".into()));
    assert_eq!(lines[0]["rack"], Value::Text("r9".into()));
    assert!((get(0, "watts") - 6.0).abs() < 1e-9 && (get(0, "watts_per_tb") - 2.0).abs() < 1e-9 && (get(0, "gb_per_watt") - 500.0).abs() < 1e-6, "{lp}");
    for (i, line) in lines.iter().enumerate().skip(1) {
        if line["verdict"] == Value::Text("stable".into()) {
            assert!((get(i, "iops_per_watt") - get(i, "iops") / 6.0).abs() <= 1e-9 * get(i, "iops"), "{lp}");
        }
    }

    // The fleet roll-up over what the collector stored: one device, so each profile's median is
    // its phase's figure and the bounds are its own 95 % interval; unstable phases are counted.
    let o = Command::new(bin("wattflip-collector", "wattflip-collector"))
        .args(["--influx-url", &influx.url, "--influx-db", "wf_efficiency", "plan", "rollup", "--by", "model,firmware", "--metric", "efficiency", "--json"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_str(&text).unwrap();
    let g = &r["groups"][0];
    assert_eq!((g["model"].as_str(), g["firmware"].as_str(), r["groups"].as_array().map(Vec::len)), (Some("file"), Some(""), Some(1)), "{r}");
    let profiles = g["efficiency"].as_array().unwrap();
    let unstable = lines.iter().filter(|l| l["verdict"] == Value::Text("unstable".into())).count() as u64;
    assert_eq!(profiles.iter().map(|p| p["unstable_phases"].as_u64().unwrap()).sum::<u64>(), unstable, "{r}");
    let idle = &profiles[0];
    assert_eq!((idle["profile"].as_str(), idle["devices"].as_u64()), (Some("ready_idle"), Some(1)), "{r}");
    let w = &idle["figures"][0];
    assert_eq!((w["metric"].as_str(), w["devices"].as_u64()), (Some("watts_per_tb"), Some(1)), "{r}");
    // The plan reads InfluxDB's JSON with serde_json's default float parser (best effort: it may
    // land a unit or two in the last place off), so its figures are the file's within 4 ulp.
    let near = |want: f64, got: &serde_json::Value| got.as_f64().is_some_and(|g| (g - want).abs() <= 4.0 * f64::EPSILON * want.abs());
    assert!(near(get(0, "watts_per_tb"), &w["median"]), "{r}");
    match lines[0].get("watts_per_tb_u95") {
        Some(Value::Float(u)) => assert!(near(get(0, "watts_per_tb") - u, &w["low95"]) && near(get(0, "watts_per_tb") + u, &w["high95"]), "{r}"),
        _ => assert!(w["low95"].is_null() && w["high95"].is_null(), "{r}"),
    }
}
