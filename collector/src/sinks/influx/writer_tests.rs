//! Writer behaviour against a scripted server: batching, retries, database creation, 400 handling.

use super::fake_server::start;
use super::writer::{spawn, SinkStats};
use crate::config::{InfluxApi, InfluxConfig};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

fn cfg(url: &str) -> InfluxConfig {
    InfluxConfig {
        url: url.into(),
        database: "wf".into(),
        api: InfluxApi::V1,
        org: String::new(),
        bucket: "wf".into(),
        secret: None,
        username: String::new(),
        batch_lines: 3,
        flush_interval: Duration::from_millis(20),
        request_timeout: Duration::from_secs(5),
        max_backoff: Duration::from_millis(50),
        gzip: true,
    }
}

fn lines(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("m,t={prefix} v={i} {i}\n")).collect()
}

#[tokio::test]
async fn splits_into_requests_of_batch_lines_and_acks_after_all() {
    let srv = start(vec![]).await;
    let stats = Arc::new(SinkStats::default());
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let (h, _task) = spawn(cfg(&srv.url), stats.clone(), rx);
    let done = h.write(lines("a", 7)).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), done).await.unwrap().unwrap();
    let rec = srv.received.lock().unwrap().clone();
    assert_eq!(rec.len(), 3);
    assert_eq!(rec[0].request_line, "POST /write?db=wf&precision=n HTTP/1.1");
    assert_eq!(rec[0].body, "m,t=a v=0 0\nm,t=a v=1 1\nm,t=a v=2 2\n");
    assert_eq!(rec[2].body, "m,t=a v=6 6\n");
    assert_eq!(stats.lines_written.load(Ordering::Relaxed), 7);
}

#[tokio::test]
async fn retries_5xx_and_creates_a_missing_database() {
    let srv = start(vec![
        (503, "{\"error\":\"request throttled, queue full\"}"),
        (404, "{\"error\":\"database not found: \\\"wf\\\"\"}"),
        (200, "{\"results\":[{\"statement_id\":0}]}"),
        (204, ""),
    ])
    .await;
    let stats = Arc::new(SinkStats::default());
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let (h, _task) = spawn(cfg(&srv.url), stats.clone(), rx);
    let done = h.write(lines("b", 2)).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), done).await.unwrap().unwrap();
    let rec = srv.received.lock().unwrap().clone();
    let reqs: Vec<&str> = rec.iter().map(|r| r.request_line.as_str()).collect();
    assert_eq!(
        reqs,
        vec![
            "POST /write?db=wf&precision=n HTTP/1.1",
            "POST /write?db=wf&precision=n HTTP/1.1",
            "POST /query?q=CREATE+DATABASE+%22wf%22 HTTP/1.1",
            "POST /write?db=wf&precision=n HTTP/1.1",
        ]
    );
    assert_eq!(stats.retries.load(Ordering::Relaxed), 1);
    assert_eq!(stats.databases_created.load(Ordering::Relaxed), 1);
    assert_eq!(stats.lines_written.load(Ordering::Relaxed), 2);
}

#[tokio::test]
async fn partial_write_is_counted_and_not_retried() {
    let srv = start(vec![(
        400,
        "{\"error\":\"partial write: field type conflict: input field \\\"v\\\" on measurement \\\"m\\\" is type string, already exists as type float dropped=1\"}",
    )])
    .await;
    let stats = Arc::new(SinkStats::default());
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let (h, _task) = spawn(cfg(&srv.url), stats.clone(), rx);
    let done = h.write(lines("c", 3)).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), done).await.unwrap().unwrap();
    assert_eq!(srv.received.lock().unwrap().len(), 1);
    assert_eq!(stats.lines_rejected.load(Ordering::Relaxed), 1);
    assert_eq!(stats.lines_written.load(Ordering::Relaxed), 2);
}

#[tokio::test]
async fn unreachable_influx_never_acks_and_shutdown_leaves_it_unacked() {
    // A port nobody listens on: bind, learn the port, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let stats = Arc::new(SinkStats::default());
    let (tx, rx) = tokio::sync::watch::channel(false);
    let (h, task) = spawn(cfg(&format!("http://127.0.0.1:{port}")), stats.clone(), rx);
    let done = h.write(lines("d", 1)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(stats.retries.load(Ordering::Relaxed) >= 2, "it keeps retrying");
    tx.send(true).unwrap();
    task.await.unwrap();
    assert!(done.await.is_err(), "a batch that never reached InfluxDB is never acknowledged");
}
