//! The dead-letter store: lines InfluxDB refused (a field type conflict, a line it cannot parse,
//! points beyond the retention policy), kept on the collector's disk so nothing refused disappears
//! without a trace. Each refusal is one JSON-lines file `dl-<ns>-<n>.jsonl` in `influx.dead_letter_dir`,
//! written to a temporary name, synced and renamed, before the batch it came from is acknowledged.
//! `wattflip-collector dead-letter list` shows them; `replay` (`replay.rs`, above both this store
//! and the writer it writes through) writes them again once the cause is fixed (a conflicting
//! measurement dropped, say): stored lines leave the store, lines still refused are written back
//! as a new file first, so a crash during replay loses nothing. A write that fails (a full disk)
//! removes its temporary file; temporary files left by a crash (or by a process that is gone) are
//! swept when a store is opened. A new kind of refusal needs only its class in [`class_of`].

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
    wattflip_proto::units::UnixNanos::now().0
}

/// A temporary file older than this is left over whoever wrote it: a write takes milliseconds.
const STALE_TMP: std::time::Duration = std::time::Duration::from_secs(600);

/// Whether `name` is a temporary file of the store (`.dl-<ns>-<pid>-<n>.jsonl.tmp`) left over: its
/// writer process is gone, or it is older than [`STALE_TMP`] (a recycled pid, pid 1 in a container).
fn is_leftover(name: &str, age: Option<std::time::Duration>) -> bool {
    let Some(stem) = name.strip_prefix(".dl-").and_then(|n| n.strip_suffix(".jsonl.tmp")) else {
        return false;
    };
    let writer_gone = stem.split('-').nth(1).and_then(|p| p.parse::<u32>().ok()).is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists());
    writer_gone || age.is_some_and(|a| a > STALE_TMP)
}

impl DeadLetterStore {
    /// Opens the store (the directory is made at the first write), sweeping leftover temporary files.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        let s = DeadLetterStore { dir: dir.into(), seq: AtomicU64::new(0) };
        let removed = s.sweep_temporary();
        if removed > 0 {
            tracing::warn!(dir = %s.dir.display(), removed, "dead-letter store: removed {removed} temporary file(s) left by interrupted writes (their lines were never acknowledged, so agents resent them)");
        }
        s
    }

    /// Removes leftover temporary files (see [`is_leftover`]); returns how many.
    fn sweep_temporary(&self) -> usize {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        let mut removed = 0;
        for e in rd.filter_map(|e| e.ok()) {
            let name = e.file_name().to_string_lossy().into_owned();
            let age = e.metadata().ok().and_then(|m| m.modified().ok()).and_then(|t| t.elapsed().ok());
            if is_leftover(&name, age) && std::fs::remove_file(e.path()).is_ok() {
                removed += 1;
            }
        }
        removed
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
        if let Err((what, e)) = write_then_rename(&tmp, &path, &text) {
            // Nothing half-written stays behind (a full disk would otherwise collect them).
            let _ = std::fs::remove_file(&tmp);
            return Err(self.io(format!("cannot {what} {}", tmp.display()))(e));
        }
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

/// Writes `text` to `tmp`, syncs it and renames it to `path`; on error, which step failed.
fn write_then_rename(tmp: &Path, path: &Path, text: &str) -> Result<(), (&'static str, std::io::Error)> {
    let mut f = std::fs::File::create(tmp).map_err(|e| ("create", e))?;
    f.write_all(text.as_bytes()).map_err(|e| ("write", e))?;
    f.sync_all().map_err(|e| ("sync", e))?;
    std::fs::rename(tmp, path).map_err(|e| ("rename", e))
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

    fn temporaries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).filter(|n| n.ends_with(".tmp")).collect();
        v.sort();
        v
    }

    /// Unmounts on drop.
    struct Tmpfs(PathBuf);

    impl Drop for Tmpfs {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }

    /// Issue 32 §6: a store on a full filesystem (an 8 KiB tmpfs, root) fails each write and
    /// leaves no temporary file behind; the next write that fits works.
    #[test]
    fn a_failed_write_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let st = std::process::Command::new("mount").args(["-t", "tmpfs", "-o", "size=8k", "wf-dl"]).arg(dir.path()).status().expect("mount");
        assert!(st.success(), "mounting an 8 KiB tmpfs needs root (mount from util-linux)");
        let _m = Tmpfs(dir.path().to_path_buf());
        let s = DeadLetterStore::new(dir.path());
        let big = "m f=\"".to_string() + &"x".repeat(64 << 10) + "\" 1";
        for _ in 0..3 {
            let e = s.append(&[DeadLetterStore::entry("refused", "r", &big)]).unwrap_err();
            assert!(e.to_string().contains("cannot write"), "{e}");
        }
        assert_eq!(temporaries(dir.path()), Vec::<String>::new());
        let ok = s.append(&[DeadLetterStore::entry("refused", "r", "m f=1 1")]).unwrap();
        assert_eq!(s.files().unwrap(), vec![ok]);
    }

    /// Temporary files of a writer that is gone, or too old to be in flight, are swept when a
    /// store opens; a fresh one of a live writer (this process) and the store's files are kept.
    #[test]
    fn leftover_temporary_files_are_swept_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        let me = std::process::id();
        let names = [
            format!(".dl-1-{gone}-0.jsonl.tmp"),
            format!(".dl-2-{me}-0.jsonl.tmp"),
            format!(".dl-3-{me}-1.jsonl.tmp"),
            "dl-4-1-0.jsonl".into(),
            ".other.tmp".into(),
        ];
        for n in &names {
            std::fs::write(dir.path().join(n), "x").unwrap();
        }
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        std::fs::File::options().write(true).open(dir.path().join(&names[2])).unwrap().set_modified(old).unwrap();
        let s = DeadLetterStore::new(dir.path());
        assert_eq!(temporaries(dir.path()), vec![names[1].clone(), ".other.tmp".to_string()]);
        assert_eq!(s.files().unwrap(), vec![dir.path().join("dl-4-1-0.jsonl")]);
    }
}
