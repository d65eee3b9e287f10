//! Skewed clocks and impossible values at the real collector (issue 38): a temperature stamped a
//! year ahead, one from before `limits.max_time_behind`, −5 W and 1e300 W are each refused alone
//! with a named rule (Ack, `/metrics`, one rate-limited WARN), the rest of the batch is stored, and
//! the drive's later readings are analysed as if the bad ones had never come: none is "late" for
//! the throttling detector.

use std::collections::HashMap;
use std::time::Duration;
use tokio_stream::StreamExt as _;
use wattflip_e2e::*;
use wattflip_proto::v1::{self, agent_message::Kind, ingest_client::IngestClient, Ack, AgentMessage};

const DB: &str = "wf_clocks";
const HOST: &str = "e2e-clocks";
const S: i64 = 1_000_000_000;
const DAY: i64 = 86_400 * S;

fn now_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as i64
}

fn temp(t: i64, celsius: f64) -> v1::TemperatureSample {
    v1::TemperatureSample { time_ns: t, source: "nvme_cli".into(), device: "nvme0".into(), sensor: "Composite".into(), celsius }
}

fn power(t: i64, scope: &str, watts: f64) -> v1::PowerSample {
    v1::PowerSample {
        time_ns: t,
        source: "hwmon".into(),
        zone: format!("{scope}-0"),
        scope: scope.into(),
        method: v1::Method::Measured as i32,
        watts: Some(watts),
        interval_ns: S,
        ..Default::default()
    }
}

fn batch(seq: u64, temperature: Vec<v1::TemperatureSample>, power: Vec<v1::PowerSample>) -> AgentMessage {
    AgentMessage { kind: Some(Kind::Batch(v1::Batch { agent_id: HOST.into(), sequence: seq, temperature, power, ..Default::default() })) }
}

fn metric(text: &str, line_start: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(line_start).and_then(|v| v.trim().parse().ok()))
}

fn rejected(a: &Ack) -> HashMap<&str, u64> {
    a.points_rejected.iter().map(|(k, v)| (k.as_str(), *v)).collect()
}

#[test]
fn skewed_and_impossible_points_are_refused_alone_and_never_change_later_analysis() {
    let influx = Influx::start();
    let metrics_addr = format!("127.0.0.1:{}", free_port());
    let collector = Collector::start_with(free_port(), &influx.url, DB, &format!("{}[metrics]\nlisten = \"{metrics_addr}\"\n", pki().collector_tls()));
    let id = pki().issue("agent-clocks", &[HOST], None);
    let now = now_ns();
    let hello = AgentMessage { kind: Some(Kind::Hello(v1::Hello { agent_id: HOST.into(), time_ns: now, ..Default::default() })) };
    // Batch 1: a reading a year ahead, one 40 days old (the default bound is 30 days), one good
    // drive power reading, −5 W on a drive and 1e300 W on a package.
    let first = batch(
        1,
        vec![temp(now + 365 * DAY, 45.0), temp(now - 40 * DAY, 44.0)],
        vec![power(now - 90 * S, "drive", 7.5), power(now - 89 * S, "drive", -5.0), power(now - 88 * S, "package", 1e300)],
    );
    // Batch 2: the drive's real readings of the last minute, one per second.
    let real = batch(2, (0..60).map(|i| temp(now - (60 - i) * S, 40.0 + i as f64 * 0.125)).collect(), vec![]);
    // Batches 3 to 5: one more reading a year ahead each, within the WARN interval (10 s).
    let more: Vec<_> = (3..6).map(|seq| batch(seq, vec![temp(now + 365 * DAY + seq as i64, 46.0)], vec![])).collect();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let acks: Vec<Ack> = rt.block_on(async {
        let ch = pki().channel(&collector.url, Some(id)).await.unwrap();
        let msgs: Vec<AgentMessage> = [hello, first, real].into_iter().chain(more).collect();
        let mut acks = IngestClient::new(ch).stream(tokio_stream::iter(msgs)).await.unwrap().into_inner();
        let mut out = Vec::new();
        while out.len() < 5 {
            match tokio::time::timeout(Duration::from_secs(20), acks.next()).await.expect("an Ack within 20 s") {
                Some(Ok(a)) => out.push(a),
                other => panic!("stream ended after {} Acks: {other:?}\n{}", out.len(), collector.log()),
            }
        }
        out
    });
    assert_eq!(acks.iter().map(|a| a.durable_sequence).collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
    assert_eq!(rejected(&acks[0]), HashMap::from([("time_ahead", 1), ("time_behind", 1), ("out_of_range", 2)]), "{:?}", acks[0]);
    assert_eq!(acks[0].points_stored, 1);
    assert_eq!((rejected(&acks[1]), acks[1].points_stored), (HashMap::new(), 60));
    for a in &acks[2..] {
        assert_eq!((rejected(a), a.points_stored), (HashMap::from([("time_ahead", 1)]), 0), "{a:?}");
    }
    let m = reqwest::blocking::get(format!("http://{metrics_addr}/metrics")).unwrap().text().unwrap();
    let count = |r: &str| metric(&m, &format!("wattflip_collector_points_rejected_total{{reason=\"{r}\"}}"));
    assert_eq!((count("time_ahead"), count("time_behind"), count("out_of_range")), (Some(4.0), Some(1.0), Some(2.0)), "{m}");
    // The detector never saw the reading a year ahead: the real ones are placed, not late.
    assert_eq!(metric(&m, "wattflip_collector_throttle_late_readings_total"), Some(0.0), "{m}");
    // Stored: the 60 real temperatures and the 7.5 W reading, nothing else.
    assert_eq!(influx.rows(DB, "SELECT count(celsius) FROM temperature")[0][1], 60, "temperatures stored");
    assert_eq!(influx.rows(DB, "SELECT count(celsius) FROM temperature WHERE time > now() + 1h"), Vec::<Vec<serde_json::Value>>::new());
    let watts = influx.rows(DB, "SELECT watts FROM power");
    assert_eq!(watts.iter().map(|r| r[1].as_f64().unwrap()).collect::<Vec<_>>(), [7.5], "power stored");
    // Each refusal is in a point_rejected event (one per field and rule of a batch), stamped now,
    // not a year ahead; the WARN is logged once for the four batches.
    let rules = influx.rows(DB, "SELECT count, rule FROM event WHERE kind = 'point_rejected' AND time < now() + 1h AND time > now() - 1h");
    let mut by_rule: Vec<(String, i64)> = rules.iter().map(|r| (r[2].as_str().unwrap().to_string(), r[1].as_i64().unwrap())).collect();
    by_rule.sort();
    assert_eq!(
        by_rule,
        [("out_of_range", 2), ("time_ahead", 1), ("time_ahead", 1), ("time_ahead", 1), ("time_ahead", 1), ("time_behind", 1)].map(|(r, n)| (r.to_string(), n))
    );
    let log = collector.log();
    assert_eq!(log.matches("left out invalid points").count(), 1, "{log}");
    // The one WARN names the batch's first refusal and how many there were.
    assert!(log.contains("first: power[1].watts = -5: -5 W is outside -1..200 W for scope `drive`; check the unit"), "{log}");
}
