//! Power, temperature and electrical sensors, the bottom layer of the agent (it imports only
//! `clock` besides itself). Each kind of source is one module with a `discover(root)` function
//! (finding what exists, separate from reading it) that pushes sensors implementing the small
//! traits below; `config` holds `[sources]` and the per-source rates, `sampler` the fast
//! windowed sampling of `run`. To add a power source, everything stays in this folder: a module
//! with `discover`, its switch in `config` (`RawSources`, `SensorKinds`), and the one
//! registration line, its call in [`discover_all`].

pub mod config;
pub mod drivers;
pub mod hwmon;
pub mod ipmi;
pub mod nvme_estimate;
pub mod offtick;
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
    /// What a reader of the stored value must know about it (a deactivated DCMI reading).
    pub flags: Flags,
}

/// Quality flags of a reading, sent as the sample's `flags` (the `flags` field of its `power`
/// point). A small bit set, so readings stay `Copy` on the 1 kHz path; a window aggregate carries
/// the union of its readings' flags. A new flag is a constant here and its word in `Flags::WORDS`
/// (one lowercase word, documented in ingest.proto and docs/schema.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flags(u8);

impl Flags {
    pub const NONE: Flags = Flags(0);
    /// An IPMI DCMI reading whose state the BMC reports as deactivated, kept because plausible.
    pub const DEACTIVATED: Flags = Flags(1);

