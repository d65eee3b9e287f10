//! Issue 32 §5 and §6 with real files under O_DIRECT (in the target dir, on a disk-backed
//! filesystem): an existing file with data is written or grown only with destroy consent, one with
//! a filesystem signature only with the signature override too; a file the probe made (or found
//! empty) is its scratch file, a copy of it is not; growth is said before it happens; an active
//! swap file or a running executable is "in use", not a health or permission problem. Every test checksums every file involved.

// A panic is the failure report of these tests and their helpers
// (clippy.toml's allow-*-in-tests covers #[test] functions only, not the helpers they call).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;
use wattflip_uflip::*;

const MIB: u64 = 1 << 20;

fn work_dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("uflip-files").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    assert!(target::supports_direct_io(&d), "{} must support O_DIRECT (not tmpfs)", d.display());
    std::fs::canonicalize(d).unwrap()
}

/// A file of `size` bytes of xorshift data (any content that is not ours).
fn data_file(p: &Path, size: u64) {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let bytes: Vec<u8> = (0..size)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    std::fs::write(p, bytes).unwrap();
}

/// Checksum (64-bit FNV-1a) of the first `len` bytes of a file (all of it with `u64::MAX`).
fn checksum_of(p: &Path, len: u64) -> u64 {
    let bytes = std::fs::read(p).unwrap();
    let n = bytes.len().min(usize::try_from(len).unwrap_or(usize::MAX));
    bytes[..n].iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

fn checksum(p: &Path) -> u64 {
    checksum_of(p, u64::MAX)
}

fn must(cmd: &mut Command, package: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?} ({e}): this test needs it; install the Debian package {package}"));
    assert!(out.status.success(), "{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
}

fn write_plan(size: u64) -> Plan {
    let mut o = PlanOptions::quick(size);
    o.values.granularity_io_sizes = vec![4096];
    o.counts.io_count = [8, 8, 8, 8];
    o.counts.ignore_io = [0; 4];
    o.pause_between_runs = Duration::ZERO;
    plan(&o)
}

fn reasons_of(err: &ProbeError) -> Vec<RefusalReason> {
    match err {
        ProbeError::WritesRefused(r) => r.reasons.clone(),
        other => panic!("expected a refusal, got {other}"),
    }
}

/// Every growth announced through `TargetOptions::on_grow`, by every test of this binary.
static GROWN: Mutex<Vec<(PathBuf, u64, u64)>> = Mutex::new(Vec::new());

fn record_growth(p: &Path, from: u64, to: u64) {
    GROWN.lock().unwrap().push((p.to_path_buf(), from, to));
}

fn grown(p: &Path) -> Vec<(u64, u64)> {
    GROWN.lock().unwrap().iter().filter(|g| g.0 == p).map(|g| (g.1, g.2)).collect()
}

fn no_consent(p: &Path, bytes: u64) -> RefusalReason {
    RefusalReason::FileNoConsent { path: p.display().to_string(), bytes }
}

/// `head -c 8M /dev/urandom > f; probe --target f --size 8MiB` (and with a larger size).
#[test]
fn an_existing_file_with_data_is_written_or_grown_only_with_consent() {
    let dir = work_dir("consent");
    let f = dir.join("data.bin");
    data_file(&f, 8 * MIB);
    let before = checksum(&f);
    let t = Target::open(&TargetOptions::file(&f, 8 * MIB)).unwrap();
    let p = write_plan(t.size);
    let err = run(&t, &p, &mut NullObserver).unwrap_err();
    assert_eq!(reasons_of(&err), vec![no_consent(&f, 8 * MIB)]);
    assert!(err.to_string().contains(&format!("pass `--destroy-consent {}`", f.display())), "{err}");
    // Reading it is harmless and allowed.
    let rep = run(&t, &p.read_only(), &mut NullObserver).unwrap();
    assert!(rep.runs.iter().all(|r| r.status == RunStatus::Ok));
    // Growing it writes too: refused at open, before anything is said or written.
    let mut o = TargetOptions::file(&f, 16 * MIB);
    o.on_grow = Some(record_growth);
    match Target::open(&o).unwrap_err() {
        TargetError::Refused(r) => assert_eq!(r.reasons, vec![no_consent(&f, 8 * MIB)]),
        other => panic!("expected a refusal, got {other}"),
    }
    assert_eq!(grown(&f), vec![]);
    assert_eq!((checksum(&f), std::fs::metadata(&f).unwrap().len()), (before, 8 * MIB), "nothing unconsented changed");
    // Consent by any path naming the file (here a symlink): grown, and said before.
    let link = dir.join("link");
    std::os::unix::fs::symlink(&f, &link).unwrap();
    o.destroy_consent = vec![link.display().to_string()];
    let t = Target::open(&o).unwrap();
    assert_eq!(grown(&f), vec![(8 * MIB, 16 * MIB)]);
    assert_eq!(checksum_of(&f, 8 * MIB), before, "growing appends; the old content is there until written");
    let rep = run(&t, &write_plan(t.size), &mut NullObserver).unwrap();
    assert!(rep.runs.iter().all(|r| r.status == RunStatus::Ok));
}

/// `mkfs.ext4 f.img; probe --target f.img`: destroy consent alone is not enough.
#[test]
fn an_unattached_ext4_image_needs_consent_and_the_signature_override() {
    let dir = work_dir("ext4");
    let f = dir.join("fs.img");
    std::fs::File::create(&f).unwrap().set_len(16 * MIB).unwrap();
    must(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&f), "e2fsprogs");
    let before = checksum(&f);
    let ext4 = RefusalReason::Signature { kind: "ext4 (filesystem)".into() };
    let t = Target::open(&TargetOptions::file(&f, 0)).unwrap();
    assert_eq!(t.ensure_writable().unwrap_err().reasons, vec![no_consent(&f, 16 * MIB), ext4.clone()]);
    let mut o = TargetOptions::file(&f, 0);
    o.destroy_consent = vec![format!("file:{}", f.display())];
    let t = Target::open(&o).unwrap();
    let err = run(&t, &write_plan(t.size), &mut NullObserver).unwrap_err();
    assert_eq!(reasons_of(&err), vec![ext4]);
    assert_eq!(checksum(&f), before, "nothing unconsented changed");
    o.overwrite_signatures = true;
    Target::open(&o).unwrap().ensure_writable().unwrap();
}

