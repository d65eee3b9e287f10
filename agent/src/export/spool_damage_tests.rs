//! Issue 38's spool recovery cases: a bit-rotted last record is a lost batch (a torn one is not),
//! counted once across segments, and a replaced epoch file is reported. A new damage case is a
//! test here with the bytes it damages and the counts read by hand.

use super::*;

fn cfg(dir: &Path) -> SpoolConfig {
    SpoolConfig { dir: dir.to_owned(), max_bytes: 1 << 20, segment_bytes: 1 << 16, sync: SyncPolicy::EveryBatch }
}

fn batch(seq: u64) -> v1::Batch {
    v1::Batch {
        agent_id: "a".into(),
        sequence: seq,
        temperature: vec![v1::TemperatureSample { time_ns: 7, celsius: 40.5, ..Default::default() }],
        ..Default::default()
    }
}

/// A spool holding batches `seqs` in one segment named after the first; returns its path and the
/// length of one record (all records are the same size).
fn spool_with(dir: &Path, seqs: std::ops::RangeInclusive<u64>) -> (PathBuf, u64) {
    let first = *seqs.start();
    let n = seqs.clone().count() as u64;
    let (mut s, _) = Spool::open(cfg(dir), first).unwrap();
    for q in seqs {
        s.push(batch(q)).unwrap();
    }
    drop(s);
    let path = segment_path(dir, first);
    let len = std::fs::metadata(&path).unwrap().len();
    (path, len / n)
}

fn flip(path: &Path, at: u64) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at as usize] ^= 0xff;
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_bit_rotted_last_record_is_a_lost_batch_and_a_torn_one_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let (path, rec) = spool_with(dir.path(), 1..=3);
    // One payload byte of the third (last) record rots: the record is whole, its CRC fails.
    flip(&path, 2 * rec + HEADER + 2);
    let (s, r) = Spool::open(cfg(dir.path()), 1).unwrap();
    assert_eq!((r.records, r.lost_batches, r.truncated_bytes, r.next_sequence), (2, 1, rec, 3));
    drop(s);

    // A torn last record (its write never finished: the file ends inside it) held no stored batch.
    let dir = tempfile::tempdir().unwrap();
    let (path, rec) = spool_with(dir.path(), 1..=3);
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(3 * rec - 5).unwrap();
    let (_, r) = Spool::open(cfg(dir.path()), 1).unwrap();
    assert_eq!((r.records, r.lost_batches, r.truncated_bytes), (2, 0, rec - 5));
}

#[test]
fn a_rotted_tail_before_another_segment_is_counted_once() {
    let dir = tempfile::tempdir().unwrap();
    let (path, rec) = spool_with(dir.path(), 1..=4);
    // Record 4 moved into a later segment of its own: its first sequence shows record 3 was there.
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(segment_path(dir.path(), 4), &bytes[(3 * rec) as usize..]).unwrap();
    std::fs::write(&path, &bytes[..(3 * rec) as usize]).unwrap();
    flip(&path, 2 * rec + HEADER + 2);
    let (_, r) = Spool::open(cfg(dir.path()), 1).unwrap();
    assert_eq!((r.records, r.lost_batches, r.next_sequence), (3, 1, 5));
}

#[test]
fn a_garbage_epoch_file_is_replaced_and_said() {
    let dir = tempfile::tempdir().unwrap();
    let (_, _) = spool_with(dir.path(), 1..=2);
    let (s, r) = Spool::open(cfg(dir.path()), 1).unwrap();
    assert_eq!(r.epoch_replaced, None);
    let kept = r.epoch;
    drop(s);
    let epoch = dir.path().join(EPOCH_FILE);
    std::fs::write(&epoch, "zzz\n").unwrap();
    let (_, r) = Spool::open(cfg(dir.path()), 1).unwrap();
    assert_eq!(r.epoch_replaced, Some(format!("{} is not a number (invalid digit found in string)", epoch.display())));
    assert_ne!(r.epoch, kept);
    assert_eq!(std::fs::read_to_string(&epoch).unwrap(), format!("{}\n", r.epoch));
    assert_eq!(r.records, 2);
}
