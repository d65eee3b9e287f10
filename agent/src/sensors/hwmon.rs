//! hwmon channels (`<sysfs>/class/hwmon/hwmon*/`): `temp*_input` (m°C) as temperature sensors,
//! `power*_input`/`power*_average` (µW) as instantaneous power sources (ACPI power meter, PMBus,
//! INA2xx), and `in*_input` / `curr*_input` as voltage and current channels of their own
//! (PMBus vin/vout/iin/iout, INA2xx shunt and bus voltage and current). Units and scopes come from
//! the driver table (`drivers`): INA3221's shunt voltages are µV, an unknown driver's power is
//! scope `unknown`. hwmonN numbers are unstable across boots, so chips are named by their `name`
//! plus the device they hang off (docs/sources-and-drives.md §2). Add a channel kind with a scan in `discover`
//! and a sensor type implementing the trait from `sensors`; a driver is a row in `drivers`.

use super::drivers::{self, Quantity, Unit};
use super::{
    read_attr, read_int, Attr, Discovered, Electrical, ElectricalChannel, ElectricalSensor, Flags, PowerReading, PowerSensor, SensorError, TemperatureSensor,
};
use std::path::{Path, PathBuf};
use std::time::Duration;
use wattflip_proto::units::{Amperes, Celsius, MicroJoules, Volts, Watts};
use wattflip_proto::v1;

/// hwmon attributes are world-readable by ABI; a permission error means a driver deviates.
const HINT: &str = "this hwmon driver restricts reads; run the agent as root or adjust the attribute's mode";

pub struct HwmonTemp {
    device: String,
    sensor: String,
    input: Attr,
}

impl TemperatureSensor for HwmonTemp {
    fn describe(&self) -> v1::TemperatureSensor {
        v1::TemperatureSensor {
            source: "hwmon".into(),
            device: self.device.clone(),
            sensor: self.sensor.clone(),
            path: self.input.path().display().to_string(),
        }
    }

    fn read(&mut self) -> Result<Celsius, SensorError> {
        self.input.read_int::<i64>("an integer (m°C)").map(Celsius::from_millidegrees)
    }
}

/// A voltage (`in<n>_input`) or current (`curr<n>_input`) channel, in its driver's unit (mV, µV
/// for INA3221's shunt voltages, mA).
pub struct HwmonElectrical {
    chip: String,
    channel: String,
    unit: Unit,
    input: Attr,
}

impl ElectricalSensor for HwmonElectrical {
    fn describe(&self) -> ElectricalChannel {
        ElectricalChannel { source: "hwmon".into(), chip: self.chip.clone(), channel: self.channel.clone(), path: self.input.path().display().to_string() }
    }

    fn read(&mut self) -> Result<Electrical, SensorError> {
        Ok(match self.unit {
            Unit::MicroVolt => Electrical::Volts(Volts(self.input.read_int::<i64>("an integer (µV)")? as f64 / 1e6)),
            Unit::MilliAmpere => Electrical::Amperes(Amperes::from_milliamperes(self.input.read_int("an integer (mA)")?)),
            _ => Electrical::Volts(Volts::from_millivolts(self.input.read_int("an integer (mV)")?)),
        })
    }
}

/// How an hwmon power channel is read.
enum PowerInput {
    /// `power*_input` / `power*_average` in µW.
    Direct(Attr),
    /// No power attribute (INA3221; INA2xx configured without it): P = V_bus · I, read as mV and mA,
    /// whose product is µW (docs/sources-and-drives.md §2).
    VoltCurrent { volts: Attr, amps: Attr },
    /// `energy*_input` in µJ. No wrap semantics are defined for hwmon energy, so a decrease is a
    /// reset of the chip or driver and skips one interval (docs/sources-and-drives.md §2).
    Energy { counter: Attr, last: Option<(u64, u64)> },
}

