//! One read of one drive's health: the tool calls ([`read`], no state, so it can run on any
//! worker thread) and the conversions of their outputs into wire records and samples that the
//! monitor (`monitor`) applies with its memory of what was reported before. A new health source is
//! a field of [`Reading`], its call in [`read`] and its handling in `DriveMonitor::absorb`.

use super::tools::{DriveTools, HealthDevice};
use wattflip_drives::crosscheck::SourceView;
use wattflip_drives::{Celsius, Checked, CriticalWarning, PowerCheck, PowerMode, SmartLog, SmartctlError, SmartctlReport};
use wattflip_proto::v1;

/// What the tools answered for one device, each with the UTC ns time of its answer; `None` for a
/// tool not run (not installed, not for this kind of drive, or its type refused before).
#[derive(Debug)]
pub struct Reading {
    pub nvme: Option<(i64, Result<SmartLog, String>)>,
    pub smartctl: Option<(i64, Result<Checked, SmartctlError>)>,
}

/// Runs nvme-cli's smart-log (NVMe) and smartctl (with its `-d` type, and `-n` for ATA/SCSI so a
/// sleeping disk stays asleep) for `dev`. `skip_smartctl`: smartctl refused its type before.
pub fn read(tools: &DriveTools, dev: &HealthDevice, skip_smartctl: bool, nocheck: Option<PowerCheck>, now: &dyn Fn() -> i64) -> Reading {
    let nvme = match (dev.nvme, &tools.nvme) {
        (true, Some(nvme)) => {
            let r = nvme.smart_log(&dev.node).map_err(|e| e.to_string());
            Some((now(), r))
        }
        _ => None,
    };
    let smartctl = match &tools.smartctl {
        Some(s) if !skip_smartctl => {
            let r = s.report_checked(&dev.node, dev.device_type.as_deref().or(dev.nvme.then_some("nvme")), nocheck);
            Some((now(), r))
        }
        _ => None,
    };
    Reading { nvme, smartctl }
}

/// The `drive_power_mode` record of a drive smartctl checked.
pub fn power_mode(time_ns: i64, dev: &HealthDevice, mode: PowerMode, skipped: bool) -> v1::DrivePowerMode {
    v1::DrivePowerMode { time_ns, device: dev.tag.clone(), serial: dev.serial.trim().to_string(), mode: mode.as_str().into(), skipped }
}

/// What the set bits of an NVMe critical warning mean (docs/sources-and-drives.md §5.4), for event messages.
pub fn describe_warning(w: CriticalWarning) -> String {
    let bits = [
        (w.spare_below_threshold(), "available spare below threshold"),
        (w.temperature(), "temperature above or below a threshold (check airflow; the drive may throttle)"),
        (w.reliability_degraded(), "reliability degraded (media or internal errors)"),
        (w.read_only(), "media is read-only"),
        (w.volatile_backup_failed(), "volatile memory backup failed"),
        (w.pmr_read_only(), "persistent memory region read-only or unreliable"),
    ];
    let set: Vec<&str> = bits.iter().filter(|(b, _)| *b).map(|(_, s)| *s).collect();
    if set.is_empty() {
        "cleared".into()
    } else {
        set.join("; ")
    }
}

/// A 128-bit counter on the 64-bit wire: saturates (2^64 data units is 9.4 ZB, not reached).
fn sat_u64(v: u128) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// The `nvme_smart` record of an nvme-cli SMART log. A counter the log lacks or that could not be
/// read is left out of the record (absent on the wire, no field in the store); an unreadable one is
/// also reported by `DriveMonitor::absorb` as a `drive_field` event naming the field.
pub fn smart_record(time_ns: i64, dev: &HealthDevice, log: &SmartLog) -> v1::NvmeSmart {
    let tm = &log.thermal_mgmt;
    v1::NvmeSmart {
        time_ns,
        device: dev.tag.clone(),
        serial: dev.serial.trim().to_string(),
        critical_warning: u32::from(log.critical_warning.0),
        composite_celsius: log.composite.map(|c| c.0),
        percentage_used: log.percentage_used.map(u32::from),
        data_units_read: log.data_units_read.map(sat_u64),
        data_units_written: log.data_units_written.map(sat_u64),
        warning_temp_time_min: log.warning_temp_time_min.map(u64::from),
        critical_temp_time_min: log.critical_temp_time_min.map(u64::from),
        thm_temp1_trans_count: tm[0].transitions.map(u64::from),
        thm_temp2_trans_count: tm[1].transitions.map(u64::from),
        thm_temp1_total_time_s: tm[0].total_time_s.map(u64::from),
        thm_temp2_total_time_s: tm[1].total_time_s.map(u64::from),
        power_on_hours: log.power_on_hours.map(sat_u64),
        unsafe_shutdowns: log.unsafe_shutdowns.map(sat_u64),
        media_errors: log.media_errors.map(sat_u64),
    }
}

