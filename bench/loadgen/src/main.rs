//! `wattflip-loadgen`: drives the benchmarks of `bench/` (see docs/benchmarks.md). `pki` writes a
//! test CA and collector certificate; `agents` simulates N agents streaming batches over mutual TLS
//! (or plaintext loopback) and reports acknowledged samples per second, ack latency percentiles;
//! `direct` writes the same temperature points straight to InfluxDB with line protocol, for the
//! end-to-end ratio. A new scenario is a new subcommand.

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_stream::StreamExt as _;
use wattflip_proto::v1::{self, agent_message::Kind, ingest_client::IngestClient, AgentMessage};

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Writes ca.pem, ca.key, collector.pem, collector.key into DIR.
    Pki { dir: PathBuf },
    /// Simulated agents streaming to a collector.
    Agents {
        #[arg(long)]
        url: String,
        /// PKI dir from `pki` (mutual TLS); without it, plaintext (collector in loopback mode).
        #[arg(long)]
        pki: Option<PathBuf>,
        #[arg(long, default_value_t = 4)]
        agents: usize,
        /// Samples per batch.
        #[arg(long, default_value_t = 1000)]
        batch: usize,
        /// Batches per second per agent; 0: as fast as acknowledgements allow.
        #[arg(long, default_value_t = 0.0)]
        rate_hz: f64,
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Batches in flight per agent (unacknowledged) when rate_hz is 0.
        #[arg(long, default_value_t = 32)]
        window: usize,
        /// Every sample of a batch its own series (device), and each batch at least 1 ms after the
        /// previous: for a store that keeps one sample per series and millisecond (Prometheus;
        /// bench/otlp-sink.sh). Default: 8 devices, timestamps 1 ns apart.
        #[arg(long)]
        ms_series: bool,
        /// Batches as a real agent with this many NVMe drives sends them each tick: per drive one
        /// composite temperature (hwmon) and one `nvme_estimate` drive-power sample (`--batch` is
        /// then 2 × drives), the drives' thermal limits in the Hello, and event time advancing 1 s
        /// per batch from `seconds × rate_hz` s ago, so a short run covers hours of a drive's
        /// event time (the throttle detector's state per drive; docs/benchmarks.md).
        #[arg(long, default_value_t = 0)]
        nvme: usize,
    },
    /// The same points written directly to InfluxDB (/write, gzip, batches of `batch` lines).
    Direct {
        #[arg(long)]
        influx_url: String,
        #[arg(long)]
        db: String,
        #[arg(long)]
        points: usize,
        #[arg(long, default_value_t = 5000)]
        batch: usize,
    },
}

fn now_ns() -> i64 {
    wattflip_proto::units::UnixNanos::now().0
}

fn ca_params() -> anyhow::Result<rcgen::CertificateParams> {
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new())?;
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name.push(rcgen::DnType::CommonName, "wattflip bench CA");
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
    Ok(p)
}

fn issue(issuer: &rcgen::Issuer<'_, rcgen::KeyPair>, sans: &[&str]) -> anyhow::Result<(String, String)> {
    let key = rcgen::KeyPair::generate()?;
    let mut p = rcgen::CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())?;
    p.distinguished_name = rcgen::DistinguishedName::new();
    Ok((p.signed_by(&key, issuer)?.pem(), key.serialize_pem()))
}

fn pki(dir: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let key = rcgen::KeyPair::generate()?;
    let p = ca_params()?;
    std::fs::write(dir.join("ca.pem"), p.self_signed(&key)?.pem())?;
    std::fs::write(dir.join("ca.key"), key.serialize_pem())?;
    let issuer = rcgen::Issuer::new(p, key);
    let (c, k) = issue(&issuer, &["127.0.0.1", "localhost"])?;
    std::fs::write(dir.join("collector.pem"), c)?;
    std::fs::write(dir.join("collector.key"), k)?;
    println!("wrote {}/{{ca,collector}}.{{pem,key}}", dir.display());
    Ok(())
}

