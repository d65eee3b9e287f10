//! Raw retention and 1-minute rollups through the real collector into a real influxd
//! (docs/schema.md, *Retention and rollups*): the rollups equal the raw aggregates of every
//! minute exactly, also when a host's points arrive out of order and hours late (a spool
//! replayed after an outage) after its minute was already rolled up; and `plan budget --since 30d`
//! answers from the rollups, reading one point per series and minute (counted with `count()` over
//! the plan's own FROM and WHERE), and equals the answer from the raw points (the same plan with
//! `--resolution raw` over a window both cover, and the raw points read by hand). influxd 1.x
//! enforces `max-select-point` from a once-a-second check of a running query, so a test-sized
//! query is never refused by it: the points read are counted instead.
//!
//! Values are quarters of a watt (exact in binary floating point), so every sum below is exact in
//! any order and the expected numbers are computed here from the generator, not by the code under
//! test.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio_stream::StreamExt as _;
use wattflip_e2e::*;
use wattflip_proto::v1::{self, agent_message::Kind, AgentMessage};

pub(crate) const MINUTE_NS: i64 = 60_000_000_000;
/// One point per zone every 5 s: 12 per minute.
pub(crate) const PER_MINUTE: i64 = 12;
const STEP_NS: i64 = MINUTE_NS / PER_MINUTE;

