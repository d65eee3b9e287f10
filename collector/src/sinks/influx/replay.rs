//! Replay of the dead-letter store: every stored line is written again through the collector's own
//! writer, and a file leaves the store once each of its lines is stored or dead-lettered anew.
//! Its own file because it uses both the store and the writer (which itself dead-letters), so
//! neither of them depends on the other's user. `wattflip-collector dead-letter replay` runs it.

use crate::sinks::influx::config::InfluxConfig;
use crate::sinks::influx::dead_letter::{DeadLetterError, DeadLetterStore};
use crate::sinks::influx::observer::StoredLines;
use crate::sinks::influx::writer::{spawn_observed, SinkStats};

/// What a replay did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayReport {
    pub files: usize,
    pub stored: usize,
    /// Refused again: back in the store (as new files), by class.
    pub still_refused: std::collections::BTreeMap<String, usize>,
}

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    Store(#[from] DeadLetterError),
    #[error("InfluxDB at {0} was not writable in time; nothing was removed from the dead-letter store (the lines written so far are stored and will be written again, harmlessly, by the next replay)")]
    Unfinished(String),
}

/// Writes every dead-lettered line again through the collector's own writer (same batching,
/// retries and refusal handling); a file leaves the store once each of its lines is stored or
/// dead-lettered anew. Gives up after `deadline` while InfluxDB stays unreachable. `observer` is
/// told of the lines stored (the rollups recompute their minutes).
pub async fn replay(cfg: &InfluxConfig, deadline: std::time::Duration, observer: Option<std::sync::Arc<dyn StoredLines>>) -> Result<ReplayReport, ReplayError> {
    let store = DeadLetterStore::new(cfg.dead_letter_dir.clone());
    let files = store.files()?;
    let stats = std::sync::Arc::new(SinkStats::default());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (writer, task) = spawn_observed(cfg.clone(), stats, stop_rx, observer);
    let mut report = ReplayReport { files: files.len(), ..Default::default() };
    let until = tokio::time::Instant::now() + deadline;
    for file in &files {
        let entries = store.read(file)?;
        let lines: Vec<String> = entries.iter().map(|e| format!("{}\n", e.line)).collect();
        let n = lines.len();
        let outcome = match writer.write(lines).await {
            Ok(done) => tokio::time::timeout_at(until, done).await.ok().and_then(Result::ok),
            Err(_) => None,
        };
        let Some(outcome) = outcome else {
            let _ = stop_tx.send(true);
            return Err(ReplayError::Unfinished(cfg.url.clone()));
        };
        for (_, class) in &outcome.refused {
            *report.still_refused.entry(class.to_string()).or_default() += 1;
        }
        report.stored += n - outcome.refused.len();
        store.remove(file)?;
    }
    drop(writer);
    let _ = task.await;
    Ok(report)
}
