//! One owner per spool: an exclusive `flock` on `<spool dir>/lock`, held as long as the [`Spool`]
//! lives (the kernel drops it when the owner exits, however it exits), with the holder's pid
//! written into the file so a second agent on the same folder refuses to start and names it.
//!
//! Two agents appending to one spool interleave sequence numbers and acknowledge each other's
//! batches (issue 32 §1), so there is no sharing mode. The lock file stays when the agent exits:
//! deleting it would race with the next owner's `flock`. To hold another resource for the life of
//! a process the same way, take a [`SpoolLock`] on its folder.
//!
//! [`Spool`]: crate::export::spool::Spool

use crate::export::backlog::BacklogError;
use std::fs::{File, OpenOptions};
use std::io::Read as _;
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
            let mut text = String::new();
            let _ = f.read_to_string(&mut text);
            return Err(BacklogError::Locked { dir: dir.to_path_buf(), holder: holder_of(&text) });
        }
        Err(e) => return Err(io("cannot lock the lock file")(e.into())),
    }
    // Only the holder writes, so the pid read by a refused agent is the holder's (or empty in the
    // instant between lock and write).
    let pid = format!("{}\n", std::process::id());
    f.set_len(0).map_err(io("cannot write the lock file"))?;
    f.write_all_at(pid.as_bytes(), 0).map_err(io("cannot write the lock file"))?;
    Ok(SpoolLock { _file: f })
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
}
