//! The SMART monitor: every `drives.smart_interval` it reads `nvme smart-log` (source `nvme_cli`)
//! and `smartctl --json -a` (source `smartctl`, with `-n standby` for ATA/SCSI so a sleeping disk
//! stays asleep) for each drive, and turns them into `temperature` samples, one `nvme_smart`
//! record per NVMe drive, `drive_power_mode` points and `critical_warning` events.
//!
//! Why a separate, slower interval than power sampling: every read is an admin command (CAP_SYS_ADMIN,
//! one at a time per controller, docs/sources-and-drives.md §9) and Zhang et al. polled SMART once a minute so as
//! not to perturb the workload (§8.2). The tool calls block (the runner waits for the child): they
//! are [`read`] (no state, `reading`), run for `run` by the worker pool (`pool`) so a hung drive
//! delays only itself, and their results are applied here by [`DriveMonitor::absorb`], which keeps
//! what was reported. One failing tool or drive degrades only itself: its error becomes a
//! `sensor_error` event once per distinct message.
//!
//! To add a health source, run it in `reading::read` and turn its output into samples with its own
//! `source` name in [`DriveMonitor::absorb`].

use super::identify::Unidentified;
use super::reading::describe_warning;
use super::reading::{power_mode, read, sample, smart_record, smart_record_from_smartctl, view, Reading};
use super::tools::{DriveTools, HealthDevice};
use crate::events::event;
use std::collections::{BTreeSet, HashMap};
use wattflip_drives::crosscheck::{cross_check, Disagreement, SourceView, DEFAULT_TEMPERATURE_TOLERANCE};
use wattflip_drives::{Checked, CriticalWarning, FieldProblem, PowerCheck, SmartctlError};
use wattflip_proto::v1;

/// Polls the drives' health through the tools.
pub struct DriveMonitor {
    tools: DriveTools,
    devices: Vec<HealthDevice>,
    /// smartctl's `-n` for ATA/SCSI drives (`drives.smart_nocheck`); `None`: never check.
    nocheck: Option<PowerCheck>,
    /// Last critical warning per device tag, so an event fires only when it changes.
    warnings: HashMap<String, u8>,
    /// Last error per (source, device), so a persistent failure is reported once.
    last_error: HashMap<String, String>,
    /// Unreadable fields already reported, as `source:device:field → raw`.
    field_problems: HashMap<String, String>,
    /// Per device, the disagreements between tools raised so far (`field (source vs reference)`).
    disagreements: HashMap<String, BTreeSet<String>>,
    /// Device tags whose `-d` type smartctl refused: not asked again.
    refused: BTreeSet<String>,
    /// Drives discovery could not identify (asleep): identified by their first full report.
    unidentified: Unidentified,
}

/// What one poll produced.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Poll {
    pub temperature: Vec<v1::TemperatureSample>,
    pub nvme_smart: Vec<v1::NvmeSmart>,
    pub drive_power_modes: Vec<v1::DrivePowerMode>,
    pub events: Vec<v1::Event>,
    /// Inventory entries of drives identified after discovery (`identify`), each once.
    pub drive_identities: Vec<v1::DriveIdentity>,
    /// Tool calls that failed (also reported as events the first time).
    pub errors: u64,
    /// Reads that were due while the drive's previous read still ran (skipped; see `pool`).
    pub late: u64,
}

impl Poll {
    /// Moves everything into a batch.
    pub fn into_batch(self, batch: &mut v1::Batch) {
        batch.temperature.extend(self.temperature);
        batch.nvme_smart.extend(self.nvme_smart);
        batch.drive_power_modes.extend(self.drive_power_modes);
        batch.events.extend(self.events);
        batch.drive_identities.extend(self.drive_identities);
    }

    /// Adds another poll's output to this one.
    pub fn merge(&mut self, other: Poll) {
        self.temperature.extend(other.temperature);
        self.nvme_smart.extend(other.nvme_smart);
        self.drive_power_modes.extend(other.drive_power_modes);
        self.events.extend(other.events);
        self.drive_identities.extend(other.drive_identities);
        self.errors += other.errors;
        self.late += other.late;
    }
}

