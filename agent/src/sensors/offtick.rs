//! Runs a slow power source (one that spawns a tool per read: the NVMe datasheet estimate through
//! nvme-cli) on a worker thread of its own, so a hung or slow tool delays only that source and
//! never the sampling tick. `read` takes the newest reading the worker made, once; a failing source
//! is retried with backoff (1 s doubling to a minute, with jitter) and comes back when it answers;
//! each change between answering and failing is one [`Notice`]. For instantaneous sources only
//! (a counter's interval must be timed where it is read). The IPMI source has its own worker
//! (`ipmi`), which also classifies the BMC's answers; wrap the next slow source with [`OffTick::spawn`].

use super::{Notice, PowerReading, PowerSensor, SensorError};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wattflip_infra::Backoff;
use wattflip_proto::v1;

#[derive(Default)]
struct State {
    latest: Option<(u64, PowerReading)>,
    taken: u64,
    reason: Option<String>,
    notices: Vec<Notice>,
}

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    // A worker that panicked mid-update leaves plain data behind: keep using it.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A source read by its own worker thread every `period`.
pub struct OffTick {
    desc: v1::PowerSource,
    update: Duration,
    state: Arc<Mutex<State>>,
    /// Dropping the sensor disconnects this and ends the worker.
    _stop: mpsc::Sender<()>,
}

impl OffTick {
    /// Moves `inner` to a worker thread that reads it every `period` (first read at once).
    pub fn spawn(mut inner: Box<dyn PowerSensor>, period: Duration) -> Self {
        let desc = inner.describe();
        let update = inner.update_period();
        let state = Arc::new(Mutex::new(State::default()));
        let (tx, rx) = mpsc::channel::<()>();
        let st = state.clone();
        let zone = desc.zone.clone();
        let spawned = std::thread::Builder::new().name(format!("offtick-{}", desc.source)).spawn(move || {
            let base = Instant::now();
            let (mut seq, mut wait) = (0u64, Duration::ZERO);
            let mut retry = Backoff::new(Duration::from_secs(1), super::ipmi::MAX_BACKOFF);
            while let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(wait) {
                let started = Instant::now();
                let now_ns = u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX);
                let result = inner.read(now_ns);
                let mut s = lock(&st);
                s.notices.extend(inner.take_notices());
                match result {
                    Ok(r) => {
                        retry.reset();
                        if let Some(why) = s.reason.take() {
                            tracing::info!(zone = %zone, "answers again after: {why}");
                            s.notices.push(Notice::available("the source answers again"));
                        }
                        if let Some(r) = r {
                            seq += 1;
                            s.latest = Some((seq, r));
                        }
                        // A read slower than the period does not start the next one at once: the
                        // tool (and the device behind it) gets at least half a period of rest.
                        wait = period.saturating_sub(started.elapsed()).max(period / 2);
                    }
                    Err(e) => {
                        let msg = e.to_string();
                        if s.reason.as_deref() != Some(msg.as_str()) {
                            s.notices.push(Notice::unavailable(msg.clone()));
                            s.reason = Some(msg);
                        }
                        wait = retry.next_delay().max(period);
                    }
                }
            }
        });
        if let Err(e) = spawned {
            lock(&state).notices.push(Notice::unavailable(format!("cannot start the worker thread: {e}")));
        }
        OffTick { desc, update, state, _stop: tx }
    }
}

impl PowerSensor for OffTick {
    fn describe(&self) -> v1::PowerSource {
        self.desc.clone()
    }

    /// The worker's newest reading not returned yet, else `None` (nothing new: a gap, not a zero).
    fn read(&mut self, _now_ns: u64) -> Result<Option<PowerReading>, SensorError> {
        let mut s = lock(&self.state);
        match s.latest {
            Some((seq, r)) if seq > s.taken => {
                s.taken = seq;
                Ok(Some(r))
            }
            _ => Ok(None),
        }
    }

    /// Zero: the worker already paces the tool (`period`), and taking its newest reading is a lock,
    /// so every tick looks; with the inner source's own minimum (10 s for the NVMe estimate) a tick
    /// that came before the worker's first answer would put the reading off by a whole interval,
    /// and a short run (`run --samples N`) would never store it.
    fn min_interval(&self) -> Duration {
        Duration::ZERO
    }

    fn update_period(&self) -> Duration {
        self.update
    }

    fn take_notices(&mut self) -> Vec<Notice> {
        std::mem::take(&mut lock(&self.state).notices)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sensors::Flags;
    use wattflip_proto::units::Watts;

    /// A tool-backed source that fails twice, then hangs for a while, then answers.
    struct Flaky {
        calls: u32,
        hang: Duration,
    }

    impl PowerSensor for Flaky {
        fn describe(&self) -> v1::PowerSource {
            v1::PowerSource { source: "nvme_estimate".into(), zone: "nvme0".into(), ..Default::default() }
        }

        fn read(&mut self, _now_ns: u64) -> Result<Option<PowerReading>, SensorError> {
            self.calls += 1;
            match self.calls {
                1 | 2 => Err(SensorError::Command { command: "nvme get-feature /dev/nvme0 --feature-id=2".into(), message: format!("failure {}", self.calls) }),
                3 => {
                    std::thread::sleep(self.hang);
                    Ok(Some(PowerReading { watts: Watts(8.25), joules: None, interval_ns: 0, flags: Flags::NONE }))
                }
                _ => Ok(Some(PowerReading { watts: Watts(3.5), joules: None, interval_ns: 0, flags: Flags::NONE })),
            }
        }
    }

    #[test]
    fn a_failing_then_hanging_source_never_blocks_its_reader_and_comes_back() {
        let mut s = OffTick::spawn(Box::new(Flaky { calls: 0, hang: Duration::from_millis(1500) }), Duration::from_secs(1));
        let mut got = Vec::new();
        let mut slowest = Duration::ZERO;
        let end = Instant::now() + Duration::from_secs(15);
        while got.len() < 2 && Instant::now() < end {
            let t = Instant::now();
            let r = s.read(0).unwrap();
            slowest = slowest.max(t.elapsed());
            got.extend(r.map(|r| r.watts));
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(got, vec![Watts(8.25), Watts(3.5)]);
        assert!(slowest < Duration::from_millis(100), "a read took {slowest:?}");
        let notices: Vec<(&str, String)> = s.take_notices().into_iter().map(|n| (n.kind, n.message)).collect();
        assert_eq!(
            notices,
            vec![
                ("sensor_unavailable", "`nvme get-feature /dev/nvme0 --feature-id=2`: failure 1".to_string()),
                ("sensor_unavailable", "`nvme get-feature /dev/nvme0 --feature-id=2`: failure 2".into()),
                ("sensor_available", "the source answers again".into()),
            ]
        );
    }
}
