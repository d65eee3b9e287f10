//! Issue 15, "nothing acknowledged is lost, every drop counted", through the real collector (mutual
//! TLS) and a real influxd: each test plays an agent that keeps a ledger of what it sent, then
//! checks the Acks, InfluxDB and the collector's `/metrics` against that ledger exactly: good points
//! stored once, each bad one counted in a `point_rejected` event and a metric, each refused one in
//! the dead-letter store. Scenario numbers are the issue's.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;
use tokio_stream::StreamExt as _;
use wattflip_e2e::*;
use wattflip_proto::v1::{self, agent_message::Kind, ingest_client::IngestClient, Ack, AgentMessage};

fn now_ns() -> i64 {
    wattflip_proto::units::UnixNanos::now().0
}

fn hello(id: &str, epoch: u64, labels: &[(&str, &str)]) -> AgentMessage {
    AgentMessage {
        kind: Some(Kind::Hello(v1::Hello {
            agent_id: id.into(),
            time_ns: now_ns(),
            stream_epoch: epoch,
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            ..Default::default()
        })),
    }
}

fn temp(t: i64, sensor: &str, celsius: f64) -> v1::TemperatureSample {
    v1::TemperatureSample { time_ns: t, source: "hwmon".into(), device: "nvme0".into(), sensor: sensor.into(), celsius }
}

fn power(t: i64, watts: f64) -> v1::PowerSample {
    v1::PowerSample {
        time_ns: t,
        source: "hwmon".into(),
        zone: "psu/pin".into(),
        scope: "psu_in".into(),
        method: v1::Method::Measured as i32,
        watts: Some(watts),
        ..Default::default()
    }
}

fn event(t: i64, kind: &str) -> v1::Event {
    v1::Event { time_ns: t, kind: kind.into(), severity: v1::Severity::Info as i32, message: "tick".into(), ..Default::default() }
}

fn msg(b: v1::Batch) -> AgentMessage {
    AgentMessage { kind: Some(Kind::Batch(b)) }
}

/// A collector (mutual TLS) with `/metrics` on a free port and `extra` config; returns it and the
/// metrics address.
fn collector(influx: &Influx, db: &str, extra: &str) -> (Collector, String) {
    let m = format!("127.0.0.1:{}", free_port());
    let c = Collector::start_with(free_port(), &influx.url, db, &format!("{extra}{}[metrics]\nlisten = \"{m}\"\n", pki().collector_tls()));
    (c, m)
}

/// Sends `msgs` on one stream as agent `id` (its certificate) and returns every answer until the
/// collector ends the stream (after the last Ack, the client half-closes).
fn stream(c: &Collector, id: &str, msgs: Vec<AgentMessage>) -> Vec<Result<Ack, tonic::Status>> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let cert = pki().issue(&format!("dl-{id}"), &[id], None);
        let channel = pki().channel(&c.url, Some(cert)).await.unwrap();
        let mut client = IngestClient::new(channel);
        let mut answers = Vec::new();
        let mut acks = match client.stream(tokio_stream::iter(msgs)).await {
            Ok(r) => r.into_inner(),
            Err(s) => return vec![Err(s)],
        };
        while let Some(a) = tokio::time::timeout(Duration::from_secs(30), acks.next()).await.expect("an answer within 30 s") {
            let end = a.is_err();
            answers.push(a);
            if end {
                break;
            }
        }
        answers
    })
}

fn acks(answers: Vec<Result<Ack, tonic::Status>>) -> Vec<Ack> {
    answers.into_iter().map(|a| a.expect("every batch acknowledged")).collect()
}

fn sum(acks: &[Ack], f: impl Fn(&Ack) -> &std::collections::HashMap<String, u64>) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for a in acks {
        for (k, v) in f(a) {
            *out.entry(k.clone()).or_default() += v;
        }
    }
    out
}

fn metrics(addr: &str) -> String {
    reqwest::blocking::get(format!("http://{addr}/metrics")).expect("GET /metrics").text().expect("body")
}

fn metric(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')).and_then(|v| v.trim().parse().ok()))
}

fn count(influx: &Influx, db: &str, q: &str) -> u64 {
    influx.rows(db, q).first().and_then(|r| r[1].as_u64()).unwrap_or(0)
}

fn influx_post(influx: &Influx, path: &str, query: &[(&str, &str)], body: &str) {
    let r = reqwest::blocking::Client::new().post(format!("{}{path}", influx.url)).query(query).body(body.to_string()).send().expect("POST to influxd");
    assert!(r.status().is_success(), "{path}: {}", r.text().unwrap_or_default());
}

fn collector_cmd(c: &Collector, args: &[&str]) -> std::process::Output {
    Command::new(bin("wattflip-collector", "wattflip-collector")).arg("--config").arg(c.config()).args(args).output().expect("run wattflip-collector")
}

