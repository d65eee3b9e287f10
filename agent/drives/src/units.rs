//! Units as types: [`Celsius`] and [`Watts`]. Conversions happen only through the named
//! constructors, so a Kelvin or milli-degree value can never be stored as °C by accident.
//!
//! To add a unit, add a newtype here with `from_*` constructors that say which encoding they take.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A temperature in degrees Celsius, the canonical unit of this crate.
///
/// The same drive reports 323 (nvme-cli, Kelvin), 50 (smartctl, `K − 273`) and 49850 (hwmon,
/// m°C) — hardware.md §8.1. Each constructor names the encoding it accepts.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize, Deserialize)]
pub struct Celsius(pub f64);

impl Celsius {
    /// From NVMe integer Kelvin (SMART composite temperature, sensors, WCTEMP/CCTEMP).
    ///
    /// Computed in hundredths so that 323 K gives exactly `49.85` (the correctly rounded double),
    /// not `323.0 - 273.15 = 49.850000000000023`.
    pub fn from_kelvin(kelvin: u16) -> Self {
        Celsius((i64::from(kelvin) * 100 - 27_315) as f64 / 100.0)
    }

    /// From smartctl's whole degrees (it prints `K − 273`, so 323 K becomes 50).
    pub fn from_whole_celsius(celsius: i64) -> Self {
        Celsius(celsius as f64)
    }

    /// From hwmon milli-degrees (`temp*_input`, `(K − 273.15) × 1000`).
    pub fn from_millicelsius(millicelsius: i64) -> Self {
        Celsius(millicelsius as f64 / 1000.0)
    }

    /// The value in °C.
    pub fn value(self) -> f64 {
        self.0
    }
}

impl fmt::Display for Celsius {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.2} °C", self.0)
    }
}

/// A power in watts.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize, Deserialize)]
pub struct Watts(pub f64);

impl Watts {
    /// `raw / units_per_watt`, e.g. an NVMe MP of 2500 in 0.01 W units is `from_units(2500, 100)`.
    ///
    /// Division by the exact integer keeps results like 25.0 and 0.07 correctly rounded
    /// (multiplying by 0.01 would not).
    pub fn from_units(raw: u64, units_per_watt: u64) -> Self {
        Watts(raw as f64 / units_per_watt as f64)
    }

    /// The value in W.
    pub fn value(self) -> f64 {
        self.0
    }
}

impl fmt::Display for Watts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.4} W", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kelvin_is_exact_in_hundredths() {
        assert_eq!(Celsius::from_kelvin(323), Celsius(49.85));
        assert_eq!(Celsius::from_kelvin(343), Celsius(69.85));
        assert_eq!(Celsius::from_kelvin(0), Celsius(-273.15));
        assert_eq!(Celsius::from_millicelsius(49_850), Celsius(49.85));
        assert_eq!(Celsius::from_whole_celsius(50), Celsius(50.0));
    }

    #[test]
    fn watts_from_units() {
        assert_eq!(Watts::from_units(2500, 100), Watts(25.0));
        assert_eq!(Watts::from_units(700, 10_000), Watts(0.07));
    }
}
