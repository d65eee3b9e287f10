//! The README's recipe for a new sink stays true: a sink written as the recipe says (a config
//! type read from its own TOML table, a `Sink` with its per-stream `SinkStream`, its counters as
//! `SinkMetrics`) and registered by one entry next to `sinks::registry()`'s is read from the
//! configuration (unknown keys in its table refused by dotted key), started by the server, handed
//! every Hello and batch by ingest, waited for by the Ack as its `Acks` say, accounted in the Ack,
//! and shown on the metrics page; and the README names the registry and the file that holds it.

// Integration tests: a panic with a message is the test's failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;
use tokio_stream::wrappers::ReceiverStream;
use wattflip_collector::config::{Config, Overrides};
use wattflip_collector::service::server::{serve, Stats};
use wattflip_collector::sinks::{registry, Registration};
use wattflip_proto::v1::{self, agent_message::Kind, ingest_client::IngestClient, AgentMessage};

/// The new sink, as the recipe's `sinks/demo/` folder would hold it: `[demo]` with one setting,
/// and a sink that records what it receives, dead-letters each batch's first power point and,
/// with `hold_acks`, completes a batch only once the test lets it.
mod demo {
    use serde::Deserialize;
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
    use std::sync::{Arc, Mutex};
    use tokio::sync::{watch, Semaphore};
    use wattflip_collector::sinks::{
        async_trait, Account, Acks, Delivery, Queued, Registration, Sink, SinkConfig, SinkMetrics, SinkStopped, SinkStream, Started, Unencodable,
    };
    use wattflip_infra::telemetry::Text;
    use wattflip_infra::tomlcfg::Loader;
    use wattflip_proto::domain::Hello;
    use wattflip_proto::schema::HostTags;

    /// What the sinks of this test process received: (agent, what, power points).
    pub static RECEIVED: Mutex<Vec<(String, &'static str, usize)>> = Mutex::new(Vec::new());
    /// Permits to complete held batches.
    pub static RELEASE: Semaphore = Semaphore::const_new(0);
    /// The readiness of every demo sink with `ready_switch` (the others are always ready).
    pub static READY: AtomicBool = AtomicBool::new(true);

    // sinks/demo/config.rs: the table as written, and its checked form.
    #[derive(Debug, Default, Deserialize)]
    struct RawDemo {
        hold_acks: Option<bool>,
        ready_switch: Option<bool>,
    }

    #[derive(Debug, Clone, PartialEq)]
    pub struct DemoConfig {
        pub hold_acks: bool,
        pub ready_switch: bool,
    }

    pub const REGISTRATION: Registration = Registration { section: "demo", configure };

    fn configure(loader: &mut Loader) -> Option<Arc<dyn SinkConfig>> {
        let raw: Option<RawDemo> = loader.take("demo");
        let raw = raw?;
        Some(Arc::new(DemoConfig { hold_acks: raw.hold_acks.unwrap_or(false), ready_switch: raw.ready_switch.unwrap_or(false) }))
    }

    impl SinkConfig for DemoConfig {
        fn describe(&self) -> String {
            format!("demo sink (hold_acks {})", self.hold_acks)
        }
        fn start(&self, _stop: watch::Receiver<bool>) -> Started {
            let sink = DemoSink { hold: self.hold_acks, switch: self.ready_switch, counters: Arc::new(Counters::default()) };
            Started { sink: Arc::new(sink), task: tokio::spawn(async {}) }
        }
    }

    // sinks/demo/sink.rs: the sink, its side of a stream, its counters.
    #[derive(Default)]
    struct Counters {
        batches: AtomicU64,
    }

    impl SinkMetrics for Counters {
        fn render(&self, t: &mut Text) {
            t.counter("wattflip_collector_demo_batches_total", "Batches the demo sink took.", self.batches.load(Relaxed));
        }
    }

    struct DemoSink {
        hold: bool,
        /// Whether [`READY`] decides its readiness.
        switch: bool,
        counters: Arc<Counters>,
    }

    impl Sink for DemoSink {
        fn name(&self) -> &'static str {
            "demo"
        }
        fn acks(&self) -> Acks {
            Acks::Wait
        }
        fn ready(&self) -> bool {
            !self.switch || READY.load(Relaxed)
        }
        fn open(&self, agent: &Arc<str>, _tags: &HostTags) -> Box<dyn SinkStream> {
            Box::new(DemoStream { agent: agent.to_string(), hold: self.hold, counters: self.counters.clone() })
        }
        fn metrics(&self) -> Arc<dyn SinkMetrics> {
            self.counters.clone()
        }
    }

