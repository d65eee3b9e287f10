//! Counts of loss that survive the spool failing (issue 32 §2). While the spool cannot store (a
//! filesystem remounted read-only after an error, a full disk), lost batches cannot be counted in a
//! stored batch as usual; the exporter then sends the count (and a `spool_write_failed` event with
//! the errno) to the collector directly, in a small events-only batch that is not spooled, and keeps
//! what is not yet acknowledged in this second small state file, so a restart (after the network
//! was down too) still reports it.
//!
//! The file is `<spool dir>.lost` (a sibling of the spool folder, so a spool on its own filesystem
//! does not take it down with it): JSON [`LossState`], written atomically (temporary file, fsync,
//! rename) on every change, removed when nothing is left to report. To keep another count across
//! restarts, add a field to [`LossState`] (with `#[serde(default)]`).

use crate::events::event;
use serde::{Deserialize, Serialize};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use wattflip_proto::v1;

/// A store failure: (errno, message).
pub type StoreError = (Option<i32>, String);

/// What is lost and not yet acknowledged by the collector.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LossState {
    /// Batches lost (dropped for room, or not stored because the spool failed) and in no message.
    #[serde(default)]
    pub dropped_batches: u64,
    /// The spool's store failure not yet in any message.
    #[serde(default)]
    pub spool_error: Option<StoreError>,
    /// The direct batch sent and not acknowledged: sent again after a restart with the same
    /// sequence, so a collector that stored it before the agent stopped takes it as a duplicate.
    #[serde(default)]
    pub direct: Option<DirectRecord>,
}

/// A direct batch, enough to build it again exactly: its events keep their times, so a collector
/// that already wrote it (and no longer remembers its sequence, or has not finished writing it
/// when the resend arrives) writes the same points again, which InfluxDB keeps once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectRecord {
    pub sequence: u64,
    pub dropped_batches: u64,
    pub spool_error: Option<StoreError>,
    /// The times of its `backlog_dropped` and `spool_write_failed` events (absent in a file from
    /// before they were kept: then the time of the restart).
    #[serde(default)]
    pub dropped_time_ns: Option<i64>,
    #[serde(default)]
    pub error_time_ns: Option<i64>,
}

impl DirectRecord {
    /// The record of the direct batch `b`, which carries `dropped` lost batches.
    pub fn of(b: &v1::Batch, dropped: u64) -> DirectRecord {
        let time_of = |kind: &str| b.events.iter().find(|e| e.kind == kind).map(|e| e.time_ns);
        DirectRecord {
            sequence: b.sequence,
            dropped_batches: dropped,
            spool_error: error_in(&b.events),
            dropped_time_ns: time_of("backlog_dropped"),
            error_time_ns: time_of("spool_write_failed"),
        }
    }

    /// The batch again, for `agent_id`; events whose time the record lacks get `now_ns`.
    pub fn batch(&self, agent_id: &str, now_ns: i64) -> v1::Batch {
        let mut b = direct_batch(agent_id, self.sequence, self.dropped_batches, self.dropped_time_ns.unwrap_or(now_ns));
        b.events.extend(self.spool_error.as_ref().map(|f| failure_event(f, self.error_time_ns.unwrap_or(now_ns))));
        b
    }
}

impl LossState {
    fn is_empty(&self) -> bool {
        self.dropped_batches == 0 && self.spool_error.is_none() && self.direct.is_none()
    }
}

/// The state file.
#[derive(Debug, Clone)]
pub struct LossFile {
    path: PathBuf,
}

impl LossFile {
    /// The loss file of the spool folder `spool_dir`: `<spool_dir>.lost`.
    pub fn of_spool(spool_dir: &Path) -> LossFile {
        // By components, so `spool/` names `spool.lost` too, not a file inside the folder.
        let path = match (spool_dir.parent(), spool_dir.file_name()) {
            (Some(parent), Some(name)) => {
                let mut n = name.to_owned();
                n.push(".lost");
                parent.join(n)
            }
            _ => spool_dir.join("wattflip-spool.lost"),
        };
        LossFile { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the file holds; nothing when it does not exist. An unreadable file is reported, and
    /// left for the operator (it may hold a count).
    pub fn load(&self) -> Result<LossState, String> {
        match std::fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| format!("{}: not a loss state file ({e}); move it away", self.path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(LossState::default()),
            Err(e) => Err(format!("cannot read {}: {e}", self.path.display())),
        }
    }

    /// Writes `state` durably, or removes the file when `state` is empty.
    pub fn save(&self, state: &LossState) -> std::io::Result<()> {
        if state.is_empty() {
            return match std::fs::remove_file(&self.path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            };
        }
        let mut tmp = self.path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let written = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&serde_json::to_vec(state).map_err(std::io::Error::other)?)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.path)
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written?;
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::File::open(dir).and_then(|d| d.sync_all())?;
        }
        Ok(())
    }
}

/// The exporter's side: whether the spool is failing, the events-only batch sent directly and not
/// yet acknowledged (with the count it carries), and the state file.
#[derive(Debug, Default)]
pub struct Losses {
    pub file: Option<LossFile>,
    /// The spool's current store failure; `None` while it stores.
    pub failing: Option<StoreError>,
    /// The direct batch in flight and the dropped count it carries.
    pub direct: Option<(v1::Batch, u64)>,
}

