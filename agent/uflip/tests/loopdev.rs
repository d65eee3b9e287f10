//! Write-refusal paths exercised for real on loop devices (root only): an unpartitioned device with
//! consent is written; one carrying a mounted ext4 is refused; one without consent is refused for
//! writes but still runs read-only plans; a partitioned one is refused. Loop devices and mounts are
//! always released by drop guards. Not root, or a missing tool (losetup, mkfs.ext4, sfdisk), is a
//! failure that says what to install (`bash tests/run.sh` installs them and runs as root).

// Integration tests and their helpers: a panic with a message is the test's failure report
// (clippy.toml's allow-*-in-tests covers #[test] functions only, not the helpers they call).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use wattflip_uflip::*;

const MIB: u64 = 1 << 20;

/// Fails the test, saying what to do, unless this runs as root with every `(tool, package)` on
/// PATH. Never a silent pass: a test that cannot set up its loop device has not tested anything.
fn require_root_and(tools: &[(&str, &str)]) {
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    assert_eq!(
        uid.as_deref(),
        Some("0"),
        "loop-device tests need root (they create and mount loop devices): run them as root, \
         e.g. `sudo bash tests/run.sh`"
    );
    for (tool, package) in tools {
        assert!(
            Command::new(tool).arg("--version").output().is_ok(),
            "`{tool}` is missing: install Debian's `{package}` package (bash tests/run.sh does)"
        );
    }
}

const LOSETUP: (&str, &str) = ("losetup", "mount");

/// A loop device detached on drop.
struct LoopDev {
    dev: PathBuf,
    img: PathBuf,
}

impl LoopDev {
    fn new(name: &str, size: u64, partscan: bool) -> LoopDev {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("uflip-loop");
        std::fs::create_dir_all(&dir).unwrap();
        let img = dir.join(format!("{name}-{}.img", std::process::id()));
        let f = std::fs::File::create(&img).unwrap();
        f.set_len(size).unwrap();
        drop(f);
        let img = std::fs::canonicalize(&img).unwrap();
        let mut cmd = Command::new("losetup");
        cmd.arg("-f").arg("--show");
        if partscan {
            cmd.arg("-P");
        }
        let out = cmd.arg(&img).output().unwrap();
        assert!(
            out.status.success(),
            "losetup failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let dev = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        LoopDev { dev, img }
    }
    fn identity(&self) -> String {
        format!("loop:{}", self.img.display())
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
        let _ = std::fs::remove_file(&self.img);
    }
}

/// A mount undone on drop (declared after the LoopDev so it drops first).
struct Mount {
    dir: PathBuf,
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn small_write_plan(size: u64) -> Plan {
    let mut o = PlanOptions::quick(size);
    o.values.granularity_io_sizes = vec![4096];
    o.counts.io_count = [8, 8, 8, 8];
    o.counts.ignore_io = [0; 4];
    o.pause_between_runs = std::time::Duration::ZERO;
    plan(&o)
}

#[test]
fn consented_unpartitioned_loop_device_is_written() {
    require_root_and(&[LOSETUP]);
    let lo = LoopDev::new("clean", 32 * MIB, false);
    let t = Target::open(&TargetOptions::block(&lo.dev, vec![lo.identity()])).unwrap();
    assert_eq!(t.kind, TargetKind::Block);
    assert_eq!(t.size, 32 * MIB);
    assert_eq!(t.identity.as_deref(), Some(lo.identity().as_str()));
    assert_eq!(t.logical_block_size, 512);
    t.ensure_writable().unwrap();
    let p = small_write_plan(t.size);
    let rep = run(&t, &p, &mut NullObserver).unwrap();
    assert_eq!(rep.runs.len(), 4);
    assert!(rep
        .runs
        .iter()
        .all(|r| r.status == RunStatus::Ok && r.target_kind == "block" && r.io_count == 8));
    assert_eq!(rep.target.identity.as_deref(), Some(lo.identity().as_str()));
    // The SW run really wrote the device: its first block is no longer zeros.
    let sw = p.runs.iter().find(|r| r.pattern == "SW").unwrap();
    let Work::Pattern(ps) = &sw.work else {
        panic!()
    };
    let bytes = std::fs::read(&lo.img).unwrap();
    let off = ps[0].target_offset as usize;
    assert!(bytes[off..off + 4096].iter().any(|&b| b != 0));
}

#[test]
fn loop_device_without_consent_is_refused_for_writes_only() {
    require_root_and(&[LOSETUP]);
    let lo = LoopDev::new("noconsent", 16 * MIB, false);
    let t = Target::open(&TargetOptions::block(
        &lo.dev,
        vec!["loop:/some/other.img".into()],
    ))
    .unwrap();
    let refusal = t.ensure_writable().unwrap_err();
    assert_eq!(
        refusal.reasons,
        vec![RefusalReason::NoConsent {
            identity: lo.identity()
        }]
    );
    let p = small_write_plan(t.size);
    let err = run(&t, &p, &mut NullObserver).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ProbeError::WritesRefused(_)));
    assert!(
        msg.contains(&lo.dev.display().to_string())
            && msg.contains(&format!("add exactly \"{}\"", lo.identity())),
        "{msg}"
    );
    // Read-only benchmarks are allowed on any device.
    let rep = run(&t, &p.read_only(), &mut NullObserver).unwrap();
    assert_eq!(rep.runs.len(), 2);
    assert!(rep.runs.iter().all(|r| r.status == RunStatus::Ok));
}

