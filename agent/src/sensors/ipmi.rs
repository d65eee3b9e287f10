//! IPMI DCMI whole-system power through `ipmitool dcmi power reading` (hardware.md §3.1), run
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
//! flagged (a `sensor_flagged` event, once); 0 W (or 65535, a known garbage value) is no reading.
//! "Not supported" (completion code c1) and "no IPMI device" are permanent and reported at
//! discovery, never as zeros. Discovery makes one attempt before sampling starts (at most
//! `command_timeout`); every later call is the worker's. The FreeIPMI layout is parsed too, for imported outputs.

use super::{Discovered, Notice, PowerReading, PowerSensor, SensorError};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wattflip_drives::{CommandError, CommandRunner};
use wattflip_infra::Backoff;
use wattflip_proto::units::Watts;
use wattflip_proto::v1;

/// Largest current reading believed from a deactivated BMC: DCMI carries u16 watts and 65535 is a
/// known garbage value; no single host this agent runs on draws more.
pub const MAX_PLAUSIBLE_WATTS: f64 = 30_000.0;
/// Longest wait between two attempts while the BMC keeps failing.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// One DCMI power reading.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DcmiReading {
    pub current: Watts,
    pub minimum: Option<Watts>,
    pub maximum: Option<Watts>,
    pub average: Option<Watts>,
    /// False when the BMC says the reading state is deactivated (see the module's policy).
    pub active: bool,
}

/// Why DCMI power cannot be used (now, or on this host).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DcmiError {
    #[error("the BMC does not support DCMI power readings ({0})")]
    NotSupported(String),
    #[error(
        "no IPMI device: load the ipmi_si and ipmi_devintf modules, or this host has no BMC ({0})"
    )]
    NoDevice(String),
    #[error("power reading state is deactivated and the BMC reports {0} W; enable it with `ipmitool dcmi power activate`")]
    Deactivated(f64),
    #[error("cannot parse the DCMI output: no `Instantaneous power reading` or `Current Power` line in {0:?}")]
    Unparsable(String),
    #[error("the BMC did not answer: {0}")]
    Transient(String),
}

impl DcmiError {
    /// Permanent failures are reported at discovery and not retried.
    pub fn is_permanent(&self) -> bool {
        matches!(self, DcmiError::NotSupported(_) | DcmiError::NoDevice(_))
    }
}

fn watts_after_colon(line: &str) -> Option<f64> {
    let v = line.split_once(':')?.1.trim();
    let num = v.split_whitespace().next()?;
    let unit = v.split_whitespace().nth(1).unwrap_or("");
    // FreeIPMI mixes "Watts" and "watts": compare case-insensitively.
    if unit.eq_ignore_ascii_case("watts") {
        num.parse().ok()
    } else {
        None
    }
}

/// Parses ipmitool's or FreeIPMI's text. The state is reported, not judged: see [`accept`].
pub fn parse(stdout: &str) -> Result<DcmiReading, DcmiError> {
    let mut current = None;
    let (mut minimum, mut maximum, mut average) = (None, None, None);
    let mut active = true;
    for line in stdout.lines() {
        let key = line
            .split(':')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match key.as_str() {
            "instantaneous power reading" | "current power" => current = watts_after_colon(line),
            k if k.starts_with("minimum") => minimum = watts_after_colon(line),
            k if k.starts_with("maximum") => maximum = watts_after_colon(line),
            k if k.starts_with("average") => average = watts_after_colon(line),
            _ => {}
        }
        // ipmitool ≥ 1.8.19 prints the timestamp without a newline, so "Sampling period" may share
        // a line with it; the state line is always its own, but find it by its text anyway.
        let lower = line.to_ascii_lowercase();
        for marker in ["power reading state is:", "power measurement"] {
            if let Some(pos) = lower.find(marker) {
                let rest = &lower[pos + marker.len()..];
                let v = rest.trim_start_matches([' ', ':', '\t']).trim();
                active = v == "activated" || v == "active";
            }
        }
    }
    let Some(current) = current else {
        return Err(DcmiError::Unparsable(stdout.chars().take(200).collect()));
    };
    Ok(DcmiReading {
        current: Watts(current),
        minimum: minimum.map(Watts),
        maximum: maximum.map(Watts),
        average: average.map(Watts),
        active,
    })
}

