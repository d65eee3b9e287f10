//! The 1-minute recording rules of the Prometheus path (`deploy/prometheus/wattflip-rollups.rules.yml`,
//! issue 30 item 5) against a real Prometheus: a known fleet streamed through the real collector
//! (InfluxDB with its own `rollup_1m`, and the OTLP sink), the shipped rules loaded with only
//! their group `interval` cut from 1m to 5s (so several evaluations fall in each test minute;
//! `query_offset: 1m` kept), then every recorded window that holds exactly one calendar minute of
//! points is compared with the minute's values by hand and with InfluxDB's rollup of the same
//! minute. Also: a host whose points arrive after their windows were evaluated is missing from the
//! recorded series (InfluxDB's rollups have it), until `promtool tsdb create-blocks-from rules`
//! backfills it; a collector restart (a counter drop) records the restarted series' joules; and
//! `promtool check rules` accepts the shipped file. A new rule gets its expectation in
//! `check_on_time` (or a test of its own), computed from [`watts`] by hand.
//!
//! Points are 4 s apart from 2 s into each minute (the last at 46 s), so a window (T − 1m, T]
//! holds exactly minute m's points for T in [m + 46 s, m + 62 s): three or four evaluations.
//! Values are quarters of a watt, so every sum is exact in any order.

use crate::otlp_fleet::{run_hello, Zone, BUCKETS};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio_stream::StreamExt as _;
use wattflip_e2e::prometheus::{promtool_path, Prometheus};
use wattflip_e2e::*;
use wattflip_proto::v1::{self, agent_message::Kind, AgentMessage};

const S: i64 = 1_000_000_000;
const MINUTE_NS: i64 = 60 * S;
const PER_MINUTE: i64 = 12;
const STEP_NS: i64 = 4 * S;
const MINUTES: i64 = 2;
const DB: &str = "wf_otlp_rollups";
/// Indices in [`fleet`]: the hosts streamed on time come first.
const ON_TIME: usize = 2;
const LATE: usize = 2;
const RESTART: usize = 3;

fn zone(source: &'static str, zone: &'static str, scope: &'static str, counter: bool) -> Zone {
    Zone { source, zone, scope, counter, watts: [0.0; BUCKETS] }
}

/// (host, rack, zones, the indices of the zones of its tier, sends temperatures).
type Host = (&'static str, &'static str, Vec<Zone>, Vec<usize>, bool);

/// `pr-pkg`: package + DRAM counters (its tier, so it has host energy) and a drive temperature;
/// `pr-wall`: a wall meter (its tier: host power, no host energy) over a package counter, in
/// the same rack; `pr-late` (rack `rb`): one package counter, streamed only after its minute's windows were evaluated;
/// `pr-restart`: one package counter, its minutes through two collectors one after the other.
fn fleet() -> Vec<Host> {
    vec![
        ("pr-pkg", "ra", vec![zone("rapl", "package-0", "package", true), zone("rapl", "package-0/dram", "dram", true)], vec![0, 1], true),
        ("pr-wall", "ra", vec![zone("ipmi", "dcmi", "wall", false), zone("rapl", "package-0", "package", true)], vec![0], false),
        ("pr-late", "rb", vec![zone("rapl", "package-0", "package", true)], vec![0], false),
        ("pr-restart", "ra", vec![zone("rapl", "package-0", "package", true)], vec![0], false),
    ]
}

/// Watts of zone `z` of host `h` at point `i` of minute `m` (0 or 1): a permutation of 0..12
/// steps over the minute, so mean, max and min differ and are exact; minute 1's range lies
/// strictly inside minute 0's (steps of 0.5 W from +0, then of 0.25 W from +0.5 W), so a window
/// reaching into the other minute changes its max or min as well as its mean.
fn watts(h: i64, z: i64, m: i64, i: i64) -> f64 {
    40.0 * (z + 1) as f64 + 100.0 * h as f64 + 0.5 * m as f64 + 0.25 * (2 - m) as f64 * ((i * 7) % 12) as f64
}

/// The drive's temperature, with minute 1's range inside minute 0's as for [`watts`].
fn celsius(m: i64, i: i64) -> f64 {
    40.0 + 0.5 * m as f64 + 0.125 * (2 - m) as f64 * ((i + 3 * m) % 9) as f64
}

