//! The agent's disk spool: a write-ahead log of batches, written before a batch is sent and read
//! back for every (re)send, so nothing sampled is lost to a collector outage or an agent restart.
//!
//! Layout: `<dir>/<first sequence, 20 digits>.seg` segment files, each a run of records
//! `magic "WFB2" | len: u32 LE | crc32(payload): u32 LE | payload` where the payload is the
//! prost-encoded `wattflip.v1.Batch` (which carries its sequence). A segment is closed (fsynced)
//! when the next record would pass `segment_bytes`; a segment whose records are all acknowledged is
//! deleted, except the newest, whose name and last record tell a restarted agent where sequences go
//! on. When the total passes `max_bytes` the oldest segment is deleted and its unacknowledged
//! batches counted as dropped. `<dir>/epoch` holds the spool's stream epoch (random, made with the
//! spool): the collector tells a new spool's reused sequence numbers from resends by it.
//!
//! At start-up every segment is checked record by record with bounded memory (positioned reads, one
//! record at a time): a corrupt record is skipped and reading resumes at the next magic that starts
//! a valid record, so only the damaged record is lost; the number lost is exact from the gap in
//! sequence numbers. A torn tail is truncated. Files that cannot be segments (a directory, a FIFO,
//! a symlink, a name that is not a sequence, a file larger than any segment) are left alone and
//! reported, never opened. Segments of the first format (no magic) are still read, a corrupt record
//! ending such a segment as before. To change the format, change the magic.
//!
//! Reads use positioned reads on the segment files, served from the page cache in the normal case
//! (a record is read back right after it was appended).

use crate::export::backlog::{samples_of, Backlog, BacklogError, Count};
use crate::export::segment::{frame, list, lost_in, open_checked, scan, segment_path, Rec, HEADER, MAX_RECORD};
use crate::export::spool_lock::{lock, SpoolLock};
use prost::Message as _;
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use wattflip_proto::v1;

const EPOCH_FILE: &str = "epoch";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncPolicy {
    /// fsync after every batch: nothing acknowledged by the spool is lost to a power cut.
    EveryBatch,
    /// fsync at most this often (and on segment close): a power cut loses at most this window.
    Interval(Duration),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpoolConfig {
    pub dir: PathBuf,
    pub max_bytes: u64,
    pub segment_bytes: u64,
    pub sync: SyncPolicy,
}

/// What start-up found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// Batches found (all are resent: acknowledgements are not persisted, and resends are
    /// idempotent at the collector and in InfluxDB).
    pub records: u64,
    /// Bytes cut off corrupt or torn segment tails.
    pub truncated_bytes: u64,
    pub truncated_segments: Vec<PathBuf>,
    /// Damaged records skipped in the middle of segments: (segment, offset, bytes).
    pub damaged: Vec<(PathBuf, u64, u64)>,
    /// Stored batches lost to damage, counted exactly from the gaps in their sequence numbers
    /// (a torn or corrupt tail adds what the next segment's first sequence shows was there).
    pub lost_batches: u64,
    /// Files in the spool folder that cannot be segments, left alone: (path, why).
    pub foreign: Vec<(PathBuf, String)>,
    /// The first sequence a new batch may use.
    pub next_sequence: u64,
    /// The spool's stream epoch (see the module docs).
    pub epoch: u64,
    /// Why the epoch file was replaced although the spool holds segments (unreadable or not a
    /// number): the collector then sees the kept batches under a new epoch.
    pub epoch_replaced: Option<String>,
}

#[derive(Debug)]
struct Segment {
    path: PathBuf,
    bytes: u64,
    /// Unacknowledged records, in sequence order.
    recs: VecDeque<Rec>,
}

pub struct Spool {
    cfg: SpoolConfig,
    segments: VecDeque<Segment>,
    /// Append handle of the newest segment.
    active: File,
    total_bytes: u64,
    unsynced: bool,
    last_sync: Instant,
    /// Held for the spool's life: one agent per spool folder.
    _lock: SpoolLock,
}

