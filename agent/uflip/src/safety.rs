//! Write-safety checks for block devices (spec §6.1 "device-state enforcement", brief §6): identity
//! and destroy consent, mounts, partitions, filesystem signatures, exclusive-open busy test.
//!
//! Every host path is read under [`HostRoots`] (sysfs and procfs roots passed as values, never from
//! globals), so tests run the same code on fixture trees. Every check adds a [`RefusalReason`]
//! that says why and what to do; a device is cleared for writes only when the list is empty. To add
//! a check: add a reason variant (with its advice in the `#[error]` text) and push it from
//! [`check_block_writable`].

use serde::{Deserialize, Serialize};
use std::fmt;
use std::fs;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Where sysfs and procfs are mounted (tests pass fixture trees).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostRoots {
    /// Usually `/sys`.
    pub sysfs: PathBuf,
    /// Usually `/proc`.
    pub procfs: PathBuf,
}

impl Default for HostRoots {
    fn default() -> Self {
        HostRoots {
            sysfs: PathBuf::from("/sys"),
            procfs: PathBuf::from("/proc"),
        }
    }
}

/// Why a block device may not be written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum RefusalReason {
    /// The identity is not in the destroy-consent list.
    #[error("its identity {identity:?} is not in the destroy-consent list; add exactly \"{identity}\" to destroy_consent if ALL DATA on it may be destroyed")]
    NoConsent {
        /// The stable identity (serial, wwid or `loop:<backing file>`).
        identity: String,
    },
    /// No serial, wwid or loop backing file: nothing to consent to.
    #[error("it has no serial, wwid or loop backing file in sysfs, so it cannot be named in destroy_consent; use a device that reports a serial")]
    NoIdentity,
    /// The device or one of its partitions is mounted.
    #[error("{source_dev} is mounted on {mount_point}; unmount it (and make sure nothing on it is needed)")]
    Mounted {
        /// Mount source from mountinfo.
        source_dev: String,
        /// Mount point.
        mount_point: String,
    },
    /// The device has partitions.
    #[error("it is partitioned ({}); wattflip only writes whole unpartitioned devices: remove the partition table (wipefs -a) or use another device", partitions.join(", "))]
    Partitioned {
        /// Partition names from sysfs.
        partitions: Vec<String>,
    },
    /// The target is itself a partition.
    #[error("it is a partition; wattflip only writes whole devices: give the parent device")]
    IsPartition,
    /// A filesystem, swap, RAID/LVM or partition-table signature was found.
    #[error("it carries a {kind} signature; if its content is really disposable, erase it with `wipefs -a` first")]
    Signature {
        /// What was found ("ext2/3/4", "xfs", "btrfs", "swap", "GPT", "vfat", "MBR", "LVM2").
        kind: String,
    },
    /// The first 68 KiB could not be read to look for signatures.
    #[error("its first 68 KiB could not be read to look for filesystem signatures ({error}); check permissions (run as root)")]
    Unreadable {
        /// OS error text.
        error: String,
    },
    /// Exclusive open failed: mounted, held by LVM/RAID/another process.
    #[error("it is busy (exclusive open failed: {error}); release it (unmount, stop LVM/RAID, close other users)")]
    Busy {
        /// OS error text.
        error: String,
    },
}

/// A refused write request: the device and every reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    /// Device path.
    pub device: PathBuf,
    /// All reasons found.
    pub reasons: Vec<RefusalReason>,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "writes to {} refused: ", self.device.display())?;
        for (i, r) in self.reasons.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{r}")?;
        }
        f.write_str(" (read-only benchmarks remain allowed)")
    }
}

impl std::error::Error for Refusal {}

/// What sysfs says about a block device.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BlockInfo {
    /// Kernel name ("nvme0n1", "loop3").
    pub name: String,
    /// (major, minor).
    pub dev: (u32, u32),
    /// `queue/logical_block_size`.
    pub logical_block_size: Option<u64>,
    /// `device/model`.
    pub model: Option<String>,
    /// `device/serial` or `device/wwid`.
    pub serial: Option<String>,
    /// `device/firmware_rev` (NVMe) or `device/rev` (SCSI/SATA).
    #[serde(default)]
    pub firmware: Option<String>,
    /// The stable identity used for consent: serial, else wwid, else `loop:<backing file>`.
    pub identity: Option<String>,
    /// Partition names (`/sys/block/<dev>/<dev>N`).
    pub partitions: Vec<(String, (u32, u32))>,
    /// Whether this node is itself a partition.
    pub is_partition: bool,
}

fn read_trim(p: &Path) -> Option<String> {
    let s = fs::read_to_string(p).ok()?;
    let t = s.trim();
    (!t.is_empty()).then(|| t.to_string())
}

