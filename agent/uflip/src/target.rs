//! Probe targets (brief §6, spec §9): a regular file (created and filled to the configured size on
//! a filesystem that supports O_DIRECT; written without consent only when scratch, see
//! [`crate::file_consent`]) or a whole block device (size, logical block size, model/serial from
//! sysfs, write clearance from [`crate::safety`]).
//!
//! A target is opened ONCE: [`Target::open`] resolves the path and opens it, and every check runs on
//! that open handle (`fstat` device number, the sysfs identity of that number, signatures read
//! through it). All IO of a probe goes through the handle (block devices: a write handle re-opened
//! from it with `O_EXCL`, which the kernel refuses while the device is mounted or held), never
//! through the path again, and [`Target::verify`] checks before every run that the handle still
//! names the consented device (re-bound loop device, detached device, re-pointed path).
//!
//! To add a target kind (e.g. an NVMe namespace by NSID): add a [`TargetKind`] variant, an `open_*`
//! constructor filling [`Target`], and make [`Target::open_for_writes`] and [`Target::verify`]
//! decide its write clearance.

use crate::file_consent::{self, FileCheck};
use crate::hostfs::{block_info_at, file_block_size, fill, fs_type_of, RAM_FILESYSTEMS};
pub use crate::hostfs::{supports_direct_io, FALLBACK_BLOCK_SIZE};
use crate::safety::{self, CommandRunner, HostRoots, Refusal, RefusalReason, SystemRunner};
use serde::{Deserialize, Serialize};
use std::fs::{self, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
#[derive(Debug, Clone)]
pub struct TargetOptions {
    /// File or device path.
    pub path: PathBuf,
    /// For files: create/fill the file to this many bytes (0 = use the existing length).
    pub file_size: u64,
    /// Device identities (serial, wwid, `loop:<backing file>`) and files (any path naming the
    /// file, optionally `file:`-prefixed) whose data may be destroyed.
    pub destroy_consent: Vec<String>,
    /// The separate override for a consented device that carries a filesystem, LUKS, LVM, RAID or
    /// partition-table signature (off: such a device is refused).
    pub overwrite_signatures: bool,
    /// sysfs/procfs roots.
    pub roots: HostRoots,
    /// Override the detected logical block size (bytes).
    pub logical_block_size: Option<u64>,
    /// Runs blkid for the signature scan (and losetup for loop backing identities).
    pub runner: Arc<dyn CommandRunner>,
    /// Told (path, current bytes, new bytes) right before an existing file is grown to the size
    /// asked for (the library never prints; the agent logs it).
    pub on_grow: Option<fn(&Path, u64, u64)>,
}

impl TargetOptions {
    /// Options for a file target of `size` bytes.
    pub fn file(path: impl Into<PathBuf>, size: u64) -> Self {
        TargetOptions {
            path: path.into(),
            file_size: size,
            destroy_consent: Vec::new(),
            overwrite_signatures: false,
            roots: HostRoots::default(),
            logical_block_size: None,
            runner: Arc::new(SystemRunner),
            on_grow: None,
        }
    }
    /// Options for a block device with a consent list.
    pub fn block(path: impl Into<PathBuf>, destroy_consent: Vec<String>) -> Self {
        TargetOptions {
            path: path.into(),
            file_size: 0,
            destroy_consent,
            overwrite_signatures: false,
            roots: HostRoots::default(),
            logical_block_size: None,
            runner: Arc::new(SystemRunner),
            on_grow: None,
        }
    }
}

/// Target errors; each names the path and says what to do.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// stat/open failed.
    #[error("cannot open probe target {path}: {source}; {}", crate::advice::write_advice(source, "check the path and permissions"))]
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
    #[error("cannot fill probe file {path} to {size} bytes: {source}; {}", crate::advice::write_advice(source, "check free space"))]
    Fill {
        /// Path.
        path: PathBuf,
        /// Requested size.
        size: u64,
        /// OS error.
        source: std::io::Error,
    },
    /// The file would have to be filled (written) but may not be written.
    #[error("{0}")]
    Refused(Refusal),
}