fn io<'a>(path: &'a Path, what: &'static str) -> impl FnOnce(std::io::Error) -> BacklogError + 'a {
    move |source| BacklogError::Io { path: path.to_owned(), what, source }
}

impl Spool {
    /// Opens (or creates) the spool and recovers what it holds. `min_next` is a lower bound for
    /// the next sequence (the agent passes the UTC microsecond so sequences also rise across a
    /// wiped spool).
    pub fn open(cfg: SpoolConfig, min_next: u64) -> Result<(Spool, Recovery), BacklogError> {
        std::fs::create_dir_all(&cfg.dir).map_err(io(&cfg.dir, "cannot create the directory"))?;
        let held = lock(&cfg.dir)?;
        let mut rec = Recovery { next_sequence: min_next.max(1), ..Default::default() };
        // A segment never exceeds this: it rotates before passing `segment_bytes`, and its first
        // record may be up to MAX_RECORD.
        let largest = cfg.segment_bytes.saturating_add(HEADER + u64::from(MAX_RECORD));
        let (mut names, foreign) = list(&cfg.dir, largest).map_err(io(&cfg.dir, "cannot list the directory"))?;
        rec.foreign = foreign;
        names.sort();
        let mut segments = VecDeque::new();
        let mut last_seq = 0u64;
        let mut unknown_tail = false;
        // Whole records rotted in a segment's tail: counted from the next segment's sequence gap
        // when there is one, else (the newest segment) one lost batch each.
        let mut rotten_unconfirmed = 0u64;
        for (first, path) in names {
            let Some((f, len)) = open_checked(&path, largest).map_err(io(&path, "cannot open a segment"))? else {
                rec.foreign.push((path.clone(), "it changed into something that cannot be a segment".into()));
                continue;
            };
            let mut s = scan(&f, len);
            // A torn or corrupt tail before this segment: its first sequence shows how many were lost.
            if unknown_tail && last_seq > 0 && first > last_seq + 1 {
                rec.lost_batches += first - last_seq - 1;
                rotten_unconfirmed = 0;
            }
            unknown_tail = false;
            // No gap to count from: the whole records rotted in the previous tail count.
            rec.lost_batches += std::mem::take(&mut rotten_unconfirmed);
            // Sequences must rise across segments too; anything else is a stale or foreign record.
            let keep = s.recs.iter().take_while(|r| r.seq > last_seq).count();
            let good = if keep < s.recs.len() { s.recs[keep].offset } else { s.good_end };
            s.recs.truncate(keep);
            s.damaged.retain(|&(off, _)| off < good);
            rec.lost_batches += lost_in(&s, first.saturating_sub(1).max(last_seq));
            for &(off, n) in &s.damaged {
                tracing::warn!(segment = %path.display(), offset = off, bytes = n, "spool: damaged record skipped, reading resumed after it");
                rec.damaged.push((path.clone(), off, n));
            }
            if good < len {
                let cut = len - good;
                tracing::warn!(segment = %path.display(), bytes = cut, kept = s.recs.len(), "spool: corrupt or torn tail truncated");
                OpenOptions::new().write(true).open(&path).and_then(|f| f.set_len(good)).map_err(io(&path, "cannot truncate a corrupt tail"))?;
                rec.truncated_bytes += cut;
                rec.truncated_segments.push(path.clone());
                unknown_tail = true;
                rotten_unconfirmed = s.rotten_tail;
            }
            if let Some(r) = s.recs.last() {
                last_seq = r.seq;
            }
            rec.next_sequence = rec.next_sequence.max(first).max(last_seq + 1);
            rec.records += s.recs.len() as u64;
            segments.push_back(Segment { path, bytes: good, recs: s.recs.into() });
        }
        rec.lost_batches += rotten_unconfirmed;
        // Empty segments other than the newest carry nothing.
        while segments.len() > 1 && segments.front().is_some_and(|s| s.recs.is_empty()) {
            if let Some(s) = segments.pop_front() {
                let _ = std::fs::remove_file(&s.path);
            }
        }
        (rec.epoch, rec.epoch_replaced) = epoch(&cfg.dir, segments.is_empty())?;
        // Appends go to a current-format segment: a first-format newest one is left as it is.
        let newest_is_legacy = segments.back().is_some_and(|s: &Segment| s.recs.front().is_some_and(|r| r.legacy));
        if segments.is_empty() || newest_is_legacy {
            let path = segment_path(&cfg.dir, rec.next_sequence);
            segments.push_back(Segment { path, bytes: 0, recs: VecDeque::new() });
        }
        let newest = &segments[segments.len() - 1].path;
        let active = OpenOptions::new().create(true).append(true).open(newest).map_err(io(newest, "cannot open a segment"))?;
        sync_dir(&cfg.dir);
        let total_bytes = segments.iter().map(|s| s.bytes).sum();
        Ok((Spool { cfg, segments, active, total_bytes, unsynced: false, last_sync: Instant::now(), _lock: held }, rec))
    }

