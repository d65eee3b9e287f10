//! Acknowledgement with two sinks (issue 28 item 2), through the real collector, InfluxDB and
//! Prometheus. Optional OTLP sink: Prometheus is down for 60 s (the issue's figure, real time)
//! while one agent streams a window a second-ish; every batch is acknowledged promptly (the Ack
//! waits for InfluxDB only), InfluxDB holds every acknowledged point, the bounded retry queue
//! drops its oldest points and counts them exactly (what Prometheus lacks is what the metrics page
//! says was dropped), and the energy counter's total is still exact after the gap. Required OTLP
//! sink: an Ack waits until Prometheus is back and has the batch; a batch Prometheus refuses (too
//! old) is acknowledged and its points counted as refused.

use std::time::{Duration, Instant};
use tokio_stream::StreamExt as _;
use wattflip_e2e::prometheus::Prometheus;
use wattflip_e2e::*;
use wattflip_proto::v1::{self, agent_message::Kind, AgentMessage};

const HOST: &str = "otlp-out";
/// hw.power, hw.energy, hw.host.power, hw.host.energy: the points of one window of one RAPL zone.
const POINTS_PER_BATCH: u64 = 4;

fn watts(k: u64) -> f64 {
    10.0 + k as f64 * 0.25
}

fn window(t0: i64, k: u64) -> AgentMessage {
    let power = vec![v1::PowerSample {
        time_ns: t0 + k as i64 * 1_000_000_000,
        source: "rapl".into(),
        zone: "package-0".into(),
        scope: "package".into(),
        method: v1::Method::Measured as i32,
        watts: Some(watts(k)),
        joules: Some(watts(k)),
        interval_ns: 1_000_000_000,
        ..Default::default()
    }];
    AgentMessage { kind: Some(Kind::Batch(v1::Batch { agent_id: HOST.into(), sequence: k + 1, power, ..Default::default() })) }
}

/// An agent's run stream, driven one batch at a time from blocking test code.
struct Agent {
    rt: tokio::runtime::Runtime,
    tx: tokio::sync::mpsc::Sender<AgentMessage>,
    acks: tonic::Streaming<v1::Ack>,
    t0: i64,
}

impl Agent {
    fn connect(url: &str, t0: i64) -> Agent {
        let (rt, tx, acks) = open_rapl_stream(url, HOST, t0);
        Agent { rt, tx, acks, t0 }
    }

    fn send(&mut self, k: u64) {
        self.rt.block_on(self.tx.send(window(self.t0, k))).unwrap();
    }

    /// The next Ack within `within`, or None.
    fn ack(&mut self, within: Duration) -> Option<u64> {
        let acks = &mut self.acks;
        let next = self.rt.block_on(async { tokio::time::timeout(within, acks.next()).await }).ok()?;
        Some(next.expect("a reply").expect("no error").durable_sequence)
    }
}

/// A counter of the collector's metrics page, 0 when absent.
fn metric(port: u16, line_start: &str) -> u64 {
    let text = reqwest::blocking::get(format!("http://127.0.0.1:{port}/metrics")).and_then(|r| r.text()).unwrap_or_default();
    text.lines().find_map(|l| l.strip_prefix(line_start).and_then(|v| v.trim().parse::<f64>().ok())).map(|v| v as u64).unwrap_or(0)
}

fn config(prom: &Prometheus, metrics_port: u16, required: bool) -> String {
    format!(
        "{}\n[otlp]\nurl = \"{}\"\nrequired = {required}\nflush_interval = \"100ms\"\nmax_backoff = \"1s\"\nbatch_points = 8\nqueue_points = 40\n[metrics]\nlisten = \"127.0.0.1:{metrics_port}\"\n",
        pki().collector_tls(),
        prom.otlp_url()
    )
}

fn now_t0(batches: i64) -> i64 {
    let now = wattflip_e2e::fleet::now_ns();
    now - now.rem_euclid(1_000_000_000) - (batches + 5) * 1_000_000_000
}

