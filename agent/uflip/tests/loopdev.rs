//! Write safety exercised for real on loop devices (root; issue 16): an unpartitioned device with
//! consent is written and the report names it; one carrying a mounted ext4, a partition table, a
//! LUKS header, no consent, an image file behind a mounted loop device, a loop device sharing its
//! image with a mounted one are refused; a symlink re-pointed and a loop device detached and
//! re-bound while the probe runs stop it; a device that stops completing IO is a device fault. A
//! deleted image is recognised by its backing inode, by any name (issue 32).
//! Every test checksums every device involved before and after. Loop devices, mounts and FUSE
//! daemons are released by drop guards. A test that cannot set up its scenario FAILS and names
//! what to install (tests/run.sh installs it).

// A panic is the failure report of these tests and their helpers
// (clippy.toml's allow-*-in-tests covers #[test] functions only, not the helpers they call).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use wattflip_uflip::*;

const MIB: u64 = 1 << 20;

/// Run a setup command; panic (fail the test) when it is missing or fails, naming the package.
fn must(cmd: &mut Command, package: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?} ({e}): this test needs it; install the Debian package {package} (tests/run.sh does)"));
    assert!(out.status.success(), "{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn require_root() {
    let uid = must(Command::new("id").arg("-u"), "coreutils");
    assert_eq!(uid, "0", "the loop-device tests need root (losetup, mount)");
}

fn tmp_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("uflip-loop");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::canonicalize(dir).unwrap()
}

/// An image file removed on drop.
struct Image(PathBuf);

