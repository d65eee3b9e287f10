//! Intruders at the collector's door, over real mutual TLS: a forged agent id (in the Hello and in
//! a Batch), a certificate from another CA, no certificate, plaintext, an oversized message, an
//! oversized Hello and an agent over its rate limit. Every one is refused, counted in `/metrics`,
//! and nothing of theirs reaches InfluxDB.

use prost::Message as _;
use std::time::Duration;
use tokio_stream::StreamExt as _;
use wattflip_e2e::*;
use wattflip_proto::v1::{self, agent_message::Kind, ingest_client::IngestClient, AgentMessage};

fn now_ns() -> i64 {
    wattflip_proto::units::UnixNanos::now().0
}

fn hello(id: &str) -> AgentMessage {
    AgentMessage { kind: Some(Kind::Hello(v1::Hello { agent_id: id.into(), time_ns: now_ns(), ..Default::default() })) }
}

fn batch(id: &str, seq: u64, samples: usize) -> AgentMessage {
    temperature_batch(id, seq, samples, now_ns())
}

/// Opens a stream on `channel` with `msgs` and returns the first answer (ack or error).
async fn first_answer(channel: tonic::transport::Channel, msgs: Vec<AgentMessage>) -> Result<u64, tonic::Status> {
    let mut client = IngestClient::new(channel);
    let mut acks = client.stream(tokio_stream::iter(msgs)).await?.into_inner();
    match tokio::time::timeout(Duration::from_secs(10), acks.next()).await.expect("an answer within 10 s") {
        Some(Ok(a)) => Ok(a.durable_sequence),
        Some(Err(s)) => Err(s),
        None => Err(tonic::Status::unknown("stream closed without an answer")),
    }
}

fn metric(text: &str, line_start: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(line_start).and_then(|v| v.trim().parse().ok()))
}

fn get_metrics(addr: &str) -> String {
    reqwest::blocking::get(format!("http://{addr}/metrics")).expect("GET /metrics").text().expect("body")
}

#[test]
fn intruders_are_refused_counted_and_write_nothing() {
    const DB: &str = "wf_security";
    let influx = Influx::start();
    let metrics_addr = format!("127.0.0.1:{}", free_port());
    let extra = format!("{}[limits]\nmax_message_bytes = 65536\n[metrics]\nlisten = \"{metrics_addr}\"\n", pki().collector_tls());
    let collector = Collector::start_with(free_port(), &influx.url, DB, &extra);
    let mallory = pki().issue("mallory", &["mallory"], None);
    let other_ca = Pki::new("other");
    let intruder = other_ca.issue("intruder", &["victim"], None);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let url = &collector.url;
        // 1. A valid certificate for mallory, a Hello claiming victim.
        let ch = pki().channel(url, Some(mallory.clone())).await.unwrap();
        let e = first_answer(ch, vec![hello("victim"), batch("victim", 1, 1)]).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
        assert_eq!(e.message(), "hello.agent_id: `victim` is not the agent id of the client certificate (`mallory`)");
        // 2. Honest Hello, forged Batch.
        let ch = pki().channel(url, Some(mallory.clone())).await.unwrap();
        let e = first_answer(ch, vec![hello("mallory"), batch("victim", 1, 1)]).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
        assert_eq!(e.message(), "batch.agent_id: `victim` in batch 1 is not this stream's agent `mallory`");
        // 3. A certificate from another CA, naming victim: the handshake fails.
        let refused = match pki().channel(url, Some(intruder)).await {
            Err(_) => true,
            Ok(ch) => first_answer(ch, vec![hello("victim"), batch("victim", 1, 1)]).await.is_err(),
        };
        assert!(refused, "a certificate from another CA must be refused");
        // 4. No certificate at all.
        let refused = match pki().channel(url, None).await {
            Err(_) => true,
            Ok(ch) => first_answer(ch, vec![hello("victim"), batch("victim", 1, 1)]).await.is_err(),
        };
        assert!(refused, "a client without a certificate must be refused");
        // 5. Plaintext gRPC against the TLS port.
        let plain = url.replace("https://", "http://");
        let refused = match tonic::transport::Endpoint::from_shared(plain).unwrap().connect().await {
            Err(_) => true,
            Ok(ch) => first_answer(ch, vec![hello("victim"), batch("victim", 1, 1)]).await.is_err(),
        };
        assert!(refused, "plaintext must be refused");
        // 6. An honest agent sending a message above limits.max_message_bytes (64 KiB).
        let ch = pki().channel(url, Some(mallory.clone())).await.unwrap();
        let e = first_answer(ch, vec![hello("mallory"), batch("mallory", 1, 2000)]).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
        assert!(e.message().contains("the limit is: 65536 bytes"), "{}", e.message());
        assert!(e.message().ends_with("the collector's limits.max_message_bytes refuses it"), "{}", e.message());
    });
    // Nothing of theirs was stored: no samples at all, and no point names victim. Checked once the
    // collector has counted every refusal and written the certified Hello's inventory point (the
    // writer is one ordered queue), not after a guessed sleep.
    let settled = wait_for(Duration::from_secs(20), || {
        let m = get_metrics(&metrics_addr);
        let counted = ["hello_agent_id", "batch_agent_id", "oversized_message"]
            .iter()
            .all(|r| metric(&m, &format!("wattflip_collector_agents_rejected_total{{reason=\"{r}\"}}")) == Some(1.0));
        let inventory = influx.try_rows(DB, "SHOW TAG VALUES FROM agent WITH KEY = host").is_some_and(|r| !r.is_empty());
        (counted && inventory).then_some(())
    });
    assert!(settled.is_some(), "the collector did not count the refusals and write mallory's Hello within 20 s:\n{}", collector.log());
    assert_eq!(influx.try_rows(DB, "SELECT count(celsius) FROM temperature"), None, "no temperature was written");
    let hosts = influx.rows(DB, "SHOW TAG VALUES FROM agent WITH KEY = host");
    let hosts: Vec<&str> = hosts.iter().map(|r| r[1].as_str().unwrap()).collect();
    assert_eq!(hosts, vec!["mallory"], "only the certified Hello's inventory point");
    let m = get_metrics(&metrics_addr);
    assert_eq!(metric(&m, "wattflip_collector_agents_rejected_total{reason=\"hello_agent_id\"}"), Some(1.0), "{m}");
    assert_eq!(metric(&m, "wattflip_collector_agents_rejected_total{reason=\"batch_agent_id\"}"), Some(1.0), "{m}");
    assert_eq!(metric(&m, "wattflip_collector_agents_rejected_total{reason=\"oversized_message\"}"), Some(1.0), "{m}");
    // Another CA, no certificate, plaintext: each is at least one refused handshake.
    let handshakes = metric(&m, "wattflip_collector_agents_rejected_total{reason=\"tls_handshake\"}").unwrap_or(0.0);
    assert!(handshakes >= 3.0, "{m}");
    assert_eq!(metric(&m, "wattflip_collector_samples_received_total"), Some(0.0), "{m}");
    let log = collector.log();
    assert!(log.contains("refused a connection: TLS handshake failed"), "{log}");
}