pub struct HwmonPower {
    zone: String,
    scope: String,
    input: PowerInput,
    shunt_ohms: f64,
    /// How often the chip updates the channel (zero: unknown).
    update: Duration,
}

impl HwmonPower {
    fn main_path(&self) -> &Path {
        match &self.input {
            PowerInput::Direct(p) | PowerInput::Energy { counter: p, .. } => p.path(),
            PowerInput::VoltCurrent { amps, .. } => amps.path(),
        }
    }
}

impl PowerSensor for HwmonPower {
    fn describe(&self) -> v1::PowerSource {
        v1::PowerSource {
            source: "hwmon".into(),
            zone: self.zone.clone(),
            scope: self.scope.clone(),
            method: v1::Method::Measured as i32,
            counter: matches!(self.input, PowerInput::Energy { .. }),
            path: self.main_path().display().to_string(),
            enabled: true,
            note: String::new(),
            shunt_ohms: self.shunt_ohms,
        }
    }

    fn update_period(&self) -> Duration {
        self.update
    }

    fn read_timed(&mut self, now: &mut dyn FnMut() -> u64) -> (u64, Result<Option<PowerReading>, SensorError>) {
        // Counters are timed around the read like RAPL's; instantaneous values are stamped before.
        let t0 = now();
        if let PowerInput::Energy { counter, last } = &mut self.input {
            let cur = counter.read_counter("an unsigned integer (µJ)", last.map(|l| l.0));
            let t1 = now();
            let t = t0 + t1.saturating_sub(t0) / 2;
            return (t, cur.and_then(|c| self.account_energy(c, t)));
        }
        (t0, self.read(t0))
    }

    fn read(&mut self, now_ns: u64) -> Result<Option<PowerReading>, SensorError> {
        match &mut self.input {
            PowerInput::Direct(p) => {
                let uw: i64 = p.read_int("an integer (µW)")?;
                Ok(Some(PowerReading { watts: Watts::from_microwatts(uw), joules: None, interval_ns: 0, flags: Flags::NONE }))
            }
            PowerInput::VoltCurrent { volts, amps } => {
                let mv: i64 = volts.read_int("an integer (mV)")?;
                let ma: i64 = amps.read_int("an integer (mA)")?;
                Ok(Some(PowerReading { watts: Watts::from_microwatts(mv.saturating_mul(ma)), joules: None, interval_ns: 0, flags: Flags::NONE }))
            }
            PowerInput::Energy { counter, last } => {
                let cur = counter.read_counter("an unsigned integer (µJ)", last.map(|l| l.0))?;
                self.account_energy(cur, now_ns)
            }
        }
    }
}

impl HwmonPower {
    /// Energy since the previous counter value; a decrease is a reset and skips one interval.
    fn account_energy(&mut self, cur: u64, now_ns: u64) -> Result<Option<PowerReading>, SensorError> {
        let PowerInput::Energy { counter, last } = &mut self.input else { return Ok(None) };
        let prev = last.replace((cur, now_ns));
        let Some((prev_uj, prev_ns)) = prev else { return Ok(None) };
        if cur < prev_uj {
            return Err(SensorError::CounterReset { path: counter.path().to_owned(), prev: prev_uj, cur });
        }
        let joules = MicroJoules(cur - prev_uj).to_joules();
        let interval_ns = now_ns.saturating_sub(prev_ns);
        Ok(joules.over_nanos(interval_ns).map(|watts| PowerReading { watts, joules: Some(joules), interval_ns, flags: Flags::NONE }))
    }
}

/// Stable chip name: a drive's kernel name for a drive's own chip ([`drive_of`]: `nvme0`, `sda`,
/// the identity nvme-cli and smartctl readings of that drive carry), `coretemp.0`-style device
/// names otherwise, or the bare chip `name` when there is no device link.
fn chip_device(sysfs_root: &Path, chip_dir: &Path, name: &str) -> String {
    if let Some(drive) = drive_of(sysfs_root, chip_dir, name) {
        return drive;
    }
    let target = std::fs::read_link(chip_dir.join("device")).ok();
    let base = target.as_ref().and_then(|t| t.file_name()).map(|b| b.to_string_lossy().into_owned());
    match base {
        Some(b) if b.starts_with(name) => b,
        Some(b) => format!("{name}-{b}"),
        None => name.to_string(),
    }
}

