//! Probe targets (brief §6, spec §9): a regular file (created and filled to the configured size on
//! a filesystem that supports O_DIRECT) or a whole block device (size, logical block size,
//! model/serial from sysfs, write clearance from [`crate::safety`]).
//!
//! To add a target kind (e.g. an NVMe namespace by NSID): add a [`TargetKind`] variant, an `open_*`
//! constructor filling [`Target`], and make [`Target::ensure_writable`] decide its write clearance.

use crate::safety::{self, HostRoots, Refusal};
use serde::{Deserialize, Serialize};
use std::fs::{self, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// File or block device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TargetKind {
    /// A regular file.
    File,
    /// A whole block device.
    Block,
}

impl TargetKind {
    /// "file"/"block".
    pub fn as_str(self) -> &'static str {
        match self {
            TargetKind::File => "file",
            TargetKind::Block => "block",
        }
    }
}

/// How to open a target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetOptions {
    /// File or device path.
    pub path: PathBuf,
    /// For files: create/fill the file to this many bytes (0 = use the existing length).
    pub file_size: u64,
    /// Device identities (serial, wwid, `loop:<backing file>`) whose data may be destroyed.
    pub destroy_consent: Vec<String>,
    /// sysfs/procfs roots.
    pub roots: HostRoots,
    /// Override the detected logical block size (bytes).
    pub logical_block_size: Option<u64>,
}

impl TargetOptions {
    /// Options for a file target of `size` bytes.
    pub fn file(path: impl Into<PathBuf>, size: u64) -> Self {
        TargetOptions {
            path: path.into(),
            file_size: size,
            destroy_consent: Vec::new(),
            roots: HostRoots::default(),
            logical_block_size: None,
        }
    }
    /// Options for a block device with a consent list.
    pub fn block(path: impl Into<PathBuf>, destroy_consent: Vec<String>) -> Self {
        TargetOptions {
            path: path.into(),
            file_size: 0,
            destroy_consent,
            roots: HostRoots::default(),
            logical_block_size: None,
        }
    }
}

/// Target errors; each names the path and says what to do.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// stat/open failed.
    #[error("cannot open probe target {path}: {source}; check the path and permissions")]
    Open {
        /// Path.
        path: PathBuf,
        /// OS error.
        source: std::io::Error,
    },
    /// The filesystem rejects O_DIRECT, or lives in RAM (tmpfs accepts O_DIRECT since Linux 6.6
    /// but never reaches a storage device).
    #[error("the filesystem holding {path} ({fstype}) does not support O_DIRECT or is not backed by a storage device (tmpfs, ramfs, some FUSE/overlay filesystems); put the probe file on a disk-backed filesystem such as /var/tmp")]
    DirectIoUnsupported {
        /// Path.
        path: PathBuf,
        /// Filesystem type from mountinfo ("unknown" if not found).
        fstype: String,
    },
    /// Neither a regular file nor a block device.
    #[error("probe target {path} is neither a regular file nor a block device; give a file path or /dev/<whole disk>")]
    NotFileOrBlock {
        /// Path.
        path: PathBuf,
    },
    /// Zero-sized target.
    #[error("probe target {path} has size 0; set file_size for a file target")]
    Empty {
        /// Path.
        path: PathBuf,
    },
    /// Creating or filling the file failed.
    #[error("cannot fill probe file {path} to {size} bytes: {source}; check free space")]
    Fill {
        /// Path.
        path: PathBuf,
        /// Requested size.
        size: u64,
        /// OS error.
        source: std::io::Error,
    },
}

/// An opened (stat'ed) target; files are opened again per run with O_DIRECT.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    /// Path.
    pub path: PathBuf,
    /// File or block.
    pub kind: TargetKind,
    /// Usable size in bytes.
    pub size: u64,
    /// Logical block size in bytes (O_DIRECT alignment unit).
    pub logical_block_size: u64,
    /// Model, when sysfs has one.
    pub model: Option<String>,
    /// Serial/wwid, when sysfs has one.
    pub serial: Option<String>,
    /// Firmware revision, when sysfs has one.
    pub firmware: Option<String>,
    /// Stable identity used for destroy consent (block devices).
    pub identity: Option<String>,
    /// Kernel name and number (block devices).
    pub block: Option<safety::BlockInfo>,
    /// Consent list (kept to re-check right before writing).
    pub destroy_consent: Vec<String>,
    /// Host roots used for checks.
    pub roots: HostRoots,
}

