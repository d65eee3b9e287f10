//! One owner per spool: an exclusive `flock` on `<spool dir>/lock`, held as long as the [`Spool`]
//! lives (the kernel drops it when the owner exits, however it exits), with the holder's pid
//! written into the file so a second agent on the same folder refuses to start and names it.
//!
//! Two agents appending to one spool interleave sequence numbers and acknowledge each other's
//! batches (issue 32 §1), so there is no sharing mode. The lock file stays when the agent exits:
//! deleting it would race with the next owner's `flock`. To hold another resource for the life of
//! a process the same way, take a [`SpoolLock`] on its folder.
//!
//! The refused agent names the holder from `/proc/locks` (the kernel's own record of who holds
//! the `flock`, see proc(5)), because the file's text can be empty or still the previous owner's
//! pid in the instant between the new owner's lock and its write; the file is the fallback where
//! `/proc` is not mounted or hides the holder (another pid namespace shows 0).
//!
//! [`Spool`]: crate::export::spool::Spool

use crate::export::backlog::BacklogError;
use std::fs::{File, OpenOptions};
use std::io::{Read as _, Seek as _};
use std::os::unix::fs::FileExt as _;
use std::path::Path;

/// Name of the lock file inside the spool folder.
pub const LOCK_FILE: &str = "lock";

/// The held lock; dropping it (or exiting) releases it.
#[derive(Debug)]
pub struct SpoolLock {
    _file: File,
}

/// Takes the spool folder's lock without waiting, and writes our pid into it. When another process
/// holds it: [`BacklogError::Locked`] with the pid it wrote.
pub fn lock(dir: &Path) -> Result<SpoolLock, BacklogError> {
    let path = dir.join(LOCK_FILE);
    let io = |what: &'static str| {
        let path = path.clone();
        move |source: std::io::Error| BacklogError::Io { path, what, source }
    };
    let mut f = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path).map_err(io("cannot open the lock file"))?;
    match rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(e) if e == rustix::io::Errno::WOULDBLOCK => {
            let holder =
                kernel_holder(&f, &std::fs::read_to_string("/proc/locks").unwrap_or_default()).map_or_else(|| file_holder(&mut f), |pid| format!("pid {pid}"));
            return Err(BacklogError::Locked { dir: dir.to_path_buf(), holder });
        }
        Err(e) => return Err(io("cannot lock the lock file")(e.into())),
    }
    // Only the holder writes; a refused agent reading the file in between lock and write sees
    // the old pid or none, which is why it asks the kernel first.
    let pid = format!("{}\n", std::process::id());
    f.set_len(0).map_err(io("cannot write the lock file"))?;
    f.write_all_at(pid.as_bytes(), 0).map_err(io("cannot write the lock file"))?;
    Ok(SpoolLock { _file: f })
}

/// The pid holding an `flock` on `f`, from `/proc/locks`' text: lines such as
/// `1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234 0 EOF`, the device's major and minor in hex and the
/// inode in decimal (fs/locks.c, `lock_get_status`). None when no line matches or the pid is 0.
fn kernel_holder(f: &File, locks: &str) -> Option<u32> {
    let st = rustix::fs::fstat(f).ok()?;
    let want = format!("{:02x}:{:02x}:{}", rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev), st.st_ino);
    locks.lines().find_map(|line| {
        let w: Vec<&str> = line.split_whitespace().collect();
        // A "->" after the number marks a waiter, not the holder.
        let held = w.len() >= 6 && w[1] == "FLOCK" && w[3] == "WRITE" && w[5] == want;
        held.then(|| w[4].parse::<u32>().ok()).flatten().filter(|&pid| pid != 0)
    })
}

/// The pid the holder wrote into the lock file. The new owner writes it right after locking, so an
/// empty file is read again a few times (up to 100 ms) before saying there is none.
fn file_holder(f: &mut File) -> String {
    let mut text = String::new();
    for _ in 0..50 {
        text.clear();
        let _ = f.read_to_string(&mut text);
        if !text.trim().is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
        let _ = f.seek(std::io::SeekFrom::Start(0));
    }
    holder_of(&text)
}

/// "pid 1234" from the lock file's text, or why there is none.
fn holder_of(text: &str) -> String {
    match text.trim().parse::<u32>() {
        Ok(pid) => format!("pid {pid}"),
        Err(_) => "a process that has not written its pid yet".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holder_is_named_from_the_file() {
        assert_eq!(holder_of("4242\n"), "pid 4242");
        assert_eq!(holder_of(""), "a process that has not written its pid yet");
    }

    /// The race CI met: the owner holds the `flock` but its file still has the previous owner's
    /// pid (or none). The refusal names the kernel's holder, not the stale text.
    #[test]
    fn a_holder_that_has_not_written_yet_is_named_from_the_kernel() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LOCK_FILE);
        std::fs::write(&path, "999999\n").unwrap();
        let held = File::open(&path).unwrap();
        rustix::fs::flock(&held, rustix::fs::FlockOperation::NonBlockingLockExclusive).unwrap();
        let e = lock(dir.path()).unwrap_err();
        assert!(matches!(&e, BacklogError::Locked { holder, .. } if *holder == format!("pid {}", std::process::id())), "{e}");
    }

    #[test]
    fn proc_locks_lines_are_matched_on_device_and_inode_and_waiters_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let f = File::create(dir.path().join(LOCK_FILE)).unwrap();
        let st = rustix::fs::fstat(&f).unwrap();
        let id = format!("{:02x}:{:02x}:{}", rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev), st.st_ino);
        let other = format!("{:02x}:{:02x}:{}", rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev), st.st_ino + 1);
        let text = format!("1: POSIX  ADVISORY  WRITE 11 {id} 0 EOF\n2: FLOCK  ADVISORY  WRITE 22 {other} 0 EOF\n2: -> FLOCK  ADVISORY  WRITE 33 {id} 0 EOF\n3: FLOCK  ADVISORY  WRITE 44 {id} 0 EOF\n");
        assert_eq!(kernel_holder(&f, &text), Some(44));
        assert_eq!(kernel_holder(&f, &format!("3: FLOCK  ADVISORY  WRITE 0 {id} 0 EOF\n")), None, "a pid hidden by another namespace");
        assert_eq!(kernel_holder(&f, ""), None);
    }
}