impl DriveMonitor {
    /// A monitor that passes `-n standby` to ATA/SCSI drives ([`DriveMonitor::with_nocheck`]).
    pub fn new(tools: DriveTools, devices: Vec<HealthDevice>) -> Self {
        DriveMonitor {
            tools,
            unidentified: Unidentified::of(&devices),
            devices,
            nocheck: Some(PowerCheck::default()),
            warnings: HashMap::new(),
            last_error: HashMap::new(),
            field_problems: HashMap::new(),
            disagreements: HashMap::new(),
            refused: BTreeSet::new(),
        }
    }

    /// Another power check (`drives.smart_nocheck`: `never` reads even a sleeping drive).
    pub fn with_nocheck(mut self, check: PowerCheck) -> Self {
        self.nocheck = (check != PowerCheck::Never).then_some(check);
        self
    }

    /// What a pool needs to read the devices away from the monitor: the tools, the devices and
    /// the power check ([`DriveMonitor::refused`] says, per read, whether to skip smartctl).
    pub fn read_plan(&self) -> (DriveTools, Vec<HealthDevice>, Option<PowerCheck>) {
        (self.tools.clone(), self.devices.clone(), self.nocheck)
    }

    /// Whether smartctl refused this device's `-d` type.
    pub fn refused(&self, tag: &str) -> bool {
        self.refused.contains(tag)
    }

    /// The temperature sensors this monitor reads, for the Hello inventory (composite only: the
    /// extra NVMe sensors are known only once read).
    pub fn describe(&self) -> Vec<v1::TemperatureSensor> {
        let mut out = Vec::new();
        for d in &self.devices {
            if d.nvme {
                if let Some(n) = &self.tools.nvme {
                    out.push(v1::TemperatureSensor {
                        source: "nvme_cli".into(),
                        device: d.tag.clone(),
                        sensor: "Composite".into(),
                        path: format!("{} smart-log {} -o json", n.program(), d.node),
                    });
                }
            }
            if self.tools.smartctl.is_some() {
                out.push(v1::TemperatureSensor {
                    source: "smartctl".into(),
                    device: d.tag.clone(),
                    sensor: if d.nvme { "Composite".into() } else { "Temperature".into() },
                    path: match &d.device_type {
                        Some(t) => format!("smartctl --json -a -d {t} {}", d.node),
                        None => format!("smartctl --json -a {}", d.node),
                    },
                });
            }
        }
        out
    }

    /// Whether there is anything to poll.
    pub fn is_empty(&self) -> bool {
        self.devices.is_empty() || !self.tools.any()
    }

    /// Reads every device with every tool once, one after the other (`inventory`, tests; `run`
    /// reads them concurrently through [`super::pool::HealthPool`]). `now` gives the UTC ns
    /// timestamp of a reading.
    pub fn poll(&mut self, now: &dyn Fn() -> i64) -> Poll {
        let mut out = Poll::default();
        for dev in self.devices.clone() {
            let r = read(&self.tools, &dev, self.refused.contains(&dev.tag), self.nocheck, now);
            out.merge(self.absorb(&dev, r));
        }
        out
    }