struct Totals {
    acked_samples: AtomicU64,
    latency_us: Mutex<hdrhistogram::Histogram<u64>>,
    connected: AtomicU64,
    failed: AtomicU64,
}

#[allow(clippy::too_many_arguments)]
async fn agent(
    i: usize,
    url: String,
    tls: Option<tonic::transport::ClientTlsConfig>,
    (per_batch, ms_series, nvme): (usize, bool, usize),
    rate_hz: f64,
    window: usize,
    until: Instant,
    totals: Arc<Totals>,
) -> anyhow::Result<()> {
    let id = format!("load-{i}");
    let mut ep = tonic::transport::Endpoint::from_shared(url)?.tcp_nodelay(true);
    if let Some(t) = tls {
        ep = ep.tls_config(t)?;
    }
    // A connection that cannot be made says so within 20 s instead of hanging.
    let ep = ep.connect_timeout(Duration::from_secs(20));
    let mut client = IngestClient::new(ep.connect().await.with_context(|| format!("agent {id}: connect"))?);
    totals.connected.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = tokio::sync::mpsc::channel(window.max(1));
    tx.send(hello(&id, nvme)).await?;
    let event_start = now_ns() - (until.saturating_duration_since(Instant::now()).as_secs_f64() * rate_hz.max(1.0)) as i64 * 1_000_000_000;
    let mut acks = client.stream(tokio_stream::wrappers::ReceiverStream::new(rx)).await?.into_inner();
    let sent_at: Arc<Mutex<std::collections::VecDeque<(u64, Instant)>>> = Arc::default();
    let permits = Arc::new(tokio::sync::Semaphore::new(window.max(1)));
    let (s2, p2) = (sent_at.clone(), permits.clone());
    let sender = tokio::spawn(async move {
        let mut seq = 0u64;
        let mut last_t0 = i64::MIN;
        let mut tick = (rate_hz > 0.0).then(|| tokio::time::interval(Duration::from_secs_f64(1.0 / rate_hz)));
        while Instant::now() < until {
            match tick.as_mut() {
                Some(t) => {
                    t.tick().await;
                }
                None => p2.acquire().await.map(|p| p.forget()).unwrap_or(()),
            }
            seq += 1;
            // Distinct timestamps per agent and batch, so points never overwrite each other.
            let mut t0 = now_ns() + (i as i64) * 1_000_000_000;
            if ms_series {
                t0 = t0.max(last_t0.saturating_add(1_000_000));
            }
            last_t0 = t0;
            let series = if ms_series { per_batch } else { 8 };
            let m = match nvme {
                0 => wattflip_e2e::temperature_batch_over(&id, seq, per_batch, t0, series),
                n => nvme_batch(&id, seq, n, event_start + seq as i64 * 1_000_000_000),
            };
            s2.lock().unwrap_or_else(|p| p.into_inner()).push_back((seq, Instant::now()));
            if tx.send(m).await.is_err() {
                break;
            }
        }
    });
    while let Some(a) = acks.next().await {
        let a = a?;
        let now = Instant::now();
        let mut q = sent_at.lock().unwrap_or_else(|p| p.into_inner());
        let mut h = totals.latency_us.lock().unwrap_or_else(|p| p.into_inner());
        while q.front().is_some_and(|(s, _)| *s <= a.durable_sequence) {
            if let Some((_, t)) = q.pop_front() {
                let _ = h.record(now.duration_since(t).as_micros() as u64);
                totals.acked_samples.fetch_add(per_batch as u64, Ordering::Relaxed);
                if rate_hz <= 0.0 {
                    permits.add_permits(1);
                }
            }
        }
        if Instant::now() >= until && q.is_empty() {
            break;
        }
    }
    sender.abort();
    Ok(())
}

/// The Hello of agent `id`, with the thermal limits of its `nvme` drives in its inventory.
fn hello(id: &str, nvme: usize) -> AgentMessage {
    let limits = (0..nvme)
        .map(|d| v1::DriveThermalLimits {
            device: format!("nvme{d}"),
            warning_celsius: 70.0,
            critical_celsius: 80.0,
            namespaces: vec![format!("nvme{d}n1")],
            ..Default::default()
        })
        .collect();
    let inventory = Some(v1::Inventory { drive_thermal_limits: limits, ..Default::default() });
    AgentMessage { kind: Some(Kind::Hello(v1::Hello { agent_id: id.to_string(), time_ns: now_ns(), inventory, ..Default::default() })) }
}