/// A zone: (source, zone, scope, counter).
pub(crate) type Zone = (&'static str, &'static str, &'static str, bool);

/// The collector with raw retention (7 days) and a 1 s settle delay.
pub(crate) fn collector(influx: &Influx, db: &str) -> Collector {
    let extra = format!("raw_retention = \"7d\"\nrollup_settle = \"1s\"\n{}", pki().collector_tls());
    Collector::start_with(free_port(), &influx.url, db, &extra)
}

/// Watts of `zone` (its index) of host `h` in minute `m`, point `i`: quarters of a watt that
/// differ per point, so mean, max and min differ. The offsets of a whole minute are a permutation
/// of 0..12 quarters, so its mean is exact too (base + 1.375 W).
pub(crate) fn watts(h: i64, zone: i64, m: i64, i: i64) -> f64 {
    100.0 * (zone + 1) as f64 + 10.0 * h as f64 + 0.25 * m as f64 + 0.25 * ((i * 7) % 12) as f64
}

/// The points of minute `m` of a host with index `h`, points `is` (timestamps 5 s apart from the
/// minute's start + 2 s): power per zone (counters with joules and a 5 s interval) and one
/// temperature.
fn minute_batch(host: &str, h: i64, zones: &[Zone], t0: i64, m: i64, is: std::ops::Range<i64>, seq: u64) -> AgentMessage {
    let mut power = Vec::new();
    let mut temperature = Vec::new();
    for i in is {
        let t = t0 + m * MINUTE_NS + 2_000_000_000 + i * STEP_NS;
        for (z, (source, zone, scope, counter)) in zones.iter().enumerate() {
            let w = watts(h, z as i64, m, i);
            power.push(v1::PowerSample {
                time_ns: t,
                source: source.to_string(),
                zone: zone.to_string(),
                scope: scope.to_string(),
                method: v1::Method::Measured as i32,
                watts: Some(w),
                joules: counter.then_some(w * 5.0),
                interval_ns: if *counter { STEP_NS } else { 0 },
                ..Default::default()
            });
        }
        temperature.push(v1::TemperatureSample {
            time_ns: t,
            source: "hwmon".into(),
            device: "nvme0".into(),
            sensor: "Composite".into(),
            celsius: 40.0 + 0.125 * ((i + m) % 9) as f64,
        });
    }
    AgentMessage { kind: Some(Kind::Batch(v1::Batch { agent_id: host.into(), sequence: seq, power, temperature, ..Default::default() })) }
}

/// One agent's `run` stream; every batch is acknowledged (stored) before `send` returns.
pub(crate) struct Stream {
    host: String,
    tx: tokio::sync::mpsc::Sender<AgentMessage>,
    acks: tonic::Streaming<v1::Ack>,
    seq: u64,
}

impl Stream {
    pub(crate) async fn open(url: &str, host: &str, rack: &str) -> Stream {
        let identity = pki().issue(&format!("rollups-{host}"), &[host], None);
        let channel = pki().channel(url, Some(identity)).await.expect("connect to the collector");
        let mut client = v1::ingest_client::IngestClient::new(channel);
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let hello = v1::Hello { stream_epoch: 7, ..wattflip_e2e::fleet::hello(host, rack, wattflip_e2e::fleet::now_ns(), "run") };
        tx.send(AgentMessage { kind: Some(Kind::Hello(hello)) }).await.unwrap();
        let acks = client.stream(tokio_stream::wrappers::ReceiverStream::new(rx)).await.expect("open the run stream").into_inner();
        Stream { host: host.into(), tx, acks, seq: 0 }
    }

    /// Sends minute `m` (points `is`) and waits for its acknowledgement.
    pub(crate) async fn send(&mut self, h: i64, zones: &[Zone], t0: i64, m: i64, is: std::ops::Range<i64>) {
        self.seq += 1;
        self.tx.send(minute_batch(&self.host, h, zones, t0, m, is, self.seq)).await.unwrap();
        let ack = tokio::time::timeout(Duration::from_secs(20), self.acks.next()).await.expect("ack within 20 s");
        assert_eq!(ack.expect("a reply").expect("no error").durable_sequence, self.seq, "{} minute {m}", self.host);
    }
}

/// Rows of the first series of `q`'s answer, or of every series with its tags.
fn series(influx: &Influx, db: &str, q: &str) -> Vec<(Value, Vec<Vec<Value>>)> {
    influx.series(db, q)
}

pub(crate) fn wait(what: &str, mut ok: impl FnMut() -> bool) {
    assert!(wait_for(Duration::from_secs(60), || ok().then_some(())).is_some(), "{what} within 60 s");
}

/// Σ `count` of the power rollups in `[from, to)`: raw power points rolled up so far.
pub(crate) fn rolled_points(influx: &Influx, db: &str, from: i64, to: i64) -> i64 {
    let q = format!("SELECT sum(\"count\") FROM \"rollup_1m\".\"power\" WHERE time >= {from} AND time < {to}");
    influx.try_rows(db, &q).and_then(|r| r.first().and_then(|r| r[1].as_i64())).unwrap_or(0)
}

pub(crate) const ZONES: [Zone; 2] = [("rapl", "package-0", "package", true), ("ipmi", "dcmi", "wall", false)];

#[test]
fn rollups_equal_the_raw_aggregates_also_after_a_late_out_of_order_backfill() {
    const DB: &str = "wf_rollups";
    let influx = Influx::start();
    let c = collector(&influx, DB);
    // Six minutes, three hours ago: within the raw retention, long past any settle delay.
    let t0 = (wattflip_e2e::fleet::now_ns() / MINUTE_NS - 180) * MINUTE_NS;
    let end = t0 + 6 * MINUTE_NS;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut b = rt.block_on(async {
        let mut a = Stream::open(&c.url, "ro-a", "ra").await;
        for m in 0..6 {
            a.send(0, &ZONES, t0, m, 0..PER_MINUTE).await;
        }
        // Host b: minutes 3 and 5, and the first half of minute 4 ...
        let mut b = Stream::open(&c.url, "ro-b", "ra").await;
        for (m, is) in [(3, 0..PER_MINUTE), (5, 0..PER_MINUTE), (4, 0..6)] {
            b.send(1, &ZONES, t0, m, is).await;
        }
        b
    });
    // ... rolled up as they are (6 points of minute 4) ...
    let b4 = format!("SELECT \"count\" FROM \"rollup_1m\".\"power\" WHERE \"host\" = 'ro-b' AND \"zone\" = 'dcmi' AND time = {}", t0 + 4 * MINUTE_NS);
    wait("the rollup of host b's first half of minute 4", || influx.try_rows(DB, &b4).is_some_and(|r| r.first().and_then(|r| r[1].as_i64()) == Some(6)));
    // ... then the rest arrives late and out of order: minutes 2, 0, 1 and the second half of 4.
    rt.block_on(async {
        for (m, is) in [(2, 0..PER_MINUTE), (0, 0..PER_MINUTE), (1, 0..PER_MINUTE), (4, 6..PER_MINUTE)] {
            b.send(1, &ZONES, t0, m, is).await;
        }
    });
    let all = 2 * 2 * 6 * PER_MINUTE;
    wait("every raw power point rolled up", || rolled_points(&influx, DB, t0, end) == all);
    wait("host b's minute 4 recomputed whole", || influx.try_rows(DB, &b4).is_some_and(|r| r.first().and_then(|r| r[1].as_i64()) == Some(PER_MINUTE)));

    // Every minute of every series: the rollup row is InfluxDB's own aggregate of the raw points.
    let window = format!("time >= {t0} AND time < {end}");
    let raw = series(
        &influx,
        DB,
        &format!(
            "SELECT mean(\"watts\"), max(\"watts\"), min(\"watts\"), count(\"watts\"), sum(\"watts\"), sum(\"joules\"), sum(\"interval_ns\") \
             FROM \"raw\".\"power\" WHERE {window} GROUP BY time(1m), \"host\", \"zone\" fill(none)"
        ),
    );
    let rolled = series(
        &influx,
        DB,
        &format!("SELECT \"watts\", \"peak_watts\", \"low_watts\", \"count\", \"watts_sum\", \"joules\", \"interval_ns\" FROM \"rollup_1m\".\"power\" WHERE {window} GROUP BY \"host\", \"zone\""),
    );
    assert_eq!(raw.len(), 4, "{raw:?}");
    assert_eq!(rolled, raw, "rollups vs raw aggregates per minute");

    // And against the generator: per minute max, min and count; the window's energy exactly.
    for (tags, rows) in &rolled {
        let h = if tags["host"] == "ro-a" { 0 } else { 1 };
        let z = if tags["zone"] == "package-0" { 0 } else { 1 };
        for (m, row) in rows.iter().enumerate() {
            let w: Vec<f64> = (0..PER_MINUTE).map(|i| watts(h, z, m as i64, i)).collect();
            let (max, min) = (w.iter().copied().fold(f64::MIN, f64::max), w.iter().copied().fold(f64::MAX, f64::min));
            assert_eq!((row[2].as_f64(), row[3].as_f64(), row[4].as_i64()), (Some(max), Some(min), Some(PER_MINUTE)), "{tags} minute {m}");
            // Energy only where the source is a counter: absent (null), never 0, for the meter.
            let joules: f64 = w.iter().map(|x| x * 5.0).sum();
            assert_eq!(row[6].as_f64(), (z == 0).then_some(joules), "{tags} minute {m} joules");
        }
    }
    let energy = |q: &str| influx.rows(DB, q)[0][1].as_f64().unwrap();
    let want: f64 = (0..2).flat_map(|h| (0..6).flat_map(move |m| (0..PER_MINUTE).map(move |i| watts(h, 0, m, i) * 5.0))).sum();
    assert_eq!(energy(&format!("SELECT sum(\"joules\") FROM \"rollup_1m\".\"power\" WHERE {window}")), want);
    assert_eq!(energy(&format!("SELECT sum(\"joules\") FROM \"raw\".\"power\" WHERE {window}")), want);

    // Temperatures: max and mean per minute, equal to the raw aggregates, once every raw point is
    // in a rollup (they are rolled up apart from the power points: a loaded run of stop 54 read
    // them with minute 4 still at its first half and the last minute not yet written).
    let temps = |q: &str| influx.try_rows(DB, q).and_then(|r| r.first().and_then(|r| r[1].as_i64()));
    let raw_temps = format!("SELECT count(\"celsius\") FROM \"raw\".\"temperature\" WHERE {window}");
    let rolled_temps = format!("SELECT sum(\"count\") FROM \"rollup_1m\".\"temperature\" WHERE {window}");
    wait("every raw temperature point rolled up", || temps(&raw_temps).is_some() && temps(&rolled_temps) == temps(&raw_temps));
    let raw_t = series(
        &influx,
        DB,
        &format!(
            "SELECT mean(\"celsius\"), max(\"celsius\"), count(\"celsius\") FROM \"raw\".\"temperature\" WHERE {window} GROUP BY time(1m), \"host\" fill(none)"
        ),
    );
    let rolled_t =
        series(&influx, DB, &format!("SELECT \"celsius\", \"peak_celsius\", \"count\" FROM \"rollup_1m\".\"temperature\" WHERE {window} GROUP BY \"host\""));
    assert_eq!((raw_t.len(), &rolled_t), (2, &raw_t), "temperature rollups vs raw");

    // Hellos (`agent` points) are kept whole: the copy equals the raw points.
    let hellos = |rp: &str| series(&influx, DB, &format!("SELECT * FROM \"{rp}\".\"agent\" GROUP BY *"));
    wait("the Hellos copied whole", || hellos("rollup_1m").len() == 2);
    assert_eq!(hellos("rollup_1m"), hellos("raw"));
    let policies = influx.rows(DB, &format!("SHOW RETENTION POLICIES ON \"{DB}\""));
    let names: Vec<(&str, &str, bool)> =
        policies.iter().map(|r| (r[0].as_str().unwrap(), r[1].as_str().unwrap(), r[4].as_bool().unwrap())).filter(|p| p.0 != "autogen").collect();
    assert_eq!(
        names,
        vec![("raw", "168h0m0s", true), ("rollup_1m", "9600h0m0s", false), ("rollup_1h", "9600h0m0s", false)],
        "the collector's retention policies"
    );
    drop(c);
}

/// The budget fleet: (host, rack, zones). Two racks; `pb-psu` counts its two PSU inputs.
fn budget_fleet() -> Vec<(&'static str, &'static str, Vec<Zone>)> {
    vec![
        ("pb-wall", "ra", vec![("ipmi", "dcmi", "wall", false)]),
        ("pb-psu", "ra", vec![("hwmon", "pmbus-0/pin", "psu_in", false), ("hwmon", "pmbus-1/pin", "psu_in", false)]),
        ("pb-solo", "rb", vec![("ipmi", "dcmi", "wall", false)]),
    ]
}

fn plan_budget(influx: &Influx, db: &str, since: &str, resolution: &str) -> std::process::Output {
    std::process::Command::new(bin("wattflip-collector", "wattflip-collector"))
        .args(["--influx-url", &influx.url, "--influx-db", db, "plan", "budget", "--group-by", "rack", "--budget-w", "1000"])
        .args(["--since", since, "--resolution", resolution, "--json"])
        .output()
        .expect("run wattflip-collector plan budget")
}

#[test]
fn plan_budget_over_30_days_reads_one_rollup_point_per_series_and_minute_and_equals_the_raw_answer() {
    const DB: &str = "wf_rollup_plan";
    const MINUTES: i64 = 30;
    // 4 series × 12 points × 30 minutes = 1440 raw points; the rollups hold 4 × 30 = 120.
    let influx = Influx::start();
    let c = collector(&influx, DB);
    let t0 = (wattflip_e2e::fleet::now_ns() / MINUTE_NS - 45) * MINUTE_NS;
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        for (h, (host, rack, zones)) in budget_fleet().into_iter().enumerate() {
            let mut s = Stream::open(&c.url, host, rack).await;
            for m in 0..MINUTES {
                s.send(h as i64, &zones, t0, m, 0..PER_MINUTE).await;
            }
        }
    });
    let raw_points = 4 * PER_MINUTE * MINUTES;
    wait("every raw power point rolled up", || rolled_points(&influx, DB, t0, t0 + MINUTES * MINUTE_NS) == raw_points);
    wait("the Hellos copied whole", || {
        influx.try_rows(DB, "SELECT count(\"version\") FROM \"rollup_1m\".\"agent\"").is_some_and(|r| r[0][1].as_i64() == Some(3))
    });

    // By hand: each host's minute mean (Σ zones), per rack summed per minute, the peak over minutes.
    let mean = |h: i64, z: i64, m: i64| (0..PER_MINUTE).map(|i| watts(h, z, m, i)).sum::<f64>() / PER_MINUTE as f64;
    let host_w = |h: i64, zones: usize, m: i64| (0..zones as i64).map(|z| mean(h, z, m)).sum::<f64>();
    let fleet = budget_fleet();
    let peak = |hosts: &[i64]| (0..MINUTES).map(|m| hosts.iter().map(|&h| host_w(h, fleet[h as usize].2.len(), m)).sum::<f64>()).fold(f64::MIN, f64::max);
    let want = vec![("ra".to_string(), peak(&[0, 1]), 2), ("rb".to_string(), peak(&[2]), 1)];

    let run = |since: &str, resolution: &str| {
        let o = plan_budget(&influx, DB, since, resolution);
        assert!(o.status.success(), "plan budget --since {since} --resolution {resolution}: {}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<Value>(&o.stdout).unwrap()
    };
    let plan = run("30d", "auto");
    let got: Vec<(String, f64, u64)> = plan["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["group"].as_str().unwrap().to_string(), g["peak_w"].as_f64().unwrap(), g["hosts"].as_u64().unwrap()))
        .collect();
    let want_n: Vec<(String, f64, u64)> = want.iter().map(|(g, p, n)| (g.clone(), *p, *n as u64)).collect();
    assert_eq!(got, want_n, "{plan}");
    assert!(plan["resolution"].as_str().unwrap().starts_with("1-minute rollups (retention policy rollup_1m"), "{plan}");

    // The same answer from the raw points, read 5 minutes at a time (240 points per query).
    let mut per_minute: BTreeMap<(String, i64), f64> = BTreeMap::new();
    for k in (0..MINUTES).step_by(5) {
        let (a, z) = (t0 + k * MINUTE_NS, t0 + (k + 5) * MINUTE_NS);
        let q = format!("SELECT mean(\"watts\") FROM \"power\" WHERE \"rate\" != 'full' AND time >= {a} AND time < {z} GROUP BY time(1m), \"host\", \"zone\", \"rack\" fill(none)");
        for (tags, rows) in series(&influx, DB, &q) {
            for r in rows {
                *per_minute.entry((tags["rack"].as_str().unwrap().to_string(), r[0].as_i64().unwrap())).or_default() += r[1].as_f64().unwrap();
            }
        }
    }
    for (g, p, _) in &want {
        let raw_peak = per_minute.iter().filter(|((r, _), _)| r == g).map(|(_, w)| *w).fold(f64::MIN, f64::max);
        assert_eq!(raw_peak, *p, "rack {g}: raw answer");
    }

    // The same plan on raw points where both exist (the last hour holds every point): equal.
    let (rolled_1h, raw_1h) = (run("1h", "auto"), run("1h", "raw"));
    assert_eq!(rolled_1h["groups"], plan["groups"]);
    assert_eq!(raw_1h["groups"], plan["groups"], "raw vs rollups: {raw_1h}");
    assert!(raw_1h["resolution"].as_str().unwrap().starts_with("raw points (retention policy `raw`, kept 7days"), "{raw_1h}");
    // 30 days of raw points are beyond the raw retention: refused, not answered from 7 days.
    let o = plan_budget(&influx, DB, "30d", "raw");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("beyond the raw points (retention policy `raw`, kept 7days)"), "--resolution raw --since 30d: {err}");
    // The points the plan reads: its query's FROM and WHERE counted, one per series and minute
    // (hosts × zones × minutes), against the raw points of the same window.
    let count = |from: &str, field: &str| {
        let q = format!("SELECT count(\"{field}\") FROM {from} WHERE \"rate\" != 'full' AND time > now() - 30d");
        influx.rows(DB, &q)[0][1].as_i64().unwrap()
    };
    assert_eq!((count("\"rollup_1m\".\"power\"", "count"), count("\"power\"", "watts")), (4 * MINUTES, raw_points));
    drop(c);
}

