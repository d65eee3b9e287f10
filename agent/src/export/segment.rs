//! One spool segment file: the record framing (`magic "WFB2" | len: u32 LE | crc32(payload): u32 LE
//! | payload`, the payload a prost-encoded `wattflip.v1.Batch`), reading it back with bounded memory
//! and resynchronising after damage, and which files of the spool folder can be segments at all.
//! `spool.rs` owns the segments' life (append, rotate, acknowledge, drop). To change the format,
//! change the magic and keep reading the old one in [`scan`].

use crate::export::backlog::samples_of;
use prost::Message as _;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use wattflip_proto::v1;

/// Starts every record of the current format: what a reader resynchronises on after damage.
const MAGIC: [u8; 4] = *b"WFB2";
pub const HEADER: u64 = 12;
/// The first format's header (length and CRC, no magic).
const LEGACY_HEADER: u64 = 8;
/// Larger than any batch the collector accepts: a length beyond it is corruption, not data.
pub const MAX_RECORD: u32 = 64 << 20;
const EXT: &str = "seg";

#[derive(Debug, Clone, Copy)]
pub struct Rec {
    pub seq: u64,
    pub offset: u64,
    pub len: u32,
    pub samples: u32,
    /// A record of the first format (8-byte header, no magic).
    pub legacy: bool,
}

impl Rec {
    pub fn payload_offset(&self) -> u64 {
        self.offset + if self.legacy { LEGACY_HEADER } else { HEADER }
    }
}

pub fn segment_path(dir: &Path, first_seq: u64) -> PathBuf {
    dir.join(format!("{first_seq:020}.{EXT}"))
}

/// One record of the current format.
pub fn frame(len: u32, payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(HEADER as usize + payload.len());
    frame.extend_from_slice(&MAGIC);
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// The `*.seg` files of `dir` that can be segments, by first sequence, and those that cannot
/// (path, why), which are never opened: opening a FIFO blocks, reading a 20 GB sparse file takes
/// minutes and memory. `largest` is the size no segment exceeds.
#[allow(clippy::type_complexity)]
pub fn list(dir: &Path, largest: u64) -> std::io::Result<(Vec<(u64, PathBuf)>, Vec<(PathBuf, String)>)> {
    let (mut names, mut foreign) = (Vec::new(), Vec::new());
    for entry in std::fs::read_dir(dir)? {
        let Ok(entry) = entry else { continue };
        let path = entry.path();
        if path.extension().is_none_or(|x| x != EXT) {
            continue;
        }
        let why = match (path.file_stem().and_then(|s| s.to_str()).and_then(|s| s.parse::<u64>().ok()), std::fs::symlink_metadata(&path)) {
            (None, _) => "its name is not a sequence number".to_string(),
            (_, Err(e)) => format!("cannot stat it: {e}"),
            (_, Ok(m)) if m.is_dir() => "it is a directory".to_string(),
            (_, Ok(m)) if !m.file_type().is_file() => "it is not a regular file (a FIFO, socket, device or symlink)".to_string(),
            (_, Ok(m)) if m.len() > largest => format!("it is {} bytes, larger than any segment ({largest} bytes)", m.len()),
            (Some(first), Ok(_)) => {
                names.push((first, path));
                continue;
            }
        };
        tracing::warn!(file = %path.display(), "spool: skipped a file that cannot be a segment: {why}; move it out of the spool folder");
        foreign.push((path, why));
    }
    foreign.sort();
    Ok((names, foreign))
}

/// Opens a listed segment for reading, nonblocking, and checks again that it is a regular file of
/// a segment's size (it may have been swapped since the listing): None when it is not.
pub fn open_checked(path: &Path, largest: u64) -> std::io::Result<Option<(File, u64)>> {
    let f = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    Ok(match f.metadata() {
        Ok(m) if m.file_type().is_file() && m.len() <= largest => Some((f, m.len())),
        _ => None,
    })
}

/// What one segment holds: its valid records, the damaged regions skipped between them, and where
/// the good data ends (a torn or corrupt tail follows).
#[derive(Debug, Default)]
pub struct Scan {
    pub recs: Vec<Rec>,
    /// (offset, bytes) of damage with valid records after it.
    pub damaged: Vec<(u64, u64)>,
    pub good_end: u64,
    /// Whole records in the tail after `good_end` that fail their check (bit rot): each framed
    /// complete (magic, a length that fits the file) but with a bad CRC or batch. Each held one
    /// stored batch. A tail that is not framed whole is torn (never fully written), not counted.
    pub rotten_tail: u64,
}

/// The record at `off` if it is valid (header, length within the file, CRC, decodable batch).
fn record_at(f: &File, off: u64, file_len: u64, legacy: bool) -> Option<Rec> {
    let header = if legacy { LEGACY_HEADER } else { HEADER };
    let mut h = [0u8; HEADER as usize];
    let h = &mut h[..header as usize];
    f.read_exact_at(h, off).ok()?;
    let (magic, rest) = if legacy { (true, &h[..]) } else { (h[..4] == MAGIC, &h[4..]) };
    let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
    let crc = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]);
    // Checked before allocating: a damaged length never makes a large buffer.
    if !magic || len > MAX_RECORD || off + header + u64::from(len) > file_len {
        return None;
    }
    let mut payload = vec![0u8; len as usize];
    f.read_exact_at(&mut payload, off + header).ok()?;
    if crc32fast::hash(&payload) != crc {
        return None;
    }
    let b = v1::Batch::decode(payload.as_slice()).ok()?;
    Some(Rec { seq: b.sequence, offset: off, len, samples: samples_of(&b) as u32, legacy })
}

