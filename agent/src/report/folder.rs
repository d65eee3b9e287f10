//! The local result folder of a probe (written by `probe`, scheduled probes and `trace import`): `report.json` (the whole report, input of `report`),
//! `runs.jsonl` (one run per line), `probe_run.lp` (InfluxDB line protocol, the same points the
//! collector would write), `summary.txt` (the tables), `report.html`, and `energy.jsonl` (per-run
//! energy) and `power.csv` (the recorded power) when a power source was aligned with the probe.
//! [`read_folder`] reads such a folder back and [`render_html`] draws it, so `report --in DIR`
//! regenerates exactly the page the probe wrote.

use crate::energy::live::ZoneSeries;
use crate::energy::{ProbeEnergy, RunEnergyRecord};
use crate::probes::{convert, ladder::Ladder, pauses::store_tails, ProbeCmdError};
use std::path::{Path, PathBuf};
use wattflip_proto::lineproto;
use wattflip_proto::schema::{self, HostTags};
use wattflip_uflip::{summary_table, ProbeReport};

/// Files written, in order.
#[derive(Debug, Clone)]
pub struct Written {
    pub files: Vec<PathBuf>,
    pub lines: usize,
}

fn write(path: PathBuf, data: &[u8], out: &mut Vec<PathBuf>) -> Result<(), ProbeCmdError> {
    std::fs::write(&path, data).map_err(|e| ProbeCmdError::Output { path: path.clone(), source: e })?;
    out.push(path);
    Ok(())
}

pub fn write_all(
    dir: &Path,
    report: &ProbeReport,
    energy: Option<&ProbeEnergy>,
    power: Option<&ZoneSeries>,
    tags: &HostTags,
) -> Result<Written, ProbeCmdError> {
    std::fs::create_dir_all(dir).map_err(|e| ProbeCmdError::Output { path: dir.to_owned(), source: e })?;
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
        if !e.runs.is_empty() {
            files.push(store_tails(dir, &report.target, e)?);
        }
        summary.push('\n');
        summary.push_str(&crate::energy::summary_table(e));
    }
    write(dir.join("summary.txt"), summary.as_bytes(), &mut files)?;
    if let Some(z) = power {
        files.push(write_power(dir, z)?);
    }
    let html = render_html(report, energy, power);
    write(dir.join("report.html"), html.as_bytes(), &mut files)?;
    Ok(Written { files, lines })
}

/// After a trace import: rewrites `energy.jsonl` (merged by run id with what was there) and adds
/// the runs with energy to `probe_run.lp` (same tags and timestamps, so InfluxDB merges fields).
pub fn write_energy(dir: &Path, report: &ProbeReport, energy: &ProbeEnergy, tags: &HostTags) -> Result<Vec<PathBuf>, ProbeCmdError> {
    let path = dir.join("energy.jsonl");
    // An unreadable earlier file stops the import: overwriting it would lose the energy it holds.
    let mut merged: std::collections::BTreeMap<usize, RunEnergyRecord> = read_energy(dir)?.into_iter().flat_map(|e| e.runs).map(|r| (r.run_id, r)).collect();
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
    // The imported tails set this target's `--pause auto` pauses.
    if !energy.runs.is_empty() {
        files.push(store_tails(dir, &report.target, energy)?);
    }
    let mut lp = std::fs::read_to_string(dir.join("probe_run.lp")).unwrap_or_default();
    for p in &convert::batch(report, Some(energy)).probe_runs {
        let _ = schema::probe_run_point(p, tags).write_line(&mut lp);
    }
    write(dir.join("probe_run.lp"), lp.as_bytes(), &mut files)?;
    Ok(files)
}

