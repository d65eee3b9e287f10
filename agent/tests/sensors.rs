//! RAPL and hwmon readers on the fixture trees in `tests/fixtures/sysfs/<scenario>/sys`.

// Integration tests and their helpers: a panic with a message is the test's failure report
// (clippy.toml's allow-*-in-tests covers #[test] functions only, not the helpers they call).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use wattflip_agent::drives::block;
use wattflip_agent::sensors::{discover_all, rapl, Discovered, Electrical, SensorKinds};
use wattflip_proto::units::{Amperes, Celsius, Joules, Volts, Watts};

fn fixture(scenario: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sysfs").join(scenario).join("sys")
}

/// A writable copy of a fixture, so a test can advance counters.
fn copy_fixture(scenario: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(fixture(scenario))
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    let root = dir.path().join("sys");
    (dir, root)
}

fn discover(root: &Path) -> Discovered {
    let runner: std::sync::Arc<dyn wattflip_drives::CommandRunner> = std::sync::Arc::new(wattflip_drives::SystemRunner::new());
    discover_all(root, &SensorKinds::default(), &runner)
}

fn zones(d: &Discovered) -> Vec<(String, String)> {
    d.power.iter().map(|p| { let s = p.describe(); (s.zone, s.scope) }).collect()
}

#[test]
fn two_sockets_every_zone_separately() {
    let d = discover(&fixture("two-sockets"));
    assert_eq!(
        zones(&d),
        vec![
            ("package-0".to_string(), "package".to_string()),
            ("package-0/core".into(), "core".into()),
            ("package-0/dram".into(), "dram".into()),
            ("package-1".into(), "package".into()),
            ("package-1/core".into(), "core".into()),
            ("package-1/dram".into(), "dram".into()),
            ("psys".into(), "psys".into()),
        ]
    );
    assert!(d.unusable_power.is_empty());
}

#[test]
fn counters_advance_and_wrap_with_exact_energy() {
    let (_tmp, root) = copy_fixture("wrap");
    let mut d = discover(&root);
    assert_eq!(d.power.len(), 1);
    let zone = &mut d.power[0];
    // First read only sets the baseline.
    assert_eq!(zone.read(1_000_000_000).unwrap(), None);
    // 262143000000 → wraps at 262143328850 → 171150: 328850 + 171150 = 500000 µJ = 0.5 J in 0.25 s.
    std::fs::write(root.join("class/powercap/intel-rapl:0/energy_uj"), "171150\n").unwrap();
    let r = zone.read(1_250_000_000).unwrap().unwrap();
    assert_eq!(r.joules, Some(Joules(0.5)));
    assert_eq!(r.watts, Watts(2.0));
    assert_eq!(r.interval_ns, 250_000_000);
    // Plain advance afterwards.
    std::fs::write(root.join("class/powercap/intel-rapl:0/energy_uj"), "1171150\n").unwrap();
    let r = zone.read(1_750_000_000).unwrap().unwrap();
    assert_eq!(r.joules, Some(Joules(1.0)));
    assert_eq!(r.watts, Watts(2.0));
}

#[test]
fn disabled_zone_is_listed_not_sampled() {
    let d = discover(&fixture("disabled-zone"));
    assert_eq!(zones(&d), vec![("package-0".to_string(), "package".to_string()), ("package-0/core".into(), "core".into())]);
    assert_eq!(d.unusable_power.len(), 1);
    assert_eq!(d.unusable_power[0].zone, "package-0/dram");
    assert!(!d.unusable_power[0].enabled);
    assert!(d.unusable_power[0].note.contains("intel-rapl:0:1/enabled = 0"), "{}", d.unusable_power[0].note);
}

#[test]
fn missing_root_is_not_available_rather_than_zero() {
    let d = discover(Path::new("/nonexistent/wattflip-sys"));
    assert!(d.power.is_empty() && d.temperature.is_empty());
    assert_eq!(d.unavailable.len(), 2);
    assert!(d.unavailable[0].starts_with("rapl: /nonexistent/wattflip-sys/class/powercap does not exist"));
    assert!(d.unavailable[1].starts_with("hwmon: /nonexistent/wattflip-sys/class/hwmon does not exist"));
}