#[test]
fn an_optional_sink_down_for_60_s_never_holds_back_acks_and_counts_exactly_what_it_dropped() {
    let mut prom = Prometheus::start();
    let influx = Influx::start();
    let mport = free_port();
    let collector = Collector::start_with(free_port(), &influx.url, "wf_otlp_out", &config(&prom, mport, false));
    let total: u64 = 40;
    let t0 = now_t0(total as i64);
    let mut agent = Agent::connect(&collector.url, t0);
    let sent = |n: u64| move || (metric(mport, "wattflip_collector_otlp_points_sent_total ") >= n).then_some(());
    for k in 0..5 {
        agent.send(k);
        assert_eq!(agent.ack(Duration::from_secs(20)), Some(k + 1));
    }
    assert!(wait_for(Duration::from_secs(20), sent(5 * POINTS_PER_BATCH)).is_some(), "{}", collector.log());
    prom.stop();
    // 60 s down, a window every 2 s: each acknowledged within 5 s (the optional sink is not waited for).
    let down = Instant::now();
    let mut k = 5;
    while down.elapsed() < Duration::from_secs(60) {
        let asked = Instant::now();
        agent.send(k);
        assert_eq!(agent.ack(Duration::from_secs(5)), Some(k + 1), "batch {k} not acknowledged within 5 s while the optional sink was down");
        k += 1;
        std::thread::sleep(Duration::from_secs(2).saturating_sub(asked.elapsed()));
    }
    let outage_end = k;
    prom.restart();
    while k < outage_end + 5 {
        agent.send(k);
        assert_eq!(agent.ack(Duration::from_secs(20)), Some(k + 1));
        k += 1;
    }
    let batches = k;
    let dead = |m: u16| metric(m, "wattflip_collector_otlp_points_dead_lettered_total{reason=\"queue_full\"} ");
    let settled = wait_for(Duration::from_secs(30), || {
        (metric(mport, "wattflip_collector_otlp_points_queued ") == 0
            && metric(mport, "wattflip_collector_otlp_points_sent_total ") + dead(mport) == batches * POINTS_PER_BATCH)
            .then_some(())
    });
    assert!(
        settled.is_some(),
        "the OTLP queue never drained: sent {}, dropped {}\n{}",
        metric(mport, "wattflip_collector_otlp_points_sent_total "),
        dead(mport),
        collector.log()
    );
    // The required sink has every acknowledged point.
    let rows = influx.rows("wf_otlp_out", "SELECT \"watts\" FROM \"power\"");
    let stored: Vec<f64> = rows.iter().map(|r| r[1].as_f64().unwrap()).collect();
    assert_eq!(stored, (0..batches).map(watts).collect::<Vec<_>>(), "InfluxDB misses an acknowledged point");
    // Prometheus has every window but one contiguous stretch of the outage's oldest (the queue
    // drops its oldest); exactly those points are counted as dropped.
    let t_end = (t0 as f64) / 1e9 + batches as f64 + 5.0;
    let series = prom.samples(&format!("hw_power_watts{{instance=\"{HOST}\"}}"), "30m", t_end);
    let present: Vec<u64> = series[0].1.iter().map(|(t, _)| (t - t0 as f64 / 1e9).round() as u64).collect();
    let missing: Vec<u64> = (0..batches).filter(|k| !present.contains(k)).collect();
    assert!(!missing.is_empty(), "a 60 s outage with a 40-point queue must drop points");
    assert!(missing[0] >= 5 && *missing.last().unwrap() < outage_end, "{missing:?}");
    assert_eq!(missing.len() as u64, missing.last().unwrap() - missing[0] + 1, "not one contiguous stretch: {missing:?}");
    assert_eq!(dead(mport), missing.len() as u64 * POINTS_PER_BATCH, "dropped points counted");
    // The counter's total still holds every joule (a cumulative sum loses no energy to a gap).
    let energy = prom.samples(&format!("hw_energy_joules_total{{instance=\"{HOST}\"}}"), "30m", t_end);
    let joules: f64 = (0..batches).map(watts).sum();
    assert_eq!(energy[0].1.last().map(|s| s.1), Some(joules));
    assert!(collector.log().contains("retry queue is full"), "a WARN says points were dropped:\n{}", collector.log());
}

