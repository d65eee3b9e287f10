//! IPMI DCMI whole-system power through `ipmitool dcmi power reading` (docs/sources-and-drives.md §3.1), run
//! through the drives crate's `CommandRunner` (deadline, child killed on timeout, `LC_ALL=C`).
//!
//! The command runs on a worker thread of its own, never on the sampling tick: `read` only takes
//! the newest answer, so a hung `ipmitool` or a slow BMC delays this source alone. The worker reads
//! at most once per `min_interval` (BMCs update about once per second); a failure it does not
//! recognise as permanent (Node busy, BMC initialization in progress, a LAN session failure,
//! `Unspecified error (ff)`, a timeout) is retried with backoff, and the source comes back when the
//! BMC answers. While it is unavailable the source gives no reading (a gap, never 0 W), and each
//! change of its state is one [`Notice`], sent as an event.
//!
//! **Deactivated readings.** ipmitool prints "Power reading state is: deactivated" when the
//! response's state bit is clear. Some OpenBMC firmwares never set it yet report real watts
//! (319 W, 360 W: `tests/fixtures/ipmi/README.md`); a BMC with no reading prints 0 W. Policy: a
//! deactivated reading with a plausible current value (1 ..= [`MAX_PLAUSIBLE_WATTS`]) is kept and
//! flagged: the reading carries [`Flags::DEACTIVATED`] (stored as `flags="deactivated"` on its
//! point, so every such watt value can be told apart later) and the change of state is a
//! `sensor_flagged` event, once; 0 W (or 65535, a known garbage value) is no reading.
//! "Not supported" (completion code c1) and "no IPMI device" are permanent and reported at
//! discovery, never as zeros. Discovery makes one attempt before sampling starts (at most
//! `command_timeout`); every later call is the worker's. The FreeIPMI layout is parsed too, for imported outputs.

mod dcmi;
pub use dcmi::{accept, classify_failure, parse, DcmiError, DcmiReading, MAX_PLAUSIBLE_WATTS};

use super::{Discovered, Flags, Notice, PowerReading, PowerSensor, SensorError};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wattflip_drives::{CommandError, CommandRunner};
use wattflip_infra::Backoff;
use wattflip_proto::units::Watts;
use wattflip_proto::v1;

/// Longest wait between two attempts while the BMC keeps failing.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// One attempt: the reading, or why there is none.
fn attempt(runner: &dyn CommandRunner, argv: &[String], timeout: Duration) -> Result<DcmiReading, DcmiError> {
    match runner.run(argv, timeout) {
        Err(CommandError::NotFound { command }) => Err(DcmiError::NoDevice(format!("`{command}` is not installed (Debian package ipmitool)"))),
        Err(CommandError::Timeout { command, timeout, .. }) => {
            Err(DcmiError::Transient(format!("`{command}` gave no answer within {timeout:?} and was killed")))
        }
        Err(e) => Err(DcmiError::Transient(e.to_string())),
        Ok(o) if !o.exit.success() => Err(classify_failure(&o.stderr, &o.stdout, &o.exit.to_string())),
        Ok(o) => parse(&o.stdout),
    }
}

/// What the worker last learnt, shared with the sensor.
#[derive(Default)]
struct State {
    /// Newest accepted reading, its sequence number and its flags (a kept deactivated reading).
    latest: Option<(u64, Watts, Flags)>,
    /// Sequence number of the reading `read` returned last.
    taken: u64,
    /// Why the source gives no reading now (None: it answers).
    reason: Option<String>,
    /// Whether the newest reading is a kept deactivated one.
    flagged: bool,
    notices: Vec<Notice>,
}

impl State {
    fn record(&mut self, seq: u64, outcome: Result<(Watts, bool), DcmiError>) {
        match outcome {
            Ok((w, flagged)) => {
                if self.reason.take().is_some() {
                    self.notices.push(Notice::available("DCMI power readings are answered again"));
                }
                if flagged != self.flagged {
                    self.notices.push(if flagged {
                        Notice::flagged(format!(
                            "power reading state is deactivated but the BMC reports {} W: kept as a plausible reading (flagged); \
                             `ipmitool dcmi power activate` may set the state",
                            w.0
                        ))
                    } else {
                        Notice::available("power reading state is activated")
                    });
                    self.flagged = flagged;
                }
                self.latest = Some((seq, w, if flagged { Flags::DEACTIVATED } else { Flags::NONE }));
            }
            Err(e) => {
                let msg = e.to_string();
                if self.reason.as_deref() != Some(msg.as_str()) {
                    self.notices.push(Notice::unavailable(msg.clone()));
                    self.reason = Some(msg);
                }
            }
        }
    }
}