/// A file the probe created carries its scratch marker: a later probe writes and grows it without
/// consent (the growth said first); a copy with its attributes (`cp -a`) is not scratch; an empty
/// existing file has nothing to lose.
#[test]
fn the_probes_own_file_is_scratch_and_a_copy_of_it_is_not() {
    let dir = work_dir("scratch");
    let f = dir.join("scratch.img");
    let mut o = TargetOptions::file(&f, 8 * MIB);
    o.on_grow = Some(record_growth);
    let t = Target::open(&o).unwrap();
    assert_eq!(grown(&f), vec![], "creating is not growing an existing file");
    run(&t, &write_plan(t.size), &mut NullObserver).unwrap();
    drop(t);
    o.file_size = 12 * MIB;
    let t = Target::open(&o).unwrap();
    assert_eq!(grown(&f), vec![(8 * MIB, 12 * MIB)]);
    t.ensure_writable().unwrap();
    let copy = dir.join("copy.img");
    must(Command::new("cp").arg("-a").arg(&f).arg(&copy), "coreutils");
    let before = checksum(&copy);
    let t = Target::open(&TargetOptions::file(&copy, 0)).unwrap();
    assert_eq!(t.ensure_writable().unwrap_err().reasons, vec![no_consent(&copy, 12 * MIB)]);
    assert_eq!(checksum(&copy), before);
    let empty = dir.join("empty.img");
    std::fs::File::create(&empty).unwrap();
    let t = Target::open(&TargetOptions::file(&empty, 4 * MIB)).unwrap();
    t.ensure_writable().unwrap();
}

