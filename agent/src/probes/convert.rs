//! From the engine's results to the wire format: `RunResult` → `v1::ProbeRun` (only runs that
//! produced statistics; an unsupported run becomes a `probe_unsupported` event, never zeros), and
//! the power recorded around a probe → full-rate `v1::PowerSample`s in batches of bounded size.

use crate::energy::live::ZoneSeries;
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
        energy_above_idle_j: e.filter(|e| !e.idle_unknown).map(|e| e.energy_above_idle_j),
        background_energy_j: e.map(|e| e.background_energy_j),
        background_s: e.map(|e| e.background_s),
        idle_baseline_w: e.filter(|e| !e.idle_unknown).map(|e| e.idle_baseline_w),
        j_per_mib: e.and_then(|e| e.j_per_mib),
        j_per_io: e.and_then(|e| e.j_per_io),
        datasheet_ratio: e.and_then(|e| e.datasheet_ratio),
        energy_source: e.map(|e| e.source.clone()).unwrap_or_default(),
        background_class: e.map(|e| e.background_class.clone()).unwrap_or_default(),
        // Set by `governor sweep`, which knows the power state a run was measured in.
        power_state: None,
        power_state_max_w: None,
        power_w: None,
        energy_start_ns: e.and_then(|e| e.trace_start_ns),
        energy_end_ns: e.and_then(|e| e.trace_end_ns),
        energy_start_found: e.map(|e| e.start_found.clone()).unwrap_or_default(),
        energy_end_found: e.map(|e| e.end_found.clone()).unwrap_or_default(),
        idle_spread_w: e.and_then(|e| e.idle_spread_w),
        energy_tail_cut: e.map(|e| e.tail_cut),
        energy_gap_samples: e.map(|e| e.gap_samples),
        energy_baseline_source: e.map(|e| e.baseline_source.clone()).unwrap_or_default(),
        energy_coverage: e.and_then(|e| e.coverage),
        energy_low_confidence: e.map(|e| e.low_confidence),
        energy_u95_j: e.and_then(|e| e.energy_u95_j),
        energy_above_idle_u95_j: e.and_then(|e| e.energy_above_idle_u95_j),
        background_energy_u95_j: e.and_then(|e| e.background_u95_j),
        idle_u95_w: e.and_then(|e| e.idle_u95_w),
        j_per_mib_u95: e.and_then(|e| e.j_per_mib_u95),
        energy_low_confidence_reason: e.and_then(|e| e.low_confidence_reason.clone()).unwrap_or_default(),
    })
}

/// The idle characterisation of the probe's target, measured before its first run.
pub fn idle_profile(report: &ProbeReport, i: &crate::energy::IdleRecord, device: &str) -> v1::IdleProfile {
    v1::IdleProfile {
        time_ns: i.from_ns,
        device: device.to_string(),
        model: report.target.model.clone().unwrap_or_else(|| report.target.kind.as_str().to_string()),
        serial: report.target.serial.clone().unwrap_or_default(),
        energy_source: i.source.clone(),
        probe_id: report.started_ns.to_string(),
        window_s: i.window_s,
        samples: u32::try_from(i.samples).unwrap_or(u32::MAX),
        median_w: i.median_w,
        spread_w: i.spread_w,
        activity_period_s: i.activity_period_s,
        activity_correlation: i.activity_correlation,
        activity_energy_j: i.activity_energy_j,
    }
}

