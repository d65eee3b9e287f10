//! Results: one [`RunResult`] per run (spec §8 plus wattflip's additions), the [`ProbeReport`] of a
//! whole probe, and [`summary_table`], a plain-text view for humans.
//!
//! Results are serde types so the agent can ship them as JSON. To add a per-run field, add it here
//! (with `#[serde(default)]` so older records still parse) and fill it in `engine::finish`.

use crate::plan::Warning;
use crate::stats::LatencyStats;
use crate::target::TargetInfo;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

/// Whether a run produced statistics.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum RunStatus {
    /// Ran; statistics are valid.
    Ok,
    /// Not runnable on this target (e.g. IO size or shift not a multiple of the logical block size,
    /// §9 4Kn caveat); no IO was issued.
    Unsupported {
        /// Why, naming the parameter and target.
        reason: String,
    },
}

/// One run's record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// Index in the plan.
    pub run_id: usize,
    /// "granularity", …, "prepare", "format".
    pub bench: String,
    /// "granularity/SR", "mix/SR-RW", …
    pub experiment: String,
    /// §4.2 order number (0 for prepare/format).
    #[serde(default)]
    pub experiment_number: u32,
    /// "SR"/"RR"/"SW"/"RW"/"MIX"/"FORMAT".
    pub pattern: String,
    /// Varying parameter name ("io_size").
    pub varying: String,
    /// Its value.
    pub value: f64,
    /// Repetition index.
    pub repetition: u32,
    /// First IO submission, UTC ns.
    pub start_ns: u64,
    /// Last IO completion, UTC ns.
    pub end_ns: u64,
    /// IOs issued (all processes).
    pub io_count: u64,
    /// IgnoreIO (per process).
    pub ignore_io: u64,
    /// IOs in the statistics (running phase, all processes).
    #[serde(default)]
    pub measured_ios: u64,
    /// IOSize in bytes.
    pub io_size_bytes: u64,
    /// Running-phase mean response time (AvgIO), µs.
    pub mean_us: f64,
    /// Minimum, µs.
    pub min_us: f64,
    /// Maximum, µs.
    pub max_us: f64,
    /// Population std-dev, µs.
    pub stddev_us: f64,
    /// Median, µs.
    pub p50_us: f64,
    /// 95th percentile, µs.
    pub p95_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// Running-phase IOs ÷ running-phase wall time (first submit → last completion, pauses
    /// included, all processes together).
    pub iops: f64,
    /// `iops × io_size / MiB`.
    pub mib_per_s: f64,
    /// Every parameter of the run.
    pub parameters: BTreeMap<String, String>,
    /// "file"/"block".
    pub target_kind: String,
    /// ok / unsupported.
    pub status: RunStatus,
    /// Placement warnings (DEVICE_TOO_SMALL, TEST_EXCEED_DEVICE).
    pub warnings: Vec<Warning>,
    /// Per-IO trace CSV, if written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_file: Option<PathBuf>,
    /// fio iolog v2 files (one per process), if written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub iolog_files: Vec<PathBuf>,
    /// Per-IO response times in µs (process 0, all IOs including start-up), kept for preparation
    /// runs so [`crate::calibrate`] can use them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub series_us: Vec<f64>,
    /// Per-leg statistics of a run made of back-to-back legs (the SPE run of §6.2: SR, RW, SR),
    /// in order; empty for every other run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub legs: Vec<LegResult>,
}

/// One leg of a multi-leg run, its statistics over all of the leg's IOs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LegResult {
    /// 0-based position in the run.
    pub leg: u32,
    /// Baseline of the leg ("SR", "RW").
    pub pattern: String,
    /// First IO submission, UTC ns.
    pub start_ns: u64,
    /// Last IO completion, UTC ns.
    pub end_ns: u64,
    /// Response times of every IO of the leg (`n` is the leg's IO count).
    #[serde(flatten)]
    pub stats: LatencyStats,
    /// IOs ÷ leg wall time.
    pub iops: f64,
    /// MiB/s over the leg.
    pub mib_per_s: f64,
}

/// A whole probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeReport {
    /// The target.
    pub target: TargetInfo,
    /// Plan seed.
    pub seed: u64,
    /// Probe start, UTC ns.
    pub started_ns: u64,
    /// Probe end, UTC ns.
    pub ended_ns: u64,
    /// Library version that produced the report.
    pub engine_version: String,
    /// Runs in execution order.
    pub runs: Vec<RunResult>,
}

