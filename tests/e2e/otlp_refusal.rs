//! One host's refused sample costs no other point (issue 38), through the real collector, InfluxDB
//! and Prometheus. Prometheus rolls a whole OTLP request back for one out-of-order sample and
//! answers 400; the collector packs several agents' batches into one request. Two hosts stream
//! through one collector with a required OTLP sink; in one flush window host A resends a window
//! older than its newest (out of order: refused) and a fresh one, host B two fresh ones. Every
//! fresh window of both hosts is in Prometheus and acknowledged as stored; A's old window alone
//! is acknowledged with nothing stored and counted as refused. The same scenario against a real
//! Thanos receive (409 for the out-of-order sample, the rest stored): `thanos_store::refusal`.

use std::time::Duration;
use tokio_stream::StreamExt as _;
use wattflip_e2e::prometheus::Prometheus;
use wattflip_e2e::*;
use wattflip_proto::v1::{self, agent_message::Kind, AgentMessage};

const A: &str = "otlp-ref-a";
const B: &str = "otlp-ref-b";

/// Host `host`'s watts in window `k` (half-seconds allowed: `k2` is twice the window index; a
/// window before t0 repeats the pattern, so every value is in the physical range).
fn watts(host: &str, k2: i64) -> f64 {
    let base = if host == A { 10.0 } else { 100.0 };
    base + k2.rem_euclid(40) as f64 * 0.25
}

/// An agent's run stream, driven one batch at a time from blocking test code.
struct Agent {
    rt: tokio::runtime::Runtime,
    tx: tokio::sync::mpsc::Sender<AgentMessage>,
    acks: tonic::Streaming<v1::Ack>,
    host: &'static str,
    t0: i64,
    seq: u64,
}

impl Agent {
    fn connect(url: &str, host: &'static str, t0: i64) -> Agent {
        let (rt, tx, acks) = crate::otlp_outage::open_rapl_stream(url, host, t0);
        Agent { rt, tx, acks, host, t0, seq: 0 }
    }

    /// Sends the window ending at t0 + k2/2 s (one RAPL sample) as the next batch.
    fn send(&mut self, k2: i64) {
        self.seq += 1;
        let power = vec![v1::PowerSample {
            time_ns: self.t0 + k2 * 500_000_000,
            source: "rapl".into(),
            zone: "package-0".into(),
            scope: "package".into(),
            method: v1::Method::Measured as i32,
            watts: Some(watts(self.host, k2)),
            joules: Some(watts(self.host, k2)),
            interval_ns: 1_000_000_000,
            ..Default::default()
        }];
        let batch = v1::Batch { agent_id: self.host.into(), sequence: self.seq, power, ..Default::default() };
        self.rt.block_on(self.tx.send(AgentMessage { kind: Some(Kind::Batch(batch)) })).unwrap();
    }

    /// The next Ack's (sequence, points stored).
    fn ack(&mut self) -> (u64, u64) {
        let acks = &mut self.acks;
        let next = self.rt.block_on(async { tokio::time::timeout(Duration::from_secs(30), acks.next()).await }).expect("an Ack within 30 s");
        let a = next.expect("a reply").expect("no error");
        (a.durable_sequence, a.points_stored)
    }
}

/// A counter of the collector's metrics page, 0 when absent.
fn metric(port: u16, line_start: &str) -> u64 {
    let text = reqwest::blocking::get(format!("http://127.0.0.1:{port}/metrics")).and_then(|r| r.text()).unwrap_or_default();
    text.lines().find_map(|l| l.strip_prefix(line_start).and_then(|v| v.trim().parse::<f64>().ok())).map(|v| v as u64).unwrap_or(0)
}

