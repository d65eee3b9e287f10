//! `nvme smart-log DEV -o json`: SMART / Health log (LID 02h, hardware.md §5.4, §6.3).
//!
//! Version quirks handled here:
//! - 128-bit counters are numbers (1.x), strings (2.0–2.3, locale-grouped in 2.3 unless
//!   `LC_ALL=C`) or bare numbers possibly > 2^64 (≥ 2.4): read digit by digit into `u128`;
//! - `critical_warning` is an int, or an object `{"value", …}` with `-H` (2.3), always in
//!   2.11–2.12, with `--verbose` ≥ 2.14;
//! - the composite temperature key is `Temperature` in 2.7 only;
//! - `temperature_sensor_N` is omitted when the sensor reads 0 (absent).
//!
//! Temperatures are raw Kelvin in the JSON and become [`Celsius`] here.

use crate::jsonutil::{raw_u128, raw_u64, raw_value, u64_of, RawObject};
use crate::units::Celsius;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// SMART critical warning bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CriticalWarning(pub u8);

impl CriticalWarning {
    /// Bit 0: available spare below threshold.
    pub fn spare_below_threshold(self) -> bool {
        self.0 & 0x01 != 0
    }
    /// Bit 1: temperature above an over-threshold or below an under-threshold.
    pub fn temperature(self) -> bool {
        self.0 & 0x02 != 0
    }
    /// Bit 2: reliability degraded.
    pub fn reliability_degraded(self) -> bool {
        self.0 & 0x04 != 0
    }
    /// Bit 3: media read-only.
    pub fn read_only(self) -> bool {
        self.0 & 0x08 != 0
    }
    /// Bit 4: volatile memory backup failed.
    pub fn volatile_backup_failed(self) -> bool {
        self.0 & 0x10 != 0
    }
    /// Bit 5: persistent memory region read-only.
    pub fn pmr_read_only(self) -> bool {
        self.0 & 0x20 != 0
    }
    /// Any bit set.
    pub fn any(self) -> bool {
        self.0 != 0
    }
}

/// One thermal management temperature (TMT1 light / TMT2 heavy throttling) counter pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ThermalMgmt {
    /// Transitions into this throttle level (saturating).
    pub transitions: u32,
    /// Total time spent in it, seconds (saturating).
    pub total_time_s: u32,
}

/// The SMART / Health log, normalised.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SmartLog {
    /// Critical warning bits.
    pub critical_warning: CriticalWarning,
    /// Composite temperature, raw Kelvin (0 = not reported).
    pub composite_kelvin: u16,
    /// Composite temperature in °C (`None` when the drive reports 0 K).
    pub composite: Option<Celsius>,
    /// Temperature sensors 1–8 in °C; `None` when absent (nvme-cli omits zero sensors).
    pub sensors: [Option<Celsius>; 8],
    /// Available spare, %.
    pub available_spare_pct: u8,
    /// Available spare threshold, %.
    pub available_spare_threshold_pct: u8,
    /// Percentage used (may exceed 100).
    pub percentage_used: u8,
    /// Endurance group critical warning summary.
    pub endurance_group_warning: u8,
    /// Data units read, in thousands of 512-byte units.
    pub data_units_read: u128,
    /// Data units written, in thousands of 512-byte units.
    pub data_units_written: u128,
    /// Host read commands.
    pub host_read_commands: u128,
    /// Host write commands.
    pub host_write_commands: u128,
    /// Controller busy time, minutes.
    pub controller_busy_time_min: u128,
    /// Power cycles.
    pub power_cycles: u128,
    /// Power-on hours.
    pub power_on_hours: u128,
    /// Unsafe shutdowns.
    pub unsafe_shutdowns: u128,
    /// Media and data integrity errors.
    pub media_errors: u128,
    /// Error information log entries.
    pub error_log_entries: u128,
    /// Minutes with WCTEMP ≤ T < CCTEMP.
    pub warning_temp_time_min: u32,
    /// Minutes with T ≥ CCTEMP.
    pub critical_temp_time_min: u32,
    /// TMT1 (light) and TMT2 (heavy) throttling counters.
    pub thermal_mgmt: [ThermalMgmt; 2],
}

