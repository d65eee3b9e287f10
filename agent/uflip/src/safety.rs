//! Write-safety checks for block devices (spec §6.1 "device-state enforcement", brief §6): identity
//! and destroy consent, mounts, partitions, signatures (libblkid through the `blkid` tool, run on
//! the open handle behind [`CommandRunner`]), loop backing files shared with a device in use
//! (compared by the backing inode, [`crate::loopid`]). Regular files get the same care in
//! [`crate::file_consent`]. The exclusive open and the per-run re-check of the open handle are
//! [`crate::target::Target`]'s.
//!
//! Every host path is read under [`HostRoots`] (sysfs and procfs roots passed as values, never from
//! globals), so tests run the same code on fixture trees. Every check adds a [`RefusalReason`]
//! that says why and what to do; a device is cleared for writes only when the list is empty. To add
//! a check: add a reason variant (with its advice in the `#[error]` text) and push it from
//! [`check_block_writable`].

use crate::loopid::{self, BackingId};
pub use crate::runner::{CommandRunner, SystemRunner};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
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
        HostRoots { sysfs: PathBuf::from("/sys"), procfs: PathBuf::from("/proc") }
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
    /// libblkid found a filesystem, LUKS, LVM, swap, RAID, ZFS, bcache or partition-table signature.
    #[error("it carries a {kind} signature (found by libblkid); if its content is really disposable, erase it with `wipefs -a` first, or pass the separate signature override (`--overwrite-signatures`, TargetOptions.overwrite_signatures)")]
    Signature {
        /// What libblkid reported ("ext4 filesystem", "crypto_LUKS crypto", "dos partition table").
        kind: String,
    },
    /// The signature scan could not run, so nothing is known about the content.
    #[error("its signatures could not be checked ({error}); install util-linux's `blkid` (Debian package util-linux) and run as root")]
    SignatureScanFailed {
        /// What went wrong.
        error: String,
    },
    /// Exclusive open failed: mounted, held by LVM/RAID/another process.
    #[error("it is busy (exclusive open failed: {error}); release it (unmount, stop LVM/RAID, close other users)")]
    Busy {
        /// OS error text.
        error: String,
    },
    /// A regular file that is the backing file of a loop device.
    #[error("it is the backing file of {loop_dev}: writing it would write under that device (and whatever is mounted from it); detach it first (`losetup -d {loop_dev}`) or probe another file")]
    BacksLoopDevice {
        /// The loop device (`/dev/loopN`).
        loop_dev: String,
    },
    /// A loop device whose backing file is also behind another loop device that is in use.
    #[error("its backing file {backing} is also behind {other}, which is {state}; writing would corrupt what {other} serves: release {other} (unmount, close its users) or detach it first")]
    SharedBackingFile {
        /// The shared backing file.
        backing: String,
        /// The other loop device.
        other: String,
        /// "mounted on /mnt", "held by dm-0", "busy (exclusive open failed: …)".
        state: String,
    },
    /// A loop device's backing file is deleted (or its path cannot be trusted) and its backing
    /// inode could not be read, so whether it is this file cannot be told.
    #[error("whether {loop_dev} serves this very file cannot be told: its backing file reads {backing:?} and its backing inode could not be read ({error}); install util-linux's `losetup` and run as root, or detach {loop_dev} (`losetup -d {loop_dev}`) first")]
    BackingIdentityUnknown {
        /// The loop device.
        loop_dev: String,
        /// Its backing file as sysfs names it.
        backing: String,
        /// Why the backing inode is unknown.
        error: String,
    },
    /// An active swap file: the kernel refuses every write to it (ETXTBSY).
    #[error("it is an active swap file ({swap_file} in /proc/swaps), and the kernel refuses writes to it: if it may be destroyed, `swapoff {swap_file}` first, or probe another file")]
    InUseAsSwap {
        /// The swap file as /proc/swaps names it.
        swap_file: String,
    },
    /// An existing file with content that wattflip did not create (no scratch marker of its own)
    /// and that is not in the destroy-consent list.
    #[error("it is an existing file of {bytes} bytes that wattflip did not create (it carries no wattflip scratch marker), so writing would destroy its content; if ALL of it may be destroyed, pass `--destroy-consent {path}` (destroy_consent = [\"{path}\"]), or give a path that does not exist yet")]
    FileNoConsent {
        /// The file (its path when opened).
        path: String,
        /// Its size when checked.
        bytes: u64,
    },
    /// A loop device's backing file did not answer `stat`, so sharing cannot be ruled out.
    #[error("whether it shares storage with {loop_dev} cannot be told: that device's backing file {backing} did not answer stat within 2 s (a stalled FUSE or NFS mount?); repair or detach {loop_dev} (`losetup -d {loop_dev}`) first")]
    BackingUnanswered {
        /// The loop device.
        loop_dev: String,
        /// Its backing file.
        backing: String,
    },
    /// The open handle no longer names the device or file that was checked and consented to.
    #[error("{detail}; the probe stopped and issued no further IO to it: find out what re-pointed or re-bound the target, then start the probe again")]
    HandleChanged {
        /// What changed.
        detail: String,
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

impl Refusal {
    /// The reasons, joined with "; ".
    pub fn reasons_text(&self) -> String {
        self.reasons.iter().map(|r| r.to_string()).collect::<Vec<_>>().join("; ")
    }
}

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
    /// Loop devices: the backing file path the kernel reports.
    #[serde(default)]
    pub loop_backing: Option<String>,
    /// `diskseq`: the kernel bumps it whenever new media is attached (a loop device re-bound to
    /// another file), so it tells a re-bound device from the checked one without touching the
    /// backing file (which may sit on a stalled FUSE or NFS mount).
    #[serde(default)]
    pub diskseq: Option<u64>,
    /// Loop devices: `loop/autoclear` (set by `losetup -d` while the device is open).
    #[serde(default)]
    pub loop_autoclear: Option<bool>,
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
    let target = fs::read_link(&link).ok().or_else(|| fs::canonicalize(&link).ok())?;
    target.file_name().map(|n| n.to_string_lossy().into_owned())
}

