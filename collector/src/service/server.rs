//! Hosts the Ingest service and the standard gRPC health service on a listener, and drains the
//! InfluxDB writer after the server stops so that queued batches still reach the store.

use crate::config::Config;
use crate::service::ingest::{IngestService, IngestStats};
use crate::sinks::influx::{self, SinkStats};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use wattflip_proto::v1::ingest_server::IngestServer;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("gRPC server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// Counters of one collector process.
#[derive(Debug, Default)]
pub struct Stats {
    pub ingest: Arc<IngestStats>,
    pub sink: Arc<SinkStats>,
}

/// Serves until `shutdown` completes, then flushes the writer (at most `drain` long).
pub async fn serve(
    cfg: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
    stats: Arc<Stats>,
    drain: Duration,
) -> Result<(), ServeError> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (writer, writer_task) = influx::spawn(cfg.influx.clone(), stats.sink.clone(), stop_rx);
    let (reporter, health) = tonic_health::server::health_reporter();
    let svc = IngestServer::new(IngestService::new(writer, stats.ingest.clone()))
        .max_decoding_message_size(cfg.max_message_bytes);
    reporter.set_serving::<IngestServer<IngestService>>().await;
    tracing::info!(listen = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        influx = %cfg.influx.url, database = %cfg.influx.database, "collector serving");
    let result = tonic::transport::Server::builder()
        .add_service(health)
        .add_service(svc)
        .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown)
        .await;
    // Every stream (and its writer handle) is gone now: let the writer flush what it holds.
    let mut writer_task = writer_task;
    if tokio::time::timeout(drain, &mut writer_task).await.is_err() {
        tracing::warn!("InfluxDB still not writable after {drain:?}; unacknowledged batches stay with the agents");
        let _ = stop_tx.send(true);
        let _ = writer_task.await;
    }
    result.map_err(ServeError::from)
}
