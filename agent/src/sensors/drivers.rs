//! The hwmon driver table: for each driver a fleet meets (its chip `name`), the unit of each
//! attribute family and, for power and energy, the scope of each channel, every row citing the
//! kernel documentation (or the out-of-tree driver's source) it was checked against. The agent
//! reads units and scopes only from here ([`unit`], [`scope`]); docs/schema.md shows the same
//! table. A driver not listed keeps the ABI's units (`Documentation/hwmon/sysfs-interface.rst`:
//! mV, mA, µW, µJ, m°C) and its power gets scope [`UNKNOWN`], which no budget tier sums.
//!
//! To add a driver: read its `Documentation/hwmon/<driver>.rst`, add one row per attribute family
//! (and per label or channel range where they differ) with the file in `doc`, and a fixture test.

/// Scope of a power channel whose driver is not in the table: recorded, shown, never summed.
pub const UNKNOWN: &str = "unknown";

/// What an attribute measures (its file prefix: `in`, `curr`, `power`, `energy`, `temp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantity {
    Voltage,
    Current,
    Power,
    Energy,
    Temperature,
}

/// The unit a driver writes an attribute in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    MilliVolt,
    /// INA3221's shunt-voltage channels `in4`..`in7` (non-standard).
    MicroVolt,
    MilliAmpere,
    MicroWatt,
    MicroJoule,
    MilliCelsius,
}

impl Unit {
    /// The ABI's unit of `q` (`Documentation/hwmon/sysfs-interface.rst`).
    pub const fn standard(q: Quantity) -> Unit {
        match q {
            Quantity::Voltage => Unit::MilliVolt,
            Quantity::Current => Unit::MilliAmpere,
            Quantity::Power => Unit::MicroWatt,
            Quantity::Energy => Unit::MicroJoule,
            Quantity::Temperature => Unit::MilliCelsius,
        }
    }
}

/// Which channel labels a row covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Label {
    Any,
    Prefix(&'static str),
}

/// One row: drivers × quantity × channels × labels → unit and scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    /// hwmon `name` values of the driver (a driver may register several chip names).
    pub drivers: &'static [&'static str],
    pub quantity: Quantity,
    /// Channel numbers covered (inclusive); `(1, u32::MAX)` for all.
    pub channels: (u32, u32),
    pub label: Label,
    pub unit: Unit,
    /// For power and energy: what the channel covers (docs/schema.md, "Scopes"); "" otherwise.
    pub scope: &'static str,
    /// The kernel document (or out-of-tree source) the row was checked against.
    pub doc: &'static str,
}

const ALL: (u32, u32) = (1, u32::MAX);
const INA2XX: &[&str] = &["ina219", "ina220", "ina226", "ina230", "ina231", "ina260"];
const INA238: &[&str] = &["ina228", "ina237", "ina238", "ina700", "ina780", "sq52206"];
/// PMBus power supplies: the generic `pmbus` driver (a PSU instantiated by hand, pmbus.rst) and
/// the PSU drivers of the PMBus family, whose `pin`/`pout` are the supply's input and output.
const PMBUS_PSU: &[&str] = &["pmbus", "acbel-fsg032", "bel-pfe", "crps", "dps920ab", "ibm-cffps", "inspur-ipsps"];

const fn row(
    drivers: &'static [&'static str],
    quantity: Quantity,
    channels: (u32, u32),
    label: Label,
    unit: Unit,
    scope: &'static str,
    doc: &'static str,
) -> Row {
    Row { drivers, quantity, channels, label, unit, scope, doc }
}

use Label::{Any, Prefix};
use Quantity::{Current, Energy, Power, Temperature, Voltage};
use Unit::{MicroJoule, MicroVolt, MicroWatt, MilliAmpere, MilliCelsius, MilliVolt};

