//! The seam to external tools: [`CommandRunner`] runs one argv (no shell) with `LC_ALL=C` and a
//! deadline, and returns stdout, stderr and the exit status. [`SystemRunner`] is the real one;
//! `crate::fake` (feature `test-support`) has test doubles. [`Tool`] is one program behind a runner
//! (path, deadline), the plumbing every tool wrapper shares.
//!
//! Why `LC_ALL=C`: nvme-cli 2.3 calls `setlocale(LC_ALL, "")` and groups 128-bit counters with the
//! locale's thousands separator (docs/sources-and-drives.md §6.1). Why a deadline: nvme-cli and smartctl pass
//! timeout 0, i.e. the kernel's 60 s admin timeout, and a resetting controller can hang them (§9).
//!
//! A non-zero exit is *not* an error of [`CommandRunner::run`]: smartctl uses exit bits for drive
//! health (§7.2). Callers that want "exit 0 or error" call [`CommandOutput::into_success`].
//! To recognise a new stderr pattern, extend [`Hint::from_stderr`].

use crate::nvme_status::NvmeStatus;
use std::fmt;
use std::io::{self, Read};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Default deadline for one admin command (docs/sources-and-drives.md §9 suggests 10–15 s).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Exited with this code.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
}

impl Exit {
    /// Exit code 0.
    pub fn success(self) -> bool {
        self == Exit::Code(0)
    }

    /// The exit code, if it exited normally.
    pub fn code(self) -> Option<i32> {
        match self {
            Exit::Code(c) => Some(c),
            Exit::Signal(_) => None,
        }
    }
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exit::Code(c) => write!(f, "exit status {c}"),
            Exit::Signal(s) => write!(f, "signal {s}"),
        }
    }
}

/// What a finished command produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandOutput {
    /// The argv that ran, program first.
    pub argv: Vec<String>,
    /// How it ended.
    pub exit: Exit,
    /// Standard output (lossy UTF-8).
    pub stdout: String,
    /// Standard error (lossy UTF-8).
    pub stderr: String,
}

impl CommandOutput {
    /// The command line for messages.
    pub fn command_line(&self) -> String {
        command_line(&self.argv)
    }

    /// `Ok(self)` on exit 0, else [`CommandError::Failed`] with a hint derived from stderr.
    pub fn into_success(self) -> Result<Self, CommandError> {
        if self.exit.success() {
            return Ok(self);
        }
        let hint = Hint::from_stderr(&self.stderr);
        Err(CommandError::Failed { command: self.command_line(), exit: self.exit, stderr: self.stderr, hint })
    }
}

/// Joins argv for messages, quoting arguments that contain spaces or quotes.
pub fn command_line(argv: &[String]) -> String {
    argv.iter()
        .map(
            |a| {
                if a.is_empty() || a.chars().any(|c| c.is_whitespace() || c == '\'' || c == '"') {
                    format!("'{}'", a.replace('\'', "'\\''"))
                } else {
                    a.clone()
                }
            },
        )
        .collect::<Vec<_>>()
        .join(" ")
}

/// What to do about a failed command, recognised from its stderr.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hint {
    /// EACCES/EPERM: NVMe admin passthrough needs CAP_SYS_ADMIN (docs/sources-and-drives.md §9).
    NeedsCapSysAdmin,
    /// The device node is missing.
    NoSuchDevice,
    /// nvme-cli found no NVMe topology at all.
    NoNvme,
    /// The tool rejected an option: another tool version.
    UnknownOption,
    /// The controller returned an NVMe status (nvme-cli prints it on stderr, §6.2).
    Nvme(NvmeStatus),
    /// Nothing recognised.
    None,
}

impl Hint {
    /// Classifies stderr. NVMe status first: it is the most specific.
    pub fn from_stderr(stderr: &str) -> Hint {
        if let Some((status, _)) = NvmeStatus::from_stderr(stderr) {
            return Hint::Nvme(status);
        }
        let lower = stderr.to_ascii_lowercase();
        if lower.contains("permission denied") || lower.contains("operation not permitted") {
            Hint::NeedsCapSysAdmin
        } else if lower.contains("failed to scan topology") {
            Hint::NoNvme
        } else if lower.contains("no such file or directory") || lower.contains("no such device") {
            Hint::NoSuchDevice
        } else if lower.contains("unrecognized option") || lower.contains("invalid option") || lower.contains("unknown option") {
            Hint::UnknownOption
        } else {
            Hint::None
        }
    }
}

impl fmt::Display for Hint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Hint::NeedsCapSysAdmin => f.write_str("needs CAP_SYS_ADMIN: run as root or grant the capability (CAP_SYS_RAWIO is not enough)"),
            Hint::NoSuchDevice => f.write_str("the device node does not exist: rescan drives before retrying"),
            Hint::NoNvme => f.write_str("no NVMe controller is visible: nothing to do on this host"),
            Hint::UnknownOption => f.write_str("this tool version does not know an option: check `nvme version` / `smartctl --version`"),
            Hint::Nvme(status) => write!(f, "NVMe status {status}: {}", status.advice()),
            Hint::None => f.write_str("see the tool's stderr above"),
        }
    }
}

