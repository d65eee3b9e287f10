//! Capped exponential backoff with jitter, the one retry delay of the workspace (the agent's gRPC
//! reconnects, the collector's InfluxDB retries).
//!
//! Attempt `n` waits a uniformly random time in `[b/2, b]` with `b = min(initial · 2^n, max)`
//! ("equal jitter"): it never exceeds `max`, never drops below half the exponential step, and a
//! fleet that lost its collector at the same instant spreads its reconnects over half the step
//! instead of arriving in lockstep. A server's own hint (HTTP `Retry-After`) is honoured as given,
//! capped at `max`. To change the policy, change [`Backoff::next_delay`] and its bounds test.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::Duration;

/// Exponent cap: 2^16 × any sensible `initial` is far above any sensible `max`.
const MAX_DOUBLINGS: u32 = 16;

/// Retry delays for one connection or writer. [`Backoff::reset`] after a success.
#[derive(Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    attempt: u32,
    rng: StdRng,
}

impl Backoff {
    /// Delays from `initial` doubling up to `max` (a `max` below `initial` is raised to it), with
    /// jitter seeded from the OS.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self::with_rng(initial, max, StdRng::from_os_rng())
    }

    /// Like [`Backoff::new`] with a fixed seed: reproducible delays for tests.
    pub fn seeded(initial: Duration, max: Duration, seed: u64) -> Self {
        Self::with_rng(initial, max, StdRng::seed_from_u64(seed))
    }

    fn with_rng(initial: Duration, max: Duration, rng: StdRng) -> Self {
        Backoff { initial, max: max.max(initial), attempt: 0, rng }
    }

    /// Failed attempts since the last [`Backoff::reset`].
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// After a success: the next failure waits about `initial` again.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    /// The un-jittered step of the current attempt: `min(initial · 2^attempt, max)`.
    pub fn step(&self) -> Duration {
        self.initial.saturating_mul(1u32 << self.attempt.min(MAX_DOUBLINGS)).min(self.max)
    }

    /// The delay before the next try, uniformly in `[step/2, step]`; counts the attempt.
    pub fn next_delay(&mut self) -> Duration {
        let step = self.step();
        self.attempt = self.attempt.saturating_add(1);
        let half = step / 2;
        // Whole nanoseconds: `step` is at most `max`, far below u64::MAX ns (584 years).
        let spread = u64::try_from((step - half).as_nanos()).unwrap_or(u64::MAX);
        half + Duration::from_nanos(self.rng.random_range(0..=spread))
    }

    /// The server's `hint` capped at `max` when there is one (no jitter: the server chose it),
    /// else [`Backoff::next_delay`]. Counts the attempt either way.
    pub fn next_delay_or(&mut self, hint: Option<Duration>) -> Duration {
        match hint {
            Some(h) => {
                self.attempt = self.attempt.saturating_add(1);
                h.min(self.max)
            }
            None => self.next_delay(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn delays_stay_within_half_step_and_step_and_never_exceed_max() {
        let (initial, max) = (200 * MS, 30_000 * MS);
        for seed in 0..50 {
            let mut b = Backoff::seeded(initial, max, seed);
            for n in 0..40u32 {
                let step = initial.saturating_mul(1u32 << n.min(16)).min(max);
                assert_eq!(b.step(), step, "attempt {n}");
                let d = b.next_delay();
                assert!(d >= step / 2 && d <= step, "seed {seed} attempt {n}: {d:?} outside [{:?}, {step:?}]", step / 2);
                assert!(d <= max);
            }
            assert_eq!(b.attempt(), 40);
        }
    }

    #[test]
    fn steps_double_then_cap() {
        let mut b = Backoff::seeded(200 * MS, 1_000 * MS, 1);
        let steps: Vec<Duration> = (0..5)
            .map(|_| {
                let s = b.step();
                b.next_delay();
                s
            })
            .collect();
        assert_eq!(steps, vec![200 * MS, 400 * MS, 800 * MS, 1_000 * MS, 1_000 * MS]);
        b.reset();
        assert_eq!((b.attempt(), b.step()), (0, 200 * MS));
    }

    #[test]
    fn jitter_spreads_a_fleet() {
        // 100 agents losing the collector at once: their first delays must not coincide.
        let delays: std::collections::BTreeSet<Duration> = (0..100).map(|seed| Backoff::seeded(1_000 * MS, 30_000 * MS, seed).next_delay()).collect();
        assert!(delays.len() >= 95, "only {} distinct delays of 100", delays.len());
        let (lo, hi) = (delays.first().copied(), delays.last().copied());
        assert!(lo < Some(600 * MS) && hi > Some(900 * MS), "spread {lo:?}..{hi:?}");
    }

    #[test]
    fn server_hint_is_honoured_and_capped() {
        let mut b = Backoff::seeded(100 * MS, 5_000 * MS, 3);
        assert_eq!(b.next_delay_or(Some(2_000 * MS)), 2_000 * MS);
        assert_eq!(b.next_delay_or(Some(60_000 * MS)), 5_000 * MS);
        assert_eq!(b.attempt(), 2);
        let d = b.next_delay_or(None);
        assert!(d >= 200 * MS && d <= 400 * MS, "{d:?}");
    }

    #[test]
    fn max_below_initial_is_raised_and_huge_attempts_saturate() {
        let mut b = Backoff::seeded(500 * MS, 100 * MS, 4);
        assert_eq!(b.step(), 500 * MS);
        for _ in 0..100 {
            let d = b.next_delay();
            assert!(d >= 250 * MS && d <= 500 * MS);
        }
        let mut b = Backoff::seeded(Duration::MAX, Duration::MAX, 5);
        b.attempt = u32::MAX;
        assert_eq!(b.step(), Duration::MAX);
        assert!(b.next_delay() >= Duration::MAX / 2);
        assert_eq!(b.attempt(), u32::MAX);
    }
}
