//! Cross-source validation end to end (issue 26): one host reporting PSU input and output power
//! through the real collector into influxd. Per one-minute window the collector writes the
//! `source_agreement` ratio (psu_out / psu_in) and, when it leaves the 0.80–0.97 efficiency band
//! or comes back, one `source_disagreement` event. The windows are built by hand: 500 W in and
//! 450 W out (0.9), then 250 W out (0.5: outside), then 450 W again (back), then one sample that
//! closes the third window.

use std::time::Duration;
use tokio_stream::StreamExt as _;
use wattflip_e2e::*;
use wattflip_proto::v1::{self, agent_message::Kind, AgentMessage};

const HOST: &str = "xs-1";
const MIN: i64 = 60_000_000_000;

fn sample(zone: &str, scope: &str, t: i64, watts: f64) -> v1::PowerSample {
    v1::PowerSample {
        time_ns: t,
        source: "pmbus".into(),
        zone: zone.into(),
        scope: scope.into(),
        method: v1::Method::Measured as i32,
        watts: Some(watts),
        interval_ns: 10_000_000_000,
        ..Default::default()
    }
}

/// Window `k` (six 10 s samples per zone) with `out_w` on the PSU output; window 3 is one sample.
fn window(w0: i64, k: i64, out_w: f64) -> AgentMessage {
    let n = if k == 3 { 1 } else { 6 };
    let mut power = Vec::new();
    for i in 0..n {
        let t = w0 + k * MIN + i * 10_000_000_000 + 5_000_000_000;
        power.push(sample("psu0/in", "psu_in", t, 500.0));
        power.push(sample("psu0/out", "psu_out", t, out_w));
    }
    AgentMessage { kind: Some(Kind::Batch(v1::Batch { agent_id: HOST.into(), sequence: k as u64 + 1, power, ..Default::default() })) }
}

#[test]
fn psu_efficiency_ratios_and_one_event_each_way() {
    let influx = Influx::start();
    let collector = Collector::start(&influx.url, "wf_sources");
    let now = wattflip_proto::units::UnixNanos::now().0;
    let w0 = (now - 10 * MIN).div_euclid(MIN) * MIN;
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let identity = pki().issue("sources-xs-1", &[HOST], None);
        let channel = pki().channel(&collector.url, Some(identity)).await.expect("connect to the collector");
        let mut client = v1::ingest_client::IngestClient::new(channel);
        let (tx, rx) = tokio::sync::mpsc::channel(8);
        let hello = v1::Hello { agent_id: HOST.into(), time_ns: now, protocol_version: wattflip_proto::PROTOCOL_VERSION, ..Default::default() };
        tx.send(AgentMessage { kind: Some(Kind::Hello(hello)) }).await.unwrap();
        let mut acks = client.stream(tokio_stream::wrappers::ReceiverStream::new(rx)).await.expect("open the stream").into_inner();
        for (k, out_w) in [(0, 450.0), (1, 250.0), (2, 450.0), (3, 450.0)] {
            tx.send(window(w0, k, out_w)).await.unwrap();
            let ack = tokio::time::timeout(Duration::from_secs(20), acks.next()).await.expect("ack within 20 s");
            assert_eq!(ack.expect("a reply").expect("no error").durable_sequence, k as u64 + 1);
        }
    });
    let q = format!("SELECT ratio, within FROM source_agreement WHERE host = '{HOST}' AND \"check\" = 'psu_efficiency'");
    let rows =
        wait_for(Duration::from_secs(10), || influx.try_rows("wf_sources", &q).filter(|r| r.len() >= 3)).unwrap_or_else(|| panic!("{}", collector.log()));
    let got: Vec<(i64, f64, bool)> = rows.iter().map(|r| (r[0].as_i64().unwrap(), r[1].as_f64().unwrap(), r[2].as_bool().unwrap())).collect();
    // Each window's point at its end: 450/500, 250/500, 450/500.
    assert_eq!(got, vec![(w0 + MIN, 0.9, true), (w0 + 2 * MIN, 0.5, false), (w0 + 3 * MIN, 0.9, true)], "{}", collector.log());
    let q = format!("SELECT severity, message FROM event WHERE host = '{HOST}' AND kind = 'source_disagreement'");
    let events = influx.rows("wf_sources", &q);
    let got: Vec<(i64, String)> = events.iter().map(|r| (r[0].as_i64().unwrap(), r[1].as_str().unwrap().to_string())).collect();
    assert_eq!(got, vec![(w0 + 2 * MIN, "warning".to_string()), (w0 + 3 * MIN, "info".to_string())], "{events:?}");
}