/// Scenario 1: a temperature sensor reads 600 °C for 2 s. Only those two readings are lost; the
/// power samples, the other temperatures, the SMART record and the events of the same batches are
/// stored and acknowledged, and the two drops are counted in events and metrics.
#[test]
fn scenario_1_one_bad_value_loses_only_itself() {
    let influx = Influx::start();
    let (c, m) = collector(&influx, "wf_s1", "");
    let id = "s1-agent";
    let t0 = now_ns() - 60_000_000_000;
    let mut msgs = vec![hello(id, 1, &[])];
    // The ledger of what this agent produced.
    let (mut good, mut bad) = (BTreeMap::<&str, u64>::new(), 0u64);
    for seq in 1..=20u64 {
        let t = t0 + seq as i64 * 1_000_000_000;
        let hot = (5..=6).contains(&seq);
        let mut b = v1::Batch {
            agent_id: id.into(),
            sequence: seq,
            power: vec![power(t, 100.0 + seq as f64)],
            temperature: vec![temp(t, "Composite", 45.0), temp(t, "Sensor 1", if hot { 600.0 } else { 46.0 }), temp(t, "Sensor 2", 47.0)],
            events: vec![event(t, "heartbeat")],
            ..Default::default()
        };
        if seq == 10 {
            b.nvme_smart.push(v1::NvmeSmart { time_ns: t, device: "nvme0".into(), serial: "S1".into(), composite_celsius: Some(45.0), ..Default::default() });
            *good.entry("nvme_smart").or_default() += 1;
        }
        *good.entry("power").or_default() += 1;
        *good.entry("temperature").or_default() += if hot { 2 } else { 3 };
        *good.entry("event").or_default() += 1;
        bad += u64::from(hot);
        msgs.push(msg(b));
    }
    let acks = acks(stream(&c, id, msgs));
    assert_eq!(acks.iter().map(|a| a.durable_sequence).collect::<Vec<_>>(), (1..=20).collect::<Vec<_>>());
    assert!(acks.iter().all(|a| !a.duplicate));
    let good_total: u64 = good.values().sum();
    assert_eq!(acks.iter().map(|a| a.points_stored).sum::<u64>(), good_total);
    assert_eq!(sum(&acks, |a| &a.points_rejected), BTreeMap::from([("out_of_range".to_string(), bad)]));
    assert_eq!(sum(&acks, |a| &a.points_dead_lettered), BTreeMap::new());
    assert_eq!(acks[4].points_rejected.get("out_of_range"), Some(&1), "batch 5 names its drop");

    let db = "wf_s1";
    let w = format!("host = '{id}'");
    assert_eq!(count(&influx, db, &format!("SELECT COUNT(watts) FROM power WHERE {w}")), good["power"]);
    assert_eq!(count(&influx, db, &format!("SELECT COUNT(celsius) FROM temperature WHERE {w}")), good["temperature"]);
    assert_eq!(count(&influx, db, &format!("SELECT COUNT(celsius) FROM temperature WHERE {w} AND celsius > 500")), 0);
    assert_eq!(count(&influx, db, &format!("SELECT COUNT(message) FROM event WHERE {w} AND kind = 'heartbeat'")), good["event"]);
    assert_eq!(count(&influx, db, &format!("SELECT COUNT(composite_celsius) FROM nvme_smart WHERE {w}")), good["nvme_smart"]);
    // Every drop, in an event that reached InfluxDB, naming field, value and rule.
    let rows = influx.rows(db, &format!("SELECT \"count\", attributes, \"field\", \"rule\" FROM event WHERE {w} AND kind = 'point_rejected'"));
    let got: Vec<(u64, &str, &str, &str)> =
        rows.iter().map(|r| (r[1].as_u64().unwrap(), r[2].as_str().unwrap(), r[3].as_str().unwrap(), r[4].as_str().unwrap())).collect();
    assert_eq!(
        got,
        [
            (1, "field=temperature.celsius rule=out_of_range value=600 sequence=5", "temperature.celsius", "out_of_range"),
            (1, "field=temperature.celsius rule=out_of_range value=600 sequence=6", "temperature.celsius", "out_of_range"),
        ]
    );
    let text = metrics(&m);
    assert_eq!(metric(&text, "wattflip_collector_points_rejected_total{reason=\"out_of_range\"}"), Some(bad));
    assert_eq!(metric(&text, "wattflip_collector_points_stored_total"), Some(good_total));
    assert_eq!(metric(&text, "wattflip_collector_batches_rejected_total"), Some(0));
    assert_eq!(metric(&text, "wattflip_collector_streams_opened_total"), Some(1), "no reconnects");
    eprintln!("scenario 1: collector peak RSS {} KiB", c.peak_rss_kib());
}

