//! `nvme smart-log DEV -o json`: SMART / Health log (LID 02h, docs/sources-and-drives.md §5.4, §6.3).
//!
//! Version quirks handled here:
//! - 128-bit counters are numbers (1.x), strings (2.0–2.3, locale-grouped in 2.3 unless
//!   `LC_ALL=C`) or bare numbers possibly > 2^64 (≥ 2.4): read digit by digit into `u128`;
//! - `critical_warning` is an int, or an object `{"value", …}` with `-H` (2.3), always in
//!   2.11–2.12, with `--verbose` ≥ 2.14;
//! - the composite temperature key is `Temperature` in 2.7 only;
//! - `temperature_sensor_N` is omitted when the sensor reads 0 (absent).
//!
//! - counters printed as `"%Lf"` decimal strings (2.1.x) or floats: read as whole numbers, and a
//!   value that is not one is left out and named in [`SmartLog::problems`] (never 0).
//!
//! Temperatures are raw Kelvin in the JSON and become [`Celsius`] here.

use crate::jsonutil::{num_of, raw_num, raw_value, FieldProblem, Problems, RawObject};
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
    /// Transitions into this throttle level; `None` when not printed or unreadable.
    pub transitions: Option<u32>,
    /// Total time spent in it, seconds; `None` when not printed or unreadable.
    pub total_time_s: Option<u32>,
}

/// The SMART / Health log, normalised. A counter the output lacks or that cannot be read is
/// `None`; an unreadable one is also named in [`SmartLog::problems`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SmartLog {
    /// Critical warning bits.
    pub critical_warning: CriticalWarning,
    /// Composite temperature, raw Kelvin (`None` when not reported: absent, 0 K or unreadable).
    pub composite_kelvin: Option<u16>,
    /// Composite temperature in °C (`None` when the drive reports 0 K).
    pub composite: Option<Celsius>,
    /// Temperature sensors 1–8 in °C; `None` when absent (nvme-cli omits zero sensors).
    pub sensors: [Option<Celsius>; 8],
    /// Available spare, %.
    pub available_spare_pct: Option<u8>,
    /// Available spare threshold, %.
    pub available_spare_threshold_pct: Option<u8>,
    /// Percentage used (may exceed 100).
    pub percentage_used: Option<u8>,
    /// Endurance group critical warning summary.
    pub endurance_group_warning: Option<u8>,
    /// Data units read, in thousands of 512-byte units.
    pub data_units_read: Option<u128>,
    /// Data units written, in thousands of 512-byte units.
    pub data_units_written: Option<u128>,
    /// Host read commands.
    pub host_read_commands: Option<u128>,
    /// Host write commands.
    pub host_write_commands: Option<u128>,
    /// Controller busy time, minutes.
    pub controller_busy_time_min: Option<u128>,
    /// Power cycles.
    pub power_cycles: Option<u128>,
    /// Power-on hours.
    pub power_on_hours: Option<u128>,
    /// Unsafe shutdowns.
    pub unsafe_shutdowns: Option<u128>,
    /// Media and data integrity errors.
    pub media_errors: Option<u128>,
    /// Error information log entries.
    pub error_log_entries: Option<u128>,
    /// Minutes with WCTEMP ≤ T < CCTEMP.
    pub warning_temp_time_min: Option<u32>,
    /// Minutes with T ≥ CCTEMP.
    pub critical_temp_time_min: Option<u32>,
    /// TMT1 (light) and TMT2 (heavy) throttling counters.
    pub thermal_mgmt: [ThermalMgmt; 2],
    /// Fields that were printed but could not be read (left out above).
    pub problems: Vec<FieldProblem>,
}

impl SmartLog {
    /// Bytes read by the host: data units × 512 000.
    pub fn bytes_read(&self) -> Option<u128> {
        self.data_units_read.map(|u| u.saturating_mul(512_000))
    }
    /// Bytes written by the host: data units × 512 000.
    pub fn bytes_written(&self) -> Option<u128> {
        self.data_units_written.map(|u| u.saturating_mul(512_000))
    }
}