    fn sync(&mut self) -> Result<(), BacklogError> {
        if self.unsynced {
            let path = &self.segments[self.segments.len() - 1].path;
            self.active.sync_data().map_err(io(path, "cannot fsync"))?;
            self.unsynced = false;
        }
        self.last_sync = Instant::now();
        Ok(())
    }

    /// Closes the active segment and starts one named after `first_seq`.
    fn rotate(&mut self, first_seq: u64) -> Result<(), BacklogError> {
        self.unsynced = true;
        self.sync()?;
        let path = segment_path(&self.cfg.dir, first_seq);
        self.active = OpenOptions::new().create(true).append(true).open(&path).map_err(io(&path, "cannot create a segment"))?;
        sync_dir(&self.cfg.dir);
        // The previous newest segment may be fully acknowledged already.
        let prev = self.segments.len() - 1;
        self.segments.push_back(Segment { path, bytes: 0, recs: VecDeque::new() });
        if self.segments[prev].recs.is_empty() {
            self.delete_segment(prev);
        }
        Ok(())
    }

    fn delete_segment(&mut self, i: usize) -> Count {
        let Some(s) = self.segments.remove(i) else { return Count::default() };
        if let Err(e) = std::fs::remove_file(&s.path) {
            tracing::warn!(segment = %s.path.display(), "spool: cannot delete a segment: {e}");
        }
        self.total_bytes -= s.bytes;
        Count { batches: s.recs.len() as u64, samples: s.recs.iter().map(|r| u64::from(r.samples)).sum() }
    }

    pub fn bytes(&self) -> u64 {
        self.total_bytes
    }

    /// The newest `n` batches held, newest first (right after `open`: every record on disk,
    /// acknowledged or not); an unreadable one is left out.
    pub fn newest(&self, n: usize) -> Vec<v1::Batch> {
        let recs = self.segments.iter().rev().flat_map(|s| s.recs.iter().rev().map(move |r| (s, *r)));
        recs.take(n).filter_map(|(s, r)| self.read(s, r).ok()).collect()
    }

    fn read(&self, seg: &Segment, r: Rec) -> Result<v1::Batch, String> {
        let f = File::open(&seg.path).map_err(|e| format!("cannot open {}: {e}", seg.path.display()))?;
        let mut buf = vec![0u8; r.len as usize];
        f.read_exact_at(&mut buf, r.payload_offset()).map_err(|e| format!("cannot read {}: {e}", seg.path.display()))?;
        v1::Batch::decode(buf.as_slice()).map_err(|e| format!("{} at offset {}: {e}", seg.path.display(), r.offset))
    }
}

/// The spool's stream epoch: kept while the spool holds segments, made anew (random) with a new
/// spool, so a spool that was lost never passes its successor's sequence numbers as its own. The
/// second value says why a kept spool's epoch file had to be replaced (missing, unreadable,
/// garbage): the caller reports it.
fn epoch(dir: &Path, new_spool: bool) -> Result<(u64, Option<String>), BacklogError> {
    let path = dir.join(EPOCH_FILE);
    let mut replaced = None;
    if !new_spool {
        match std::fs::read_to_string(&path).map(|s| s.trim().parse::<u64>()) {
            Ok(Ok(e)) => return Ok((e, None)),
            Ok(Err(e)) => replaced = Some(format!("{} is not a number ({e})", path.display())),
            Err(e) => replaced = Some(format!("cannot read {}: {e}", path.display())),
        }
    }
    let e = rand::random::<u64>();
    let tmp = dir.join(format!(".{EPOCH_FILE}.tmp"));
    std::fs::write(&tmp, format!("{e}\n")).map_err(io(&tmp, "cannot write the epoch"))?;
    File::open(&tmp).and_then(|f| f.sync_all()).map_err(io(&tmp, "cannot fsync the epoch"))?;
    std::fs::rename(&tmp, &path).map_err(io(&path, "cannot write the epoch"))?;
    Ok((e, replaced))
}