/// The table. The first row that matches wins, so a narrow row (a label, a channel range) goes
/// before the broad row of the same driver.
pub const TABLE: &[Row] = &[
    // CPU temperatures only.
    row(&["coretemp"], Temperature, ALL, Any, MilliCelsius, "", "Documentation/hwmon/coretemp.rst"),
    row(&["k10temp"], Temperature, ALL, Any, MilliCelsius, "", "Documentation/hwmon/k10temp.rst"),
    // AMD energy counters: per core (Ecore000…) and per socket (Esocket0…); a socket contains its
    // cores, so only sockets are a host-level scope. RAPL's package zone is the same counter.
    row(&["amd_energy"], Energy, ALL, Prefix("Esocket"), MicroJoule, "package", "Documentation/hwmon/amd_energy.rst"),
    row(&["amd_energy"], Energy, ALL, Prefix("Ecore"), MicroJoule, "core", "Documentation/hwmon/amd_energy.rst"),
    // zenpower (out of tree): SVI2 telemetry of the core and SoC voltage planes, parts of the
    // package (never a host-level figure); power = mA × mV = µW.
    row(&["zenpower"], Power, ALL, Prefix("SVI2_P_Core"), MicroWatt, "core", "github.com/ocerman/zenpower zenpower.c"),
    row(&["zenpower"], Power, ALL, Prefix("SVI2_P_SoC"), MicroWatt, "soc", "github.com/ocerman/zenpower zenpower.c"),
    row(&["zenpower"], Voltage, ALL, Any, MilliVolt, "", "github.com/ocerman/zenpower zenpower.c"),
    row(&["zenpower"], Current, ALL, Any, MilliAmpere, "", "github.com/ocerman/zenpower zenpower.c"),
    row(&["zenpower"], Temperature, ALL, Any, MilliCelsius, "", "github.com/ocerman/zenpower zenpower.c"),
    // Drive temperatures.
    row(&["nvme"], Temperature, ALL, Any, MilliCelsius, "", "drivers/nvme/host/hwmon.c (Documentation/hwmon/sysfs-interface.rst units)"),
    row(&["drivetemp"], Temperature, ALL, Any, MilliCelsius, "", "Documentation/hwmon/drivetemp.rst"),
    // Shunt monitors on one supply rail.
    row(INA2XX, Power, ALL, Any, MicroWatt, "rail", "Documentation/hwmon/ina2xx.rst"),
    row(INA2XX, Voltage, ALL, Any, MilliVolt, "", "Documentation/hwmon/ina2xx.rst"),
    row(INA2XX, Current, ALL, Any, MilliAmpere, "", "Documentation/hwmon/ina2xx.rst"),
    row(INA238, Power, ALL, Any, MicroWatt, "rail", "Documentation/hwmon/ina238.rst"),
    row(INA238, Energy, ALL, Any, MicroJoule, "rail", "Documentation/hwmon/ina238.rst"),
    row(INA238, Voltage, ALL, Any, MilliVolt, "", "Documentation/hwmon/ina238.rst"),
    row(INA238, Current, ALL, Any, MilliAmpere, "", "Documentation/hwmon/ina238.rst"),
    // INA3221: in1..in3 bus voltage (mV), in4..in6 shunt voltage and in7 their sum in µV; no
    // power attribute in most kernels (P = V_bus · I on the host, a rail), power*_input in newer.
    row(&["ina3221"], Voltage, (4, 7), Any, MicroVolt, "", "Documentation/hwmon/ina3221.rst"),
    row(&["ina3221"], Voltage, (1, 3), Any, MilliVolt, "", "Documentation/hwmon/ina3221.rst"),
    row(&["ina3221"], Current, ALL, Any, MilliAmpere, "", "Documentation/hwmon/ina3221.rst"),
    row(&["ina3221"], Power, ALL, Any, MicroWatt, "rail", "Documentation/hwmon/ina3221.rst"),
    // PMBus power supplies: label `pin` is the input (READ_PIN), `poutN` the outputs (READ_POUT).
    row(PMBUS_PSU, Power, ALL, Prefix("pin"), MicroWatt, "psu_in", "Documentation/hwmon/pmbus-core.rst, pmbus.rst"),
    row(PMBUS_PSU, Power, ALL, Prefix("pout"), MicroWatt, "psu_out", "Documentation/hwmon/pmbus-core.rst, pmbus.rst"),
    row(PMBUS_PSU, Voltage, ALL, Any, MilliVolt, "", "Documentation/hwmon/pmbus-core.rst"),
    row(PMBUS_PSU, Current, ALL, Any, MilliAmpere, "", "Documentation/hwmon/pmbus-core.rst"),
    row(PMBUS_PSU, Temperature, ALL, Any, MilliCelsius, "", "Documentation/hwmon/pmbus-core.rst"),
    // ACPI 4.0 power meter: the whole platform, like a BMC's reading.
    row(&["power_meter"], Power, ALL, Any, MicroWatt, "wall", "Documentation/hwmon/acpi_power_meter.rst"),
    // GPUs: their own consumer, inside the host's wall power; never a host-level figure.
    row(&["amdgpu"], Power, ALL, Any, MicroWatt, "gpu", "Documentation/gpu/amdgpu/thermal.rst"),
    row(&["i915", "xe"], Energy, ALL, Any, MicroJoule, "gpu", "Documentation/ABI/testing/sysfs-driver-intel-i915-hwmon"),
];

