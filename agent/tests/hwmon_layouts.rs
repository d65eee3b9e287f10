//! hwmon chips in the layouts the kernel creates: a driver registered the old way
//! (`hwmon_device_register`, attributes and `name` in `hwmonN/device/`: the ACPI power meter), and
//! drive temperature chips joined to their drive through sysfs links (`nvme` on the controller's
//! PCI function, `drivetemp` on the SCSI device), tagged with the drive's kernel name.

// Integration tests: a panic with a message is the test's failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/sysfs.rs"]
mod sysfs;

use sysfs::{copy_fixture, discover, fixture, power_readings};
use wattflip_proto::units::Watts;

/// tests/fixtures/sysfs/acpi-power-meter/README.md: `hwmon0` holds only its `device` link; the
/// meter's `name` (`power_meter`) and `power1_average` (372000000 µW) are in `hwmon0/device/`,
/// averaged over `power1_average_interval` (1000 ms) found there too.
#[test]
fn acpi_power_meter_is_read_from_the_acpi_device_folder() {
    let root = fixture("acpi-power-meter");
    let mut d = discover(&root);
    let meter = d.power.iter().map(|p| p.describe()).find(|p| p.scope == "wall").map(|p| (p.zone, p.path));
    let want = root.join("class/hwmon/hwmon0/device/power1_average").display().to_string();
    assert_eq!(meter, Some(("power_meter-ACPI000D:00/power1".to_string(), want)));
    assert_eq!(power_readings(&mut d)[0].2, Watts(372.0));
    assert_eq!(d.power[0].update_period(), std::time::Duration::from_secs(1));
}

/// A chip with a `name` in neither place is said, not skipped without a word.
#[test]
fn a_chip_without_a_name_anywhere_is_noted() {
    let (_tmp, root) = copy_fixture("acpi-power-meter");
    let acpi = root.join("devices/LNXSYSTM:00/LNXSYBUS:00/ACPI000D:00");
    std::fs::remove_file(acpi.join("name")).unwrap();
    let d = discover(&root);
    assert!(d.power.iter().all(|p| p.describe().scope != "wall"));
    let chip = root.join("class/hwmon/hwmon0");
    let want = format!(
        "hwmon: {} has no `name`, neither in it nor in its device/ folder: its channels are not read (a driver the agent does not know how to read; please report it)",
        chip.display()
    );
    assert!(d.unavailable.contains(&want), "{:?}", d.unavailable);
}

/// tests/fixtures/sysfs/drive-temps/README.md: the NVMe chip (on PCI function 0000:3b:00.0) is
/// `nvme0` because `class/nvme/nvme0/device` is that function; the drivetemp chip (on SCSI
/// device 0:0:0:0) is `sda` because `class/block/sda/device` is that device.
#[test]
fn drive_temperature_chips_carry_their_drives_kernel_name() {
    let mut d = discover(&fixture("drive-temps"));
    let got: Vec<(String, String, f64)> = d
        .temperature
        .iter_mut()
        .map(|t| {
            let s = t.describe();
            (s.device, s.sensor, t.read().unwrap().0)
        })
        .collect();
    let row = |d: &str, s: &str, c: f64| (d.to_string(), s.to_string(), c);
    assert_eq!(got, vec![row("nvme0", "Composite", 49.85), row("nvme0", "Sensor 1", 47.85), row("sda", "temp1", 33.0)]);
}
