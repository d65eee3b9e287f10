//! The seam every external program of the crate goes through ([`CommandRunner`]): `blkid` for
//! signatures (`safety`) and `losetup` for loop backing identities (`loopid`), so tests inject
//! what the host lacks. [`SystemRunner`] runs the real programs with a timeout. A leaf below both
//! users (`safety` re-exports it, so `safety::CommandRunner` still names it); a new program is
//! one more call of [`CommandRunner::run`], not a new trait.

use std::fmt;
use std::fs;
use std::process::{Command, Stdio};

/// Runs an external program behind a trait, so tests can inject what the host lacks.
pub trait CommandRunner: Send + Sync + fmt::Debug {
    /// Run `program` with `args`; `stdin` (a duplicate of an open handle) becomes its standard
    /// input, otherwise it reads from /dev/null.
    fn run(&self, program: &str, args: &[&str], stdin: Option<fs::File>) -> std::io::Result<std::process::Output>;
}

/// The real programs on `PATH`, each given [`SystemRunner::TIMEOUT`] to answer.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemRunner;

impl SystemRunner {
    /// How long a program may take: blkid reading a device that stopped completing IO would
    /// otherwise block the check for ever. The child is then left behind (it cannot be killed
    /// while in D state) and reaped by nobody until the agent exits.
    pub const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
}

impl CommandRunner for SystemRunner {
    fn run(&self, program: &str, args: &[&str], stdin: Option<fs::File>) -> std::io::Result<std::process::Output> {
        let stdin = stdin.map_or_else(Stdio::null, Stdio::from);
        let mut cmd = Command::new(program);
        cmd.args(args).stdin(stdin);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new().name("uflip-runner".into()).spawn(move || {
            let _ = tx.send(cmd.output());
        })?;
        rx.recv_timeout(Self::TIMEOUT).unwrap_or_else(|_| {
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("{program} did not answer within {} s (the device does not complete IO?)", Self::TIMEOUT.as_secs()),
            ))
        })
    }
}