impl Image {
    fn new(name: &str, size: u64) -> Image {
        Image::in_dir(&tmp_dir(), name, size)
    }
    fn in_dir(dir: &Path, name: &str, size: u64) -> Image {
        let p = dir.join(format!("{name}-{}.img", std::process::id()));
        let f = std::fs::File::create(&p).unwrap();
        f.set_len(size).unwrap();
        Image(p)
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A loop device detached on drop.
struct LoopDev {
    dev: PathBuf,
    img: PathBuf,
}

impl LoopDev {
    fn on(img: &Path, extra: &[&str]) -> LoopDev {
        require_root();
        let dev = must(Command::new("losetup").args(["-f", "--show"]).args(extra).arg(img), "mount");
        LoopDev { dev: PathBuf::from(dev), img: img.to_path_buf() }
    }
    fn identity(&self) -> String {
        format!("loop:{}", self.img.display())
    }
    fn name(&self) -> String {
        self.dev.file_name().unwrap().to_string_lossy().into_owned()
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        // Quiet: a device detached during its test (autoclear) is already gone.
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).stderr(std::process::Stdio::null()).status();
    }
}

/// A read-only mount undone on drop (declare it after the LoopDev so it drops first). Read-only,
/// so the filesystem itself never changes the device and a checksum taken after mounting holds.
struct Mount {
    dir: PathBuf,
}

impl Mount {
    fn ro(dev: &Path, name: &str) -> Mount {
        let dir = tmp_dir().join(format!("mnt-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        must(Command::new("mount").args(["-o", "ro,noload"]).arg(dev).arg(&dir), "mount");
        Mount { dir }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn mkfs_ext4(dev: &Path) {
    must(Command::new("mkfs.ext4").args(["-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"]).arg(dev), "e2fsprogs");
}

/// Checksum (64-bit FNV-1a) of a whole file or device, read through the page cache like the
/// loop driver's buffered IO.
fn checksum(p: &Path) -> u64 {
    let bytes = std::fs::read(p).unwrap();
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

fn write_plan(size: u64, pause: Duration) -> Plan {
    let mut o = PlanOptions::quick(size);
    o.values.granularity_io_sizes = vec![4096];
    o.counts.io_count = [8, 8, 8, 8];
    o.counts.ignore_io = [0; 4];
    o.pause_between_runs = pause;
    plan(&o)
}

fn small_write_plan(size: u64) -> Plan {
    write_plan(size, Duration::ZERO)
}

fn reasons_of(err: &ProbeError) -> Vec<RefusalReason> {
    match err {
        ProbeError::WritesRefused(r) => r.reasons.clone(),
        ProbeError::TargetChanged { refusal, .. } => refusal.reasons.clone(),
        other => panic!("expected a refusal, got {other}"),
    }
}

#[test]
fn consented_unpartitioned_loop_device_is_written_and_named_in_the_report() {
    let img = Image::new("clean", 32 * MIB);
    let lo = LoopDev::on(&img.0, &[]);
    let t = Target::open(&TargetOptions::block(&lo.dev, vec![lo.identity()])).unwrap();
    assert_eq!(t.kind, TargetKind::Block);
    assert_eq!(t.size, 32 * MIB);
    assert_eq!(t.identity.as_deref(), Some(lo.identity().as_str()));
    assert_eq!(t.logical_block_size, 512);
    assert_eq!(t.device, lo.dev);
    t.ensure_writable().unwrap();
    let p = small_write_plan(t.size);
    let rep = run(&t, &p, &mut NullObserver).unwrap();
    assert_eq!(rep.runs.len(), 4);
    assert!(rep.runs.iter().all(|r| r.status == RunStatus::Ok && r.target_kind == "block" && r.io_count == 8));
    assert_eq!(rep.target.identity.as_deref(), Some(lo.identity().as_str()));
    assert_eq!(rep.target.device.as_deref(), Some(lo.dev.as_path()));
    // The SW run really wrote the device: its first block is no longer zeros.
    let sw = p.runs.iter().find(|r| r.pattern == "SW").unwrap();
    let Work::Pattern(ps) = &sw.work else { panic!() };
    let bytes = std::fs::read(&lo.img).unwrap();
    let off = ps[0].target_offset as usize;
    assert!(bytes[off..off + 4096].iter().any(|&b| b != 0));
}

#[test]
fn loop_device_without_consent_is_refused_for_writes_only() {
    let img = Image::new("noconsent", 16 * MIB);
    let lo = LoopDev::on(&img.0, &[]);
    let t = Target::open(&TargetOptions::block(&lo.dev, vec!["loop:/some/other.img".into()])).unwrap();
    let refusal = t.ensure_writable().unwrap_err();
    assert_eq!(refusal.reasons, vec![RefusalReason::NoConsent { identity: lo.identity() }]);
    let before = checksum(&img.0);
    let p = small_write_plan(t.size);
    let err = run(&t, &p, &mut NullObserver).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ProbeError::WritesRefused(_)));
    assert!(msg.contains(&lo.dev.display().to_string()) && msg.contains(&format!("add exactly \"{}\"", lo.identity())), "{msg}");
    // Read-only benchmarks are allowed on any device.
    let rep = run(&t, &p.read_only(), &mut NullObserver).unwrap();
    assert_eq!(rep.runs.len(), 2);
    assert!(rep.runs.iter().all(|r| r.status == RunStatus::Ok));
    assert_eq!(checksum(&img.0), before);
}

#[test]
fn loop_device_with_mounted_ext4_is_refused_even_with_consent() {
    let img = Image::new("ext4", 32 * MIB);
    let lo = LoopDev::on(&img.0, &[]);
    mkfs_ext4(&lo.dev);
    let _m = Mount::ro(&lo.dev, "ext4");
    let before = checksum(&img.0);
    let t = Target::open(&TargetOptions::block(&lo.dev, vec![lo.identity()])).unwrap();
    let refusal = t.ensure_writable().unwrap_err();
    assert_eq!(refusal.reasons.len(), 3, "{refusal}");
    assert_eq!(refusal.reasons[0], RefusalReason::Mounted { source_dev: lo.dev.display().to_string(), mount_point: _m.dir.display().to_string() });
    assert_eq!(refusal.reasons[1], RefusalReason::Signature { kind: "ext4 (filesystem)".into() });
    assert!(matches!(&refusal.reasons[2], RefusalReason::Busy { error } if error.contains("busy")), "{refusal}");
    let err = run(&t, &small_write_plan(t.size), &mut NullObserver).unwrap_err();
    assert!(err.to_string().contains("unmount it"), "{err}");
    assert_eq!(checksum(&img.0), before);
}

/// Issue 16 point 8: this kernel has no partition-table parsers (no CONFIG_MSDOS_PARTITION), so
/// after sfdisk writes the table, `partx -a` registers the partition the way the kernel would.
#[test]
fn partitioned_loop_device_is_refused() {
    let img = Image::new("parted", 16 * MIB);
    let lo = LoopDev::on(&img.0, &["-P"]);
    let mut sf = Command::new("sfdisk")
        .arg("-q")
        .arg(&lo.dev)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run sfdisk ({e}): install the Debian package fdisk (tests/run.sh does)"));
    {
        use std::io::Write;
        sf.stdin.take().unwrap().write_all(b"label: dos\n,4MiB,L\n").unwrap();
    }
    assert!(sf.wait().unwrap().success());
    let name = lo.name();
    let part = format!("{name}p1");
    if !Path::new("/sys/block").join(&name).join(&part).exists() {
        must(Command::new("partx").arg("-a").arg(&lo.dev), "util-linux");
    }
    assert!(Path::new("/sys/block").join(&name).join(&part).exists());
    let before = checksum(&img.0);
    let t = Target::open(&TargetOptions::block(&lo.dev, vec![lo.identity()])).unwrap();
    let refusal = t.ensure_writable().unwrap_err();
    assert_eq!(refusal.reasons, vec![RefusalReason::Partitioned { partitions: vec![part] }, RefusalReason::Signature { kind: "dos partition table".into() }]);
    let err = run(&t, &small_write_plan(t.size), &mut NullObserver).unwrap_err();
    assert!(err.to_string().contains("wipefs -a"), "{err}");
    assert_eq!(checksum(&img.0), before);
}

/// Issue 16 point 5: a LUKS header is refused with consent; the separate override clears it.
#[test]
fn luks_header_is_refused_unless_signatures_are_overridden() {
    let img = Image::new("luks", 32 * MIB);
    let lo = LoopDev::on(&img.0, &[]);
    let mut fmt = Command::new("cryptsetup");
    fmt.args(["luksFormat", "-q", "--type", "luks2", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--key-file", "-"])
        .arg(&lo.dev)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = fmt.spawn().unwrap_or_else(|e| panic!("cannot run cryptsetup ({e}): install the Debian package cryptsetup-bin (tests/run.sh does)"));
    {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(b"secret").unwrap();
    }
    assert!(child.wait().unwrap().success(), "cryptsetup luksFormat failed");
    let before = checksum(&img.0);
    let t = Target::open(&TargetOptions::block(&lo.dev, vec![lo.identity()])).unwrap();
    let err = run(&t, &small_write_plan(t.size), &mut NullObserver).unwrap_err();
    assert_eq!(reasons_of(&err), vec![RefusalReason::Signature { kind: "crypto_LUKS (crypto)".into() }]);
    let msg = err.to_string();
    assert!(msg.contains(&lo.dev.display().to_string()) && msg.contains("--overwrite-signatures"), "{msg}");
    assert_eq!(checksum(&img.0), before);
    let mut o = TargetOptions::block(&lo.dev, vec![lo.identity()]);
    o.overwrite_signatures = true;
    let t = Target::open(&o).unwrap();
    t.ensure_writable().unwrap();
    // The cleared target keeps its exclusive claim: nobody else can open it for writing.
    let other = Target::open(&o).unwrap().ensure_writable().unwrap_err();
    assert!(matches!(other.reasons.as_slice(), [RefusalReason::Busy { .. }]), "{other}");
    drop(t);
    // The override does not replace consent.
    let mut o = TargetOptions::block(&lo.dev, vec![]);
    o.overwrite_signatures = true;
    let r = Target::open(&o).unwrap().ensure_writable().unwrap_err();
    assert_eq!(r.reasons, vec![RefusalReason::NoConsent { identity: lo.identity() }]);
}

/// Issue 16 point 3: the image file behind a mounted loop device, given as a file target.
#[test]
fn image_file_behind_a_loop_device_is_refused() {
    let img = Image::new("backing", 32 * MIB);
    let lo = LoopDev::on(&img.0, &[]);
    mkfs_ext4(&lo.dev);
    let _m = Mount::ro(&lo.dev, "backing");
    let before = checksum(&img.0);
    // Consented, with the signature override: only the loop check stands in the way.
    let t = Target::open(&consented_file(&img.0, 0)).unwrap();
    let err = run(&t, &small_write_plan(t.size), &mut NullObserver).unwrap_err();
    assert_eq!(reasons_of(&err), vec![RefusalReason::BacksLoopDevice { loop_dev: lo.dev.display().to_string() }]);
    assert!(err.to_string().contains(&format!("losetup -d {}", lo.dev.display())), "{err}");
    // Growing it would write too: refused at open.
    let grow = Target::open(&consented_file(&img.0, 64 * MIB)).unwrap_err();
    assert!(matches!(grow, TargetError::Refused(_)), "{grow}");
    assert_eq!(checksum(&img.0), before);
    assert_eq!(std::fs::metadata(&img.0).unwrap().len(), 32 * MIB);
}

/// File target options with destroy consent for `path` and the signature override, so that only
/// the loop checks can refuse.
fn consented_file(path: &Path, size: u64) -> TargetOptions {
    let mut o = TargetOptions::file(path, size);
    o.destroy_consent = vec![path.display().to_string()];
    o.overwrite_signatures = true;
    o
}

/// Issue 32 point 4: `mkfs.ext4 m.img; losetup; mount; ln m.img b.img; rm m.img`, then `b.img` as
/// the target, and `/proc/PID/fd/N` of a process holding the image once no name is left. The
/// loop's `backing_file` reads `m.img (deleted)`; the backing inode still says it is this file.
#[test]
fn a_deleted_image_behind_a_mounted_loop_device_is_refused_by_any_name() {
    let img = Image::new("deleted", 32 * MIB);
    let lo = LoopDev::on(&img.0, &[]);
    mkfs_ext4(&lo.dev);
    let _m = Mount::ro(&lo.dev, "deleted");
    let link = Image(img.0.with_extension("link.img"));
    std::fs::hard_link(&img.0, &link.0).unwrap();
    std::fs::remove_file(&img.0).unwrap();
    let sysfs = format!("/sys/block/{}/loop/backing_file", lo.name());
    assert_eq!(std::fs::read_to_string(&sysfs).unwrap().trim(), format!("{} (deleted)", img.0.display()));
    let before = checksum(&link.0);
    let want = vec![RefusalReason::BacksLoopDevice { loop_dev: lo.dev.display().to_string() }];
    let t = Target::open(&consented_file(&link.0, 0)).unwrap();
    assert_eq!(reasons_of(&run(&t, &small_write_plan(t.size), &mut NullObserver).unwrap_err()), want);
    drop(t);
    // No name left: only a descriptor of another holder reaches the image.
    let holder = std::fs::File::open(&link.0).unwrap();
    std::fs::remove_file(&link.0).unwrap();
    let by_fd = PathBuf::from(format!("/proc/{}/fd/{}", std::process::id(), std::os::fd::AsRawFd::as_raw_fd(&holder)));
    let t = Target::open(&consented_file(&by_fd, 0)).unwrap();
    assert_eq!(reasons_of(&run(&t, &small_write_plan(t.size), &mut NullObserver).unwrap_err()), want);
    let grow = Target::open(&consented_file(&by_fd, 64 * MIB)).unwrap_err();
    assert!(grow.to_string().contains(&format!("it is the backing file of {}", lo.dev.display())), "{grow}");
    assert_eq!(checksum(&by_fd), before, "the mounted filesystem's image was not written");
}

/// The refusal of a loop device whose image `img` is also behind `inner`, mounted at `m`.
fn shares_with_mounted(img: &Path, inner: &LoopDev, m: &Mount) -> RefusalReason {
    RefusalReason::SharedBackingFile {
        backing: img.display().to_string(),
        other: inner.dev.display().to_string(),
        state: format!("mounted ({} on {})", inner.dev.display(), m.dir.display()),
    }
}

/// Issue 32 point 4, block side: a second loop device over a deleted image whose filesystem is
/// mounted through the first. Consented (by its identity, which names the deleted path) and with
/// the override, it is still refused: the two share the backing inode.
#[test]
fn a_loop_device_sharing_a_deleted_image_with_a_mounted_one_is_refused() {
    let img = Image::new("deleted-shared", 32 * MIB);
    let inner = LoopDev::on(&img.0, &[]);
    mkfs_ext4(&inner.dev);
    let _m = Mount::ro(&inner.dev, "deleted-shared");
    let outer = LoopDev::on(&img.0, &[]);
    let before = checksum(&outer.dev);
    std::fs::remove_file(&img.0).unwrap();
    let identity = format!("loop:{} (deleted)", img.0.display());
    let mut o = TargetOptions::block(&outer.dev, vec![identity.clone()]);
    o.overwrite_signatures = true;
    let t = Target::open(&o).unwrap();
    assert_eq!(t.identity.as_deref(), Some(identity.as_str()));
    let err = run(&t, &small_write_plan(t.size), &mut NullObserver).unwrap_err();
    assert_eq!(reasons_of(&err), vec![shares_with_mounted(&img.0, &inner, &_m)]);
    assert_eq!(checksum(&outer.dev), before);
}

/// Issue 16 point 4: a second loop device over an image whose filesystem is mounted through
/// another loop device at an offset (the signature is not at the second device's start).
#[test]
fn loop_device_sharing_its_image_with_a_mounted_loop_device_is_refused() {
    let img = Image::new("shared", 64 * MIB);
    let inner = LoopDev::on(&img.0, &["-o", "16777216", "--sizelimit", "33554432"]);
    mkfs_ext4(&inner.dev);
    let _m = Mount::ro(&inner.dev, "shared");
    let outer = LoopDev::on(&img.0, &[]);
    let before = checksum(&img.0);
    let t = Target::open(&TargetOptions::block(&outer.dev, vec![outer.identity()])).unwrap();
    let err = run(&t, &small_write_plan(t.size), &mut NullObserver).unwrap_err();
    assert_eq!(reasons_of(&err), vec![shares_with_mounted(&img.0, &inner, &_m)]);
    assert_eq!(checksum(&img.0), before);
}

/// Issue 16 point 1: `--target L` with `L -> loopA` (consented); while the probe runs, a second
/// thread re-points `L` at loopB (also consented and clean, so only the one-handle design keeps
/// it safe). The probe stops before the next run, names what happened, and loopB is untouched.
#[test]
fn symlink_repointed_while_the_probe_runs_stops_it_and_spares_the_other_device() {
    let (ia, ib) = (Image::new("repoint-a", 16 * MIB), Image::new("repoint-b", 16 * MIB));
    let (a, b) = (LoopDev::on(&ia.0, &[]), LoopDev::on(&ib.0, &[]));
    let link = tmp_dir().join(format!("target-link-{}", std::process::id()));
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&a.dev, &link).unwrap();
    let before_b = checksum(&ib.0);
    let t = Target::open(&TargetOptions::block(&link, vec![a.identity(), b.identity()])).unwrap();
    assert_eq!(t.device, a.dev);
    let plan = write_plan(t.size, Duration::from_millis(300));
    let (tmp, bdev) = (link.with_extension("new"), b.dev.clone());
    let link2 = link.clone();
    let repoint = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(450));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&bdev, &tmp).unwrap();
        std::fs::rename(&tmp, &link2).unwrap(); // atomic, like `ln -sfn`
    });
    let err = run(&t, &plan, &mut NullObserver).unwrap_err();
    repoint.join().unwrap();
    let ProbeError::TargetChanged { run: stopped, .. } = &err else { panic!("expected TargetChanged, got {err}") };
    assert!((1..plan.runs.len()).contains(stopped), "{err}");
    assert_eq!(
        reasons_of(&err),
        vec![RefusalReason::HandleChanged {
            detail: format!("{} now points to {}, not to {} which the probe opened and checked", link.display(), b.dev.display(), a.dev.display())
        }]
    );
    assert_eq!(checksum(&ib.0), before_b, "loopB was written");
    let _ = std::fs::remove_file(&link);
}

/// Issue 16 point 2: while the probe runs, a second thread detaches the consented loop device and
/// binds its name to another image holding ext4. The probe's open handle keeps the kernel from
/// re-binding it, the probe notices the detach before its next run and stops, and the other
/// image is unchanged.
#[test]
fn loop_device_detached_and_rebound_while_the_probe_runs_stops_it() {
    let ia = Image::new("swap-a", 16 * MIB);
    let ic = Image::new("swap-c", 16 * MIB);
    mkfs_ext4(&ic.0);
    let a = LoopDev::on(&ia.0, &[]);
    let before_c = checksum(&ic.0);
    let t = Target::open(&TargetOptions::block(&a.dev, vec![a.identity()])).unwrap();
    let plan = write_plan(t.size, Duration::from_millis(300));
    let (dev, other) = (a.dev.clone(), ic.0.clone());
    let swap = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(450));
        let d = Command::new("losetup").arg("-d").arg(&dev).output().unwrap();
        let r = Command::new("losetup").arg(&dev).arg(&other).output().unwrap();
        (d.status.success(), r.status.success())
    });
    let err = run(&t, &plan, &mut NullObserver).unwrap_err();
    let (detached, rebound) = swap.join().unwrap();
    assert!(detached, "losetup -d failed");
    let reasons = reasons_of(&err);
    let detail = match reasons.as_slice() {
        [RefusalReason::HandleChanged { detail }] => detail.clone(),
        other => panic!("{other:?}"),
    };
    if rebound {
        assert!(detail.contains("was re-bound"), "{detail}");
    } else {
        assert_eq!(detail, format!("{} was detached (losetup -d) during the probe", a.dev.display()));
    }
    assert_eq!(checksum(&ic.0), before_c, "the other image was written");
    drop(t);
}

