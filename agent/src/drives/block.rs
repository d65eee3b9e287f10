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
        let sectors: u64 = attr(&d.join("size")).parse().unwrap_or(0);
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
            capacity_bytes: sectors * 512,
            logical_block_size: attr(&d.join("queue/logical_block_size")).parse().unwrap_or(512),
            rotational: attr(&d.join("queue/rotational")) == "1",
            power_states: Vec::new(),
            controller,
            name,
        });
    }
    out
}