/// Default O_DIRECT alignment when the backing device cannot be found: 4096 is a multiple of every
/// common logical block size (§9).
pub const FALLBACK_BLOCK_SIZE: u64 = 4096;

impl Target {
    /// Open a file or a block device (kind detected from the path).
    pub fn open(opts: &TargetOptions) -> Result<Target, TargetError> {
        match fs::metadata(&opts.path) {
            Ok(m) if m.file_type().is_block_device() => Target::open_block(opts, m.rdev()),
            Ok(m) if m.is_file() => Target::open_file(opts),
            Ok(_) => Err(TargetError::NotFileOrBlock {
                path: opts.path.clone(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Target::open_file(opts),
            Err(source) => Err(TargetError::Open {
                path: opts.path.clone(),
                source,
            }),
        }
    }

    fn open_file(opts: &TargetOptions) -> Result<Target, TargetError> {
        let path = opts.path.clone();
        let oerr = |source| TargetError::Open {
            path: path.clone(),
            source,
        };
        let existed = path.exists();
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(oerr)?;
        let meta = f.metadata().map_err(oerr)?;
        drop(f);
        let dev = safety::split_dev(meta.dev());
        let fstype = fs_type_of(&opts.roots, dev).unwrap_or_else(|| "unknown".to_string());
        if RAM_FILESYSTEMS.contains(&fstype.as_str()) {
            if !existed {
                let _ = fs::remove_file(&path);
            }
            return Err(TargetError::DirectIoUnsupported { path, fstype });
        }
        // O_DIRECT support is a property of the filesystem: tmpfs rejects the open with EINVAL.
        let direct = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path);
        let direct = match direct {
            Ok(d) => d,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                if !existed {
                    let _ = fs::remove_file(&path); // do not leave our empty file behind
                }
                return Err(TargetError::DirectIoUnsupported { path, fstype });
            }
            Err(e) => return Err(oerr(e)),
        };
        let lbs = opts
            .logical_block_size
            .unwrap_or_else(|| file_block_size(&opts.roots, dev));
        let size = if opts.file_size > 0 {
            opts.file_size / lbs * lbs
        } else {
            meta.len() / lbs * lbs
        };
        if size == 0 {
            return Err(TargetError::Empty { path });
        }
        if meta.len() < size {
            // Fill with real data (not a sparse file or fallocate's unwritten extents): reads of
            // holes never reach the device and would make read benchmarks meaningless.
            fill(&direct, meta.len() / lbs * lbs, size, lbs).map_err(|source| {
                TargetError::Fill {
                    path: path.clone(),
                    size,
                    source,
                }
            })?;
        }
        Ok(Target {
            path,
            kind: TargetKind::File,
            size,
            logical_block_size: lbs,
            model: None,
            serial: None,
            firmware: None,
            identity: None,
            block: None,
            destroy_consent: opts.destroy_consent.clone(),
            roots: opts.roots.clone(),
        })
    }

    /// The stable identity (serial, wwid, `loop:<backing file>`) of the block device at `path`,
    /// read from sysfs without opening it; `None` for anything else or a device without one.
    /// Stores keyed by device (calibrations) use it to find a target before probing it.
    pub fn block_identity(path: &Path, roots: &HostRoots) -> Option<String> {
        let m = fs::metadata(path).ok()?;
        if !m.file_type().is_block_device() {
            return None;
        }
        block_info_at(path, roots, m.rdev()).identity
    }

    fn open_block(opts: &TargetOptions, rdev: u64) -> Result<Target, TargetError> {
        let path = opts.path.clone();
        let info = block_info_at(&path, &opts.roots, rdev);
        let mut f = fs::File::open(&path).map_err(|source| TargetError::Open {
            path: path.clone(),
            source,
        })?;
        // Seeking to the end of a block device yields its size, without an ioctl (and without unsafe).
        let size = f
            .seek(SeekFrom::End(0))
            .map_err(|source| TargetError::Open {
                path: path.clone(),
                source,
            })?;
        let lbs = opts
            .logical_block_size
            .or(info.logical_block_size)
            .unwrap_or(FALLBACK_BLOCK_SIZE);
        if size == 0 {
            return Err(TargetError::Empty { path });
        }
        Ok(Target {
            path,
            kind: TargetKind::Block,
            size: size / lbs * lbs,
            logical_block_size: lbs,
            model: info.model.clone(),
            serial: info.serial.clone(),
            firmware: info.firmware.clone(),
            identity: info.identity.clone(),
            block: Some(info),
            destroy_consent: opts.destroy_consent.clone(),
            roots: opts.roots.clone(),
        })
    }

    /// Whether writes are allowed right now: files always; block devices only after every check of
    /// [`safety::check_block_writable`] passes (re-run at every call, so a mount made after
    /// [`Target::open`] is still caught).
    pub fn ensure_writable(&self) -> Result<(), Refusal> {
        match (&self.kind, &self.block) {
            (TargetKind::File, _) => Ok(()),
            (TargetKind::Block, Some(info)) => {
                safety::check_block_writable(&self.path, info, &self.roots, &self.destroy_consent)
                    .map(|_| ())
            }
            (TargetKind::Block, None) => Err(Refusal {
                device: self.path.clone(),
                reasons: vec![safety::RefusalReason::NoIdentity],
            }),
        }
    }
}

/// Kernel name and sysfs facts of the block device node `path` with device number `rdev`.
fn block_info_at(path: &Path, roots: &HostRoots, rdev: u64) -> safety::BlockInfo {
    let dev = safety::split_dev(rdev);
    let name = safety::block_name(roots, dev)
        .or_else(|| {
            fs::canonicalize(path)
                .ok()
                .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        })
        .unwrap_or_default();
    safety::block_info(roots, &name, dev)
}

/// Filesystems that live in memory: a probe there never reaches a device.
const RAM_FILESYSTEMS: [&str; 3] = ["tmpfs", "ramfs", "devtmpfs"];

/// Filesystem type of the mount whose device number is `dev`, from `<procfs>/self/mountinfo`.
fn fs_type_of(roots: &HostRoots, dev: (u32, u32)) -> Option<String> {
    let text = fs::read_to_string(roots.procfs.join("self/mountinfo")).ok()?;
    let key = format!("{}:{}", dev.0, dev.1);
    text.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        (left.split(' ').nth(2) == Some(key.as_str()))
            .then(|| right.split(' ').next().unwrap_or("").to_string())
    })
}