/// The drive a drive's temperature chip reports on, joined through sysfs links, not names: the
/// `nvme` chip is registered on the controller's PCI function (`drivers/nvme/host/hwmon.c`,
/// `nvme_hwmon_init`: `ctrl->dev`), which is where `class/nvme/nvmeX/device` points; the
/// `drivetemp` chip on the SCSI device H:C:T:L (`drivers/hwmon/drivetemp.c`), which is where
/// `class/block/sdX/device` points. (A chip registered on the controller's class device, as
/// some kernels did, is named by its device link already: `nvme0`.)
fn drive_of(sysfs_root: &Path, chip_dir: &Path, name: &str) -> Option<String> {
    let class = match name {
        "nvme" => "nvme",
        "drivetemp" => "block",
        _ => return None,
    };
    let parent = std::fs::canonicalize(chip_dir.join("device")).ok()?;
    let mut names: Vec<String> = std::fs::read_dir(sysfs_root.join("class").join(class))
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| std::fs::canonicalize(e.path().join("device")).is_ok_and(|d| d == parent))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names.into_iter().next()
}

/// Where a chip's attributes are, and its `name`: in `hwmonN` itself for drivers registered with
/// `hwmon_device_register_with_info`/`_with_groups` (the core creates `name` there), or in
/// `hwmonN/device/` for drivers still registered the old way, `hwmon_device_register(dev)`: the
/// core then creates no `name` (it is NULL, `hwmon_dev_name_is_visible` hides it) and the driver
/// puts every attribute, `name` included, on its own device (`acpi_power_meter`, `applesmc`,
/// `ibmaem`; tests/fixtures/sysfs/acpi-power-meter/README.md cites the source). A chip with a
/// name in neither place is noted, not skipped silently.
fn attribute_dir(hwmon_dir: &Path, out: &mut Discovered) -> Option<(PathBuf, String)> {
    let device = hwmon_dir.join("device");
    for dir in [hwmon_dir, device.as_path()] {
        match read_attr(&dir.join("name"), HINT) {
            Ok(name) => return Some((dir.to_path_buf(), name)),
            Err(SensorError::Missing { .. }) => {}
            Err(e) => {
                out.unavailable.push(format!("hwmon: {}: the chip's name cannot be read ({e}); its channels are not read", hwmon_dir.display()));
                return None;
            }
        }
    }
    out.unavailable.push(format!(
        "hwmon: {} has no `name`, neither in it nor in its device/ folder: its channels are not read (a driver the agent does not know how to read; please report it)",
        hwmon_dir.display()
    ));
    None
}

/// Channel numbers present for `prefix` (e.g. `temp` → [1, 2] from temp1_input, temp2_input).
fn channels(files: &[String], prefix: &str, suffix: &str) -> Vec<u32> {
    let mut v: Vec<u32> = files.iter().filter_map(|f| f.strip_prefix(prefix)?.strip_suffix(suffix)?.parse().ok()).collect();
    v.sort_unstable();
    v
}

