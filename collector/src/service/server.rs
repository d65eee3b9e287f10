//! Hosts the Ingest service and the standard gRPC health service on a listener (mutual TLS unless
//! the config names the plaintext loopback mode), serves `/metrics` when configured, and drains the
//! sinks after the server stops so that queued batches still reach the store. It knows the sinks
//! only as `crate::sinks::Sink`s: InfluxDB (always), then every sink the configuration holds.
//!
//! **Stopping** (SIGTERM, SIGINT): the listener stops accepting; every stream acknowledges the
//! batches it has queued once they are stored and then ends with `unavailable` ("collector is
//! shutting down; resend unacknowledged batches"), which the agent resumes from; then the writers
//! drain. Each of the two phases is bounded by `drain` (10 s in the binary): streams still open
//! then are closed, and lines still unwritten then stay unacknowledged (the agents resend them).
//! The process is gone within 2 × `drain` plus a second; systemd units allow 30 s (`TimeoutStopSec`).

use crate::config::{Config, SinkKind};
use crate::service::conns::{accept, Conns};
use crate::service::guard::{Dedup, RateLimiter};
use crate::service::ingest::{IdentitySource, IngestService};
use crate::service::revocation::Revocation;
pub use crate::service::stats::Stats;
use crate::service::tls::{self, TlsSetupError};
use crate::sinks::influx::{self, InfluxSink, SinkStats};
use crate::sinks::{Acks, Sink, SinkMetrics, Started};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use wattflip_infra::telemetry::{serve_metrics, MetricsBindError};
use wattflip_infra::tls::TlsMode;
use wattflip_proto::v1::ingest_server::IngestServer;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("gRPC server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error(transparent)]
    Tls(#[from] TlsSetupError),
    #[error(transparent)]
    Metrics(#[from] MetricsBindError),
    #[error("cannot read the listener's address: {0}")]
    Listener(std::io::Error),
    #[error("refusing to serve plaintext on {0}: tls.insecure_plaintext_loopback_only allows loopback addresses only")]
    PlaintextBeyondLoopback(std::net::SocketAddr),
}

/// An HTTP/2 ping every this long on each connection...
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// ... answered within this long, or the connection is closed (a peer gone without a FIN).
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// Raises the open-file soft limit to the hard one and says how many agent streams that holds
/// (one descriptor each, [`wattflip_infra::limits::RESERVED_FDS`] kept for the rest).
fn stream_capacity() -> u64 {
    let (limit, err) = wattflip_infra::limits::raise_nofile();
    if let Some(e) = err {
        tracing::warn!("cannot raise the open-file limit from {:?} to {:?}: {e}; streams beyond the current limit are refused", limit.soft, limit.hard);
    }
    let n = limit.connections();
    tracing::info!(streams = n, soft = ?limit.soft, was = ?limit.soft_before, hard = ?limit.hard,
        "the collector can hold {n} agent streams (open-file limit; raise LimitNOFILE for more)");
    n
}

/// The InfluxDB sink (or the null one). With raw retention set, every stored line marks its
/// bucket and the rollup task recomputes settled buckets (crate::rollup).
fn spawn_influx(cfg: &Config, stats: &Arc<Stats>, setup: crate::rollup::setup::Setup, stop_rx: &tokio::sync::watch::Receiver<bool>) -> Started {
    let counters = Arc::new(SinkStats::default());
    let (writer, task) = match cfg.sink {
        SinkKind::InfluxDb => {
            tokio::spawn(crate::rollup::resolution::run(cfg.influx.clone(), setup.clone(), stop_rx.clone()));
            let observer = cfg.influx.retention.as_ref().map(|r| {
                let dirty = Arc::new(crate::rollup::Dirty::new(r.max_dirty, stats.rollup.clone()));
                tokio::spawn(crate::rollup::task::run(cfg.influx.clone(), dirty.clone(), setup, stop_rx.clone()));
                dirty as Arc<dyn influx::StoredLines>
            });
            influx::spawn_observed(cfg.influx.clone(), counters.clone(), stop_rx.clone(), observer)
        }
        SinkKind::Null => influx::spawn_null(counters.clone()),
    };
    Started { sink: Arc::new(InfluxSink::new(writer, counters)), task }
}

/// Runs `server` to its end, or until `drain` after `stopping` turned true (its streams are then
/// dropped unacknowledged).
async fn until_stopped<F: Future<Output = Result<(), tonic::transport::Error>>>(
    server: F,
    mut stopping: tokio::sync::watch::Receiver<bool>,
    drain: Duration,
) -> Result<(), tonic::transport::Error> {
    let late = async move {
        crate::service::ingest::stopped(&mut stopping).await;
        tokio::time::sleep(drain).await;
    };
    tokio::select! {
        r = server => r,
        _ = late => {
            tracing::warn!("streams still open {drain:?} after the stop signal are closed; their agents resend what was not acknowledged");
            Ok(())
        }
    }
}

/// Serves until `shutdown` completes, then flushes the writer (at most `drain` long).
pub async fn serve(
    cfg: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
    stats: Arc<Stats>,
    drain: Duration,
) -> Result<(), ServeError> {
    wattflip_infra::tls::install_crypto_provider();
    let local = listener.local_addr().map_err(ServeError::Listener)?;
    // Checked again here (not only in the config) so no code path can serve plaintext widely.
    if cfg.tls.is_insecure() && !local.ip().is_loopback() {
        return Err(ServeError::PlaintextBeyondLoopback(local));
    }
    let tls_cfg = match &cfg.tls {
        TlsMode::Mutual(m) => Some(Revocation::load(m, cfg.revocation.clone())?),
        TlsMode::InsecurePlaintextLoopback => None,
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    if let Some(r) = &tls_cfg {
        r.clone().watch(stop_rx.clone());
    }
    // Created first: the rollup and marker tasks report their setup on it.
    let (reporter, health) = tonic_health::server::health_reporter();
    let setup = crate::rollup::setup::Setup { stats: stats.rollup.clone(), health: Some(reporter.clone()) };
    let influx = spawn_influx(&cfg, &stats, setup, &stop_rx);
    // InfluxDB first, then the configured sinks in registration order. Only ingest holds the
    // sinks: once it is gone, their writers drain.
    let started = std::iter::once(influx).chain(cfg.sinks.0.iter().map(|c| c.start(stop_rx.clone())));
    let (sink_tasks, sinks): (Vec<_>, Vec<Arc<dyn Sink>>) = started.map(|s| (s.task, s.sink)).unzip();
    start_metrics(&cfg, &stats, sinks.iter().map(|s| s.metrics()).collect(), &stop_rx).await?;
    let streams = stream_capacity();
    let max_connections = connection_limit(&cfg, streams);
    let conns = Conns::new(max_connections, cfg.limits.hello_timeout, stats.ingest.clone());
    let identity = if tls_cfg.is_some() { IdentitySource::Certificate } else { IdentitySource::Hello };
    let l = &cfg.limits;
    let (stopping_tx, stopping_rx) = tokio::sync::watch::channel(false);
    let stats_in = stats.ingest.clone();
    let health_of = Readiness::new(sinks.clone(), reporter.clone());
    let ingest = IngestService::new(
        sinks,
        stats.ingest.clone(),
        identity,
        RateLimiter::new(l.agent_points_per_second, l.agent_burst_points),
        Dedup::new(l.dedup_window),
    )
    .with_hello_timeout(l.hello_timeout)
    .with_time_skew(l.max_time_ahead, l.max_time_behind)
    .with_max_streams(streams)
    .with_conns(conns.clone())
    .with_stop(stopping_rx.clone())
    .with_revocation(tls_cfg.clone());
    let svc = IngestServer::new(ingest).max_decoding_message_size(l.max_message_bytes);
    health_of.watch(stopping_rx.clone()).await;
    tracing::info!(listen = %local, tls = if tls_cfg.is_some() { "mutual" } else { "OFF (plaintext, loopback only)" },
        sink = ?cfg.sink, influx = %cfg.influx.url, database = %cfg.influx.database, "collector serving");
    // Pings find dead peers of open streams; connections without a stream are closed by `conns`.
    let router = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .add_service(health)
        .add_service(svc);
    let stopping = async move {
        shutdown.await;
        let _ = stopping_tx.send(true);
    };
    let server = async move {
        match tls_cfg {
            Some(t) => router.serve_with_incoming_shutdown(tls::incoming(listener, move || t.server_config(), stats_in.clone(), conns), stopping).await,
            None => router.serve_with_incoming_shutdown(accept(listener, conns, |tcp, _| async move { Some(tcp) }), stopping).await,
        }
    };
    let result = until_stopped(server, stopping_rx, drain).await;
    drain_sinks(sink_tasks, &stop_tx, drain).await;
    result.map_err(ServeError::from)
}

/// Every stream (and its sink handles) is gone: InfluxDB's writer (the first task) flushes what
/// it holds within `drain`, then every sink is told to stop and waited for.
async fn drain_sinks(tasks: Vec<tokio::task::JoinHandle<()>>, stop_tx: &tokio::sync::watch::Sender<bool>, drain: Duration) {
    let mut tasks = tasks.into_iter();
    if let Some(mut influx) = tasks.next() {
        if tokio::time::timeout(drain, &mut influx).await.is_err() {
            tracing::warn!("InfluxDB still not writable after {drain:?}; unacknowledged batches stay with the agents");
            let _ = stop_tx.send(true);
            let _ = influx.await;
        }
    }
    let _ = stop_tx.send(true);
    for t in tasks {
        let _ = t.await;
    }
}

/// The metrics page, when `[metrics] listen` is set, with the counters of `sinks`; it stops with
/// `stop`.
async fn start_metrics(
    cfg: &Config,
    stats: &Arc<Stats>,
    sinks: Vec<Arc<dyn SinkMetrics>>,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> Result<(), ServeError> {
    if let Some(addr) = cfg.metrics_listen {
        let s = stats.clone();
        let mut stop = stop.clone();
        let bound = serve_metrics(addr, Arc::new(move || crate::service::telemetry::render(&s, &sinks)), async move {
            let _ = stop.changed().await;
        })
        .await?;
        tracing::info!(%bound, "metrics at /metrics");
    }
    Ok(())
}

/// `limits.max_connections`, at most what the open-file limit allows (`streams`).
fn connection_limit(cfg: &Config, streams: u64) -> usize {
    match cfg.limits.max_connections {
        Some(n) if n as u64 > streams => {
            tracing::warn!(configured = n, streams, "limits.max_connections is above what the open-file limit allows; using {streams}");
            streams as usize
        }
        Some(n) => n,
        None => streams as usize,
    }
}

/// How often the server reads the sinks' readiness.
const READINESS_POLL: Duration = Duration::from_secs(1);

/// The Ingest service's health from the readiness of the sinks the Acks wait for. It holds them
/// weakly: only ingest holds the sinks, so that their writers drain once it is gone.
struct Readiness {
    sinks: Vec<std::sync::Weak<dyn Sink>>,
    reporter: tonic_health::server::HealthReporter,
    /// The sinks not ready at the last look (None before the first).
    last: Option<Vec<&'static str>>,
}

impl Readiness {
    fn new(sinks: Vec<Arc<dyn Sink>>, reporter: tonic_health::server::HealthReporter) -> Self {
        Readiness { sinks: sinks.iter().filter(|s| s.acks() == Acks::Wait).map(Arc::downgrade).collect(), reporter, last: None }
    }

    /// Reports the health now, then every [`READINESS_POLL`] in a task until `stop` (the server
    /// stopping) or the sinks are gone; each change
    /// is logged (WARN when a sink stops answering, INFO when all answer again).
    async fn watch(mut self, mut stop: tokio::sync::watch::Receiver<bool>) {
        self.look().await;
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(READINESS_POLL) => self.look().await,
                    _ = stop.changed() => return,
                }
            }
        });
    }

    async fn look(&mut self) {
        let not_ready: Vec<&'static str> = self.sinks.iter().filter_map(|s| s.upgrade()).filter(|s| !s.ready()).map(|s| s.name()).collect();
        if self.last.as_ref() == Some(&not_ready) {
            return;
        }
        if not_ready.is_empty() {
            if self.last.is_some() {
                tracing::info!("every sink the Acks wait for answers again: the Ingest service reports SERVING on the gRPC health service");
            }
            self.reporter.set_serving::<IngestServer<IngestService>>().await;
        } else {
            tracing::warn!(sinks = ?not_ready, "a sink the Acks wait for has not answered for 10 s (its WARN lines and wattflip_collector_*_ready say more): the Ingest service reports NOT_SERVING on the gRPC health service");
            self.reporter.set_not_serving::<IngestServer<IngestService>>().await;
        }
        self.last = Some(not_ready);
    }
}
