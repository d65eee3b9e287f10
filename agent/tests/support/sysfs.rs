//! Helpers of the sensor tests on the fixture trees in `tests/fixtures/sysfs/<scenario>/sys`,
//! shared by `sensors.rs` and `hwmon_drivers.rs` through `#[path]` (each test binary compiles its
//! own copy; a helper one of them does not use is allowed to be dead there).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use wattflip_agent::sensors::{discover_all, Discovered, Electrical, SensorKinds};
use wattflip_proto::units::Watts;

pub fn fixture(scenario: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sysfs").join(scenario).join("sys")
}

/// A writable copy of a fixture, so a test can advance counters.
pub fn copy_fixture(scenario: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("cp").arg("-a").arg(fixture(scenario)).arg(dir.path()).status().unwrap();
    assert!(status.success());
    let root = dir.path().join("sys");
    (dir, root)
}

pub fn discover(root: &Path) -> Discovered {
    let runner: std::sync::Arc<dyn wattflip_drives::CommandRunner> = std::sync::Arc::new(wattflip_drives::SystemRunner::new());
    discover_all(root, &SensorKinds::default(), &runner)
}

pub fn power_readings(d: &mut Discovered) -> Vec<(String, String, Watts, f64)> {
    d.power
        .iter_mut()
        .map(|p| {
            let s = p.describe();
            let r = p.read(0).unwrap().unwrap();
            (s.zone, s.scope, r.watts, s.shunt_ohms)
        })
        .collect()
}

pub fn electrical_readings(d: &mut Discovered) -> Vec<(String, String, Electrical)> {
    d.electrical
        .iter_mut()
        .map(|e| {
            let c = e.describe();
            (c.chip, c.channel, e.read().unwrap())
        })
        .collect()
}

pub fn scopes(d: &Discovered) -> Vec<(String, String, bool)> {
    d.power
        .iter()
        .map(|p| {
            let s = p.describe();
            (s.zone, s.scope, s.counter)
        })
        .collect()
}