/// Plain-text table: one row per (experiment, value), averaged over repetitions like the 2012
/// uFLIP parser (§8); unsupported points say so.
pub fn summary_table(report: &ProbeReport) -> String {
    // Group in first-seen order.
    let mut keys: Vec<(String, String)> = Vec::new();
    let mut groups: BTreeMap<(String, String), Vec<&RunResult>> = BTreeMap::new();
    for r in &report.runs {
        let k = (r.experiment.clone(), fmt_value(r.value));
        if !groups.contains_key(&k) {
            keys.push(k.clone());
        }
        groups.entry(k).or_default().push(r);
    }
    let mut out = String::new();
    let _ = writeln!(out, "{:<24} {:>10} {:>4} {:>11} {:>11} {:>10} {:>9}  notes", "experiment", "value", "runs", "mean µs", "p99 µs", "IOPS", "MiB/s");
    for k in keys {
        let rs = groups.get(&k).map(Vec::as_slice).unwrap_or(&[]);
        let ok: Vec<&&RunResult> = rs.iter().filter(|r| r.status == RunStatus::Ok).collect();
        let mut notes: Vec<String> = Vec::new();
        for r in rs {
            for w in &r.warnings {
                let s = w.as_str().to_string();
                if !notes.contains(&s) {
                    notes.push(s);
                }
            }
            if let RunStatus::Unsupported { reason } = &r.status {
                let s = format!("unsupported: {reason}");
                if !notes.contains(&s) {
                    notes.push(s);
                }
            }
        }
        if ok.is_empty() {
            let _ = writeln!(out, "{:<24} {:>10} {:>4} {:>11} {:>11} {:>10} {:>9}  {}", k.0, k.1, rs.len(), "-", "-", "-", "-", notes.join("; "));
            continue;
        }
        let avg = |f: &dyn Fn(&RunResult) -> f64| ok.iter().map(|r| f(r)).sum::<f64>() / ok.len() as f64;
        let _ = writeln!(
            out,
            "{:<24} {:>10} {:>4} {:>11.1} {:>11.1} {:>10.0} {:>9.1}  {}",
            k.0,
            k.1,
            rs.len(),
            avg(&|r| r.mean_us),
            avg(&|r| r.p99_us),
            avg(&|r| r.iops),
            avg(&|r| r.mib_per_s),
            notes.join("; ")
        );
    }
    // §6.2: SPE exists to tell whether reads after random writes are slower; say so.
    if let Some(e) = crate::spe_from_report(report, &crate::CalibrationRule::default()) {
        let _ = writeln!(out, "{}", e.describe());
    }
    out
}

fn fmt_value(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::TargetKind;

    fn rr(exp: &str, value: f64, rep: u32, mean: f64, status: RunStatus) -> RunResult {
        RunResult {
            run_id: rep as usize,
            bench: "granularity".into(),
            experiment: exp.into(),
            experiment_number: 1,
            pattern: "SR".into(),
            varying: "io_size".into(),
            value,
            repetition: rep,
            start_ns: 1,
            end_ns: 2,
            io_count: 10,
            ignore_io: 0,
            measured_ios: 10,
            io_size_bytes: 4096,
            mean_us: mean,
            min_us: 1.0,
            max_us: 9.0,
            stddev_us: 1.0,
            p50_us: mean,
            p95_us: mean,
            p99_us: mean * 2.0,
            iops: if mean > 0.0 { 1e6 / mean } else { 0.0 },
            mib_per_s: if mean > 0.0 { 1e6 / mean * 4096.0 / 1048576.0 } else { 0.0 },
            parameters: BTreeMap::new(),
            target_kind: "file".into(),
            status,
            warnings: vec![],
            trace_file: None,
            iolog_files: vec![],
            series_us: vec![],
            legs: vec![],
        }
    }

    #[test]
    fn table_averages_repetitions_and_shows_unsupported() {
        let rep = ProbeReport {
            target: TargetInfo {
                path: "/x".into(),
                device: None,
                kind: TargetKind::File,
                size: 1,
                logical_block_size: 512,
                model: None,
                serial: None,
                firmware: None,
                identity: None,
            },
            seed: 1,
            started_ns: 0,
            ended_ns: 0,
            engine_version: "t".into(),
            runs: vec![
                rr("granularity/SR", 4096.0, 0, 100.0, RunStatus::Ok),
                rr("granularity/SR", 4096.0, 1, 300.0, RunStatus::Ok),
                rr("granularity/SR", 512.0, 0, 0.0, RunStatus::Unsupported { reason: "IOSize 512 B".into() }),
            ],
        };
        let t = summary_table(&rep);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[1], format!("{:<24} {:>10} {:>4} {:>11} {:>11} {:>10} {:>9}  ", "granularity/SR", "4096", 2, "200.0", "400.0", "6667", "26.0"));
        assert!(lines[2].ends_with("unsupported: IOSize 512 B"));
        // JSON round trip keeps everything.
        let j = serde_json::to_string(&rep).unwrap();
        assert!(j.contains("\"status\":{\"state\":\"unsupported\",\"reason\":\"IOSize 512 B\"}"));
        let back: ProbeReport = serde_json::from_str(&j).unwrap();
        assert_eq!(back, rep);
    }
}