/// Running a command failed, or it exited non-zero where success was required.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// Empty argv: a bug in the caller.
    #[error("empty argv: nothing to run (caller bug)")]
    EmptyArgv,
    /// The program is not installed or not on PATH.
    #[error("`{command}`: program not found: install it (nvme-cli / smartmontools) or configure its path")]
    NotFound {
        /// Full command line.
        command: String,
    },
    /// Starting the child failed for another reason.
    #[error("`{command}`: could not start: {source}")]
    Spawn {
        /// Full command line.
        command: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Waiting for the child failed.
    #[error("`{command}`: waiting for the child failed: {source}")]
    Wait {
        /// Full command line.
        command: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The deadline passed; the child (and its process group) was killed.
    #[error(
        "`{command}`: no answer within {timeout:?}, killed; the controller may be resetting: \
         back off before the next admin command to it (stderr so far: {stderr:?})"
    )]
    Timeout {
        /// Full command line.
        command: String,
        /// The deadline that passed.
        timeout: Duration,
        /// Whatever stderr said before the kill.
        stderr: String,
    },
    /// The command ran and exited non-zero.
    #[error("`{command}` failed with {exit}: {}: {hint}", stderr.trim())]
    Failed {
        /// Full command line.
        command: String,
        /// How it ended.
        exit: Exit,
        /// Its complete stderr.
        stderr: String,
        /// What to do about it.
        hint: Hint,
    },
    /// A scripted test runner was asked for a command it was not told to expect.
    #[error("`{command}`: not scripted (expected {expected})")]
    Unscripted {
        /// Full command line.
        command: String,
        /// What the script expected instead.
        expected: String,
    },
}

impl CommandError {
    /// The NVMe status in a [`CommandError::Failed`], if nvme-cli printed one.
    pub fn nvme_status(&self) -> Option<NvmeStatus> {
        match self {
            CommandError::Failed { hint: Hint::Nvme(s), .. } => Some(*s),
            _ => None,
        }
    }
}

/// Runs external commands. Implementations must run argv directly (no shell), set `LC_ALL=C`,
/// and kill the child when `timeout` passes.
pub trait CommandRunner: Send + Sync {
    /// Runs `argv` (program first) and waits at most `timeout`.
    fn run(&self, argv: &[String], timeout: Duration) -> Result<CommandOutput, CommandError>;
}

/// One external program behind a [`CommandRunner`]: its path, its per-call deadline and the runner
/// (the plumbing every tool wrapper shares: [`crate::NvmeCli`], [`crate::Smartctl`]). Cheap to
/// clone. A wrapper for a new tool holds a `Tool` and adds one method per subcommand that builds
/// the arguments and hands stdout to a parser.
#[derive(Clone)]
pub struct Tool {
    runner: Arc<dyn CommandRunner>,
    program: String,
    timeout: Duration,
}

impl fmt::Debug for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tool").field("program", &self.program).field("timeout", &self.timeout).finish()
    }
}

impl Tool {
    /// `program` (looked up on PATH) with [`DEFAULT_TIMEOUT`].
    pub fn new(runner: Arc<dyn CommandRunner>, program: impl Into<String>) -> Self {
        Tool { runner, program: program.into(), timeout: DEFAULT_TIMEOUT }
    }

    /// Uses another executable (absolute path, or a fake in tests).
    pub fn with_program(mut self, program: impl Into<String>) -> Self {
        self.program = program.into();
        self
    }

    /// Uses another deadline per call.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The program that runs.
    pub fn program(&self) -> &str {
        &self.program
    }

    /// The deadline of each call.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The full argv: the program, then `args`.
    pub fn argv<S: AsRef<str>>(&self, args: &[S]) -> Vec<String> {
        let mut argv = Vec::with_capacity(args.len() + 1);
        argv.push(self.program.clone());
        argv.extend(args.iter().map(|a| a.as_ref().to_string()));
        argv
    }

    /// The command line of `program args` for messages.
    pub fn command_line<S: AsRef<str>>(&self, args: &[S]) -> String {
        command_line(&self.argv(args))
    }

    /// Runs `program args` within the deadline; any exit status is `Ok` (see
    /// [`CommandOutput::into_success`]).
    pub fn run<S: AsRef<str>>(&self, args: &[S]) -> Result<CommandOutput, CommandError> {
        self.runner.run(&self.argv(args), self.timeout)
    }
}

/// The real runner: `std::process::Command`, a poll loop on `try_wait`, reader threads for the pipes.
///
/// The child runs in its own process group so that a timeout kills everything it started (a
/// wrapper script's `sleep` would otherwise keep the pipes open), and so that a terminal's Ctrl-C
/// reaches only the agent, which then restores power states itself.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemRunner;