/// The row for this driver, quantity, channel number and label, if the table has one.
pub fn lookup(driver: &str, quantity: Quantity, channel: u32, label: &str) -> Option<&'static Row> {
    TABLE.iter().find(|r| {
        r.quantity == quantity
            && r.drivers.contains(&driver)
            && (r.channels.0..=r.channels.1).contains(&channel)
            && match r.label {
                Any => true,
                Prefix(p) => label.starts_with(p),
            }
    })
}

/// The unit `driver` writes channel `channel` of `quantity` in: the table's, else the ABI's.
pub fn unit(driver: &str, quantity: Quantity, channel: u32) -> Unit {
    TABLE
        .iter()
        .find(|r| r.quantity == quantity && r.drivers.contains(&driver) && (r.channels.0..=r.channels.1).contains(&channel))
        .map(|r| r.unit)
        .unwrap_or(Unit::standard(quantity))
}

/// The scope of a power or energy channel: the table's, else [`UNKNOWN`] (never summed).
pub fn scope(driver: &str, quantity: Quantity, channel: u32, label: &str) -> &'static str {
    match lookup(driver, quantity, channel, label) {
        Some(r) if !r.scope.is_empty() => r.scope,
        _ => UNKNOWN,
    }
}

/// Accuracy class of a power source (issue 37): the bound of its relative gain error, with the
/// document it comes from. The uncertainty of every energy figure uses it
/// (`docs/energy-method.md` §9); a driver without a row gets [`UNKNOWN_ACCURACY`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AccuracyRow {
    /// hwmon `name` values, or a source name (`rapl`, `ipmi`, `trace`, `nvme_estimate`).
    pub drivers: &'static [&'static str],
    /// Bound of the relative error of power (0.01 = ±1 %).
    pub class: f64,
    /// Where the class comes from: datasheet or kernel document, with what it covers.
    pub doc: &'static str,
}

/// The wide default for a source whose accuracy no document gives: ±10 %.
pub const UNKNOWN_ACCURACY: f64 = 0.10;