/// Finds every hwmon chip's temperature, power, voltage and current channels under `sysfs_root`;
/// each attribute checks that its path still names the open file every `recheck` ([`super::Attr`]).
pub fn discover(sysfs_root: &Path, recheck: Duration, out: &mut Discovered) {
    let dir = sysfs_root.join("class/hwmon");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        out.unavailable.push(format!("hwmon: {} does not exist: no hwmon chips on this host", dir.display()));
        return;
    };
    let mut chips: Vec<PathBuf> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    chips.sort();
    let rapl_package = has_rapl_package(sysfs_root);
    for hwmon_dir in chips {
        let Some((chip, name)) = attribute_dir(&hwmon_dir, out) else { continue };
        let device = chip_device(sysfs_root, &hwmon_dir, &name);
        let files: Vec<String> = match std::fs::read_dir(&chip) {
            Ok(rd) => rd.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect(),
            Err(_) => continue,
        };
        for n in channels(&files, "temp", "_input") {
            let label = read_attr(&chip.join(format!("temp{n}_label")), HINT).unwrap_or_else(|_| format!("temp{n}"));
            out.temperature.push(Box::new(HwmonTemp {
                device: device.clone(),
                sensor: label,
                input: Attr::new(chip.join(format!("temp{n}_input")), HINT, recheck),
            }));
        }
        let disabled = disabled_channels(&chip, &name);
        discover_power(&chip, (&name, &device), &files, (recheck, rapl_package), &disabled, out);
        // Every voltage and current channel the chip has: a bounded set per chip, so the series
        // per host stay few. Channel tags are labels when the driver gives them (vin, iout1,
        // SSD 12V), else the attribute stem (in0, curr1). A disabled channel's inputs (and its
        // INA3221 shunt voltage, in<n+3>) have no data: not read.
        for (prefix, quantity) in [("in", Quantity::Voltage), ("curr", Quantity::Current)] {
            for n in channels(&files, prefix, "_input") {
                if disabled.contains(&n) || (prefix == "in" && disabled.contains(&n.saturating_sub(3))) {
                    continue;
                }
                out.electrical.push(Box::new(HwmonElectrical {
                    chip: device.clone(),
                    channel: label(&chip, prefix, n),
                    unit: drivers::unit(&name, quantity, n),
                    input: Attr::new(chip.join(format!("{prefix}{n}_input")), HINT, recheck),
                }));
            }
        }
    }
}

/// The zone name of channel `n`: the power channel's label when the chip labels power but not
/// energy, so the zone keeps its name whichever attribute is read.
fn power_label(chip: &Path, n: u32, energy_label: &str) -> String {
    let has_power = ["input", "average"].iter().any(|k| chip.join(format!("power{n}_{k}")).exists());
    if chip.join(format!("energy{n}_label")).exists() || !has_power {
        return energy_label.to_string();
    }
    label(chip, "power", n)
}

/// How often the chip's values change: `update_interval` (ms) when the driver has it (INA226,
/// INA3221, many PMBus chips), else unknown (zero).
fn update_period(chip: &Path) -> Duration {
    read_int::<u64>(&chip.join("update_interval"), HINT, "ms").map(Duration::from_millis).unwrap_or(Duration::ZERO)
}

fn label(chip: &Path, prefix: &str, n: u32) -> String {
    read_attr(&chip.join(format!("{prefix}{n}_label")), HINT).unwrap_or_else(|_| format!("{prefix}{n}"))
}

/// Shunt resistor in ohms from `shunt_resistor` (INA2xx) or `shunt<n>_resistor` (INA3221), in µΩ.
fn shunt_ohms(chip: &Path, n: u32) -> f64 {
    let per_channel = chip.join(format!("shunt{n}_resistor"));
    let path = if per_channel.exists() { per_channel } else { chip.join("shunt_resistor") };
    read_int::<i64>(&path, HINT, "µΩ").map(|uo| uo as f64 / 1e6).unwrap_or(0.0)
}

/// Whether powercap has a RAPL package zone: then `amd_energy`'s socket counters are the same
/// quantity read twice and get scope `package_hwmon` (recorded as a cross-check, never summed),
/// like an MMIO package zone beside its MSR zone (docs/schema.md, "Zone identity").
fn has_rapl_package(sysfs_root: &Path) -> bool {
    let Ok(rd) = std::fs::read_dir(sysfs_root.join("class/powercap")) else { return false };
    rd.filter_map(|e| e.ok()).any(|e| read_attr(&e.path().join("name"), HINT).is_ok_and(|n| n.starts_with("package")))
}

