//! Per-agent state that guards the collector, shared by all streams of one process: a token
//! bucket of points per agent id (refusing with `resource_exhausted` when it runs dry) and a
//! bounded window of the sequences already made durable (duplicates are acknowledged without
//! being written again). Both are in memory on purpose: collectors stay stateless, and a resend
//! that reaches another collector is still harmless because InfluxDB writes are idempotent
//! (same measurement, tags and agent timestamp). Add another per-agent guard here, keyed the same
//! way, with the same bound on the number of agents.

use std::collections::{BTreeSet, HashMap};
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

/// The last `window` durable sequences of each agent.
#[derive(Debug)]
pub struct Dedup {
    window: usize,
    seen: Mutex<HashMap<String, BTreeSet<u64>>>,
}

impl Dedup {
    pub fn new(window: usize) -> Self {
        Dedup { window, seen: Mutex::new(HashMap::new()) }
    }

    pub fn is_durable(&self, agent: &str, seq: u64) -> bool {
        let m = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        m.get(agent).is_some_and(|s| s.contains(&seq))
    }

    pub fn record(&self, agent: &str, seq: u64) {
        let mut m = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() >= MAX_AGENTS && !m.contains_key(agent) {
            m.clear();
        }
        let s = m.entry(agent.to_string()).or_default();
        s.insert(seq);
        while s.len() > self.window {
            s.pop_first();
        }
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
}