    const WORDS: [(Flags, &'static str); 1] = [(Flags::DEACTIVATED, "deactivated")];

    pub fn union(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }

    pub fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    /// The flags as the wire's words, in a fixed order.
    pub fn words(self) -> Vec<String> {
        Self::WORDS.iter().filter(|(f, _)| self.contains(*f)).map(|(_, w)| w.to_string()).collect()
    }
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
            flags: self.flags.words(),
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

/// A change in a source's state worth an event: unavailable (with why), available again, or its
/// readings flagged. Sources queue one per change; callers send them as events.
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    /// Event kind: `sensor_unavailable`, `sensor_available` or `sensor_flagged`.
    pub kind: &'static str,
    pub severity: v1::Severity,
    pub message: String,
}

impl Notice {
    pub fn unavailable(message: impl Into<String>) -> Self {
        Notice { kind: "sensor_unavailable", severity: v1::Severity::Warning, message: message.into() }
    }

    pub fn available(message: impl Into<String>) -> Self {
        Notice { kind: "sensor_available", severity: v1::Severity::Info, message: message.into() }
    }

    pub fn flagged(message: impl Into<String>) -> Self {
        Notice { kind: "sensor_flagged", severity: v1::Severity::Warning, message: message.into() }
    }
}

/// A source of power readings.
pub trait PowerSensor: Send {
    fn describe(&self) -> v1::PowerSource;
    /// Reads at monotonic instant `now_ns`. Counter sources return `None` on their first read,
    /// which only sets the baseline.
    fn read(&mut self, now_ns: u64) -> Result<Option<PowerReading>, SensorError>;
    /// Reads with the instant taken by the source itself around the read: `now` returns the
    /// monotonic time in ns, and a counter source calls it just before and just after its read and
    /// uses the midpoint, so a late or slow read does not shift its interval. Returns the reading
    /// and the instant it stands for.
    fn read_timed(&mut self, now: &mut dyn FnMut() -> u64) -> (u64, Result<Option<PowerReading>, SensorError>) {
        let t = now();
        (t, self.read(t))
    }
    /// Shortest useful time between reads (BMCs update about once per second); the sampler
    /// skips this source on ticks that come sooner.
    fn min_interval(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
    /// How often the source's value changes (RAPL ≈ 1 ms, an INA226 its `update_interval`, a BMC
    /// ≈ 1 s): reading faster only repeats values, and min/max are taken over spans no shorter
    /// than this (see `sampler`). Zero when unknown.
    fn update_period(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
    /// Changes of state since the last call, oldest first (each sent as one event).
    fn take_notices(&mut self) -> Vec<Notice> {
        Vec::new()
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
    /// How often a kept-open sysfs attribute checks that its path still names the file it holds
    /// (`sampling.recheck_interval`, default [`RECHECK`]).
    pub recheck: std::time::Duration,
    /// Update periods the operator declares per zone (`[sources.update_periods]`, keyed by the
    /// zone or `source:zone`): how often the source's value changes, where sysfs does not say.
    pub update_periods: std::collections::BTreeMap<String, std::time::Duration>,
}

impl SensorKinds {
    /// The declared update period of the zone `source:zone`, if any.
    pub fn update_period_of(&self, source: &str, zone: &str) -> Option<std::time::Duration> {
        self.update_periods.get(&format!("{source}:{zone}")).or_else(|| self.update_periods.get(zone)).copied()
    }
}

impl Default for SensorKinds {
    fn default() -> Self {
        SensorKinds {
            rapl: true,
            hwmon: true,
            ipmi: false,
            ipmitool: "ipmitool".into(),
            command_timeout: std::time::Duration::from_secs(5),
            recheck: RECHECK,
            update_periods: Default::default(),
        }
    }
}

/// How a sysfs power source is found: `discover(sysfs_root, recheck, &mut Discovered)` pushes the
/// sensors it finds (and what it found unusable) into the [`Discovered`].
pub type SysfsDiscover = fn(&Path, std::time::Duration, &mut Discovered);

/// Every sysfs power source with its switch, in discovery order: **the one place a new sysfs
/// source is registered** (README, "A power source"). [`discover_all`] at start-up and
/// [`rediscover`] for sources that appear later both walk it, so a source cannot be found at
/// start and missed when its driver loads late (or the reverse).
pub fn sysfs_sources(kinds: &SensorKinds) -> Vec<(bool, SysfsDiscover)> {
    vec![(kinds.rapl, rapl::discover), (kinds.hwmon, hwmon::discover)]
}

/// Runs the enabled `sources` under `sysfs_root` into one [`Discovered`].
pub fn discover_sysfs(sources: &[(bool, SysfsDiscover)], sysfs_root: &Path, recheck: std::time::Duration) -> Discovered {
    let mut d = Discovered::default();
    for (_, discover) in sources.iter().filter(|(enabled, _)| *enabled) {
        discover(sysfs_root, recheck, &mut d);
    }
    d
}

/// Discovers every enabled kind of source under `sysfs_root`: the sysfs sources of
/// [`sysfs_sources`], then sources behind a tool (`ipmitool`), run through `runner`.
pub fn discover_all(sysfs_root: &Path, kinds: &SensorKinds, runner: &Arc<dyn CommandRunner>) -> Discovered {
    let mut d = discover_sysfs(&sysfs_sources(kinds), sysfs_root, kinds.recheck);
    if kinds.ipmi {
        ipmi::discover(runner.clone(), &kinds.ipmitool, kinds.command_timeout, &mut d);
    }
    d
}

/// The sysfs power sources (those of [`sysfs_sources`]) that exist now and are not in `known`
/// (`(source, zone)` pairs): a zone whose driver loaded after start-up, or that was unreadable
/// then and is readable now. External commands (IPMI) are not run here: their workers retry on
/// their own.
pub fn rediscover(sysfs_root: &Path, kinds: &SensorKinds, known: &std::collections::HashSet<(String, String)>) -> Vec<Box<dyn PowerSensor>> {
    rediscover_from(&sysfs_sources(kinds), sysfs_root, kinds.recheck, known)
}

/// [`rediscover`] over a given source table.
pub fn rediscover_from(
    sources: &[(bool, SysfsDiscover)],
    sysfs_root: &Path,
    recheck: std::time::Duration,
    known: &std::collections::HashSet<(String, String)>,
) -> Vec<Box<dyn PowerSensor>> {
    discover_sysfs(sources, sysfs_root, recheck)
        .power
        .into_iter()
        .filter(|s| {
            let desc = s.describe();
            !known.contains(&(desc.source, desc.zone))
        })
        .collect()
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

/// How often a kept-open attribute checks, by default, that its path still names the file it
/// holds open: a replaced or vanished file is seen at the first read at least this long after the
/// previous check, so its stale value is read for at most this long (plus one read period). One
/// `stat` per attribute per check (≈ 1–2 µs): 10 per second at 100 ms, nothing next to a 1 kHz
/// `pread`. `sampling.recheck_interval` sets it (never longer than `sampling.interval`).
pub const RECHECK: std::time::Duration = std::time::Duration::from_millis(100);

/// A sysfs attribute kept open and re-read with `pread` at offset 0, so sampling at up to 1 kHz
/// costs no open/close per reading (docs/sources-and-drives.md §1.5). A handle can go stale without any read
/// failing: a file replaced by rename (a driver reload, a writer that renames) or removed keeps
/// answering its old content forever. So the attribute:
/// - drops the descriptor on any error (ENODEV, ESTALE, EIO...) and opens the path again next time;
/// - every `recheck` ([`RECHECK`] by default; and whenever [`Attr::recheck_now`] asks), `stat`s the path and reopens when
///   its inode changed; a path that is gone is an error (a gap), never the old value.
pub(crate) struct Attr {
    path: PathBuf,
    file: Option<(std::fs::File, (u64, u64))>,
    hint: &'static str,
    checked: Option<std::time::Instant>,
    recheck: std::time::Duration,
}

impl Attr {
    pub(crate) fn new(path: PathBuf, hint: &'static str, recheck: std::time::Duration) -> Self {
        Attr { path, file: None, hint, checked: None, recheck }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Makes the next read check the path's inode (a counter frozen while its siblings move).
    pub(crate) fn recheck_now(&mut self) {
        self.checked = None;
    }

    fn io_error(&self, e: std::io::Error) -> SensorError {
        match e.kind() {
            std::io::ErrorKind::PermissionDenied => SensorError::PermissionDenied { path: self.path.clone(), hint: self.hint },
            std::io::ErrorKind::NotFound => SensorError::Missing { path: self.path.clone() },
            _ => SensorError::Io { path: self.path.clone(), source: e },
        }
    }

    fn identity(m: &std::fs::Metadata) -> (u64, u64) {
        use std::os::unix::fs::MetadataExt as _;
        (m.dev(), m.ino())
    }

    /// The open file, reopened when the path now names another file.
    fn file(&mut self) -> Result<&std::fs::File, SensorError> {
        let due = self.checked.is_none_or(|t| t.elapsed() >= self.recheck);
        if due && self.file.is_some() {
            self.checked = Some(std::time::Instant::now());
            match std::fs::metadata(&self.path) {
                Ok(m) if self.file.as_ref().is_some_and(|(_, id)| *id == Self::identity(&m)) => {}
                Ok(_) => self.file = None,
                Err(e) => {
                    self.file = None;
                    return Err(self.io_error(e));
                }
            }
        }
        if self.file.is_none() {
            let f = std::fs::File::open(&self.path).map_err(|e| self.io_error(e))?;
            let id = f.metadata().map(|m| Self::identity(&m)).map_err(|e| self.io_error(e))?;
            self.checked = Some(std::time::Instant::now());
            self.file = Some((f, id));
        }
        match &self.file {
            Some((f, _)) => Ok(f),
            None => Err(SensorError::Missing { path: self.path.clone() }),
        }
    }

    /// Reads an energy counter whose previous value was `last`. A value equal to it is checked
    /// once more after a path check: a file replaced behind the open descriptor (a driver rebind
    /// re-creates it) answers its old value forever, and reading the new file at the next read,
    /// not at the next periodic re-check, keeps the energy of the interval in that interval.
    pub(crate) fn read_counter(&mut self, expected: &'static str, last: Option<u64>) -> Result<u64, SensorError> {
        let v = self.read_int::<u64>(expected)?;
        if last != Some(v) {
            return Ok(v);
        }
        self.recheck_now();
        self.read_int(expected)
    }

    pub(crate) fn read_int<T: std::str::FromStr>(&mut self, expected: &'static str) -> Result<T, SensorError> {
        use std::os::unix::fs::FileExt as _;
        let mut buf = [0u8; 64];
        let n = match self.file()?.read_at(&mut buf, 0) {
            Ok(n) => n,
            Err(e) => {
                self.file = None;
                return Err(self.io_error(e));
            }
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
