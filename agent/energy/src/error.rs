//! Error types. `TraceError` is for importing trace files (every variant names the file, and the line,
//! column or key when there is one); `AnalysisError` is for analysing power series. Add a variant when a
//! new failure needs a different remedy, and put the path/key/value in it, not only in the message.

use std::fmt;
use std::path::PathBuf;

/// One problem with one sidecar key (all problems of a sidecar are reported together).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyProblem {
    pub key: String,
    pub message: String,
}

impl fmt::Display for KeyProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "key `{}`: {}", self.key, self.message)
    }
}

fn join_problems(problems: &[KeyProblem]) -> String {
    problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

/// Failure to read or integrate a trace file.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A CSV cell that is not what it should be. `line` and `column` are 1-based; `column` counts
    /// fields, not characters.
    #[error("{}:{line}: column {column} ({column_name}): {message}", path.display())]
    Parse { path: PathBuf, line: u64, column: usize, column_name: &'static str, message: String },
    /// A CSV line with fewer fields than the configured columns need.
    #[error("{}:{line}: expected at least {needed} columns, found {found}", path.display())]
    MissingColumn { path: PathBuf, line: u64, needed: usize, found: usize },
    /// Time went backwards between two samples.
    #[error("{}:{line}: time {time_ns} ns is before the previous sample's {previous_ns} ns", path.display())]
    TimeBackwards { path: PathBuf, line: u64, time_ns: i64, previous_ns: i64 },
    /// The sidecar file is not valid JSON/TOML.
    #[error("{}: sidecar syntax: {message}", path.display())]
    SidecarSyntax { path: PathBuf, message: String },
    /// Missing, unknown or invalid sidecar keys, all of them at once.
    #[error("{}: {}", path.display(), join_problems(problems))]
    Sidecar { path: PathBuf, problems: Vec<KeyProblem> },
    /// No sidecar beside a raw trace.
    #[error("{}: no sidecar found (tried {})", path.display(), tried.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    NoSidecar { path: PathBuf, tried: Vec<PathBuf> },
    /// A raw trace whose payload is not a whole number of samples.
    #[error("{}: {bytes} payload bytes is not a whole number of {sample_bytes}-byte samples", path.display())]
    TruncatedSample { path: PathBuf, bytes: u64, sample_bytes: usize },
    /// A trace with no samples at all.
    #[error("{}: no samples", path.display())]
    Empty { path: PathBuf },
    /// Invalid integration parameters (shunt, supply, window, ...).
    #[error("{}: {source}", path.display())]
    Config {
        path: PathBuf,
        #[source]
        source: ConfigError,
    },
}

/// A parameter outside its valid range; names the parameter.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct ConfigError {
    pub key: &'static str,
    pub message: String,
}

impl ConfigError {
    pub(crate) fn new(key: &'static str, message: impl Into<String>) -> Self {
        ConfigError { key, message: message.into() }
    }
}

/// Failure to analyse a power series.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AnalysisError {
    #[error("power series is empty")]
    EmptySeries,
    #[error("power series sample {index}: timestamp {t_ns} ns does not increase (previous {previous_ns} ns)")]
    NotIncreasing { index: usize, t_ns: i64, previous_ns: i64 },
    #[error("power series sample {index}: power {watts} W is not finite")]
    NotFinite { index: usize, watts: f64 },
    #[error("power series has {len} timestamps but {powers} power values")]
    LengthMismatch { len: usize, powers: usize },
    /// Too few samples in the idle window before the run to estimate a baseline.
    #[error("no idle baseline: the window [{from_ns}, {to_ns}) ns before the run holds {found} samples, need at least {needed} (the probe's idle window is not in the trace, and the pause after the previous run is too short)")]
    NotEnoughBaseline { from_ns: i64, to_ns: i64, found: usize, needed: usize },
    /// The run's host timestamps lie outside the trace.
    #[error("not covered by the trace: run [{first_submit_ns}, {last_complete_ns}] ns, trace [{trace_start_ns}, {trace_end_ns}] ns")]
    RunOutsideTrace { first_submit_ns: i64, last_complete_ns: i64, trace_start_ns: i64, trace_end_ns: i64 },
    /// No window above the threshold where the probe says the run started.
    #[error("activity not found in the trace: no power above {threshold_w:.4} W (idle {baseline_w:.4} W) between {from_ns} and {to_ns} ns, around the run's first submit")]
    NoActivity { from_ns: i64, to_ns: i64, threshold_w: f64, baseline_w: f64 },
    /// The trace was already active where the search for the run's start begins.
    #[error("activity not found at the run's start: the trace is already at {watts:.4} W (threshold {threshold_w:.4} W) at {at_ns} ns, where the search begins, and the previous run's tail was not going on")]
    ActivityInProgress { at_ns: i64, watts: f64, threshold_w: f64 },
    /// The trace went idle long before the run's last IO completed.
    #[error("activity in the trace ends at {end_ns} ns, more than {slack_ns} ns before the run's last completion at {last_complete_ns} ns")]
    ActivityEndsEarly { end_ns: i64, last_complete_ns: i64, slack_ns: i64 },
    /// The whole trace does not match the probe (wrong rate, time unit or origin): no run gets energy.
    #[error("{0}")]
    TraceMismatch(String),
    #[error("experiment has no values to classify")]
    NoValues,
    #[error(transparent)]
    Config(#[from] ConfigError),
}
