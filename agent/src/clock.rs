//! The agent's time: a monotonic clock anchored to UTC once at start, so intervals never jump with
//! NTP and every timestamp is UTC nanoseconds. Only `app/` creates a [`Clock`]; everything below
//! takes one (it is `Copy`), so a command's records share one anchor. A different time source
//! (a test's fake time) is a type next to this one, not a change here.

use std::time::Instant;

/// Monotonic clock anchored to UTC once at start.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    utc0_ns: i64,
    mono0: Instant,
}

impl Clock {
    pub fn new() -> Self {
        let utc0_ns = wattflip_proto::units::UnixNanos::now().0;
        Clock { utc0_ns, mono0: Instant::now() }
    }

    /// (monotonic ns since start, UTC ns) for `Instant::now()`.
    pub fn now(&self) -> (u64, i64) {
        let mono = u64::try_from(self.mono0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        (mono, self.utc0_ns.saturating_add(mono as i64))
    }

    pub fn utc_now(&self) -> i64 {
        self.now().1
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}
