//! Block-device inventory from `<sysfs>/class/block`: whole disks only (partitions, loop, ram,
//! device-mapper and optical devices are skipped), with model, serial, firmware, capacity, logical
//! block size and transport. For NVMe the identity lives on the controller (`device/` of the
//! namespace), which is where the kernel exposes `model`, `serial` and `firmware_rev`; under native
//! multipath that parent is the subsystem (same attributes), the controller is the subsystem's
//! first, and the hidden per-path disks are left out (tests/fixtures/sysfs/nvme-multipath).

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

/// A hidden per-path disk of NVMe native multipath, `nvme<subsys>c<ctrl>n<nsid>`
/// (`drivers/nvme/host/multipath.c`, `nvme_mpath_set_disk_name`): no `/dev` node, not a drive.
fn is_path_disk(name: &str) -> bool {
    let digits = |s: &str| -> usize { s.bytes().take_while(u8::is_ascii_digit).count() };
    let Some(rest) = name.strip_prefix("nvme") else { return false };
    let n = digits(rest);
    let Some(rest) = rest.get(n..).and_then(|r| r.strip_prefix('c')).filter(|_| n > 0) else { return false };
    let c = digits(rest);
    let Some(ns) = rest.get(c..).and_then(|r| r.strip_prefix('n')).filter(|_| c > 0) else { return false };
    !ns.is_empty() && digits(ns) == ns.len()
}

/// The NVMe controller of a disk: the name its `device` link points at (`nvme0`), or under native
/// multipath, where that is the subsystem (`nvme-subsys0`), the first controller linked into the
/// subsystem's directory (`nvme-subsys0/nvme0`, `…/nvme1`): the one the tools address, and the
/// name the drive's thermal limits and SMART points carry.
fn nvme_controller(dev: &Path) -> String {
    let Some(target) = std::fs::read_link(dev).ok().and_then(|t| t.file_name().map(|f| f.to_string_lossy().into_owned())) else {
        return String::new();
    };
    if !target.starts_with("nvme-subsys") {
        return if target.starts_with("nvme") { target } else { String::new() };
    }
    let Ok(rd) = std::fs::read_dir(dev) else { return String::new() };
    let mut ctrls: Vec<String> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.strip_prefix("nvme").is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())))
        .collect();
    // nvme10 after nvme9.
    ctrls.sort_by_key(|n| (n.len(), n.clone()));
    ctrls.into_iter().next().unwrap_or_default()
}

/// The drive's address in sysfs, the device its hwmon temperature chip hangs off: the PCI
/// function of an NVMe controller (`<controller>/device`, reached from the namespace's `device`
/// (the controller, or under multipath the subsystem, which links its controllers by name)), the
/// SCSI device `H:C:T:L` a SATA/SAS disk's `device` link names. Empty when there is none.
fn sysfs_address(dev: &Path, controller: &str) -> String {
    let target = if controller.is_empty() {
        dev.to_path_buf()
    } else {
        let ctrl = std::fs::canonicalize(dev).map(|d| if d.file_name().is_some_and(|f| f == controller) { d } else { d.join(controller) });
        match ctrl {
            Ok(c) => c.join("device"),
            Err(_) => return String::new(),
        }
    };
    let Ok(resolved) = std::fs::canonicalize(&target) else { return String::new() };
    let base = resolved.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    // A PCI function (`0000:3b:00.0`) or a SCSI device (`0:0:0:0`); anything else (a virtio or
    // fabrics parent) is not an address a hwmon chip joins on.
    let colons = base.matches(':').count();
    if (controller.is_empty() && colons == 3) || (!controller.is_empty() && colons == 2 && base.contains('.')) {
        base
    } else {
        String::new()
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
        // Hidden disks (`hidden` = 1, Documentation/ABI/stable/sysfs-block) are the per-path
        // nodes of a multipath namespace: the drive is its head disk, listed once.
        if SKIP_PREFIXES.iter().any(|p| name.starts_with(p)) || d.join("partition").exists() || is_path_disk(&name) || attr(&d.join("hidden")) == "1" {
            continue;
        }
        let dev = d.join("device");
        // Unreadable attributes are left out (absent on the wire), never guessed.
        let sectors: Option<u64> = attr(&d.join("size")).parse().ok();
        let firmware = Some(attr(&dev.join("firmware_rev"))).filter(|s| !s.is_empty()).unwrap_or_else(|| attr(&dev.join("rev")));
        let controller = nvme_controller(&dev);
        let sysfs_address = sysfs_address(&dev, &controller);
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
            sysfs_address,
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

    /// NVMe native multipath (tests/fixtures/sysfs/nvme-multipath/README.md): two drives, five
    /// disks in `class/block`. The head disks hang off their subsystem; the controller is the
    /// first controller linked into it (`nvme0`, and `nvme2` for `nvme1n1`), never the subsystem,
    /// and the hidden per-path disks are not drives.
    #[test]
    fn multipath_heads_name_their_controller_and_path_disks_are_not_drives() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sysfs/nvme-multipath/sys");
        let d = scan(&root);
        let got: Vec<(&str, &str, &str, Option<u64>)> =
            d.iter().map(|d| (d.name.as_str(), d.controller.as_str(), d.serial.as_str(), d.capacity_bytes)).collect();
        assert_eq!(
            got,
            vec![("nvme0n1", "nvme0", "S6EUNA0R100001", Some(7_501_476_528 * 512)), ("nvme1n1", "nvme2", "PHLJ000000011P0BGN", Some(1_953_525_168 * 512))]
        );
        assert_eq!((d[0].model.as_str(), d[0].firmware.as_str(), d[0].transport.as_str()), ("SAMSUNG MZWLR3T8HBLS-00007", "MPK7525Q", "nvme"));
    }

    /// Kernels without the `hidden` attribute: the `c` in the name still marks a path disk.
    #[test]
    fn path_disks_are_recognised_by_name() {
        assert!(is_path_disk("nvme0c1n1") && is_path_disk("nvme12c3n45"));
        assert!(!is_path_disk("nvme0n1") && !is_path_disk("nvme1n12") && !is_path_disk("sdc") && !is_path_disk("nvme0c1"));
    }
}