/// The DCMI source: a worker thread runs `ipmitool`; `read` takes its newest answer.
pub struct IpmiDcmi {
    state: Arc<Mutex<State>>,
    argv: Vec<String>,
    period: Duration,
    /// Dropping the sensor disconnects this and ends the worker.
    _stop: mpsc::Sender<()>,
}

impl IpmiDcmi {
    /// Starts the worker. `first` is the outcome of the discovery attempt (already made).
    fn start(runner: Arc<dyn CommandRunner>, argv: Vec<String>, timeout: Duration, period: Duration, first: Result<DcmiReading, DcmiError>) -> Self {
        let state = Arc::new(Mutex::new(State::default()));
        let failed_first = first.is_err();
        lock(&state).record(1, first.and_then(|r| accept(&r)));
        let (tx, rx) = mpsc::channel::<()>();
        let (st, av) = (state.clone(), argv.clone());
        let spawned = std::thread::Builder::new().name("ipmi-dcmi".into()).spawn(move || {
            let mut seq = 1u64;
            // One retry delay for the worker: 1 s doubling to a minute, jittered (the workspace's).
            let mut retry = Backoff::new(Duration::from_secs(1), MAX_BACKOFF);
            let mut wait = if failed_first { retry.next_delay() } else { period };
            // recv_timeout returns Timeout while the sensor lives, Disconnected once it is dropped.
            while let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(wait) {
                let started = Instant::now();
                let outcome = attempt(runner.as_ref(), &av, timeout).and_then(|r| accept(&r));
                seq += 1;
                let ok = outcome.is_ok();
                lock(&st).record(seq, outcome);
                wait = if ok {
                    retry.reset();
                    // A slow answer does not start the next call at once: the BMC gets at least half a period of rest.
                    period.saturating_sub(started.elapsed()).max(period / 2)
                } else {
                    retry.next_delay()
                };
            }
        });
        if let Err(e) = spawned {
            lock(&state).record(u64::MAX, Err(DcmiError::Transient(format!("cannot start the ipmitool worker thread: {e}"))));
        }
        IpmiDcmi { state, argv, period, _stop: tx }
    }
}

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    // A worker that panicked mid-update leaves plain data behind: keep using it.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl PowerSensor for IpmiDcmi {
    fn describe(&self) -> v1::PowerSource {
        v1::PowerSource {
            source: "ipmi".into(),
            zone: "dcmi/system".into(),
            scope: "wall".into(),
            method: v1::Method::Measured as i32,
            counter: false,
            path: self.argv.join(" "),
            enabled: true,
            note: lock(&self.state).reason.clone().unwrap_or_default(),
            shunt_ohms: 0.0,
        }
    }

    /// The newest answer not returned yet; `None` when the worker has nothing new (the BMC is
    /// slower than the caller, or unavailable: see [`PowerSensor::take_notices`]).
    fn read(&mut self, _now_ns: u64) -> Result<Option<PowerReading>, SensorError> {
        let mut s = lock(&self.state);
        match s.latest {
            Some((seq, w, flags)) if seq > s.taken => {
                s.taken = seq;
                Ok(Some(PowerReading { watts: w, joules: None, interval_ns: 0, flags }))
            }
            _ => Ok(None),
        }
    }

    fn min_interval(&self) -> Duration {
        self.period
    }

    fn update_period(&self) -> Duration {
        self.period
    }

    fn take_notices(&mut self) -> Vec<Notice> {
        std::mem::take(&mut lock(&self.state).notices)
    }
}

/// Tries one reading; keeps the source unless the failure is permanent (no `ipmitool`, no IPMI
/// device, no DCMI), which goes to `unavailable` with the reason. A transient failure keeps the
/// source: its worker retries with backoff and the reason is its first notice.
pub fn discover(runner: Arc<dyn CommandRunner>, program: &str, timeout: Duration, out: &mut Discovered) {
    discover_with_period(runner, program, timeout, Duration::from_secs(1), out);
}

