//! Rate limits for repeated log lines: a WARN that can fire once per batch (50 agents backfilling
//! wrote 2,300 late-reading lines in 2 minutes) is written at most once per period, and the line
//! that is written says how many were suppressed since the previous one, so nothing disappears
//! silently. Counters on the metrics page still count every occurrence.
//!
//! One [`Limited`] per log site, usually a `static` beside it:
//!
//! ```
//! use std::time::{Duration, Instant};
//! use wattflip_infra::ratelimit::Limited;
//! static LATE: Limited = Limited::new(Duration::from_secs(10));
//! if let Some(suppressed) = LATE.hit(Instant::now()) {
//!     // tracing::warn!(suppressed, "… ({suppressed} more like it suppressed)");
//!     let _ = suppressed;
//! }
//! ```
//!
//! To limit per key (per agent, per device), keep one `Limited` per key in the owner's map.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One log site's limit: at most one line per `period` on the monotonic clock.
#[derive(Debug)]
pub struct Limited {
    period: Duration,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// When the last line was written; `None` before the first.
    last: Option<Instant>,
    /// Occurrences suppressed since then.
    suppressed: u64,
}

impl Limited {
    pub const fn new(period: Duration) -> Limited {
        Limited { period, state: Mutex::new(State { last: None, suppressed: 0 }) }
    }

    /// One occurrence at `now`: `Some(n)` when its line is to be written, `n` being how many
    /// occurrences were suppressed since the previous line; `None` when it is suppressed (and
    /// counted for the next line). The first occurrence is always written.
    pub fn hit(&self, now: Instant) -> Option<u64> {
        // A poisoned lock only means another thread panicked while holding it; the state is two
        // plain values and stays usable.
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let due = match s.last {
            None => true,
            Some(last) => now.checked_duration_since(last).is_some_and(|d| d >= self.period),
        };
        if due {
            s.last = Some(now);
            Some(std::mem::take(&mut s.suppressed))
        } else {
            s.suppressed += 1;
            None
        }
    }

    /// The period this site was built with (for the line's wording).
    pub fn period(&self) -> Duration {
        self.period
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_period_with_the_count_of_those_suppressed() {
        let l = Limited::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_millis(s);
        // Occurrences at 0, 1, 2 … 24 s in 500 ms steps: lines at 0 s, 10 s and 20 s.
        let lines: Vec<(u64, u64)> = (0..50).filter_map(|i| l.hit(at(i * 500)).map(|n| (i * 500, n))).collect();
        // 19 suppressed between 0 s and 10 s (0.5 … 9.5 s), 19 between 10 s and 20 s.
        assert_eq!(lines, vec![(0, 0), (10_000, 19), (20_000, 19)]);
        // The 9 suppressed after 20 s (20.5 … 24.5 s) come with the next line.
        assert_eq!(l.hit(at(30_000)), Some(9));
    }

    #[test]
    fn an_earlier_instant_never_reopens_the_period() {
        let l = Limited::new(Duration::from_secs(1));
        let t0 = Instant::now() + Duration::from_secs(5);
        assert_eq!(l.hit(t0), Some(0));
        assert_eq!(l.hit(t0 - Duration::from_secs(3)), None);
        assert_eq!(l.hit(t0 + Duration::from_secs(1)), Some(1));
    }
}