/// An opened target: the one handle every check and every IO of a probe goes through.
#[derive(Debug, Clone)]
pub struct Target {
    /// Path as given.
    pub path: PathBuf,
    /// What the open handle names: `/dev/<kernel name>` of its device number for a block device,
    /// the file's path at open time for a file. Reports name this, not the path.
    pub device: PathBuf,
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
    /// The separate signature override (see [`TargetOptions::overwrite_signatures`]).
    pub overwrite_signatures: bool,
    /// Host roots used for checks.
    pub roots: HostRoots,
    /// (st_dev, st_ino) of the opened file, or (st_rdev, 0) of the opened block device.
    handle_id: (u64, u64),
    /// The handle opened once: read-only for block devices, read-write (O_DIRECT|O_DSYNC) for files.
    handle: Arc<fs::File>,
    /// Block devices: the exclusive write handle, once every write check passed on it; kept (and
    /// so the exclusive claim) as long as the target, shared by its clones.
    write_handle: Arc<std::sync::OnceLock<Arc<fs::File>>>,
    runner: Arc<dyn CommandRunner>,
    /// Files: the probe created it or found it empty, so it may be written without consent.
    scratch: bool,
}

fn changed(device: &Path, detail: String) -> Refusal {
    Refusal { device: device.to_path_buf(), reasons: vec![RefusalReason::HandleChanged { detail }] }
}

/// The path the kernel gives for our own descriptor (`/proc/self/fd/N` is our own process's view,
/// not host state, so it is not under [`HostRoots`]).
fn fd_path(f: &fs::File) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd()))
}