    /// What one device's [`Reading`] gives: samples, records, power mode, and the events of what
    /// changed since the last one (errors and warnings once per distinct message).
    pub fn absorb(&mut self, dev: &HealthDevice, r: Reading) -> Poll {
        let mut out = Poll::default();
        let mut smart: Option<v1::NvmeSmart> = None;
        let (mut views, mut last_read) = (Vec::new(), None);
        if let Some((t, r)) = r.nvme {
            match r {
                Ok(log) => {
                    self.ok("nvme_cli", dev);
                    if let Some(c) = log.composite {
                        out.temperature.push(sample(t, "nvme_cli", dev, "Composite", c.0));
                    }
                    for (i, s) in log.sensors.iter().enumerate() {
                        if let Some(c) = s {
                            out.temperature.push(sample(t, "nvme_cli", dev, &format!("Sensor {}", i + 1), c.0));
                        }
                    }
                    smart = Some(smart_record(t, dev, &log));
                    self.report_problems("nvme_cli", dev, t, &log.problems, &mut out);
                    views.push(view("nvme_cli", Some(&dev.serial), None, log.composite));
                    last_read = Some(t);
                }
                Err(e) => self.failed("nvme_cli", dev, t, e, &mut out),
            }
        }
        if let Some((t, r)) = r.smartctl {
            match r {
                // smartctl refuses the `-d` type (exit bit 0): asking again every interval
                // would fail the same way. Reported once; the drive's other tools go on.
                Err(e @ SmartctlError::CallFailed { exit, .. }) if exit.command_line_error() => {
                    self.failed("smartctl", dev, t, format!("{e}; not asked again until the agent restarts"), &mut out);
                    self.refused.insert(dev.tag.clone());
                }
                // A sleeping drive left alone (`-n`): its power mode is the reading.
                Ok(Checked::Skipped(mode)) => {
                    self.ok("smartctl", dev);
                    out.drive_power_modes.push(power_mode(t, dev, mode, true));
                }
                Ok(Checked::Report(rep)) => {
                    self.ok("smartctl", dev);
                    if let Some(mode) = rep.power_mode {
                        out.drive_power_modes.push(power_mode(t, dev, mode, false));
                    }
                    let name = if dev.nvme { "Composite" } else { "Temperature" };
                    if let Some(c) = rep.temperature {
                        out.temperature.push(sample(t, "smartctl", dev, name, c.0));
                    }
                    for (i, s) in rep.nvme.iter().flat_map(|n| n.sensors.iter()).enumerate() {
                        if let Some(c) = s {
                            out.temperature.push(sample(t, "smartctl", dev, &format!("Sensor {}", i + 1), c.0));
                        }
                    }
                    if smart.is_none() {
                        smart = smart_record_from_smartctl(t, dev, &rep);
                    }
                    self.report_problems("smartctl", dev, t, &rep.problems, &mut out);
                    if let Some((entry, e)) = self.unidentified.identify(t, dev, &rep) {
                        out.drive_identities.push(v1::DriveIdentity { time_ns: t, device: Some(entry) });
                        out.events.push(e);
                    }
                    views.push(view("smartctl", rep.serial.as_ref(), rep.model.as_ref(), rep.temperature));
                    last_read = Some(t);
                }
                Err(e) => self.failed("smartctl", dev, t, e.to_string(), &mut out),
            }
        }
        if let Some(s) = smart {
            self.track_warning(dev, &s, &mut out);
            out.nvme_smart.push(s);
        }
        // Only a cycle in which several tools answered can say whether they agree.
        if let (true, Some(t)) = (views.len() > 1, last_read) {
            self.track_disagreements(dev, t, &views, &mut out);
        }
        out
    }

    /// A `drive_field` warning, once per field and printed value, for a field a tool printed but
    /// wattflip could not read (it is left out of the samples and records).
    fn report_problems(&mut self, source: &str, dev: &HealthDevice, t: i64, problems: &[FieldProblem], out: &mut Poll) {
        for p in problems {
            let key = format!("{source}:{}:{}", dev.tag, p.field);
            if self.field_problems.get(&key) == Some(&p.raw) {
                continue;
            }
            tracing::warn!(source, device = %dev.node, "{p}");
            let mut e = event(t, "drive_field", v1::Severity::Warning, &dev.tag, format!("{source}: {}: {p}", dev.node));
            e.attributes.insert("source".into(), source.into());
            e.attributes.insert("field".into(), p.field.clone());
            e.attributes.insert("raw".into(), p.raw.clone());
            out.events.push(e);
            self.field_problems.insert(key, p.raw.clone());
        }
    }

    /// A `drive_disagreement` warning when two tools disagree on a drive's identity or temperature
    /// (beyond the rounding between them), once until they agree again (then an `info` event).
    fn track_disagreements(&mut self, dev: &HealthDevice, t: i64, views: &[SourceView], out: &mut Poll) {
        let found = cross_check(views, DEFAULT_TEMPERATURE_TOLERANCE);
        let keys: BTreeSet<String> = found.iter().map(disagreement_key).collect();
        let before = self.disagreements.insert(dev.tag.clone(), keys.clone()).unwrap_or_default();
        for d in found.iter().filter(|d| !before.contains(&disagreement_key(d))) {
            let mut e = event(t, "drive_disagreement", v1::Severity::Warning, &dev.tag, format!("{}: {d}", dev.node));
            let (field, reference, other, delta) = match d {
                Disagreement::Identity { field, reference, other } => (*field, &reference.0, &other.0, None),
                Disagreement::Temperature { reference, other, delta } => ("temperature", &reference.0, &other.0, Some(*delta)),
            };
            e.attributes.insert("field".into(), field.into());
            e.attributes.insert("source".into(), other.clone());
            e.attributes.insert("reference".into(), reference.clone());
            if let Some(delta) = delta {
                e.attributes.insert("delta_celsius".into(), format!("{delta:.2}"));
            }
            tracing::warn!(device = %dev.node, "{}", e.message);
            out.events.push(e);
        }
        for gone in before.difference(&keys) {
            let msg = format!("{}: {gone}: the tools agree again", dev.node);
            out.events.push(event(t, "drive_disagreement", v1::Severity::Info, &dev.tag, msg));
        }
    }

