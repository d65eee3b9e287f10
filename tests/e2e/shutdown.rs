//! SIGTERM with an agent streaming (issue 38): the collector stops accepting, acknowledges what it
//! has queued, ends the stream with `unavailable` (which agents resume from), drains its writer
//! and exits 0 well within its bound (21 s; systemd allows 30 s), instead of acknowledging on
//! until SIGKILL. Every batch acknowledged before the end is in InfluxDB.

use std::time::Duration;
use tokio_stream::StreamExt as _;
use wattflip_e2e::*;
use wattflip_proto::v1::{self, agent_message::Kind, ingest_client::IngestClient, AgentMessage};

const DB: &str = "wf_shutdown";

fn now_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as i64
}

#[test]
fn sigterm_ends_every_stream_with_unavailable_and_exits_within_its_bound() {
    let influx = Influx::start();
    let collector = Collector::start(&influx.url, DB);
    let id = pki().issue("agent-stopper", &["stopper"], None);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let url = collector.url.clone();
    let (acked_tx, mut acked_rx) = tokio::sync::watch::channel(0u64);
    // An agent sending a 4-point batch every 50 ms until its stream ends.
    let client = rt.spawn(async move {
        let ch = pki().channel(&url, Some(id)).await.unwrap();
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        tx.send(AgentMessage { kind: Some(Kind::Hello(v1::Hello { agent_id: "stopper".into(), time_ns: now_ns(), ..Default::default() })) }).await.unwrap();
        let sender = tokio::spawn(async move {
            for seq in 1.. {
                if tx.send(temperature_batch("stopper", seq, 4, now_ns() - 1_000_000_000)).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        let mut acks = IngestClient::new(ch).stream(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
        let end = loop {
            match tokio::time::timeout(Duration::from_secs(60), acks.next()).await {
                Ok(Some(Ok(a))) => {
                    let _ = acked_tx.send(a.durable_sequence);
                }
                Ok(Some(Err(s))) => break Ok(s),
                Ok(None) => break Err("the stream ended without a status".to_string()),
                Err(_) => break Err("no answer within 60 s".to_string()),
            }
        };
        sender.abort();
        end
    });
    rt.block_on(async { tokio::time::timeout(Duration::from_secs(20), acked_rx.wait_for(|n| *n >= 10)).await.expect("10 Acks within 20 s").unwrap() });
    let (took, status) = collector.terminate();
    let end = rt.block_on(client).unwrap();
    let acked = *acked_rx.borrow();
    eprintln!("the collector exited {took:?} after SIGTERM ({status}); {acked} batches acknowledged");
    let status_of_stream = end.expect("the stream ends with a status");
    assert_eq!(status_of_stream.code(), tonic::Code::Unavailable, "{status_of_stream:?}");
    assert_eq!(status_of_stream.message(), "collector is shutting down; resend unacknowledged batches");
    assert!(status.success(), "{status}");
    assert!(took < Duration::from_secs(5), "a graceful stop with one healthy stream took {took:?}");
    // Acknowledged means stored: every batch up to the last Ack, 4 points each.
    let stored = influx.rows(DB, "SELECT count(celsius) FROM temperature WHERE host = 'stopper'");
    assert!(stored[0][1].as_u64().unwrap() >= acked * 4, "{stored:?} for {acked} batches");
}
