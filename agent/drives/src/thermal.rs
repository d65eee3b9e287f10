//! One thermal snapshot from either nvme-cli or smartctl, and throttle detection between two
//! snapshots (docs/sources-and-drives.md §8.2).
//!
//! Why: energy of runs with different throttle state must not be compared (Zhang et al.: the
//! MR-SSD drops power ~15 % and performance 12–18 % when it throttles itself). The agent takes a
//! snapshot before and after each run and flags the run when [`ThermalSnapshot::throttled_since`]
//! says so. To add a source (e.g. hwmon), add a `from_*` constructor.

use crate::nvme_cli::{SmartLog, ThermalMgmt};
use crate::smartctl::SmartctlReport;
use crate::units::Celsius;
use serde::{Deserialize, Serialize};

/// Which tool produced a snapshot (they round differently: nvme-cli K − 273.15 exactly from
/// Kelvin, smartctl whole degrees K − 273).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ThermalSource {
    /// `nvme smart-log -o json`.
    NvmeCli,
    /// `smartctl --json`.
    Smartctl,
}

/// Temperatures and throttle counters at one moment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThermalSnapshot {
    /// Producer.
    pub source: ThermalSource,
    /// Composite (or the drive's only) temperature.
    pub composite: Option<Celsius>,
    /// Present sensors as (1-based index, value).
    pub sensors: Vec<(u8, Celsius)>,
    /// SMART critical warning bit 1 (temperature threshold crossed).
    pub temperature_warning: bool,
    /// Minutes above WCTEMP, when known.
    pub warning_temp_time_min: Option<u32>,
    /// Minutes above CCTEMP, when known.
    pub critical_temp_time_min: Option<u32>,
    /// TMT1/TMT2 counters; `None` from smartctl ≤ 7.5, which prints them only as text (§7.1).
    pub thermal_mgmt: Option<[ThermalMgmt; 2]>,
}

impl ThermalSnapshot {
    /// From an nvme-cli SMART log.
    pub fn from_smart_log(log: &SmartLog) -> Self {
        ThermalSnapshot {
            source: ThermalSource::NvmeCli,
            composite: log.composite,
            sensors: sensors(log.sensors.iter().copied()),
            temperature_warning: log.critical_warning.temperature(),
            warning_temp_time_min: log.warning_temp_time_min,
            critical_temp_time_min: log.critical_temp_time_min,
            thermal_mgmt: Some(log.thermal_mgmt),
        }
    }

    /// From a smartctl report (NVMe or ATA).
    pub fn from_smartctl(report: &SmartctlReport) -> Self {
        let nvme = report.nvme.as_ref();
        ThermalSnapshot {
            source: ThermalSource::Smartctl,
            composite: report.temperature,
            sensors: nvme.map(|n| sensors(n.sensors.iter().copied())).unwrap_or_default(),
            temperature_warning: nvme.is_some_and(|n| n.critical_warning.temperature()),
            warning_temp_time_min: nvme.and_then(|n| n.warning_temp_time_min),
            critical_temp_time_min: nvme.and_then(|n| n.critical_temp_time_min),
            thermal_mgmt: None,
        }
    }

    /// The highest of composite and sensors.
    pub fn hottest(&self) -> Option<Celsius> {
        self.composite.into_iter().chain(self.sensors.iter().map(|(_, c)| *c)).fold(None, |acc: Option<Celsius>, c| match acc {
            Some(a) if a.0 >= c.0 => Some(a),
            _ => Some(c),
        })
    }

    /// Did the drive throttle (or sit above its thresholds) between `earlier` and `self`?
    /// `Some(true)` if any counter moved or the warning bit is set now; `Some(false)` if all known
    /// counters are unchanged; `None` if the two snapshots share no counter to compare.
    pub fn throttled_since(&self, earlier: &ThermalSnapshot) -> Option<bool> {
        if self.temperature_warning {
            return Some(true);
        }
        let mut known = false;
        let mut moved = false;
        let mut cmp = |a: Option<u32>, b: Option<u32>| {
            if let (Some(a), Some(b)) = (a, b) {
                known = true;
                moved |= a != b;
            }
        };
        cmp(earlier.warning_temp_time_min, self.warning_temp_time_min);
        cmp(earlier.critical_temp_time_min, self.critical_temp_time_min);
        if let (Some(a), Some(b)) = (earlier.thermal_mgmt, self.thermal_mgmt) {
            for i in 0..2 {
                cmp(a[i].transitions, b[i].transitions);
                cmp(a[i].total_time_s, b[i].total_time_s);
            }
        }
        known.then_some(moved)
    }
}

fn sensors(it: impl Iterator<Item = Option<Celsius>>) -> Vec<(u8, Celsius)> {
    it.enumerate().filter_map(|(i, c)| Some((u8::try_from(i + 1).ok()?, c?))).collect()
}