/// Makes a created or deleted segment name durable; best effort (some filesystems refuse).
fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

impl Backlog for Spool {
    fn push(&mut self, b: v1::Batch) -> Result<Count, BacklogError> {
        let payload = b.encode_to_vec();
        let len = u32::try_from(payload.len()).ok().filter(|l| *l <= MAX_RECORD).unwrap_or(MAX_RECORD);
        let frame_len = HEADER + u64::from(len);
        let active_bytes = self.segments[self.segments.len() - 1].bytes;
        if active_bytes > 0 && active_bytes + frame_len > self.cfg.segment_bytes {
            self.rotate(b.sequence)?;
        }
        let frame = frame(len, &payload);
        let last = self.segments.len() - 1;
        let path = self.segments[last].path.clone();
        if let Err(e) = self.active.write_all(&frame) {
            // A partial write would leave a torn record in the middle: cut back to the last good one.
            let _ = self.active.set_len(self.segments[last].bytes);
            return Err(io(&path, "cannot append a batch")(e));
        }
        let seg = &mut self.segments[last];
        seg.recs.push_back(Rec { seq: b.sequence, offset: seg.bytes, len, samples: samples_of(&b) as u32, legacy: false });
        seg.bytes += frame_len;
        self.total_bytes += frame_len;
        self.unsynced = true;
        match self.cfg.sync {
            SyncPolicy::EveryBatch => self.sync()?,
            SyncPolicy::Interval(d) if self.last_sync.elapsed() >= d => self.sync()?,
            SyncPolicy::Interval(_) => {}
        }
        let mut dropped = Count::default();
        while self.total_bytes > self.cfg.max_bytes && self.segments.len() > 1 {
            let lost = self.delete_segment(0);
            tracing::warn!(batches = lost.batches, "spool full (spool.max_bytes): dropped the oldest segment");
            dropped.add(lost);
        }
        Ok(dropped)
    }

    fn ack(&mut self, seq: u64) -> Count {
        let mut n = Count::default();
        for s in self.segments.iter_mut() {
            while s.recs.front().is_some_and(|r| r.seq <= seq) {
                if let Some(r) = s.recs.pop_front() {
                    n.add(Count { batches: 1, samples: u64::from(r.samples) });
                }
            }
        }
        // Fully acknowledged segments go, except the newest (it is being appended to).
        while self.segments.len() > 1 && self.segments[0].recs.is_empty() {
            self.delete_segment(0);
        }
        n
    }

    fn next_after(&mut self, seq: u64) -> Option<v1::Batch> {
        loop {
            let (si, ri) = self.segments.iter().enumerate().find_map(|(si, s)| {
                let ri = s.recs.partition_point(|r| r.seq <= seq);
                (ri < s.recs.len()).then_some((si, ri))
            })?;
            let r = self.segments[si].recs[ri];
            match self.read(&self.segments[si], r) {
                Ok(b) => {
                    // What is sent from the spool, by content: a batch stored just before a
                    // SIGKILL has no `wattflip::ledger` line, yet is sent after the restart.
                    tracing::debug!(target: "wattflip::resend", sequence = b.sequence, power = b.power.len(), temperature = b.temperature.len(), probe_runs = b.probe_runs.len(), "sent from the spool");
                    return Some(b);
                }
                Err(e) => {
                    // Damaged after it was written (disk error): skip it rather than stall forever.
                    tracing::error!(sequence = r.seq, "spool: unreadable batch skipped: {e}");
                    self.segments[si].recs.remove(ri);
                }
            }
        }
    }