/// Logical block size of the device holding a file: `<sysfs>/dev/block/M:m/queue/…`, or the parent's
/// queue for a partition; [`FALLBACK_BLOCK_SIZE`] when unknown (e.g. btrfs/overlay anonymous devs).
fn file_block_size(roots: &HostRoots, dev: (u32, u32)) -> u64 {
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

fn fill(f: &fs::File, from: u64, to: u64, lbs: u64) -> std::io::Result<()> {
    let chunk = (1u64 << 20) / lbs.max(1) * lbs.max(1);
    let mut buf = crate::engine::AlignedBuf::new(chunk.max(lbs) as usize, lbs.max(4096) as usize)?;
    buf.fill_pattern(0x5eed);
    let mut off = from;
    while off < to {
        let len = chunk.min(to - off) as usize;
        let n = f.write_at(&buf.as_slice()[..len], off)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::WriteZero,
                format!("write returned 0 at offset {off}"),
            ));
        }
        off += n as u64;
    }
    f.sync_all()
}

/// Summary of a target for reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetInfo {
    /// Path.
    pub path: PathBuf,
    /// "file"/"block".
    pub kind: TargetKind,
    /// Size in bytes.
    pub size: u64,
    /// Logical block size in bytes.
    pub logical_block_size: u64,
    /// Model when known.
    pub model: Option<String>,
    /// Serial when known.
    pub serial: Option<String>,
    /// Firmware revision when known (absent in reports written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware: Option<String>,
    /// Consent identity when known.
    pub identity: Option<String>,
}

impl From<&Target> for TargetInfo {
    fn from(t: &Target) -> Self {
        TargetInfo {
            path: t.path.clone(),
            kind: t.kind,
            size: t.size,
            logical_block_size: t.logical_block_size,
            model: t.model.clone(),
            serial: t.serial.clone(),
            firmware: t.firmware.clone(),
            identity: t.identity.clone(),
        }
    }
}

/// Whether `path`'s filesystem accepts O_DIRECT (used by tests and the example to pick a dir).
pub fn supports_direct_io(dir: &Path) -> bool {
    let p = dir.join(format!(".uflip-odirect-{}", std::process::id()));
    let ok = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&p)
        .is_ok();
    let _ = fs::remove_file(&p);
    ok
}
