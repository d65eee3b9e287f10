//! The README's recipe for a new power source stays true: a source written as the recipe says (a
//! `discover(sysfs_root, recheck, &mut Discovered)` that pushes a `PowerSensor`) and registered by
//! one entry in the `sysfs_sources` table is found at start-up and, when its sysfs files appear
//! later, by rediscovery; and the README names that table and the file that holds it.

// Integration tests: a panic with a message is the test's failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;
use wattflip_agent::sensors::{discover_sysfs, rediscover_from, sysfs_sources, Discovered, PowerReading, PowerSensor, SensorError, SensorKinds};
use wattflip_proto::v1;

/// The new source, as the recipe's `sensors/<name>.rs` would hold it: one sensor per
/// `class/demo_meter/meterN` folder, reading `power_uw`.
mod demo_meter {
    use super::*;

    pub struct Meter {
        pub zone: String,
    }

    impl PowerSensor for Meter {
        fn describe(&self) -> v1::PowerSource {
            v1::PowerSource { source: "demo_meter".into(), zone: self.zone.clone(), scope: "rail".into(), ..Default::default() }
        }
        fn read(&mut self, _now_ns: u64) -> Result<Option<PowerReading>, SensorError> {
            Ok(None)
        }
    }

    pub fn discover(sysfs_root: &Path, _recheck: Duration, out: &mut Discovered) {
        let Ok(entries) = std::fs::read_dir(sysfs_root.join("class/demo_meter")) else { return };
        let mut zones: Vec<String> = entries.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
        zones.sort();
        for zone in zones {
            out.power.push(Box::new(Meter { zone }));
        }
    }
}

fn zones(sensors: &[Box<dyn PowerSensor>]) -> Vec<(String, String)> {
    sensors.iter().map(|s| s.describe()).map(|d| (d.source, d.zone)).collect()
}

#[test]
fn a_source_registered_in_the_table_is_discovered_at_start_and_later() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("class/demo_meter/meter0")).unwrap();
    // The recipe's one registration line, here added to the table the agent walks.
    let mut sources = sysfs_sources(&SensorKinds::default());
    let built_in = sources.len();
    sources.push((true, demo_meter::discover));

    let found = discover_sysfs(&sources, root.path(), Duration::from_millis(100));
    assert_eq!(zones(&found.power), vec![("demo_meter".to_string(), "meter0".to_string())]);

    // A second meter appears after start-up: rediscovery finds it and only it.
    std::fs::create_dir_all(root.path().join("class/demo_meter/meter1")).unwrap();
    let known: HashSet<(String, String)> = zones(&found.power).into_iter().collect();
    let later = rediscover_from(&sources, root.path(), Duration::from_millis(100), &known);
    assert_eq!(zones(&later), vec![("demo_meter".to_string(), "meter1".to_string())]);

    // Its switch off: neither path runs it.
    sources[built_in].0 = false;
    assert!(discover_sysfs(&sources, root.path(), Duration::from_millis(100)).power.is_empty());
    assert!(rediscover_from(&sources, root.path(), Duration::from_millis(100), &HashSet::new()).is_empty());
}

#[test]
fn the_table_holds_the_built_in_sysfs_sources_behind_their_switches() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sysfs/rapl-only/sys");
    let on = SensorKinds::default();
    assert_eq!(sysfs_sources(&on).iter().map(|(enabled, _)| *enabled).collect::<Vec<_>>(), vec![true, true]);
    let rapl_off = SensorKinds { rapl: false, ..SensorKinds::default() };
    assert!(!discover_sysfs(&sysfs_sources(&on), &fixture, on.recheck).power.is_empty(), "the RAPL fixture has zones");
    assert!(discover_sysfs(&sysfs_sources(&rapl_off), &fixture, on.recheck).power.is_empty(), "RAPL switched off");
}

#[test]
fn the_readme_recipe_names_the_table() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let recipe = readme.split("- **A power source**").nth(1).and_then(|r| r.split("\n- **").next()).expect("README has the power-source recipe");
    let recipe = recipe.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        recipe.contains("The one registration line is its entry in `sysfs_sources` in `agent/src/sensors/mod.rs`"),
        "the README's power-source recipe must name the one registration table: {recipe}"
    );
    let code = std::fs::read_to_string(root.join("agent/src/sensors/mod.rs")).unwrap();
    assert!(code.contains("pub fn sysfs_sources("), "agent/src/sensors/mod.rs defines sysfs_sources");
}
