//! The `probe` command: builds a uFLIP plan (engine in the `wattflip-uflip` crate), opens the
//! target with its safety checks, runs with a progress bar, writes the results to a local folder
//! (`output`), and optionally streams them to a collector (`stream`). A new output format is a
//! function in `output`; a new benchmark option is a flag here mapped onto `PlanOptions`.

pub mod convert;
pub mod output;
pub mod stream;

use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::time::Duration;
use wattflip_uflip::{self as uflip, Bench, FormatKind, Observer, PlanOptions, ProbeReport, RunResult, RunSpec, TargetOptions};

/// Everything `wattflip-agent probe` was asked for.
#[derive(Debug, Clone)]
pub struct ProbeArgs {
    pub target: PathBuf,
    pub size: u64,
    pub benches: Vec<Bench>,
    pub quick: bool,
    pub format: Option<FormatKind>,
    pub repetitions: Option<u32>,
    pub out: PathBuf,
    pub emit_fio_iolog: Option<PathBuf>,
    pub destroy_consent: Vec<String>,
    pub seed: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum ProbeCmdError {
    #[error(transparent)]
    Target(#[from] uflip::TargetError),
    #[error(transparent)]
    Probe(#[from] uflip::ProbeError),
    #[error("cannot write results to {path}: {source}")]
    Output { path: PathBuf, source: std::io::Error },
}

/// Maps the command line onto engine options. `--quick` is the reduced Granularity plan.
pub fn plan_options(a: &ProbeArgs, device_size: u64) -> PlanOptions {
    let mut o = if a.quick { PlanOptions::quick(device_size) } else { PlanOptions::small(device_size) };
    if !a.quick {
        o.benches = a.benches.clone();
    }
    if let Some(r) = a.repetitions {
        o.repetitions = r.max(1);
    }
    if let Some(s) = a.seed {
        o.seed = s;
    }
    o.format = a.format;
    o.emit_fio_iolog = a.emit_fio_iolog.clone();
    o
}

/// Progress: "run i of N, experiment, ETA".
struct Progress {
    bar: ProgressBar,
}

impl Observer for Progress {
    fn planned(&mut self, total_runs: usize) {
        self.bar.set_length(total_runs as u64);
    }
    fn run_started(&mut self, _index: usize, spec: &RunSpec) {
        self.bar.set_message(spec_label(spec));
    }
    fn run_finished(&mut self, _index: usize, _result: &RunResult) {
        self.bar.inc(1);
    }
}

fn spec_label(spec: &RunSpec) -> String {
    format!("{} {}={} rep {}", spec.experiment, spec.varying, output::fmt_value(&spec.varying, spec.value), spec.repetition)
}

/// Opens a probe target: a block device (writes need its serial in `destroy_consent`) or a file
/// of `size` bytes, created with its parent folders. Shared by `probe` and `governor sweep`.
pub fn open_target(path: &Path, size: u64, destroy_consent: &[String]) -> Result<uflip::Target, ProbeCmdError> {
    let opts = if path.exists() && is_block(path) {
        TargetOptions::block(path, destroy_consent.to_vec())
    } else {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| ProbeCmdError::Output { path: dir.to_owned(), source: e })?;
        }
        TargetOptions::file(path, size)
    };
    Ok(uflip::Target::open(&opts)?)
}

/// Runs the probe and returns its report (outputs are written by the caller).
pub fn run_probe(a: &ProbeArgs, show_progress: bool) -> Result<ProbeReport, ProbeCmdError> {
    let target = open_target(&a.target, a.size, &a.destroy_consent)?;
    let plan = uflip::plan(&plan_options(a, target.size));
    let bar = if show_progress { ProgressBar::new(plan.runs.len() as u64) } else { ProgressBar::hidden() };
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} run {pos}/{len} ETA {eta}  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    let mut progress = Progress { bar };
    let report = uflip::run(&target, &plan, &mut progress)?;
    progress.bar.finish_and_clear();
    Ok(report)
}

fn is_block(p: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt as _;
    std::fs::metadata(p).map(|m| m.file_type().is_block_device()).unwrap_or(false)
}