/// Parses the smart-log JSON of any nvme-cli version. Fails only when the output is not a
/// smart-log at all (no readable `critical_warning`); other fields degrade one by one.
pub fn parse_smart_log(stdout: &str) -> Result<SmartLog, String> {
    let obj: RawObject = serde_json::from_str(stdout).map_err(|e| format!("not a JSON object: {e}"))?;
    let critical_warning = match raw_value(&obj, "critical_warning") {
        Some(Value::Object(o)) => match o.get("value") {
            Some(v) => num_of::<u8>("critical_warning.value", v),
            None => Ok(None),
        },
        Some(v) => num_of::<u8>("critical_warning", &v),
        None => Ok(None),
    }
    .map_err(|p| p.to_string())?
    .ok_or("no `critical_warning`: not a smart-log")?;
    let critical_warning = CriticalWarning(critical_warning);

    let mut pr = Problems::default();
    // `Temperature` is the 2.7 spelling; 0 K means "not reported".
    let key = if obj.contains_key("temperature") { "temperature" } else { "Temperature" };
    let composite_kelvin = pr.take(raw_num::<u16>(&obj, key)).filter(|k| *k != 0);
    let mut sensors = [None; 8];
    for (i, slot) in sensors.iter_mut().enumerate() {
        let k = pr.take(raw_num::<u16>(&obj, &format!("temperature_sensor_{}", i + 1)));
        *slot = k.filter(|k| *k != 0).map(Celsius::from_kelvin);
    }
    let mut first_u8 = |keys: &[&str]| {
        let key = keys.iter().find(|k| obj.contains_key(**k))?;
        pr.take(raw_num::<u8>(&obj, key))
    };
    let available_spare_pct = first_u8(&["avail_spare", "available_spare"]);
    let available_spare_threshold_pct = first_u8(&["spare_thresh", "available_spare_threshold"]);
    let percentage_used = first_u8(&["percent_used", "percentage_used"]);
    let endurance_group_warning = first_u8(&["endurance_grp_critical_warning_summary"]);
    let mut big = |k: &str| pr.take(raw_num::<u128>(&obj, k));
    let data_units_read = big("data_units_read");
    let data_units_written = big("data_units_written");
    let host_read_commands = big("host_read_commands");
    let host_write_commands = big("host_write_commands");
    let controller_busy_time_min = big("controller_busy_time");
    let power_cycles = big("power_cycles");
    let power_on_hours = big("power_on_hours");
    let unsafe_shutdowns = big("unsafe_shutdowns");
    let media_errors = big("media_errors");
    let error_log_entries = big("num_err_log_entries");
    let mut small = |k: &str| pr.take(raw_num::<u32>(&obj, k));
    let warning_temp_time_min = small("warning_temp_time");
    let critical_temp_time_min = small("critical_comp_time");
    let thermal_mgmt = [
        ThermalMgmt { transitions: small("thm_temp1_trans_count"), total_time_s: small("thm_temp1_total_time") },
        ThermalMgmt { transitions: small("thm_temp2_trans_count"), total_time_s: small("thm_temp2_total_time") },
    ];
    Ok(SmartLog {
        critical_warning,
        composite_kelvin,
        composite: composite_kelvin.map(Celsius::from_kelvin),
        sensors,
        available_spare_pct,
        available_spare_threshold_pct,
        percentage_used,
        endurance_group_warning,
        data_units_read,
        data_units_written,
        host_read_commands,
        host_write_commands,
        controller_busy_time_min,
        power_cycles,
        power_on_hours,
        unsafe_shutdowns,
        media_errors,
        error_log_entries,
        warning_temp_time_min,
        critical_temp_time_min,
        thermal_mgmt,
        problems: pr.0,
    })
}
