//! Where the exporter keeps batches until the collector acknowledges them: the [`Backlog`] trait,
//! with the bounded in-memory implementation (used when no spool directory is configured) here and
//! the disk spool in `spool.rs`. Both drop the oldest batch when full and report how many. A new
//! kind of store implements the trait; the exporter does not change.

use std::collections::VecDeque;
use wattflip_proto::v1;

/// Batches and samples in a count (samples: power and temperature readings).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Count {
    pub batches: u64,
    pub samples: u64,
}

impl Count {
    pub fn add(&mut self, o: Count) {
        self.batches += o.batches;
        self.samples += o.samples;
    }
}

pub fn samples_of(b: &v1::Batch) -> u64 {
    (b.power.len() + b.temperature.len()) as u64
}

#[derive(Debug, thiserror::Error)]
pub enum BacklogError {
    #[error("spool {path}: {what}: {source}")]
    Io {
        path: std::path::PathBuf,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// Another process owns the spool (see `spool_lock`).
    #[error("spool {dir} is in use by {holder} (it holds {dir}/lock): two agents on one spool would lose data; stop that agent or give this one another [spool] dir")]
    Locked { dir: std::path::PathBuf, holder: String },
}

impl BacklogError {
    /// The OS error number behind it, if any (EROFS after an ext4 error, ENOSPC, EIO).
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            BacklogError::Io { source, .. } => source.raw_os_error(),
            BacklogError::Locked { .. } => None,
        }
    }
}

pub trait Backlog: Send + Sync {
    /// Stores `b` (its sequence already set, above every stored one). Returns what was dropped to
    /// make room. On error the batch is not stored.
    fn push(&mut self, b: v1::Batch) -> Result<Count, BacklogError>;
    /// Forgets everything at or below `seq`; returns what that acknowledged.
    fn ack(&mut self, seq: u64) -> Count;
    /// The first stored batch with a sequence above `seq`, for (re)sending in order.
    fn next_after(&mut self, seq: u64) -> Option<v1::Batch>;
    /// Whether a batch above `seq` is stored (cheap: no read).
    fn has_after(&self, seq: u64) -> bool;
    /// Forgets one batch the collector refused as invalid.
    fn remove(&mut self, seq: u64);
    /// Batches stored and not acknowledged.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Periodic housekeeping (the spool's interval sync). Default: nothing.
    fn maintain(&mut self) {}
}

/// Bounded in-memory backlog: lost when the agent stops.
pub struct MemoryBacklog {
    max_batches: usize,
    batches: VecDeque<v1::Batch>,
}

impl MemoryBacklog {
    pub fn new(max_batches: usize) -> Self {
        MemoryBacklog { max_batches: max_batches.max(1), batches: VecDeque::new() }
    }
}

impl Backlog for MemoryBacklog {
    fn push(&mut self, b: v1::Batch) -> Result<Count, BacklogError> {
        let mut dropped = Count::default();
        while self.batches.len() >= self.max_batches {
            if let Some(old) = self.batches.pop_front() {
                dropped.add(Count { batches: 1, samples: samples_of(&old) });
                tracing::warn!(sequence = old.sequence, "backlog full: dropped the oldest batch");
            }
        }
        self.batches.push_back(b);
        Ok(dropped)
    }

    fn ack(&mut self, seq: u64) -> Count {
        let mut n = Count::default();
        while self.batches.front().is_some_and(|b| b.sequence <= seq) {
            if let Some(b) = self.batches.pop_front() {
                n.add(Count { batches: 1, samples: samples_of(&b) });
            }
        }
        n
    }

    fn next_after(&mut self, seq: u64) -> Option<v1::Batch> {
        let i = self.batches.partition_point(|b| b.sequence <= seq);
        self.batches.get(i).cloned()
    }

    fn has_after(&self, seq: u64) -> bool {
        self.batches.back().is_some_and(|b| b.sequence > seq)
    }

    fn remove(&mut self, seq: u64) {
        self.batches.retain(|b| b.sequence != seq);
    }

    fn len(&self) -> usize {
        self.batches.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(seq: u64) -> v1::Batch {
        v1::Batch { sequence: seq, temperature: vec![Default::default(); 2], ..Default::default() }
    }

    #[test]
    fn memory_backlog_is_bounded_ordered_and_acked_cumulatively() {
        let mut m = MemoryBacklog::new(2);
        assert_eq!(m.push(batch(1)).unwrap(), Count::default());
        assert_eq!(m.push(batch(2)).unwrap(), Count::default());
        assert_eq!(m.push(batch(3)).unwrap(), Count { batches: 1, samples: 2 });
        assert_eq!(m.next_after(0).map(|b| b.sequence), Some(2));
        assert_eq!(m.next_after(2).map(|b| b.sequence), Some(3));
        assert!(m.has_after(2) && !m.has_after(3));
        assert_eq!(m.ack(2), Count { batches: 1, samples: 2 });
        m.remove(3);
        assert!(m.is_empty());
    }
}