/// The accuracy-class column of the driver table: one row per driver family of [`TABLE`] that
/// measures power or energy, and the sources outside hwmon. Shunt monitors: the chip's gain
/// error plus a typical ±1 % shunt resistor (the board's, not the chip's; a better shunt is a
/// config matter).
pub const ACCURACY: &[AccuracyRow] = &[
    AccuracyRow {
        drivers: &["ina219", "ina220"],
        class: 0.015,
        doc: "https://www.ti.com/lit/ds/symlink/ina219.pdf (current error ±0.5 % max, B grade) + 1 % shunt",
    },
    AccuracyRow {
        drivers: &["ina226", "ina230", "ina231", "ina260"],
        class: 0.012,
        doc: "https://www.ti.com/lit/ds/symlink/ina226.pdf (shunt gain error ±0.1 % max, bus ±0.1 %) + 1 % shunt",
    },
    AccuracyRow {
        drivers: &["ina228", "ina237", "ina238", "ina700", "ina780", "sq52206"],
        class: 0.012,
        doc: "https://www.ti.com/lit/ds/symlink/ina238.pdf (gain error ±0.1 % max) + 1 % shunt",
    },
    AccuracyRow { drivers: &["ina3221"], class: 0.015, doc: "https://www.ti.com/lit/ds/symlink/ina3221.pdf (shunt gain error ±0.25 % max) + 1 % shunt" },
    AccuracyRow {
        drivers: &["pmbus", "acbel-fsg032", "bel-pfe", "crps", "dps920ab", "ibm-cffps", "inspur-ipsps"],
        class: 0.05,
        doc: "https://docs.kernel.org/hwmon/pmbus-core.html (READ_PIN accuracy is the supply's; PSU datasheets commonly give ±5 % at low load): ±5 %",
    },
    AccuracyRow {
        drivers: &["power_meter"],
        class: 0.05,
        doc: "https://docs.kernel.org/hwmon/acpi_power_meter.html (power1_accuracy reports the meter's own figure; ±5 % where it is not read)",
    },
    AccuracyRow { drivers: &["amd_energy", "zenpower", "rapl"], class: UNKNOWN_ACCURACY, doc: "https://docs.kernel.org/hwmon/amd_energy.html, https://docs.kernel.org/power/powercap/powercap.html (modelled CPU counters; no accuracy given): wide default" },
    AccuracyRow { drivers: &["amdgpu", "i915", "xe"], class: UNKNOWN_ACCURACY, doc: "https://docs.kernel.org/gpu/amdgpu/thermal.html (no accuracy given): wide default" },
    AccuracyRow { drivers: &["ipmi"], class: UNKNOWN_ACCURACY, doc: "https://www.intel.com/content/dam/www/public/us/en/documents/technical-specifications/dcmi-v1-5-rev-spec.pdf (Get Power Reading gives no accuracy): wide default" },
    AccuracyRow { drivers: &["trace"], class: 0.01, doc: "oscilloscope or data logger on a 1 % shunt (docs/sources-and-drives.md §4's setup): ±1 %" },
    AccuracyRow { drivers: &["nvme_estimate"], class: 0.5, doc: "NVMe Identify Controller PSD max power: a ceiling, not a measurement (https://nvmexpress.org/specifications/): ±50 %" },
];

/// The accuracy class of a source: by its hwmon `driver`, else by its `source` name; with the
/// row's document, or [`UNKNOWN_ACCURACY`] and "unknown".
pub fn accuracy(source: &str, driver: &str) -> (f64, &'static str) {
    ACCURACY
        .iter()
        .find(|r| r.drivers.contains(&driver))
        .or_else(|| ACCURACY.iter().find(|r| r.drivers.contains(&source)))
        .map(|r| (r.class, r.doc))
        .unwrap_or((UNKNOWN_ACCURACY, "unknown: wide default"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row names a source and gives power and energy rows a scope (and no other row one);
    /// a driver's narrow rows come before its broad ones (else they would never match).
    #[test]
    fn rows_are_complete_and_reachable() {
        for (i, r) in TABLE.iter().enumerate() {
            assert!(!r.doc.is_empty(), "row {i}: no source");
            assert_eq!(matches!(r.quantity, Power | Energy), !r.scope.is_empty(), "row {i}: {r:?}");
            for earlier in &TABLE[..i] {
                let shadowed = earlier.quantity == r.quantity
                    && r.drivers.iter().all(|d| earlier.drivers.contains(d))
                    && earlier.label == Any
                    && earlier.channels.0 <= r.channels.0
                    && earlier.channels.1 >= r.channels.1;
                assert!(!shadowed, "row {i} ({r:?}) is shadowed by {earlier:?}");
            }
        }
    }

    /// Every driver of the table that measures power or energy has an accuracy class with a
    /// source, within (0, 1].
    #[test]
    fn every_power_driver_has_an_accuracy_class() {
        for r in TABLE.iter().filter(|r| matches!(r.quantity, Power | Energy)) {
            for d in r.drivers {
                let row = ACCURACY.iter().find(|a| a.drivers.contains(d));
                assert!(row.is_some(), "{d}: no accuracy class");
            }
        }
        for a in ACCURACY {
            assert!(a.class > 0.0 && a.class <= 1.0 && !a.doc.is_empty(), "{a:?}");
        }
        assert_eq!(accuracy("hwmon", "ina226"), (0.012, ACCURACY[1].doc));
        assert_eq!(accuracy("rapl", "rapl").0, UNKNOWN_ACCURACY);
        assert_eq!(accuracy("hwmon", "no-such-chip"), (UNKNOWN_ACCURACY, "unknown: wide default"));
    }
}