/// One tick of an agent with `drives` NVMe drives at event time `t`: per drive a composite
/// temperature (42–44 °C, below the limits) and the `nvme_estimate` drive power (5.5–7 W).
fn nvme_batch(id: &str, seq: u64, drives: usize, t: i64) -> AgentMessage {
    let k = seq as usize;
    let temperature = (0..drives)
        .map(|d| v1::TemperatureSample {
            time_ns: t,
            source: "hwmon".into(),
            device: format!("nvme{d}"),
            sensor: "Composite".into(),
            celsius: 42.0 + ((k + d) % 3) as f64,
        })
        .collect();
    let power = (0..drives)
        .map(|d| v1::PowerSample {
            time_ns: t,
            source: "nvme_estimate".into(),
            zone: format!("nvme{d}"),
            scope: "drive".into(),
            method: v1::Method::Estimated as i32,
            watts: Some(5.5 + ((k * 7 + d) % 4) as f64 * 0.5),
            ..Default::default()
        })
        .collect();
    AgentMessage { kind: Some(Kind::Batch(v1::Batch { agent_id: id.into(), sequence: seq, temperature, power, ..Default::default() })) }
}

/// Every 10 s on stderr: agents connected and failed, samples acknowledged so far.
async fn report_progress(totals: Arc<Totals>, agents: usize) {
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs(10));
    tick.tick().await;
    loop {
        tick.tick().await;
        eprintln!(
            "loadgen: +{:.0} s: {}/{agents} agents connected, {} failed, {} samples acknowledged",
            started.elapsed().as_secs_f64(),
            totals.connected.load(Ordering::Relaxed),
            totals.failed.load(Ordering::Relaxed),
            totals.acked_samples.load(Ordering::Relaxed)
        );
    }
}

/// `agents`: `agents` simulated agents streaming for `seconds`, then one summary line on stdout.
#[allow(clippy::too_many_arguments)]
async fn run_agents(
    url: String,
    pki: Option<PathBuf>,
    agents: usize,
    batch: usize,
    rate_hz: f64,
    seconds: u64,
    window: usize,
    (ms_series, nvme): (bool, usize),
) -> anyhow::Result<()> {
    let batch = if nvme > 0 { 2 * nvme } else { batch };
    let issuer = load_issuer(pki.as_deref())?;
    ensure_open_files(agents)?;
    let totals = Arc::new(Totals {
        acked_samples: AtomicU64::new(0),
        latency_us: Mutex::new(hdrhistogram::Histogram::new(3)?),
        connected: AtomicU64::new(0),
        failed: AtomicU64::new(0),
    });
    let progress = tokio::spawn(report_progress(totals.clone(), agents));
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for i in 0..agents {
        let tls = match &issuer {
            Some((iss, ca)) => {
                let (c, k) = issue(iss, &[&format!("load-{i}")])?;
                Some(
                    tonic::transport::ClientTlsConfig::new()
                        .ca_certificate(tonic::transport::Certificate::from_pem(ca))
                        .identity(tonic::transport::Identity::from_pem(c, k)),
                )
            }
            None => None,
        };
        let t = totals.clone();
        let run = agent(i, url.clone(), tls, (batch, ms_series, nvme), rate_hz, window, until, totals.clone());
        tasks.push(tokio::spawn(async move {
            let r = run.await;
            if let Err(e) = &r {
                // Said when it happens, not only at the end of a long run.
                t.failed.fetch_add(1, Ordering::Relaxed);
                eprintln!("agent failed: {e:#}");
            }
            Ok::<(), anyhow::Error>(())
        }));
    }
    for t in tasks {
        if let Ok(Err(e)) | Err(e) = t.await.map_err(anyhow::Error::from) {
            eprintln!("agent failed: {e:#}");
        }
    }
    progress.abort();
    print_summary(&totals, agents, batch, rate_hz, started);
    Ok(())
}

