//! Unit newtypes for the energy library: every physical quantity in a public signature is one of these.
//! The shared ones (`Watts`, `Joules`, `Volts`, `UnixNanos`, `Nanos`) are `wattflip-units`' (defined
//! once for the workspace, re-exported here); the ones only energy analysis uses (Ω, Hz, J/IO,
//! J/MiB, J/MB) are defined below. To add a unit, add a newtype here with `#[serde(transparent)]`
//! and explicit conversion methods, or in `wattflip-units` if another crate needs it too.

use serde::{Deserialize, Serialize};
use std::fmt;

pub use wattflip_units::{Joules, Nanos, UnixNanos, Volts, Watts};

/// Resistance in ohms (the current shunt).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Ohms(pub f64);

/// Frequency in hertz (a trace's sample rate).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Hertz(pub f64);

/// Energy per IO (J/IO).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JoulesPerIo(pub f64);

/// Energy per mebibyte transferred (J/MiB, 2^20 bytes), the unit of `docs/uflip-method.md` §11.4.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JoulesPerMib(pub f64);

/// Energy per megabyte transferred (J/MB, 10^6 bytes), the unit of Seo et al. ("< 1 J/MB").
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JoulesPerMb(pub f64);

impl Hertz {
    /// The sample period in (fractional) nanoseconds.
    pub fn period_ns(self) -> f64 {
        1e9 / self.0
    }
}

impl fmt::Display for Ohms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} Ω", self.0)
    }
}
impl fmt::Display for Hertz {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} Hz", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions() {
        assert_eq!(Hertz(1000.0).period_ns(), 1e6);
        assert_eq!(Ohms(0.1).to_string(), "0.1 Ω");
    }
}
