//! `nvme list -o json` in both layouts (docs/sources-and-drives.md §6.3):
//! - simple (2.0–2.10, ≥ 2.13): `Devices[]` of namespaces with `NameSpace` (int), `DevicePath`, …;
//! - verbose (`-v`, forced in 2.11/2.12): `Devices[] → Subsystems[] → Controllers[] →
//!   Namespaces[]` with `NameSpace` a **string** (`"nvme0n1"`); with native multipath the
//!   namespaces sit under the subsystem instead.
//!
//! To support another layout, add a branch to [`parse_list`] and a fixture.

use crate::jsonutil::{field_num, field_str, FieldProblem, Problems};
use serde_json::Value;

/// One namespace as `nvme list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedNamespace {
    /// Block device, e.g. `/dev/nvme0n1`.
    pub device_path: String,
    /// Controller character device, e.g. `/dev/nvme0`. In the simple layout this is inferred
    /// from the name, which is wrong under native multipath (the `N` in `nvmeNn1` is the
    /// subsystem instance); the inventory prefers sysfs.
    pub controller: Option<String>,
    /// Namespace ID.
    pub nsid: Option<u32>,
    /// Model number (trimmed).
    pub model: String,
    /// Serial number (trimmed).
    pub serial: String,
    /// Firmware revision (trimmed).
    pub firmware: String,
    /// Transport (`pcie`, `tcp`, …), verbose layout only.
    pub transport: Option<String>,
    /// `PhysicalSize` = MaximumLBA × SectorSize, bytes.
    pub capacity_bytes: Option<u64>,
    /// `UsedBytes`.
    pub used_bytes: Option<u64>,
    /// `SectorSize`, the formatted LBA size in bytes.
    pub sector_size: Option<u32>,
    /// Fields of this entry that were printed but could not be read (left out above).
    pub problems: Vec<FieldProblem>,
}

/// Parses either layout. Unknown extra keys are ignored.
pub fn parse_list(stdout: &str) -> Result<Vec<ListedNamespace>, String> {
    let root: Value = serde_json::from_str(stdout).map_err(|e| format!("not JSON: {e}"))?;
    let devices = root.get("Devices").and_then(Value::as_array).ok_or_else(|| "no `Devices` array".to_string())?;
    let mut out = Vec::new();
    for dev in devices {
        if let Some(subsystems) = dev.get("Subsystems").and_then(Value::as_array) {
            for subsys in subsystems {
                verbose_subsystem(subsys, &mut out);
            }
        } else if dev.get("DevicePath").is_some() {
            out.push(simple_entry(dev)?);
        } else {
            return Err(format!("device entry is neither simple nor verbose: {dev}"));
        }
    }
    Ok(out)
}

fn simple_entry(dev: &Value) -> Result<ListedNamespace, String> {
    let device_path = field_str(dev, "DevicePath").ok_or("entry without DevicePath")?;
    let mut pr = Problems::default();
    let nsid_key = if dev.get("NameSpace").is_some() { "NameSpace" } else { "NSID" };
    let nsid = pr.take(field_num(dev, &device_path, nsid_key));
    let used_bytes = pr.take(field_num(dev, &device_path, "UsedBytes"));
    let sector_size = pr.take(field_num(dev, &device_path, "SectorSize"));
    let capacity_bytes = physical_size(dev, &device_path, sector_size, &mut pr);
    Ok(ListedNamespace {
        controller: controller_of(&device_path),
        nsid,
        model: field_str(dev, "ModelNumber").unwrap_or_default(),
        serial: field_str(dev, "SerialNumber").unwrap_or_default(),
        firmware: field_str(dev, "Firmware").unwrap_or_default(),
        transport: None,
        capacity_bytes,
        used_bytes,
        sector_size,
        problems: pr.0,
        device_path,
    })
}

/// `PhysicalSize`, which nvme-cli computes as MaximumLBA × SectorSize. nvme-cli 2.x has printed
/// it through a 32-bit signed integer (`-2147483648` for a large namespace, a real capture in
/// agent/drives/tests/fixtures/nvme/README.md): an unreadable value is named in the entry's
/// problems and the product of the two fields it is made of is used instead, said there too.
fn physical_size(obj: &Value, device_path: &str, sector_size: Option<u32>, pr: &mut Problems) -> Option<u64> {
    let printed = field_num::<u64>(obj, device_path, "PhysicalSize");
    let Err(bad) = printed else { return printed.ok().flatten() };
    let max_lba = pr.take(field_num::<u64>(obj, device_path, "MaximumLBA"));
    let fallback = max_lba.zip(sector_size).and_then(|(n, s)| n.checked_mul(u64::from(s)));
    let how = match fallback {
        Some(b) => format!("{}; capacity taken as MaximumLBA × SectorSize = {b} bytes instead", bad.reason),
        None => format!("{}; no MaximumLBA × SectorSize to fall back on: capacity unknown", bad.reason),
    };
    pr.0.push(FieldProblem { reason: how, ..bad });
    fallback
}

