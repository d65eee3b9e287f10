//! Per-run energy through the real agent binary: power recorded live during a probe (a fixture
//! shunt monitor at a constant 6 W), and an imported shunt trace with known runs and tails aligned
//! with a probe report, sent through the collector into InfluxDB; and scheduled probes in `run`
//! mode, whose runs reach InfluxDB with their energy.

use std::path::Path;
use std::process::Command;
use wattflip_e2e::*;

fn agent(args: &[&str]) -> std::process::Output {
    Command::new(bin("wattflip-agent", "wattflip-agent")).args(args).output().unwrap()
}

fn disk_dir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("wf-energy-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn jsonl(p: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(p).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn live_power_during_a_probe_gives_energy_per_run() {
    let dir = disk_dir();
    let (_sys_tmp, sys) = sysfs_tree(&["ina3221"]);
    let cfg =
        agent_config(dir.path(), &format!("agent_id = \"energy-live\"\n[sources]\nsysfs_root = \"{}\"\n{}", sys.display(), pki().agent_tls("energy-live")));
    let out = dir.path().join("out");
    let o = agent(&[
        "probe",
        "--quick",
        "--size",
        "128MiB",
        "--target",
        dir.path().join("s.dat").to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--config",
        cfg.to_str().unwrap(),
        "--power-zone",
        "ina3221-0-0041/SSD 12V",
        "--power-interval",
        "1ms",
        "--idle",
        "300ms",
        "--tail",
        "300ms",
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{stdout}{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout.contains("Energy per run (source hwmon:ina3221-0-0041/SSD 12V"), "{stdout}");
    let energy = jsonl(&out.join("energy.jsonl"));
    let runs = jsonl(&out.join("runs.jsonl"));
    assert_eq!(energy.len(), 12, "every run has its energy");
    let (mut sum_energy, mut sum_secs) = (0.0, 0.0);
    for e in &energy {
        let run = runs.iter().find(|r| r["run_id"] == e["run_id"]).unwrap();
        let secs = (f(&run["end_ns"]) - f(&run["start_ns"])) / 1e9;
        // A flat 6 W rail: the idle baseline is 6 W, nothing is above it, no background work.
        assert_eq!(f(&e["idle_baseline_w"]), 6.0);
        assert_eq!(f(&e["idle_spread_w"]), 0.0, "a constant rail has no spread");
        assert_eq!(f(&e["energy_above_idle_j"]), 0.0);
        assert_eq!(f(&e["background_energy_j"]), 0.0);
        // "None" needs every tail ≤ one sample period; sleep jitter of a 1 ms grid can make one
        // last two, which is "NS" (not significant, no energy). Both mean: no background work.
        assert!(e["background_class"] == "None" || e["background_class"] == "NS", "{e}");
        // Total = 6 W × the run's duration, to within the sample spacing at each end: the 1 ms
        // grid of a sleeping thread on a shared 2-core VM is late by up to several ms.
        let total = f(&e["energy_j"]);
        assert!((total - 6.0 * secs).abs() <= 6.0 * 0.025, "run {}: {total} J vs 6 W × {secs} s", e["run_id"]);
        sum_energy += total;
        sum_secs += secs;
    }
    assert!((sum_energy / sum_secs - 6.0).abs() < 0.3, "mean power over all runs {} W", sum_energy / sum_secs);
    // The recorded power (the report's timeline): a header, then 6 W readings.
    let power = std::fs::read_to_string(out.join("power.csv")).unwrap();
    let rows: Vec<&str> = power.lines().skip(2).collect();
    assert!(power.starts_with("# hwmon:ina3221-0-0041/SSD 12V (scope rail)\ntime_ns,watts\n"), "{power}");
    assert!(rows.len() > 300 && rows.iter().all(|r| r.ends_with(",6")), "{} rows", rows.len());
    let lp = std::fs::read_to_string(out.join("probe_run.lp")).unwrap();
    assert_eq!(lp.lines().filter(|l| l.contains("energy_j=") && l.contains("energy_source=\"hwmon:ina3221-0-0041/SSD 12V\"")).count(), 12);
}

/// `--pause auto` with live power (docs/uflip-method.md §11.6, docs/energy-method.md §7): each pause comes from
/// the run before it. On the fixture's flat 6 W rail every measured tail is shorter than P_min/1.5, so
/// a measured pause is P_min = 100 ms; where nothing is measured yet it is the quick plan's 10 ms.
#[test]
fn pause_auto_sets_each_pause_from_the_tails_measured_so_far() {
    let dir = disk_dir();
    let (_sys_tmp, sys) = sysfs_tree(&["ina3221"]);
    let cfg =
        agent_config(dir.path(), &format!("agent_id = \"energy-pause\"\n[sources]\nsysfs_root = \"{}\"\n{}", sys.display(), pki().agent_tls("energy-pause")));
    let out = dir.path().join("out");
    let probe = |target: &str| {
        let o = agent(&[
            "probe",
            "--quick",
            "--size",
            "128MiB",
            "--target",
            dir.path().join(target).to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--config",
            cfg.to_str().unwrap(),
            "--power-zone",
            "ina3221-0-0041/SSD 12V",
            "--power-interval",
            "1ms",
            "--idle",
            "300ms",
            "--tail",
            "300ms",
            "--pause",
            "auto",
        ]);
        let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(o.status.success(), "{stdout}{}", String::from_utf8_lossy(&o.stderr));
        let pauses: Vec<String> = jsonl(&out.join("runs.jsonl"))
            .iter()
            .map(|r| {
                let p = |k: &str| r["parameters"][k].as_str().unwrap().to_string();
                format!("{} {} {} {}", r["pattern"].as_str().unwrap(), r["value"], p("pause_before_us"), p("pause_source"))
            })
            .collect();
        (stdout, pauses)
    };
    let reads = [
        "SR 4096.0 0 first",
        "SR 32768.0 100000 read_only",
        "SR 131072.0 100000 read_only",
        "RR 4096.0 100000 read_only",
        "RR 32768.0 100000 read_only",
        "RR 131072.0 100000 read_only",
        "RW 4096.0 100000 read_only",
    ];
    // First probe of s.dat: no stored tails. After RW 4 KiB its own tail is still running and no RW
    // was measured: the fixed pause. After RW 32 KiB the 4 KiB tail is measured, 32 KiB lies above
    // it: the experiment's longest. Likewise for SW.
    let (stdout, got) = probe("s.dat");
    assert!(stdout.contains("--pause auto: no tails of "), "{stdout}");
    let mut want: Vec<&str> = reads.to_vec();
    want.extend([
        "RW 32768.0 10000 fallback",
        "RW 131072.0 100000 experiment",
        "SW 4096.0 100000 experiment",
        "SW 32768.0 10000 fallback",
        "SW 131072.0 100000 experiment",
    ]);
    assert_eq!(got, want);
    assert_eq!(std::fs::read_dir(out.join("tails")).unwrap().count(), 1, "one tails file, for s.dat");
    // Second probe of s.dat: every value's tail is stored.
    let (stdout, got) = probe("s.dat");
    assert!(stdout.contains("--pause auto: per-run pauses from the background tails in "), "{stdout}");
    let mut want: Vec<&str> = reads.to_vec();
    want.extend([
        "RW 32768.0 100000 measured",
        "RW 131072.0 100000 measured",
        "SW 4096.0 100000 measured",
        "SW 32768.0 100000 measured",
        "SW 131072.0 100000 measured",
    ]);
    assert_eq!(got, want);
    // Another target in the same folder never takes s.dat's tails.
    let (_, got) = probe("t.dat");
    let mut want: Vec<&str> = reads.to_vec();
    want.extend([
        "RW 32768.0 10000 fallback",
        "RW 131072.0 100000 experiment",
        "SW 4096.0 100000 experiment",
        "SW 32768.0 10000 fallback",
        "SW 131072.0 100000 experiment",
    ]);
    assert_eq!(got, want);
    assert_eq!(std::fs::read_dir(out.join("tails")).unwrap().count(), 2);
}

#[test]
fn probe_streams_full_rate_power_around_its_runs_into_influx() {
    let influx = Influx::start();
    let collector = Collector::start(&influx.url, "wf_full_rate");
    let dir = disk_dir();
    let (_sys_tmp, sys) = sysfs_tree(&["ina3221"]);
    let cfg = agent_config(
        dir.path(),
        &format!("agent_id = \"energy-full\"\n[sources]\nsysfs_root = \"{}\"\nrapl = false\n{}", sys.display(), pki().agent_tls("energy-full")),
    );
    let out = dir.path().join("out");
    let zone = "ina3221-0-0041/SSD 12V";
    let o = agent(&[
        "probe",
        "--quick",
        "--size",
        "128MiB",
        "--target",
        dir.path().join("s.dat").to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--config",
        cfg.to_str().unwrap(),
        "--collector",
        &collector.url,
        "--power-zone",
        zone,
        "--power-interval",
        "2ms",
        "--idle",
        "300ms",
        "--tail",
        "300ms",
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{stdout}{}", String::from_utf8_lossy(&o.stderr));
    // "sent N full-rate power samples (Z zones) in B batches"
    let line = stdout.lines().find(|l| l.starts_with("sent ") && l.contains("full-rate")).unwrap_or_else(|| panic!("{stdout}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let sent: usize = words[1].parse().unwrap();
    let batches: usize = words[words.len() - 2].parse().unwrap();
    assert_eq!(batches, sent.div_ceil(4096), "at most 4096 samples per batch: {line}");

    // Every recorded reading is one point tagged rate=full; the attributed zone's are exactly the
    // rows of the local power.csv.
    let csv_rows = std::fs::read_to_string(out.join("power.csv")).unwrap().lines().skip(2).count();
    let per_zone: std::collections::BTreeMap<String, usize> = influx
        .series("wf_full_rate", "SELECT count(watts) FROM power WHERE host = 'energy-full' AND rate = 'full' GROUP BY zone")
        .into_iter()
        .map(|(tags, rows)| (tags["zone"].as_str().unwrap().to_string(), rows[0][1].as_u64().unwrap() as usize))
        .collect();
    assert_eq!(per_zone.get(zone).copied(), Some(csv_rows), "{per_zone:?}");
    assert_eq!(per_zone.values().sum::<usize>(), sent, "{per_zone:?}");
    assert!(csv_rows > 300, "{csv_rows} readings");
    // The flat 6 W rail, as read; watts only (the aggregate stream carries joules).
    let mm = influx.rows("wf_full_rate", &format!("SELECT min(watts), max(watts) FROM power WHERE rate = 'full' AND zone = '{zone}'"));
    assert_eq!((f(&mm[0][1]), f(&mm[0][2])), (6.0, 6.0));
    assert!(influx.rows("wf_full_rate", "SELECT count(joules) FROM power WHERE rate = 'full'").is_empty());

    // The recording spans the idle window before the first run to the tail after the last.
    let runs = jsonl(&out.join("runs.jsonl"));
    let first_start = runs.iter().map(|r| r["start_ns"].as_i64().unwrap()).min().unwrap();
    let last_end = runs.iter().map(|r| r["end_ns"].as_i64().unwrap()).max().unwrap();
    let q = |order: &str| {
        influx.rows("wf_full_rate", &format!("SELECT watts FROM power WHERE rate = 'full' AND zone = '{zone}' ORDER BY time {order} LIMIT 1"))[0][0]
            .as_i64()
            .unwrap()
    };
    let (first_t, last_t) = (q("ASC"), q("DESC"));
    assert!(first_t <= first_start - 300_000_000, "first reading {first_t}, first run {first_start}");
    assert!(last_t >= last_end + 290_000_000, "last reading {last_t}, last run ends {last_end}");

    // The idle characterisation of the target, its own measurement: one point at the start of the
    // 300 ms idle window before the first run, over exactly the readings streamed for that window.
    let v = influx.query("wf_full_rate", "SELECT * FROM idle_profile WHERE host = 'energy-full'");
    let series = &v["results"][0]["series"][0];
    let cols: Vec<&str> = series["columns"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    let rows = series["values"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{v}");
    let get = |name: &str| &rows[0][cols.iter().position(|c| *c == name).unwrap_or_else(|| panic!("no column {name}: {cols:?}"))];
    let t = get("time").as_i64().unwrap();
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let probe_start = report["started_ns"].as_i64().unwrap();
    // The window is taken after the target is prepared and settled (issue 37): it ends at most a
    // few ms before the probe's start (the time to open its first run), never over the probe.
    // Its length is the one slept (`--idle 300ms` and the scheduler's overshoot), as measured.
    let window_ns = (f(get("window_s")) * 1e9).round() as i64;
    assert!((300_000_000..350_000_000).contains(&window_ns), "idle window {window_ns} ns for --idle 300ms");
    let end = t + window_ns;
    let gap = probe_start - end;
    assert!((0..50_000_000).contains(&gap), "the idle window ends {gap} ns before the probe starts");
    assert_eq!(get("device"), "file:s.dat");
    assert_eq!(get("model"), "file");
    assert_eq!(get("energy_source"), &format!("hwmon:{zone}"));
    assert_eq!(get("probe_id"), &probe_start.to_string());
    assert_eq!(f(get("median_w")), 6.0);
    assert_eq!(f(get("spread_w")), 0.0);
    let in_window =
        influx.rows("wf_full_rate", &format!("SELECT count(watts) FROM power WHERE rate = 'full' AND zone = '{zone}' AND time >= {t} AND time < {end}"));
    assert_eq!(get("samples").as_u64(), in_window[0][1].as_u64(), "samples of the idle window");
    // A flat rail has no periodic idle activity: no such fields, never zeros.
    for absent in ["activity_period_s", "activity_correlation", "activity_energy_j"] {
        assert!(!cols.contains(&absent) || get(absent).is_null(), "{absent}: {v}");
    }
}

#[test]
fn scheduled_probes_in_run_mode_carry_energy_per_run_into_influx() {
    let influx = Influx::start();
    let collector = Collector::start(&influx.url, "wf_sched_energy");
    let dir = disk_dir();
    let (_sys_tmp, sys) = sysfs_tree(&["ina3221"]);
    let target = dir.path().join("sched.dat");
    let cfg = agent_config(
        dir.path(),
        &format!(
            "agent_id = \"sched-energy\"\n[collector]\nurl = \"{}\"\n[sampling]\ninterval = \"100ms\"\n\
             [sources]\nsysfs_root = \"{}\"\nrapl = false\n\
             [[probes]]\nname = \"every-second\"\nschedule = \"* * * * * *\"\ntarget = \"{}\"\nsize = \"128MiB\"\nquick = true\n\
             power_interval = \"1ms\"\nidle = \"300ms\"\ntail = \"300ms\"\npower_zone = \"ina3221-0-0041/SSD 12V\"\n{}",
            collector.url,
            sys.display(),
            target.display(),
            pki().agent_tls("sched-energy")
        ),
    );
    let mut child = spawn_agent(dir.path(), &["run", "--config", cfg.to_str().unwrap(), "--samples", "20"]);
    let status = wait_child(&mut child, std::time::Duration::from_secs(120), dir.path());
    assert!(status.success(), "{}", std::fs::read_to_string(dir.path().join("agent.stderr")).unwrap());
    let rows = influx.rows(
        "wf_sched_energy",
        "SELECT run_id, end_ns, energy_j, energy_above_idle_j, background_energy_j, idle_baseline_w, energy_source \
         FROM probe_run WHERE host = 'sched-energy'",
    );
    assert!(!rows.is_empty(), "the schedule fired at least once in 2 s");
    let mut per_probe: std::collections::BTreeMap<String, usize> = Default::default();
    for r in &rows {
        let run_id = r[1].as_str().unwrap();
        *per_probe.entry(run_id.split('-').next().unwrap().to_string()).or_default() += 1;
        // The fixture's 6 W rail, recorded by the same path as `probe`: every run has its energy.
        assert_eq!(r[7].as_str(), Some("hwmon:ina3221-0-0041/SSD 12V"), "{r:?}");
        assert_eq!(f(&r[6]), 6.0, "idle baseline of {run_id}");
        assert_eq!(f(&r[4]), 0.0, "nothing above a flat rail in {run_id}");
        assert_eq!(f(&r[5]), 0.0, "no background work on a flat rail in {run_id}");
        // Total = 6 W × the run's duration (first IO to end), within the live test's tolerance.
        let secs = (f(&r[2]) - f(&r[0])) / 1e9;
        let total = f(&r[3]);
        assert!((total - 6.0 * secs).abs() <= 6.0 * 0.025, "run {run_id}: {total} J vs 6 W × {secs} s");
    }
    assert!(per_probe.values().all(|&n| n == 12), "every scheduled quick probe delivered its 12 runs: {per_probe:?}");
    // Each scheduled probe also streamed its full-rate power, from before its first run to after
    // its last (the same `convert::batches` as `probe --collector`).
    for probe in per_probe.keys() {
        let mine: Vec<&Vec<serde_json::Value>> = rows.iter().filter(|r| r[1].as_str().unwrap().starts_with(&format!("{probe}-"))).collect();
        let first_start = mine.iter().map(|r| r[0].as_i64().unwrap()).min().unwrap();
        let last_end = mine.iter().map(|r| f(&r[2]) as i64).max().unwrap();
        let span = influx.rows(
            "wf_sched_energy",
            &format!(
                "SELECT count(watts), min(watts), max(watts) FROM power WHERE host = 'sched-energy' AND rate = 'full' \
                 AND zone = 'ina3221-0-0041/SSD 12V' AND time >= {} AND time <= {}",
                first_start - 300_000_000,
                last_end + 290_000_000
            ),
        );
        let before = influx.rows(
            "wf_sched_energy",
            &format!(
                "SELECT count(watts) FROM power WHERE host = 'sched-energy' AND rate = 'full' AND time >= {} AND time < {first_start}",
                first_start - 300_000_000
            ),
        );
        assert!(!span.is_empty() && span[0][1].as_u64().unwrap() > 0, "probe {probe}: no full-rate power");
        assert_eq!((f(&span[0][2]), f(&span[0][3])), (6.0, 6.0), "probe {probe}");
        assert!(!before.is_empty(), "probe {probe}: no full-rate power in the idle window before its first run");
    }
}

/// Power of the paper's shunt circuit: P = (V/R)(U − V). Inverse for the test's trace.
fn shunt_volts(p: f64, r: f64, u: f64) -> f64 {
    (u - (u * u - 4.0 * p * r).sqrt()) / 2.0
}

#[test]
fn imported_shunt_trace_energy_boundaries_and_tails_reach_influx() {
    let dir = disk_dir();
    let out = dir.path().join("out");
    // A real probe report, whose runs are then laid out 2 s apart so the trace can show them.
    let o =
        agent(&["probe", "--quick", "--no-power", "--size", "128MiB", "--target", dir.path().join("s.dat").to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let t0 = recent_origin_ns();
    let (run_len, spacing, tail) = (500_000_000i64, 2_000_000_000i64, 300_000_000i64);
    let runs = report["runs"].as_array_mut().unwrap();
    let mut windows = Vec::new();
    for (k, r) in runs.iter_mut().enumerate() {
        let start = t0 + 1_000_000_000 + k as i64 * spacing;
        r["start_ns"] = start.into();
        r["end_ns"] = (start + run_len).into();
        windows.push((start, start + run_len, r["pattern"] == "SW"));
    }
    report["started_ns"] = (t0 + 1_000_000_000).into();
    std::fs::write(out.join("report.json"), serde_json::to_vec(&report).unwrap()).unwrap();
    // 1 kHz trace: 1 W idle, 3 W during each run, and after every SW run 2 W for 300 ms.
    let (r, u) = (0.1, 12.0);
    let total_ms = 1_000 + 12 * 2_000 + 1_000;
    let mut csv = String::from("time_s,v_shunt\n");
    for i in 0..total_ms {
        let t = t0 + i as i64 * 1_000_000;
        let p = windows
            .iter()
            .find_map(|&(s, e, sw)| {
                if t >= s && t < e {
                    Some(3.0)
                } else if sw && t >= e && t < e + tail {
                    Some(2.0)
                } else {
                    None
                }
            })
            .unwrap_or(1.0);
        csv.push_str(&format!("{:.3},{:.12}\n", i as f64 / 1000.0, shunt_volts(p, r, u)));
    }
    let trace = dir.path().join("scope.csv");
    std::fs::write(&trace, csv).unwrap();

    let influx = Influx::start();
    let collector = Collector::start(&influx.url, "wf_energy");
    let cfg = agent_config(dir.path(), &format!("agent_id = \"energy-trace\"\n{}", pki().agent_tls("energy-trace")));
    let o = agent(&[
        "trace",
        "import",
        trace.to_str().unwrap(),
        "--in",
        out.to_str().unwrap(),
        "--shunt-ohms",
        "0.1",
        "--supply-volts",
        "12",
        "--time-origin-ns",
        &t0.to_string(),
        "--datasheet-w",
        "6",
        "--collector",
        &collector.url,
        "--config",
        cfg.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{stdout}{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout.contains("26000 samples"), "{stdout}");
    let energy = jsonl(&out.join("energy.jsonl"));
    assert_eq!(energy.len(), 12);
    for e in &energy {
        let sw = e["experiment"] == "granularity/SW";
        // 3 W for 0.5 s: 1.5 J in all, 1.0 J above the 1 W idle; a run's energy runs until power is
        // back to idle, so an SW run also holds its tail, 2 W for 0.3 s (0.6 J, 0.3 J above idle).
        // Tolerance: one 1 ms sample at each boundary.
        let (total, above) = if sw { (2.1, 1.3) } else { (1.5, 1.0) };
        assert!((f(&e["energy_j"]) - total).abs() <= 0.0031, "{e}");
        assert!((f(&e["energy_above_idle_j"]) - above).abs() <= 0.0021, "{e}");
        assert!((f(&e["idle_baseline_w"]) - 1.0).abs() < 1e-6, "{e}");
        // "Datasheet watts × time": 6 W over the run's 0.5 s of IO against the measured energy.
        assert!((f(&e["datasheet_ratio"]) - 3.0 / total).abs() < 0.01, "{e}");
        // Boundaries found in the trace: the first 3 W sample is the run's first IO (ms grid);
        // the end is the end of the last sample above the idle band, after an SW run's tail.
        let run = report["runs"].as_array().unwrap().iter().find(|r| r["run_id"] == e["run_id"]).unwrap();
        let start = run["start_ns"].as_i64().unwrap();
        assert_eq!(e["trace_start_ns"].as_i64(), Some(start), "{e}");
        assert_eq!(e["trace_end_ns"].as_i64(), Some(start + run_len + if sw { tail } else { 0 }), "{e}");
        assert_eq!(e["start_found"], "Trace", "{e}");
        assert_eq!(e["end_found"], "ReturnedToIdle", "{e}");
        // A flat 1 W idle: no spread beyond the 12-digit rounding of the CSV's shunt voltages.
        assert!(f(&e["idle_spread_w"]).abs() < 1e-9, "{e}");
        if sw {
            // The tail: 1 W above idle for 300 ms after the last IO.
            assert!((f(&e["background_s"]) - 0.3).abs() <= 0.0011, "{e}");
            assert!((f(&e["background_energy_j"]) - 0.3).abs() <= 0.0011, "{e}");
            assert_eq!(e["background_class"], "S", "a short, constant tail is class S (Table 2)");
        } else {
            assert!(f(&e["background_s"]) <= 0.001, "{e}");
            assert_eq!(e["background_class"], "None", "{e}");
        }
    }
    // The planner sets each pause from the tail of the run before it (docs/uflip-method.md §11.6, energy
    // paper): P_min = 100 ms after a read run and after a write run whose tail is short (RW,
    // none here), 1.5 × the imported 0.3 s tail after an SW run of the same value; nothing
    // before the first run.
    let o = agent(&[
        "probe",
        "--quick",
        "--no-power",
        "--pause",
        "auto",
        "--size",
        "128MiB",
        "--target",
        dir.path().join("s.dat").to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{stdout}{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout.contains("--pause auto: per-run pauses from the background tails in "), "{stdout}");
    let pauses: Vec<(String, String, String)> = jsonl(&out.join("runs.jsonl"))
        .iter()
        .map(|r| {
            let p = |k: &str| r["parameters"][k].as_str().unwrap().to_string();
            (r["pattern"].as_str().unwrap().to_string(), p("pause_before_us"), p("pause_source"))
        })
        .collect();
    let want: Vec<(String, String, String)> = [
        ("SR", "0", "first"),
        ("SR", "100000", "read_only"),
        ("SR", "100000", "read_only"),
        ("RR", "100000", "read_only"),
        ("RR", "100000", "read_only"),
        ("RR", "100000", "read_only"),
        ("RW", "100000", "read_only"),
        ("RW", "100000", "measured"),
        ("RW", "100000", "measured"),
        ("SW", "100000", "measured"),
        ("SW", "450000", "measured"),
        ("SW", "450000", "measured"),
    ]
    .iter()
    .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
    .collect();
    assert_eq!(pauses, want);

    // The same records reach InfluxDB as probe_run fields.
    let rows = influx.rows(
        "wf_energy",
        "SELECT energy_j, background_s, background_class, energy_source, energy_start_ns, energy_end_ns, \
         energy_start_found, energy_end_found, idle_spread_w FROM probe_run WHERE host = 'energy-trace' AND pattern = 'SW'",
    );
    assert_eq!(rows.len(), 3);
    for row in rows {
        assert!((f(&row[1]) - 2.1).abs() <= 0.0031);
        assert!((f(&row[2]) - 0.3).abs() <= 0.0011);
        assert_eq!(row[3], "S");
        assert_eq!(row[4], "trace:scope.csv");
        // The point's time is the run's first IO; the trace found it there, and the end after the tail.
        let start = row[0].as_i64().unwrap();
        assert_eq!(row[5].as_i64(), Some(start), "{row:?}");
        assert_eq!(row[6].as_i64(), Some(start + run_len + tail), "{row:?}");
        assert_eq!((row[7].as_str(), row[8].as_str()), (Some("Trace"), Some("ReturnedToIdle")), "{row:?}");
        assert!(f(&row[9]).abs() < 1e-9, "{row:?}");
    }
}

/// RAPL sees the CPU's side of a probe, never the drive (docs/uflip-method.md §13): on a host with RAPL only,
/// a probe reports "drive energy not measurable here" with the reason and what would make it
/// measurable, and its runs carry no energy fields; the operator can still name a CPU zone.
#[test]
fn rapl_only_host_reports_drive_energy_as_not_measurable() {
    let influx = Influx::start();
    let collector = Collector::start(&influx.url, "wf_rapl_only");
    let dir = disk_dir();
    let (_sys_tmp, sys) = sysfs_tree(&["rapl-only"]);
    let cfg = agent_config(dir.path(), &format!("agent_id = \"rapl-only\"\n[sources]\nsysfs_root = \"{}\"\n{}", sys.display(), pki().agent_tls("rapl-only")));
    let target = dir.path().join("s.dat");
    let probe = |out: &Path, extra: &[&str]| {
        let mut args = vec![
            "probe",
            "--quick",
            "--size",
            "128MiB",
            "--target",
            target.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--config",
            cfg.to_str().unwrap(),
            "--collector",
            &collector.url,
            "--power-interval",
            "5ms",
            "--idle",
            "200ms",
            "--tail",
            "200ms",
        ];
        args.extend_from_slice(extra);
        let o = agent(&args);
        let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(o.status.success(), "{stdout}{}", String::from_utf8_lossy(&o.stderr));
        stdout
    };
    let note = "drive energy not measurable here: the only power recorded is CPU-side (rapl:package-0 (package), \
                rapl:package-0/core (core), rapl:package-0/dram (dram)), which does not see the drive (docs/uflip-method.md §13). \
                A shunt monitor on the drive's supply (INA226/INA3221 in hwmon), a PMBus PSU, IPMI DCMI ([sources] ipmi = true; \
                whole system, long runs only) or an oscilloscope trace (`wattflip-agent trace import`) would make it measurable; \
                --power-zone / power_zone attributes a CPU zone's energy to the probe explicitly";

    let out = dir.path().join("out");
    let stdout = probe(&out, &[]);
    assert!(stdout.contains(&format!("\nNo per-run energy: {note}\n")), "{stdout}");
    assert!(!stdout.contains("Energy per run"), "{stdout}");
    assert!(!out.join("energy.jsonl").exists(), "no energy record at all, not zeros");
    let lp = std::fs::read_to_string(out.join("probe_run.lp")).unwrap();
    assert_eq!(lp.lines().filter(|l| l.starts_with("probe_run,")).count(), 12);
    assert!(!lp.contains("energy_j=") && !lp.contains("energy_source=") && !lp.contains("idle_profile"), "{lp}");
    // In InfluxDB: the 12 runs without any energy field, and one event saying why.
    let runs = influx.rows("wf_rapl_only", "SELECT count(mean_us) FROM probe_run WHERE host = 'rapl-only'");
    assert_eq!(runs[0][1].as_u64(), Some(12));
    assert!(influx.rows("wf_rapl_only", "SELECT count(energy_j) FROM probe_run").is_empty());
    assert!(influx.rows("wf_rapl_only", "SELECT count(idle_baseline_w) FROM probe_run").is_empty());
    assert!(influx.rows("wf_rapl_only", "SELECT count(median_w) FROM idle_profile").is_empty());
    let events = influx.rows("wf_rapl_only", "SELECT message, device, severity FROM event WHERE host = 'rapl-only' AND kind = 'energy_not_measurable'");
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0][1].as_str(), Some(note));
    assert_eq!((events[0][2].as_str(), events[0][3].as_str()), (Some("file:s.dat"), Some("info")));
    // The CPU-side power itself is still streamed, under its own RAPL scopes.
    let scopes: Vec<String> = influx
        .series("wf_rapl_only", "SELECT count(watts) FROM power WHERE host = 'rapl-only' AND rate = 'full' GROUP BY scope")
        .into_iter()
        .map(|(tags, _)| tags["scope"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(scopes, ["core", "dram", "package"]);

    // The operator's explicit choice: the package's energy, labelled as such.
    let out2 = dir.path().join("out-package");
    let stdout = probe(&out2, &["--power-zone", "package-0"]);
    assert!(stdout.contains("Energy per run (source rapl:package-0;"), "{stdout}");
    let energy = jsonl(&out2.join("energy.jsonl"));
    assert_eq!(energy.len(), 12, "{stdout}");
    assert!(energy.iter().all(|e| e["source"] == "rapl:package-0"), "{energy:?}");
    let events = influx.rows("wf_rapl_only", "SELECT count(message) FROM event WHERE kind = 'energy_not_measurable'");
    assert_eq!(events[0][1].as_u64(), Some(1), "no new event for an explicit choice");
}
