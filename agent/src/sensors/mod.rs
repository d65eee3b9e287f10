//! Power, temperature and electrical sensors, the bottom layer of the agent (it imports only
//! `clock` besides itself). Each kind of source is one module with a `discover(root)` function
//! (finding what exists, separate from reading it) that pushes sensors implementing the small
//! traits below; `config` holds `[sources]` and the per-source rates, `sampler` the fast
//! windowed sampling of `run`. To add a power source, everything stays in this folder: a module
//! with `discover`, its switch in `config` (`RawSources`, `SensorKinds`), and the one
//! registration line, its call in [`discover_all`].

pub mod config;
pub mod hwmon;
pub mod ipmi;
pub mod nvme_estimate;
pub mod rapl;
pub mod sampler;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use wattflip_drives::CommandRunner;
use wattflip_proto::units::{Amperes, Celsius, Joules, Volts, Watts};
use wattflip_proto::v1;

/// One reading of a power source.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PowerReading {
    /// Mean power over the interval (counters) or the instantaneous value.
    pub watts: Watts,
    /// Energy of the interval, for counter sources (exact, from the counter).
    pub joules: Option<Joules>,
    /// Length of the interval on the monotonic clock; 0 for instantaneous readings.
    pub interval_ns: u64,
}

impl PowerReading {
    /// The wire sample of this reading from the source `d`, taken at `time_ns` (UTC).
    pub fn sample(&self, d: v1::PowerSource, time_ns: i64) -> v1::PowerSample {
        v1::PowerSample {
            time_ns,
            source: d.source,
            zone: d.zone,
            scope: d.scope,
            method: d.method,
            watts: Some(self.watts.0),
            joules: self.joules.map(|j| j.0),
            interval_ns: i64::try_from(self.interval_ns).unwrap_or(i64::MAX),
            ..Default::default()
        }
    }
}

/// Why a sensor could not be read. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum SensorError {
    #[error("permission denied reading {path}: {hint}")]
    PermissionDenied { path: PathBuf, hint: &'static str },
    #[error("{path} does not exist (device removed or driver unloaded?)")]
    Missing { path: PathBuf },
    #[error("cannot parse {path}: `{content}` is not {expected}")]
    Parse { path: PathBuf, content: String, expected: &'static str },
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: counter went from {prev} to {cur} µJ with no known range; interval skipped")]
    CounterReset { path: PathBuf, prev: u64, cur: u64 },
    #[error("`{command}`: {message}")]
    Command { command: String, message: String },
}

/// A source of power readings.
pub trait PowerSensor: Send {
    fn describe(&self) -> v1::PowerSource;
    /// Reads at monotonic instant `now_ns`. Counter sources return `None` on their first read,
    /// which only sets the baseline.
    fn read(&mut self, now_ns: u64) -> Result<Option<PowerReading>, SensorError>;
    /// Shortest useful time between reads (BMCs update about once per second); the sampler
    /// skips this source on ticks that come sooner.
    fn min_interval(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
}

/// A source of temperature readings.
pub trait TemperatureSensor: Send {
    fn describe(&self) -> v1::TemperatureSensor;
    fn read(&mut self) -> Result<Celsius, SensorError>;
}

/// One reading of a voltage or current channel.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Electrical {
    Volts(Volts),
    Amperes(Amperes),
}

/// Where an electrical channel is: the `electrical` point's tags, plus the file it is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectricalChannel {
    pub source: String,
    pub chip: String,
    pub channel: String,
    pub path: String,
}

/// A source of voltage or current readings (hwmon `in*_input`, `curr*_input`).
pub trait ElectricalSensor: Send {
    fn describe(&self) -> ElectricalChannel;
    fn read(&mut self) -> Result<Electrical, SensorError>;
}

impl Electrical {
    /// The wire sample of this reading from channel `c`, taken at `time_ns` (UTC).
    pub fn sample(&self, c: ElectricalChannel, time_ns: i64) -> v1::ElectricalSample {
        let (volts, amperes) = match *self {
            Electrical::Volts(v) => (Some(v.0), None),
            Electrical::Amperes(a) => (None, Some(a.0)),
        };
        v1::ElectricalSample { time_ns, source: c.source, chip: c.chip, channel: c.channel, volts, amperes }
    }
}