fn point_ns(t0: i64, m: i64, i: i64) -> i64 {
    t0 + m * MINUTE_NS + 2 * S + i * STEP_NS
}

/// One agent window: every zone's point `i` of minute `m` (counters with joules over 4 s).
fn step(host: &Host, h: i64, t0: i64, m: i64, i: i64, seq: u64) -> AgentMessage {
    let t = point_ns(t0, m, i);
    let power = host
        .2
        .iter()
        .enumerate()
        .map(|(z, zn)| {
            let w = watts(h, z as i64, m, i);
            v1::PowerSample {
                time_ns: t,
                source: zn.source.into(),
                zone: zn.zone.into(),
                scope: zn.scope.into(),
                method: v1::Method::Measured as i32,
                watts: Some(w),
                joules: zn.counter.then_some(w * 4.0),
                interval_ns: if zn.counter { STEP_NS } else { 0 },
                ..Default::default()
            }
        })
        .collect();
    let temperature = if host.4 {
        vec![v1::TemperatureSample { time_ns: t, source: "nvme_cli".into(), device: "nvme0".into(), sensor: "Composite".into(), celsius: celsius(m, i) }]
    } else {
        vec![]
    };
    AgentMessage { kind: Some(Kind::Batch(v1::Batch { agent_id: host.0.into(), sequence: seq, power, temperature, ..Default::default() })) }
}

/// Host `h`'s `minutes` through the collector, each window acknowledged (stored) before the
/// next (sequence numbers go on across calls, as an agent's do).
fn stream(url: &str, h: usize, t0: i64, minutes: std::ops::Range<i64>) {
    let host = &fleet()[h];
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let identity = pki().issue(&format!("otlp-rollups-{}", host.0), &[host.0], None);
        let channel = pki().channel(url, Some(identity)).await.expect("connect to the collector");
        let mut client = v1::ingest_client::IngestClient::new(channel);
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        tx.send(run_hello(host.0, host.1, &host.2, host.4, t0)).await.unwrap();
        let mut acks = client.stream(tokio_stream::wrappers::ReceiverStream::new(rx)).await.expect("open the run stream").into_inner();
        for m in minutes {
            for i in 0..PER_MINUTE {
                let seq = (m * PER_MINUTE + i + 1) as u64;
                tx.send(step(host, h as i64, t0, m, i, seq)).await.unwrap();
                let ack = tokio::time::timeout(Duration::from_secs(20), acks.next()).await.expect("ack within 20 s");
                assert_eq!(ack.expect("a reply").expect("no error").durable_sequence, seq, "{} minute {m} point {i}", host.0);
            }
        }
    });
}

/// avg, max, min, count, sum of a minute's values.
fn aggregates(v: &[f64]) -> [f64; 5] {
    let sum: f64 = v.iter().sum();
    [sum / v.len() as f64, v.iter().copied().fold(f64::MIN, f64::max), v.iter().copied().fold(f64::MAX, f64::min), v.len() as f64, sum]
}

const OPS: [&str; 5] = ["avg_over_time1m", "max_over_time1m", "min_over_time1m", "count_over_time1m", "sum_over_time1m"];

/// The shipped rules with the group's evaluation interval cut to 5 s (nothing else changed).
fn test_rules() -> String {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/prometheus/wattflip-rollups.rules.yml");
    let rules = std::fs::read_to_string(&file).unwrap();
    assert_eq!(rules.matches("\n    interval: 1m\n").count(), 1, "{}: one group evaluated every minute", file.display());
    assert_eq!(rules.matches("\n    query_offset: 1m\n").count(), 1, "{}: a minute's grace for points on their way", file.display());
    rules.replace("\n    interval: 1m\n", "\n    interval: 5s\n")
}