/// Scenario 2: the measurement exists with another field type. The refused points are not
/// acknowledged as stored: the Ack counts them as dead-lettered, they wait in the collector's
/// dead-letter store, and `dead-letter replay` stores them once the conflict is removed.
#[test]
fn scenario_2_a_type_conflict_is_dead_lettered_and_replayed() {
    let influx = Influx::start();
    let db = "wf_s2";
    let id = "s2-agent";
    let t0 = now_ns() - 60_000_000_000;
    // Created earlier by something else: `celsius` as an integer, in the same shard.
    influx_post(&influx, "/query", &[("q", &format!("CREATE DATABASE {db}"))], "");
    influx_post(&influx, "/write", &[("db", db), ("precision", "n")], &format!("temperature,host=other celsius=40i {}\n", t0));
    let (c, m) = collector(&influx, db, "");
    let mut msgs = vec![hello(id, 7, &[])];
    for seq in 1..=12u64 {
        let t = t0 + seq as i64 * 1_000_000_000;
        msgs.push(msg(v1::Batch {
            agent_id: id.into(),
            sequence: seq,
            power: vec![power(t, 200.0)],
            temperature: (0..10).map(|i| temp(t + i, &format!("Sensor {i}"), 40.5)).collect(),
            ..Default::default()
        }));
    }
    let acks = acks(stream(&c, id, msgs));
    assert_eq!(acks.len(), 12);
    assert_eq!(acks.iter().map(|a| a.points_stored).sum::<u64>(), 12, "the power samples");
    assert_eq!(sum(&acks, |a| &a.points_dead_lettered), BTreeMap::from([("type_conflict".to_string(), 120)]));
    assert_eq!(sum(&acks, |a| &a.points_rejected), BTreeMap::new());
    assert_eq!(count(&influx, db, &format!("SELECT COUNT(watts) FROM power WHERE host = '{id}'")), 12);
    let text = metrics(&m);
    assert_eq!(metric(&text, "wattflip_collector_points_dead_lettered_total{reason=\"type_conflict\"}"), Some(120));
    assert_eq!(metric(&text, "wattflip_collector_lines_dead_lettered_total{reason=\"type_conflict\"}"), Some(120));

    let out = collector_cmd(&c, &["dead-letter", "list"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let listed = String::from_utf8_lossy(&out.stdout).to_string();
    let summary = listed.lines().last().unwrap_or_default();
    assert!(summary.starts_with("120 line(s) in ") && summary.ends_with(": type_conflict=120"), "{summary}");
    assert_eq!(listed.lines().filter(|l| l.contains("\ttype_conflict\t") && l.contains(&format!("host={id}"))).count(), 120);

    // While the conflict stands, a replay stores nothing and keeps everything.
    let out = collector_cmd(&c, &["dead-letter", "replay", "--timeout", "20s"]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("replayed {} file(s): 0 line(s) stored, 120 refused again: type_conflict=120", count_files(&c))
    );
    // The operator removes the cause, then replays.
    influx_post(&influx, "/query", &[("db", db), ("q", "DROP MEASUREMENT temperature")], "");
    let out = collector_cmd(&c, &["dead-letter", "replay", "--timeout", "20s"]);
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains(": 120 line(s) stored, 0 refused again"), "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(count(&influx, db, &format!("SELECT COUNT(celsius) FROM temperature WHERE host = '{id}'")), 120);
    let out = collector_cmd(&c, &["dead-letter", "list"]);
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("0 line(s) in 0 file(s)"), "{}", String::from_utf8_lossy(&out.stdout));
    eprintln!("scenario 2: collector peak RSS {} KiB", c.peak_rss_kib());
}

fn count_files(c: &Collector) -> usize {
    std::fs::read_dir(c.dir.path().join("dead-letter"))
        .map(|d| d.filter_map(Result::ok).filter(|e| e.file_name().to_string_lossy().ends_with(".jsonl")).count())
        .unwrap_or(0)
}

/// Scenario 3: a value ending in a backslash. A label is refused up front (by `check-config` of
/// the agent and by the collector at Hello), naming its key; a tag value in a batch is refused
/// point by point; nothing reaches InfluxDB as an unparsable line.
#[test]
fn scenario_3_a_trailing_backslash_is_refused_up_front_with_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = agent_config(dir.path(), "agent_id = \"s3-agent\"\n[labels]\nsite = 'end\\'\n");
    let out = Command::new(bin("wattflip-agent", "wattflip-agent")).args(["check-config", "--config"]).arg(&cfg).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("labels.site") && stderr.contains("ends in a backslash"), "{stderr}");

    let influx = Influx::start();
    let db = "wf_s3";
    let (c, m) = collector(&influx, db, "");
    let id = "s3-agent";
    let answers = stream(&c, id, vec![hello(id, 1, &[("site", "end\\")])]);
    let err = answers[0].as_ref().unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().starts_with("hello.labels.site: ends in a backslash"), "{}", err.message());

    let t0 = now_ns() - 30_000_000_000;
    let mut b = v1::Batch { agent_id: id.into(), sequence: 1, ..Default::default() };
    b.temperature = vec![temp(t0, "Composite", 41.0), temp(t0 + 1, "odd\\", 42.0), temp(t0 + 2, "a\\b c,d=e", 43.0)];
    let acks = acks(stream(&c, id, vec![hello(id, 1, &[("site", "a\\b")]), msg(b)]));
    assert_eq!((acks[0].points_stored, acks[0].points_rejected.get("bad_tag")), (2, Some(&1)));
    // Every character of what was accepted is stored exactly.
    let sensors: Vec<String> = influx
        .rows(db, &format!("SELECT celsius, sensor, site FROM temperature WHERE host = '{id}'"))
        .iter()
        .map(|r| format!("{}|{}", r[2].as_str().unwrap(), r[3].as_str().unwrap()))
        .collect();
    assert_eq!(sensors, ["Composite|a\\b", "a\\b c,d=e|a\\b"]);
    let text = metrics(&m);
    assert_eq!(metric(&text, "wattflip_collector_points_rejected_total{reason=\"bad_tag\"}"), Some(1));
    assert_eq!(metric(&text, "wattflip_collector_lines_rejected_total"), Some(0), "InfluxDB refused nothing");
}

