//! A batch resent through another collector must not wedge it (issue 29). Each collector keeps
//! its own cumulative totals for `hw.energy`, so a counter source's batch that c1 stored but did
//! not acknowledge (c1 died), resent by the agent through c2, carries another running total for
//! the same series and millisecond. When that millisecond is the series' newest, Thanos keeps the
//! first value and answers 409 Conflict (after storing the rest of the request); a required OTLP
//! sink that retried 409 like a 5xx would never complete the job, and every agent of c2 would
//! wait for acknowledgements forever.

use super::faults::collector;
use crate::otlp_fleet::{fleet_t0, run_hello, window_batch, Zone, BUCKETS, BUCKET_NS};
use std::time::Duration;
use tokio_stream::StreamExt as _;
use wattflip_e2e::thanos::Thanos;
use wattflip_e2e::*;
use wattflip_proto::v1::{self, AgentMessage};

const HOST: &str = "thanos-conflict";

/// One RAPL package counter: 10 W in window 0, 20 W in window 1 (100 J, then 200 J per 10 s).
fn zones() -> Vec<Zone> {
    let mut watts = [0.0; BUCKETS];
    watts[0] = 10.0;
    watts[1] = 20.0;
    vec![Zone { source: "rapl", zone: "package-0", scope: "package", counter: true, watts }]
}

/// Streams `msgs` to the collector at `url` as HOST; the highest acknowledged sequence once it
/// reaches `last`, or the highest seen when `within` ends first.
fn acknowledged(url: &str, msgs: Vec<AgentMessage>, last: u64, within: Duration) -> u64 {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let channel = pki().channel(url, Some(pki().issue(HOST, &[HOST], None))).await.expect("connect to the collector");
        let mut client = v1::ingest_client::IngestClient::new(channel);
        // The stream stays open (no half-close) until the Acks are in.
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        for m in msgs {
            tx.send(m).await.unwrap();
        }
        let mut acks = client.stream(tokio_stream::wrappers::ReceiverStream::new(rx)).await.expect("open the stream").into_inner();
        let mut highest = 0;
        let deadline = tokio::time::Instant::now() + within;
        while highest < last {
            match tokio::time::timeout_at(deadline, acks.next()).await {
                Ok(Some(Ok(a))) => highest = highest.max(a.durable_sequence),
                Ok(other) => panic!("the stream ended without the Acks: {other:?}"),
                Err(_) => break,
            }
        }
        highest
    })
}

#[test]
fn a_counter_batch_resent_through_another_collector_is_acknowledged_there() {
    let thanos = Thanos::start();
    let influx = Influx::start();
    let c1 = collector(free_port(), &influx, &thanos.receivers[0].otlp_url());
    let c2 = collector(free_port(), &influx, &thanos.receivers[1].otlp_url());
    let (t0, z) = (fleet_t0(), zones());
    let (hello, window) = (|| run_hello(HOST, "r1", &z, false, t0), |k| window_batch(HOST, &z, false, t0, k));
    // c1 stores windows 0 and 1 (sequences 1, 2): hw.energy 100 J, then 300 J.
    assert_eq!(acknowledged(&c1.url, vec![hello(), window(0), window(1)], 2, Duration::from_secs(30)), 2, "c1:\n{}", c1.log());
    // The agent did not get c1's Ack for window 1 and sends it again through c2, whose total for
    // the series starts there: 200 J for the same millisecond, against Thanos's 300 J.
    let got = acknowledged(&c2.url, vec![hello(), window(1)], 2, Duration::from_secs(20));
    assert_eq!(got, 2, "c2 never acknowledged the resent batch (Thanos answers 409 for the conflicting total); c2's log:\n{}", c2.log());
    // Thanos kept the first total.
    let (t1, t2) = ((t0 + 1_000_000_000) / 1_000_000, (t0 + BUCKET_NS + 1_000_000_000) / 1_000_000);
    thanos.wait_stores_cover(t2);
    let energy = thanos.query(&format!("hw_energy_joules_total{{instance=\"{HOST}\",hw_id=\"rapl:package-0\"}}[5m]"), t2 as f64 / 1000.0 + 1.0, true);
    let samples: Vec<Vec<(i64, f64)>> = energy.iter().map(|s| s.samples.clone()).collect();
    assert_eq!(samples, vec![vec![(t1, 100.0), (t2, 300.0)]], "{energy:?}");
}
