//! Drives identified after discovery: a SATA/SAS disk asleep when the agent started is kept with
//! what `smartctl --scan-open` knows (discovery passes `-n standby` and does not wake it), so it has
//! no model, serial, firmware or capacity. The SMART monitor goes on polling it with the same
//! check; the first poll that finds it awake answers with a full report, and [`Unidentified`]
//! turns that report into the drive's inventory entry (under its usual identity, `sdc`,
//! `bus/0:megaraid,1`) and a `drive_identified` event, once per drive. The entry goes to the
//! collector with the monitor's batch (`Batch.drive_identities`), which writes it as the drive's
//! `inventory` point, like a Hello's.

use super::tools::{storage_device, HealthDevice};
use crate::events::event;
use std::collections::BTreeSet;
use wattflip_drives::inventory::drive_from_smartctl;
use wattflip_drives::{Drive, SmartctlReport};
use wattflip_proto::v1;

/// The device tags of the drives discovery could not identify, until a report identifies them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unidentified(BTreeSet<String>);

impl Unidentified {
    /// The ATA/SCSI devices discovery did not identify: asleep then, or whose first report failed.
    pub fn of(devices: &[HealthDevice]) -> Self {
        Unidentified(devices.iter().filter(|d| !d.nvme && !d.identified).map(|d| d.tag.clone()).collect())
    }

    /// Whether `tag` still waits for its identity.
    pub fn contains(&self, tag: &str) -> bool {
        self.0.contains(tag)
    }

    /// The first report of a waiting `dev` that carries an identity (a model or a serial): the
    /// drive's inventory entry and its `drive_identified` event. `None` for every other report.
    pub fn identify(&mut self, t: i64, dev: &HealthDevice, rep: &SmartctlReport) -> Option<(v1::StorageDevice, v1::Event)> {
        if !self.0.contains(&dev.tag) || (rep.model.is_none() && rep.serial.is_none()) {
            return None;
        }
        self.0.remove(&dev.tag);
        // The node and `-d` type the monitor polls it with: the identity discovery gave it.
        let drive = Drive { name: dev.node.clone(), device_type: dev.device_type.clone(), ..drive_from_smartctl(rep) };
        let entry = storage_device(&drive);
        let mut e = event(
            t,
            "drive_identified",
            v1::Severity::Info,
            &dev.tag,
            format!("{}: identity read now that the drive is awake: {} (serial {}, firmware {})", dev.node, entry.model, entry.serial, entry.firmware),
        );
        for (k, v) in [("model", &entry.model), ("serial", &entry.serial), ("firmware", &entry.firmware)] {
            e.attributes.insert(k.into(), v.clone());
        }
        if let Some(c) = entry.capacity_bytes {
            e.attributes.insert("capacity_bytes".into(), c.to_string());
        }
        tracing::info!(device = %dev.node, "{}", e.message);
        Some((entry, e))
    }
}

#[cfg(test)]
mod tests {
    use super::super::monitor::DriveMonitor;
    use super::super::tools::{DriveInventory, DriveTools};
    use std::path::Path;
    use std::sync::Arc;
    use wattflip_drives::fake::ScriptedRunner;
    use wattflip_drives::Smartctl;
    use wattflip_proto::v1;

    fn fixture(rel: &str) -> String {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("drives/tests/fixtures/smartctl").join(rel);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    /// A SATA disk asleep at discovery and at the first poll (exit 2, `Device is in STANDBY
    /// mode`), awake at the second (the constructed 7.3 report): its identity (values as written
    /// in the fixture) is sent once, under the tag its other points have, with one
    /// `drive_identified` event; the third poll sends nothing new. Every call carries `-n standby`.
    #[test]
    fn a_disk_asleep_at_discovery_is_identified_once_when_a_poll_finds_it_awake() {
        let scan =
            r#"{"smartctl":{"version":[7,4],"exit_status":0},"devices":[{"name":"/dev/sdc","info_name":"/dev/sdc [SAT]","type":"sat","protocol":"ATA"}]}"#;
        let (asleep, awake) = (fixture("constructed-smartctl-7.4-sata-n-standby-skipped.json"), fixture("constructed-smartctl-7.3-sata-a.json"));
        let argv = ["smartctl", "--json", "-a", "-n", "standby", "-d", "sat", "/dev/sdc"];
        let runner = Arc::new(ScriptedRunner::new());
        runner.expect(&["smartctl", "--scan-open", "--json"], 0, scan, "");
        // Discovery and the first poll: asleep; the second and third polls: awake.
        runner.expect(&argv, 2, &asleep, "").expect(&argv, 2, &asleep, "").expect(&argv, 0, &awake, "").expect(&argv, 0, &awake, "");
        let tools = DriveTools { nvme: None, smartctl: Some(Smartctl::new(runner.clone())), unavailable: Vec::new() };
        let inv = DriveInventory::discover(&tools, Path::new("/nonexistent-sys"));
        let mut hello = Vec::new();
        inv.enrich(&mut hello);
        assert_eq!((hello.len(), hello[0].name.as_str(), hello[0].serial.as_str(), hello[0].model.as_str()), (1, "sdc", "", ""), "the Hello knows no identity");
        let mut m = DriveMonitor::new(tools, inv.health_devices());
        let first = m.poll(&|| 10);
        assert_eq!((first.drive_identities.len(), first.events.len(), first.errors), (0, 0, 0), "{:?}", first.events);
        let second = m.poll(&|| 20);
        let want = v1::StorageDevice {
            name: "sdc".into(),
            model: "WATTFLIP CONSTRUCTED SATA SSD 500GB".into(),
            serial: "S0SATA0000001".into(),
            firmware: "RVT04B6Q".into(),
            capacity_bytes: Some(500_107_862_016),
            logical_block_size: Some(512),
            transport: "sata".into(),
            rotational: Some(false),
            ..Default::default()
        };
        assert_eq!(second.drive_identities, vec![v1::DriveIdentity { time_ns: 20, device: Some(want) }]);
        let events: Vec<(&str, &str, &str)> = second.events.iter().map(|e| (e.kind.as_str(), e.device.as_str(), e.message.as_str())).collect();
        assert_eq!(
            events,
            vec![(
                "drive_identified",
                "sdc",
                "/dev/sdc: identity read now that the drive is awake: WATTFLIP CONSTRUCTED SATA SSD 500GB (serial S0SATA0000001, firmware RVT04B6Q)"
            )]
        );
        let temps: Vec<(&str, f64)> = second.temperature.iter().map(|t| (t.device.as_str(), t.celsius)).collect();
        assert_eq!(temps, vec![("sdc", 33.0)]);
        let third = m.poll(&|| 30);
        assert_eq!((third.drive_identities.len(), third.events.len()), (0, 0), "once: {:?}", third.events);
        assert_eq!(runner.remaining(), 0);
        let calls = runner.calls();
        assert_eq!(calls.len(), 5);
        assert!(calls[1..].iter().all(|c| c == &argv), "a call without -n standby: {calls:?}");
    }
}