/// What discovery found: working sensors, plus sources that exist but cannot be used (with why),
/// plus "not on this host" notes. The latter two go into the inventory, not into zeros.
#[derive(Default)]
pub struct Discovered {
    pub power: Vec<Box<dyn PowerSensor>>,
    pub temperature: Vec<Box<dyn TemperatureSensor>>,
    pub electrical: Vec<Box<dyn ElectricalSensor>>,
    pub unusable_power: Vec<v1::PowerSource>,
    pub unavailable: Vec<String>,
}

/// Which kinds of sources to look for.
#[derive(Debug, Clone, PartialEq)]
pub struct SensorKinds {
    pub rapl: bool,
    pub hwmon: bool,
    /// `ipmitool dcmi power reading` (off by default: it needs root and a BMC).
    pub ipmi: bool,
    pub ipmitool: String,
    pub command_timeout: std::time::Duration,
}

impl Default for SensorKinds {
    fn default() -> Self {
        SensorKinds {
            rapl: true,
            hwmon: true,
            ipmi: false,
            ipmitool: "ipmitool".into(),
            command_timeout: std::time::Duration::from_secs(5),
        }
    }
}

/// Discovers every enabled kind of source under `sysfs_root`; sources behind a tool (`ipmitool`)
/// run it through `runner`.
pub fn discover_all(sysfs_root: &Path, kinds: &SensorKinds, runner: &Arc<dyn CommandRunner>) -> Discovered {
    let mut d = Discovered::default();
    if kinds.rapl {
        rapl::discover(sysfs_root, &mut d);
    }
    if kinds.hwmon {
        hwmon::discover(sysfs_root, &mut d);
    }
    if kinds.ipmi {
        ipmi::discover(runner.clone(), &kinds.ipmitool, kinds.command_timeout, &mut d);
    }
    d
}

/// Reads a small sysfs attribute, mapping errors to [`SensorError`] with the path.
pub(crate) fn read_attr(path: &Path, hint: &'static str) -> Result<String, SensorError> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(s.trim().to_string()),
        Err(e) => Err(match e.kind() {
            std::io::ErrorKind::PermissionDenied => SensorError::PermissionDenied { path: path.to_owned(), hint },
            std::io::ErrorKind::NotFound => SensorError::Missing { path: path.to_owned() },
            _ => SensorError::Io { path: path.to_owned(), source: e },
        }),
    }
}

pub(crate) fn read_int<T: std::str::FromStr>(path: &Path, hint: &'static str, expected: &'static str) -> Result<T, SensorError> {
    let s = read_attr(path, hint)?;
    s.parse().map_err(|_| SensorError::Parse { path: path.to_owned(), content: s, expected })
}

/// A sysfs attribute kept open and re-read with `pread` at offset 0, so sampling at up to 1 kHz
/// costs no open/close per reading (hardware.md §1.5). Any failure drops the descriptor, and the
/// next read opens the file again (a driver reload replaces the attribute).
pub(crate) struct Attr {
    path: PathBuf,
    file: Option<std::fs::File>,
    hint: &'static str,
}

impl Attr {
    pub(crate) fn new(path: PathBuf, hint: &'static str) -> Self {
        Attr { path, file: None, hint }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    fn io_error(&self, e: std::io::Error) -> SensorError {
        match e.kind() {
            std::io::ErrorKind::PermissionDenied => SensorError::PermissionDenied { path: self.path.clone(), hint: self.hint },
            std::io::ErrorKind::NotFound => SensorError::Missing { path: self.path.clone() },
            _ => SensorError::Io { path: self.path.clone(), source: e },
        }
    }

    pub(crate) fn read_int<T: std::str::FromStr>(&mut self, expected: &'static str) -> Result<T, SensorError> {
        use std::os::unix::fs::FileExt as _;
        if self.file.is_none() {
            self.file = Some(std::fs::File::open(&self.path).map_err(|e| self.io_error(e))?);
        }
        let mut buf = [0u8; 64];
        let n = match self.file.as_ref().map(|f| f.read_at(&mut buf, 0)) {
            Some(Ok(n)) => n,
            Some(Err(e)) => {
                self.file = None;
                return Err(self.io_error(e));
            }
            None => 0,
        };
        // No allocation on the hot path: parse straight from the buffer.
        match std::str::from_utf8(&buf[..n]).ok().and_then(|t| t.trim().parse().ok()) {
            Some(v) => Ok(v),
            None => {
                self.file = None;
                let content = String::from_utf8_lossy(&buf[..n]).trim().to_string();
                Err(SensorError::Parse { path: self.path.clone(), content, expected })
            }
        }
    }
}