#[test]
fn counter_that_vanishes_names_its_file() {
    let (_tmp, root) = copy_fixture("two-sockets");
    let mut d = discover(&root);
    std::fs::remove_file(root.join("class/powercap/intel-rapl:2/energy_uj")).unwrap();
    let psys = d.power.iter_mut().find(|p| p.describe().zone == "psys").unwrap();
    let err = psys.read(1).unwrap_err().to_string();
    assert!(err.ends_with("intel-rapl:2/energy_uj does not exist (device removed or driver unloaded?)"), "{err}");
}

#[test]
fn permission_hint_names_the_usual_fixes() {
    assert!(rapl::PERMISSION_HINT.contains("CAP_DAC_READ_SEARCH"));
    assert!(rapl::PERMISSION_HINT.contains("udev"));
}

#[test]
fn hwmon_temperatures_power_and_a_bad_channel() {
    let mut d = discover(&fixture("hwmon"));
    let temps: Vec<(String, String, Result<Celsius, String>)> = d
        .temperature
        .iter_mut()
        .map(|t| {
            let s = t.describe();
            (s.device, s.sensor, t.read().map_err(|e| e.to_string()))
        })
        .collect();
    assert_eq!(temps.len(), 5);
    assert_eq!(temps[0], ("nvme0".into(), "Composite".into(), Ok(Celsius(49.85))));
    assert_eq!(temps[1], ("coretemp.0".into(), "Package id 0".into(), Ok(Celsius(45.0))));
    assert_eq!(temps[2], ("coretemp.0".into(), "Core 0".into(), Ok(Celsius(43.5))));
    assert_eq!(temps[3], ("coretemp.0".into(), "temp3".into(), Ok(Celsius(41.0))));
    assert_eq!(temps[4].0, "acpitz");
    let err = temps[4].2.clone().unwrap_err();
    assert!(err.contains("hwmon3/temp1_input: `garbage` is not an integer (m°C)"), "{err}");
    assert_eq!(d.power.len(), 1);
    let desc = d.power[0].describe();
    assert_eq!((desc.zone.as_str(), desc.scope.as_str()), ("power_meter-ACPI0000:00/power1", "rail"));
    let r = d.power[0].read(0).unwrap().unwrap();
    assert_eq!(r.watts, Watts(125.0));
    assert_eq!(r.joules, None);
}

#[test]
fn block_inventory_skips_partitions_and_loops() {
    let devs = block::scan(&fixture("hwmon"));
    assert_eq!(devs.len(), 1);
    let d = &devs[0];
    assert_eq!(d.name, "nvme0n1");
    assert_eq!(d.model, "QEMU NVMe Ctrl");
    assert_eq!(d.serial, "WF-SERIAL-0001");
    assert_eq!(d.firmware, "7.2.0");
    assert_eq!(d.capacity_bytes, 1_073_741_824);
    assert_eq!(d.logical_block_size, 512);
    assert_eq!(d.controller, "nvme0");
    assert_eq!(d.transport, "nvme");
}

fn power_readings(d: &mut Discovered) -> Vec<(String, String, Watts, f64)> {
    d.power
        .iter_mut()
        .map(|p| {
            let s = p.describe();
            let r = p.read(0).unwrap().unwrap();
            (s.zone, s.scope, r.watts, s.shunt_ohms)
        })
        .collect()
}

#[test]
fn pmbus_psu_input_and_output_power() {
    let mut d = discover(&fixture("pmbus-psu"));
    assert_eq!(
        power_readings(&mut d),
        vec![
            ("pmbus-1-0058/pin".to_string(), "psu_in".to_string(), Watts(230.0), 0.0),
            ("pmbus-1-0058/pout1".into(), "psu_out".into(), Watts(207.5), 0.0),
        ]
    );
}