/// The recorded values of `name{sel}` stamped in minute `m`'s exact windows, [m + 46 s, m + 62 s).
fn recorded(prom: &Prometheus, name: &str, sel: &str, t0: i64, m: i64, t_end: f64) -> Vec<f64> {
    let got = prom.samples(&format!("{name}{{{sel}}}"), "15m", t_end);
    assert!(got.len() <= 1, "{name}{{{sel}}}: one series, got {got:?}");
    let from = (t0 + m * MINUTE_NS + 46 * S) as f64 / 1e9;
    let to = (t0 + m * MINUTE_NS + 62 * S) as f64 / 1e9;
    got.into_iter().flat_map(|s| s.1).filter(|(t, _)| *t >= from && *t < to).map(|(_, v)| v).collect()
}

/// Every exact window of minute `m` records `want` (three or four evaluations at 5 s; at least
/// two: on a loaded machine Prometheus may start an evaluation late enough that only two fall in
/// the 16 s span, as one CI run of stop 53 saw), or none.
fn expect(prom: &Prometheus, name: &str, sel: &str, t0: i64, m: i64, t_end: f64, want: Option<f64>) {
    let got = recorded(prom, name, sel, t0, m, t_end);
    match want {
        Some(w) => assert!(got.len() >= 2 && got.iter().all(|v| *v == w), "{name}{{{sel}}} minute {m}: want {w} in 2-4 windows, got {got:?}"),
        None => assert_eq!(got, Vec::<f64>::new(), "{name}{{{sel}}} minute {m}: absent (no earlier counter sample)"),
    }
}

/// InfluxDB's `rollup_1m` rows of `measurement` per (host, zone or sensor) tag value.
fn influx_rollups(influx: &Influx, measurement: &str, fields: &str, by: &str, t0: i64) -> BTreeMap<(String, String), Vec<Vec<Value>>> {
    let q =
        format!("SELECT {fields} FROM \"rollup_1m\".\"{measurement}\" WHERE time >= {t0} AND time < {} GROUP BY \"host\", \"{by}\"", t0 + MINUTES * MINUTE_NS);
    influx.series(DB, &q).into_iter().map(|(tags, rows)| ((tags["host"].as_str().unwrap().to_string(), tags[by].as_str().unwrap().to_string()), rows)).collect()
}

/// Every zone, host and sensor of the on-time hosts: the recorded windows by hand and against
/// InfluxDB's rollup of the same minute.
fn check_on_time(prom: &Prometheus, influx: &Influx, t0: i64, t_end: f64) {
    let power = influx_rollups(influx, "power", "\"watts\", \"peak_watts\", \"low_watts\", \"count\", \"watts_sum\", \"joules\"", "zone", t0);
    for (h, host) in fleet().iter().enumerate().take(ON_TIME) {
        let (name, hi) = (host.0, h as i64);
        let mut tier_rows: Vec<Vec<Vec<Value>>> = vec![];
        for (z, zn) in host.2.iter().enumerate() {
            let rows = &power[&(name.to_string(), zn.zone.to_string())];
            assert_eq!(rows.len(), MINUTES as usize, "{name} {}: InfluxDB minutes", zn.zone);
            let sel = format!("instance=\"{name}\",hw_id=\"{}:{}\"", zn.source, zn.zone);
            for m in 0..MINUTES {
                let w: Vec<f64> = (0..PER_MINUTE).map(|i| watts(hi, z as i64, m, i)).collect();
                for (k, (op, want)) in OPS.iter().zip(aggregates(&w)).enumerate() {
                    assert_eq!(rows[m as usize][k + 1].as_f64(), Some(want), "{name} {} minute {m}: InfluxDB {op}", zn.zone);
                    expect(prom, &format!("instance_hw_id:hw_power_watts:{op}"), &sel, t0, m, t_end, Some(want));
                }
                // The first minute of a counter has no earlier sample: absent, as the rules say.
                let joules = (zn.counter && m > 0).then(|| w.iter().map(|x| x * 4.0).sum::<f64>());
                if zn.counter {
                    assert_eq!(rows[m as usize][6].as_f64(), Some(w.iter().map(|x| x * 4.0).sum::<f64>()), "{name} {} minute {m}: InfluxDB joules", zn.zone);
                }
                expect(prom, "instance_hw_id:hw_energy_joules:increase1m", &sel, t0, m, t_end, joules);
            }
            if host.3.contains(&z) {
                tier_rows.push(rows.clone());
            }
        }
        check_host(prom, host, hi, &tier_rows, t0, t_end);
    }
    // Rack `ra`: the on-time hosts' minute means summed.
    for m in 0..MINUTES {
        let host_mean = |(h, host): (usize, &Host)| {
            (0..PER_MINUTE).map(|i| host.3.iter().map(|z| watts(h as i64, *z as i64, m, i)).sum::<f64>()).sum::<f64>() / PER_MINUTE as f64
        };
        let want: f64 = fleet().iter().enumerate().take(ON_TIME).map(host_mean).sum();
        expect(prom, "rack:hw_host_power_watts:avg_over_time1m", "rack=\"ra\"", t0, m, t_end, Some(want));
    }
    check_temperatures(prom, influx, t0, t_end);
}

