//! What a report shows, independent of where it came from: a local probe result
//! ([`Report::from_probe`]) or InfluxDB ([`super::influx`]). `html` renders only this model, so both
//! sources give the same self-contained file. A new kind of content is a field here, filled by both
//! sources (or left empty where a source cannot know it), and a section in `html`.

use wattflip_proto::v1;
use wattflip_uflip::{ProbeReport, RunStatus};

/// One report: facts, runs per device, power timeline, runs that could not be measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// The `<title>` and heading suffix, e.g. the target path or the host.
    pub subject: String,
    /// Label/value rows of the facts table, in order.
    pub facts: Vec<(String, String)>,
    /// Measured runs grouped per device, devices in order of their first run.
    pub devices: Vec<DeviceRuns>,
    /// Power per channel over the probe window; empty when no power source was aligned.
    pub power: Vec<PowerTrace>,
    /// Why a run was not measured, one line each (e.g. "granularity/SW io_size=…: O_DIRECT …").
    pub unsupported: Vec<String>,
}

/// The runs of one device (a probe target).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceRuns {
    pub device: String,
    pub model: String,
    /// In execution order.
    pub runs: Vec<Run>,
}

/// One measured uFLIP run: the wire format's record (statistics, and energy when a power source
/// was aligned with it), plus the background-work tail the power trace showed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Run {
    pub probe: v1::ProbeRun,
    pub background: Option<Background>,
}

/// The background-work tail of one run (`docs/energy-method.md` §5–6).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Background {
    pub duration_s: f64,
    pub energy_j: Option<f64>,
    /// The experiment's class of the paper's Table 2 (Ex, S, GWP, NS, None).
    pub class: Option<String>,
}

/// Power of one channel: (UTC ns, W) points in time order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PowerTrace {
    /// e.g. "rapl psys (psys)": source, zone and scope, so overlapping scopes stay apart.
    pub label: String,
    pub points: Vec<(i64, f64)>,
}

impl Run {
    /// Energy per MB moved (10^6 bytes), when the run has energy and moved data.
    pub fn joules_per_mb(&self) -> Option<f64> {
        let mb = self.probe.io_count as f64 * self.probe.io_size_bytes as f64 / 1e6;
        self.probe.energy_j.filter(|_| mb > 0.0).map(|e| e / mb)
    }

    /// Energy per IO in mJ.
    pub fn millijoules_per_io(&self) -> Option<f64> {
        self.probe.energy_j.filter(|_| self.probe.io_count > 0).map(|e| 1000.0 * e / self.probe.io_count as f64)
    }
}

impl Report {
    /// The report of a local probe; `power` is the trace of the probe window when the agent had a
    /// power source aligned with it (empty otherwise).
    pub fn from_probe(report: &ProbeReport, energy: Option<&crate::energy::ProbeEnergy>, power: Vec<PowerTrace>) -> Report {
        let t = &report.target;
        let device = crate::probes::convert::device_tag(report);
        // The same conversion as the runs sent to the collector, so both reports agree.
        let runs: Vec<Run> = report
            .runs
            .iter()
            .filter(|r| r.bench != "format" && r.bench != "prepare")
            .filter_map(|r| crate::probes::convert::probe_run(report, r, &device, energy))
            .map(|probe| {
                let background = probe.background_s.map(|duration_s| Background {
                    duration_s,
                    energy_j: probe.background_energy_j,
                    class: Some(probe.background_class.clone()).filter(|c| !c.is_empty()),
                });
                Run { probe, background }
            })
            .collect();
        let unsupported: Vec<String> = report
            .runs
            .iter()
            .filter_map(|r| match &r.status {
                RunStatus::Unsupported { reason } => {
                    Some(format!("{} {}={}: {reason}", r.experiment, r.varying, crate::probes::convert::fmt_value(&r.varying, r.value)))
                }
                _ => None,
            })
            .collect();
        let facts = vec![
            ("target".into(), t.path.display().to_string()),
            ("kind".into(), t.kind.as_str().to_string()),
            ("size".into(), format!("{:.2} GiB", t.size as f64 / (1u64 << 30) as f64)),
            ("logical block size".into(), format!("{} B", t.logical_block_size)),
            ("model / serial".into(), format!("{} / {}", t.model.as_deref().unwrap_or("—"), t.serial.as_deref().unwrap_or("—"))),
            ("started".into(), utc(report.started_ns)),
            ("ended".into(), utc(report.ended_ns)),
            ("runs".into(), format!("{} ({} measured, {} unsupported)", report.runs.len(), runs.len(), unsupported.len())),
            ("seed / engine".into(), format!("{} / wattflip-uflip {}", report.seed, report.engine_version)),
        ];
        let devices =
            if runs.is_empty() { Vec::new() } else { vec![DeviceRuns { device, model: t.model.clone().unwrap_or_else(|| t.kind.as_str().to_string()), runs }] };
        Report { subject: t.path.display().to_string(), facts, devices, power, unsupported }
    }

    /// First submit and last completion over every run, UTC ns.
    pub fn probe_window(&self) -> Option<(i64, i64)> {
        let runs = self.devices.iter().flat_map(|d| &d.runs);
        let start = runs.clone().map(|r| r.probe.start_ns).min()?;
        let end = runs.map(|r| r.probe.end_ns).max()?;
        Some((start, end))
    }
}

/// A UTC timestamp as `YYYY-MM-DD HH:MM:SS UTC`.
pub fn utc(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_795_000_000_000_000_000), "2026-11-18 11:06:40 UTC");
    }

    #[test]
    fn energy_ratios() {
        let run = |io_count, io_size_bytes, energy_j| Run { probe: v1::ProbeRun { io_count, io_size_bytes, energy_j, ..Default::default() }, background: None };
        assert_eq!(run(1000, 4096, Some(8.192)).joules_per_mb(), Some(2.0));
        assert_eq!(run(1000, 4096, Some(8.192)).millijoules_per_io(), Some(8.192));
        assert_eq!(run(0, 4096, Some(1.0)).joules_per_mb(), None);
        assert_eq!(run(10, 10, None).millijoules_per_io(), None);
    }
}
