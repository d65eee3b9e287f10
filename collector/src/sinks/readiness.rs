//! Whether a sink's store answers now: its writers report each attempt ([`Readiness::failed`],
//! [`Readiness::answered`]) and the sink is ready unless its writes have failed without an answer
//! for [`UNREADY_AFTER`]. The server watches every waited-for sink's readiness and reports the
//! Ingest service on the gRPC health service from it (`service/server.rs`, `watch_readiness`).
//! A new sink reports its writers' attempts the same way and returns [`Readiness::ready`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long a store may fail before its sink is not ready: long enough that one lost request or a
/// restart of the store does not flap the health service, short enough that a load balancer moves
/// agents to another collector before their spools fill.
pub const UNREADY_AFTER: Duration = Duration::from_secs(10);

/// The time of the first failed attempt since the last answer, on a monotonic clock.
#[derive(Debug, Default)]
pub struct Readiness {
    /// Milliseconds since [`origin`] plus one when the writes began failing; 0 while they succeed.
    failing_since: AtomicU64,
}

/// The process's monotonic origin (the first call).
fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

fn now_ms() -> u64 {
    u64::try_from(origin().elapsed().as_millis()).unwrap_or(u64::MAX - 1) + 1
}

impl Readiness {
    /// An attempt found no store (network error, 5xx, timeout): failing from now, unless already.
    pub fn failed(&self) {
        let _ = self.failing_since.compare_exchange(0, now_ms(), Ordering::Relaxed, Ordering::Relaxed);
    }

    /// The store answered (stored, or refused the data: it is up either way).
    pub fn answered(&self) {
        self.failing_since.store(0, Ordering::Relaxed);
    }

    /// How long the writes have failed without an answer; None while the store answers.
    pub fn failing_for(&self) -> Option<Duration> {
        match self.failing_since.load(Ordering::Relaxed) {
            0 => None,
            since => Some(Duration::from_millis(now_ms().saturating_sub(since))),
        }
    }

    /// Ready unless the writes have failed for at least `after`.
    pub fn ready_within(&self, after: Duration) -> bool {
        self.failing_for().is_none_or(|f| f < after)
    }

    /// Ready unless the writes have failed for [`UNREADY_AFTER`].
    pub fn ready(&self) -> bool {
        self.ready_within(UNREADY_AFTER)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_until_failing_for_the_bound_and_again_on_an_answer() {
        let r = Readiness::default();
        assert_eq!(r.failing_for(), None);
        assert!(r.ready_within(Duration::ZERO));
        r.failed();
        let first = r.failing_for().expect("failing");
        std::thread::sleep(Duration::from_millis(30));
        // A later failure keeps the first one's time.
        r.failed();
        assert!(r.failing_for().expect("failing") >= first + Duration::from_millis(30));
        assert!(!r.ready_within(Duration::from_millis(20)));
        assert!(r.ready_within(Duration::from_secs(3600)));
        r.answered();
        assert_eq!(r.failing_for(), None);
        assert!(r.ready_within(Duration::ZERO));
    }
}