/// The host series: its tier's zones summed per window, by hand and from InfluxDB's zone rollups.
fn check_host(prom: &Prometheus, host: &Host, h: i64, tier_rows: &[Vec<Vec<Value>>], t0: i64, t_end: f64) {
    let sel = format!("instance=\"{}\"", host.0);
    let counters = host.3.iter().all(|z| host.2[*z].counter);
    for m in 0..MINUTES {
        let per_step: Vec<f64> = (0..PER_MINUTE).map(|i| host.3.iter().map(|z| watts(h, *z as i64, m, i)).sum()).collect();
        let want = aggregates(&per_step);
        for (op, w) in OPS.iter().zip(want) {
            expect(prom, &format!("instance:hw_host_power_watts:{op}"), &sel, t0, m, t_end, Some(w));
        }
        // The host's minute mean is the sum of its tier zones' minute means (InfluxDB's `watts`).
        let influx_mean: f64 = tier_rows.iter().map(|rows| rows[m as usize][1].as_f64().unwrap()).sum();
        assert_eq!(influx_mean, want[0], "{} minute {m}: host mean vs InfluxDB tier means", host.0);
        let joules = (counters && m > 0).then(|| per_step.iter().map(|w| w * 4.0).sum::<f64>());
        if let Some(j) = joules {
            let influx_j: f64 = tier_rows.iter().map(|rows| rows[m as usize][6].as_f64().unwrap()).sum();
            assert_eq!(influx_j, j, "{} minute {m}: host energy vs InfluxDB tier joules", host.0);
        }
        expect(prom, "instance:hw_host_energy_joules:increase1m", &sel, t0, m, t_end, joules);
    }
}

fn check_temperatures(prom: &Prometheus, influx: &Influx, t0: i64, t_end: f64) {
    let temps = influx_rollups(influx, "temperature", "\"celsius\", \"peak_celsius\"", "sensor", t0);
    let rows = &temps[&("pr-pkg".to_string(), "Composite".to_string())];
    let sel = "instance=\"pr-pkg\",hw_id=\"nvme_cli:nvme0/Composite\"";
    for m in 0..MINUTES {
        let c: Vec<f64> = (0..PER_MINUTE).map(|i| celsius(m, i)).collect();
        let [avg, max, ..] = aggregates(&c);
        assert_eq!((rows[m as usize][1].as_f64(), rows[m as usize][2].as_f64()), (Some(avg), Some(max)), "InfluxDB temperature minute {m}");
        expect(prom, "instance_hw_id:hw_temperature_celsius:avg_over_time1m", sel, t0, m, t_end, Some(avg));
        expect(prom, "instance_hw_id:hw_temperature_celsius:max_over_time1m", sel, t0, m, t_end, Some(max));
    }
}

/// The collector's config: InfluxDB rollups (7 d raw, 1 s settle) and the OTLP sink.
/// The collector of these tests. Minute 1 is streamed at once, up to 84 s ahead of the clock (its
/// windows must be evaluated after the stream): `limits.max_time_ahead` (60 s by default) is
/// raised, else its last points are refused as from the future, as many as the minute's phase
/// puts beyond 60 s (the tests then failed by the time of day they started at).
fn collector_extra(prom: &Prometheus) -> String {
    format!(
        "raw_retention = \"7d\"\nrollup_settle = \"1s\"\n{}\n[limits]\nmax_time_ahead = \"3m\"\n[otlp]\nurl = \"{}\"\nflush_interval = \"100ms\"\n",
        pki().collector_tls(),
        prom.otlp_url()
    )
}