/// A load ladder's local results: `ladder.jsonl` (one level per line) and `ladder.lp`.
pub fn write_ladder(dir: &Path, l: &Ladder, tags: &HostTags) -> Result<Vec<PathBuf>, ProbeCmdError> {
    std::fs::create_dir_all(dir).map_err(|e| ProbeCmdError::Output { path: dir.to_owned(), source: e })?;
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
pub fn write_power(dir: &Path, z: &ZoneSeries) -> Result<PathBuf, ProbeCmdError> {
    let mut csv = format!("# {}:{} (scope {})\n{POWER_CSV_COLUMNS}\n", z.source, z.zone, z.scope);
    for (t, w) in z.t.iter().zip(&z.watts) {
        csv.push_str(&format!("{t},{w}\n"));
    }
    let mut files = Vec::new();
    write(dir.join("power.csv"), csv.as_bytes(), &mut files)?;
    Ok(dir.join("power.csv"))
}

const POWER_CSV_COLUMNS: &str = "time_ns,watts";

/// The report page of a probe result: the one rendering of a local result, used by the probe
/// when it writes `report.html` and by `report --in` from [`read_folder`], so both pages agree.
pub fn render_html(report: &ProbeReport, energy: Option<&ProbeEnergy>, power: Option<&ZoneSeries>) -> String {
    let trace = power
        .map(|z| super::model::PowerTrace { label: format!("{} ({})", z.label(), z.scope), points: z.t.iter().copied().zip(z.watts.iter().copied()).collect() })
        .into_iter()
        .collect();
    super::html::render_with_power(report, energy, trace)
}

/// A probe result folder read back: the report, and its energy and recorded power when the
/// probe had a power source (or a trace was imported since).
#[derive(Debug, Clone)]
pub struct Folder {
    pub report: ProbeReport,
    pub energy: Option<ProbeEnergy>,
    pub power: Option<ZoneSeries>,
}

fn unreadable(path: PathBuf, reason: impl std::fmt::Display) -> ProbeCmdError {
    ProbeCmdError::Input { path, reason: reason.to_string() }
}

/// Reads `report.json` (required), `energy.jsonl` and `power.csv` (each optional) of `dir`.
pub fn read_folder(dir: &Path) -> Result<Folder, ProbeCmdError> {
    let path = dir.join("report.json");
    let text = std::fs::read_to_string(&path).map_err(|e| unreadable(path.clone(), format!("{e} (is {} a probe result folder?)", dir.display())))?;
    let report: ProbeReport = serde_json::from_str(&text).map_err(|e| unreadable(path.clone(), format!("not a probe report: {e}")))?;
    Ok(Folder { report, energy: read_energy(dir)?, power: read_power(dir)? })
}

/// `energy.jsonl` of `dir` (one [`RunEnergyRecord`] a line), `None` when the folder has none.
pub fn read_energy(dir: &Path) -> Result<Option<ProbeEnergy>, ProbeCmdError> {
    let path = dir.join("energy.jsonl");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(unreadable(path, e)),
    };
    let mut runs = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let r = serde_json::from_str(line)
            .map_err(|e| unreadable(path.clone(), format!("line {}: not an energy record: {e}; delete the file or rerun the probe", i + 1)))?;
        runs.push(r);
    }
    Ok(Some(ProbeEnergy { runs, ..Default::default() }))
}

/// `power.csv` of `dir` as written by [`write_power`], `None` when the folder has none.
pub fn read_power(dir: &Path) -> Result<Option<ZoneSeries>, ProbeCmdError> {
    let path = dir.join("power.csv");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(unreadable(path, e)),
    };
    let bad = |line: usize, what: &str| unreadable(path.clone(), format!("line {line}: {what}; delete the file or rerun the probe"));
    let mut lines = text.lines();
    let header = lines.next().unwrap_or_default();
    // `# source:zone (scope S)`: the source never holds a colon, the zone may.
    let (channel, scope) = header
        .strip_prefix("# ")
        .and_then(|h| h.strip_suffix(')'))
        .and_then(|h| h.rsplit_once(" (scope "))
        .ok_or_else(|| bad(1, "expected `# source:zone (scope S)`"))?;
    let (source, zone) = channel.split_once(':').ok_or_else(|| bad(1, "expected `# source:zone (scope S)`"))?;
    if lines.next() != Some(POWER_CSV_COLUMNS) {
        return Err(bad(2, &format!("expected the columns `{POWER_CSV_COLUMNS}`")));
    }
    let mut z = ZoneSeries { source: source.into(), zone: zone.into(), scope: scope.into(), ..Default::default() };
    for (i, line) in lines.enumerate() {
        let row = line.split_once(',').and_then(|(t, w)| Some((t.parse::<i64>().ok()?, w.parse::<f64>().ok()?)));
        let (t, w) = row.ok_or_else(|| bad(i + 3, &format!("`{line}` is not `time_ns,watts`")))?;
        z.t.push(t);
        z.watts.push(w);
    }
    Ok(Some(z))
}