/// Scenario 7: the same agent id starts over with a new spool (new epoch) and reuses sequence
/// numbers with new content: all of it is new data. A resend within one epoch is a duplicate.
#[test]
fn scenario_7_a_reused_sequence_with_a_new_epoch_is_new_data() {
    let influx = Influx::start();
    let db = "wf_s7";
    let (c, m) = collector(&influx, db, "");
    let id = "s7-agent";
    let t0 = now_ns() - 120_000_000_000;
    let batch = |seq: u64, t: i64| msg(v1::Batch { agent_id: id.into(), sequence: seq, power: vec![power(t, seq as f64)], ..Default::default() });
    let first: Vec<AgentMessage> = std::iter::once(hello(id, 11, &[])).chain((1..=10).map(|s| batch(s, t0 + s as i64))).collect();
    let a = acks(stream(&c, id, first));
    assert_eq!((a.len(), a.iter().filter(|a| a.duplicate).count()), (10, 0));
    // Spool lost, clock gone back: new epoch, sequences 1..=10 again, new content (other times).
    let second: Vec<AgentMessage> = std::iter::once(hello(id, 12, &[])).chain((1..=10).map(|s| batch(s, t0 - 1_000_000 + s as i64))).collect();
    let b = acks(stream(&c, id, second));
    assert_eq!((b.len(), b.iter().filter(|a| a.duplicate).count(), b.iter().map(|a| a.points_stored).sum::<u64>()), (10, 0, 10));
    // The ack of batch 4 of epoch 12 was lost: the resend is recognised and not written again.
    let again = acks(stream(&c, id, vec![hello(id, 12, &[]), batch(4, t0 + 999)]));
    assert_eq!((again[0].durable_sequence, again[0].duplicate, again[0].points_stored), (4, true, 0));
    assert_eq!(count(&influx, db, &format!("SELECT COUNT(watts) FROM power WHERE host = '{id}'")), 20);
    assert_eq!(metric(&metrics(&m), "wattflip_collector_batches_duplicate_total"), Some(1));
}

/// Scenario 9 (collector side): an authenticated stream that never sends its Hello is closed after
/// `limits.hello_timeout`, and counted.
#[test]
fn scenario_9_a_stream_without_hello_is_closed() {
    let influx = Influx::start();
    let (c, m) = collector(&influx, "wf_s9", "[limits]\nhello_timeout = \"1s\"\n");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let err = rt.block_on(async {
        let cert = pki().issue("dl-s9", &["s9-agent"], None);
        let channel = pki().channel(&c.url, Some(cert)).await.unwrap();
        // A request stream that stays open and silent.
        let (_keep, rx) = tokio::sync::mpsc::channel::<AgentMessage>(1);
        let mut acks = IngestClient::new(channel).stream(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
        tokio::time::timeout(Duration::from_secs(10), acks.next()).await.expect("closed within 10 s").expect("an answer").unwrap_err()
    });
    assert_eq!(err.code(), tonic::Code::DeadlineExceeded);
    assert_eq!(err.message(), "no Hello within 1s; a stream starts with a Hello");
    assert_eq!(metric(&metrics(&m), "wattflip_collector_agents_rejected_total{reason=\"hello_timeout\"}"), Some(1));
}
