//! What `inventory` and `governor show` print about drives: the NVMe power-state table and
//! [`DriveReport`] (discovery plus one SMART poll, as text or JSON). A new drive fact shown by
//! `inventory` is a line in [`DriveReport::table`] and a field in [`DriveReport::json`].

use super::config::DrivesConfig;
use super::monitor::{DriveMonitor, Poll};
use super::tools::{drive_identity, DriveInventory, DriveTools};
use crate::clock::Clock;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use wattflip_drives::{CommandRunner, PowerState};
use wattflip_proto::v1;

/// The NVMe power-state table (docs/sources-and-drives.md §5.2) as `inventory` and `governor show` print it.
pub fn power_state_table(states: &[PowerState]) -> String {
    let mut s = format!("  {:<5}{:<16}{:>8} {:>10} {:>10}  RRT RRL RWT RWL\n", "PS", "KIND", "MAX W", "ENTRY µs", "EXIT µs");
    for p in states {
        let _ = writeln!(
            s,
            "  PS{:<3}{:<16}{:>8} {:>10} {:>10}  {:>3} {:>3} {:>3} {:>3}",
            p.index,
            if p.operational { "operational" } else { "non-operational" },
            // The descriptor's own precision: 0.01 W or 0.0001 W units (a 0.0035 W state is not 0.00).
            p.max_power_number(),
            p.entry_latency_us,
            p.exit_latency_us,
            p.relative_read_throughput,
            p.relative_read_latency,
            p.relative_write_throughput,
            p.relative_write_latency
        );
    }
    s
}

/// Drives as `inventory` shows them: discovery plus one SMART poll.
#[derive(Debug, Clone, Default)]
pub struct DriveReport {
    pub inventory: DriveInventory,
    pub sensors: Vec<v1::TemperatureSensor>,
    pub readings: Poll,
}

impl DriveReport {
    pub fn gather(drives: &DrivesConfig, sysfs_root: &Path, runner: Arc<dyn CommandRunner>, clock: &Clock) -> DriveReport {
        let tools = DriveTools::probe(drives, runner);
        let inventory = DriveInventory::discover(&tools, sysfs_root);
        let mut monitor = DriveMonitor::new(tools, inventory.health_devices()).with_nocheck(drives.smart_nocheck);
        let sensors = monitor.describe();
        let readings = if monitor.is_empty() { Poll::default() } else { monitor.poll(&|| clock.utc_now()) };
        DriveReport { inventory, sensors, readings }
    }

    /// Power states, drive temperatures, warnings and notes, as text.
    pub fn table(&self) -> String {
        let mut s = String::new();
        for d in self.inventory.drives.iter().filter(|d| !d.power_states.is_empty()) {
            let _ = writeln!(s, "NVMe power states of {} ({})", d.controller.as_deref().unwrap_or(&d.name), d.serial.trim());
            s.push_str(&power_state_table(&d.power_states));
        }
        let _ = writeln!(s, "Drive temperatures ({})", self.readings.temperature.len());
        for t in &self.readings.temperature {
            let _ = writeln!(s, "  {:<8} {:<20} {:<16} {:.2} °C", t.source, t.device, t.sensor, t.celsius);
        }
        for n in &self.readings.nvme_smart {
            if n.critical_warning != 0 {
                let _ = writeln!(s, "  WARNING: {} critical warning {:#04x}", n.device, n.critical_warning);
            }
        }
        for e in self.readings.events.iter().filter(|e| e.kind == "sensor_error") {
            let _ = writeln!(s, "  ERROR: {}", e.message);
        }
        for p in &self.inventory.problems {
            let _ = writeln!(s, "Drive discovery problem: {p}");
        }
        for n in &self.inventory.unavailable {
            let _ = writeln!(s, "Not available on this host: {n}");
        }
        s
    }