/// The `nvme_smart` record from smartctl's NVMe log, when nvme-cli is not available. smartctl ≤ 7.5
/// has no thermal-management counters in JSON (§7.1): they are absent, not 0.
pub fn smart_record_from_smartctl(time_ns: i64, dev: &HealthDevice, r: &SmartctlReport) -> Option<v1::NvmeSmart> {
    let n = r.nvme.as_ref()?;
    Some(v1::NvmeSmart {
        time_ns,
        device: dev.tag.clone(),
        serial: dev.serial.trim().to_string(),
        critical_warning: u32::from(n.critical_warning.0),
        composite_celsius: n.temperature.or(r.temperature).map(|c| c.0),
        percentage_used: n.percentage_used.map(u32::from),
        data_units_read: n.data_units_read.map(sat_u64),
        data_units_written: n.data_units_written.map(sat_u64),
        warning_temp_time_min: n.warning_temp_time_min.map(u64::from),
        critical_temp_time_min: n.critical_temp_time_min.map(u64::from),
        power_on_hours: n.power_on_hours.map(sat_u64),
        unsafe_shutdowns: n.unsafe_shutdowns.map(sat_u64),
        media_errors: n.media_errors.map(sat_u64),
        ..Default::default()
    })
}

pub fn view(source: &str, serial: Option<&String>, model: Option<&String>, temperature: Option<Celsius>) -> SourceView {
    SourceView { source: source.into(), model: model.cloned(), serial: serial.cloned(), firmware: None, temperature }
}

pub fn sample(time_ns: i64, source: &str, dev: &HealthDevice, sensor: &str, celsius: f64) -> v1::TemperatureSample {
    v1::TemperatureSample { time_ns, source: source.into(), device: dev.tag.clone(), sensor: sensor.into(), celsius }
}

#[cfg(test)]
mod tests {
    use super::super::monitor::DriveMonitor;
    use super::*;
    use std::sync::Arc;
    use wattflip_drives::fake::ScriptedRunner;
    use wattflip_drives::Smartctl;

    fn fixture(rel: &str) -> String {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("drives/tests/fixtures").join(rel);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    /// `-n standby` on a spun-down SATA disk: smartctl exits 2 with "Device is in STANDBY mode"
    /// (fixture README: smartmontools `ataprint.cpp`). That poll records the drive's power mode as
    /// a point, not an error and not an event; once awake, the reading and its mode (`ACTIVE or
    /// IDLE` → active) come back. `never` passes no `-n` at all.
    #[test]
    fn a_sleeping_disk_is_left_asleep_and_its_power_mode_recorded() {
        let skipped = fixture("smartctl/constructed-smartctl-7.4-sata-n-standby-skipped.json");
        let awake = fixture("smartctl/constructed-smartctl-7.3-sata-a.json").replacen(
            "\"model_name\"",
            "\"power_mode\": {\"ata_value\": 255, \"name\": \"ACTIVE or IDLE\"},\n  \"model_name\"",
            1,
        );
        let runner = Arc::new(ScriptedRunner::new());
        let argv = ["smartctl", "--json", "-a", "-n", "standby", "-d", "sat", "/dev/sdc"];
        runner.expect(&argv, 2, &skipped, "").expect(&argv, 64, &awake, "");
        runner.expect(&["smartctl", "--json", "-a", "-d", "sat", "/dev/sdc"], 64, &awake, "");
        let tools = DriveTools { nvme: None, smartctl: Some(Smartctl::new(runner.clone())), unavailable: Vec::new() };
        let dev = HealthDevice {
            node: "/dev/sdc".into(),
            tag: "sdc".into(),
            device_type: Some("sat".into()),
            serial: "S0SATA0000001".into(),
            nvme: false,
            identified: true,
        };
        let mut m = DriveMonitor::new(tools.clone(), vec![dev.clone()]);
        let mode = |t: i64, mode: &str, skipped: bool| v1::DrivePowerMode {
            time_ns: t,
            device: "sdc".into(),
            serial: "S0SATA0000001".into(),
            mode: mode.into(),
            skipped,
        };
        let p = m.poll(&|| 1);
        assert_eq!((p.errors, p.events.len(), p.temperature.len()), (0, 0, 0), "{:?}", p.events);
        assert_eq!(p.drive_power_modes, vec![mode(1, "standby", true)]);
        let p = m.poll(&|| 2);
        assert_eq!((p.errors, p.drive_power_modes.clone()), (0, vec![mode(2, "active", false)]));
        let temps: Vec<(&str, f64)> = p.temperature.iter().map(|t| (t.device.as_str(), t.celsius)).collect();
        assert_eq!(temps, vec![("sdc", 33.0)]);
        let mut never = DriveMonitor::new(tools, vec![dev]).with_nocheck(PowerCheck::Never);
        assert_eq!(never.poll(&|| 3).errors, 0);
        assert_eq!(runner.remaining(), 0);
    }
}
