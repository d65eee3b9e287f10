//! Unit newtypes shared by agent and collector. Conversions happen only through these methods, so a
//! µJ never meets a J by accident. Add a unit as a newtype with explicit constructors from the raw
//! unit its source uses (µW, m°C, ...).

use std::fmt;

/// Power in watts.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct Watts(pub f64);

/// Energy in joules.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct Joules(pub f64);

/// Energy in microjoules as read from counters (RAPL `energy_uj`, hwmon `energy*_input`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct MicroJoules(pub u64);

/// Temperature in degrees Celsius.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct Celsius(pub f64);

/// Electric potential in volts.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct Volts(pub f64);

/// Electric current in amperes.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct Amperes(pub f64);

impl Volts {
    /// hwmon `in*_input` is in millivolts.
    pub fn from_millivolts(mv: i64) -> Self {
        Volts(mv as f64 / 1e3)
    }
}

impl Amperes {
    /// hwmon `curr*_input` is in milliamperes.
    pub fn from_milliamperes(ma: i64) -> Self {
        Amperes(ma as f64 / 1e3)
    }
}

/// A UTC wall-clock instant in integer nanoseconds since the Unix epoch (the wire's timestamp).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct UnixNanos(pub i64);

impl Watts {
    /// hwmon `power*_input` is in microwatts.
    pub fn from_microwatts(uw: i64) -> Self {
        Watts(uw as f64 / 1e6)
    }
}

impl MicroJoules {
    pub fn to_joules(self) -> Joules {
        Joules(self.0 as f64 / 1e6)
    }
}

impl Joules {
    /// Mean power over `interval_ns` nanoseconds; `None` for an empty interval.
    pub fn over_nanos(self, interval_ns: u64) -> Option<Watts> {
        (interval_ns > 0).then(|| Watts(self.0 / (interval_ns as f64 / 1e9)))
    }
}

impl Celsius {
    /// hwmon `temp*_input` is in millidegrees Celsius.
    pub fn from_millidegrees(m: i64) -> Self {
        Celsius(m as f64 / 1000.0)
    }
    /// NVMe reports Kelvin (integer); 0 °C = 273.15 K.
    pub fn from_kelvin(k: f64) -> Self {
        Celsius(k - 273.15)
    }
}

impl fmt::Display for Watts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.3} W", self.0)
    }
}
impl fmt::Display for Joules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.3} J", self.0)
    }
}
impl fmt::Display for Celsius {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.1} °C", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_use_the_source_units() {
        assert_eq!(Watts::from_microwatts(12_500_000), Watts(12.5));
        assert_eq!(MicroJoules(2_500_000).to_joules(), Joules(2.5));
        assert_eq!(Celsius::from_millidegrees(49_850), Celsius(49.85));
        assert_eq!(Joules(3.0).over_nanos(1_500_000_000), Some(Watts(2.0)));
        assert_eq!(Joules(3.0).over_nanos(0), None);
        assert!((Celsius::from_kelvin(323.0).0 - 49.85).abs() < 1e-9);
    }
}