    pub fn json(&self) -> serde_json::Value {
        use serde_json::json;
        json!({
            "drives": self.inventory.drives.iter().map(|d| json!({
                // The drive's identity (as in `storage_devices` and the temperatures), then the
                // node and `-d` type the tools are run with: disks behind one RAID node share it.
                "device": drive_identity(d), "node": d.name, "device_type": d.device_type, "controller": d.controller, "model": d.model.trim(), "serial": d.serial.trim(),
                "firmware": d.firmware.trim(), "capacity_bytes": d.capacity_bytes,
                "warning_celsius": d.warning_temperature.map(|c| c.0), "critical_celsius": d.critical_temperature.map(|c| c.0),
                "power_states": d.power_states.iter().map(|p| json!({
                    "state": p.index, "operational": p.operational, "max_watts": p.max_power.map(|w| w.0),
                    "entry_latency_us": p.entry_latency_us, "exit_latency_us": p.exit_latency_us})).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "temperatures": self.readings.temperature.iter().map(|t| json!({
                "source": t.source, "device": t.device, "sensor": t.sensor, "celsius": t.celsius})).collect::<Vec<_>>(),
            "critical_warnings": self.readings.nvme_smart.iter().map(|n| json!({"device": n.device, "value": n.critical_warning})).collect::<Vec<_>>(),
            "errors": self.readings.events.iter().filter(|e| e.kind == "sensor_error").map(|e| e.message.clone()).collect::<Vec<_>>(),
            "problems": self.inventory.problems,
            "not_available": self.inventory.unavailable,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wattflip_drives::fake::ScriptedRunner;

    fn capture(name: &str) -> String {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/captures/smartctl").join(name);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    /// Two SAS disks behind one MegaRAID node (`/dev/bus/0 -d megaraid,1` and `megaraid,2`, real
    /// smartctl 7.1 captures, tests/fixtures/captures/PROVENANCE.md): `inventory` lists two drives,
    /// each under its own identity, the same key as its Hello inventory entry and its temperature
    /// (31 °C and 30 °C as captured), never the node they share.
    #[test]
    fn two_disks_behind_one_raid_node_are_two_identities_in_inventory_output() {
        let scan = r#"{"smartctl":{"version":[7,1],"exit_status":0},"devices":[
{"name":"/dev/bus/0","info_name":"/dev/bus/0 [megaraid_disk_01]","type":"megaraid,1","protocol":"SCSI"},
{"name":"/dev/bus/0","info_name":"/dev/bus/0 [megaraid_disk_02]","type":"megaraid,2","protocol":"SCSI"}]}"#;
        let (one, two) = (capture("sce-7.1-sas-megaraid1-toshiba-mg08sca16tey.json"), capture("sce-7.1-sas-megaraid2-toshiba-mg08sca16tey.json"));
        let runner = Arc::new(ScriptedRunner::new());
        runner.expect(&["smartctl", "--version"], 0, "smartctl 7.1 2019-12-30 r5022 [x86_64-linux-5.4.0] (local build)\n", "");
        runner.expect(&["smartctl", "--scan-open", "--json"], 0, scan, "");
        // Discovery, then the one SMART poll `inventory` makes.
        for _ in 0..2 {
            runner.expect(&["smartctl", "--json", "-a", "-n", "standby", "-d", "megaraid,1", "/dev/bus/0"], 0, &one, "");
            runner.expect(&["smartctl", "--json", "-a", "-n", "standby", "-d", "megaraid,2", "/dev/bus/0"], 0, &two, "");
        }
        let cfg = DrivesConfig { nvme_cli: false, ..Default::default() };
        let r = DriveReport::gather(&cfg, Path::new("/nonexistent-sys"), runner.clone(), &Clock::new());
        assert_eq!(runner.remaining(), 0);
        let v = r.json();
        let drives: Vec<(&str, &str, &str)> = v["drives"]
            .as_array()
            .map(|a| {
                a.iter().map(|d| (d["device"].as_str().unwrap_or("?"), d["node"].as_str().unwrap_or("?"), d["device_type"].as_str().unwrap_or("?"))).collect()
            })
            .unwrap_or_default();
        assert_eq!(drives, vec![("bus/0:megaraid,1", "/dev/bus/0", "megaraid,1"), ("bus/0:megaraid,2", "/dev/bus/0", "megaraid,2")]);
        let temps: Vec<(&str, f64)> = r.readings.temperature.iter().map(|t| (t.device.as_str(), t.celsius)).collect();
        assert_eq!(temps, vec![("bus/0:megaraid,1", 31.0), ("bus/0:megaraid,2", 30.0)]);
        assert!(r.readings.drive_identities.is_empty(), "identified at discovery: nothing to send again");
        let mut hello = Vec::new();
        r.inventory.enrich(&mut hello);
        let names: Vec<&str> = hello.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, vec!["bus/0:megaraid,1", "bus/0:megaraid,2"]);
        let sensors: Vec<&str> = r.sensors.iter().map(|s| s.device.as_str()).collect();
        assert_eq!(sensors, names);
    }

    /// A real nvme-cli 1.x id-ctrl (WDC SN730, tests/fixtures/captures/PROVENANCE.md): PS3 and PS4
    /// are in 0.0001 W units (MXPS), 700 → 0.0700 W and 35 → 0.0035 W; the others in 0.01 W.
    #[test]
    fn power_state_table_keeps_the_descriptor_precision() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/captures/nvme-cli/ironic-python-agent-1.x-id-ctrl-wdc-sn730.json");
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let id = wattflip_drives::nvme_cli::parse_id_ctrl(&text).unwrap_or_else(|e| panic!("{e}"));
        let table = power_state_table(&id.power_states);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 6, "{table}");
        assert_eq!(lines[1], "  PS0  operational         5.00          0          0    0   0   0   0");
        assert_eq!(lines[5], "  PS4  non-operational   0.0035       4000      40000    4   4   4   4");
        let max: Vec<&str> = lines[1..].iter().map(|l| l.split_whitespace().nth(2).unwrap_or("")).collect();
        assert_eq!(max, ["5.00", "3.50", "3.00", "0.0700", "0.0035"]);
    }
}
