//! RAPL and hwmon readers on the fixture trees in `tests/fixtures/sysfs/<scenario>/sys`.

// Integration tests and their helpers: a panic with a message is the test's failure report
// (clippy.toml's allow-*-in-tests covers #[test] functions only, not the helpers they call).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/sysfs.rs"]
mod sysfs;

use std::path::{Path, PathBuf};
use sysfs::{copy_fixture, discover, electrical_readings, fixture, power_readings, scopes};
use wattflip_agent::drives::block;
use wattflip_agent::sensors::{rapl, Discovered, Electrical, SensorKinds};
use wattflip_proto::units::{Amperes, Celsius, Joules, Volts, Watts};

fn zones(d: &Discovered) -> Vec<(String, String)> {
    d.power
        .iter()
        .map(|p| {
            let s = p.describe();
            (s.zone, s.scope)
        })
        .collect()
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
    assert_eq!((desc.zone.as_str(), desc.scope.as_str()), ("power_meter-ACPI0000:00/power1", "wall"));
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
    assert_eq!(d.capacity_bytes, Some(1_073_741_824));
    assert_eq!(d.logical_block_size, Some(512));
    assert_eq!(d.controller, "nvme0");
    assert_eq!(d.transport, "nvme");
}

#[test]
fn pmbus_psu_input_and_output_power() {
    let mut d = discover(&fixture("pmbus-psu"));
    assert_eq!(
        power_readings(&mut d),
        vec![("pmbus-1-0058/pin".to_string(), "psu_in".to_string(), Watts(230.0), 0.0), ("pmbus-1-0058/pout1".into(), "psu_out".into(), Watts(207.5), 0.0),]
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
    let sensors: Vec<_> = rapl.map(|s| (s, Duration::from_millis(10))).chain(hwmon.into_iter().map(|s| (s, Duration::from_millis(1)))).collect();
    let mut windows = Vec::new();
    let stats = wattflip_agent::sensors::sampler::run_on(sensors, Duration::from_millis(100), &mut VirtualTime(0), Arc::new(AtomicBool::new(false)), |b| {
        windows.push(
            b.power.iter().map(|p| (p.source.clone(), p.zone.clone(), p.readings, p.watts.unwrap(), p.joules, p.interval_ns, p.time_ns)).collect::<Vec<_>>(),
        );
        windows.len() < 3
    });
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
        // in4..in6 are the shunt voltages and in7 their sum, in µV (Documentation/hwmon/ina3221.rst):
        // 0.5 A and 1 A through 10 mΩ are 5 mV and 10 mV (fixture README), not 5 V and 10 V.
        vec![
            v("SSD 12V", 12.0),
            v("SSD 5V", 5.0),
            v("SSD 3V3", 3.3),
            v("in4", 0.005),
            v("in5", 0.01),
            v("in6", 0.0),
            v("in7", 0.015),
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

#[test]
fn mmio_and_msr_packages_are_two_zones_and_one_package_scope() {
    let d = discover(&fixture("rapl-mmio-msr"));
    assert_eq!(
        scopes(&d),
        vec![
            ("package-0".to_string(), "package".to_string(), true),
            ("package-0/core".into(), "core".into(), true),
            ("package-0/uncore".into(), "uncore".into(), true),
            ("psys".into(), "psys".into(), true),
            ("mmio:package-0".into(), "package_mmio".into(), true),
        ]
    );
    let mmio = d.power[4].describe();
    assert_eq!(mmio.note, "package-0 through MMIO (intel-rapl-mmio:0); the MSR zone package-0 is the same package and the one fleet sums use");
    // Exactly one zone per package has scope `package`: a fleet SUM over it counts 850 J once.
    assert_eq!(d.power.iter().filter(|p| p.describe().scope == "package").count(), 1);
}

#[test]
fn lone_mmio_package_is_the_package() {
    let (_tmp, root) = copy_fixture("rapl-mmio-msr");
    let pc = root.join("class/powercap");
    for z in ["intel-rapl:0", "intel-rapl:0:0", "intel-rapl:0:1", "intel-rapl:1"] {
        std::fs::remove_dir_all(pc.join(z)).unwrap();
    }
    let d = discover(&root);
    assert_eq!(scopes(&d), vec![("mmio:package-0".to_string(), "package".to_string(), true)]);
    assert_eq!(d.power[0].describe().note, "");
}

#[test]
fn power_and_energy_of_one_rail_are_one_zone_read_from_the_counter() {
    let (_tmp, root) = copy_fixture("power-energy-rail");
    let chip = root.join("class/hwmon/hwmon0");
    let mut d = discover(&root);
    assert_eq!(scopes(&d), vec![("ina238-1-0040/power1".to_string(), "rail".to_string(), true)]);
    let z = &mut d.power[0];
    assert_eq!(z.describe().path, chip.join("energy1_input").display().to_string());
    assert_eq!(z.update_period(), std::time::Duration::from_millis(1));
    assert_eq!(z.read(0).unwrap(), None);
    // 12 W for 0.5 s: 6 J, whatever power1_input says at that instant.
    std::fs::write(chip.join("energy1_input"), "5006000000\n").unwrap();
    std::fs::write(chip.join("power1_input"), "99000000\n").unwrap();
    let r = z.read(500_000_000).unwrap().unwrap();
    assert_eq!((r.joules, r.watts, r.interval_ns), (Some(Joules(6.0)), Watts(12.0), 500_000_000));
}

#[test]
fn acpi_power_meter_is_a_whole_host_meter_not_a_rail() {
    let mut d = discover(&fixture("acpi-power-meter"));
    assert_eq!(
        power_readings(&mut d),
        vec![
            ("power_meter-ACPI000D:00/power1".to_string(), "wall".to_string(), Watts(372.0), 0.0),
            ("pmbus-1-0058/pin".into(), "psu_in".into(), Watts(398.0), 0.0),
            ("pmbus-1-0058/pout1".into(), "psu_out".into(), Watts(360.0), 0.0),
            ("ina226-0-0040/power1".into(), "rail".into(), Watts(38.9), 0.002),
        ]
    );
    // power1_average changes once per power1_average_interval (1000 ms).
    assert_eq!(d.power[0].update_period(), std::time::Duration::from_secs(1));
    assert_eq!(d.power[3].update_period(), std::time::Duration::from_millis(2));
}

/// Replaces `path` the way a driver reload or a renaming writer does: a new inode behind the path.
fn replace_by_rename(path: &Path, content: &str) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, content).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn a_replaced_counter_is_read_again_not_frozen_at_zero() {
    let (_tmp, root) = copy_fixture("replaced-file");
    let pkg = root.join("class/powercap/intel-rapl:0/energy_uj");
    let mut d = discover(&root);
    let z = d.power.iter_mut().find(|p| p.describe().zone == "package-0").unwrap();
    assert_eq!(z.read(0).unwrap(), None);
    std::fs::write(&pkg, "2000000\n").unwrap(); // in place: +1 J
    assert_eq!(z.read(1_000_000_000).unwrap().unwrap().watts, Watts(1.0));
    replace_by_rename(&pkg, "4000000\n"); // +2 J behind a new inode
                                          // The path is checked at least every RECHECK (100 ms): wait that long, as a report interval would.
    std::thread::sleep(wattflip_agent::sensors::RECHECK + std::time::Duration::from_millis(20));
    let r = z.read(2_000_000_000).unwrap().unwrap();
    assert_eq!((r.joules, r.watts), (Some(Joules(2.0)), Watts(2.0)));
    replace_by_rename(&pkg, "7000000\n");
    std::thread::sleep(wattflip_agent::sensors::RECHECK + std::time::Duration::from_millis(20));
    assert_eq!(z.read(3_000_000_000).unwrap().unwrap().watts, Watts(3.0));
}

#[test]
fn a_replaced_hwmon_attribute_is_read_again() {
    let (_tmp, root) = copy_fixture("replaced-file");
    let attr = root.join("class/hwmon/hwmon0/power1_input");
    let mut d = discover(&root);
    let p = d.power.iter_mut().find(|p| p.describe().source == "hwmon").unwrap();
    assert_eq!(p.read(0).unwrap().unwrap().watts, Watts(18.0));
    replace_by_rename(&attr, "21500000\n");
    std::thread::sleep(wattflip_agent::sensors::RECHECK + std::time::Duration::from_millis(20));
    assert_eq!(p.read(0).unwrap().unwrap().watts, Watts(21.5));
}

#[test]
fn a_vanished_zone_is_an_error_and_a_gap_then_comes_back() {
    let (_tmp, root) = copy_fixture("vanished-zone");
    let z1 = root.join("class/powercap/intel-rapl:1");
    let saved = root.join("saved-intel-rapl-1");
    let mut d = discover(&root);
    let p1 = d.power.iter_mut().find(|p| p.describe().zone == "package-1").unwrap();
    assert_eq!(p1.read(0).unwrap(), None);
    std::fs::write(z1.join("energy_uj"), "4000000\n").unwrap();
    assert_eq!(p1.read(1_000_000_000).unwrap().unwrap().watts, Watts(1.0));
    // The zone goes away (module unloaded, CPU offlined): the open descriptor would keep answering
    // 4000000 forever; the path check turns it into an error naming the file.
    std::fs::rename(&z1, &saved).unwrap();
    std::thread::sleep(wattflip_agent::sensors::RECHECK + std::time::Duration::from_millis(20));
    let err = p1.read(2_000_000_000).unwrap_err().to_string();
    assert!(err.ends_with("intel-rapl:1/energy_uj does not exist (device removed or driver unloaded?)"), "{err}");
    assert!(p1.read(2_500_000_000).is_err(), "still gone: still an error, never 0 W");
    // It comes back: readings resume over the real elapsed time (+3 J in 2 s since the last value).
    std::fs::rename(&saved, &z1).unwrap();
    std::fs::write(z1.join("energy_uj"), "7000000\n").unwrap();
    let r = p1.read(3_000_000_000).unwrap().unwrap();
    assert_eq!((r.joules, r.watts, r.interval_ns), (Some(Joules(3.0)), Watts(1.5), 2_000_000_000));
}

/// Virtual time that runs late like a loaded machine, over a RAPL counter that moves every
/// 976 µs by 117.12 mJ (120 W exactly). Every clock read costs 10 µs of virtual time and rewrites
/// `energy_uj` in place with the counter's value at that instant, as the kernel computes it at the
/// moment of the read. Wake-ups are late by 0–400 µs, and every 37th by 3 ms (a slow read).
struct LateCounterClock {
    now: u64,
    wakeups: u64,
    file: PathBuf,
    /// The value in the file (written only when it changes: file writes are the test's cost).
    shown: u64,
}

const UPDATE_NS: u64 = 976_000;
const UJ_PER_UPDATE: u64 = 117_120;

impl LateCounterClock {
    fn publish(&mut self) {
        let v = 1_000_000 + (self.now / UPDATE_NS) * UJ_PER_UPDATE;
        if v != self.shown {
            std::fs::write(&self.file, format!("{v}\n")).unwrap();
            self.shown = v;
        }
    }
}

impl wattflip_agent::sensors::sampler::Timebase for LateCounterClock {
    fn now(&mut self) -> (u64, i64) {
        self.now += 10_000;
        self.publish();
        (self.now, 1_700_000_000_000_000_000 + self.now as i64)
    }

    fn sleep_until(&mut self, mono_ns: u64) {
        self.wakeups += 1;
        // A fixed pseudo-random lateness (Weyl sequence), so the test is the same on every run.
        let late = if self.wakeups.is_multiple_of(37) { 3_000_000 } else { (self.wakeups.wrapping_mul(0x9E37_79B9) >> 7) % 400_000 };
        self.now = self.now.max(mono_ns) + late;
        self.publish();
    }
}

#[test]
fn at_1khz_min_and_max_stay_within_10_percent_of_a_constant_120_w() {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::time::Duration;
    let (_tmp, root) = copy_fixture("rapl-only");
    let file = root.join("class/powercap/intel-rapl:0/energy_uj");
    let pkg = discover(&root).power.into_iter().find(|s| s.describe().zone == "package-0").unwrap();
    let mut clock = LateCounterClock { now: 0, wakeups: 0, file, shown: 0 };
    clock.publish();
    let mut windows = Vec::new();
    let stats = wattflip_agent::sensors::sampler::run_on(
        vec![(pkg, Duration::from_millis(1))],
        Duration::from_millis(100),
        &mut clock,
        Arc::new(AtomicBool::new(false)),
        |b| {
            let p = &b.power[0];
            windows.push((p.watts.unwrap(), p.min_watts, p.max_watts, p.readings));
            windows.len() < 10
        },
    );
    assert_eq!(windows.len(), 10);
    for (i, (mean, min, max, readings)) in windows.iter().enumerate() {
        let (min, max) = (min.expect("min over complete spans"), max.expect("max over complete spans"));
        // The mean is energy over time: off by at most one update (117 mJ) in a 100 ms window.
        assert!((mean - 120.0).abs() <= 120.0 * 0.012, "window {i}: mean {mean}");
        assert!(min >= 108.0 && max <= 132.0, "window {i}: min {min} max {max} (truth 120 W)");
        assert!(*readings >= 60, "window {i}: {readings} readings");
    }
    assert_eq!(stats.errors, 0);
}

#[test]
fn a_zone_that_appears_after_start_up_is_rediscovered_once() {
    use std::collections::HashSet;
    let (_tmp, root) = copy_fixture("vanished-zone");
    let z1 = root.join("class/powercap/intel-rapl:1");
    let saved = root.join("saved-intel-rapl-1");
    std::fs::rename(&z1, &saved).unwrap();
    let d = discover(&root);
    let mut known: HashSet<(String, String)> = d.power.iter().map(|p| p.describe()).map(|s| (s.source, s.zone)).collect();
    assert_eq!(known, HashSet::from([("rapl".to_string(), "package-0".to_string())]));
    assert!(wattflip_agent::sensors::rediscover(&root, &SensorKinds::default(), &known).is_empty());
    // The driver brings the second package later.
    std::fs::rename(&saved, &z1).unwrap();
    let mut new = wattflip_agent::sensors::rediscover(&root, &SensorKinds::default(), &known);
    assert_eq!(new.iter().map(|p| p.describe().zone).collect::<Vec<_>>(), vec!["package-1".to_string()]);
    assert_eq!(new[0].read(0).unwrap(), None);
    std::fs::write(z1.join("energy_uj"), "3500000\n").unwrap();
    assert_eq!(new[0].read(500_000_000).unwrap().unwrap().watts, Watts(1.0));
    known.insert(("rapl".into(), "package-1".into()));
    assert!(wattflip_agent::sensors::rediscover(&root, &SensorKinds::default(), &known).is_empty());
}