#[test]
fn a_required_sink_holds_the_ack_until_the_receiver_has_the_batch() {
    let mut prom = Prometheus::start();
    let influx = Influx::start();
    let mport = free_port();
    let collector = Collector::start_with(free_port(), &influx.url, "wf_otlp_req", &config(&prom, mport, true));
    let t0 = now_t0(6);
    let mut agent = Agent::connect(&collector.url, t0);
    for k in 0..3 {
        agent.send(k);
        assert_eq!(agent.ack(Duration::from_secs(20)), Some(k + 1));
    }
    prom.stop();
    agent.send(3);
    assert_eq!(agent.ack(Duration::from_secs(5)), None, "acknowledged while the required sink was down");
    prom.restart();
    assert_eq!(agent.ack(Duration::from_secs(30)), Some(4), "{}", collector.log());
    let t_end = (t0 as f64) / 1e9 + 10.0;
    let series = prom.samples(&format!("hw_power_watts{{instance=\"{HOST}\"}}"), "30m", t_end);
    assert_eq!(series[0].1.iter().map(|s| s.1).collect::<Vec<_>>(), (0..4).map(watts).collect::<Vec<_>>());
    assert_eq!(metric(mport, "wattflip_collector_otlp_points_dead_lettered_total{reason=\"queue_full\"} "), 0);
    // A zone whose first window is 3 h old: Prometheus refuses it (400, older than its head
    // block); the Ack comes (a refusal is final), its 2 points (hw.power, hw.energy) are counted.
    let mut old = window(t0 - 3 * 3_600_000_000_000, 4);
    if let Some(Kind::Batch(b)) = &mut old.kind {
        b.power[0].zone = "package-1".into();
    }
    agent.rt.block_on(agent.tx.send(old)).unwrap();
    assert_eq!(agent.ack(Duration::from_secs(20)), Some(5), "{}", collector.log());
    assert_eq!(metric(mport, "wattflip_collector_otlp_points_dead_lettered_total{reason=\"refused\"} "), 2, "{}", collector.log());
    assert_eq!(influx.rows("wf_otlp_req", "SELECT count(\"watts\") FROM \"power\"")[0][1], serde_json::json!(5));
}

/// The run stream of agent `host` with one RAPL counter in its Hello (stream epoch 11), opened on
/// the collector at `url`: its runtime, its sender and its Acks. Shared with `otlp_refusal`.
pub(crate) fn open_rapl_stream(
    url: &str,
    host: &str,
    t0: i64,
) -> (tokio::runtime::Runtime, tokio::sync::mpsc::Sender<AgentMessage>, tonic::Streaming<v1::Ack>) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (tx, acks) = rt.block_on(async {
        let identity = pki().issue(&format!("otlp-{host}"), &[host], None);
        let channel = pki().channel(url, Some(identity)).await.expect("connect to the collector");
        let mut client = v1::ingest_client::IngestClient::new(channel);
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let source = v1::PowerSource {
            source: "rapl".into(),
            zone: "package-0".into(),
            scope: "package".into(),
            counter: true,
            enabled: true,
            path: "/sys/fixture/package-0".into(),
            ..Default::default()
        };
        let hello = v1::Hello {
            agent_id: host.into(),
            hostname: host.into(),
            agent_version: env!("CARGO_PKG_VERSION").into(),
            protocol_version: wattflip_proto::PROTOCOL_VERSION,
            inventory: Some(v1::Inventory { power_sources: vec![source], ..Default::default() }),
            time_ns: t0,
            session: "run".into(),
            stream_epoch: 11,
            ..Default::default()
        };
        tx.send(AgentMessage { kind: Some(Kind::Hello(hello)) }).await.unwrap();
        let acks = client.stream(tokio_stream::wrappers::ReceiverStream::new(rx)).await.expect("open the run stream").into_inner();
        (tx, acks)
    });
    (rt, tx, acks)
}
