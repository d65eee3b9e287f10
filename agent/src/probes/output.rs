//! The local result folder of a probe: `report.json` (the whole report, input of `report`),
//! `runs.jsonl` (one run per line), `probe_run.lp` (InfluxDB line protocol, the same points the
//! collector would write), `summary.txt` (the tables), `report.html`, and `energy.jsonl` (per-run
//! energy) when a power source was aligned with the probe.

use super::convert;
use crate::energy::ProbeEnergy;
use std::path::{Path, PathBuf};
use wattflip_proto::lineproto;
use wattflip_proto::schema::{self, HostTags};
use wattflip_uflip::{summary_table, ProbeReport};

/// Human form of a varying value: sizes in KiB, everything else as a number.
pub fn fmt_value(varying: &str, v: f64) -> String {
    if varying.contains("size") && v >= 1024.0 && v % 1024.0 == 0.0 {
        format!("{} KiB", v / 1024.0)
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

/// Files written, in order.
#[derive(Debug, Clone)]
pub struct Written {
    pub files: Vec<PathBuf>,
    pub lines: usize,
}

fn write(path: PathBuf, data: &[u8], out: &mut Vec<PathBuf>) -> Result<(), super::ProbeCmdError> {
    std::fs::write(&path, data).map_err(|e| super::ProbeCmdError::Output { path: path.clone(), source: e })?;
    out.push(path);
    Ok(())
}

pub fn write_all(
    dir: &Path,
    report: &ProbeReport,
    energy: Option<&ProbeEnergy>,
    power: Option<&crate::energy::live::ZoneSeries>,
    tags: &HostTags,
) -> Result<Written, super::ProbeCmdError> {
    std::fs::create_dir_all(dir).map_err(|e| super::ProbeCmdError::Output { path: dir.to_owned(), source: e })?;
    let mut files = Vec::new();
    let json = serde_json::to_vec_pretty(report).unwrap_or_default();
    write(dir.join("report.json"), &json, &mut files)?;
    let mut jsonl = String::new();
    for r in &report.runs {
        jsonl.push_str(&serde_json::to_string(r).unwrap_or_default());
        jsonl.push('\n');
    }
    write(dir.join("runs.jsonl"), jsonl.as_bytes(), &mut files)?;
    let batch = convert::batch(report, energy);
    let mut lp = String::new();
    let mut lines = 0;
    for p in &batch.probe_runs {
        if schema::probe_run_point(p, tags).write_line(&mut lp).is_ok() {
            lines += 1;
        }
    }
    // Events and the idle profile go through the same schema function as the collector's.
    let rest = wattflip_proto::v1::Batch { sequence: 1, events: batch.events, idle_profiles: batch.idle_profiles, ..Default::default() };
    if let Ok(domain) = wattflip_proto::domain::convert_batch("", rest) {
        let (body, _) = lineproto::encode_all(&schema::batch_points(&domain, tags));
        lines += body.lines().count();
        lp.push_str(&body);
    }
    write(dir.join("probe_run.lp"), lp.as_bytes(), &mut files)?;
    let mut summary = summary_table(report);
    if let Some(e) = energy {
        let mut jsonl = String::new();
        for r in &e.runs {
            jsonl.push_str(&serde_json::to_string(r).unwrap_or_default());
            jsonl.push('\n');
        }
        write(dir.join("energy.jsonl"), jsonl.as_bytes(), &mut files)?;
        summary.push('\n');
        summary.push_str(&crate::energy::summary_table(e));
    }
    write(dir.join("summary.txt"), summary.as_bytes(), &mut files)?;
    let trace: Vec<crate::report::model::PowerTrace> = power
        .map(|z| crate::report::model::PowerTrace {
            label: format!("{} ({})", z.label(), z.scope),
            points: z.t.iter().copied().zip(z.watts.iter().copied()).collect(),
        })
        .into_iter()
        .collect();
    if let Some(z) = power {
        files.push(write_power(dir, z)?);
    }
    let html = crate::report::html::render_with_power(report, energy, trace);
    write(dir.join("report.html"), html.as_bytes(), &mut files)?;
    Ok(Written { files, lines })
}

/// After a trace import: rewrites `energy.jsonl` (merged by run id with what was there) and adds
/// the runs with energy to `probe_run.lp` (same tags and timestamps, so InfluxDB merges fields).
pub fn write_energy(dir: &Path, report: &ProbeReport, energy: &ProbeEnergy, tags: &HostTags) -> Result<Vec<PathBuf>, super::ProbeCmdError> {
    let path = dir.join("energy.jsonl");
    let mut merged: std::collections::BTreeMap<usize, crate::energy::RunEnergyRecord> = std::fs::read_to_string(&path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<crate::energy::RunEnergyRecord>(l).ok())
        .map(|r| (r.run_id, r))
        .collect();
    for r in &energy.runs {
        merged.insert(r.run_id, r.clone());
    }
    let mut jsonl = String::new();
    for r in merged.values() {
        jsonl.push_str(&serde_json::to_string(r).unwrap_or_default());
        jsonl.push('\n');
    }
    let mut files = Vec::new();
    write(path, jsonl.as_bytes(), &mut files)?;
    let mut lp = std::fs::read_to_string(dir.join("probe_run.lp")).unwrap_or_default();
    for p in &convert::batch(report, Some(energy)).probe_runs {
        let _ = schema::probe_run_point(p, tags).write_line(&mut lp);
    }
    write(dir.join("probe_run.lp"), lp.as_bytes(), &mut files)?;
    Ok(files)
}

/// A load ladder's local results: `ladder.jsonl` (one level per line) and `ladder.lp`.
pub fn write_ladder(dir: &Path, l: &super::ladder::Ladder, tags: &HostTags) -> Result<Vec<PathBuf>, super::ProbeCmdError> {
    std::fs::create_dir_all(dir).map_err(|e| super::ProbeCmdError::Output { path: dir.to_owned(), source: e })?;
    let mut files = Vec::new();
    let mut jsonl = String::new();
    for v in &l.levels {
        jsonl.push_str(&serde_json::to_string(v).unwrap_or_default());
        jsonl.push('\n');
    }
    write(dir.join("ladder.jsonl"), jsonl.as_bytes(), &mut files)?;
    let mut lp = String::new();
    for p in &l.runs {
        let _ = schema::probe_run_point(p, tags).write_line(&mut lp);
    }
    write(dir.join("ladder.lp"), lp.as_bytes(), &mut files)?;
    Ok(files)
}

/// The power recorded during a probe: `power.csv` (`time_ns,watts`, one row per reading of the
/// zone the energy was attributed to), for the report's power timeline.
pub fn write_power(dir: &Path, z: &crate::energy::live::ZoneSeries) -> Result<PathBuf, super::ProbeCmdError> {
    let mut csv = format!("# {} (scope {})\ntime_ns,watts\n", z.label(), z.scope);
    for (t, w) in z.t.iter().zip(&z.watts) {
        csv.push_str(&format!("{t},{w}\n"));
    }
    let mut files = Vec::new();
    write(dir.join("power.csv"), csv.as_bytes(), &mut files)?;
    Ok(dir.join("power.csv"))
}
