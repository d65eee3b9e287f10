//! Cross-check of one drive seen by several sources (nvme-cli, smartctl, hwmon): the same
//! identity and temperature, or a [`Disagreement`] that names the source and the difference.
//!
//! Pure: the monitor gathers one [`SourceView`] per source in the same cycle and turns each
//! disagreement into an event. Temperatures legitimately differ a little: nvme-cli and hwmon give
//! K − 273.15, smartctl whole degrees K − 273 (docs/sources-and-drives.md §8.1), and the reads are not
//! simultaneous; hence a tolerance. To compare another field, add it to [`SourceView`] and a
//! branch to [`cross_check`].

use crate::nvme_cli::{IdCtrl, SmartLog};
use crate::smartctl::SmartctlReport;
use crate::units::Celsius;
use std::fmt;

/// What one source says about a drive. `None` = this source does not report it.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceView {
    /// `nvme-cli`, `smartctl`, `hwmon`.
    pub source: String,
    /// Model as reported.
    pub model: Option<String>,
    /// Serial as reported.
    pub serial: Option<String>,
    /// Firmware as reported.
    pub firmware: Option<String>,
    /// Composite (or only) temperature.
    pub temperature: Option<Celsius>,
}

impl SourceView {
    /// nvme-cli: identity from id-ctrl, temperature from the SMART log (either may be missing).
    pub fn nvme_cli(id: Option<&IdCtrl>, log: Option<&SmartLog>) -> Self {
        SourceView {
            source: "nvme-cli".into(),
            model: id.map(|i| i.model.clone()),
            serial: id.map(|i| i.serial.clone()),
            firmware: id.map(|i| i.firmware.clone()),
            temperature: log.and_then(|l| l.composite),
        }
    }

    /// smartctl: identity and its best temperature reading.
    pub fn smartctl(r: &SmartctlReport) -> Self {
        SourceView { source: "smartctl".into(), model: r.model.clone(), serial: r.serial.clone(), firmware: r.firmware.clone(), temperature: r.temperature }
    }

    /// hwmon (the kernel's nvme hwmon device): a temperature only.
    pub fn hwmon(temperature: Celsius) -> Self {
        SourceView { source: "hwmon".into(), model: None, serial: None, firmware: None, temperature: Some(temperature) }
    }
}

/// Temperatures within this many °C agree: smartctl's whole-degree K − 273 against K − 273.15 is
/// up to 1.15 °C apart for the same reading, plus drift between two reads a second apart.
pub const DEFAULT_TEMPERATURE_TOLERANCE: f64 = 2.0;

/// One field on which a source disagrees with the reference (the first source that reports it).
#[derive(Debug, Clone, PartialEq)]
pub enum Disagreement {
    /// Model, serial or firmware differ (compared trimmed, runs of spaces collapsed).
    Identity {
        /// `model`, `serial` or `firmware`.
        field: &'static str,
        /// The reference source and its value.
        reference: (String, String),
        /// The disagreeing source and its value.
        other: (String, String),
    },
    /// Temperatures further apart than the tolerance.
    Temperature {
        /// The reference source and its reading.
        reference: (String, Celsius),
        /// The disagreeing source and its reading.
        other: (String, Celsius),
        /// `other − reference`, °C.
        delta: f64,
    },
}

impl fmt::Display for Disagreement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Disagreement::Identity { field, reference, other } => {
                write!(f, "{field}: {} says {:?} but {} says {:?}", other.0, other.1, reference.0, reference.1)
            }
            Disagreement::Temperature { reference, other, delta } => {
                write!(f, "temperature: {} reads {} but {} reads {}: {:+.2} °C apart", other.0, other.1, reference.0, reference.1, delta)
            }
        }
    }
}

/// Reads one identity field of a view.
type Getter = fn(&SourceView) -> Option<&String>;

fn normalised(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Compares every source with the first one (in the order given) that reports each field.
/// Sources that do not report a field are not compared on it. `tolerance` in °C.
pub fn cross_check(views: &[SourceView], tolerance: f64) -> Vec<Disagreement> {
    let mut out = Vec::new();
    let identity: [(&'static str, Getter); 3] = [("model", |v| v.model.as_ref()), ("serial", |v| v.serial.as_ref()), ("firmware", |v| v.firmware.as_ref())];
    for (field, get) in identity {
        let mut reported = views.iter().filter_map(|v| get(v).map(|s| normalised(s)).filter(|s| !s.is_empty()).map(|s| (v.source.clone(), s)));
        let Some(reference) = reported.next() else {
            continue;
        };
        for other in reported {
            if other.1 != reference.1 {
                out.push(Disagreement::Identity { field, reference: reference.clone(), other });
            }
        }
    }
    let mut temps = views.iter().filter_map(|v| v.temperature.map(|t| (v.source.clone(), t)));
    if let Some(reference) = temps.next() {
        for other in temps {
            let delta = other.1.value() - reference.1.value();
            if delta.abs() > tolerance {
                out.push(Disagreement::Temperature { reference: reference.clone(), other, delta });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(source: &str, serial: &str, model: &str, t: Option<f64>) -> SourceView {
        SourceView { source: source.into(), model: Some(model.into()), serial: Some(serial.into()), firmware: None, temperature: t.map(Celsius) }
    }

    #[test]
    fn rounding_between_tools_is_not_a_disagreement() {
        // 323 K: nvme-cli 49.85, smartctl 50 (K − 273), hwmon 49.85.
        let v = [
            view("nvme-cli", "S1", "Samsung SSD 970 EVO Plus 250GB  ", Some(49.85)),
            view("smartctl", "S1", "Samsung SSD 970 EVO Plus 250GB", Some(50.0)),
            view("hwmon", "", "", Some(49.85)),
        ];
        assert_eq!(cross_check(&v, DEFAULT_TEMPERATURE_TOLERANCE), []);
    }

    #[test]
    fn names_the_source_and_the_difference() {
        let mut hw = view("hwmon", "", "", Some(3100.0 - 273.15));
        hw.model = None;
        let v = [view("nvme-cli", "S1", "WDC  WUH721816ALE6L4", Some(36.85)), view("smartctl", "S2", "WDC WUH721816ALE6L4", Some(37.0)), hw];
        let d = cross_check(&v, DEFAULT_TEMPERATURE_TOLERANCE);
        assert_eq!(
            d,
            [
                Disagreement::Identity { field: "serial", reference: ("nvme-cli".into(), "S1".into()), other: ("smartctl".into(), "S2".into()) },
                Disagreement::Temperature {
                    reference: ("nvme-cli".into(), Celsius(36.85)),
                    other: ("hwmon".into(), Celsius(3100.0 - 273.15)),
                    delta: 3100.0 - 273.15 - 36.85,
                },
            ]
        );
        assert_eq!(d[0].to_string(), "serial: smartctl says \"S2\" but nvme-cli says \"S1\"");
        assert_eq!(d[1].to_string(), "temperature: hwmon reads 2826.85 °C but nvme-cli reads 36.85 °C: +2790.00 °C apart");
    }

    #[test]
    fn a_single_source_or_missing_fields_compare_nothing() {
        assert_eq!(cross_check(&[view("smartctl", "S", "M", Some(40.0))], 2.0), []);
        let none = SourceView { source: "hwmon".into(), model: None, serial: None, firmware: None, temperature: None };
        assert_eq!(cross_check(&[none, view("smartctl", "S", "M", Some(40.0))], 2.0), []);
    }
}