/// A calendar minute 20-50 s ago (waiting up to 30 s for the next one): its first exact window
/// (T = t0 + 46 s) is evaluated at T + 1m (query_offset), at least 56 s from now, after the
/// test's stream even on a loaded machine (80 s into the minute left 26 s, too few under load).
fn first_minute() -> i64 {
    let now = wattflip_e2e::fleet::now_ns();
    let t0 = (now - 80 * S).div_euclid(MINUTE_NS) * MINUTE_NS + MINUTE_NS;
    if now - t0 <= 50 * S {
        return t0;
    }
    sleep_until_ns(t0 + 80 * S);
    t0 + MINUTE_NS
}

fn sleep_until_ns(t: i64) {
    let now = wattflip_e2e::fleet::now_ns();
    if t > now {
        std::thread::sleep(Duration::from_nanos((t - now) as u64));
    }
}

/// The two timelines below, side by side in one test. Each waits about three minutes for
/// Prometheus's minute windows (`query_offset: 1m`) with almost no CPU; as two tests they held
/// both test threads of a 2-core machine for 170 s while the machine stood idle (the e2e binary's
/// per-test times, docs/benchmarks.md, stop 54). As one test they hold one thread, and the other
/// runs the rest of the tests meanwhile. A failure names its timeline (the thread's name).
#[test]
fn recording_rules_equal_the_minutes_by_hand_and_a_collector_restart_records_the_new_total() {
    std::thread::scope(|s| {
        let spawn = |name: &str, f: fn()| std::thread::Builder::new().name(name.into()).spawn_scoped(s, f).expect("spawn a timeline");
        let on_time =
            spawn("on time, late and backfilled", recording_rules_equal_the_minutes_by_hand_and_influxdb_rollups_and_miss_late_points_until_backfilled);
        let restart = spawn("a collector restart", a_collector_restart_drops_the_counter_and_the_window_after_records_the_new_total);
        let (a, b) = (on_time.join(), restart.join());
        assert!(a.is_ok() && b.is_ok(), "a timeline failed (its panic above, under its thread's name)");
    });
}

fn recording_rules_equal_the_minutes_by_hand_and_influxdb_rollups_and_miss_late_points_until_backfilled() {
    let prom = Prometheus::start_with_rules(&test_rules());
    let influx = Influx::start();
    let collector = Collector::start_with(free_port(), &influx.url, DB, &collector_extra(&prom));
    let t0 = first_minute();
    stream(&collector.url, 0, t0, 0..MINUTES);
    let pkg_streamed = wattflip_e2e::fleet::now_ns();
    stream(&collector.url, 1, t0, 0..MINUTES);
    assert!(wattflip_e2e::fleet::now_ns() < t0 + 106 * S, "the stream took too long: the first windows were evaluated before it ended");
    // The late host's minute 0: streamed after every window holding its points was evaluated
    // (T < t0 + 106 s, evaluated a minute later).
    sleep_until_ns(t0 + 170 * S);
    stream(&collector.url, LATE, t0, 0..1);
    // Minute 1's last exact window (T < t0 + 122 s) is evaluated before t0 + 182 s.
    sleep_until_ns(t0 + 185 * S);
    let t_end = (t0 + 185 * S) as f64 / 1e9;
    let rules = prom.rules();
    assert!(rules.to_string().contains("\"health\":\"ok\"") && !rules.to_string().contains("\"health\":\"err\""), "rules: {rules}");
    check_on_time(&prom, &influx, t0, t_end);
    check_late(&prom, &influx, t0, t_end);
    backfill(&prom, t0, pkg_streamed, t_end);
    drop(collector);
}

