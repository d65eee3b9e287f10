//! Idle connections never lock out a real agent (issue 38): with the collector's open-file limit at
//! 512, 1,000 clients finish TLS and HTTP/2 and then open no stream (they answer pings, nothing
//! else). The collector holds at most `limits.max_connections` (here what 512 descriptors allow),
//! makes room by closing the connection idle the longest, closes the rest after
//! `limits.hello_timeout`, counts each by reason, and a real agent's batch is acknowledged at once.

use std::time::{Duration, Instant};
use tokio_stream::StreamExt as _;
use wattflip_e2e::*;
use wattflip_proto::v1::{self, agent_message::Kind, ingest_client::IngestClient, AgentMessage};

const DB: &str = "wf_connections";
const IDLE: usize = 1_000;

fn now_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as i64
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok()))
}

#[test]
fn a_thousand_idle_tls_connections_never_lock_out_a_real_agent() {
    let influx = Influx::start();
    let metrics_addr = format!("127.0.0.1:{}", free_port());
    let extra = format!("{}[limits]\nhello_timeout = \"5s\"\n[metrics]\nlisten = \"{metrics_addr}\"\n", pki().collector_tls());
    let collector = Collector::start_limited(free_port(), &influx.url, DB, &extra, Some(512));
    let idle_id = pki().issue("agent-idler", &["idler"], None);
    let real_id = pki().issue("agent-real", &["real"], None);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let url = collector.url.clone();
    let (held, answer, waited) = rt.block_on(async {
        // 1,000 connections, 50 handshakes at a time; each held open, no stream.
        let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(50));
        let tasks: Vec<_> = (0..IDLE)
            .map(|_| {
                let (sem, url, id) = (sem.clone(), url.clone(), idle_id.clone());
                tokio::spawn(async move {
                    let _permit = sem.acquire_owned().await.unwrap();
                    tokio::time::timeout(Duration::from_secs(15), pki().channel(&url, Some(id))).await.ok().and_then(Result::ok)
                })
            })
            .collect();
        let mut held = Vec::new();
        for t in tasks {
            held.extend(t.await.unwrap());
        }
        // The real agent, while all of them are open.
        let started = Instant::now();
        let ch = pki().channel(&url, Some(real_id)).await.expect("the real agent connects");
        let msgs = vec![
            AgentMessage { kind: Some(Kind::Hello(v1::Hello { agent_id: "real".into(), time_ns: now_ns(), ..Default::default() })) },
            temperature_batch("real", 1, 3, now_ns() - 1_000_000_000),
        ];
        let mut acks = IngestClient::new(ch).stream(tokio_stream::iter(msgs)).await.expect("the real agent's stream opens").into_inner();
        let answer = tokio::time::timeout(Duration::from_secs(15), acks.next()).await;
        (held, answer, started.elapsed())
    });
    let ack = match answer {
        Ok(Some(Ok(a))) => a,
        other => panic!("the real agent got no Ack within 15 s: {other:?}\n{}", collector.log()),
    };
    assert_eq!((ack.durable_sequence, ack.points_stored), (1, 3));
    eprintln!("{} idle connections completed their handshake; the real agent's Ack came {waited:?} after it connected", held.len());
    let m = reqwest::blocking::get(format!("http://{metrics_addr}/metrics")).unwrap().text().unwrap();
    let open = metric(&m, "wattflip_collector_connections_open").unwrap();
    assert!(open <= 448.0, "{open} connections open, above the 512 − 64 descriptors allowed\n{m}");
    let evicted = metric(&m, "wattflip_collector_agents_rejected_total{reason=\"idle_evicted\"}").unwrap_or(0.0);
    let idled = metric(&m, "wattflip_collector_agents_rejected_total{reason=\"idle_connection\"}").unwrap_or(0.0);
    assert!(evicted + idled >= (IDLE - 448) as f64, "evicted {evicted}, closed idle {idled}\n{m}");
    // Within the hello timeout (5 s) and a margin, every idle connection is closed.
    let closed = wait_for(Duration::from_secs(20), || {
        let m = reqwest::blocking::get(format!("http://{metrics_addr}/metrics")).ok()?.text().ok()?;
        (metric(&m, "wattflip_collector_connections_open")? == 0.0).then_some(())
    });
    assert!(closed.is_some(), "idle connections still open 20 s later\n{}", collector.log());
    drop(held);
    let log = collector.log();
    assert!(!log.contains("accept failed"), "{log}");
    assert!(log.matches("closed the connection idle the longest").count() <= 3, "the WARN is rate-limited");
}