    struct DemoStream {
        agent: String,
        hold: bool,
        counters: Arc<Counters>,
    }

    #[async_trait]
    impl SinkStream for DemoStream {
        async fn hello(&self, _hello: &Hello) -> Result<Unencodable, SinkStopped> {
            RECEIVED.lock().unwrap().push((self.agent.clone(), "hello", 0));
            Ok(Unencodable::default())
        }
        async fn write(&self, d: &Delivery<'_>) -> Result<Queued, SinkStopped> {
            let n = d.batch.power.len();
            RECEIVED.lock().unwrap().push((self.agent.clone(), "batch", n));
            self.counters.batches.fetch_add(1, Relaxed);
            let hold = self.hold;
            let receipt = Box::pin(async move {
                if hold {
                    RELEASE.acquire().await.map_err(|_| SinkStopped)?.forget();
                }
                Ok(Account { stored: Some(n as u64 - 1), dead_lettered: BTreeMap::from([("demo_refused", 1)]) })
            });
            Ok(Queued { receipt: Some(receipt), unencodable: Unencodable::default() })
        }
    }
}

/// The recipe's one registration line, here added to the registry the configuration reads.
fn with_demo() -> Vec<Registration> {
    let mut sinks = registry();
    sinks.push(demo::REGISTRATION);
    sinks
}

fn load(text: &str, sinks: &[Registration]) -> Result<Config, String> {
    Config::from_str_with(Path::new("collector.toml"), text, &Overrides::default(), sinks).map_err(|e| e.to_string())
}

fn sample(t_ns: i64, watts: f64) -> v1::PowerSample {
    v1::PowerSample {
        time_ns: t_ns,
        source: "rapl".into(),
        zone: "package-0".into(),
        scope: "cpu".into(),
        method: v1::Method::Measured as i32,
        watts: Some(watts),
        ..Default::default()
    }
}

#[test]
fn the_sinks_table_is_read_by_its_registration_only() {
    let base = "sink = \"null\"\n[tls]\ninsecure_plaintext_loopback_only = true\n";
    let unregistered = load(&format!("{base}[demo]\nhold_acks = true\n"), &registry()).unwrap_err();
    assert!(unregistered.contains("  - demo: unknown key"), "without its registration [demo] is an unknown key: {unregistered}");
    let cfg = load(&format!("{base}[demo]\nhold_acks = true\n"), &with_demo()).unwrap();
    assert_eq!(cfg.sinks.get::<demo::DemoConfig>(), Some(&demo::DemoConfig { hold_acks: true, ready_switch: false }));
    assert!(load(base, &with_demo()).unwrap().sinks.get::<demo::DemoConfig>().is_none(), "no table, no sink");
    let typo = load(&format!("{base}[demo]\nhold_ack = true\n[limits]\ndedup_window = 0\n"), &with_demo()).unwrap_err();
    assert!(typo.contains("  - demo.hold_ack: unknown key") && typo.contains("  - limits.dedup_window: must be at least 1"), "every problem at once: {typo}");
}

