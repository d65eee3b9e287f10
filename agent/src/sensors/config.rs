//! `[sources]` and `[sampling.power_intervals]` of the agent config: which kinds of sources are
//! discovered (`SensorKinds`), where sysfs is, and how often each kind of power source is read. A
//! new kind of power source adds its switch here (a field of [`RawSources`] read in
//! [`sensor_kinds`]) and, if it needs its own rate, a field of [`PowerIntervals`]. Also
//! `sampling.recheck_interval` ([`recheck_interval`]), which every sysfs source uses.

use super::SensorKinds;
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;
use wattflip_infra::duration::{Bounded, HOUR};
use wattflip_infra::tomlcfg::Loader;

/// One optional interval per power source name (the `source` tag). A struct rather than a map, so
/// a misspelt source is an unknown key reported at `sampling.power_intervals.<name>`.
#[derive(Debug, Default, Deserialize)]
pub struct RawPowerIntervals {
    pub rapl: Option<String>,
    pub hwmon: Option<String>,
    pub ipmi: Option<String>,
    pub nvme_estimate: Option<String>,
}

/// `[sampling.power_intervals]`: how often each kind of power source is read when it should not
/// follow `sampling.power_interval` (1 Hz .. 1 kHz, the range).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PowerIntervals {
    pub rapl: Option<Duration>,
    pub hwmon: Option<Duration>,
    pub ipmi: Option<Duration>,
    pub nvme_estimate: Option<Duration>,
}

impl PowerIntervals {
    /// The override for a source by its `source` name, if any.
    pub fn get(&self, source: &str) -> Option<Duration> {
        match source {
            "rapl" => self.rapl,
            "hwmon" => self.hwmon,
            "ipmi" => self.ipmi,
            "nvme_estimate" => self.nvme_estimate,
            _ => None,
        }
    }
}

/// Checks one `[sampling.power_intervals]` entry: 1 ms ..= 1 s, and IPMI no faster than 1 s.
pub fn power_interval_override(name: &str, raw: Option<String>, l: &mut Loader) -> Option<Duration> {
    let key = format!("sampling.power_intervals.{name}");
    let range = if name == "ipmi" {
        Bounded::new(Duration::from_secs(1), Duration::from_secs(1))
            .because("a BMC updates its DCMI power reading about once per second, so IPMI is read at most at 1 Hz")
    } else {
        // 1 kHz is the RAPL update rate (faster reads return the same value); 1 Hz is the slowest
        // rate the window aggregates are meant for.
        Bounded::new(Duration::from_millis(1), Duration::from_secs(1)).because("1 kHz .. 1 Hz")
    };
    range.read_set(&key, &raw?, l)
}

#[derive(Debug, Default, Deserialize)]
pub struct RawSources {
    pub sysfs_root: Option<PathBuf>,
    pub rapl: Option<bool>,
    pub hwmon: Option<bool>,
    pub ipmi: Option<bool>,
    pub ipmitool: Option<String>,
    pub command_timeout: Option<String>,
    /// Zone (or `source:zone`) → how often its value changes, e.g. `"pmbus-i2c-3-58/pin" = "100ms"`.
    pub update_periods: Option<std::collections::BTreeMap<String, String>>,
}

/// `[sampling.power_intervals]`: each entry checked (1 ms ..= 1 s, IPMI no faster than 1 s).
pub fn power_intervals(raw: RawPowerIntervals, l: &mut Loader) -> PowerIntervals {
    PowerIntervals {
        rapl: power_interval_override("rapl", raw.rapl, l),
        hwmon: power_interval_override("hwmon", raw.hwmon, l),
        ipmi: power_interval_override("ipmi", raw.ipmi, l),
        nvme_estimate: power_interval_override("nvme_estimate", raw.nvme_estimate, l),
    }
}

/// `[sources]`: the kinds of sources to discover (defaults for what is not set) and the sysfs root.
pub fn sensor_kinds(sources: RawSources, l: &mut Loader) -> (SensorKinds, PathBuf) {
    let defaults = SensorKinds::default();
    let kinds = SensorKinds {
        rapl: sources.rapl.unwrap_or(defaults.rapl),
        hwmon: sources.hwmon.unwrap_or(defaults.hwmon),
        ipmi: sources.ipmi.unwrap_or(defaults.ipmi),
        ipmitool: sources.ipmitool.unwrap_or(defaults.ipmitool),
        command_timeout: Bounded::new(Duration::from_millis(100), HOUR).read(
            "sources.command_timeout",
            sources.command_timeout.as_deref(),
            defaults.command_timeout,
            l,
        ),
        recheck: defaults.recheck,
        update_periods: update_periods(sources.update_periods.unwrap_or_default(), l),
    };
    (kinds, sources.sysfs_root.unwrap_or_else(|| PathBuf::from("/sys")))
}

/// A declared update period: from RAPL's ~1 ms down to a BMC's slowest averaging window.
const UPDATE_PERIOD: Bounded = Bounded::new(Duration::from_micros(100), Duration::from_secs(60));

/// `[sources.update_periods]`: each a duration in 100µs..=60s (issue 37: a source's update period
/// where sysfs does not give one).
fn update_periods(raw: std::collections::BTreeMap<String, String>, l: &mut Loader) -> std::collections::BTreeMap<String, Duration> {
    let mut out = std::collections::BTreeMap::new();
    for (zone, v) in raw {
        let key = format!("sources.update_periods.{zone}");
        let Some(d) = UPDATE_PERIOD.read_set(&key, &v, l) else { continue };
        out.insert(zone, d);
    }
    out
}

/// `sampling.recheck_interval`: how often a kept-open sysfs attribute checks that its path still
/// names the file it holds (a file replaced by rename or removed is seen within this time). Default
/// [`super::RECHECK`], shortened to the report interval `interval` when that is shorter, so a
/// replaced file is always noticed within one report; set, it must lie in 1ms..=`interval`.
pub fn recheck_interval(raw: Option<String>, interval: Duration, l: &mut Loader) -> Duration {
    let default = super::RECHECK.min(interval);
    let key = "sampling.recheck_interval";
    let range = Bounded::new(Duration::from_millis(1), interval).because(
        "every check is a stat() of each attribute, 1ms is already one per 1 kHz reading; a replaced file must be noticed within one report interval, sampling.interval",
    );
    range.read(key, raw.as_deref(), default, l)
}