#[test]
fn loop_device_with_mounted_ext4_is_refused_even_with_consent() {
    require_root_and(&[LOSETUP, ("mkfs.ext4", "e2fsprogs")]);
    let lo = LoopDev::new("ext4", 32 * MIB, false);
    let mk = Command::new("mkfs.ext4")
        .arg("-q")
        .arg("-F")
        .arg(&lo.dev)
        .output()
        .expect("run mkfs.ext4");
    assert!(
        mk.status.success(),
        "mkfs.ext4: {}",
        String::from_utf8_lossy(&mk.stderr)
    );
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("uflip-mnt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let st = Command::new("mount")
        .arg(&lo.dev)
        .arg(&dir)
        .status()
        .unwrap();
    assert!(st.success(), "mount failed");
    let _m = Mount { dir: dir.clone() };
    let t = Target::open(&TargetOptions::block(&lo.dev, vec![lo.identity()])).unwrap();
    let refusal = t.ensure_writable().unwrap_err();
    let kinds: Vec<&str> = refusal
        .reasons
        .iter()
        .map(|r| match r {
            RefusalReason::Mounted { .. } => "mounted",
            RefusalReason::Signature { .. } => "signature",
            RefusalReason::Busy { .. } => "busy",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, vec!["mounted", "signature", "busy"], "{refusal}");
    assert_eq!(
        refusal.reasons[0],
        RefusalReason::Mounted {
            source_dev: lo.dev.display().to_string(),
            mount_point: dir.display().to_string()
        }
    );
    assert_eq!(
        refusal.reasons[1],
        RefusalReason::Signature {
            kind: "ext2/3/4".into()
        }
    );
    let err = run(&t, &small_write_plan(t.size), &mut NullObserver).unwrap_err();
    assert!(err.to_string().contains("unmount it"), "{err}");
}

#[test]
fn partitioned_loop_device_is_refused() {
    require_root_and(&[LOSETUP, ("sfdisk", "fdisk"), ("partx", "util-linux")]);
    let lo = LoopDev::new("parted", 16 * MIB, true);
    let mut sf = Command::new("sfdisk")
        .arg("-q")
        .arg(&lo.dev)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        sf.stdin
            .take()
            .unwrap()
            .write_all(b"label: dos\n,4MiB,L\n")
            .unwrap();
    }
    assert!(sf.wait().unwrap().success());
    let _ = Command::new("udevadm").arg("settle").status();
    // Some kernels do not register a loop device's partitions on sfdisk's BLKRRPART (seen on a
    // 6.18 VM: /dev/loop0p1 never came); `partx -a` adds them through BLKPG (its error "busy"
    // only means they are there already). Then poll sysfs for the partition, with a deadline.
    let _ = Command::new("partx")
        .arg("-a")
        .arg(&lo.dev)
        .stderr(std::process::Stdio::null())
        .status();
    let name = lo.dev.file_name().unwrap().to_string_lossy().to_string();
    let part = Path::new("/sys/class/block").join(format!("{name}p1"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !part.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "{} did not appear within 10 s after sfdisk",
            part.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let t = Target::open(&TargetOptions::block(&lo.dev, vec![lo.identity()])).unwrap();
    let refusal = t.ensure_writable().unwrap_err();
    assert_eq!(
        refusal.reasons,
        vec![
            RefusalReason::Partitioned {
                partitions: vec![format!("{name}p1")]
            },
            RefusalReason::Signature { kind: "MBR".into() }
        ]
    );
}
