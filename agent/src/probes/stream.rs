//! Sends a finished probe's runs, and the full-rate power recorded around them, to the
//! collector(s) of the agent config over the same acknowledged stream as `run` mode (in-memory
//! backlog, same TLS), and waits until the collector has made them all durable.

use crate::config::Config;
use crate::export::backlog::MemoryBacklog;
use crate::export::grpc::{ExportSummary, Exporter};
use crate::runtime::{exporter_config, Clock, RunError};
use std::time::Duration;
use wattflip_proto::v1;

pub async fn send(cfg: &Config, hello: v1::Hello, batches: Vec<v1::Batch>, timeout: Duration) -> Result<ExportSummary, RunError> {
    let tls = cfg.tls.clone().ok_or(RunError::NoTls)?;
    let clock = Clock::new();
    let exporter = Exporter::new(
        exporter_config(cfg, tls),
        hello,
        // Room for every batch: the backlog drops its oldest when full, and none may be lost here.
        Box::new(MemoryBacklog::new(batches.len().max(16))),
        u64::try_from(clock.utc_now() / 1000).unwrap_or(1),
        Default::default(),
    );
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(exporter.run(rx, stop_rx, move || clock.utc_now()));
    for b in batches {
        if tx.send(b).await.is_err() {
            break;
        }
    }
    drop(tx);
    let mut task = task;
    Ok(match tokio::time::timeout(timeout, &mut task).await {
        Ok(r) => r.unwrap_or_default(),
        Err(_) => {
            let _ = stop_tx.send(true);
            task.await.unwrap_or_default()
        }
    })
}
