//! hwmon channels (`<sysfs>/class/hwmon/hwmon*/`): `temp*_input` (m°C) as temperature sensors and
//! `power*_input`/`power*_average` (µW) as instantaneous power sources (ACPI power meter, PMBus,
//! INA2xx). hwmonN numbers are unstable across boots, so chips are named by their `name` plus the
//! device they hang off (hardware.md §2). Add a channel kind with a scan in `discover` and a
//! sensor type implementing the trait from `sensors`.

use super::{read_attr, read_int, Discovered, PowerReading, PowerSensor, SensorError, TemperatureSensor};
use std::path::{Path, PathBuf};
use wattflip_proto::units::{Celsius, Watts};
use wattflip_proto::v1;

/// hwmon attributes are world-readable by ABI; a permission error means a driver deviates.
const HINT: &str = "this hwmon driver restricts reads; run the agent as root or adjust the attribute's mode";

pub struct HwmonTemp {
    device: String,
    sensor: String,
    path: PathBuf,
}

impl TemperatureSensor for HwmonTemp {
    fn describe(&self) -> v1::TemperatureSensor {
        v1::TemperatureSensor {
            source: "hwmon".into(),
            device: self.device.clone(),
            sensor: self.sensor.clone(),
            path: self.path.display().to_string(),
        }
    }

    fn read(&mut self) -> Result<Celsius, SensorError> {
        read_int::<i64>(&self.path, HINT, "an integer (m°C)").map(Celsius::from_millidegrees)
    }
}

pub struct HwmonPower {
    zone: String,
    scope: String,
    path: PathBuf,
}

impl PowerSensor for HwmonPower {
    fn describe(&self) -> v1::PowerSource {
        v1::PowerSource {
            source: "hwmon".into(),
            zone: self.zone.clone(),
            scope: self.scope.clone(),
            method: v1::Method::Measured as i32,
            counter: false,
            path: self.path.display().to_string(),
            enabled: true,
            note: String::new(),
        }
    }

    fn read(&mut self, _now_ns: u64) -> Result<Option<PowerReading>, SensorError> {
        let uw: i64 = read_int(&self.path, HINT, "an integer (µW)")?;
        Ok(Some(PowerReading { watts: Watts::from_microwatts(uw), joules: None, interval_ns: 0 }))
    }
}

/// Stable chip name: `nvme0` for an NVMe controller's hwmon, `coretemp.0`-style device names
/// otherwise, or the bare chip `name` when there is no device link.
fn chip_device(chip_dir: &Path, name: &str) -> String {
    let target = std::fs::read_link(chip_dir.join("device")).ok();
    let base = target
        .as_ref()
        .and_then(|t| t.file_name())
        .map(|b| b.to_string_lossy().into_owned());
    match base {
        Some(b) if b.starts_with(name) => b,
        Some(b) => format!("{name}-{b}"),
        None => name.to_string(),
    }
}

/// Scope of a power channel from its label (PMBus labels `pin`, `pout1`...; hardware.md §2).
fn power_scope(label: &str) -> &'static str {
    match label {
        l if l.starts_with("pin") => "psu_in",
        l if l.starts_with("pout") => "psu_out",
        _ => "rail",
    }
}

/// Channel numbers present for `prefix` (e.g. `temp` → [1, 2] from temp1_input, temp2_input).
fn channels(files: &[String], prefix: &str, suffix: &str) -> Vec<u32> {
    let mut v: Vec<u32> = files
        .iter()
        .filter_map(|f| f.strip_prefix(prefix)?.strip_suffix(suffix)?.parse().ok())
        .collect();
    v.sort_unstable();
    v
}

pub fn discover(sysfs_root: &Path, out: &mut Discovered) {
    let dir = sysfs_root.join("class/hwmon");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        out.unavailable.push(format!("hwmon: {} does not exist: no hwmon chips on this host", dir.display()));
        return;
    };
    let mut chips: Vec<PathBuf> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    chips.sort();
    for chip in chips {
        let Ok(name) = read_attr(&chip.join("name"), HINT) else { continue };
        let device = chip_device(&chip, &name);
        let files: Vec<String> = match std::fs::read_dir(&chip) {
            Ok(rd) => rd.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect(),
            Err(_) => continue,
        };
        for n in channels(&files, "temp", "_input") {
            let label = read_attr(&chip.join(format!("temp{n}_label")), HINT).unwrap_or_else(|_| format!("temp{n}"));
            out.temperature.push(Box::new(HwmonTemp {
                device: device.clone(),
                sensor: label,
                path: chip.join(format!("temp{n}_input")),
            }));
        }
        for file_suffix in ["_input", "_average"] {
            for n in channels(&files, "power", file_suffix) {
                // Prefer power*_input when a chip has both.
                if file_suffix == "_average" && files.contains(&format!("power{n}_input")) {
                    continue;
                }
                let label = read_attr(&chip.join(format!("power{n}_label")), HINT).unwrap_or_else(|_| format!("power{n}"));
                out.power.push(Box::new(HwmonPower {
                    zone: format!("{device}/{label}"),
                    scope: power_scope(&label).into(),
                    path: chip.join(format!("power{n}{file_suffix}")),
                }));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_numbers_and_scopes() {
        let files: Vec<String> = ["temp1_input", "temp10_input", "temp2_label", "temp3_input", "power1_average"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(channels(&files, "temp", "_input"), vec![1, 3, 10]);
        assert_eq!(channels(&files, "power", "_average"), vec![1]);
        assert_eq!(power_scope("pin"), "psu_in");
        assert_eq!(power_scope("pout2"), "psu_out");
        assert_eq!(power_scope("vdd"), "rail");
    }
}