fn verbose_subsystem(subsys: &Value, out: &mut Vec<ListedNamespace>) {
    let controllers = subsys.get("Controllers").and_then(Value::as_array).cloned().unwrap_or_default();
    for ctrl in &controllers {
        let namespaces = ctrl.get("Namespaces").and_then(Value::as_array).cloned().unwrap_or_default();
        for ns in &namespaces {
            if let Some(entry) = verbose_namespace(ns, Some(ctrl)) {
                out.push(entry);
            }
        }
    }
    // Native multipath: the namespace belongs to the subsystem; attribute it to the first live
    // controller (any path works for controller-scope admin commands).
    let first = controllers.first();
    for ns in subsys.get("Namespaces").and_then(Value::as_array).cloned().unwrap_or_default() {
        if let Some(entry) = verbose_namespace(&ns, first) {
            if !out.iter().any(|e| e.device_path == entry.device_path) {
                out.push(entry);
            }
        }
    }
}

fn verbose_namespace(ns: &Value, ctrl: Option<&Value>) -> Option<ListedNamespace> {
    // `NameSpace` is the block device name here ("nvme0n1"); older or newer builds may give the
    // NSID as an int in that key, so accept both.
    let name = match ns.get("NameSpace") {
        Some(Value::String(s)) => s.trim().to_string(),
        _ => field_str(ns, "Name").or_else(|| field_str(ns, "DevicePath"))?,
    };
    let device_path = if name.starts_with("/dev/") { name } else { format!("/dev/{name}") };
    let mut pr = Problems::default();
    let nsid = match (ns.get("NSID"), ns.get("NameSpace")) {
        (Some(_), _) => pr.take(field_num::<u32>(ns, &device_path, "NSID")),
        (None, Some(Value::Number(_))) => pr.take(field_num::<u32>(ns, &device_path, "NameSpace")),
        _ => None,
    };
    let used_bytes = pr.take(field_num(ns, &device_path, "UsedBytes"));
    let sector_size = pr.take(field_num(ns, &device_path, "SectorSize"));
    let capacity_bytes = physical_size(ns, &device_path, sector_size, &mut pr);
    let ctrl_name = ctrl.and_then(|c| field_str(c, "Controller"));
    let controller = ctrl_name.map(|c| if c.starts_with("/dev/") { c } else { format!("/dev/{c}") }).or_else(|| controller_of(&device_path));
    let from_ctrl = |k: &str| ctrl.and_then(|c| field_str(c, k));
    Some(ListedNamespace {
        controller,
        nsid,
        model: from_ctrl("ModelNumber").or_else(|| field_str(ns, "ModelNumber")).unwrap_or_default(),
        serial: from_ctrl("SerialNumber").or_else(|| field_str(ns, "SerialNumber")).unwrap_or_default(),
        firmware: from_ctrl("Firmware").or_else(|| field_str(ns, "Firmware")).unwrap_or_default(),
        transport: from_ctrl("Transport"),
        capacity_bytes,
        used_bytes,
        sector_size,
        problems: pr.0,
        device_path,
    })
}

/// The controller node of an NVMe device name: `/dev/nvme0n1` → `/dev/nvme0`; a hidden path node
/// `nvmeXcYnZ` (subsystem X, controller Y) → `/dev/nvmeY`; non-NVMe → `None`.
pub fn controller_of(device_path: &str) -> Option<String> {
    let name = device_path.rsplit('/').next()?;
    let rest = name.strip_prefix("nvme")?;
    let first: String = rest.chars().take_while(char::is_ascii_digit).collect();
    if first.is_empty() {
        return None;
    }
    let after = &rest[first.len()..];
    if let Some(c) = after.strip_prefix('c') {
        let ctrl: String = c.chars().take_while(char::is_ascii_digit).collect();
        if !ctrl.is_empty() {
            return Some(format!("/dev/nvme{ctrl}"));
        }
    }
    if after.starts_with('n') || after.is_empty() {
        return Some(format!("/dev/nvme{first}"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controller_names() {
        assert_eq!(controller_of("/dev/nvme0n1").as_deref(), Some("/dev/nvme0"));
        assert_eq!(controller_of("/dev/nvme12n3").as_deref(), Some("/dev/nvme12"));
        assert_eq!(controller_of("/dev/nvme0c3n1").as_deref(), Some("/dev/nvme3"));
        assert_eq!(controller_of("/dev/nvme0").as_deref(), Some("/dev/nvme0"));
        assert_eq!(controller_of("/dev/sda"), None);
    }
}