/// Read what sysfs knows about block device `name` (under `<sysfs>/block/<name>` or, for a
/// partition, `<sysfs>/class/block/<name>`).
pub fn block_info(roots: &HostRoots, name: &str, dev: (u32, u32)) -> BlockInfo {
    let base = roots.sysfs.join("block").join(name);
    let mut info = BlockInfo { name: name.to_string(), dev, ..BlockInfo::default() };
    if !base.exists() {
        // Partitions are not under /sys/block; they show up in /sys/class/block with a `partition` file.
        let cls = roots.sysfs.join("class/block").join(name);
        info.is_partition = cls.join("partition").exists();
        info.logical_block_size = read_trim(&cls.join("../queue/logical_block_size")).and_then(|s| s.parse().ok());
        return info;
    }
    info.logical_block_size = read_trim(&base.join("queue/logical_block_size")).and_then(|s| s.parse().ok());
    info.model = read_trim(&base.join("device/model"));
    info.serial = read_trim(&base.join("device/serial")).or_else(|| read_trim(&base.join("device/wwid")));
    info.firmware = read_trim(&base.join("device/firmware_rev")).or_else(|| read_trim(&base.join("device/rev")));
    info.identity = info.serial.clone().or_else(|| {
        // Loop devices have no serial: `loop:<absolute backing file path>` is stable across
        // re-attachment of the same image (documented in docs/uflip-engine.md).
        read_trim(&base.join("loop/backing_file")).map(|b| format!("loop:{b}"))
    });
    info.loop_backing = loop_backing_path(roots, name);
    info.diskseq = read_trim(&base.join("diskseq")).and_then(|v| v.parse().ok());
    info.loop_autoclear = read_trim(&base.join("loop/autoclear")).map(|v| v == "1");
    if let Ok(rd) = fs::read_dir(&base) {
        let mut parts: Vec<(String, (u32, u32))> = rd
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                if !n.starts_with(name) || n == name {
                    return None;
                }
                let devnum = read_trim(&e.path().join("dev")).and_then(|s| parse_devnum(&s)).unwrap_or((0, 0));
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

/// Every signature libblkid finds on the open `handle` (`blkid -p -o export /dev/stdin` with the
/// handle as standard input, so the scan reads the very file the probe writes, never a path that
/// could have been re-pointed): filesystems, LUKS, LVM, swap, md, ZFS, bcache and partition
/// tables. Empty when blkid finds nothing (exit 2); `Err` when the scan could not run.
pub fn scan_signatures(runner: &dyn CommandRunner, handle: &fs::File) -> Result<Vec<String>, String> {
    let dup = handle.try_clone().map_err(|e| format!("cannot duplicate the open handle for blkid: {e}"))?;
    let out = runner.run("blkid", &["-p", "-o", "export", "/dev/stdin"], Some(dup)).map_err(|e| format!("cannot run blkid: {e}"))?;
    match out.status.code() {
        Some(0) => {}
        // blkid: 2 = nothing found, 8 = several signatures that contradict each other.
        Some(2) => return Ok(Vec::new()),
        Some(8) => return Ok(vec!["ambivalent (several contradicting)".to_string()]),
        _ => return Err(format!("blkid failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim())),
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |k: &str| text.lines().find_map(|l| l.strip_prefix(k).and_then(|v| v.strip_prefix('='))).map(str::to_string);
    let mut found = Vec::new();
    if let Some(t) = field("TYPE") {
        let usage = field("USAGE").unwrap_or_else(|| "other".into());
        found.push(format!("{t} ({usage})"));
    }
    if let Some(pt) = field("PTTYPE") {
        found.push(format!("{pt} partition table"));
    }
    if found.is_empty() {
        // Exit 0 without TYPE/PTTYPE (e.g. only a PART_ENTRY of a parent table): still something.
        found.push("unnamed".to_string());
    }
    Ok(found)
}

/// How long a backing file may take to answer `stat` before it counts as unanswered.
pub const STAT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// `stat` of `path` that gives up after `timeout` (a file on a stalled FUSE or NFS mount blocks
/// `stat` in the kernel; the helper thread is then left behind, blocked until the mount answers).
/// `Ok(None)` when the file does not exist.
pub(crate) fn stat_within(path: &Path, timeout: std::time::Duration) -> Result<Option<(u64, u64)>, ()> {
    let (tx, rx) = std::sync::mpsc::channel();
    let p = path.to_path_buf();
    std::thread::Builder::new()
        .name("uflip-stat".into())
        .spawn(move || {
            let _ = tx.send(fs::metadata(&p).ok().map(|m| (m.dev(), m.ino())));
        })
        .map_err(|_| ())?;
    rx.recv_timeout(timeout).map_err(|_| ())
}

/// (device number, fstype) of the mount holding `path` (longest mount-point prefix in mountinfo).
fn mount_of(roots: &HostRoots, path: &Path) -> Option<((u32, u32), String)> {
    let text = fs::read_to_string(roots.procfs.join("self/mountinfo")).ok()?;
    let mut best: Option<(usize, (u32, u32), String)> = None;
    for line in text.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let f: Vec<&str> = left.split(' ').collect();
        let (Some(dev), Some(mp)) = (f.get(2).and_then(|s| parse_devnum(s)), f.get(4)) else {
            continue;
        };
        let mp = mp.replace("\\040", " ");
        if path.starts_with(&mp) && best.as_ref().is_none_or(|b| mp.len() >= b.0) {
            let fstype = right.split(' ').next().unwrap_or("").to_string();
            best = Some((mp.len(), dev, fstype));
        }
    }
    best.map(|b| (b.1, b.2))
}

/// Whether a loop device's backing file is a given file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackingMatch {
    /// The same file.
    Same,
    /// Its backing file did not answer `stat` within [`STAT_TIMEOUT`], so nobody can tell.
    Unanswered {
        /// The backing file path.
        backing: String,
    },
    /// Its backing file is deleted and its backing inode could not be read, so nobody can tell.
    Unknown {
        /// The backing file as sysfs names it (with " (deleted)").
        backing: String,
        /// Why the inode could not be read.
        error: String,
    },
}

/// The backing file path of loop device `name` (without the kernel's " (deleted)" suffix).
fn loop_backing_path(roots: &HostRoots, name: &str) -> Option<String> {
    let b = read_trim(&roots.sysfs.join("block").join(name).join("loop/backing_file"))?;
    Some(b.strip_suffix(" (deleted)").unwrap_or(&b).to_string())
}

/// Loop devices (kernel names) under `<sysfs>/block` that have a backing file.
fn bound_loops(roots: &HostRoots) -> Vec<String> {
    let Ok(rd) = fs::read_dir(roots.sysfs.join("block")) else {
        return Vec::new();
    };
    let mut names: Vec<String> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("loop") && roots.sysfs.join("block").join(n).join("loop/backing_file").exists())
        .collect();
    names.sort();
    names
}

/// The backing identities of the attached loop devices, read only when sysfs shows any (so a
/// host without loop devices never runs losetup).
pub fn loop_ids(roots: &HostRoots, runner: &dyn CommandRunner) -> LoopIds {
    if bound_loops(roots).is_empty() {
        return Ok(BTreeMap::new());
    }
    loopid::backing_ids(runner)
}

/// Backing identities by loop device name, or why they could not be read.
pub type LoopIds = Result<BTreeMap<String, BackingId>, String>;

/// Loop devices (kernel names) whose backing file is the file `id` (its `(st_dev, st_ino)`),
/// found at `path`. A device whose backing identity is in `ids` is decided by it alone, whatever
/// path names the file (hard link, `/proc/PID/fd/N`, deleted image). Without it, by
/// `<sysfs>/block/loop*/loop/backing_file`: the same path matches at once; a deleted backing file
/// cannot be told apart; a backing file on another device number (and not on btrfs, whose files
/// carry per-subvolume numbers) cannot be the file and is never touched; the rest are `stat`ed
/// with a timeout.
pub fn loops_backed_by(roots: &HostRoots, ids: &LoopIds, path: &Path, id: BackingId) -> Vec<(String, BackingMatch)> {
    let ours = id.dev;
    let mut out = Vec::new();
    for n in bound_loops(roots) {
        if let Some(known) = ids.as_ref().ok().and_then(|m| m.get(&n)) {
            if *known == id {
                out.push((n, BackingMatch::Same));
            }
            continue;
        }
        let Some(raw) = read_trim(&roots.sysfs.join("block").join(&n).join("loop/backing_file")) else {
            continue;
        };
        let b = raw.strip_suffix(" (deleted)").unwrap_or(&raw).to_string();
        let bp = Path::new(&b);
        if bp == path {
            out.push((n, BackingMatch::Same));
            continue;
        }
        if b.len() != raw.len() {
            let error = match ids {
                Err(e) => e.clone(),
                Ok(_) => "losetup did not list it".to_string(),
            };
            out.push((n, BackingMatch::Unknown { backing: raw, error }));
            continue;
        }
        if let Some((dev, fstype)) = mount_of(roots, bp) {
            if dev != ours && fstype != "btrfs" {
                continue;
            }
        }
        match stat_within(bp, STAT_TIMEOUT) {
            Ok(Some(di)) if BackingId { dev: split_dev(di.0), ino: di.1 } == id => out.push((n, BackingMatch::Same)),
            Ok(_) => {}
            Err(()) => out.push((n, BackingMatch::Unanswered { backing: b })),
        }
    }
    out
}

/// Whether loop device `name` is in use: mounted (itself or a partition), held by another block
/// device (dm, md) or exclusively opened. `None` when idle.
fn loop_in_use(roots: &HostRoots, name: &str) -> Option<String> {
    let dev = read_trim(&roots.sysfs.join("block").join(name).join("dev")).and_then(|s| parse_devnum(&s))?;
    let info = block_info(roots, name, dev);
    let mut devs = vec![dev];
    devs.extend(info.partitions.iter().map(|p| p.1));
    let node = PathBuf::from("/dev").join(name);
    if let Some((src, mp)) = mounts_of(roots, &devs, &node).into_iter().next() {
        return Some(format!("mounted ({src} on {mp})"));
    }
    let mut holders = Vec::new();
    for n in std::iter::once(name.to_string()).chain(info.partitions.iter().map(|p| p.0.clone())) {
        let dir = if n == name { roots.sysfs.join("block").join(name).join("holders") } else { roots.sysfs.join("block").join(name).join(&n).join("holders") };
        if let Ok(rd) = fs::read_dir(dir) {
            holders.extend(rd.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()));
        }
    }
    if !holders.is_empty() {
        holders.sort();
        return Some(format!("held by {}", holders.join(", ")));
    }
    // Only on the real /dev: an exclusive opener (another probe, mkfs) is visible nowhere else.
    if roots.sysfs == Path::new("/sys") {
        let same_dev = fs::metadata(&node).ok().filter(|m| m.file_type().is_block_device() && split_dev(m.rdev()) == dev);
        if same_dev.is_some() {
            if let Err(e) = fs::OpenOptions::new().read(true).custom_flags(libc::O_EXCL | libc::O_CLOEXEC).open(&node) {
                return Some(format!("busy (exclusive open failed: {e})"));
            }
        }
    }
    None
}

/// What a write check needs besides the device facts.
#[derive(Debug, Clone, Copy)]
pub struct WriteCheck<'a> {
    /// sysfs/procfs roots.
    pub roots: &'a HostRoots,
    /// Destroy-consent identities.
    pub consent: &'a [String],
    /// Runs blkid (and losetup for loop backing identities).
    pub runner: &'a dyn CommandRunner,
    /// The separate override that lets a consented device carrying signatures be written.
    pub overwrite_signatures: bool,
}