#[tokio::test]
async fn a_registered_sink_gets_every_batch_and_holds_the_ack_as_its_acks_say() {
    let metrics = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let text = format!("sink = \"null\"\n[tls]\ninsecure_plaintext_loopback_only = true\n[metrics]\nlisten = \"{metrics}\"\n[demo]\nhold_acks = true\n");
    let cfg = load(&text, &with_demo()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(cfg, listener, async move { drop(stop_rx.await) }, std::sync::Arc::new(Stats::default()), Duration::from_secs(2)));

    let mut client = IngestClient::connect(format!("http://{addr}")).await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as i64;
    let hello = v1::Hello {
        agent_id: "demo-host".into(),
        hostname: "demo-host".into(),
        agent_version: "0".into(),
        protocol_version: wattflip_proto::PROTOCOL_VERSION,
        time_ns: now,
        stream_epoch: 7,
        ..Default::default()
    };
    tx.send(AgentMessage { kind: Some(Kind::Hello(hello)) }).await.unwrap();
    let power = vec![sample(now - 2_000_000_000, 10.0), sample(now - 1_000_000_000, 11.0), sample(now, 12.0)];
    tx.send(AgentMessage { kind: Some(Kind::Batch(v1::Batch { agent_id: "demo-host".into(), sequence: 1, power, ..Default::default() })) }).await.unwrap();
    let mut acks = client.stream(ReceiverStream::new(rx)).await.unwrap().into_inner();

    // The sink holds the batch: no Ack while it does.
    assert!(tokio::time::timeout(Duration::from_millis(500), acks.message()).await.is_err(), "acknowledged before the sink completed the batch");
    assert_eq!(*demo::RECEIVED.lock().unwrap(), vec![("demo-host".to_string(), "hello", 0), ("demo-host".to_string(), "batch", 3)]);
    demo::RELEASE.add_permits(1);
    let ack = tokio::time::timeout(Duration::from_secs(10), acks.message()).await.unwrap().unwrap().unwrap();
    assert_eq!((ack.durable_sequence, ack.duplicate), (1, false));
    // The null InfluxDB stored all 3; the demo sink kept 2 and dead-lettered one: the Ack says so.
    assert_eq!(ack.points_stored, 2);
    assert_eq!(ack.points_dead_lettered, [("demo_refused".to_string(), 1)].into_iter().collect());

    let page = reqwest::get(format!("http://{metrics}/metrics")).await.unwrap().text().await.unwrap();
    assert!(page.lines().any(|l| l == "wattflip_collector_demo_batches_total 1"), "the demo sink's counter on the metrics page:\n{page}");
    assert!(page.lines().any(|l| l == "wattflip_collector_points_dead_lettered_total{reason=\"demo_refused\"} 1"), "{page}");

    drop(tx);
    drop(acks);
    stop_tx.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), server).await.unwrap().unwrap().unwrap();
}

#[test]
fn the_readme_recipe_names_the_registry() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let recipe = readme.split("- **A collector sink**").nth(1).and_then(|r| r.split("\n- **").next()).expect("README has the collector-sink recipe");
    let recipe = recipe.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        recipe.contains("The one registration line is its entry in `registry` in `collector/src/sinks/mod.rs`"),
        "the README's sink recipe must name the one registration table: {recipe}"
    );
    let code = std::fs::read_to_string(root.join("collector/src/sinks/mod.rs")).unwrap();
    assert!(code.contains("pub fn registry() -> Vec<Registration>"), "collector/src/sinks/mod.rs defines registry");
}

/// The gRPC health service's answer for the Ingest service.
async fn ingest_health(addr: std::net::SocketAddr) -> i32 {
    use tonic::server::NamedService as _;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let service = v1::ingest_server::IngestServer::<wattflip_collector::service::ingest::IngestService>::NAME.to_string();
    health.check(tonic_health::pb::HealthCheckRequest { service }).await.unwrap().into_inner().status
}

/// A sink the Acks wait for that stops answering turns the Ingest service NOT_SERVING on the
/// health service within the server's poll, and SERVING again once it answers: watched for as
/// long as the collector runs, not only at start.
#[tokio::test]
async fn a_waited_for_sink_that_is_not_ready_turns_the_ingest_service_not_serving_until_it_is() {
    use tonic_health::pb::health_check_response::ServingStatus;
    let text = "sink = \"null\"\n[tls]\ninsecure_plaintext_loopback_only = true\n[demo]\nready_switch = true\n";
    let cfg = load(text, &with_demo()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(cfg, listener, async move { drop(stop_rx.await) }, std::sync::Arc::new(Stats::default()), Duration::from_secs(2)));
    let status_within = |want: ServingStatus| async move {
        for _ in 0..50 {
            if ingest_health(addr).await == want as i32 {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    };
    assert!(status_within(ServingStatus::Serving).await, "serving at start");
    demo::READY.store(false, std::sync::atomic::Ordering::Relaxed);
    assert!(status_within(ServingStatus::NotServing).await, "NOT_SERVING while the demo sink is not ready");
    demo::READY.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(status_within(ServingStatus::Serving).await, "SERVING again once it is");
    stop_tx.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), server).await.unwrap().unwrap().unwrap();
}