impl SystemRunner {
    /// A new runner.
    pub fn new() -> Self {
        SystemRunner
    }
}

enum Stream {
    Out(Vec<u8>),
    Err(Vec<u8>),
}

impl CommandRunner for SystemRunner {
    fn run(&self, argv: &[String], timeout: Duration) -> Result<CommandOutput, CommandError> {
        let (program, args) = argv.split_first().ok_or(CommandError::EmptyArgv)?;
        let command = command_line(argv);
        let started = Instant::now();
        let mut child = Command::new(program)
            .args(args)
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|source| {
                if source.kind() == io::ErrorKind::NotFound {
                    CommandError::NotFound { command: command.clone() }
                } else {
                    CommandError::Spawn { command: command.clone(), source }
                }
            })?;
        let pgid = child.id();
        let rx = spawn_readers(&mut child);

        // Wait for exit, polling with a growing sleep (1 ms .. 20 ms): nvme-cli usually answers
        // in a few milliseconds and this keeps the agent's own latency small.
        let mut nap = Duration::from_millis(1);
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) => {}
                Err(source) => {
                    kill_process_group(pgid);
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(CommandError::Wait { command, source });
                }
            }
            let elapsed = started.elapsed();
            if elapsed >= timeout {
                kill_process_group(pgid);
                let _ = child.kill();
                let _ = child.wait();
                let (_, stderr) = collect(&rx, Duration::from_millis(200));
                return Err(CommandError::Timeout { command, timeout, stderr });
            }
            std::thread::sleep(nap.min(timeout - elapsed));
            nap = (nap * 2).min(Duration::from_millis(20));
        };

        // The pipes close when every process holding them is gone. Give leftovers of the group
        // the rest of the deadline, then kill them.
        let remaining = timeout.saturating_sub(started.elapsed()).max(Duration::from_millis(100));
        let (streams, done) = collect_all(&rx, remaining);
        if !done {
            kill_process_group(pgid);
            let (_, stderr) = collect(&rx, Duration::from_millis(200));
            return Err(CommandError::Timeout { command, timeout, stderr });
        }
        let exit = match (status.code(), status.signal()) {
            (Some(code), _) => Exit::Code(code),
            (None, Some(sig)) => Exit::Signal(sig),
            (None, None) => Exit::Code(-1),
        };
        Ok(CommandOutput { argv: argv.to_vec(), exit, stdout: streams.0, stderr: streams.1 })
    }
}

/// One reader thread per pipe of the child; each sends its whole stream when the pipe closes.
fn spawn_readers(child: &mut std::process::Child) -> mpsc::Receiver<Stream> {
    let (tx, rx) = mpsc::channel::<Stream>();
    if let Some(mut out) = child.stdout.take() {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = out.read_to_end(&mut buf);
            let _ = tx.send(Stream::Out(buf));
        });
    }
    if let Some(mut err) = child.stderr.take() {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = err.read_to_end(&mut buf);
            let _ = tx.send(Stream::Err(buf));
        });
    }
    rx
}

/// Collects both streams until both arrived or `wait` passed. Returns (stdout, stderr), done.
fn collect_all(rx: &mpsc::Receiver<Stream>, wait: Duration) -> ((String, String), bool) {
    let deadline = Instant::now() + wait;
    let mut out = None;
    let mut err = None;
    while out.is_none() || err.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(Stream::Out(b)) => out = Some(String::from_utf8_lossy(&b).into_owned()),
            Ok(Stream::Err(b)) => err = Some(String::from_utf8_lossy(&b).into_owned()),
            // Disconnected: a reader thread could not start; what we have is all there is.
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                return ((out.unwrap_or_default(), err.unwrap_or_default()), false);
            }
        }
    }
    ((out.unwrap_or_default(), err.unwrap_or_default()), true)
}

fn collect(rx: &mpsc::Receiver<Stream>, wait: Duration) -> (String, String) {
    collect_all(rx, wait).0
}

/// SIGKILL to the child's process group (the child is its leader, see `process_group(0)`).
#[allow(unsafe_code)]
fn kill_process_group(pgid: u32) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return;
    };
    if pgid <= 1 {
        return;
    }
    // SAFETY: kill(2) has no memory-safety preconditions; a negative pid addresses the process
    // group we created for this child. ESRCH (group already gone) is harmless and ignored.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints() {
        assert_eq!(Hint::from_stderr("open: Permission denied\n"), Hint::NeedsCapSysAdmin);
        assert_eq!(Hint::from_stderr("Failed to scan topology: No such file or directory\n"), Hint::NoNvme);
        assert_eq!(
            Hint::from_stderr("NVMe status: Feature Not Changeable: The Feature Identifier is not able to be changed(0x410e)\n"),
            Hint::Nvme(NvmeStatus(0x410e))
        );
    }

    #[test]
    fn quoting() {
        let argv = vec!["nvme".to_string(), "a b".to_string(), String::new()];
        assert_eq!(command_line(&argv), "nvme 'a b' ''");
    }
}
