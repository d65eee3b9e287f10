//! Unit tests of the OTLP writer's split of refused requests, against a receiver that behaves
//! like Prometheus (400: the whole request rolled back) or Thanos receive (409: the rest of the
//! request stored, the conflicting samples refused) for one host's samples. The expected request
//! sequence is worked out by hand from the halving rule in `Writer::deliver`.

use super::config::OtlpConfig;
use super::tests::{batch, sample, tags};
use super::writer::{spawn, OtlpOutcome, OtlpStats};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use prost::Message as _;
use std::collections::BTreeMap;
use std::io::Read as _;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// How the fake receiver answers a request holding the bad host's samples.
#[derive(Clone, Copy)]
enum Receiver {
    /// Prometheus: 400, nothing of the request stored.
    Prometheus,
    /// Thanos receive: 409, the other hosts' samples stored.
    Thanos,
}

/// What the fake receiver saw: the hosts of each request in order, and the data points it
/// stored per host.
#[derive(Default)]
struct Seen {
    requests: Vec<Vec<String>>,
    stored: BTreeMap<String, usize>,
}

/// The hosts (`host.name`) of a request and each one's data points.
fn hosts(req: &ExportMetricsServiceRequest) -> Vec<(String, usize)> {
    req.resource_metrics
        .iter()
        .map(|rm| {
            let attrs = rm.resource.as_ref().map(|r| r.attributes.as_slice()).unwrap_or_default();
            let host = attrs.iter().find(|kv| kv.key == "host.name").and_then(|kv| kv.value.as_ref()?.value.as_ref());
            let name = match host {
                Some(Value::StringValue(s)) => s.clone(),
                _ => String::new(),
            };
            let points = rm.scope_metrics.iter().flat_map(|s| &s.metrics).map(|m| m.data.as_ref().map_or(0, data_points)).sum();
            (name, points)
        })
        .collect()
}

fn data_points(d: &opentelemetry_proto::tonic::metrics::v1::metric::Data) -> usize {
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    match d {
        Data::Gauge(g) => g.data_points.len(),
        Data::Sum(s) => s.data_points.len(),
        _ => 0,
    }
}

/// Reads one HTTP/1.1 request's gzip body off `r`; None when the client closed.
async fn read_request(r: &mut BufReader<tokio::net::tcp::OwnedReadHalf>) -> Option<Vec<u8>> {
    let mut line = String::new();
    if r.read_line(&mut line).await.ok()? == 0 {
        return None;
    }
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        r.read_line(&mut h).await.ok()?;
        let h = h.trim_end().to_ascii_lowercase();
        if h.is_empty() {
            break;
        }
        if let Some(v) = h.strip_prefix("content-length:") {
            len = v.trim().parse().ok()?;
        }
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await.ok()?;
    let mut plain = Vec::new();
    flate2::read::GzDecoder::new(&body[..]).read_to_end(&mut plain).ok()?;
    Some(plain)
}