/// The late host: raw points in Prometheus and rollups in InfluxDB, but no recorded series.
fn check_late(prom: &Prometheus, influx: &Influx, t0: i64, t_end: f64) {
    let raw = wait_for(Duration::from_secs(20), || {
        let s = prom.samples("hw_power_watts{instance=\"pr-late\"}", "15m", t_end);
        (s.first().map(|s| s.1.len()) == Some(PER_MINUTE as usize)).then_some(())
    });
    assert!(raw.is_some(), "the late host's raw points in Prometheus");
    let recorded = prom.series("{__name__=~\"instance.*:.*\",instance=\"pr-late\"}[15m]", t_end);
    assert_eq!(recorded, vec![], "late points are in no recorded window (rules evaluate once)");
    let rack = prom.series("rack:hw_host_power_watts:avg_over_time1m{rack=\"rb\"}[15m]", t_end);
    assert_eq!(rack, vec![], "the late host's rack: no recorded window");
    let q =
        format!("SELECT \"count\", \"watts\" FROM \"rollup_1m\".\"power\" WHERE \"host\" = 'pr-late' AND time >= {t0} AND time < {}", t0 + MINUTES * MINUTE_NS);
    let want = vec![Some(PER_MINUTE as f64), Some(aggregates(&(0..PER_MINUTE).map(|i| watts(2, 0, 0, i)).collect::<Vec<_>>())[0])];
    let got = wait_for(Duration::from_secs(30), || {
        let rows = influx.try_rows(DB, &q)?;
        let got: Vec<Option<f64>> = rows.iter().flat_map(|r| [r[1].as_f64(), r[2].as_f64()]).collect();
        (got == want).then_some(())
    });
    assert!(got.is_some(), "InfluxDB's rollups of the late host (recomputed on arrival): {:?}", influx.try_rows(DB, &q));
}