/// INA3221 channels (1..3) that are disabled: `in<n>_enable` = 0, or a read of `in<n>_input`
/// that fails with ENODATA, which is how the driver answers for a disabled channel
/// (Documentation/hwmon/ina3221.rst, `ina3221_read_in`).
fn disabled_channels(chip: &Path, name: &str) -> Vec<u32> {
    if name != "ina3221" {
        return Vec::new();
    }
    (1..=3)
        .filter(|n| {
            let off = read_attr(&chip.join(format!("in{n}_enable")), HINT).is_ok_and(|v| v == "0");
            let no_data = matches!(std::fs::read_to_string(chip.join(format!("in{n}_input"))), Err(e) if e.raw_os_error() == Some(libc::ENODATA));
            off || no_data
        })
        .collect()
}

/// The scope of a power or energy channel (the driver table's), with `amd_energy`'s sockets set
/// apart when RAPL already has the package ([`has_rapl_package`]).
fn channel_scope(name: &str, quantity: Quantity, n: u32, label: &str, rapl_package: bool) -> String {
    match drivers::scope(name, quantity, n, label) {
        "package" if name == "amd_energy" && rapl_package => "package_hwmon".into(),
        s => s.into(),
    }
}

/// Adds `p` as a usable source after one test read of each file it reads (the same probe RAPL's
/// zones get): a channel that cannot be read (a root-only counter, mode 0440 as `amd_energy` sets
/// it, read by a non-root agent) is listed as not usable, with the error as its note, never shown
/// as usable until its first failing sample.
fn push_tested(out: &mut Discovered, p: HwmonPower) {
    let files: Vec<&Path> = match &p.input {
        PowerInput::Direct(a) | PowerInput::Energy { counter: a, .. } => vec![a.path()],
        PowerInput::VoltCurrent { volts, amps } => vec![volts.path(), amps.path()],
    };
    if let Some(e) = files.into_iter().find_map(|f| read_attr(f, HINT).err()) {
        let mut src = p.describe();
        src.enabled = false;
        src.note = e.to_string();
        out.unusable_power.push(src);
        return;
    }
    out.power.push(Box::new(p));
}

fn discover_power(
    chip: &Path,
    (name, device): (&str, &str),
    files: &[String],
    (recheck, rapl_package): (Duration, bool),
    disabled: &[u32],
    out: &mut Discovered,
) {
    let update = update_period(chip);
    let mut have_power = false;
    // One zone per physical channel: an energy counter when the chip has one (exact joules over
    // any interval), else power*_input, else power*_average.
    let energy = channels(files, "energy", "_input");
    for n in &energy {
        let l = label(chip, "energy", *n);
        have_power = true;
        push_tested(
            out,
            HwmonPower {
                zone: format!("{device}/{}", power_label(chip, *n, &l)),
                scope: channel_scope(name, Quantity::Energy, *n, &l, rapl_package),
                input: PowerInput::Energy { counter: Attr::new(chip.join(format!("energy{n}_input")), HINT, recheck), last: None },
                shunt_ohms: if name.starts_with("ina") { shunt_ohms(chip, *n) } else { 0.0 },
                update,
            },
        );
    }
    for file_suffix in ["_input", "_average"] {
        for n in channels(files, "power", file_suffix) {
            // Prefer power*_input when a chip has both; skip a channel its energy counter covers.
            if (file_suffix == "_average" && files.contains(&format!("power{n}_input"))) || energy.contains(&n) {
                have_power |= energy.contains(&n);
                continue;
            }
            have_power = true;
            let l = label(chip, "power", n);
            // power*_average is averaged over power*_average_interval (ms): it changes no faster.
            let period = match file_suffix {
                "_average" => read_int::<u64>(&chip.join(format!("power{n}_average_interval")), HINT, "ms").map(Duration::from_millis).unwrap_or(update),
                _ => update,
            };
            push_tested(
                out,
                HwmonPower {
                    zone: format!("{device}/{l}"),
                    scope: channel_scope(name, Quantity::Power, n, &l, rapl_package),
                    input: PowerInput::Direct(Attr::new(chip.join(format!("power{n}{file_suffix}")), HINT, recheck)),
                    shunt_ohms: if name.starts_with("ina") { shunt_ohms(chip, n) } else { 0.0 },
                    update: period,
                },
            );
        }
    }
    if !have_power {
        discover_shunt_pairs(chip, (name, device), (recheck, rapl_package, update), disabled, out);
    }
}

