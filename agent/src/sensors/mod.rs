//! Power and temperature sensors. Each kind of source is one module with a `discover(root)`
//! function (finding what exists, separate from reading it) that returns sensors implementing the
//! small traits below. To add a source: a module with `discover`, a variant in `SensorKinds`
//! (config) and one call in [`discover_all`].

pub mod hwmon;
pub mod rapl;

use std::path::{Path, PathBuf};
use wattflip_proto::units::{Celsius, Joules, Watts};
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
}

/// A source of power readings.
pub trait PowerSensor: Send {
    fn describe(&self) -> v1::PowerSource;
    /// Reads at monotonic instant `now_ns`. Counter sources return `None` on their first read,
    /// which only sets the baseline.
    fn read(&mut self, now_ns: u64) -> Result<Option<PowerReading>, SensorError>;
}

/// A source of temperature readings.
pub trait TemperatureSensor: Send {
    fn describe(&self) -> v1::TemperatureSensor;
    fn read(&mut self) -> Result<Celsius, SensorError>;
}

/// What discovery found: working sensors, plus sources that exist but cannot be used (with why),
/// plus "not on this host" notes. The latter two go into the inventory, not into zeros.
#[derive(Default)]
pub struct Discovered {
    pub power: Vec<Box<dyn PowerSensor>>,
    pub temperature: Vec<Box<dyn TemperatureSensor>>,
    pub unusable_power: Vec<v1::PowerSource>,
    pub unavailable: Vec<String>,
}

/// Which kinds of sources to look for.
#[derive(Debug, Clone, PartialEq)]
pub struct SensorKinds {
    pub rapl: bool,
    pub hwmon: bool,
}

impl Default for SensorKinds {
    fn default() -> Self {
        SensorKinds { rapl: true, hwmon: true }
    }
}

/// Discovers every enabled kind of source under `sysfs_root`.
pub fn discover_all(sysfs_root: &Path, kinds: &SensorKinds) -> Discovered {
    let mut d = Discovered::default();
    if kinds.rapl {
        rapl::discover(sysfs_root, &mut d);
    }
    if kinds.hwmon {
        hwmon::discover(sysfs_root, &mut d);
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
