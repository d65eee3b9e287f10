//! The dirty set: the (measurement, host, minute) buckets that stored raw points and wait for
//! their rollup to be recomputed, each with the instant of its latest write. Bounded by
//! `influx.rollup_max_dirty`: a bucket that does not fit is dropped and counted
//! ([`RollupStats::buckets_dropped`], logged by the task), never silently. To track another key,
//! extend [`Bucket`] and [`bucket_of`].

use crate::sinks::influx::refusal::unescape;
use crate::sinks::influx::StoredLines;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const MINUTE_NS: i64 = 60_000_000_000;

/// The rollups' counters (rendered by `service::telemetry`).
#[derive(Debug, Default)]
pub struct RollupStats {
    /// Buckets marked dirty (a bucket already waiting is not counted again).
    pub buckets_marked: AtomicU64,
    /// Buckets that did not fit in the dirty set: their rollup may miss the points of that write.
    pub buckets_dropped: AtomicU64,
    /// Buckets recomputed (each recompute of a bucket counts).
    pub buckets_recomputed: AtomicU64,
    /// `SELECT … INTO` statements run, and those that failed (their buckets wait again).
    pub statements: AtomicU64,
    pub statements_failed: AtomicU64,
    /// Rollup and copy points written by those statements.
    pub points_written: AtomicU64,
    /// Buckets waiting now (a gauge).
    pub pending: AtomicU64,
    /// Failed setups of the database and retention policies (`rollup::setup`), and the tasks
    /// waiting for theirs now (a gauge: rollups and markers stopped).
    pub setup_failures: AtomicU64,
    pub setup_pending: AtomicU64,
}

/// One minute of one host's points of one measurement.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bucket {
    pub measurement: String,
    /// Empty for points without a `host` tag.
    pub host: String,
    /// Start of the minute, ns since the epoch (UTC).
    pub minute_ns: i64,
}

/// The buckets waiting, bounded.
pub struct Dirty {
    waiting: Mutex<BTreeMap<Bucket, Instant>>,
    max: usize,
    pub stats: Arc<RollupStats>,
}

impl Dirty {
    pub fn new(max: usize, stats: Arc<RollupStats>) -> Dirty {
        Dirty { waiting: Mutex::new(BTreeMap::new()), max: max.max(1), stats }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Bucket, Instant>> {
        // A panic elsewhere while holding the lock leaves a consistent map (inserts and removes
        // only): keep using it.
        self.waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Marks `buckets` as written at `now`. A bucket already waiting gets the later instant, so
    /// a minute that keeps receiving points waits until its writes settle.
    pub fn mark(&self, buckets: impl IntoIterator<Item = Bucket>, now: Instant) {
        let mut w = self.lock();
        for b in buckets {
            if let Some(t) = w.get_mut(&b) {
                *t = now;
            } else if w.len() < self.max {
                w.insert(b, now);
                self.stats.buckets_marked.fetch_add(1, Ordering::Relaxed);
            } else {
                self.stats.buckets_dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.stats.pending.store(w.len() as u64, Ordering::Relaxed);
    }

    /// Removes and returns the buckets last written at least `settle` before `now` (all of them
    /// with `settle` zero), in order.
    pub fn take_settled(&self, now: Instant, settle: Duration) -> Vec<Bucket> {
        let mut w = self.lock();
        let ready: Vec<Bucket> = w.iter().filter(|(_, t)| now.saturating_duration_since(**t) >= settle).map(|(b, _)| b.clone()).collect();
        for b in &ready {
            w.remove(b);
        }
        self.stats.pending.store(w.len() as u64, Ordering::Relaxed);
        ready
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl StoredLines for Dirty {
    fn stored(&self, lines: &[&str]) {
        // Most lines of a request share their bucket: deduplicate before taking the lock.
        let keys: BTreeSet<(&str, String, i64)> = lines.iter().filter_map(|l| bucket_of(l)).collect();
        let now = Instant::now();
        self.mark(keys.into_iter().map(|(m, host, minute_ns)| Bucket { measurement: m.to_string(), host, minute_ns }), now);
    }
}

/// Index of the first unescaped `sep` in `s` (line protocol escapes with `\`).
fn find_unescaped(s: &str, sep: u8) -> Option<usize> {
    let mut escaped = false;
    for (i, b) in s.bytes().enumerate() {
        match b {
            _ if escaped => escaped = false,
            b'\\' => escaped = true,
            b if b == sep => return Some(i),
            _ => {}
        }
    }
    None
}

/// (measurement, host, minute start) of a line-protocol line with a timestamp; None for a line
/// without one (the collector always writes timestamps) or that is not a point.
pub fn bucket_of(line: &str) -> Option<(&str, String, i64)> {
    let line = line.trim_end_matches('\n');
    let key_end = find_unescaped(line, b' ')?;
    let key = &line[..key_end];
    let measurement = &key[..find_unescaped(key, b',').unwrap_or(key.len())];
    let host = key.match_indices(",host=").find(|(i, _)| !key[..*i].ends_with('\\')).map(|(i, _)| {
        let v = &key[i + 6..];
        unescape(&v[..find_unescaped(v, b',').unwrap_or(v.len())])
    });
    let ts: i64 = line.rsplit_once(' ')?.1.parse().ok()?;
    if measurement.is_empty() || key_end == line.len() {
        return None;
    }
    Some((measurement, host.unwrap_or_default(), ts.div_euclid(MINUTE_NS) * MINUTE_NS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_map_to_their_minute_and_host() {
        assert_eq!(bucket_of("power,host=a1,rack=r\\,1,zone=p watts=1.5,flags=\"x y\" 120000000001\n"), Some(("power", "a1".to_string(), 120_000_000_000)));
        // The host is the tag, not a tag value that contains `,host=` escaped.
        assert_eq!(bucket_of("event,kind=a\\,host=b,host=h\\ 2 message=\"m\" 59999999999"), Some(("event", "h 2".to_string(), 0)));
        // Before 1970 the minute still starts before the instant.
        assert_eq!(bucket_of("temperature,host=x celsius=1 -1"), Some(("temperature", "x".to_string(), -MINUTE_NS)));
        assert_eq!(bucket_of("agent version=\"1\" 61000000000"), Some(("agent", String::new(), MINUTE_NS)));
        assert_eq!(bucket_of("power,host=a watts=1"), None);
        assert_eq!(bucket_of(""), None);
    }

    #[test]
    fn the_set_is_bounded_and_counts_what_it_drops() {
        let stats = Arc::new(RollupStats::default());
        let d = Dirty::new(3, stats.clone());
        let t0 = Instant::now();
        let b = |h: &str, m: i64| Bucket { measurement: "power".into(), host: h.into(), minute_ns: m * MINUTE_NS };
        d.mark([b("a", 0), b("a", 1), b("b", 0), b("c", 0), b("a", 0)], t0);
        assert_eq!((d.len(), stats.buckets_marked.load(Ordering::Relaxed), stats.buckets_dropped.load(Ordering::Relaxed)), (3, 3, 1));
        // A later write to a waiting bucket postpones it; the others are taken once settled.
        d.mark([b("a", 1)], t0 + Duration::from_secs(20));
        assert_eq!(d.take_settled(t0 + Duration::from_secs(30), Duration::from_secs(30)), vec![b("a", 0), b("b", 0)]);
        assert_eq!(d.take_settled(t0 + Duration::from_secs(30), Duration::from_secs(30)), Vec::<Bucket>::new());
        assert_eq!(d.take_settled(t0 + Duration::from_secs(50), Duration::from_secs(30)), vec![b("a", 1)]);
        assert!(d.is_empty());
    }
}
