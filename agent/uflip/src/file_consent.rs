//! Write clearance for regular-file targets: the same care as for devices (issue 32 §5). A file may
//! be written without consent only when it is scratch: the probe created it, it was empty when
//! opened, or it carries the probe's own scratch marker (the `user.wattflip.scratch` extended
//! attribute, naming the file's inode, so a copy made with `cp -a` does not inherit it). Any other
//! existing file needs destroy consent naming it, and one carrying a filesystem or other signature
//! also needs the separate signature override. Whatever else: never a file that backs a loop
//! device, compared by the backing inode ([`crate::loopid`]), nor an active swap file
//! (`<procfs>/swaps`, compared by inode).
//!
//! To add a check: push a [`RefusalReason`] from [`check_file_writable`] (its `#[error]` text says
//! what to do).

use crate::loopid::BackingId;
use crate::safety::{self, BackingMatch, HostRoots, Refusal, RefusalReason, WriteCheck};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The extended attribute that marks a file the probe made for itself.
pub const SCRATCH_XATTR: &str = "user.wattflip.scratch";

/// Sampled blocks of the content checksum: the first, the last and this many evenly spaced.
const SAMPLES: u64 = 16;
const SAMPLE_BYTES: u64 = 4096;

/// The marker's value for the open file as it is now: its inode (a `cp -a` copy does not inherit
/// it), and what binds it to the content the probe left: size, mtime (ns) and a checksum of
/// sampled blocks. A file changed since (filled with user data, truncated, rewritten) no longer
/// matches, so it needs consent again. Setting the attribute changes ctime, not mtime.
fn marker_value(handle: &fs::File) -> std::io::Result<String> {
    let meta = handle.metadata()?;
    let sample = sample_checksum(handle, meta.len())?;
    Ok(format!(
        "wattflip-uflip scratch file v2, inode {}, size {}, mtime {}.{:09}, sample {sample:016x}",
        meta.ino(),
        meta.len(),
        meta.mtime(),
        meta.mtime_nsec()
    ))
}