/// The whole but damaged records from `off` on (see [`Scan::rotten_tail`]).
fn rotten_records(f: &File, mut off: u64, file_len: u64) -> u64 {
    let mut n = 0;
    let mut h = [0u8; HEADER as usize];
    while off + HEADER <= file_len && f.read_exact_at(&mut h, off).is_ok() && h[..4] == MAGIC {
        let len = u64::from(u32::from_le_bytes([h[4], h[5], h[6], h[7]]));
        if len > u64::from(MAX_RECORD) || off + HEADER + len > file_len {
            break;
        }
        n += 1;
        off += HEADER + len;
    }
    n
}

/// The next offset at or after `from` where the magic starts, reading 64 KiB at a time.
fn next_magic(f: &File, from: u64, file_len: u64) -> Option<u64> {
    let mut buf = vec![0u8; 64 << 10];
    let mut pos = from;
    while pos + MAGIC.len() as u64 <= file_len {
        let n = ((file_len - pos) as usize).min(buf.len());
        f.read_exact_at(&mut buf[..n], pos).ok()?;
        if let Some(i) = buf[..n].windows(MAGIC.len()).position(|w| w == MAGIC) {
            return Some(pos + i as u64);
        }
        // Overlap by the magic's length less one, so a magic across two reads is found.
        pos += (n - (MAGIC.len() - 1)).max(1) as u64;
    }
    None
}

/// Reads one segment record by record. Current-format segments resynchronise after damage at the
/// next valid record; first-format ones (no magic) end at their first bad record.
pub fn scan(f: &File, file_len: u64) -> Scan {
    let mut first = [0u8; 4];
    let legacy = file_len >= 4 && f.read_exact_at(&mut first, 0).is_ok() && first != MAGIC;
    let header = if legacy { LEGACY_HEADER } else { HEADER };
    let mut s = Scan::default();
    let mut off = 0u64;
    while off + header <= file_len {
        if let Some(r) = record_at(f, off, file_len, legacy) {
            off = r.payload_offset() + u64::from(r.len);
            s.recs.push(r);
            s.good_end = off;
            continue;
        }
        if legacy {
            break;
        }
        // Damage: the next magic that starts a valid record.
        let mut probe = off + 1;
        let found = loop {
            match next_magic(f, probe, file_len) {
                Some(m) if record_at(f, m, file_len, false).is_some() => break Some(m),
                Some(m) => probe = m + 1,
                None => break None,
            }
        };
        let Some(next) = found else {
            s.rotten_tail = rotten_records(f, off, file_len);
            break;
        };
        s.damaged.push((off, next - off));
        off = next;
    }
    s
}

/// Batches lost to the damaged regions of a scan, exactly: the sequence gap across each (before
/// the first record, `before` is the last sequence known to precede the segment).
pub fn lost_in(s: &Scan, before: u64) -> u64 {
    let mut lost = 0;
    let mut prev = before;
    for r in &s.recs {
        let damaged_before = s.damaged.iter().any(|&(off, n)| off + n == r.offset);
        if damaged_before && r.seq > prev + 1 {
            lost += r.seq - prev - 1;
        }
        prev = r.seq;
    }
    lost
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(seq: u64) -> Vec<u8> {
        v1::Batch { agent_id: "a".into(), sequence: seq, ..Default::default() }.encode_to_vec()
    }

    fn file(bytes: &[u8]) -> (tempfile::NamedTempFile, File, u64) {
        let mut t = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut t, bytes).unwrap();
        let f = File::open(t.path()).unwrap();
        (t, f, bytes.len() as u64)
    }

    #[test]
    fn damage_is_skipped_and_the_loss_counted_from_the_sequence_gap() {
        let mut bytes = Vec::new();
        let mut offs = Vec::new();
        for q in 1..=6u64 {
            offs.push(bytes.len());
            let p = payload(q);
            bytes.extend_from_slice(&frame(p.len() as u32, &p));
        }
        // Records 3 and 4 damaged: a length and a payload byte.
        bytes[offs[2] + 5] ^= 0xff;
        bytes[offs[3] + 13] ^= 0xff;
        let (_t, f, len) = file(&bytes);
        let s = scan(&f, len);
        assert_eq!(s.recs.iter().map(|r| r.seq).collect::<Vec<_>>(), [1, 2, 5, 6]);
        assert_eq!(s.damaged, [(offs[2] as u64, (offs[4] - offs[2]) as u64)]);
        assert_eq!(s.good_end, len);
        assert_eq!(lost_in(&s, 0), 2);
    }

    #[test]
    fn first_format_segments_are_read_up_to_their_first_bad_record() {
        let mut bytes = Vec::new();
        for q in 1..=3u64 {
            let p = payload(q);
            bytes.extend_from_slice(&(p.len() as u32).to_le_bytes());
            bytes.extend_from_slice(&crc32fast::hash(&p).to_le_bytes());
            bytes.extend_from_slice(&p);
        }
        let good = bytes.len() as u64;
        bytes.extend_from_slice(&[7, 0, 0, 0, 1]);
        let (_t, f, len) = file(&bytes);
        let s = scan(&f, len);
        assert_eq!(s.recs.iter().map(|r| (r.seq, r.legacy)).collect::<Vec<_>>(), [(1, true), (2, true), (3, true)]);
        assert_eq!(s.good_end, good);
    }
}