/// The test CA from a `pki` dir (mutual TLS), with its certificate; `None` without a dir (plaintext).
fn load_issuer(pki: Option<&std::path::Path>) -> anyhow::Result<Option<(rcgen::Issuer<'static, rcgen::KeyPair>, Vec<u8>)>> {
    Ok(match pki {
        Some(d) => {
            let key = rcgen::KeyPair::from_pem(&std::fs::read_to_string(d.join("ca.key"))?)?;
            Some((rcgen::Issuer::new(ca_params()?, key), std::fs::read(d.join("ca.pem"))?))
        }
        None => None,
    })
}

/// Each agent is one connection: raise the open-file limit, and refuse what it cannot hold.
fn ensure_open_files(agents: usize) -> anyhow::Result<()> {
    let (limit, err) = wattflip_infra::limits::raise_nofile();
    if let Some(e) = err {
        eprintln!("loadgen: cannot raise the open-file limit from {:?} to {:?}: {e}", limit.soft, limit.hard);
    }
    anyhow::ensure!(
        agents as u64 <= limit.connections(),
        "{agents} agents need {agents} connections, but the open-file limit ({:?}) holds {}; raise it (ulimit -Hn) or run fewer agents",
        limit.soft,
        limit.connections()
    );
    Ok(())
}

/// The run's one line on stdout: throughput, ack latency percentiles, failed agents.
fn print_summary(totals: &Totals, agents: usize, batch: usize, rate_hz: f64, started: Instant) {
    let failed = totals.failed.load(Ordering::Relaxed);
    let secs = started.elapsed().as_secs_f64();
    let n = totals.acked_samples.load(Ordering::Relaxed);
    let h = totals.latency_us.lock().unwrap_or_else(|p| p.into_inner());
    println!(
        "agents={agents} batch={batch} rate_hz={rate_hz} seconds={secs:.1} acked_samples={n} samples_per_s={:.0} \
         ack_latency_ms p50={:.1} p99={:.1} max={:.1} failed_agents={failed}",
        n as f64 / secs,
        h.value_at_quantile(0.5) as f64 / 1e3,
        h.value_at_quantile(0.99) as f64 / 1e3,
        h.max() as f64 / 1e3
    );
}

fn main() -> anyhow::Result<()> {
    wattflip_infra::tls::install_crypto_provider();
    let rt = tokio::runtime::Runtime::new()?;
    match Cli::parse().cmd {
        Cmd::Pki { dir } => pki(&dir),
        Cmd::Agents { url, pki, agents, batch, rate_hz, seconds, window, ms_series, nvme } => {
            rt.block_on(run_agents(url, pki, agents, batch, rate_hz, seconds, window, (ms_series, nvme)))
        }
        Cmd::Direct { influx_url, db, points, batch } => rt.block_on(async move {
            let client = reqwest::Client::new();
            let t0 = now_ns();
            let started = Instant::now();
            let mut written = 0;
            while written < points {
                let n = batch.min(points - written);
                let mut body = String::with_capacity(n * 120);
                for i in written..written + n {
                    // The same values as the agents' batches (wattflip_e2e::temperature_batch).
                    body.push_str(&format!(
                        "temperature,host=direct,source=hwmon,device=nvme{},sensor=Composite celsius={} {}\n",
                        i % 8,
                        40.0 + (i % 80) as f64 * 0.125,
                        t0 + i as i64
                    ));
                }
                let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                gz.write_all(body.as_bytes())?;
                let r = client.post(format!("{influx_url}/write?db={db}&precision=n")).header("Content-Encoding", "gzip").body(gz.finish()?).send().await?;
                anyhow::ensure!(r.status().is_success(), "InfluxDB answered {}", r.status());
                written += n;
            }
            let secs = started.elapsed().as_secs_f64();
            println!("direct points={written} batch={batch} seconds={secs:.2} points_per_s={:.0}", written as f64 / secs);
            Ok(())
        }),
    }
}
