//! Per-agent state that guards the collector, shared by all streams of one process: a token
//! bucket of points per agent id (refusing with `resource_exhausted` when it runs dry) and a
//! bounded window of the sequences already made durable (duplicates are acknowledged without
//! being written again). Both are in memory on purpose: collectors stay stateless, and a resend
//! that reaches another collector is still harmless because InfluxDB writes are idempotent
//! (same measurement, tags and agent timestamp). Add another per-agent guard here, keyed the same
//! way, with the same bound on the number of agents.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use tokio::time::Instant;

/// Agents remembered at most; beyond this the map is cleared (a fleet this large runs several
/// collectors), which only forgets rate debt and dedup history, never data.
const MAX_AGENTS: usize = 100_000;

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// A token bucket of points per agent id.
#[derive(Debug)]
pub struct RateLimiter {
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl RateLimiter {
    pub fn new(points_per_second: f64, burst: f64) -> Self {
        RateLimiter { rate: points_per_second, burst, buckets: Mutex::new(HashMap::new()) }
    }

    /// Takes `points` tokens when the bucket holds them. A batch larger than the burst passes
    /// when the bucket is full and leaves it in debt, so the long-run rate still holds.
    pub fn admit(&self, agent: &str, points: usize, now: Instant) -> bool {
        let mut m = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() >= MAX_AGENTS && !m.contains_key(agent) {
            m.clear();
        }
        let b = m.entry(agent.to_string()).or_insert(Bucket { tokens: self.burst, at: now });
        let dt = now.saturating_duration_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + dt * self.rate).min(self.burst);
        b.at = now;
        let need = points as f64;
        if b.tokens < need && b.tokens < self.burst {
            return false;
        }
        b.tokens -= need;
        true
    }
}

/// The durable sequences of each agent within `window` of its highest one, kept as disjoint sorted
/// ranges: a stream's acknowledgements complete in order, so an agent's durable sequences are a few
/// runs, and memory per agent stays a few ranges however large the window (a set of 4096 numbers
/// per agent held 80 MiB for 1,000 agents; see docs/benchmarks.md).
#[derive(Debug)]
pub struct Dedup {
    window: u64,
    seen: Mutex<HashMap<String, Ranges>>,
}

impl Dedup {
    pub fn new(window: usize) -> Self {
        Dedup { window: window as u64, seen: Mutex::new(HashMap::new()) }
    }

    pub fn is_durable(&self, agent: &str, seq: u64) -> bool {
        let m = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        m.get(agent).is_some_and(|r| r.contains(seq))
    }

    pub fn record(&self, agent: &str, seq: u64) {
        let mut m = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() >= MAX_AGENTS && !m.contains_key(agent) {
            m.clear();
        }
        let r = m.entry(agent.to_string()).or_default();
        r.insert(seq);
        r.forget_below(r.max().saturating_sub(self.window.saturating_sub(1)));
    }
}

/// Disjoint, sorted, non-adjacent inclusive ranges of sequence numbers.
#[derive(Debug, Default)]
struct Ranges(VecDeque<(u64, u64)>);

impl Ranges {
    fn contains(&self, seq: u64) -> bool {
        // The first range starting after `seq`; the one before it may hold it.
        let i = self.0.partition_point(|&(a, _)| a <= seq);
        i > 0 && self.0[i - 1].1 >= seq
    }

    fn max(&self) -> u64 {
        self.0.back().map_or(0, |&(_, b)| b)
    }

    fn insert(&mut self, seq: u64) {
        let i = self.0.partition_point(|&(a, _)| a <= seq);
        if i > 0 && self.0[i - 1].1 >= seq {
            return;
        }
        let joins_left = i > 0 && self.0[i - 1].1 + 1 == seq;
        let joins_right = i < self.0.len() && seq + 1 == self.0[i].0;
        match (joins_left, joins_right) {
            (true, true) => {
                self.0[i - 1].1 = self.0[i].1;
                self.0.remove(i);
            }
            (true, false) => self.0[i - 1].1 = seq,
            (false, true) => self.0[i].0 = seq,
            (false, false) => self.0.insert(i, (seq, seq)),
        }
    }

