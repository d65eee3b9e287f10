//! smartctl's NVMe capabilities (`-a`/`-c`/`-x` on an NVMe device): the power-state table
//! `nvme_power_states` and the composite thresholds `nvme_composite_temperature_threshold`, as
//! smartmontools' `nvmeprint.cpp` (`print_drive_capabilities`) writes them. On a host without
//! nvme-cli these are the drive's power states and WCTEMP/CCTEMP.
//!
//! Layout per state: `non_operational_state`, `relative_{read,write}_{latency,throughput}`,
//! `entry_latency_us`, `exit_latency_us`, and `max_power {value, scale, units_per_watt}` where scale
//! 1 is 0.0001 W (MXPS set) and 2 is 0.01 W; a state whose max power is not reported has no
//! `max_power`. Thresholds are whole °C (K − 273). Idle and active power are not read: the
//! inventory carries max power only. To read another key, add it here with a fixture.

use crate::jsonutil::{field_i64, field_num, Problems};
use crate::nvme_cli::PowerState;
use crate::units::{Celsius, Watts};
use serde_json::Value;

/// What smartctl printed of an NVMe drive's capabilities.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NvmeCapabilities {
    /// `nvme_power_states`, in order (empty when not printed).
    pub power_states: Vec<PowerState>,
    /// `nvme_composite_temperature_threshold.warning` (WCTEMP).
    pub warning_temperature: Option<Celsius>,
    /// `nvme_composite_temperature_threshold.critical` (CCTEMP).
    pub critical_temperature: Option<Celsius>,
}

pub(crate) fn capabilities(root: &Value, pr: &mut Problems) -> NvmeCapabilities {
    let threshold = |pr: &mut Problems, key: &str| match root.get("nvme_composite_temperature_threshold") {
        Some(t) => pr.take(field_i64(t, "nvme_composite_temperature_threshold", key)).map(Celsius::from_whole_celsius),
        None => None,
    };
    let warning_temperature = threshold(pr, "warning");
    let critical_temperature = threshold(pr, "critical");
    let states = root.get("nvme_power_states").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let mut power_states = Vec::new();
    for (i, s) in states.iter().enumerate() {
        let path = format!("nvme_power_states[{i}]");
        let Ok(index) = u8::try_from(i) else { break };
        let rank = |pr: &mut Problems, key: &str| pr.take(field_num::<u8>(s, &path, key)).unwrap_or(0);
        let (max_power, max_power_fine) = match s.get("max_power") {
            Some(m) => {
                let mp = format!("{path}.max_power");
                let value = pr.take(field_num::<u32>(m, &mp, "value"));
                let per_watt = pr.take(field_num::<u32>(m, &mp, "units_per_watt")).filter(|u| *u != 0);
                let fine = per_watt == Some(10_000);
                (value.zip(per_watt).filter(|(v, _)| *v != 0).map(|(v, u)| Watts(f64::from(v) / f64::from(u))), fine)
            }
            None => (None, false),
        };
        power_states.push(PowerState {
            index,
            max_power,
            max_power_fine,
            operational: !s.get("non_operational_state").and_then(Value::as_bool).unwrap_or(false),
            entry_latency_us: pr.take(field_num(s, &path, "entry_latency_us")).unwrap_or(0),
            exit_latency_us: pr.take(field_num(s, &path, "exit_latency_us")).unwrap_or(0),
            relative_read_throughput: rank(pr, "relative_read_throughput"),
            relative_read_latency: rank(pr, "relative_read_latency"),
            relative_write_throughput: rank(pr, "relative_write_throughput"),
            relative_write_latency: rank(pr, "relative_write_latency"),
            idle_power: None,
            active_power: None,
            active_power_workload: 0,
        });
    }
    NvmeCapabilities { power_states, warning_temperature, critical_temperature }
}