impl Losses {
    /// A store failed with `errno`/`text`: the `spool_write_failed` event when this failure is new
    /// (once per errno while failing, not once per batch).
    pub fn store_failed(&mut self, errno: Option<i32>, text: String, now_ns: i64) -> Option<v1::Event> {
        let new = self.failing.as_ref().is_none_or(|f| f.0 != errno);
        self.failing = Some((errno, text.clone()));
        new.then(|| failure_event(&(errno, text), now_ns))
    }

    /// The sequence of the direct batch, if one is in flight.
    pub fn direct_seq(&self) -> Option<u64> {
        self.direct.as_ref().map(|d| d.0.sequence)
    }

    /// The collector acknowledged up to `seq`: whether that delivered the direct batch.
    pub fn acked(&mut self, seq: u64) -> bool {
        let delivered = self.direct_seq().is_some_and(|d| d <= seq);
        if delivered {
            self.direct = None;
        }
        delivered
    }

    /// Writes what is not yet reported: `dropped` and the failure among `pending` events (in no
    /// message yet), and the direct batch in flight.
    pub fn save(&self, dropped: u64, pending: &[v1::Event]) {
        let Some(f) = &self.file else { return };
        let direct = self.direct.as_ref().map(|(b, n)| DirectRecord::of(b, *n));
        let state = LossState { dropped_batches: dropped, spool_error: error_in(pending), direct };
        if let Err(e) = f.save(&state) {
            tracing::error!(file = %f.path().display(), "cannot keep the count of lost batches ({dropped} unreported): {e}");
        }
    }
}

/// The failure reported by a `spool_write_failed` event among `events`.
pub fn error_in(events: &[v1::Event]) -> Option<StoreError> {
    let e = events.iter().find(|e| e.kind == "spool_write_failed")?;
    Some((e.attributes.get("errno").and_then(|n| n.parse().ok()), e.attributes.get("error").cloned().unwrap_or_default()))
}

/// The `spool_write_failed` event of `failure`.
pub fn failure_event(failure: &StoreError, now_ns: i64) -> v1::Event {
    let (errno, text) = failure;
    let msg = format!("the spool cannot store batches: {text}; batches are lost (counted in backlog_dropped events) until it can: check the spool's filesystem (dmesg), repair it and restart the agent");
    let mut e = event(now_ns, "spool_write_failed", v1::Severity::Critical, "", msg);
    e.attributes.insert("errno".into(), errno.map_or("unknown".into(), |n| n.to_string()));
    e.attributes.insert("error".into(), text.clone());
    e
}

/// The direct batch of `agent_id` carrying `dropped` (if any); the caller adds the failure.
pub fn direct_batch(agent_id: &str, sequence: u64, dropped: u64, now_ns: i64) -> v1::Batch {
    let mut b = v1::Batch { agent_id: agent_id.to_string(), sequence, ..Default::default() };
    if dropped > 0 {
        b.events.push(dropped_event(dropped, now_ns));
    }
    b
}

/// The `backlog_dropped` event for `n` lost batches.
pub fn dropped_event(n: u64, now_ns: i64) -> v1::Event {
    let mut e = event(
        now_ns,
        "backlog_dropped",
        v1::Severity::Warning,
        "",
        format!("{n} batch(es) dropped because the collector was unreachable and the spool or backlog was full, or the spool could not store them"),
    );
    e.attributes.insert("dropped_batches".into(), n.to_string());
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saves_loads_and_removes_when_nothing_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let f = LossFile::of_spool(&dir.path().join("spool"));
        assert_eq!(f.path(), dir.path().join("spool.lost"));
        assert_eq!(LossFile::of_spool(Path::new("/var/spool/wf/")).path(), Path::new("/var/spool/wf.lost"));
        assert_eq!(f.load().unwrap(), LossState::default());
        let s = LossState { dropped_batches: 140, spool_error: Some((Some(30), "Read-only file system (os error 30)".into())), direct: None };
        f.save(&s).unwrap();
        assert_eq!(
            std::fs::read_to_string(f.path()).unwrap(),
            r#"{"dropped_batches":140,"spool_error":[30,"Read-only file system (os error 30)"],"direct":null}"#
        );
        assert_eq!(f.load().unwrap(), s);
        f.save(&LossState::default()).unwrap();
        assert!(!f.path().exists());
        std::fs::write(f.path(), "x").unwrap();
        assert!(f.load().unwrap_err().contains("not a loss state file"));
    }

    /// A file written before the direct batch's event times were kept still loads; its events
    /// then get the restart's time.
    #[test]
    fn a_direct_record_without_event_times_loads_and_is_sent_at_the_restarts_time() {
        let dir = tempfile::tempdir().unwrap();
        let f = LossFile::of_spool(&dir.path().join("spool"));
        std::fs::write(f.path(), r#"{"dropped_batches":0,"spool_error":null,"direct":{"sequence":3,"dropped_batches":2,"spool_error":[30,"EROFS"]}}"#).unwrap();
        let d = f.load().unwrap().direct.unwrap();
        assert_eq!((d.dropped_time_ns, d.error_time_ns), (None, None));
        let b = d.batch("a", 42);
        let got: Vec<(&str, i64)> = b.events.iter().map(|e| (e.kind.as_str(), e.time_ns)).collect();
        assert_eq!((b.sequence, got), (3, vec![("backlog_dropped", 42), ("spool_write_failed", 42)]));
    }
}
