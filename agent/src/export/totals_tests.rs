//! Unit tests of the energy totals: across batches, across a spool replay and across an agent
//! restart, with totals worked out by hand (quarters of a joule: exact in any order).

use super::*;
use crate::export::spool::{Spool, SpoolConfig, SyncPolicy};
use std::path::Path;

const START: i64 = 1_700_000_000_000_000_000;

fn sample(t_s: i64, zone: &str, joules: Option<f64>) -> v1::PowerSample {
    v1::PowerSample {
        time_ns: START + t_s * 1_000_000_000,
        source: "rapl".into(),
        zone: zone.into(),
        scope: "package".into(),
        watts: Some(10.0),
        joules,
        interval_ns: if joules.is_some() { 1_000_000_000 } else { 0 },
        ..Default::default()
    }
}

fn batch(seq: u64, power: Vec<v1::PowerSample>) -> v1::Batch {
    v1::Batch { agent_id: "a".into(), sequence: seq, power, ..Default::default() }
}

/// (zone, second, joules_total) of each sample, in the batch's order.
fn totals(b: &v1::Batch) -> Vec<(String, i64, Option<f64>)> {
    b.power.iter().map(|s| (s.zone.clone(), (s.time_ns - START) / 1_000_000_000, s.joules_total)).collect()
}

fn spool(dir: &Path) -> (Spool, crate::export::spool::Recovery) {
    Spool::open(SpoolConfig { dir: dir.to_owned(), max_bytes: 1 << 20, segment_bytes: 1 << 16, sync: SyncPolicy::EveryBatch }, 1).unwrap()
}

#[test]
fn totals_go_on_across_batches_in_time_order_on_counter_windows_only() {
    let mut t = EnergyTotals::new(START);
    // Second 2 before second 1 in the batch: the total follows time, not the batch's order.
    let mut full = sample(1, "psys", None);
    full.full_rate = true;
    let mut a = batch(1, vec![sample(2, "psys", Some(5.0)), sample(1, "psys", Some(3.0)), sample(1, "package-0", Some(2.5)), sample(1, "wall", None), full]);
    t.stamp(&mut a);
    assert_eq!(
        totals(&a),
        vec![
            ("psys".into(), 2, Some(8.0)),
            ("psys".into(), 1, Some(3.0)),
            ("package-0".into(), 1, Some(2.5)),
            ("wall".into(), 1, None),
            ("psys".into(), 1, None),
        ]
    );
    assert_eq!(a.joules_total_start_ns, START);
    let mut b = batch(2, vec![sample(3, "psys", Some(4.25)), sample(3, "package-0", Some(0.5))]);
    t.stamp(&mut b);
    assert_eq!(totals(&b), vec![("psys".into(), 3, Some(12.25)), ("package-0".into(), 3, Some(3.0))]);
    // A batch without counter windows carries no start.
    let mut events = batch(3, vec![sample(4, "wall", None)]);
    t.stamp(&mut events);
    assert_eq!((events.joules_total_start_ns, t.zones()), (0, 2));
}

#[test]
fn a_spooled_batch_is_resent_with_the_totals_it_was_stored_with() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = Totaled::new(Box::new(spool(dir.path()).0), EnergyTotals::new(START));
    for (seq, j) in [(1, 1.5), (2, 2.0), (3, 0.25)] {
        b.push(batch(seq, vec![sample(seq as i64, "psys", Some(j))])).unwrap();
    }
    let replay = |b: &mut Totaled| std::iter::successors(b.next_after(0), |x| b.next_after(x.sequence)).map(|x| totals(&x)[0].2).collect::<Vec<_>>();
    let want = vec![Some(1.5), Some(3.5), Some(3.75)];
    assert_eq!(replay(&mut b), want);
    // A second resend (after a collector restart) carries the very same values.
    assert_eq!(replay(&mut b), want);
    assert_eq!(b.next_after(1).unwrap().joules_total_start_ns, START);
}

#[test]
fn a_restarted_agent_goes_on_from_its_spools_totals_and_epoch_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = Totaled::new(Box::new(spool(dir.path()).0), EnergyTotals::new(START));
    // DRAM only in the first batch: its total comes from an older batch than psys's.
    b.push(batch(1, vec![sample(1, "psys", Some(10.0)), sample(1, "dram", Some(1.25))])).unwrap();
    b.push(batch(2, vec![sample(2, "psys", Some(12.0))])).unwrap();
    b.push(batch(3, vec![sample(3, "wall", None)])).unwrap();
    assert_eq!(b.ack(3).batches, 3);
    drop(b);
    let (s, _) = spool(dir.path());
    let resumed = EnergyTotals::resume(s.newest(RESUME_BATCHES), START + 999);
    assert_eq!(resumed.start_ns(), START, "the epoch's start is kept");
    let mut b = Totaled::new(Box::new(s), resumed);
    b.push(batch(4, vec![sample(9, "psys", Some(0.5)), sample(9, "dram", Some(0.75)), sample(9, "gpu", Some(7.0))])).unwrap();
    let last = b.next_after(3).unwrap();
    assert_eq!(totals(&last), vec![("psys".into(), 9, Some(22.5)), ("dram".into(), 9, Some(2.0)), ("gpu".into(), 9, Some(7.0))]);
    assert_eq!(last.joules_total_start_ns, START);
    // A new spool (or one written before totals existed): a new epoch from now, every zone at 0.
    let other = tempfile::tempdir().unwrap();
    let (s, _) = spool(other.path());
    assert_eq!(EnergyTotals::resume(s.newest(RESUME_BATCHES), START + 999), EnergyTotals::new(START + 999));
    let old = batch(1, vec![sample(1, "psys", Some(10.0))]);
    assert_eq!(EnergyTotals::resume([old], START + 5), EnergyTotals::new(START + 5));
}