/// A receiver on 127.0.0.1 that refuses every request holding `bad`'s samples as `kind` does.
async fn receiver(kind: Receiver, bad: &'static str) -> (String, Arc<Mutex<Seen>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/api/v1/otlp/v1/metrics", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Seen::default()));
    let shared = seen.clone();
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let seen = shared.clone();
            tokio::spawn(async move {
                let (r, mut w) = sock.into_split();
                let mut r = BufReader::new(r);
                while let Some(body) = read_request(&mut r).await {
                    let req = ExportMetricsServiceRequest::decode(&body[..]).unwrap();
                    let hosts = hosts(&req);
                    let refused = hosts.iter().any(|(h, _)| h == bad);
                    let status = {
                        let mut s = seen.lock().unwrap();
                        s.requests.push(hosts.iter().map(|(h, _)| h.clone()).collect());
                        let keep = !refused || matches!(kind, Receiver::Thanos);
                        for (h, n) in hosts.iter().filter(|(h, _)| keep && h != bad) {
                            *s.stored.entry(h.clone()).or_default() += n;
                        }
                        match (refused, kind) {
                            (false, _) => "204 No Content",
                            (true, Receiver::Prometheus) => "400 Bad Request",
                            (true, Receiver::Thanos) => "409 Conflict",
                        }
                    };
                    let resp = format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
                    if w.write_all(resp.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, seen)
}

fn config(url: String) -> OtlpConfig {
    OtlpConfig {
        url,
        required: true,
        headers: BTreeMap::new(),
        secret_headers: BTreeMap::new(),
        batch_points: 5000,
        // Long enough that the eight jobs below go out in one request.
        flush_interval: Duration::from_millis(500),
        request_timeout: Duration::from_secs(5),
        max_backoff: Duration::from_secs(1),
        queue_points: 10_000,
        gzip: true,
    }
}

const HOSTS: [&str; 8] = ["h0", "h1", "h2", "h3", "h4", "h5", "h6", "h7"];

/// Eight hosts' batches (one power gauge each) through a required sink whose receiver refuses
/// h5's: the outcome of each job, the requests the receiver saw, and the writer's counters.
async fn eight_jobs(kind: Receiver) -> (Vec<OtlpOutcome>, Seen, Arc<OtlpStats>) {
    let (url, seen) = receiver(kind, "h5").await;
    let stats = Arc::new(OtlpStats::default());
    let (_stop_tx, stop) = tokio::sync::watch::channel(false);
    let (handle, _task) = spawn(config(url), stats.clone(), stop);
    let mut done = Vec::new();
    for (i, h) in HOSTS.iter().enumerate() {
        let b = batch(vec![sample(1_700_000_000 + i as i64, "ipmi", "dcmi", "wall", 100.0 + i as f64, None)]);
        done.push(handle.batch(&tags(h), &b, None, &[]).await.expect("a required sink returns a receipt"));
    }
    let mut outcomes = Vec::new();
    for d in done {
        outcomes.push(tokio::time::timeout(Duration::from_secs(10), d).await.expect("job completed").expect("writer alive"));
    }
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    (outcomes, seen, stats)
}

/// The requests by hand: the whole, then halves in order, down to h5's job alone.
fn expected_requests() -> Vec<Vec<String>> {
    let r = |a: usize, b: usize| HOSTS[a..b].iter().map(|h| h.to_string()).collect::<Vec<_>>();
    vec![r(0, 8), r(0, 4), r(4, 8), r(4, 6), r(4, 5), r(5, 6), r(6, 8)]
}

fn check(kind: Receiver, outcomes: &[OtlpOutcome], seen: &Seen, stats: &OtlpStats) {
    assert_eq!(seen.requests, expected_requests());
    assert_eq!(stats.requests_split.load(Relaxed), 3, "three refused requests of several jobs split");
    assert_eq!(stats.requests.load(Relaxed), 7);
    // One gauge point per host (no budget tier, no counter).
    let refused: Vec<usize> = outcomes.iter().map(|o| o.refused).collect();
    assert_eq!(refused, vec![0, 0, 0, 0, 0, 1, 0, 0], "only h5's job is refused");
    assert_eq!(stats.points_dead_lettered.get("refused"), 1);
    assert_eq!(stats.points_sent.load(Relaxed), 7, "h0-h3, h4, h6-h7 answered 2xx once each");
    let want: BTreeMap<String, usize> = match kind {
        // Rolled back whole: each healthy host stored only by its accepted request.
        Receiver::Prometheus => HOSTS.iter().filter(|h| **h != "h5").map(|h| (h.to_string(), 1)).collect(),
        // Stored by every request that held it (the same samples again: no conflict for them).
        Receiver::Thanos => [("h0", 2), ("h1", 2), ("h2", 2), ("h3", 2), ("h4", 4), ("h6", 3), ("h7", 3)].iter().map(|(h, n)| (h.to_string(), *n)).collect(),
    };
    assert_eq!(seen.stored, want);
}

#[tokio::test]
async fn prometheus_400_is_split_down_to_the_refused_host_and_every_other_job_is_stored() {
    let (outcomes, seen, stats) = eight_jobs(Receiver::Prometheus).await;
    check(Receiver::Prometheus, &outcomes, &seen, &stats);
}

#[tokio::test]
async fn thanos_409_is_split_the_same_way_and_only_the_conflicting_job_is_refused() {
    let (outcomes, seen, stats) = eight_jobs(Receiver::Thanos).await;
    check(Receiver::Thanos, &outcomes, &seen, &stats);
}