    /// Drops every sequence below `low`.
    fn forget_below(&mut self, low: u64) {
        while self.0.front().is_some_and(|&(_, b)| b < low) {
            self.0.pop_front();
        }
        if let Some(first) = self.0.front_mut() {
            first.0 = first.0.max(low);
        }
    }
}

/// Lets one log line through per interval and counts the ones it held back.
#[derive(Debug)]
pub struct LogGate {
    every: std::time::Duration,
    last: Option<Instant>,
    quiet: u64,
}

impl LogGate {
    pub fn new(every: std::time::Duration) -> Self {
        LogGate { every, last: None, quiet: 0 }
    }

    /// Some(lines held back since the last one let through) when a line may be logged now.
    pub fn open(&mut self, now: Instant) -> Option<u64> {
        if self.last.is_some_and(|l| now.duration_since(l) < self.every) {
            self.quiet += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.quiet))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn bucket_refills_at_the_rate_and_caps_at_the_burst() {
        let r = RateLimiter::new(100.0, 300.0);
        let t0 = Instant::now();
        assert!(r.admit("a", 250, t0));
        assert!(!r.admit("a", 100, t0), "50 left");
        assert!(r.admit("a", 50, t0));
        assert!(r.admit("b", 300, t0), "buckets are per agent");
        // 1 s later: 100 tokens.
        assert!(!r.admit("a", 101, t0 + Duration::from_secs(1)));
        assert!(r.admit("a", 100, t0 + Duration::from_secs(1)));
        // Long idle: capped at the burst; a batch above the burst passes a full bucket, into debt.
        assert!(r.admit("a", 500, t0 + Duration::from_secs(100)));
        assert!(!r.admit("a", 1, t0 + Duration::from_secs(102)), "-200 + 200 = 0");
        assert!(r.admit("a", 1, t0 + Duration::from_secs(103)));
    }

    #[test]
    fn dedup_window_is_bounded_per_agent() {
        let d = Dedup::new(3);
        for s in [5, 6, 7, 8] {
            d.record("a", s);
        }
        assert_eq!([5, 6, 7, 8].map(|s| d.is_durable("a", s)), [false, true, true, true]);
        assert!(!d.is_durable("b", 6));
    }

    #[test]
    fn dedup_keeps_gaps_and_out_of_order_completions_as_ranges() {
        let d = Dedup::new(100);
        // Two streams' worth: 1..=3 acknowledged, 6 and 8 written after a reconnect, then 4, 7.
        for s in [1, 2, 3, 8, 6, 4, 7] {
            d.record("a", s);
        }
        let durable: Vec<u64> = (0..=10).filter(|&s| d.is_durable("a", s)).collect();
        assert_eq!(durable, [1, 2, 3, 4, 6, 7, 8]);
        assert_eq!(d.seen.lock().unwrap()["a"].0, [(1, 4), (6, 8)]);
        d.record("a", 5);
        assert_eq!(d.seen.lock().unwrap()["a"].0, [(1, 8)]);
        // Far ahead: everything more than the window below the highest is forgotten.
        d.record("a", 1_000);
        assert_eq!(d.seen.lock().unwrap()["a"].0, [(1_000, 1_000)]);
        d.record("a", 950);
        assert_eq!(d.seen.lock().unwrap()["a"].0, [(950, 950), (1_000, 1_000)]);
        assert!(!d.is_durable("a", 900) && d.is_durable("a", 950) && !d.is_durable("a", 951));
    }

    #[test]
    fn a_long_contiguous_run_is_one_range() {
        let d = Dedup::new(4096);
        for s in 1..=100_000 {
            d.record("a", s);
        }
        assert_eq!(d.seen.lock().unwrap()["a"].0, [(100_000 - 4095, 100_000)]);
    }
}
