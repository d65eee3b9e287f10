//! Block-device inventory from `<sysfs>/class/block`: whole disks only (partitions, loop, ram,
//! device-mapper and optical devices are skipped), with model, serial, firmware, capacity, logical
//! block size and transport. For NVMe the identity lives on the controller (`device/` of the
//! namespace), which is where the kernel exposes `model`, `serial` and `firmware_rev`.

use std::path::Path;
use wattflip_proto::v1;

const SKIP_PREFIXES: &[&str] = &["loop", "ram", "dm-", "md", "zram", "sr", "nbd"];

fn attr(p: &Path) -> String {
    std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default()
}

fn transport(name: &str) -> &'static str {
    match name {
        n if n.starts_with("nvme") => "nvme",
        n if n.starts_with("sd") => "scsi",
        n if n.starts_with("vd") => "virtio",
        n if n.starts_with("mmcblk") => "mmc",
        _ => "other",
    }
}

/// Lists the whole-disk block devices under `sysfs_root`, sorted by name.
pub fn scan(sysfs_root: &Path) -> Vec<v1::StorageDevice> {
    let dir = sysfs_root.join("class/block");
    let Ok(rd) = std::fs::read_dir(&dir) else { return Vec::new() };
    let mut names: Vec<String> = rd.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let d = dir.join(&name);
        if SKIP_PREFIXES.iter().any(|p| name.starts_with(p)) || d.join("partition").exists() {
            continue;
        }
        let dev = d.join("device");
        // Unreadable attributes are left out (absent on the wire), never guessed.
        let sectors: Option<u64> = attr(&d.join("size")).parse().ok();
        let firmware = Some(attr(&dev.join("firmware_rev"))).filter(|s| !s.is_empty()).unwrap_or_else(|| attr(&dev.join("rev")));
        let controller = std::fs::read_link(&dev)
            .ok()
            .and_then(|t| t.file_name().map(|f| f.to_string_lossy().into_owned()))
            .filter(|c| c.starts_with("nvme"))
            .unwrap_or_default();
        out.push(v1::StorageDevice {
            transport: transport(&name).into(),
            model: attr(&dev.join("model")),
            serial: attr(&dev.join("serial")),
            firmware,
            // The kernel's `size` is always in 512-byte sectors, whatever the logical block size.
            capacity_bytes: sectors.map(|s| s.saturating_mul(512)),
            logical_block_size: attr(&d.join("queue/logical_block_size")).parse().ok(),
            rotational: match attr(&d.join("queue/rotational")).as_str() {
                "1" => Some(true),
                "0" => Some(false),
                _ => None,
            },
            power_states: Vec::new(),
            controller,
            name,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sysfs tree laid out as the kernel does: `class/block/<name>` with `size` in 512-byte
    /// sectors and `queue/*`. An attribute the kernel does not expose is left out, never guessed.
    #[test]
    fn unreadable_attributes_are_absent_not_zero() {
        let root = tempfile::tempdir().unwrap();
        let write = |rel: &str, v: &str| {
            let p = root.path().join("class/block").join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, v).unwrap();
        };
        write("sda/size", "7814037168\n");
        write("sda/queue/logical_block_size", "4096\n");
        write("sda/queue/rotational", "1\n");
        write("sda/device/model", "ST4000NM0035\n");
        // sdb: no size, no queue attributes, an unreadable rotational value.
        write("sdb/device/model", "X\n");
        write("sdb/queue/rotational", "?\n");
        let d = scan(root.path());
        let names: Vec<&str> = d.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, vec!["sda", "sdb"]);
        assert_eq!((d[0].capacity_bytes, d[0].logical_block_size, d[0].rotational), (Some(4_000_787_030_016), Some(4096), Some(true)));
        assert_eq!((d[1].capacity_bytes, d[1].logical_block_size, d[1].rotational), (None, None, None));
    }
}