#[test]
fn an_out_of_order_window_of_one_host_costs_no_other_window_in_the_same_request() {
    let prom = Prometheus::start();
    // Window 1.5 s: older than the series' newest (3 s), out of order for Prometheus.
    one_flush_window(&prom.otlp_url(), "wf_otlp_refusal", 3, &|host, t0| {
        let series = prom.samples(&format!("hw_power_watts{{instance=\"{host}\"}}"), "30m", t0 as f64 / 1e9 + 10.0);
        assert_eq!(series.len(), 1, "one series of {host}: {series:?}");
        series[0].1.iter().map(|(t, v)| (t - t0 as f64 / 1e9, *v)).collect()
    });
}

/// Reads a host's `hw_power_watts` samples back from the receiver: (host, t0) → (s after t0, W).
pub(crate) type Stored<'a> = dyn Fn(&str, i64) -> Vec<(f64, f64)> + 'a;

/// The scenario above against the receiver at `otlp_url`, A's refused window being `old_k2`;
/// `stored(host, t0)` reads back the host's `hw_power_watts` samples from that receiver as
/// (seconds after t0, watts).
pub(crate) fn one_flush_window(otlp_url: &str, db: &str, old_k2: i64, stored: &Stored<'_>) {
    let influx = Influx::start();
    let mport = free_port();
    // A flush window of 2 s: the batches sent together below go out as one request.
    let extra = format!(
        "{}\n[otlp]\nurl = \"{otlp_url}\"\nrequired = true\nflush_interval = \"2s\"\nmax_backoff = \"1s\"\n[metrics]\nlisten = \"127.0.0.1:{mport}\"\n",
        pki().collector_tls(),
    );
    let collector = Collector::start_with(free_port(), &influx.url, db, &extra);
    let now = wattflip_e2e::fleet::now_ns();
    let t0 = now - now.rem_euclid(1_000_000_000) - 30_000_000_000;
    let (mut a, mut b) = (Agent::connect(&collector.url, A, t0), Agent::connect(&collector.url, B, t0));
    // Windows 0..3 of both hosts (k2 = 0, 2, 4, 6), each acknowledged as stored.
    for k2 in [0, 2, 4, 6] {
        a.send(k2);
        b.send(k2);
        assert_eq!(a.ack(), (a.seq, 1), "{}", collector.log());
        assert_eq!(b.ack(), (b.seq, 1), "{}", collector.log());
    }
    // One flush window: A's old window (refused) and its window 4; B's windows 4 and 5.
    a.send(old_k2);
    a.send(8);
    b.send(8);
    b.send(10);
    let acks = [a.ack(), a.ack(), b.ack(), b.ack()];
    let want = |host: &str, k2s: &[i64]| k2s.iter().map(|&k2| (k2 as f64 / 2.0, watts(host, k2))).collect::<Vec<_>>();
    assert_eq!(stored(B, t0), want(B, &[0, 2, 4, 6, 8, 10]), "B's windows in the receiver\n{}", collector.log());
    assert_eq!(stored(A, t0), want(A, &[0, 2, 4, 6, 8]), "A's windows in the receiver\n{}", collector.log());
    // A's out-of-order window is acknowledged with nothing stored; the fresh ones as stored.
    assert_eq!(acks, [(5, 0), (6, 1), (5, 1), (6, 1)], "{}", collector.log());
    // The refused window's points: its hw.power alone (its energy is not newer than the
    // series' newest, so no hw.energy; the host totals stay at the newest window's time, 3 s).
    let refused = metric(mport, "wattflip_collector_otlp_points_dead_lettered_total{reason=\"refused\"} ");
    assert_eq!(refused, 1, "{}", collector.log());
    assert!(metric(mport, "wattflip_collector_otlp_requests_split_total ") >= 1, "{}", collector.log());
    assert!(collector.log().contains(&format!("refused 1 points of {A}")), "a WARN names the host:\n{}", collector.log());
    // InfluxDB holds every window of both hosts, the out-of-order one included.
    assert_eq!(influx.rows(db, "SELECT count(\"watts\") FROM \"power\"")[0][1], serde_json::json!(12));
}