/// The deactivated-reading policy: the watts to record and whether they are flagged.
pub fn accept(r: &DcmiReading) -> Result<(Watts, bool), DcmiError> {
    if r.active {
        return Ok((r.current, false));
    }
    let w = r.current.0;
    if w > 0.0 && w <= MAX_PLAUSIBLE_WATTS {
        Ok((r.current, true))
    } else {
        Err(DcmiError::Deactivated(w))
    }
}

/// The first line that says something: ipmitool's DCMI errors start with a blank line
/// (`"\n    DCMI request failed because: …"`), so the first line is often empty.
fn first_line(s: &str) -> Option<&str> {
    s.lines().map(str::trim).find(|l| !l.is_empty())
}

/// Classifies a failed call from its stderr (and stdout: some DCMI errors go there). Unsupported
/// and missing-device are permanent; anything else is transient and retried.
pub fn classify_failure(stderr: &str, stdout: &str, exit: &str) -> DcmiError {
    let line = first_line(stderr)
        .or_else(|| first_line(stdout))
        .map(str::to_string);
    let l = format!("{stderr}\n{stdout}").to_ascii_lowercase();
    let what = line
        .clone()
        .unwrap_or_else(|| format!("{exit} with no output"));
    if l.contains("invalid command") {
        DcmiError::NotSupported(what)
    } else if l.contains("could not open device") {
        DcmiError::NoDevice(what)
    } else {
        DcmiError::Transient(match line {
            Some(t) => format!("{t} ({exit})"),
            None => what,
        })
    }
}

/// One attempt: the reading, or why there is none.
fn attempt(
    runner: &dyn CommandRunner,
    argv: &[String],
    timeout: Duration,
) -> Result<DcmiReading, DcmiError> {
    match runner.run(argv, timeout) {
        Err(CommandError::NotFound { command }) => Err(DcmiError::NoDevice(format!(
            "`{command}` is not installed (Debian package ipmitool)"
        ))),
        Err(CommandError::Timeout {
            command, timeout, ..
        }) => Err(DcmiError::Transient(format!(
            "`{command}` gave no answer within {timeout:?} and was killed"
        ))),
        Err(e) => Err(DcmiError::Transient(e.to_string())),
        Ok(o) if !o.exit.success() => {
            Err(classify_failure(&o.stderr, &o.stdout, &o.exit.to_string()))
        }
        Ok(o) => parse(&o.stdout),
    }
}