    /// An event when the critical warning becomes non-zero, changes, or clears.
    fn track_warning(&mut self, dev: &HealthDevice, s: &v1::NvmeSmart, out: &mut Poll) {
        let now = u8::try_from(s.critical_warning).unwrap_or(u8::MAX);
        let before = self.warnings.insert(dev.tag.clone(), now).unwrap_or(0);
        if now == before {
            return;
        }
        let w = CriticalWarning(now);
        let mut e = if now == 0 {
            event(s.time_ns, "critical_warning", v1::Severity::Info, &dev.tag, format!("{}: critical warning cleared (was {before:#04x})", dev.node))
        } else {
            event(
                s.time_ns,
                "critical_warning",
                v1::Severity::Critical,
                &dev.tag,
                format!("{}: NVMe critical warning {now:#04x}: {}", dev.node, describe_warning(w)),
            )
        };
        e.attributes.insert("value".into(), now.to_string());
        e.attributes.insert("previous".into(), before.to_string());
        e.attributes.insert("serial".into(), s.serial.clone());
        tracing::warn!(device = %dev.node, value = now, "{}", e.message);
        out.events.push(e);
    }

    fn ok(&mut self, source: &str, dev: &HealthDevice) {
        self.last_error.remove(&format!("{source}:{}", dev.tag));
    }

    fn failed(&mut self, source: &str, dev: &HealthDevice, t: i64, msg: String, out: &mut Poll) {
        out.errors += 1;
        let key = format!("{source}:{}", dev.tag);
        if self.last_error.get(&key) != Some(&msg) {
            tracing::warn!(source, device = %dev.node, "{msg}");
            out.events.push(event(t, "sensor_error", v1::Severity::Warning, &dev.tag, format!("{source}: {msg}")));
            self.last_error.insert(key, msg);
        }
    }
}