/// `promtool tsdb create-blocks-from rules` over the late host's minute with the same rules
/// file (same path: the same evaluation phase), its blocks loaded by another Prometheus (moving
/// them into this one's head range is what Prometheus's docs call unsafe: the last 3 hours): the
/// late host's windows by hand, and the on-time hosts' windows within 1 ms of the live ones.
/// Only windows evaluated live (T + 1m, `query_offset`) after `pkg_streamed` plus the optional
/// sink's delivery margin are compared: an earlier one was evaluated before all its points
/// reached Prometheus (the test starts up to 80 s into the minute `t0`), so it is absent or
/// partial live, and whole in the backfill.
fn backfill(prom: &Prometheus, t0: i64, pkg_streamed: i64, t_end: f64) {
    let end_s = t0 / S + 130;
    let avg = "instance_hw_id:hw_power_watts:avg_over_time1m{instance=\"pr-pkg\"}";
    let first = ((t0 / S) as f64).max((pkg_streamed - MINUTE_NS + 5 * S) as f64 / 1e9);
    let in_range = |s: Vec<wattflip_e2e::prometheus::Series>| -> Vec<(f64, f64)> {
        // Windows up to t0 + 120 s: every live one was evaluated (T + 1m) before `t_end`.
        s.into_iter().flat_map(|s| s.1).filter(|(t, _)| *t >= first && *t <= (t0 / S + 120) as f64).collect()
    };
    let live = in_range(prom.samples(avg, "15m", t_end));
    let out = tempfile::tempdir().unwrap();
    let o = std::process::Command::new(promtool_path())
        .args(["tsdb", "create-blocks-from", "rules", "--url", &prom.url, "--start", &(t0 / S).to_string(), "--end", &end_s.to_string()])
        .arg(format!("--output-dir={}", out.path().display()))
        .arg(prom.rules_file())
        .output()
        .unwrap();
    assert!(o.status.success(), "promtool backfill: {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let mut other = Prometheus::start();
    other.stop();
    for b in std::fs::read_dir(out.path()).unwrap() {
        let b = b.unwrap();
        std::fs::rename(b.path(), other.data_dir().join(b.file_name())).unwrap();
    }
    other.restart();
    let w: Vec<f64> = (0..PER_MINUTE).map(|i| watts(2, 0, 0, i)).collect();
    for (op, want) in OPS.iter().zip(aggregates(&w)) {
        expect(&other, &format!("instance_hw_id:hw_power_watts:{op}"), "instance=\"pr-late\"", t0, 0, t_end, Some(want));
    }
    // The on-time host's backfilled windows are the live ones: the same value within 1 ms of a
    // live window's time (not always the same millisecond, so loading them beside the live
    // series would count those windows twice: docs/deployment.md deletes the range first).
    let backfilled = in_range(other.samples(avg, "15m", t_end));
    // pkg_streamed < t0 + 106 s: windows from t0 + 51 s to t0 + 120 s, one every 5 s.
    assert!(backfilled.len() >= 13, "{backfilled:?}");
    for (t, v) in &backfilled {
        let near = |lt: f64| ((lt - t) * 1000.0).round().abs() <= 1.0;
        assert!(live.iter().any(|(lt, lv)| near(*lt) && lv == v), "backfilled window ({t}, {v}) is no live window: {live:?}");
    }
}

/// A collector restart between minute 0 and minute 1 of a counter from an agent older than
/// `joules_total` (none in these windows): the next collector's series starts over (its own
/// running total), so the counter drops; the window of minute 1 holds only
/// the restarted series' points and records their energy exactly (the rules' drop branch), zone
/// and host alike; minute 0, the series' first, is absent.
fn a_collector_restart_drops_the_counter_and_the_window_after_records_the_new_total() {
    let prom = Prometheus::start_with_rules(&test_rules());
    let influx = Influx::start();
    // Started before the minute is chosen, as the other timeline's collector is: its start may
    // wait for the harness's one cargo build, which must not eat into the minute's margin.
    let first = Collector::start_with(free_port(), &influx.url, "wf_otlp_restart", &collector_extra(&prom));
    let t0 = first_minute();
    stream(&first.url, RESTART, t0, 0..1);
    let sel = "instance=\"pr-restart\",hw_id=\"rapl:package-0\"";
    let counter = |t_end: f64| {
        prom.samples(&format!("hw_energy_joules_total{{{sel}}}"), "15m", t_end).into_iter().flat_map(|s| s.1).map(|(_, v)| v).collect::<Vec<f64>>()
    };
    let joules = |m: i64| (0..PER_MINUTE).map(|i| watts(RESTART as i64, 0, m, i) * 4.0).collect::<Vec<f64>>();
    // The optional sink is not waited for by the Acks: every point of minute 0 in Prometheus first.
    let sent = wait_for(Duration::from_secs(20), || (counter((t0 + 60 * S) as f64 / 1e9).len() == PER_MINUTE as usize).then_some(()));
    assert!(sent.is_some(), "minute 0 never reached Prometheus: {:?}", counter((t0 + 60 * S) as f64 / 1e9));
    first.kill();
    let second = Collector::start_with(free_port(), &influx.url, "wf_otlp_restart", &collector_extra(&prom));
    stream(&second.url, RESTART, t0, 1..2);
    assert!(wattflip_e2e::fleet::now_ns() < t0 + 106 * S, "the stream took too long: the first windows were evaluated before it ended");
    sleep_until_ns(t0 + 185 * S);
    let t_end = (t0 + 185 * S) as f64 / 1e9;
    // The raw counter: minute 0's running total, then the second collector's from its first point.
    let running = |j: Vec<f64>| {
        j.iter()
            .scan(0.0, |acc, x| {
                Some({
                    *acc += x;
                    *acc
                })
            })
            .collect::<Vec<f64>>()
    };
    assert_eq!(counter(t_end), [running(joules(0)), running(joules(1))].concat(), "the counter restarts at the second collector");
    let minute1: f64 = joules(1).iter().sum();
    expect(&prom, "instance_hw_id:hw_energy_joules:increase1m", sel, t0, 0, t_end, None);
    expect(&prom, "instance_hw_id:hw_energy_joules:increase1m", sel, t0, 1, t_end, Some(minute1));
    expect(&prom, "instance:hw_host_energy_joules:increase1m", "instance=\"pr-restart\"", t0, 1, t_end, Some(minute1));
    drop(second);
}

/// The shipped file passes `promtool check rules`.
#[test]
fn promtool_accepts_the_shipped_rules() {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/prometheus/wattflip-rollups.rules.yml");
    let o = std::process::Command::new(promtool_path()).args(["check", "rules"]).arg(&file).output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && stdout.contains("SUCCESS: 15 rules found"), "{stdout}{}", String::from_utf8_lossy(&o.stderr));
}
