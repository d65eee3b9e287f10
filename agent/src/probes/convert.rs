//! From the engine's results to the wire format: `RunResult` → `v1::ProbeRun` (only runs that
//! produced statistics; an unsupported run becomes a `probe_unsupported` event, never zeros).

use crate::energy::ProbeEnergy;
use wattflip_proto::v1;
use wattflip_uflip::{ProbeReport, RunResult, RunStatus, TargetKind};

/// The `device` tag of a target: the kernel name for block devices, `file:<name>` for files.
pub fn device_tag(report: &ProbeReport) -> String {
    let path = &report.target.path;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| path.display().to_string());
    match report.target.kind {
        TargetKind::Block => name,
        TargetKind::File => format!("file:{name}"),
    }
}

pub fn probe_run(report: &ProbeReport, r: &RunResult, device: &str, energy: Option<&ProbeEnergy>) -> Option<v1::ProbeRun> {
    if r.status != RunStatus::Ok {
        return None;
    }
    let e = energy.and_then(|e| e.for_run(r.run_id));
    Some(v1::ProbeRun {
        run_id: format!("{}-{}", report.started_ns, r.run_id),
        device: device.to_string(),
        model: report.target.model.clone().unwrap_or_else(|| report.target.kind.as_str().to_string()),
        serial: report.target.serial.clone().unwrap_or_default(),
        firmware: report.target.firmware.clone().unwrap_or_default(),
        bench: r.bench.clone(),
        experiment: r.experiment.clone(),
        pattern: r.pattern.clone(),
        varying: r.varying.clone(),
        value: r.value,
        repetition: r.repetition,
        start_ns: i64::try_from(r.start_ns).unwrap_or(i64::MAX),
        end_ns: i64::try_from(r.end_ns).unwrap_or(i64::MAX),
        io_count: r.io_count,
        ignore_io: r.ignore_io,
        io_size_bytes: r.io_size_bytes,
        mean_us: r.mean_us,
        min_us: r.min_us,
        max_us: r.max_us,
        stddev_us: r.stddev_us,
        p50_us: r.p50_us,
        p95_us: r.p95_us,
        p99_us: r.p99_us,
        iops: r.iops,
        mib_per_s: r.mib_per_s,
        parameters: r.parameters.clone().into_iter().collect(),
        target_kind: r.target_kind.clone(),
        energy_j: e.map(|e| e.energy_j),
        energy_above_idle_j: e.map(|e| e.energy_above_idle_j),
        background_energy_j: e.map(|e| e.background_energy_j),
        background_s: e.map(|e| e.background_s),
        idle_baseline_w: e.map(|e| e.idle_baseline_w),
        j_per_mib: e.and_then(|e| e.j_per_mib),
        j_per_io: e.and_then(|e| e.j_per_io),
        datasheet_ratio: e.and_then(|e| e.datasheet_ratio),
        energy_source: e.map(|e| e.source.clone()).unwrap_or_default(),
        background_class: e.map(|e| e.background_class.clone()).unwrap_or_default(),
        // Set by `governor sweep`, which knows the power state a run was measured in.
        power_state: None,
        power_state_max_w: None,
        power_w: None,
    })
}

/// The batch a probe sends: its runs (with their energy when measured) plus one event per
/// unsupported run.
pub fn batch(report: &ProbeReport, energy: Option<&ProbeEnergy>) -> v1::Batch {
    let device = device_tag(report);
    let mut b = v1::Batch::default();
    for r in &report.runs {
        match probe_run(report, r, &device, energy) {
            Some(p) => b.probe_runs.push(p),
            None => {
                if let RunStatus::Unsupported { reason } = &r.status {
                    b.events.push(v1::Event {
                        // Unsupported runs issue no IO; offset by run id so no two events share a timestamp.
                        time_ns: i64::try_from(report.started_ns + r.run_id as u64).unwrap_or(i64::MAX),
                        kind: "probe_unsupported".into(),
                        severity: v1::Severity::Info as i32,
                        device: device.clone(),
                        message: format!("{} {}={}: {reason}", r.experiment, r.varying, r.value),
                        attributes: Default::default(),
                    });
                }
            }
        }
    }
    b
}
