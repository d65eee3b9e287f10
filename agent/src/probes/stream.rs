//! Sends a finished probe's runs to a collector over the same acknowledged stream as `run` mode,
//! and waits until the collector has made them durable.

use crate::export::grpc::{ExportSummary, Exporter, ExporterConfig};
use crate::runtime::Clock;
use std::time::Duration;
use wattflip_proto::v1;

pub async fn send(url: &str, hello: v1::Hello, batch: v1::Batch, timeout: Duration) -> ExportSummary {
    let clock = Clock::new();
    let exporter = Exporter::new(
        ExporterConfig {
            url: url.to_string(),
            agent_id: hello.agent_id.clone(),
            connect_timeout: Duration::from_secs(5),
            backoff_initial: Duration::from_millis(200),
            backoff_max: Duration::from_secs(5),
            max_batches: 16,
        },
        hello,
        u64::try_from(clock.utc_now() / 1000).unwrap_or(1),
    );
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(exporter.run(rx, stop_rx, move || clock.utc_now()));
    let _ = tx.send(batch).await;
    drop(tx);
    let mut task = task;
    match tokio::time::timeout(timeout, &mut task).await {
        Ok(r) => r.unwrap_or_default(),
        Err(_) => {
            let _ = stop_tx.send(true);
            task.await.unwrap_or_default()
        }
    }
}