/// Issue 38: a file that was empty when first probed carries the scratch marker; filled later with
/// 64 MiB of user data (same inode), it needs consent again, and its data stays as it was.
#[test]
fn a_scratch_file_filled_with_user_data_needs_consent_again() {
    use std::os::unix::fs::MetadataExt as _;
    let dir = work_dir("refilled");
    let f = dir.join("was-empty.img");
    std::fs::File::create(&f).unwrap();
    let t = Target::open(&TargetOptions::file(&f, 4 * MIB)).unwrap();
    run(&t, &write_plan(t.size), &mut NullObserver).unwrap();
    drop(t);
    // Unchanged since the probe: still its scratch file.
    Target::open(&TargetOptions::file(&f, 0)).unwrap().ensure_writable().unwrap();
    let ino = std::fs::metadata(&f).unwrap().ino();
    data_file(&f, 64 * MIB);
    assert_eq!(std::fs::metadata(&f).unwrap().ino(), ino, "the user data went into the same inode");
    let before = checksum(&f);
    let t = Target::open(&TargetOptions::file(&f, 0)).unwrap();
    assert_eq!(t.ensure_writable().unwrap_err().reasons, vec![no_consent(&f, 64 * MIB)]);
    let refused = run(&t, &write_plan(t.size), &mut NullObserver).unwrap_err();
    assert!(matches!(refused, ProbeError::WritesRefused(_)), "{refused}");
    assert_eq!(checksum(&f), before);
}

/// A running program's file cannot be opened for writing (ETXTBSY): said as "in use", not as a
/// permission problem.
#[test]
fn a_running_executable_is_reported_in_use() {
    let dir = work_dir("exec");
    let exe = dir.join("sleep-copy");
    std::fs::copy("/bin/sleep", &exe).unwrap();
    let before = checksum(&exe);
    let mut child = Command::new(&exe).arg("30").spawn().unwrap();
    let err = Target::open(&TargetOptions::file(&exe, 0)).unwrap_err();
    let _ = child.kill();
    let _ = child.wait();
    let msg = err.to_string();
    assert!(matches!(&err, TargetError::Open { source, .. } if source.raw_os_error() == Some(26)), "ETXTBSY expected: {msg}");
    assert!(msg.contains("it is in use as swap or as an executable") && !msg.contains("permissions"), "{msg}");
    assert_eq!(checksum(&exe), before);
}

/// swapoff on drop.
struct Swap(PathBuf);

impl Drop for Swap {
    fn drop(&mut self) {
        let _ = Command::new("swapoff").arg(&self.0).status();
    }
}

/// An active swap file, consented with the override: refused before any IO for being swap
/// (`/proc/swaps`, by inode). Had the check missed it (a swapon after it; here a procfs without
/// it), the kernel refuses the writes (ETXTBSY) and the error says the file is in use, not that
/// the device is unhealthy.
#[test]
fn an_active_swap_file_is_refused_as_swap_and_never_called_unhealthy() {
    let dir = work_dir("swap");
    let f = dir.join("swap.img");
    std::fs::write(&f, vec![0u8; (16 * MIB) as usize]).unwrap();
    must(Command::new("chmod").arg("600").arg(&f), "coreutils");
    must(Command::new("mkswap").arg(&f), "util-linux");
    must(Command::new("swapon").arg(&f), "util-linux (and root)");
    let _on = Swap(f.clone());
    let before = checksum(&f);
    let mut o = TargetOptions::file(&f, 0);
    o.destroy_consent = vec![f.display().to_string()];
    o.overwrite_signatures = true;
    let t = Target::open(&o).unwrap();
    let err = run(&t, &write_plan(t.size), &mut NullObserver).unwrap_err();
    assert_eq!(reasons_of(&err), vec![RefusalReason::InUseAsSwap { swap_file: f.display().to_string() }]);
    assert!(err.to_string().contains(&format!("`swapoff {}` first", f.display())), "{err}");
    // A procfs that does not list it: the kernel has the last word.
    let procfs = dir.join("proc");
    std::fs::create_dir_all(procfs.join("self")).unwrap();
    std::fs::write(procfs.join("swaps"), "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n").unwrap();
    std::fs::copy("/proc/self/mountinfo", procfs.join("self/mountinfo")).unwrap();
    o.roots = HostRoots { sysfs: "/sys".into(), procfs };
    let t = Target::open(&o).unwrap();
    let err = run(&t, &write_plan(t.size), &mut NullObserver).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(&err, ProbeError::Io { source, .. } if source.raw_os_error() == Some(26)), "ETXTBSY expected: {msg}");
    assert!(msg.contains("it is in use as swap or as an executable") && !msg.contains("health"), "{msg}");
    assert_eq!(checksum(&f), before);
}