/// A FUSE mount (bindfs) whose daemon can be paused: IO through a loop device over a file on it
/// stalls in the kernel until the daemon continues. Continued and unmounted on drop.
struct PausableFuse {
    dir: PathBuf,
    src: PathBuf,
    pid: u32,
    child: std::process::Child,
}

impl PausableFuse {
    fn new() -> PausableFuse {
        require_root();
        let base = tmp_dir().join(format!("fuse-{}", std::process::id()));
        let (src, dir) = (base.join("src"), base.join("mnt"));
        std::fs::create_dir_all(&src).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        // -f: stay in the foreground, so the child is the daemon whose pid we pause.
        let child = Command::new("bindfs")
            .arg("-f")
            .arg(&src)
            .arg(&dir)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run bindfs ({e}): install the Debian packages bindfs and fuse3 (tests/run.sh does)"));
        let t = Instant::now();
        let mounted = |d: &Path| Command::new("findmnt").arg("-n").arg(d).output().is_ok_and(|o| o.status.success());
        while !mounted(&dir) {
            assert!(t.elapsed() < Duration::from_secs(10), "bindfs did not mount {}", dir.display());
            std::thread::sleep(Duration::from_millis(50));
        }
        PausableFuse { dir, src, pid: child.id(), child }
    }
    fn signal(&self, sig: &str) {
        must(Command::new("kill").arg(sig).arg(self.pid.to_string()), "procps");
    }
}