/// Run every check for writing the block device open as `handle` (node `dev_path`, sysfs facts
/// `info`). The exclusive open is the caller's ([`crate::Target`] opens its write handle with
/// `O_EXCL`). `Ok(identity)` when cleared; otherwise every reason found.
pub fn check_block_writable(dev_path: &Path, handle: &fs::File, info: &BlockInfo, check: &WriteCheck<'_>) -> Result<String, Refusal> {
    let roots = check.roots;
    let mut reasons = Vec::new();
    if info.is_partition {
        reasons.push(RefusalReason::IsPartition);
    }
    let mut devs = vec![info.dev];
    devs.extend(info.partitions.iter().map(|p| p.1));
    for (source_dev, mount_point) in mounts_of(roots, &devs, dev_path) {
        reasons.push(RefusalReason::Mounted { source_dev, mount_point });
    }
    if !info.partitions.is_empty() {
        reasons.push(RefusalReason::Partitioned { partitions: info.partitions.iter().map(|p| p.0.clone()).collect() });
    }
    match scan_signatures(check.runner, handle) {
        Ok(found) if !check.overwrite_signatures => reasons.extend(found.into_iter().map(|kind| RefusalReason::Signature { kind })),
        Ok(_) => {}
        Err(error) => reasons.push(RefusalReason::SignatureScanFailed { error }),
    }
    if let Some(backing) = &info.loop_backing {
        let ids = loop_ids(roots, check.runner);
        // Its own backing inode from the loop driver; by path only when that is unknown.
        let own = match ids.as_ref().ok().and_then(|m| m.get(&info.name)) {
            Some(id) => Ok(Some(*id)),
            None => stat_within(Path::new(backing), STAT_TIMEOUT).map(|o| o.map(|di| BackingId { dev: split_dev(di.0), ino: di.1 })),
        };
        match own {
            Ok(Some(id)) => {
                for (other, m) in loops_backed_by(roots, &ids, Path::new(backing), id) {
                    if other == info.name {
                        continue;
                    }
                    let other_dev = format!("/dev/{other}");
                    match m {
                        BackingMatch::Same => {
                            if let Some(state) = loop_in_use(roots, &other) {
                                reasons.push(RefusalReason::SharedBackingFile { backing: backing.clone(), other: other_dev, state });
                            }
                        }
                        BackingMatch::Unanswered { backing } => reasons.push(RefusalReason::BackingUnanswered { loop_dev: other_dev, backing }),
                        BackingMatch::Unknown { backing, error } => reasons.push(RefusalReason::BackingIdentityUnknown { loop_dev: other_dev, backing, error }),
                    }
                }
            }
            // Deleted, and the loop driver's inode unreadable: sharing cannot be ruled out.
            Ok(None) => reasons.push(RefusalReason::BackingIdentityUnknown {
                loop_dev: dev_path.display().to_string(),
                backing: backing.clone(),
                error: ids.err().unwrap_or_else(|| "losetup did not list it".into()),
            }),
            Err(()) => reasons.push(RefusalReason::BackingUnanswered { loop_dev: dev_path.display().to_string(), backing: backing.clone() }),
        }
    }
    let identity = info.identity.clone();
    match &identity {
        None => reasons.push(RefusalReason::NoIdentity),
        Some(id) if !check.consent.iter().any(|c| c == id) => reasons.push(RefusalReason::NoConsent { identity: id.clone() }),
        Some(_) => {}
    }
    match identity {
        Some(id) if reasons.is_empty() => Ok(id),
        _ => Err(Refusal { device: dev_path.to_path_buf(), reasons }),
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
            let dir = tempfile::Builder::new().prefix("uflip-sysfs-").tempdir_in(crate::test_dir()).unwrap();
            Fixture { dir }
        }
        fn roots(&self) -> HostRoots {
            HostRoots { sysfs: self.dir.path().join("sys"), procfs: self.dir.path().join("proc") }
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
        symlink("../../block/nvme0n1", f.dir.path().join("sys/dev/block/259:0")).unwrap();
        f.file("proc/self/mountinfo", "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n");
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
        assert_eq!(block_info(&roots, "sdb", (8, 16)).firmware.as_deref(), Some("GX03"));
        assert_eq!(block_info(&roots, "sdb", (8, 16)).identity.as_deref(), Some("naa.5000c500a1b2c3d4"));
        f.file("sys/block/loop3/loop/backing_file", "/var/tmp/disk.img\n");
        assert_eq!(block_info(&roots, "loop3", (7, 3)).identity.as_deref(), Some("loop:/var/tmp/disk.img"));
    }

    #[test]
    fn consented_clean_device_is_cleared() {
        let f = Fixture::new();
        nvme_fixture(&f);
        let roots = f.roots();
        let info = block_info(&roots, "nvme0n1", (259, 0));
        let img = f.image(&[]);
        let h = fs::File::open(&img).unwrap();
        let consent = ["S5GXNX0T123456".to_string()];
        assert_eq!(check_block_writable(&img, &h, &info, &check(&roots, &consent)).unwrap(), "S5GXNX0T123456");
        let r = check_block_writable(&img, &h, &info, &check(&roots, &[])).unwrap_err();
        assert_eq!(r.reasons, vec![RefusalReason::NoConsent { identity: "S5GXNX0T123456".into() }]);
        let msg = r.to_string();
        assert!(msg.contains("add exactly \"S5GXNX0T123456\" to destroy_consent"), "{msg}");
        assert!(msg.contains(&img.display().to_string()));
    }

    #[test]
    fn partitioned_mounted_and_signature_all_reported() {
        let f = Fixture::new();
        nvme_fixture(&f);
        f.file("sys/block/nvme0n1/nvme0n1p1/dev", "259:1\n");
        f.file("sys/block/nvme0n1/nvme0n1p1/partition", "1\n");
        f.file("proc/self/mountinfo", "22 1 254:0 / / rw - ext4 /dev/vda rw\n40 22 259:1 / /mnt/my\\040data rw - xfs /dev/nvme0n1p1 rw\n");
        let roots = f.roots();
        let info = block_info(&roots, "nvme0n1", (259, 0));
        assert_eq!(info.partitions, vec![("nvme0n1p1".to_string(), (259, 1))]);
        let mut head = vec![0u8; 1024];
        head[510] = 0x55;
        head[511] = 0xAA;
        let img = f.image(&head);
        let h = fs::File::open(&img).unwrap();
        let consent = ["S5GXNX0T123456".to_string()];
        let r = check_block_writable(&img, &h, &info, &check(&roots, &consent)).unwrap_err();
        assert_eq!(
            r.reasons,
            vec![
                RefusalReason::Mounted { source_dev: "/dev/nvme0n1p1".into(), mount_point: "/mnt/my data".into() },
                RefusalReason::Partitioned { partitions: vec!["nvme0n1p1".into()] },
                RefusalReason::Signature { kind: "dos partition table".into() },
            ]
        );
        // The separate override lets the signature through, and only the signature.
        let mut c = check(&roots, &consent);
        c.overwrite_signatures = true;
        let r = check_block_writable(&img, &h, &info, &c).unwrap_err();
        assert_eq!(r.reasons.len(), 2, "{r}");
        assert!(!r.reasons.iter().any(|x| matches!(x, RefusalReason::Signature { .. })));
    }

    fn check<'a>(roots: &'a HostRoots, consent: &'a [String]) -> WriteCheck<'a> {
        WriteCheck { roots, consent, runner: &SystemRunner, overwrite_signatures: false }
    }

    /// Answers every command with a fixed exit code and output (or a spawn error).
    #[derive(Debug)]
    struct Fixed(Option<(i32, &'static str)>);

    impl CommandRunner for Fixed {
        fn run(&self, program: &str, args: &[&str], stdin: Option<fs::File>) -> std::io::Result<std::process::Output> {
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(program, "blkid");
            assert_eq!(args, ["-p", "-o", "export", "/dev/stdin"]);
            assert!(stdin.is_some(), "the scan must read the open handle");
            let (code, out) = self.0.ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory"))?;
            Ok(std::process::Output { status: std::process::ExitStatus::from_raw(code << 8), stdout: out.as_bytes().to_vec(), stderr: b"boom".to_vec() })
        }
    }

    #[test]
    fn signatures_from_blkid() {
        let f = Fixture::new();
        let img = f.image(&[]);
        let h = fs::File::open(&img).unwrap();
        // Real blkid on real signatures.
        assert_eq!(scan_signatures(&SystemRunner, &h).unwrap(), Vec::<String>::new());
        let mk =
            std::process::Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&img).status().expect("mkfs.ext4 is needed by this test: apt-get install e2fsprogs");
        assert!(mk.success());
        assert_eq!(scan_signatures(&SystemRunner, &h).unwrap(), vec!["ext4 (filesystem)".to_string()]);
        // Exit codes and output as blkid documents them.
        let out = "DEVNAME=/dev/stdin\nTYPE=LVM2_member\nUSAGE=raid\nPTTYPE=gpt\n";
        assert_eq!(scan_signatures(&Fixed(Some((0, out))), &h).unwrap(), vec!["LVM2_member (raid)".to_string(), "gpt partition table".to_string()]);
        assert_eq!(scan_signatures(&Fixed(Some((2, ""))), &h).unwrap(), Vec::<String>::new());
        assert_eq!(scan_signatures(&Fixed(Some((8, ""))), &h).unwrap(), vec!["ambivalent (several contradicting)".to_string()]);
        let e = scan_signatures(&Fixed(Some((4, ""))), &h).unwrap_err();
        assert!(e.starts_with("blkid failed (exit status: 4): boom"), "{e}");
        let e = scan_signatures(&Fixed(None), &h).unwrap_err();
        assert_eq!(e, "cannot run blkid: No such file or directory");
        // A scan that cannot run refuses, naming what to install.
        let nvme = Fixture::new();
        nvme_fixture(&nvme);
        let roots = nvme.roots();
        let info = block_info(&roots, "nvme0n1", (259, 0));
        let consent = ["S5GXNX0T123456".to_string()];
        let c = WriteCheck { runner: &Fixed(None), ..check(&roots, &consent) };
        let r = check_block_writable(&img, &h, &info, &c).unwrap_err();
        assert_eq!(r.reasons, vec![RefusalReason::SignatureScanFailed { error: "cannot run blkid: No such file or directory".into() }]);
        assert!(r.to_string().contains("install util-linux's `blkid`"), "{r}");
    }

    #[test]
    fn dev_split() {
        assert_eq!(split_dev(0x0000_0000_0000_0703), (7, 3));
        assert_eq!(split_dev((259u64 << 8) | 1), (259, 1));
        // makedev(259, 300) = 0x11032C (minor bits above 8 go to bits 20+).
        assert_eq!(split_dev(0x11_032C), (259, 300));
    }
}