/// What stays the same while a disagreement persists: the field and the sources, not the values.
fn disagreement_key(d: &Disagreement) -> String {
    match d {
        Disagreement::Identity { field, reference, other } => format!("{field} ({} vs {})", other.0, reference.0),
        Disagreement::Temperature { reference, other, .. } => format!("temperature ({} vs {})", other.0, reference.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drives::config::DrivesConfig;
    use crate::drives::tools::DriveInventory;
    use std::sync::Arc;
    use wattflip_drives::fake::{FakeNvme, ScriptedRunner, SetBehaviour};
    use wattflip_drives::{NvmeCli, Smartctl};

    fn fixture(rel: &str) -> String {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("drives/tests/fixtures").join(rel);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    fn qemu_dev() -> HealthDevice {
        HealthDevice { node: "/dev/nvme0".into(), tag: "nvme0".into(), device_type: None, serial: "deadbeef".into(), nvme: true, identified: true }
    }

    fn tools(nvme: Option<Arc<FakeNvme>>, smart: Option<Arc<ScriptedRunner>>) -> DriveTools {
        DriveTools { nvme: nvme.map(|f| NvmeCli::new(f)), smartctl: smart.map(|r| Smartctl::new(r)), unavailable: Vec::new() }
    }

    fn fake(smart_log: &str) -> Arc<FakeNvme> {
        Arc::new(
            FakeNvme::new()
                .with_list(&fixture("nvme/qemu-nvme-cli-2.3-list.json"))
                .with_controller("/dev/nvme0", &fixture("nvme/qemu-nvme-cli-2.3-id-ctrl.json"), 0, SetBehaviour::Refuse)
                .with_smart_log("/dev/nvme0", smart_log),
        )
    }

    #[test]
    fn qemu_both_tools_exact_samples_smart_and_warning_event() {
        let smart = Arc::new(ScriptedRunner::new());
        let report = fixture("smartctl/qemu-smartctl-7.3-nvme-H-A.json");
        smart.expect(&["smartctl", "--json", "-a", "-d", "nvme", "/dev/nvme0"], 8, &report, "");
        smart.expect(&["smartctl", "--json", "-a", "-d", "nvme", "/dev/nvme0"], 8, &report, "");
        let mut m = DriveMonitor::new(tools(Some(fake(&fixture("nvme/qemu-nvme-cli-2.3-smart-log.json"))), Some(smart.clone())), vec![qemu_dev()]);
        let p = m.poll(&|| 1_000);
        let temps: Vec<(&str, &str, &str, f64)> = p.temperature.iter().map(|t| (t.source.as_str(), t.device.as_str(), t.sensor.as_str(), t.celsius)).collect();
        // 323 K: nvme-cli's Kelvin converts exactly to 49.85 °C, smartctl prints K − 273 = 50.
        assert_eq!(temps, vec![("nvme_cli", "nvme0", "Composite", 49.85), ("smartctl", "nvme0", "Composite", 50.0)]);
        assert_eq!(
            p.nvme_smart,
            vec![v1::NvmeSmart {
                time_ns: 1_000,
                device: "nvme0".into(),
                serial: "deadbeef".into(),
                critical_warning: 2,
                composite_celsius: Some(49.85),
                // Printed as 0 by the drive: present and 0, unlike a counter the log lacks.
                percentage_used: Some(0),
                data_units_read: Some(1),
                data_units_written: Some(0),
                warning_temp_time_min: Some(0),
                critical_temp_time_min: Some(0),
                thm_temp1_trans_count: Some(0),
                thm_temp2_trans_count: Some(0),
                thm_temp1_total_time_s: Some(0),
                thm_temp2_total_time_s: Some(0),
                power_on_hours: Some(0),
                unsafe_shutdowns: Some(0),
                media_errors: Some(0),
            }]
        );
        assert_eq!(p.events.len(), 1);
        let e = &p.events[0];
        assert_eq!((e.kind.as_str(), e.severity, e.device.as_str()), ("critical_warning", v1::Severity::Critical as i32, "nvme0"));
        assert_eq!(e.message, "/dev/nvme0: NVMe critical warning 0x02: temperature above or below a threshold (check airflow; the drive may throttle)");
        assert_eq!(e.attributes.get("value").map(String::as_str), Some("2"));
        assert_eq!(p.errors, 0);
        // The same warning again: no second event.
        let p = m.poll(&|| 2_000);
        assert!(p.events.is_empty(), "{:?}", p.events);
        assert_eq!(smart.remaining(), 0);
    }

    #[test]
    fn a_failing_tool_degrades_only_itself_and_is_reported_once() {
        let smart = Arc::new(ScriptedRunner::new());
        let report = fixture("smartctl/qemu-smartctl-7.3-nvme-H-A.json");
        for _ in 0..2 {
            smart.expect(&["smartctl", "--json", "-a", "-d", "nvme", "/dev/nvme0"], 8, &report, "");
        }
        // nvme-cli without a smart-log answer fails on every poll.
        let nvme = Arc::new(FakeNvme::new().with_controller("/dev/nvme0", &fixture("nvme/qemu-nvme-cli-2.3-id-ctrl.json"), 0, SetBehaviour::Refuse));
        let mut m = DriveMonitor::new(tools(Some(nvme), Some(smart)), vec![qemu_dev()]);
        let p = m.poll(&|| 5);
        assert_eq!(p.errors, 1);
        assert_eq!(p.temperature.len(), 1);
        assert_eq!(p.temperature[0].source, "smartctl");
        // smartctl's NVMe log stands in for the SMART record.
        assert_eq!(p.nvme_smart.len(), 1);
        assert_eq!((p.nvme_smart[0].critical_warning, p.nvme_smart[0].composite_celsius), (2, Some(50.0)));
        let kinds: Vec<&str> = p.events.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(kinds, vec!["sensor_error", "critical_warning"]);
        assert!(p.events[0].message.starts_with("nvme_cli: `nvme smart-log /dev/nvme0 -o json` failed with exit status 1"), "{}", p.events[0].message);
        let p = m.poll(&|| 6);
        assert_eq!((p.errors, p.events.len()), (1, 0), "the same error is not reported twice");
    }

    #[test]
    fn warning_changes_and_clears() {
        let log0 = fixture("nvme/qemu-nvme-cli-2.3-smart-log.json").replace("\"critical_warning\":2", "\"critical_warning\":0");
        let f = fake(&log0);
        let mut m = DriveMonitor::new(tools(Some(f.clone()), None), vec![qemu_dev()]);
        assert!(m.poll(&|| 1).events.is_empty(), "0 at start is not an event");
        let f2 = fake(&fixture("nvme/qemu-nvme-cli-2.3-smart-log.json"));
        m.tools.nvme = Some(NvmeCli::new(f2));
        let e = m.poll(&|| 2).events;
        assert_eq!((e.len(), e[0].severity), (1, v1::Severity::Critical as i32));
        m.tools.nvme = Some(NvmeCli::new(f));
        let e = m.poll(&|| 3).events;
        assert_eq!(e.len(), 1);
        assert_eq!((e[0].severity, e[0].message.as_str()), (v1::Severity::Info as i32, "/dev/nvme0: critical warning cleared (was 0x02)"));
    }

    /// A real capture (smartctl 7.3, Samsung 970 EVO Plus; tests/fixtures/captures/PROVENANCE.md):
    /// without nvme-cli, smartctl's NVMe log gives the record, unsafe shutdowns and media errors
    /// included (values read from the capture by hand).
    #[test]
    fn smartctl_record_carries_unsafe_shutdowns_and_media_errors() {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/captures/smartctl/sce-7.3-nvme-samsung-970-evo-plus.json");
        let report = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let smart = Arc::new(ScriptedRunner::new());
        smart.expect(&["smartctl", "--json", "-a", "-d", "nvme", "/dev/nvme0"], 0, &report, "");
        let mut m = DriveMonitor::new(tools(None, Some(smart)), vec![qemu_dev()]);
        let p = m.poll(&|| 7);
        assert_eq!(
            p.nvme_smart,
            vec![v1::NvmeSmart {
                time_ns: 7,
                device: "nvme0".into(),
                serial: "deadbeef".into(),
                composite_celsius: Some(35.0),
                percentage_used: Some(0),
                data_units_read: Some(2_025_034),
                data_units_written: Some(1_969_459),
                warning_temp_time_min: Some(0),
                critical_temp_time_min: Some(0),
                power_on_hours: Some(3149),
                unsafe_shutdowns: Some(12),
                media_errors: Some(0),
                // smartctl prints no thermal-management counters: absent, not 0.
                ..Default::default()
            }]
        );
        assert!(p.events.is_empty(), "{:?}", p.events);
    }

    #[test]
    fn tools_that_disagree_raise_one_event_until_they_agree_again() {
        let agree = fixture("smartctl/qemu-smartctl-7.3-nvme-H-A.json");
        let hot = agree.replace("\"current\": 50", "\"current\": 61");
        assert_ne!(agree, hot, "fixture changed: the test needs its temperature.current");
        let smart = Arc::new(ScriptedRunner::new());
        for r in [&hot, &hot, &agree] {
            smart.expect(&["smartctl", "--json", "-a", "-d", "nvme", "/dev/nvme0"], 8, r, "");
        }
        let mut m = DriveMonitor::new(tools(Some(fake(&fixture("nvme/qemu-nvme-cli-2.3-smart-log.json"))), Some(smart)), vec![qemu_dev()]);
        let p = m.poll(&|| 1);
        let d: Vec<&v1::Event> = p.events.iter().filter(|e| e.kind == "drive_disagreement").collect();
        assert_eq!(d.len(), 1, "{:?}", p.events);
        assert_eq!(d[0].severity, v1::Severity::Warning as i32);
        assert_eq!(d[0].message, "/dev/nvme0: temperature: smartctl reads 61.00 °C but nvme_cli reads 49.85 °C: +11.15 °C apart");
        let attr = |k: &str| d[0].attributes.get(k).map(String::as_str);
        assert_eq!(
            (attr("field"), attr("source"), attr("reference"), attr("delta_celsius")),
            (Some("temperature"), Some("smartctl"), Some("nvme_cli"), Some("11.15"))
        );
        assert!(m.poll(&|| 2).events.iter().all(|e| e.kind != "drive_disagreement"), "still disagreeing: no second event");
        let e: Vec<v1::Event> = m.poll(&|| 3).events.into_iter().filter(|e| e.kind == "drive_disagreement").collect();
        assert_eq!(e.len(), 1);
        assert_eq!(
            (e[0].severity, e[0].message.as_str()),
            (v1::Severity::Info as i32, "/dev/nvme0: temperature (smartctl vs nvme_cli): the tools agree again")
        );
    }

    #[test]
    fn an_unreadable_field_is_left_out_and_reported_once() {
        let log = fixture("nvme/qemu-nvme-cli-2.3-smart-log.json").replace("\"power_on_hours\":\"0\"", "\"power_on_hours\":\"12.5\"");
        let mut m = DriveMonitor::new(tools(Some(fake(&log)), None), vec![qemu_dev()]);
        let p = m.poll(&|| 1);
        let e: Vec<&v1::Event> = p.events.iter().filter(|e| e.kind == "drive_field").collect();
        assert_eq!(e.len(), 1, "{:?}", p.events);
        assert_eq!(e[0].attributes.get("field").map(String::as_str), Some("power_on_hours"));
        assert_eq!(e[0].attributes.get("raw").map(String::as_str), Some("\"12.5\""));
        assert_eq!(p.nvme_smart[0].power_on_hours, None, "left out of the record: absent on the wire");
        assert_eq!(p.nvme_smart[0].data_units_read, Some(1), "the other fields are kept");
        assert_eq!(p.nvme_smart[0].unsafe_shutdowns, Some(0), "a printed 0 stays a 0");
        assert!(m.poll(&|| 2).events.iter().all(|e| e.kind != "drive_field"), "reported once");
    }

    #[test]
    fn describe_lists_composites() {
        let t = DriveTools::probe(&DrivesConfig { smartctl: false, ..Default::default() }, fake("{}"));
        let inv = DriveInventory::discover(&t, std::path::Path::new("/nonexistent-sys"));
        let m = DriveMonitor::new(t, inv.health_devices());
        let d = m.describe();
        assert_eq!(d.len(), 1);
        assert_eq!((d[0].source.as_str(), d[0].device.as_str(), d[0].path.as_str()), ("nvme_cli", "nvme0", "nvme smart-log /dev/nvme0 -o json"));
    }

    /// A `-d` type smartctl refuses (exit 1, `INVALID ARGUMENT TO -d`, as `smartctl.cpp` prints it
    /// through `jerr`) is one `sensor_error` event and one call, not a failed call every interval.
    #[test]
    fn a_refused_device_type_is_reported_once_and_not_asked_again() {
        let refused =
            r#"{"smartctl":{"version":[7,4],"exit_status":1,"messages":[{"string":"=======> INVALID ARGUMENT TO -d: megaraid,9","severity":"error"}]}}"#;
        let smart = Arc::new(ScriptedRunner::new());
        smart.expect(&["smartctl", "--json", "-a", "-n", "standby", "-d", "megaraid,9", "/dev/bus/0"], 1, refused, "");
        let dev = HealthDevice {
            node: "/dev/bus/0".into(),
            tag: "bus/0:megaraid,9".into(),
            device_type: Some("megaraid,9".into()),
            serial: String::new(),
            nvme: false,
            identified: false,
        };
        let mut m = DriveMonitor::new(tools(None, Some(smart.clone())), vec![dev]);
        let p = m.poll(&|| 1);
        assert_eq!((p.errors, p.events.len()), (1, 1), "{:?}", p.events);
        assert_eq!((p.events[0].kind.as_str(), p.events[0].device.as_str()), ("sensor_error", "bus/0:megaraid,9"));
        assert!(p.events[0].message.contains("INVALID ARGUMENT TO -d: megaraid,9"), "{}", p.events[0].message);
        for t in 2..5 {
            let p = m.poll(&|| t);
            assert_eq!((p.errors, p.events.len()), (0, 0), "poll {t}: {:?}", p.events);
        }
        assert_eq!(smart.calls().len(), 1);
    }
}
