//! The dead-letter store: lines InfluxDB refused (a field type conflict, a line it cannot parse,
//! points beyond the retention policy), kept on the collector's disk so nothing refused disappears
//! without a trace. Each refusal is one JSON-lines file `dl-<ns>-<n>.jsonl` in `influx.dead_letter_dir`,
//! written to a temporary name, synced and renamed, before the batch it came from is acknowledged.
//! `wattflip-collector dead-letter list` shows them; `replay` (`replay.rs`, above both this store
//! and the writer it writes through) writes them again once the cause is fixed (a conflicting
//! measurement dropped, say): stored lines leave the store, lines still refused are written back
//! as a new file first, so a crash during replay loses nothing. A new kind of
//! refusal needs only its class in [`class_of`].

use serde::{Deserialize, Serialize};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// One refused line, with what InfluxDB said about it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// When the collector stored it here (UTC ns).
    pub at_ns: i64,
    /// `type_conflict`, `parse_error` or `refused`.
    pub class: String,
    /// InfluxDB's answer for this line (or for the request it was refused in).
    pub reason: String,
    /// The line exactly as it was sent, without its `\n`.
    pub line: String,
}

/// The reason class of an InfluxDB 400 answer.
pub fn class_of(body: &str) -> &'static str {
    if body.contains("field type conflict") {
        "type_conflict"
    } else if body.contains("unable to parse") {
        "parse_error"
    } else {
        "refused"
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DeadLetterError {
    #[error("dead-letter store {dir}: {what}: {source} (check influx.dead_letter_dir: it must be a writable directory)")]
    Io { dir: PathBuf, what: String, source: std::io::Error },
    #[error("dead-letter file {file}, line {line}: {detail}")]
    Corrupt { file: PathBuf, line: usize, detail: String },
}

#[derive(Debug)]
pub struct DeadLetterStore {
    dir: PathBuf,
    seq: AtomicU64,
}

fn now_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)).unwrap_or(0)
}

impl DeadLetterStore {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        DeadLetterStore { dir: dir.into(), seq: AtomicU64::new(0) }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn io(&self, what: impl Into<String>) -> impl FnOnce(std::io::Error) -> DeadLetterError + '_ {
        let what = what.into();
        move |source| DeadLetterError::Io { dir: self.dir.clone(), what, source }
    }

    /// Stores `entries` durably (fsync of the file and the directory); returns the file.
    pub fn append(&self, entries: &[Entry]) -> Result<PathBuf, DeadLetterError> {
        std::fs::create_dir_all(&self.dir).map_err(self.io("cannot create the directory"))?;
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        let name = format!("dl-{}-{}-{n}.jsonl", now_ns(), std::process::id());
        let tmp = self.dir.join(format!(".{name}.tmp"));
        let path = self.dir.join(&name);
        let mut text = String::new();
        for e in entries {
            // Serialising plain strings cannot fail.
            text.push_str(&serde_json::to_string(e).unwrap_or_default());
            text.push('\n');
        }
        let mut f = std::fs::File::create(&tmp).map_err(self.io(format!("cannot create {}", tmp.display())))?;
        f.write_all(text.as_bytes()).map_err(self.io(format!("cannot write {}", tmp.display())))?;
        f.sync_all().map_err(self.io(format!("cannot sync {}", tmp.display())))?;
        std::fs::rename(&tmp, &path).map_err(self.io(format!("cannot rename {}", tmp.display())))?;
        std::fs::File::open(&self.dir).and_then(|d| d.sync_all()).map_err(self.io("cannot sync the directory"))?;
        Ok(path)
    }

    /// The store's files, oldest first (empty when the directory does not exist yet).
    pub fn files(&self) -> Result<Vec<PathBuf>, DeadLetterError> {
        let rd = match std::fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(self.io("cannot list the directory")(e)),
        };
        let mut files: Vec<PathBuf> = rd
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("dl-") && n.ends_with(".jsonl")))
            .collect();
        files.sort();
        Ok(files)
    }

    /// The entries of one file.
    pub fn read(&self, file: &Path) -> Result<Vec<Entry>, DeadLetterError> {
        let text = std::fs::read_to_string(file).map_err(self.io(format!("cannot read {}", file.display())))?;
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| serde_json::from_str(l).map_err(|e| DeadLetterError::Corrupt { file: file.to_path_buf(), line: i + 1, detail: e.to_string() }))
            .collect()
    }

    pub fn remove(&self, file: &Path) -> Result<(), DeadLetterError> {
        std::fs::remove_file(file).map_err(self.io(format!("cannot remove {}", file.display())))
    }

    /// A new entry stamped now.
    pub fn entry(class: &str, reason: &str, line: &str) -> Entry {
        Entry { at_ns: now_ns(), class: class.into(), reason: reason.into(), line: line.trim_end_matches('\n').into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_survive_a_round_trip_and_files_list_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let s = DeadLetterStore::new(dir.path().join("dl"));
        assert_eq!(s.files().unwrap(), Vec::<PathBuf>::new());
        let a = s.append(&[DeadLetterStore::entry("type_conflict", "partial write: x", "m,t=a\\ b f=\"q\\\"\" 1\n")]).unwrap();
        let b = s.append(&[DeadLetterStore::entry("parse_error", "unable to parse", "m f= 2")]).unwrap();
        assert_eq!(s.files().unwrap(), vec![a.clone(), b]);
        let e = s.read(&a).unwrap();
        assert_eq!(e.len(), 1);
        assert_eq!((e[0].class.as_str(), e[0].line.as_str()), ("type_conflict", "m,t=a\\ b f=\"q\\\"\" 1"));
        assert_eq!(class_of("{\"error\":\"partial write: unable to parse 'x': bad dropped=0\"}"), "parse_error");
        assert_eq!(class_of("partial write: field type conflict: input field"), "type_conflict");
        assert_eq!(class_of("partial write: points beyond retention policy dropped=1"), "refused");
    }
}