/// Issue 32 §3: 1,100 channels with long names make a Hello above limits.max_message_bytes. It is
/// refused with a status naming its size and the limit (and both in metadata for the agent),
/// counted as `oversized_hello` and logged at WARN, not ended silently.
#[test]
fn an_oversized_hello_is_refused_naming_its_size_and_the_limit() {
    let influx = Influx::start();
    let metrics_addr = format!("127.0.0.1:{}", free_port());
    let extra = format!("{}[limits]\nmax_message_bytes = 65536\n[metrics]\nlisten = \"{metrics_addr}\"\n", pki().collector_tls());
    let collector = Collector::start_with(free_port(), &influx.url, "wf_big_hello", &extra);
    let id = pki().issue("big", &["big"], None);
    let sensors = (0..1100)
        .map(|i| v1::TemperatureSensor {
            source: "hwmon".into(),
            device: format!("hwmon{i}"),
            sensor: format!("temp1 {}", "x".repeat(40)),
            path: String::new(),
        })
        .collect();
    let inventory = v1::Inventory { temperature_sensors: sensors, ..Default::default() };
    let msg =
        AgentMessage { kind: Some(Kind::Hello(v1::Hello { agent_id: "big".into(), time_ns: now_ns(), inventory: Some(inventory), ..Default::default() })) };
    let size = msg.encoded_len();
    assert!(size > 65536, "the Hello must be above the limit: {size}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let e = rt.block_on(async {
        let ch = pki().channel(&collector.url, Some(id)).await.unwrap();
        first_answer(ch, vec![msg]).await.unwrap_err()
    });
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    let said = format!("the Hello of {size} bytes is above the collector's limit of 65536 bytes (limits.max_message_bytes)");
    assert!(e.message().starts_with(&said), "{}", e.message());
    let md = |k: &str| e.metadata().get(k).and_then(|v| v.to_str().ok()).map(str::to_string);
    assert_eq!((md("wattflip-limit-bytes"), md("wattflip-refused-message")), (Some("65536".into()), Some("hello".into())));
    let m = get_metrics(&metrics_addr);
    assert_eq!(metric(&m, "wattflip_collector_agents_rejected_total{reason=\"oversized_hello\"}"), Some(1.0), "{m}");
    let log = collector.log();
    assert!(log.lines().any(|l| l.contains("WARN") && l.contains(&said)), "{log}");
}

#[test]
fn rate_limit_answers_resource_exhausted() {
    let influx = Influx::start();
    let extra = format!("{}[limits]\nagent_points_per_second = 1\nagent_burst_points = 3\n", pki().collector_tls());
    let collector = Collector::start_with(free_port(), &influx.url, "wf_rate", &extra);
    let id = pki().issue("eager", &["eager"], None);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let ch = pki().channel(&collector.url, Some(id)).await.unwrap();
        let mut client = IngestClient::new(ch);
        let msgs = vec![hello("eager"), batch("eager", 1, 3), batch("eager", 2, 3)];
        let mut acks = client.stream(tokio_stream::iter(msgs)).await.unwrap().into_inner();
        assert_eq!(acks.next().await.unwrap().unwrap().durable_sequence, 1);
        let e = acks.next().await.unwrap().unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert_eq!(e.message(), "agent `eager` exceeds its rate limit (limits.agent_points_per_second); back off and resend from batch 2");
    });
    let rows = influx.rows("wf_rate", "SELECT count(celsius) FROM temperature WHERE host = 'eager'");
    assert_eq!(rows[0][1].as_i64(), Some(3));
}