/// Lines InfluxDB refused (a type conflict: `celsius` an integer in the shard) and that the
/// operator replays from the dead-letter store, hours after their minute, after removing the
/// cause: `dead-letter replay` recomputes their minutes, so the temperature rollups equal the raw
/// aggregates of the replayed points (the running collector never saw these writes).
#[test]
fn a_dead_letter_replay_recomputes_the_rollups_of_its_minutes() {
    const DB: &str = "wf_rollup_replay";
    let influx = Influx::start();
    let t0 = (wattflip_e2e::fleet::now_ns() / MINUTE_NS - 120) * MINUTE_NS;
    // Created earlier by something else, in the shard of those minutes: `celsius` as an integer.
    // InfluxDB answers a statement's error with 200 and the error in the body: both are checked.
    let try_post = |path: &str, q: &[(&str, &str)], body: &str| {
        let r = reqwest::blocking::Client::new().post(format!("{}{path}", influx.url)).query(q).body(body.to_string()).send().map_err(|e| e.to_string())?;
        let ok = r.status().is_success();
        let text = r.text().unwrap_or_default();
        if ok && !text.contains("\"error\"") {
            Ok(())
        } else {
            Err(format!("{path}: {text}"))
        }
    };
    let post = |path: &str, q: &[(&str, &str)], body: &str| try_post(path, q, body).unwrap();
    // Once in a clean-clone CI run (stop 56) the first write found no `raw` policy right after it
    // was created: the
    // three steps (each idempotent) are retried until the point is in, and what failed last is
    // kept for the message.
    let mut last = String::new();
    let line = format!("temperature,host=other celsius=40i {t0}\n");
    let setup = || {
        try_post("/query", &[("q", &format!("CREATE DATABASE {DB}"))], "")?;
        try_post("/query", &[("q", &format!("CREATE RETENTION POLICY \"raw\" ON {DB} DURATION 7d REPLICATION 1 DEFAULT"))], "")?;
        try_post("/write", &[("db", DB), ("rp", "raw"), ("precision", "n")], &line)
    };
    let written = wait_for(Duration::from_secs(30), || setup().map_err(|e| last = e).ok());
    assert!(written.is_some(), "the conflicting point was not written within 30 s: {last}");
    let c = collector(&influx, DB);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut s = Stream::open(&c.url, "rr-a", "ra").await;
        for m in 0..3 {
            s.send(0, &ZONES, t0, m, 0..PER_MINUTE).await;
        }
    });
    let end = t0 + 3 * MINUTE_NS;
    wait("the power rollups", || rolled_points(&influx, DB, t0, end) == 2 * 3 * PER_MINUTE);
    let temps = |rp: &str| format!("SELECT count(\"celsius\") FROM \"{rp}\".\"temperature\" WHERE \"host\" = 'rr-a'");
    assert!(influx.rows(DB, &temps("raw")).is_empty(), "the temperatures were refused");
    // The operator removes the cause, then replays.
    post("/query", &[("db", DB), ("q", "DROP MEASUREMENT temperature")], "");
    let out = std::process::Command::new(bin("wattflip-collector", "wattflip-collector"))
        .arg("--config")
        .arg(c.config())
        .args(["dead-letter", "replay", "--timeout", "20s"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(&format!("{} line(s) stored, 0 refused again", 3 * PER_MINUTE)), "{stdout}");
    // At once, not after a settle delay: the replay waits for its recompute.
    let window = format!("\"host\" = 'rr-a' AND time >= {t0} AND time < {end}");
    let raw_t = series(
        &influx,
        DB,
        &format!("SELECT mean(\"celsius\"), max(\"celsius\"), count(\"celsius\") FROM \"raw\".\"temperature\" WHERE {window} GROUP BY time(1m) fill(none)"),
    );
    let rolled_t = series(&influx, DB, &format!("SELECT \"celsius\", \"peak_celsius\", \"count\" FROM \"rollup_1m\".\"temperature\" WHERE {window}"));
    assert_eq!(raw_t.iter().map(|s| s.1.len()).sum::<usize>(), 3, "{raw_t:?}");
    assert_eq!(rolled_t.into_iter().map(|s| s.1).collect::<Vec<_>>(), raw_t.into_iter().map(|s| s.1).collect::<Vec<_>>(), "{stdout}");
    drop(c);
}