/// [`discover`] with the worker's read period (tests use a short one).
pub fn discover_with_period(runner: Arc<dyn CommandRunner>, program: &str, timeout: Duration, period: Duration, out: &mut Discovered) {
    let argv: Vec<String> = [program, "dcmi", "power", "reading"].iter().map(|s| s.to_string()).collect();
    let first = attempt(runner.as_ref(), &argv, timeout);
    match &first {
        Err(e) if e.is_permanent() => out.unavailable.push(format!("ipmi: {e}")),
        Err(DcmiError::Unparsable(_)) => out.unavailable.push(format!("ipmi: {}", first.as_ref().err().map(|e| e.to_string()).unwrap_or_default())),
        _ => out.power.push(Box::new(IpmiDcmi::start(runner, argv, timeout, period, first))),
    }
}

#[cfg(test)]
mod tests {
    use super::dcmi::fixture;
    use super::*;
    use wattflip_drives::fake::ScriptedRunner;

    fn wait_for(sensor: &mut Box<dyn PowerSensor>, deadline: Duration) -> Option<PowerReading> {
        let end = Instant::now() + deadline;
        while Instant::now() < end {
            if let Ok(Some(r)) = sensor.read(0) {
                return Some(r);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    }

    #[test]
    fn permanent_failures_at_discovery_are_unavailable_with_their_reason() {
        let argv = ["ipmitool", "dcmi", "power", "reading"];
        let unsupported = Arc::new(ScriptedRunner::new());
        unsupported.expect(&argv, 1, "", &fixture("ipmitool-dcmi-invalid-command.stderr"));
        let mut d = Discovered::default();
        discover(unsupported, "ipmitool", Duration::from_secs(5), &mut d);
        assert!(d.power.is_empty());
        assert_eq!(d.unavailable, vec!["ipmi: the BMC does not support DCMI power readings (DCMI request failed because: Invalid command (c1))".to_string()]);
    }

    #[test]
    fn transient_failure_at_start_is_retried_and_the_source_comes_back() {
        let argv = ["ipmitool", "dcmi", "power", "reading"];
        let runner = Arc::new(ScriptedRunner::new());
        runner.expect(&argv, 1, "", &fixture("lan-session-failure.stderr"));
        runner.expect_timeout(&argv);
        runner.expect(&argv, 0, &fixture("openbmc-witherspoon-deactivated-319w.txt"), "");
        for _ in 0..20 {
            runner.expect(&argv, 0, &fixture("rabe-zabbix-activated-197w.txt"), "");
        }
        let mut d = Discovered::default();
        // A 1 s period leaves the reader a second to take each answer before the next replaces it.
        discover_with_period(runner.clone(), "ipmitool", Duration::from_secs(5), Duration::from_secs(1), &mut d);
        assert_eq!(d.power.len(), 1, "{:?}", d.unavailable);
        let s = &mut d.power[0];
        assert_eq!(s.read(0).unwrap(), None, "no reading while the BMC fails: a gap, not 0 W");
        // Backoff 0.5–1 s after the first failure, then 1–2 s after the timeout.
        let r = wait_for(s, Duration::from_secs(8)).expect("the source came back");
        assert_eq!((r.watts, r.flags), (Watts(319.0), Flags::DEACTIVATED));
        let r = wait_for(s, Duration::from_secs(3)).expect("next reading");
        assert_eq!((r.watts, r.flags), (Watts(197.0), Flags::NONE));
        let notices: Vec<(String, String)> = s.take_notices().into_iter().map(|n| (n.kind.to_string(), n.message)).collect();
        assert_eq!(
            notices,
            vec![
                ("sensor_unavailable".to_string(), "the BMC did not answer: Get Session Challenge command failed (exit status 1)".to_string()),
                ("sensor_unavailable".into(), "the BMC did not answer: `ipmitool dcmi power reading` gave no answer within 5s and was killed".into()),
                ("sensor_available".into(), "DCMI power readings are answered again".into()),
                (
                    "sensor_flagged".into(),
                    "power reading state is deactivated but the BMC reports 319 W: kept as a plausible reading (flagged); \
                     `ipmitool dcmi power activate` may set the state"
                        .into()
                ),
                ("sensor_available".into(), "power reading state is activated".into()),
            ]
        );
    }
}