#[test]
fn ina226_power_attribute_and_shunt() {
    let mut d = discover(&fixture("ina226"));
    assert_eq!(power_readings(&mut d), vec![("ina226-0-0040/power1".to_string(), "rail".to_string(), Watts(18.0), 0.002)]);
}

#[test]
fn ina3221_power_from_bus_voltage_times_current() {
    let mut d = discover(&fixture("ina3221"));
    assert_eq!(
        power_readings(&mut d),
        vec![
            ("ina3221-0-0041/SSD 12V".to_string(), "rail".to_string(), Watts(6.0), 0.01),
            ("ina3221-0-0041/SSD 5V".into(), "rail".into(), Watts(5.0), 0.01),
            ("ina3221-0-0041/SSD 3V3".into(), "rail".into(), Watts(0.0), 0.02),
        ]
    );
}

#[test]
fn hwmon_energy_counter_treats_a_decrease_as_reset() {
    let (_tmp, root) = copy_fixture("ina226");
    let chip = root.join("class/hwmon/hwmon0");
    std::fs::write(chip.join("energy1_input"), "1000000\n").unwrap();
    let mut d = discover(&root);
    let e = d.power.iter_mut().find(|p| p.describe().counter).unwrap();
    assert_eq!(e.read(0).unwrap(), None);
    std::fs::write(chip.join("energy1_input"), "4000000\n").unwrap();
    let r = e.read(500_000_000).unwrap().unwrap();
    assert_eq!((r.joules, r.watts), (Some(Joules(3.0)), Watts(6.0)));
    std::fs::write(chip.join("energy1_input"), "10\n").unwrap();
    let err = e.read(1_000_000_000).unwrap_err().to_string();
    assert!(err.contains("energy1_input: counter went from 4000000 to 10 µJ"), "{err}");
    std::fs::write(chip.join("energy1_input"), "2000010\n").unwrap();
    let r = e.read(2_000_000_000).unwrap().unwrap();
    assert_eq!((r.joules, r.watts), (Some(Joules(2.0)), Watts(2.0)));
}

/// Virtual time for the sampler: every sleep returns at once at the instant asked for, so the
/// number of readings in a window is exact.
struct VirtualTime(u64);

impl wattflip_agent::sensors::sampler::Timebase for VirtualTime {
    fn now(&mut self) -> (u64, i64) {
        (self.0, 1_700_000_000_000_000_000 + self.0 as i64)
    }

    fn sleep_until(&mut self, mono_ns: u64) {
        self.0 = self.0.max(mono_ns);
    }
}

#[test]
fn sampler_reads_each_source_on_its_own_grid() {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::time::Duration;
    let rapl = discover(&fixture("rapl-only")).power.into_iter().filter(|s| s.describe().zone == "package-0");
    let hwmon = discover(&fixture("ina226")).power;
    let sensors: Vec<_> = rapl
        .map(|s| (s, Duration::from_millis(10)))
        .chain(hwmon.into_iter().map(|s| (s, Duration::from_millis(1))))
        .collect();
    let mut windows = Vec::new();
    let stats = wattflip_agent::sensors::sampler::run_on(
        sensors,
        Duration::from_millis(100),
        &mut VirtualTime(0),
        Arc::new(AtomicBool::new(false)),
        |b| {
            windows.push(
                b.power
                    .iter()
                    .map(|p| (p.source.clone(), p.zone.clone(), p.readings, p.watts.unwrap(), p.joules, p.interval_ns, p.time_ns))
                    .collect::<Vec<_>>(),
            );
            windows.len() < 3
        },
    );
    const T0: i64 = 1_700_000_000_000_000_000;
    // Window [0, 100 ms): RAPL at 10 ms reads at 0, 10 .. 90 ms, the first read only setting the
    // counter's baseline; hwmon at 1 ms reads at 0 .. 99 ms. A fixture counter does not move.
    assert_eq!(
        windows,
        vec![
            vec![
                ("rapl".to_string(), "package-0".to_string(), 9, 0.0, Some(0.0), 90_000_000, T0 + 90_000_000),
                ("hwmon".into(), "ina226-0-0040/power1".into(), 100, 18.0, None, 0, T0 + 99_000_000),
            ],
            vec![
                ("rapl".to_string(), "package-0".to_string(), 10, 0.0, Some(0.0), 100_000_000, T0 + 190_000_000),
                ("hwmon".into(), "ina226-0-0040/power1".into(), 100, 18.0, None, 0, T0 + 199_000_000),
            ],
            vec![
                ("rapl".to_string(), "package-0".to_string(), 10, 0.0, Some(0.0), 100_000_000, T0 + 290_000_000),
                ("hwmon".into(), "ina226-0-0040/power1".into(), 100, 18.0, None, 0, T0 + 299_000_000),
            ],
        ]
    );
    // The third window closes at 300 ms before that instant's reads, and the sampler stops there.
    assert_eq!((stats.reads, stats.errors, stats.windows), (3 * 10 + 3 * 100, 0, 3));
}

