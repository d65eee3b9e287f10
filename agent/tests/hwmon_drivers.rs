//! The hwmon driver table on fixture trees: units and scopes per driver
//! (`agent/src/sensors/drivers.rs`), INA3221's disabled channels, AMD's energy and SVI2 zones, and
//! an unknown driver's power (scope `unknown`, never summed).

// Integration tests: a panic with a message is the test's failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/sysfs.rs"]
mod sysfs;

use sysfs::{copy_fixture, discover, fixture, power_readings, scopes};
use wattflip_proto::units::Watts;

/// A disabled INA3221 channel (`in3_enable` = 0; the driver answers its inputs with ENODATA) is
/// listed as a disabled power source that says why, never as a usable rail, and its voltage,
/// current and shunt-voltage channels are not read (tests/fixtures/sysfs/ina3221/README.md).
#[test]
fn ina3221_disabled_channel_is_listed_disabled_not_usable() {
    let mut d = discover(&fixture("ina3221-disabled"));
    assert_eq!(
        power_readings(&mut d),
        vec![("ina3221-0-0041/SSD 12V".to_string(), "rail".to_string(), Watts(6.0), 0.01), ("ina3221-0-0041/SSD 5V".into(), "rail".into(), Watts(5.0), 0.01),]
    );
    let off: Vec<(&str, &str, bool, &str)> = d.unusable_power.iter().map(|p| (p.zone.as_str(), p.scope.as_str(), p.enabled, p.note.as_str())).collect();
    assert_eq!(
        off,
        vec![(
            "ina3221-0-0041/SSD 3V3",
            "rail",
            false,
            "channel 3 is disabled (in3_enable = 0): the driver has no data for it; enable it in the device tree or with `echo 1 > in3_enable`"
        )]
    );
    let channels: Vec<String> = d.electrical.iter().map(|e| e.describe().channel).collect();
    assert_eq!(channels, vec!["SSD 12V", "SSD 5V", "in4", "in5", "in7", "curr1", "curr2", "curr4"]);
}

/// An AMD host (tests/fixtures/sysfs/amd-energy-zenpower/README.md): the driver table gives
/// `amd_energy`'s cores scope `core`, its socket `package`, zenpower's SVI2 planes `core`/`soc`.
/// A budget sums the RAPL tier's scopes (`package` here): the socket's 85.0 W once, not cores +
/// socket + SVI2. With powercap's RAPL package also present, the socket counter is the same
/// quantity read twice: `package_hwmon`, never summed.
#[test]
fn amd_energy_and_zenpower_scopes_count_the_socket_once() {
    let (_tmp, root) = copy_fixture("amd-energy-zenpower");
    let mut d = discover(&root);
    let s = |z: &str, scope: &str, counter: bool| (z.to_string(), scope.to_string(), counter);
    assert_eq!(
        scopes(&d),
        vec![
            s("amd_energy.0/Ecore000", "core", true),
            s("amd_energy.0/Ecore001", "core", true),
            s("amd_energy.0/Ecore002", "core", true),
            s("amd_energy.0/Ecore003", "core", true),
            s("amd_energy.0/Esocket0", "package", true),
            s("zenpower-0000:00:18.3/SVI2_P_Core", "core", false),
            s("zenpower-0000:00:18.3/SVI2_P_SoC", "soc", false),
        ]
    );
    for p in d.power.iter_mut() {
        let _ = p.read(0).unwrap();
    }
    // One second later: each core +10 J, the socket +85 J.
    let chip = root.join("class/hwmon/hwmon0");
    for (n, uj) in [(1, 1_210_000_000u64), (2, 1_110_000_000), (3, 1_310_000_000), (4, 1_010_000_000), (5, 9_085_000_000)] {
        std::fs::write(chip.join(format!("energy{n}_input")), format!("{uj}\n")).unwrap();
    }
    let tier = ["psys", "package", "dram", "drive"];
    let mut budget = 0.0;
    for p in d.power.iter_mut() {
        let scope = p.describe().scope;
        let r = p.read(1_000_000_000).unwrap().unwrap();
        if tier.contains(&scope.as_str()) {
            budget += r.watts.0;
        }
    }
    assert_eq!(budget, 85.0);

    // RAPL's package zone beside it: the socket counter is a cross-check only.
    let status = std::process::Command::new("cp").arg("-a").arg(fixture("rapl-only").join("class/powercap")).arg(root.join("class")).status().unwrap();
    assert!(status.success());
    let d = discover(&root);
    let socket: Vec<String> = d.power.iter().map(|p| p.describe()).filter(|p| p.zone.ends_with("Esocket0")).map(|p| p.scope).collect();
    assert_eq!(socket, vec!["package_hwmon".to_string()]);
}

/// A chip the driver table does not know: its power is recorded with scope `unknown` (which no
/// budget tier sums), in the ABI's µW.
#[test]
fn an_unknown_drivers_power_is_scope_unknown() {
    let (_tmp, root) = copy_fixture("ina226");
    std::fs::write(root.join("class/hwmon/hwmon0/name"), "nct6798\n").unwrap();
    let mut d = discover(&root);
    let got: Vec<(String, String, Watts)> = power_readings(&mut d).into_iter().map(|(z, s, w, _)| (z, s, w)).collect();
    assert_eq!(got, vec![("nct6798-0-0040/power1".to_string(), "unknown".to_string(), Watts(18.0))]);
}