/// Shunt monitors without a power attribute: INA3221 channels 1..3 pair in<n> (bus, mV) with
/// curr<n> (mA); INA2xx pairs in1 (bus) with curr1 (in0 is the shunt voltage). A disabled INA3221
/// channel is listed as a disabled source that says why.
fn discover_shunt_pairs(
    chip: &Path,
    (name, device): (&str, &str),
    (recheck, rapl_package, update): (Duration, bool, Duration),
    disabled: &[u32],
    out: &mut Discovered,
) {
    let pairs: Vec<u32> = if name == "ina3221" {
        (1..=3).collect()
    } else if name.starts_with("ina2") {
        vec![1]
    } else {
        Vec::new()
    };
    for n in pairs {
        let (volts, amps) = (chip.join(format!("in{n}_input")), chip.join(format!("curr{n}_input")));
        if !volts.exists() || !amps.exists() {
            continue;
        }
        let l = read_attr(&chip.join(format!("in{n}_label")), HINT).unwrap_or_else(|_| format!("channel{n}"));
        let scope = channel_scope(name, Quantity::Power, n, &l, rapl_package);
        if disabled.contains(&n) {
            // Listed, so the inventory says why this rail has no points, but not usable.
            out.unusable_power.push(v1::PowerSource {
                source: "hwmon".into(),
                zone: format!("{device}/{l}"),
                scope,
                method: v1::Method::Measured as i32,
                path: amps.display().to_string(),
                enabled: false,
                note: format!(
                    "channel {n} is disabled (in{n}_enable = 0): the driver has no data for it; enable it in the device tree or with `echo 1 > in{n}_enable`"
                ),
                shunt_ohms: shunt_ohms(chip, n),
                ..Default::default()
            });
            continue;
        }
        push_tested(
            out,
            HwmonPower {
                zone: format!("{device}/{l}"),
                scope,
                input: PowerInput::VoltCurrent { volts: Attr::new(volts, HINT, recheck), amps: Attr::new(amps, HINT, recheck) },
                shunt_ohms: shunt_ohms(chip, n),
                update,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_numbers_and_scopes() {
        let files: Vec<String> = ["temp1_input", "temp10_input", "temp2_label", "temp3_input", "power1_average"].iter().map(|s| s.to_string()).collect();
        assert_eq!(channels(&files, "temp", "_input"), vec![1, 3, 10]);
        assert_eq!(channels(&files, "power", "_average"), vec![1]);
        let p = |d: &str, l: &str| channel_scope(d, Quantity::Power, 1, l, false);
        assert_eq!(
            (p("pmbus", "pin"), p("pmbus", "pout2"), p("ina226", "vdd"), p("power_meter", "power1")),
            ("psu_in".into(), "psu_out".into(), "rail".into(), "wall".into())
        );
        // A driver the table does not know: recorded, never summed.
        assert_eq!(p("nct6798", "power1"), "unknown");
        assert_eq!(channel_scope("amd_energy", Quantity::Energy, 9, "Esocket0", false), "package");
        assert_eq!(channel_scope("amd_energy", Quantity::Energy, 9, "Esocket0", true), "package_hwmon");
    }
}