/// The batch a probe sends: its runs (with their energy when measured), the target's idle
/// profile when one was measured, plus one event per unsupported run.
pub fn batch(report: &ProbeReport, energy: Option<&ProbeEnergy>) -> v1::Batch {
    let device = device_tag(report);
    let mut b = v1::Batch::default();
    if let Some(i) = energy.and_then(|e| e.idle.as_ref()) {
        b.idle_profiles.push(idle_profile(report, i, &device));
    }
    for (k, n) in energy.map(|e| e.notices.as_slice()).unwrap_or_default().iter().enumerate() {
        b.events.push(v1::Event {
            time_ns: i64::try_from(report.started_ns).unwrap_or(i64::MAX).saturating_sub(1 + k as i64),
            kind: n.kind.clone(),
            severity: v1::Severity::Warning as i32,
            device: device.clone(),
            message: n.message.clone(),
            attributes: Default::default(),
        });
    }
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

/// Full-rate samples per batch. A probe recorded at 1 ms holds thousands of readings per second
/// per zone; bounded batches keep each gRPC message far below the collector's 4 MiB default
/// `limits.max_message_bytes` (a sample is under 100 bytes) and let acknowledgements advance.
pub const FULL_RATE_BATCH: usize = 4096;

/// The power recorded around a probe (every zone, from the idle window before its first run to
/// the end of its tail) as full-rate `power` samples, at most `max` per batch. Watts only: the
/// run-mode window aggregates carry the joules, and both on one window would count it twice.
pub fn full_rate_batches(zones: &[ZoneSeries], max: usize) -> Vec<v1::Batch> {
    let max = max.max(1);
    let mut out: Vec<v1::Batch> = Vec::new();
    let mut current = v1::Batch::default();
    for z in zones {
        for (i, (&t, &w)) in z.t.iter().zip(&z.watts).enumerate() {
            current.power.push(v1::PowerSample {
                time_ns: t,
                source: z.source.clone(),
                zone: z.zone.clone(),
                scope: z.scope.clone(),
                method: z.method,
                watts: Some(w),
                joules: None,
                interval_ns: z.interval_ns.get(i).map(|&n| i64::try_from(n).unwrap_or(i64::MAX)).unwrap_or(0),
                full_rate: true,
                flags: z.flags.get(i).map(|f| f.words()).unwrap_or_default(),
                ..Default::default()
            });
            if current.power.len() == max {
                out.push(std::mem::take(&mut current));
            }
        }
    }
    if !current.power.is_empty() {
        out.push(current);
    }
    out
}

/// Everything a measured probe sends, in order: its runs (with their energy) and events (with
/// `energy_not_measurable` when only CPU-side power was recorded), then its full-rate power in
/// batches of at most [`FULL_RATE_BATCH`] samples.
pub fn batches(m: &super::Measured) -> Vec<v1::Batch> {
    let mut first = batch(&m.report, m.energy.as_ref());
    if m.energy_unmeasurable {
        // The runs carry no energy fields; this says why, and what would make it measurable.
        first.events.push(v1::Event {
            time_ns: i64::try_from(m.report.started_ns).unwrap_or(i64::MAX),
            kind: "energy_not_measurable".into(),
            severity: v1::Severity::Info as i32,
            device: device_tag(&m.report),
            message: m.energy_note.clone(),
            attributes: Default::default(),
        });
    }
    first.events.extend(m.power.iter().flat_map(stall_events).map(|mut e| {
        e.device = device_tag(&m.report);
        e
    }));
    let mut out = vec![first];
    out.extend(full_rate_batches(&m.recording, FULL_RATE_BATCH));
    out
}

/// One `power_recorder_stall` event per stall of the recorder while it recorded `zone`: the runs
/// overlapping it carry `energy_coverage` < 1 and `energy_low_confidence`.
fn stall_events(zone: &ZoneSeries) -> impl Iterator<Item = v1::Event> + '_ {
    zone.stalls.iter().map(move |&(at, gap)| v1::Event {
        time_ns: at,
        kind: "power_recorder_stall".into(),
        severity: v1::Severity::Warning as i32,
        device: String::new(),
        message: format!(
            "power recorder stalled {:.1} ms before this reading of {}: the energy of that interval is known only as its total; runs overlapping it are flagged low_confidence with their coverage",
            gap as f64 / 1e6,
            zone.label()
        ),
        attributes: Default::default(),
    })
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(name: &str, n: usize, interval_ns: u64) -> ZoneSeries {
        ZoneSeries {
            source: "hwmon".into(),
            zone: name.into(),
            scope: "rail".into(),
            method: v1::Method::Measured as i32,
            t: (0..n as i64).map(|i| 1_000 + i).collect(),
            watts: (0..n).map(|i| i as f64).collect(),
            interval_ns: vec![interval_ns; n],
            flags: vec![crate::sensors::Flags::NONE; n],
            ..Default::default()
        }
    }

    #[test]
    fn each_recorder_stall_is_a_warning_event_at_the_reading_after_it() {
        let z = ZoneSeries { stalls: vec![(1_800_000_000_092_000_000, 92_000_000)], ..zone("ina226/power1", 3, 0) };
        let e: Vec<v1::Event> = stall_events(&z).collect();
        assert_eq!(e.len(), 1);
        assert_eq!((e[0].time_ns, e[0].kind.as_str(), e[0].severity), (1_800_000_000_092_000_000, "power_recorder_stall", v1::Severity::Warning as i32));
        assert!(e[0].message.starts_with("power recorder stalled 92.0 ms before this reading of hwmon:ina226/power1"), "{}", e[0].message);
        assert_eq!(stall_events(&zone("a", 3, 0)).count(), 0);
    }

    #[test]
    fn full_rate_samples_are_split_into_bounded_batches_in_order() {
        let b = full_rate_batches(&[zone("a", 5, 0), zone("b", 4, 1_000_000)], 4);
        assert_eq!(b.iter().map(|b| b.power.len()).collect::<Vec<_>>(), vec![4, 4, 1]);
        let all: Vec<&v1::PowerSample> = b.iter().flat_map(|b| &b.power).collect();
        assert!(all.iter().all(|p| p.full_rate && p.joules.is_none() && p.method == v1::Method::Measured as i32));
        assert_eq!(all.iter().filter(|p| p.zone == "a").map(|p| p.watts.unwrap()).collect::<Vec<_>>(), vec![0.0, 1.0, 2.0, 3.0, 4.0]);
        assert_eq!(all[5].zone, "b");
        assert_eq!(all[5].interval_ns, 1_000_000);
        assert_eq!(all[0].interval_ns, 0);
        assert!(all.iter().all(|p| p.flags.is_empty()));
        // A BMC whose reading state is deactivated: its full-rate points carry the flag too.
        let mut bmc = zone("dcmi/system", 2, 0);
        bmc.flags[1] = crate::sensors::Flags::DEACTIVATED;
        let flags: Vec<Vec<String>> = full_rate_batches(&[bmc], 4)[0].power.iter().map(|p| p.flags.clone()).collect();
        assert_eq!(flags, vec![vec![], vec!["deactivated".to_string()]]);
        assert!(full_rate_batches(&[], 4).is_empty());
        assert_eq!(full_rate_batches(&[zone("a", 8, 0)], 4).len(), 2, "an exact multiple leaves no empty batch");
    }
}
