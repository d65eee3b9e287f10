//! Probe errors: what stops a probe (as opposed to a run being `unsupported`, which is a result).
//! Each variant names the target/run and says what to do. Add a variant when a new failure needs
//! different advice; keep OS errors as `source` so the agent can print the chain.

pub use crate::advice::write_advice;
use crate::pattern::Mode;
use crate::safety::Refusal;
use std::path::PathBuf;

/// Errors returned by [`crate::run`].
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// A stop was requested (the agent is shutting down): the run in progress was abandoned
    /// between two IOs.
    #[error("run {run} stopped: the probe was asked to stop")]
    Stopped {
        /// Run index.
        run: usize,
    },
    /// The probe was stopped before its end; the runs that completed are kept in the report.
    #[error("the probe was stopped after {} completed run(s); they are kept, marked interrupted", .0.runs.len())]
    Interrupted(Box<crate::report::ProbeReport>),
    /// The plan writes but the target is not cleared for writes.
    /// The `Refusal` is the message itself, not a cause, so it is not chained as a source.
    #[error("{0}; or run only the read-only benchmarks (`--read-only`, `Plan::read_only`)")]
    WritesRefused(Refusal),
    /// The plan was placed for a larger device than the target.
    #[error("the plan was built for {plan_size} bytes but {path} has {target_size}; build the plan with PlanOptions.device_size = target.size")]
    PlanDoesNotFit {
        /// Target path.
        path: PathBuf,
        /// Plan's device size.
        plan_size: u64,
        /// Target size.
        target_size: u64,
    },
    /// Opening the target for a run failed.
    #[error("cannot open {path} with O_DIRECT{} for run {run} ({experiment}): {source}", if *.write { "|O_DSYNC for writing" } else { "" })]
    Open {
        /// Target path.
        path: PathBuf,
        /// Whether it was opened for writing.
        write: bool,
        /// Run index.
        run: usize,
        /// Experiment name.
        experiment: String,
        /// OS error.
        source: std::io::Error,
    },
    /// An IO failed (EIO, short transfer, …).
    #[error("{} of {len} B at offset {offset} on {path} failed in run {run} ({experiment}): {source}; {}", mode.as_str(), write_advice(source, "check the device's health (dmesg, SMART) before probing again"))]
    Io {
        /// Target path.
        path: PathBuf,
        /// Run index.
        run: usize,
        /// Experiment name.
        experiment: String,
        /// Byte offset.
        offset: u64,
        /// Byte length.
        len: u64,
        /// Read or write.
        mode: Mode,
        /// OS error.
        source: std::io::Error,
    },
    /// An IO did not complete within its deadline: a device fault. The probe stopped issuing IO.
    #[error("device fault: {} of {len} B at offset {offset} on {path} has not completed after {} ms (deadline {} ms) in run {run} ({experiment}); the probe stopped issuing IO to it (the blocked IO thread stays in the kernel until the device completes or fails the IO): check the device (dmesg, SMART, its controller) before probing again", mode.as_str(), waited.as_millis(), deadline.as_millis())]
    IoDeadline {
        /// The device.
        path: PathBuf,
        /// Run index.
        run: usize,
        /// Experiment name.
        experiment: String,
        /// Byte offset of the stuck IO.
        offset: u64,
        /// Its length.
        len: u64,
        /// Read or write.
        mode: Mode,
        /// How long it had been in flight when the watchdog gave up.
        waited: std::time::Duration,
        /// The deadline.
        deadline: std::time::Duration,
    },
    /// Before a run, the open handle no longer named the checked and consented target.
    /// The `Refusal` is the message itself.
    #[error("stopped before run {run} ({experiment}) on {}: {}", refusal.device.display(), refusal.reasons_text())]
    TargetChanged {
        /// Run index that was not started.
        run: usize,
        /// Experiment name.
        experiment: String,
        /// What changed.
        refusal: Refusal,
    },
    /// An IO thread could not be started.
    #[error("cannot start an IO thread for run {run}: {source}; the system is out of threads or memory")]
    Spawn {
        /// Run index.
        run: usize,
        /// OS error.
        source: std::io::Error,
    },
    /// Writing an iolog or trace file failed.
    #[error("cannot write output file {path}: {source}; check that the directory is writable")]
    Output {
        /// File path.
        path: PathBuf,
        /// OS error.
        source: std::io::Error,
    },
    /// Allocating the aligned IO buffer failed.
    #[error("cannot allocate a {len}-byte IO buffer aligned to {align} for run {run}: {source}")]
    Buffer {
        /// Run index.
        run: usize,
        /// Buffer length.
        len: usize,
        /// Alignment.
        align: usize,
        /// Cause.
        source: std::io::Error,
    },
    /// A worker thread panicked (a bug).
    #[error("an IO worker thread of run {run} panicked; this is a wattflip-uflip bug, please report it")]
    WorkerPanicked {
        /// Run index.
        run: usize,
    },
}