fn electrical_readings(d: &mut Discovered) -> Vec<(String, String, Electrical)> {
    d.electrical
        .iter_mut()
        .map(|e| {
            let c = e.describe();
            (c.chip, c.channel, e.read().unwrap())
        })
        .collect()
}

#[test]
fn pmbus_psu_voltage_and_current_on_their_own() {
    let mut d = discover(&fixture("pmbus-psu"));
    assert_eq!(
        electrical_readings(&mut d),
        vec![
            ("pmbus-1-0058".to_string(), "vin".to_string(), Electrical::Volts(Volts(230.0))),
            ("pmbus-1-0058".into(), "iin".into(), Electrical::Amperes(Amperes(1.0))),
        ]
    );
}

#[test]
fn ina226_shunt_and_bus_voltage_and_current() {
    let mut d = discover(&fixture("ina226"));
    assert_eq!(
        electrical_readings(&mut d),
        vec![
            ("ina226-0-0040".to_string(), "in0".to_string(), Electrical::Volts(Volts(0.002))),
            ("ina226-0-0040".into(), "in1".into(), Electrical::Volts(Volts(12.0))),
            ("ina226-0-0040".into(), "curr1".into(), Electrical::Amperes(Amperes(1.5))),
        ]
    );
}

#[test]
fn ina3221_every_channel_voltage_and_current() {
    let mut d = discover(&fixture("ina3221"));
    let chip = "ina3221-0-0041".to_string();
    let v = |ch: &str, x: f64| (chip.clone(), ch.to_string(), Electrical::Volts(Volts(x)));
    let a = |ch: &str, x: f64| (chip.clone(), ch.to_string(), Electrical::Amperes(Amperes(x)));
    assert_eq!(
        electrical_readings(&mut d),
        vec![
            v("SSD 12V", 12.0),
            v("SSD 5V", 5.0),
            v("SSD 3V3", 3.3),
            v("in4", 0.14),
            a("curr1", 0.5),
            a("curr2", 1.0),
            a("curr3", 0.0),
            a("curr4", 1.5),
        ]
    );
}

#[test]
fn ina219_without_power_attribute_multiplies_bus_voltage_and_current() {
    let mut d = discover(&fixture("ina219-no-power"));
    // P = V_bus (in1, 5 V) · I (curr1, 2 A); the shunt resistor comes from sysfs (10000 µΩ).
    assert_eq!(power_readings(&mut d), vec![("ina219-2-0045/channel1".to_string(), "rail".to_string(), Watts(10.0), 0.01)]);
    assert_eq!(d.power[0].describe().path, fixture("ina219-no-power").join("class/hwmon/hwmon0/curr1_input").display().to_string());
    assert_eq!(
        electrical_readings(&mut d),
        vec![
            ("ina219-2-0045".to_string(), "in0".to_string(), Electrical::Volts(Volts(0.02))),
            ("ina219-2-0045".into(), "in1".into(), Electrical::Volts(Volts(5.0))),
            ("ina219-2-0045".into(), "curr1".into(), Electrical::Amperes(Amperes(2.0))),
        ]
    );
}