/// What the worker last learnt, shared with the sensor.
#[derive(Default)]
struct State {
    /// Newest accepted reading and its sequence number.
    latest: Option<(u64, Watts)>,
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
                    self.notices
                        .push(Notice::available("DCMI power readings are answered again"));
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
                self.latest = Some((seq, w));
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
    fn start(
        runner: Arc<dyn CommandRunner>,
        argv: Vec<String>,
        timeout: Duration,
        period: Duration,
        first: Result<DcmiReading, DcmiError>,
    ) -> Self {
        let state = Arc::new(Mutex::new(State::default()));
        let failed_first = first.is_err();
        lock(&state).record(1, first.and_then(|r| accept(&r)));
        let (tx, rx) = mpsc::channel::<()>();
        let (st, av) = (state.clone(), argv.clone());
        let spawned = std::thread::Builder::new()
            .name("ipmi-dcmi".into())
            .spawn(move || {
                let mut seq = 1u64;
                // One retry delay for the worker: 1 s doubling to a minute, jittered (the workspace's).
                let mut retry = Backoff::new(Duration::from_secs(1), MAX_BACKOFF);
                let mut wait = if failed_first {
                    retry.next_delay()
                } else {
                    period
                };
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
            lock(&state).record(
                u64::MAX,
                Err(DcmiError::Transient(format!(
                    "cannot start the ipmitool worker thread: {e}"
                ))),
            );
        }
        IpmiDcmi {
            state,
            argv,
            period,
            _stop: tx,
        }
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
            Some((seq, w)) if seq > s.taken => {
                s.taken = seq;
                Ok(Some(PowerReading {
                    watts: w,
                    joules: None,
                    interval_ns: 0,
                }))
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
pub fn discover(
    runner: Arc<dyn CommandRunner>,
    program: &str,
    timeout: Duration,
    out: &mut Discovered,
) {
    discover_with_period(runner, program, timeout, Duration::from_secs(1), out);
}

/// [`discover`] with the worker's read period (tests use a short one).
pub fn discover_with_period(
    runner: Arc<dyn CommandRunner>,
    program: &str,
    timeout: Duration,
    period: Duration,
    out: &mut Discovered,
) {
    let argv: Vec<String> = [program, "dcmi", "power", "reading"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let first = attempt(runner.as_ref(), &argv, timeout);
    match &first {
        Err(e) if e.is_permanent() => out.unavailable.push(format!("ipmi: {e}")),
        Err(DcmiError::Unparsable(_)) => out.unavailable.push(format!(
            "ipmi: {}",
            first
                .as_ref()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        )),
        _ => out.power.push(Box::new(IpmiDcmi::start(
            runner, argv, timeout, period, first,
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wattflip_drives::fake::ScriptedRunner;

    fn fixture(name: &str) -> String {
        std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../tests/fixtures/ipmi")
                .join(name),
        )
        .unwrap()
    }

    fn reading(current: f64, min: f64, max: f64, avg: f64, active: bool) -> DcmiReading {
        DcmiReading {
            current: Watts(current),
            minimum: Some(Watts(min)),
            maximum: Some(Watts(max)),
            average: Some(Watts(avg)),
            active,
        }
    }

    /// The corpus of real outputs (tests/fixtures/ipmi/README.md), expected values read by hand.
    #[test]
    fn real_outputs_parse_to_their_printed_watts() {
        type Case = (&'static str, DcmiReading, Result<(Watts, bool), DcmiError>);
        let cases: &[Case] = &[
            (
                "lovoo-ipmi-exporter-activated-215w.txt",
                reading(215.0, 162.0, 276.0, 176.0, true),
                Ok((Watts(215.0), false)),
            ),
            (
                "rabe-zabbix-activated-197w.txt",
                reading(197.0, 175.0, 242.0, 190.0, true),
                Ok((Watts(197.0), false)),
            ),
            (
                "supermicro-same-line-timestamp-186w.txt",
                reading(186.0, 129.0, 386.0, 198.0, true),
                Ok((Watts(186.0), false)),
            ),
            (
                "openbmc-witherspoon-deactivated-319w.txt",
                reading(319.0, 319.0, 319.0, 319.0, false),
                Ok((Watts(319.0), true)),
            ),
            (
                "openbmc-ampere-deactivated-360w.txt",
                reading(360.0, 360.0, 360.0, 360.0, false),
                Ok((Watts(360.0), true)),
            ),
            (
                "ipmitool-dcmi-deactivated.txt",
                reading(0.0, 0.0, 0.0, 0.0, false),
                Err(DcmiError::Deactivated(0.0)),
            ),
            (
                "freeipmi-not-available-105w.txt",
                reading(105.0, 0.0, 0.0, 0.0, false),
                Ok((Watts(105.0), true)),
            ),
            (
                "ipmitool-dcmi-activated.txt",
                reading(173.0, 70.0, 500.0, 178.0, true),
                Ok((Watts(173.0), false)),
            ),
            (
                "freeipmi-dcmi-active.txt",
                reading(164.0, 110.0, 310.0, 169.0, true),
                Ok((Watts(164.0), false)),
            ),
        ];
        for (file, want, verdict) in cases {
            let got = parse(&fixture(file)).unwrap();
            assert_eq!(&got, want, "{file}");
            assert_eq!(&accept(&got), verdict, "{file}");
        }
        assert!(matches!(parse("garbage"), Err(DcmiError::Unparsable(_))));
        // 65535 W from a deactivated BMC is the known garbage value, not a reading.
        assert_eq!(
            accept(&reading(65535.0, 0.0, 0.0, 0.0, false)),
            Err(DcmiError::Deactivated(65535.0))
        );
    }

    #[test]
    fn real_failures_are_classified_with_a_reason() {
        let f = |file: &str| classify_failure(&fixture(file), "", "exit status: 1");
        assert_eq!(
            f("ipmitool-dcmi-invalid-command.stderr"),
            DcmiError::NotSupported("DCMI request failed because: Invalid command (c1)".into())
        );
        assert_eq!(
            f("ipmitool-no-device.stderr"),
            DcmiError::NoDevice("Could not open device at /dev/ipmi0 or /dev/ipmi/0 or /dev/ipmidev/0: No such file or directory".into())
        );
        assert_eq!(
            f("lan-session-failure.stderr"),
            DcmiError::Transient("Get Session Challenge command failed (exit status: 1)".into())
        );
        assert_eq!(
            f("dell-r750-unspecified-error.stderr"),
            DcmiError::Transient(
                "DCMI request failed because: Unspecified error (ff) (exit status: 1)".into()
            )
        );
        // The blank first line is skipped: never an empty reason "()".
        assert_eq!(
            f("rainier-get-conf-param-blank-first.stderr"),
            DcmiError::Transient(
                "DCMI request failed because: Unspecified error (ff) (exit status: 1)".into()
            )
        );
        assert_eq!(
            classify_failure("", &fixture("get-limit-blank-first.txt"), "exit status: 1"),
            DcmiError::Transient(
                "A valid DCMI command was not returned! (80) (exit status: 1)".into()
            )
        );
        assert_eq!(
            classify_failure("\n\n", "", "exit status: 1"),
            DcmiError::Transient("exit status: 1 with no output".into())
        );
        assert_eq!(
            DcmiError::NotSupported("DCMI request failed because: Invalid command (c1)".into()).to_string(),
            "the BMC does not support DCMI power readings (DCMI request failed because: Invalid command (c1))"
        );
    }

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
        unsupported.expect(
            &argv,
            1,
            "",
            &fixture("ipmitool-dcmi-invalid-command.stderr"),
        );
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
        runner.expect(
            &argv,
            0,
            &fixture("openbmc-witherspoon-deactivated-319w.txt"),
            "",
        );
        for _ in 0..20 {
            runner.expect(&argv, 0, &fixture("rabe-zabbix-activated-197w.txt"), "");
        }
        let mut d = Discovered::default();
        // A 1 s period leaves the reader a second to take each answer before the next replaces it.
        discover_with_period(
            runner.clone(),
            "ipmitool",
            Duration::from_secs(5),
            Duration::from_secs(1),
            &mut d,
        );
        assert_eq!(d.power.len(), 1, "{:?}", d.unavailable);
        let s = &mut d.power[0];
        assert_eq!(
            s.read(0).unwrap(),
            None,
            "no reading while the BMC fails: a gap, not 0 W"
        );
        // Backoff 0.5–1 s after the first failure, then 1–2 s after the timeout.
        let r = wait_for(s, Duration::from_secs(8)).expect("the source came back");
        assert_eq!(r.watts, Watts(319.0));
        let r = wait_for(s, Duration::from_secs(3)).expect("next reading");
        assert_eq!(r.watts, Watts(197.0));
        let notices: Vec<(String, String)> = s
            .take_notices()
            .into_iter()
            .map(|n| (n.kind.to_string(), n.message))
            .collect();
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