impl Target {
    /// Open a file or a block device (kind detected from the path; the path is resolved once).
    pub fn open(opts: &TargetOptions) -> Result<Target, TargetError> {
        match fs::metadata(&opts.path) {
            Ok(m) if m.file_type().is_block_device() => Target::open_block(opts),
            Ok(m) if m.is_file() => Target::open_file(opts),
            Ok(_) => Err(TargetError::NotFileOrBlock { path: opts.path.clone() }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Target::open_file(opts),
            Err(source) => Err(TargetError::Open { path: opts.path.clone(), source }),
        }
    }

    fn open_file(opts: &TargetOptions) -> Result<Target, TargetError> {
        let path = opts.path.clone();
        let oerr = |source| TargetError::Open { path: path.clone(), source };
        let (direct, created) = open_direct(opts)?;
        // Leaves nothing of ours behind when the file cannot be a target.
        let forget = |e: TargetError| {
            if created {
                let _ = fs::remove_file(&path);
            }
            e
        };
        let meta = direct.metadata().map_err(oerr)?;
        if !meta.is_file() {
            return Err(TargetError::NotFileOrBlock { path });
        }
        let dev = safety::split_dev(meta.dev());
        let fstype = fs_type_of(&opts.roots, dev).unwrap_or_else(|| "unknown".to_string());
        if RAM_FILESYSTEMS.contains(&fstype.as_str()) {
            drop(direct);
            return Err(forget(TargetError::DirectIoUnsupported { path: path.clone(), fstype }));
        }
        let lbs = opts.logical_block_size.unwrap_or_else(|| file_block_size(&opts.roots, dev));
        let size = if opts.file_size > 0 { opts.file_size / lbs * lbs } else { meta.len() / lbs * lbs };
        if size == 0 {
            return Err(forget(TargetError::Empty { path: path.clone() }));
        }
        // Nothing to destroy in a file we made or found empty: it becomes our scratch file.
        let fresh = created || meta.len() == 0;
        let scratch = fresh || file_consent::is_marked_scratch(&direct);
        if meta.len() < size {
            // Filling writes: the same clearance as a writing probe.
            let write = safety::WriteCheck {
                roots: &opts.roots,
                consent: &opts.destroy_consent,
                runner: opts.runner.as_ref(),
                overwrite_signatures: opts.overwrite_signatures,
            };
            let check = FileCheck { write, scratch };
            file_consent::check_file_writable(&path, &direct, &check).map_err(TargetError::Refused)?;
            if let Some(say) = opts.on_grow.filter(|_| !created) {
                say(&path, meta.len(), size);
            }
            // Fill with real data (not a sparse file or fallocate's unwritten extents): reads of
            // holes never reach the device and would make read benchmarks meaningless.
            fill(&direct, meta.len() / lbs * lbs, size, lbs).map_err(|source| TargetError::Fill { path: path.clone(), size, source })?;
        }
        if scratch {
            // The marker binds the file's content as the probe leaves it (re-marked when a probe
            // ends). Best effort: without user xattrs the next probe of it needs consent.
            let _ = file_consent::mark_scratch(&direct);
        }
        let device = fs::read_link(fd_path(&direct)).unwrap_or_else(|_| path.clone());
        Ok(Target {
            path,
            device,
            kind: TargetKind::File,
            size,
            logical_block_size: lbs,
            model: None,
            serial: None,
            firmware: None,
            identity: None,
            block: None,
            destroy_consent: opts.destroy_consent.clone(),
            overwrite_signatures: opts.overwrite_signatures,
            roots: opts.roots.clone(),
            handle_id: (meta.dev(), meta.ino()),
            handle: Arc::new(direct),
            write_handle: Arc::default(),
            runner: opts.runner.clone(),
            scratch,
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

    fn open_block(opts: &TargetOptions) -> Result<Target, TargetError> {
        let path = opts.path.clone();
        let oerr = |source| TargetError::Open { path: path.clone(), source };
        // Read-only and shared: reads are allowed on any device; writes get their own exclusive
        // handle re-opened from this one (open_for_writes).
        let mut f = OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(&path).map_err(oerr)?;
        let meta = f.metadata().map_err(oerr)?;
        if !meta.file_type().is_block_device() {
            return Err(TargetError::NotFileOrBlock { path });
        }
        // Every fact below comes from the handle's device number, not from the path.
        let info = block_info_at(&path, &opts.roots, meta.rdev());
        let device = if info.name.is_empty() { path.clone() } else { PathBuf::from("/dev").join(&info.name) };
        // Seeking to the end of a block device yields its size, without an ioctl (and without unsafe).
        let size = f.seek(SeekFrom::End(0)).map_err(oerr)?;
        let lbs = opts.logical_block_size.or(info.logical_block_size).unwrap_or(FALLBACK_BLOCK_SIZE);
        if size == 0 {
            return Err(TargetError::Empty { path });
        }
        Ok(Target {
            path,
            device,
            kind: TargetKind::Block,
            size: size / lbs * lbs,
            logical_block_size: lbs,
            model: info.model.clone(),
            serial: info.serial.clone(),
            firmware: info.firmware.clone(),
            identity: info.identity.clone(),
            block: Some(info),
            destroy_consent: opts.destroy_consent.clone(),
            overwrite_signatures: opts.overwrite_signatures,
            roots: opts.roots.clone(),
            handle_id: (meta.rdev(), 0),
            handle: Arc::new(f),
            write_handle: Arc::default(),
            runner: opts.runner.clone(),
            scratch: false,
        })
    }

    /// What a file's write check needs from this target.
    fn file_check(&self) -> FileCheck<'_> {
        FileCheck { write: self.write_check(), scratch: self.scratch }
    }

    /// What a write check needs from this target.
    fn write_check(&self) -> safety::WriteCheck<'_> {
        safety::WriteCheck { roots: &self.roots, consent: &self.destroy_consent, runner: self.runner.as_ref(), overwrite_signatures: self.overwrite_signatures }
    }

    /// Re-marks a scratch file after the probe's writes, binding the marker to what the probe
    /// left in it ([`file_consent::mark_scratch`]); nothing for devices and consented files.
    pub fn seal_scratch(&self) {
        if self.kind == TargetKind::File && self.scratch {
            let _ = file_consent::mark_scratch(&self.handle);
        }
    }

    /// The handle opened by [`Target::open`] (read-only for block devices).
    pub fn handle(&self) -> &Arc<fs::File> {
        &self.handle
    }

    /// Whether writes are allowed right now: files when scratch or consented (see
    /// [`file_consent`]) and not backing a loop device; block devices
    /// only after every check of [`safety::check_block_writable`] passes on an exclusive handle,
    /// which the target then keeps (see [`Target::open_for_writes`]).
    pub fn ensure_writable(&self) -> Result<(), Refusal> {
        self.open_for_writes().map(|_| ())
    }

    /// The handle all IO of a writing probe goes through, after every write check passed on it.
    /// Block devices: re-opened from the checked handle (`/proc/self/fd/N`, never the path) with
    /// `O_RDWR|O_DIRECT|O_DSYNC|O_EXCL`; the target keeps it, so the exclusive claim lasts as long
    /// as the target (across the probes of a sweep too): the device cannot be mounted, claimed or
    /// re-bound under it. Later calls only [`Target::verify`] the kept handle.
    pub fn open_for_writes(&self) -> Result<Arc<fs::File>, Refusal> {
        if let Some(w) = self.write_handle.get() {
            self.verify(w, true)?;
            return Ok(w.clone());
        }
        self.verify(&self.handle, false)?;
        let info = match (&self.kind, &self.block) {
            (TargetKind::File, _) => {
                file_consent::check_file_writable(&self.device, &self.handle, &self.file_check())?;
                return Ok(self.handle.clone());
            }
            (TargetKind::Block, Some(info)) => info,
            (TargetKind::Block, None) => return Err(Refusal { device: self.device.clone(), reasons: vec![RefusalReason::NoIdentity] }),
        };
        let excl = OpenOptions::new().read(true).write(true).custom_flags(libc::O_DIRECT | libc::O_DSYNC | libc::O_EXCL).open(fd_path(&self.handle));
        let check = self.write_check();
        let scan_on = excl.as_ref().unwrap_or(&self.handle);
        let checked = safety::check_block_writable(&self.device, scan_on, info, &check);
        match (excl, checked) {
            (Ok(w), Ok(_)) => {
                // The re-open went through our own descriptor, but make sure it is the same device.
                self.verify(&w, true)?;
                Ok(self.write_handle.get_or_init(|| Arc::new(w)).clone())
            }
            (Ok(_), Err(r)) => Err(r),
            (Err(e), checked) => {
                let mut reasons = checked.err().map(|r| r.reasons).unwrap_or_default();
                reasons.push(RefusalReason::Busy { error: e.to_string() });
                Err(Refusal { device: self.device.clone(), reasons })
            }
        }
    }

    /// Check, before a run, that `handle` still names the device or file that was checked: same
    /// device number (or inode), same sysfs identity, a loop device still bound to the same backing
    /// inode and not detached, the path not re-pointed elsewhere; with `writing`, also not mounted
    /// and (files) not backing a loop device. A missing path is fine (udev re-creates links).
    pub fn verify(&self, handle: &fs::File, writing: bool) -> Result<(), Refusal> {
        let dev_name = self.device.display().to_string();
        let meta = handle.metadata().map_err(|e| changed(&self.device, format!("fstat of the open handle of {dev_name} failed: {e}")))?;
        match self.kind {
            TargetKind::File => {
                if (meta.dev(), meta.ino()) != self.handle_id {
                    return Err(changed(&self.device, format!("the open handle no longer names {dev_name}")));
                }
                if let Ok(m) = fs::metadata(&self.path) {
                    if (m.dev(), m.ino()) != self.handle_id {
                        return Err(changed(
                            &self.device,
                            format!("{} now names another file than the {dev_name} the probe opened and checked", self.path.display()),
                        ));
                    }
                }
                if writing {
                    file_consent::check_file_writable(&self.device, handle, &self.file_check())?;
                }
                Ok(())
            }
            TargetKind::Block => {
                let Some(info) = &self.block else {
                    return Err(Refusal { device: self.device.clone(), reasons: vec![RefusalReason::NoIdentity] });
                };
                if (meta.rdev(), 0) != self.handle_id {
                    return Err(changed(&self.device, format!("the open handle no longer names {dev_name}")));
                }
                let dev = info.dev;
                let now = safety::block_name(&self.roots, dev).map(|n| safety::block_info(&self.roots, &n, dev));
                let Some(now) = now else {
                    return Err(changed(&self.device, format!("{dev_name} (device {}:{}) is gone from sysfs", dev.0, dev.1)));
                };
                if now.name != info.name || now.identity != info.identity {
                    return Err(changed(
                        &self.device,
                        format!(
                            "{dev_name} now identifies as {:?} ({}), not the checked and consented {:?}",
                            now.identity.as_deref().unwrap_or("nothing"),
                            now.name,
                            info.identity.as_deref().unwrap_or("nothing")
                        ),
                    ));
                }
                if now.diskseq != info.diskseq || now.loop_backing != info.loop_backing {
                    return Err(changed(
                        &self.device,
                        format!(
                            "{dev_name} was re-bound: it now serves {} (disk sequence {}), not the checked {} (disk sequence {})",
                            now.loop_backing.as_deref().unwrap_or("other media"),
                            now.diskseq.map_or("?".into(), |d| d.to_string()),
                            info.loop_backing.as_deref().unwrap_or("media"),
                            info.diskseq.map_or("?".into(), |d| d.to_string()),
                        ),
                    ));
                }
                if info.loop_autoclear == Some(false) && now.loop_autoclear == Some(true) {
                    return Err(changed(&self.device, format!("{dev_name} was detached (losetup -d) during the probe")));
                }
                if let Ok(m) = fs::metadata(&self.path) {
                    let same = m.file_type().is_block_device() && m.rdev() == meta.rdev();
                    if !same {
                        let other = if m.file_type().is_block_device() {
                            safety::block_name(&self.roots, safety::split_dev(m.rdev())).map(|n| format!("/dev/{n}")).unwrap_or_else(|| "another device".into())
                        } else {
                            "something else".into()
                        };
                        return Err(changed(
                            &self.device,
                            format!("{} now points to {other}, not to {dev_name} which the probe opened and checked", self.path.display()),
                        ));
                    }
                }
                if writing {
                    let mut devs = vec![dev];
                    devs.extend(now.partitions.iter().map(|p| p.1));
                    let reasons: Vec<RefusalReason> = safety::mounts_of(&self.roots, &devs, &self.device)
                        .into_iter()
                        .map(|(source_dev, mount_point)| RefusalReason::Mounted { source_dev, mount_point })
                        .collect();
                    if !reasons.is_empty() {
                        return Err(Refusal { device: self.device.clone(), reasons });
                    }
                }
                Ok(())
            }
        }
    }
}

/// Opens (creating it when absent, and then knowing it is ours) the file target with
/// `O_RDWR|O_DIRECT|O_DSYNC`: the one handle (O_DSYNC for write-through writes, §9; no effect on
/// reads). O_DIRECT support is a property of the filesystem: tmpfs rejects the open with EINVAL.
fn open_direct(opts: &TargetOptions) -> Result<(fs::File, bool), TargetError> {
    let path = &opts.path;
    let flags = libc::O_DIRECT | libc::O_DSYNC;
    let (opened, created) = match OpenOptions::new().read(true).write(true).create_new(true).custom_flags(flags).open(path) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => (OpenOptions::new().read(true).write(true).custom_flags(flags).open(path), false),
        other => (other, true),
    };
    match opened {
        Ok(f) => Ok((f, created)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            if created {
                let _ = fs::remove_file(path); // do not leave our empty file behind
            }
            let fstype = fs::metadata(path.parent().unwrap_or(Path::new(".")))
                .ok()
                .and_then(|m| fs_type_of(&opts.roots, safety::split_dev(m.dev())))
                .unwrap_or_else(|| "unknown".to_string());
            Err(TargetError::DirectIoUnsupported { path: path.clone(), fstype })
        }
        Err(source) => Err(TargetError::Open { path: path.clone(), source }),
    }
}

/// Summary of a target for reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetInfo {
    /// Path as given.
    pub path: PathBuf,
    /// The device (or file) the probe actually opened and wrote: `/dev/<kernel name>` of the
    /// handle's device number (absent in reports written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<PathBuf>,
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
            device: Some(t.device.clone()),
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