/// FNV-1a over the sampled blocks, read through a buffered descriptor of our own (the probe's
/// handle is O_DIRECT, which needs aligned buffers).
fn sample_checksum(handle: &fs::File, len: u64) -> std::io::Result<u64> {
    use std::os::unix::fs::FileExt as _;
    use std::os::unix::io::AsRawFd as _;
    let reader = fs::File::open(format!("/proc/self/fd/{}", handle.as_raw_fd()))?;
    let mut offsets: Vec<u64> = (0..SAMPLES).map(|i| len / SAMPLES * i).collect();
    offsets.push(len.saturating_sub(SAMPLE_BYTES));
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut buf = vec![0u8; SAMPLE_BYTES as usize];
    for off in offsets {
        let want = usize::try_from(SAMPLE_BYTES.min(len - off.min(len))).unwrap_or(0);
        let got = buf.get_mut(..want).unwrap_or_default();
        reader.read_exact_at(got, off)?;
        for b in off.to_le_bytes().iter().chain(got.iter()) {
            hash = (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    Ok(hash)
}

/// Marks the open file as the probe's scratch file, as it is now: called after the probe's own
/// writes (the fill, the end of a probe). Fails on filesystems without user extended attributes;
/// the file is then scratch for this process only (the next probe needs consent).
pub fn mark_scratch(handle: &fs::File) -> std::io::Result<()> {
    rustix::fs::fsetxattr(handle, SCRATCH_XATTR, marker_value(handle)?.as_bytes(), rustix::fs::XattrFlags::empty())?;
    Ok(())
}

/// Whether the open file carries the probe's scratch marker for its own inode and its content
/// as the probe left it.
pub fn is_marked_scratch(handle: &fs::File) -> bool {
    let mut buf = [0u8; 256];
    let Ok(n) = rustix::fs::fgetxattr(handle, SCRATCH_XATTR, &mut buf[..]) else {
        return false;
    };
    marker_value(handle).is_ok_and(|want| buf.get(..n).is_some_and(|v| v == want.as_bytes()))
}

/// What a file write check needs besides the file: the device check's inputs (a file is consented
/// when a consent entry names it: any path to the same inode, with or without a `file:` prefix)
/// and whether the file is scratch.
#[derive(Debug, Clone, Copy)]
pub struct FileCheck<'a> {
    /// Roots, consent, runner (blkid and losetup) and the signature override.
    pub write: WriteCheck<'a>,
    /// The probe created the file or found it empty (known to the target that opened it).
    pub scratch: bool,
}

/// Whether a consent entry names the file with `(st_dev, st_ino)` = `id`.
fn consented(consent: &[String], id: (u64, u64)) -> bool {
    consent.iter().any(|c| fs::metadata(c.strip_prefix("file:").unwrap_or(c)).is_ok_and(|m| m.is_file() && (m.dev(), m.ino()) == id))
}

/// Refusals for writing the regular file open as `handle` (named `path` in messages): it must
/// not back a loop device, and unless it is scratch it must be consented to (and, carrying a
/// signature, have the override). `Ok` when cleared.
pub fn check_file_writable(path: &Path, handle: &fs::File, check: &FileCheck<'_>) -> Result<(), Refusal> {
    let meta = handle.metadata().map_err(|e| Refusal {
        device: path.to_path_buf(),
        reasons: vec![RefusalReason::HandleChanged { detail: format!("fstat of the open file failed: {e}") }],
    })?;
    let ids = safety::loop_ids(check.write.roots, check.write.runner);
    let id = BackingId { dev: safety::split_dev(meta.dev()), ino: meta.ino() };
    let mut reasons: Vec<RefusalReason> = safety::loops_backed_by(check.write.roots, &ids, path, id)
        .into_iter()
        .map(|(n, m)| {
            let loop_dev = format!("/dev/{n}");
            match m {
                BackingMatch::Same => RefusalReason::BacksLoopDevice { loop_dev },
                BackingMatch::Unanswered { backing } => RefusalReason::BackingUnanswered { loop_dev, backing },
                BackingMatch::Unknown { backing, error } => RefusalReason::BackingIdentityUnknown { loop_dev, backing, error },
            }
        })
        .collect();
    reasons.extend(swap_files(check.write.roots, (meta.dev(), meta.ino())).into_iter().map(|swap_file| RefusalReason::InUseAsSwap { swap_file }));
    if !check.scratch && meta.len() > 0 && !is_marked_scratch(handle) {
        if !consented(check.write.consent, (meta.dev(), meta.ino())) {
            reasons.push(RefusalReason::FileNoConsent { path: path.display().to_string(), bytes: meta.len() });
        }
        if !check.write.overwrite_signatures {
            match safety::scan_signatures(check.write.runner, handle) {
                Ok(found) => reasons.extend(found.into_iter().map(|kind| RefusalReason::Signature { kind })),
                Err(error) => reasons.push(RefusalReason::SignatureScanFailed { error }),
            }
        }
    }
    if reasons.is_empty() {
        Ok(())
    } else {
        Err(Refusal { device: path.to_path_buf(), reasons })
    }
}

/// Active swap files in `<procfs>/swaps` that are the file `(st_dev, st_ino)` = `id` (each
/// `stat`ed with the loop checks' timeout; one that does not answer is not this file's concern:
/// the kernel's ETXTBSY still stops the writes).
fn swap_files(roots: &HostRoots, id: (u64, u64)) -> Vec<String> {
    let Ok(text) = fs::read_to_string(roots.procfs.join("swaps")) else {
        return Vec::new();
    };
    // "Filename\tType\tSize\tUsed\tPriority"; spaces in names are written as \040.
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (name, kind) = (f.next()?, f.next()?);
            (kind == "file").then(|| name.replace("\\040", " "))
        })
        .filter(|name| safety::stat_within(Path::new(name), safety::STAT_TIMEOUT).ok().flatten() == Some(id))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_names_its_inode() {
        let dir = tempfile::Builder::new().prefix("uflip-scratch-").tempdir_in(crate::test_dir()).unwrap();
        let p = dir.path().join("f");
        fs::write(&p, b"x").unwrap();
        let f = fs::File::open(&p).unwrap();
        assert!(!is_marked_scratch(&f));
        mark_scratch(&f).unwrap();
        assert!(is_marked_scratch(&f));
        // A copy that keeps extended attributes (cp -a) carries another inode's marker: not scratch.
        let q = dir.path().join("copy");
        assert!(std::process::Command::new("cp").arg("-a").arg(&p).arg(&q).status().unwrap().success());
        let g = fs::File::open(&q).unwrap();
        let mut buf = [0u8; 256];
        let n = rustix::fs::fgetxattr(&g, SCRATCH_XATTR, &mut buf[..]).expect("cp -a keeps user xattrs");
        assert_eq!(&buf[..n], marker_value(&f).unwrap().as_bytes());
        assert!(!is_marked_scratch(&g));
    }

    /// issue 38: the marker is bound to the content the probe left, not only to the inode.
    #[test]
    fn the_marker_is_void_once_the_content_changes() {
        use std::io::Write as _;
        let dir = tempfile::Builder::new().prefix("uflip-scratch-").tempdir_in(crate::test_dir()).unwrap();
        let p = dir.path().join("f");
        fs::write(&p, vec![7u8; 1 << 20]).unwrap();
        let f = fs::File::open(&p).unwrap();
        mark_scratch(&f).unwrap();
        assert!(is_marked_scratch(&f));
        // Same size, one byte changed in the middle of a sampled block, mtime put back.
        let mtime = f.metadata().unwrap().modified().unwrap();
        let w = fs::OpenOptions::new().write(true).open(&p).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&w, &[8], 1 << 19).unwrap();
        w.set_modified(mtime).unwrap();
        assert_eq!(f.metadata().unwrap().modified().unwrap(), mtime);
        assert!(!is_marked_scratch(&f), "a changed sampled block keeps the marker");
        mark_scratch(&f).unwrap();
        assert!(is_marked_scratch(&f));
        // Appended to (size and mtime change).
        fs::OpenOptions::new().append(true).open(&p).unwrap().write_all(b"user").unwrap();
        assert!(!is_marked_scratch(&f), "an appended file keeps the marker");
    }
}