fn parse_devnum(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.trim().split_once(':')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Split a Linux `dev_t` into (major, minor) (glibc's encoding).
pub fn split_dev(rdev: u64) -> (u32, u32) {
    let major = ((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff);
    let minor = (rdev & 0xff) | ((rdev >> 12) & !0xff);
    (major as u32, minor as u32)
}

/// Kernel name of the block device with number `dev`, from `<sysfs>/dev/block/M:m` (a symlink
/// whose last component is the name).
pub fn block_name(roots: &HostRoots, dev: (u32, u32)) -> Option<String> {
    let link = roots.sysfs.join(format!("dev/block/{}:{}", dev.0, dev.1));
    let target = fs::read_link(&link)
        .ok()
        .or_else(|| fs::canonicalize(&link).ok())?;
    target.file_name().map(|n| n.to_string_lossy().into_owned())
}

/// Read what sysfs knows about block device `name` (under `<sysfs>/block/<name>` or, for a
/// partition, `<sysfs>/class/block/<name>`).
pub fn block_info(roots: &HostRoots, name: &str, dev: (u32, u32)) -> BlockInfo {
    let base = roots.sysfs.join("block").join(name);
    let mut info = BlockInfo {
        name: name.to_string(),
        dev,
        ..BlockInfo::default()
    };
    if !base.exists() {
        // Partitions are not under /sys/block; they show up in /sys/class/block with a `partition` file.
        let cls = roots.sysfs.join("class/block").join(name);
        info.is_partition = cls.join("partition").exists();
        info.logical_block_size =
            read_trim(&cls.join("../queue/logical_block_size")).and_then(|s| s.parse().ok());
        return info;
    }
    info.logical_block_size =
        read_trim(&base.join("queue/logical_block_size")).and_then(|s| s.parse().ok());
    info.model = read_trim(&base.join("device/model"));
    info.serial =
        read_trim(&base.join("device/serial")).or_else(|| read_trim(&base.join("device/wwid")));
    info.firmware = read_trim(&base.join("device/firmware_rev"))
        .or_else(|| read_trim(&base.join("device/rev")));
    info.identity = info.serial.clone().or_else(|| {
        // Loop devices have no serial: `loop:<absolute backing file path>` is stable across
        // re-attachment of the same image (documented in docs/uflip-engine.md).
        read_trim(&base.join("loop/backing_file")).map(|b| format!("loop:{b}"))
    });
    if let Ok(rd) = fs::read_dir(&base) {
        let mut parts: Vec<(String, (u32, u32))> = rd
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                if !n.starts_with(name) || n == name {
                    return None;
                }
                let devnum = read_trim(&e.path().join("dev"))
                    .and_then(|s| parse_devnum(&s))
                    .unwrap_or((0, 0));
                Some((n, devnum))
            })
            .collect();
        parts.sort();
        info.partitions = parts;
    }
    info
}

/// Mounts whose device number is in `devs` or whose source is `dev_path`, from
/// `<procfs>/self/mountinfo`: (source, mount point).
pub fn mounts_of(roots: &HostRoots, devs: &[(u32, u32)], dev_path: &Path) -> Vec<(String, String)> {
    let Ok(text) = fs::read_to_string(roots.procfs.join("self/mountinfo")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in text.lines() {
        // "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue"
        let (left, right) = match line.split_once(" - ") {
            Some(x) => x,
            None => continue,
        };
        let f: Vec<&str> = left.split(' ').collect();
        let r: Vec<&str> = right.split(' ').collect();
        let (Some(devnum), Some(mp)) = (f.get(2).and_then(|s| parse_devnum(s)), f.get(4)) else {
            continue;
        };
        let source = r.get(1).copied().unwrap_or("");
        if devs.contains(&devnum) || Path::new(source) == dev_path {
            out.push((source.to_string(), mp.replace("\\040", " ")));
        }
    }
    out
}

/// Recognise a filesystem, swap, LVM or partition-table signature in the first 68 KiB of a device.
pub fn fs_signature(head: &[u8]) -> Option<&'static str> {
    let at = |off: usize, magic: &[u8]| head.get(off..off + magic.len()) == Some(magic);
    if at(1080, &[0x53, 0xEF]) {
        return Some("ext2/3/4");
    }
    if at(0, b"XFSB") {
        return Some("xfs");
    }
    if at(65600, b"_BHRfS_M") {
        return Some("btrfs");
    }
    if at(4086, b"SWAPSPACE2") || at(4086, b"SWAP-SPACE") {
        return Some("swap");
    }
    if at(512, b"EFI PART") || at(4096, b"EFI PART") {
        return Some("GPT");
    }
    if at(512 + 24, b"LVM2 001") || at(512, b"LABELONE") {
        return Some("LVM2");
    }
    if at(510, &[0x55, 0xAA]) && (at(54, b"FAT1") || at(82, b"FAT32")) {
        return Some("vfat");
    }
    if at(510, &[0x55, 0xAA]) {
        return Some("MBR");
    }
    None
}

/// Bytes read for [`fs_signature`] (btrfs's magic ends at 65608).
pub const SIGNATURE_BYTES: usize = 68 * 1024;

/// Run every check for writing `dev_path` (whose sysfs facts are `info`) with the given consent
/// list. `Ok(identity)` when cleared; otherwise every reason found.
pub fn check_block_writable(
    dev_path: &Path,
    info: &BlockInfo,
    roots: &HostRoots,
    consent: &[String],
) -> Result<String, Refusal> {
    let mut reasons = Vec::new();
    if info.is_partition {
        reasons.push(RefusalReason::IsPartition);
    }
    let mut devs = vec![info.dev];
    devs.extend(info.partitions.iter().map(|p| p.1));
    for (source_dev, mount_point) in mounts_of(roots, &devs, dev_path) {
        reasons.push(RefusalReason::Mounted {
            source_dev,
            mount_point,
        });
    }
    if !info.partitions.is_empty() {
        reasons.push(RefusalReason::Partitioned {
            partitions: info.partitions.iter().map(|p| p.0.clone()).collect(),
        });
    }
    let mut head = Vec::with_capacity(SIGNATURE_BYTES);
    match fs::File::open(dev_path)
        .and_then(|f| f.take(SIGNATURE_BYTES as u64).read_to_end(&mut head))
    {
        Ok(_) => {
            if let Some(kind) = fs_signature(&head) {
                reasons.push(RefusalReason::Signature {
                    kind: kind.to_string(),
                });
            }
        }
        Err(e) => reasons.push(RefusalReason::Unreadable {
            error: e.to_string(),
        }),
    }
    // O_EXCL on a block device fails with EBUSY while it is mounted or claimed (LVM, md, another
    // O_EXCL holder). The check is a point-in-time one: the fd is closed again before probing.
    if let Err(e) = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_EXCL)
        .open(dev_path)
    {
        reasons.push(RefusalReason::Busy {
            error: e.to_string(),
        });
    }
    let identity = info.identity.clone();
    match &identity {
        None => reasons.push(RefusalReason::NoIdentity),
        Some(id) if !consent.iter().any(|c| c == id) => reasons.push(RefusalReason::NoConsent {
            identity: id.clone(),
        }),
        Some(_) => {}
    }
    match identity {
        Some(id) if reasons.is_empty() => Ok(id),
        _ => Err(Refusal {
            device: dev_path.to_path_buf(),
            reasons,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    struct Fixture {
        dir: tempfile::TempDir,
    }

    impl Fixture {
        fn new() -> Self {
            let dir = tempfile::Builder::new()
                .prefix("uflip-sysfs-")
                .tempdir_in(crate::test_dir())
                .unwrap();
            Fixture { dir }
        }
        fn roots(&self) -> HostRoots {
            HostRoots {
                sysfs: self.dir.path().join("sys"),
                procfs: self.dir.path().join("proc"),
            }
        }
        fn file(&self, rel: &str, text: &str) {
            let p = self.dir.path().join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, text).unwrap();
        }
        fn image(&self, head: &[u8]) -> PathBuf {
            let p = self.dir.path().join("dev.img");
            let mut v = head.to_vec();
            v.resize(1 << 20, 0);
            fs::write(&p, v).unwrap();
            p
        }
    }

    fn nvme_fixture(f: &Fixture) {
        f.file("sys/block/nvme0n1/queue/logical_block_size", "4096\n");
        f.file("sys/block/nvme0n1/device/model", "ACME SSD 1TB        \n");
        f.file("sys/block/nvme0n1/device/serial", "  S5GXNX0T123456  \n");
        f.file("sys/block/nvme0n1/device/firmware_rev", "2B2QEXM7\n");
        f.file("sys/block/nvme0n1/dev", "259:0\n");
        fs::create_dir_all(f.dir.path().join("sys/dev/block")).unwrap();
        symlink(
            "../../block/nvme0n1",
            f.dir.path().join("sys/dev/block/259:0"),
        )
        .unwrap();
        f.file(
            "proc/self/mountinfo",
            "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n",
        );
    }

    #[test]
    fn identity_model_and_name_from_fixture() {
        let f = Fixture::new();
        nvme_fixture(&f);
        let roots = f.roots();
        assert_eq!(block_name(&roots, (259, 0)).as_deref(), Some("nvme0n1"));
        let info = block_info(&roots, "nvme0n1", (259, 0));
        assert_eq!(info.logical_block_size, Some(4096));
        assert_eq!(info.model.as_deref(), Some("ACME SSD 1TB"));
        assert_eq!(info.firmware.as_deref(), Some("2B2QEXM7"));
        assert_eq!(info.identity.as_deref(), Some("S5GXNX0T123456"));
        assert!(info.partitions.is_empty());
        // wwid when no serial; loop backing file for loop devices; SCSI firmware in `rev`.
        f.file("sys/block/sdb/device/wwid", "naa.5000c500a1b2c3d4\n");
        f.file("sys/block/sdb/device/rev", "GX03\n");
        assert_eq!(
            block_info(&roots, "sdb", (8, 16)).firmware.as_deref(),
            Some("GX03")
        );
        assert_eq!(
            block_info(&roots, "sdb", (8, 16)).identity.as_deref(),
            Some("naa.5000c500a1b2c3d4")
        );
        f.file("sys/block/loop3/loop/backing_file", "/var/tmp/disk.img\n");
        assert_eq!(
            block_info(&roots, "loop3", (7, 3)).identity.as_deref(),
            Some("loop:/var/tmp/disk.img")
        );
    }

    #[test]
    fn consented_clean_device_is_cleared() {
        let f = Fixture::new();
        nvme_fixture(&f);
        let roots = f.roots();
        let info = block_info(&roots, "nvme0n1", (259, 0));
        let img = f.image(&[]);
        assert_eq!(
            check_block_writable(&img, &info, &roots, &["S5GXNX0T123456".into()]).unwrap(),
            "S5GXNX0T123456"
        );
        let r = check_block_writable(&img, &info, &roots, &[]).unwrap_err();
        assert_eq!(
            r.reasons,
            vec![RefusalReason::NoConsent {
                identity: "S5GXNX0T123456".into()
            }]
        );
        let msg = r.to_string();
        assert!(
            msg.contains("add exactly \"S5GXNX0T123456\" to destroy_consent"),
            "{msg}"
        );
        assert!(msg.contains(&img.display().to_string()));
    }

    #[test]
    fn partitioned_mounted_and_signature_all_reported() {
        let f = Fixture::new();
        nvme_fixture(&f);
        f.file("sys/block/nvme0n1/nvme0n1p1/dev", "259:1\n");
        f.file("sys/block/nvme0n1/nvme0n1p1/partition", "1\n");
        f.file(
            "proc/self/mountinfo",
            "22 1 254:0 / / rw - ext4 /dev/vda rw\n40 22 259:1 / /mnt/my\\040data rw - xfs /dev/nvme0n1p1 rw\n",
        );
        let roots = f.roots();
        let info = block_info(&roots, "nvme0n1", (259, 0));
        assert_eq!(info.partitions, vec![("nvme0n1p1".to_string(), (259, 1))]);
        let mut head = vec![0u8; 1024];
        head[510] = 0x55;
        head[511] = 0xAA;
        let img = f.image(&head);
        let r = check_block_writable(&img, &info, &roots, &["S5GXNX0T123456".into()]).unwrap_err();
        assert_eq!(
            r.reasons,
            vec![
                RefusalReason::Mounted {
                    source_dev: "/dev/nvme0n1p1".into(),
                    mount_point: "/mnt/my data".into()
                },
                RefusalReason::Partitioned {
                    partitions: vec!["nvme0n1p1".into()]
                },
                RefusalReason::Signature { kind: "MBR".into() },
            ]
        );
    }

    #[test]
    fn signatures() {
        let mk = |off: usize, magic: &[u8]| {
            let mut v = vec![0u8; SIGNATURE_BYTES];
            v[off..off + magic.len()].copy_from_slice(magic);
            v
        };
        assert_eq!(fs_signature(&mk(1080, &[0x53, 0xEF])), Some("ext2/3/4"));
        assert_eq!(fs_signature(&mk(0, b"XFSB")), Some("xfs"));
        assert_eq!(fs_signature(&mk(65600, b"_BHRfS_M")), Some("btrfs"));
        assert_eq!(fs_signature(&mk(4086, b"SWAPSPACE2")), Some("swap"));
        assert_eq!(fs_signature(&mk(512, b"EFI PART")), Some("GPT"));
        let mut fat = mk(82, b"FAT32");
        fat[510] = 0x55;
        fat[511] = 0xAA;
        assert_eq!(fs_signature(&fat), Some("vfat"));
        assert_eq!(fs_signature(&vec![0u8; SIGNATURE_BYTES]), None);
        assert_eq!(fs_signature(&[0u8; 10]), None);
    }

    #[test]
    fn dev_split() {
        assert_eq!(split_dev(0x0000_0000_0000_0703), (7, 3));
        assert_eq!(split_dev((259u64 << 8) | 1), (259, 1));
        // makedev(259, 300) = 0x11032C (minor bits above 8 go to bits 20+).
        assert_eq!(split_dev(0x11_032C), (259, 300));
    }
}