    fn has_after(&self, seq: u64) -> bool {
        self.segments.iter().rev().find_map(|s| s.recs.back()).is_some_and(|r| r.seq > seq)
    }

    fn remove(&mut self, seq: u64) {
        for s in self.segments.iter_mut() {
            s.recs.retain(|r| r.seq != seq);
        }
    }

    fn len(&self) -> usize {
        self.segments.iter().map(|s| s.recs.len()).sum()
    }

    fn maintain(&mut self) {
        if let SyncPolicy::Interval(d) = self.cfg.sync {
            if self.unsynced && self.last_sync.elapsed() >= d {
                if let Err(e) = self.sync() {
                    tracing::error!("{e}");
                }
            }
        }
    }
}

impl Drop for Spool {
    fn drop(&mut self) {
        let _ = self.sync();
    }
}

#[cfg(test)]
#[path = "spool_damage_tests.rs"]
mod damage_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn cfg(dir: &Path, max: u64, seg: u64) -> SpoolConfig {
        SpoolConfig { dir: dir.to_owned(), max_bytes: max, segment_bytes: seg, sync: SyncPolicy::EveryBatch }
    }

    fn batch(seq: u64) -> v1::Batch {
        v1::Batch {
            agent_id: "a".into(),
            sequence: seq,
            temperature: vec![v1::TemperatureSample { time_ns: seq as i64, celsius: 40.5, ..Default::default() }],
            ..Default::default()
        }
    }

    fn segs(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).filter(|n| n.ends_with(".seg")).collect();
        v.sort();
        v
    }

    #[test]
    fn survives_a_restart_and_continues_the_sequence() {
        let dir = tempfile::tempdir().unwrap();
        let (mut s, r) = Spool::open(cfg(dir.path(), 1 << 20, 1 << 16), 100).unwrap();
        assert_eq!(r, Recovery { next_sequence: 100, epoch: r.epoch, ..Default::default() });
        let epoch = r.epoch;
        for q in 100..105 {
            assert_eq!(s.push(batch(q)).unwrap(), Count::default());
        }
        assert_eq!(s.ack(101), Count { batches: 2, samples: 2 });
        drop(s);
        let (mut s, r) = Spool::open(cfg(dir.path(), 1 << 20, 1 << 16), 7).unwrap();
        // Acknowledgements are not persisted: all five come back, the next sequence is 105; the
        // spool is the same incarnation, so its epoch stays.
        assert_eq!((r.records, r.next_sequence, r.truncated_bytes, r.epoch), (5, 105, 0, epoch));
        let got: Vec<u64> = std::iter::successors(s.next_after(0), |b| s.next_after(b.sequence)).map(|b| b.sequence).collect();
        assert_eq!(got, vec![100, 101, 102, 103, 104]);
        assert_eq!(s.next_after(102).unwrap(), batch(103));
    }

    #[test]
    fn corrupt_tail_is_truncated_and_good_records_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (mut s, _) = Spool::open(cfg(dir.path(), 1 << 20, 1 << 16), 1).unwrap();
        for q in 1..=3 {
            s.push(batch(q)).unwrap();
        }
        drop(s);
        let path = segment_path(dir.path(), 1);
        let good = std::fs::metadata(&path).unwrap().len();
        let rec_len = good / 3;
        // Flip one payload byte of the third record, then append a torn header.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[(2 * rec_len + HEADER + 2) as usize] ^= 0xff;
        bytes.extend_from_slice(&[9, 0, 0]);
        std::fs::write(&path, &bytes).unwrap();
        let (mut s, r) = Spool::open(cfg(dir.path(), 1 << 20, 1 << 16), 1).unwrap();
        assert_eq!((r.records, r.next_sequence), (2, 3));
        assert_eq!(r.truncated_bytes, rec_len + 3);
        assert_eq!(r.truncated_segments, vec![path.clone()]);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 2 * rec_len);
        // The spool goes on appending after the cut.
        s.push(batch(3)).unwrap();
        drop(s);
        let (_, r) = Spool::open(cfg(dir.path(), 1 << 20, 1 << 16), 1).unwrap();
        assert_eq!((r.records, r.next_sequence, r.truncated_bytes), (3, 4, 0));
    }

    #[test]
    fn segments_rotate_are_deleted_when_acked_and_oldest_dropped_when_full() {
        let dir = tempfile::tempdir().unwrap();
        let one = {
            let b = batch(1).encode_to_vec();
            HEADER + b.len() as u64
        };
        // Two records per segment, at most three segments' worth of bytes.
        let (mut s, _) = Spool::open(cfg(dir.path(), 6 * one, 2 * one), 1).unwrap();
        let mut dropped = Count::default();
        for q in 1..=7 {
            dropped.add(s.push(batch(q)).unwrap());
        }
        // 7 records: segments [1,2] [3,4] [5,6] [7] → 7 * one > 6 * one, so [1,2] went.
        assert_eq!(dropped, Count { batches: 2, samples: 2 });
        assert_eq!(segs(dir.path()), vec![format!("{:020}.seg", 3), format!("{:020}.seg", 5), format!("{:020}.seg", 7)]);
        assert_eq!(s.next_after(0).unwrap().sequence, 3);
        assert_eq!(s.ack(6), Count { batches: 4, samples: 4 });
        assert_eq!(segs(dir.path()), vec![format!("{:020}.seg", 7)]);
        assert_eq!(s.ack(7), Count { batches: 1, samples: 1 });
        // The newest segment stays, so a restart still knows where sequences are.
        assert_eq!(segs(dir.path()), vec![format!("{:020}.seg", 7)]);
        assert_eq!(s.len(), 0);
        assert_eq!(s.bytes(), one);
        drop(s);
        let (_, r) = Spool::open(cfg(dir.path(), 6 * one, 2 * one), 1).unwrap();
        assert_eq!(r.next_sequence, 8);
    }

    /// One flipped byte in the middle of a segment (in a record's length, where resync by length
    /// is impossible) and a half-written last record: only the two damaged records are lost, the
    /// intact records after the first are kept and counted exactly.
    #[test]
    fn a_corrupt_record_is_skipped_and_reading_resumes_at_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let (mut s, _) = Spool::open(cfg(dir.path(), 1 << 20, 1 << 20), 1).unwrap();
        for q in 1..=10 {
            s.push(batch(q)).unwrap();
        }
        drop(s);
        let path = segment_path(dir.path(), 1);
        let mut bytes = std::fs::read(&path).unwrap();
        let rec_len = bytes.len() / 10;
        bytes[4 * rec_len + 5] ^= 0xff; // record 5's length
        bytes.truncate(bytes.len() - 3); // record 10 half-written
        std::fs::write(&path, &bytes).unwrap();
        let (mut s, r) = Spool::open(cfg(dir.path(), 1 << 20, 1 << 20), 1).unwrap();
        assert_eq!(r.records, 8);
        assert_eq!(r.lost_batches, 1, "record 5; the torn tail is not counted (no later sequence shows it)");
        assert_eq!(r.damaged, vec![(path.clone(), 4 * rec_len as u64, rec_len as u64)]);
        assert_eq!(r.truncated_bytes, rec_len as u64 - 3);
        let got: Vec<u64> = std::iter::successors(s.next_after(0), |b| s.next_after(b.sequence)).map(|b| b.sequence).collect();
        assert_eq!(got, vec![1, 2, 3, 4, 6, 7, 8, 9]);
        assert_eq!(r.next_sequence, 10);
    }

    /// A directory, a FIFO, a 20 GB sparse file and a badly named file, all `*.seg`: skipped and
    /// reported, never opened; the real segments are read.
    #[test]
    fn foreign_files_are_skipped_without_opening_them() {
        let dir = tempfile::tempdir().unwrap();
        let (mut s, _) = Spool::open(cfg(dir.path(), 1 << 20, 1 << 16), 1).unwrap();
        s.push(batch(1)).unwrap();
        drop(s);
        std::fs::create_dir(dir.path().join(format!("{:020}.seg", 5))).unwrap();
        let fifo = dir.path().join(format!("{:020}.seg", 6));
        assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success(), "mkfifo (coreutils) is needed");
        let sparse = dir.path().join(format!("{:020}.seg", 7));
        std::fs::File::create(&sparse).unwrap().set_len(20 << 30).unwrap();
        std::fs::write(dir.path().join("x.seg"), b"").unwrap();
        let t = std::time::Instant::now();
        let (mut s, r) = Spool::open(cfg(dir.path(), 1 << 20, 1 << 16), 1).unwrap();
        assert!(t.elapsed() < Duration::from_secs(5), "no hang: {:?}", t.elapsed());
        let why: Vec<(String, &str)> =
            r.foreign.iter().map(|(p, w)| (p.file_name().unwrap().to_string_lossy().into_owned(), w.split(',').next().unwrap())).collect();
        assert_eq!(
            why,
            [
                (format!("{:020}.seg", 5), "it is a directory"),
                (format!("{:020}.seg", 6), "it is not a regular file (a FIFO"),
                (format!("{:020}.seg", 7), "it is 21474836480 bytes"),
                ("x.seg".to_string(), "its name is not a sequence number"),
            ]
        );
        assert_eq!((r.records, r.next_sequence), (1, 2));
        assert_eq!(s.next_after(0).unwrap().sequence, 1);
    }

    /// A second owner is refused while the first holds the spool, naming the holder's pid; once
    /// the first is gone the spool opens again with everything it held.
    #[test]
    fn a_second_owner_is_refused_and_names_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let (mut s, _) = Spool::open(cfg(dir.path(), 1 << 20, 1 << 16), 1).unwrap();
        s.push(batch(1)).unwrap();
        let e = Spool::open(cfg(dir.path(), 1 << 20, 1 << 16), 1).err().expect("a second owner must be refused");
        let msg = e.to_string();
        assert!(matches!(&e, BacklogError::Locked { holder, .. } if *holder == format!("pid {}", std::process::id())), "{msg}");
        assert!(msg.contains(&format!("is in use by pid {}", std::process::id())), "{msg}");
        assert_eq!(segs(dir.path()).len(), 1, "the refused open touched nothing");
        drop(s);
        let (_, r) = Spool::open(cfg(dir.path(), 1 << 20, 1 << 16), 1).unwrap();
        assert_eq!((r.records, r.next_sequence), (1, 2));
    }

    #[test]
    fn a_new_spool_gets_a_new_epoch() {
        let dir = tempfile::tempdir().unwrap();
        let (s, a) = Spool::open(cfg(dir.path(), 1 << 20, 1 << 16), 1).unwrap();
        drop(s);
        let (s, b) = Spool::open(cfg(dir.path(), 1 << 20, 1 << 16), 1).unwrap();
        drop(s);
        assert_eq!(a.epoch, b.epoch, "same spool, same epoch");
        // The spool is lost (segments gone): the next incarnation is told apart.
        for f in std::fs::read_dir(dir.path()).unwrap() {
            let p = f.unwrap().path();
            if p.extension().is_some_and(|x| x == "seg") {
                std::fs::remove_file(p).unwrap();
            }
        }
        let (_, c) = Spool::open(cfg(dir.path(), 1 << 20, 1 << 16), 1).unwrap();
        assert_ne!(c.epoch, a.epoch);
    }

    #[test]
    fn interval_sync_and_garbage_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("notes.txt"), "not a segment").unwrap();
        std::fs::write(segment_path(dir.path(), 50), b"\xff\xff\xff\xffgarbage").unwrap();
        let mut c = cfg(dir.path(), 1 << 20, 1 << 16);
        c.sync = SyncPolicy::Interval(Duration::from_millis(1));
        let (mut s, r) = Spool::open(c, 1).unwrap();
        assert_eq!((r.records, r.next_sequence, r.truncated_bytes), (0, 50, 11));
        s.push(batch(50)).unwrap();
        std::thread::sleep(Duration::from_millis(2));
        s.maintain();
        assert!(!s.unsynced);
    }
}