impl SmartLog {
    /// Bytes read by the host: data units × 512 000.
    pub fn bytes_read(&self) -> u128 {
        self.data_units_read.saturating_mul(512_000)
    }
    /// Bytes written by the host: data units × 512 000.
    pub fn bytes_written(&self) -> u128 {
        self.data_units_written.saturating_mul(512_000)
    }
}

/// Parses the smart-log JSON of any nvme-cli version.
pub fn parse_smart_log(stdout: &str) -> Result<SmartLog, String> {
    let obj: RawObject =
        serde_json::from_str(stdout).map_err(|e| format!("not a JSON object: {e}"))?;
    let critical_warning = match raw_value(&obj, "critical_warning") {
        Some(Value::Object(o)) => o.get("value").and_then(u64_of),
        Some(v) => u64_of(&v),
        None => None,
    }
    .ok_or("no `critical_warning`: not a smart-log")?;
    let critical_warning =
        CriticalWarning(u8::try_from(critical_warning).map_err(|_| "critical_warning > 255")?);

    let composite_kelvin = raw_u64(&obj, "temperature")
        .or_else(|| raw_u64(&obj, "Temperature"))
        .and_then(|k| u16::try_from(k).ok())
        .unwrap_or(0);
    let mut sensors = [None; 8];
    for (i, slot) in sensors.iter_mut().enumerate() {
        let k = raw_u64(&obj, &format!("temperature_sensor_{}", i + 1))
            .and_then(|k| u16::try_from(k).ok());
        *slot = k.filter(|k| *k != 0).map(Celsius::from_kelvin);
    }
    let u8_of = |keys: &[&str]| {
        keys.iter()
            .find_map(|k| raw_u64(&obj, k))
            .and_then(|v| u8::try_from(v).ok())
            .unwrap_or(0)
    };
    let u32_of = |k: &str| {
        raw_u64(&obj, k)
            .map(|v| u32::try_from(v).unwrap_or(u32::MAX))
            .unwrap_or(0)
    };
    let big = |k: &str| raw_u128(&obj, k).unwrap_or(0);
    Ok(SmartLog {
        critical_warning,
        composite_kelvin,
        composite: (composite_kelvin != 0).then(|| Celsius::from_kelvin(composite_kelvin)),
        sensors,
        available_spare_pct: u8_of(&["avail_spare", "available_spare"]),
        available_spare_threshold_pct: u8_of(&["spare_thresh", "available_spare_threshold"]),
        percentage_used: u8_of(&["percent_used", "percentage_used"]),
        endurance_group_warning: u8_of(&["endurance_grp_critical_warning_summary"]),
        data_units_read: big("data_units_read"),
        data_units_written: big("data_units_written"),
        host_read_commands: big("host_read_commands"),
        host_write_commands: big("host_write_commands"),
        controller_busy_time_min: big("controller_busy_time"),
        power_cycles: big("power_cycles"),
        power_on_hours: big("power_on_hours"),
        unsafe_shutdowns: big("unsafe_shutdowns"),
        media_errors: big("media_errors"),
        error_log_entries: big("num_err_log_entries"),
        warning_temp_time_min: u32_of("warning_temp_time"),
        critical_temp_time_min: u32_of("critical_comp_time"),
        thermal_mgmt: [
            ThermalMgmt {
                transitions: u32_of("thm_temp1_trans_count"),
                total_time_s: u32_of("thm_temp1_total_time"),
            },
            ThermalMgmt {
                transitions: u32_of("thm_temp2_trans_count"),
                total_time_s: u32_of("thm_temp2_total_time"),
            },
        ],
    })
}