impl Drop for PausableFuse {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-CONT").arg(self.pid.to_string()).status();
        // Unmount, retrying while the loop device above still holds the image open (a stuck IO
        // thread releases it only when its IO completes); lazily at last, and kill the daemon so
        // that wait() can never hang the test run.
        let t = Instant::now();
        while !Command::new("fusermount3").arg("-u").arg(&self.dir).status().is_ok_and(|s| s.success()) && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = Command::new("fusermount3").args(["-u", "-z"]).arg(&self.dir).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(self.src.parent().unwrap_or(&self.src));
    }
}

/// Issue 16 point 7: a target whose IO stops completing (the FUSE daemon under its loop device is
/// stopped with SIGSTOP). The probe gives up after the deadline, reports a device fault naming
/// the device and the IO, and returns; the IO completes once the daemon continues.
#[test]
fn io_that_never_completes_is_a_device_fault_after_the_deadline() {
    let fuse = PausableFuse::new();
    let img = Image::in_dir(&fuse.dir, "stall", 16 * MIB);
    let lo = LoopDev::on(&img.0, &["--direct-io=on"]);
    let t = Target::open(&TargetOptions::block(&lo.dev, vec![lo.identity()])).unwrap();
    let plan = write_plan(t.size, Duration::from_millis(300));
    let opts = RunOptions { io_deadline_floor: Duration::from_secs(2), io_deadline_factor: 100, calibrated_max_io: None };
    let (tx, rx) = mpsc::channel();
    let t2 = t.clone();
    std::thread::spawn(move || {
        let started = Instant::now();
        let r = run_with(&t2, &plan, &mut NullObserver, &opts);
        let _ = tx.send((r.map(|rep| rep.runs.len()), started.elapsed()));
    });
    std::thread::sleep(Duration::from_millis(450));
    fuse.signal("-STOP");
    let paused = Instant::now();
    let got = rx.recv_timeout(Duration::from_secs(30));
    let gave_up_after = paused.elapsed();
    // Continue the daemon before any assertion: a failing test must not leave IO stuck.
    fuse.signal("-CONT");
    let (result, _) = got.expect("the probe did not return within 30 s of the device stalling");
    let err = result.expect_err("the probe finished although its device stalled");
    let ProbeError::IoDeadline { path, waited, deadline, .. } = &err else { panic!("expected IoDeadline, got {err}") };
    assert_eq!(path, &lo.dev);
    assert!(*deadline >= Duration::from_secs(2), "{err}");
    assert!(*waited > *deadline, "{err}");
    // Noticed within a few watchdog ticks of the deadline, not after some unrelated timeout.
    assert!(gave_up_after < *deadline + Duration::from_secs(5), "{gave_up_after:?} {err}");
    let msg = err.to_string();
    assert!(msg.starts_with("device fault: ") && msg.contains("stopped issuing IO"), "{msg}");
}
