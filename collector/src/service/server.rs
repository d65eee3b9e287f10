//! Hosts the Ingest service and the standard gRPC health service on a listener (mutual TLS unless
//! the config names the plaintext loopback mode), serves `/metrics` when configured, and drains the
//! writer after the server stops so that queued batches still reach the store.

use crate::config::{Config, SinkKind};
use crate::service::guard::{Dedup, RateLimiter};
use crate::service::ingest::{IdentitySource, IngestService};
pub use crate::service::stats::Stats;
use crate::service::tls::{self, TlsSetupError};
use crate::sinks::{influx, otlp};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
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
fn spawn_influx(
    cfg: &Config,
    stats: &Arc<Stats>,
    setup: crate::rollup::setup::Setup,
    stop_rx: &tokio::sync::watch::Receiver<bool>,
) -> (influx::WriterHandle, tokio::task::JoinHandle<()>) {
    match cfg.sink {
        SinkKind::InfluxDb => {
            tokio::spawn(crate::rollup::resolution::run(cfg.influx.clone(), setup.clone(), stop_rx.clone()));
            let observer = cfg.influx.retention.as_ref().map(|r| {
                let dirty = Arc::new(crate::rollup::Dirty::new(r.max_dirty, stats.rollup.clone()));
                tokio::spawn(crate::rollup::task::run(cfg.influx.clone(), dirty.clone(), setup, stop_rx.clone()));
                dirty as Arc<dyn influx::StoredLines>
            });
            influx::spawn_observed(cfg.influx.clone(), stats.sink.clone(), stop_rx.clone(), observer)
        }
        SinkKind::Null => influx::spawn_null(stats.sink.clone()),
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
        TlsMode::Mutual(m) => Some(tls::server_config(m)?),
        TlsMode::InsecurePlaintextLoopback => None,
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    if let Some(addr) = cfg.metrics_listen {
        let s = stats.clone();
        let mut stop = stop_rx.clone();
        let bound = serve_metrics(addr, Arc::new(move || crate::service::telemetry::render(&s)), async move {
            let _ = stop.changed().await;
        })
        .await?;
        tracing::info!(%bound, "metrics at /metrics");
    }
    // Created first: the rollup and marker tasks report their setup on it.
    let (reporter, health) = tonic_health::server::health_reporter();
    let setup = crate::rollup::setup::Setup { stats: stats.rollup.clone(), health: Some(reporter.clone()) };
    let (writer, writer_task) = spawn_influx(&cfg, &stats, setup, &stop_rx);
    let (otlp, otlp_task) = match cfg.otlp.clone() {
        Some(o) => {
            tracing::info!(url = %o.url, required = o.required, "OTLP sink on");
            let (h, t) = otlp::spawn(o, stats.otlp.clone(), stop_rx.clone());
            (Some(h), Some(t))
        }
        None => (None, None),
    };
    let streams = stream_capacity();
    let identity = if tls_cfg.is_some() { IdentitySource::Certificate } else { IdentitySource::Hello };
    let l = &cfg.limits;
    let ingest = IngestService::new(
        writer,
        stats.ingest.clone(),
        identity,
        RateLimiter::new(l.agent_points_per_second, l.agent_burst_points),
        Dedup::new(l.dedup_window),
    )
    .with_hello_timeout(l.hello_timeout)
    .with_max_streams(streams)
    .with_otlp(otlp);
    let svc = IngestServer::new(ingest).max_decoding_message_size(l.max_message_bytes);
    reporter.set_serving::<IngestServer<IngestService>>().await;
    tracing::info!(listen = %local, tls = if tls_cfg.is_some() { "mutual" } else { "OFF (plaintext, loopback only)" },
        sink = ?cfg.sink, influx = %cfg.influx.url, database = %cfg.influx.database, "collector serving");
    let router = tonic::transport::Server::builder().add_service(health).add_service(svc);
    let result = match tls_cfg {
        Some(t) => router.serve_with_incoming_shutdown(tls::incoming(listener, t, stats.ingest.clone()), shutdown).await,
        None => router.serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown).await,
    };
    // Every stream (and its writer handle) is gone now: let the writer flush what it holds.
    let mut writer_task = writer_task;
    if tokio::time::timeout(drain, &mut writer_task).await.is_err() {
        tracing::warn!("InfluxDB still not writable after {drain:?}; unacknowledged batches stay with the agents");
        let _ = stop_tx.send(true);
        let _ = writer_task.await;
    }
    let _ = stop_tx.send(true);
    if let Some(t) = otlp_task {
        let _ = t.await;
    }
    result.map_err(ServeError::from)
}
