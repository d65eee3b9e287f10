//! What the host says about where a probe target lives, and the file IO the target needs before
//! its one handle is used: the filesystem type and logical block size behind a file, a block
//! node's sysfs facts, whether a directory takes O_DIRECT, and filling a new probe file. Moved out
//! of `target` (which opens and checks targets) so it stays one concern; every host path is read
//! under [`HostRoots`]. A new host fact goes here as a function of the roots and a device number.

use crate::safety::{self, HostRoots};
use std::fs::{self, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// Default O_DIRECT alignment when the backing device cannot be found: 4096 is a multiple of every
/// common logical block size (§9).
pub const FALLBACK_BLOCK_SIZE: u64 = 4096;

/// Kernel name and sysfs facts of the block device node `path` with device number `rdev`.
pub(crate) fn block_info_at(path: &Path, roots: &HostRoots, rdev: u64) -> safety::BlockInfo {
    let dev = safety::split_dev(rdev);
    let name = safety::block_name(roots, dev)
        .or_else(|| fs::canonicalize(path).ok().and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned())))
        .unwrap_or_default();
    safety::block_info(roots, &name, dev)
}

/// Filesystems that live in memory: a probe there never reaches a device.
pub(crate) const RAM_FILESYSTEMS: [&str; 3] = ["tmpfs", "ramfs", "devtmpfs"];

/// Filesystem type of the mount whose device number is `dev`, from `<procfs>/self/mountinfo`.
pub(crate) fn fs_type_of(roots: &HostRoots, dev: (u32, u32)) -> Option<String> {
    let text = fs::read_to_string(roots.procfs.join("self/mountinfo")).ok()?;
    let key = format!("{}:{}", dev.0, dev.1);
    text.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        (left.split(' ').nth(2) == Some(key.as_str())).then(|| right.split(' ').next().unwrap_or("").to_string())
    })
}

/// Logical block size of the device holding a file: `<sysfs>/dev/block/M:m/queue/…`, or the parent's
/// queue for a partition; [`FALLBACK_BLOCK_SIZE`] when unknown (e.g. btrfs/overlay anonymous devs).
pub(crate) fn file_block_size(roots: &HostRoots, dev: (u32, u32)) -> u64 {
    let base = roots.sysfs.join(format!("dev/block/{}:{}", dev.0, dev.1));
    for rel in ["queue/logical_block_size", "../queue/logical_block_size"] {
        if let Ok(s) = fs::read_to_string(base.join(rel)) {
            if let Ok(v) = s.trim().parse::<u64>() {
                if v > 0 {
                    return v;
                }
            }
        }
    }
    FALLBACK_BLOCK_SIZE
}

pub(crate) fn fill(f: &fs::File, from: u64, to: u64, lbs: u64) -> std::io::Result<()> {
    let chunk = (1u64 << 20) / lbs.max(1) * lbs.max(1);
    let mut buf = crate::buf::AlignedBuf::new(chunk.max(lbs) as usize, lbs.max(4096) as usize)?;
    buf.fill_pattern(0x5eed);
    let mut off = from;
    while off < to {
        let len = chunk.min(to - off) as usize;
        let n = f.write_at(&buf.as_slice()[..len], off)?;
        if n == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::WriteZero, format!("write returned 0 at offset {off}")));
        }
        off += n as u64;
    }
    f.sync_all()
}

/// Whether `path`'s filesystem accepts O_DIRECT (used by tests and the example to pick a dir).
pub fn supports_direct_io(dir: &Path) -> bool {
    let p = dir.join(format!(".uflip-odirect-{}", std::process::id()));
    let ok = OpenOptions::new().read(true).write(true).create(true).truncate(true).custom_flags(libc::O_DIRECT).open(&p).is_ok();
    let _ = fs::remove_file(&p);
    ok
}
