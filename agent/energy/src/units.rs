//! Unit newtypes for the energy library: every physical quantity in a public signature is one of these.
//! They mirror `wattflip_proto::units` (same names, same `.0` representation) so a caller converts with
//! `proto::Watts(w.0)`; this crate does not depend on `proto` to stay free of the gRPC build. To add a
//! unit, add a newtype here with `#[serde(transparent)]`, explicit conversion methods and a `Display`.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Power in watts.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Watts(pub f64);

/// Energy in joules.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Joules(pub f64);

/// Electric potential in volts (shunt drop, supply rail).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Volts(pub f64);

/// Resistance in ohms (the current shunt).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Ohms(pub f64);

/// Frequency in hertz (a trace's sample rate).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Hertz(pub f64);

/// A UTC instant in integer nanoseconds since the Unix epoch (same as `wattflip_proto::UnixNanos`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct UnixNanos(pub i64);

/// A non-negative duration, or an offset from a trace's first sample, in nanoseconds.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Nanos(pub u64);

/// Energy per IO (J/IO).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JoulesPerIo(pub f64);

/// Energy per mebibyte transferred (J/MiB, 2^20 bytes), the unit of `ufip.md` §11.4.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JoulesPerMib(pub f64);

/// Energy per megabyte transferred (J/MB, 10^6 bytes), the unit of Seo et al. ("< 1 J/MB").
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JoulesPerMb(pub f64);

impl Watts {
    /// Energy delivered by this power over `d`.
    pub fn times(self, d: Nanos) -> Joules {
        Joules(self.0 * d.as_secs_f64())
    }
}

impl Joules {
    /// Mean power over `d`; `None` for an empty interval.
    pub fn over(self, d: Nanos) -> Option<Watts> {
        (d.0 > 0).then(|| Watts(self.0 / d.as_secs_f64()))
    }
}

impl Hertz {
    /// The sample period in (fractional) nanoseconds.
    pub fn period_ns(self) -> f64 {
        1e9 / self.0
    }
}

impl Nanos {
    pub const ZERO: Nanos = Nanos(0);

    pub fn from_secs_f64(s: f64) -> Nanos {
        // `as` saturates and maps NaN to 0, which is what a duration wants.
        Nanos((s * 1e9).round() as u64)
    }
    pub fn from_millis(ms: u64) -> Nanos {
        Nanos(ms.saturating_mul(1_000_000))
    }
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }
}

impl UnixNanos {
    /// `self + d`, saturating at the end of the i64 range.
    pub fn plus(self, d: Nanos) -> UnixNanos {
        UnixNanos(
            self.0
                .saturating_add(i64::try_from(d.0).unwrap_or(i64::MAX)),
        )
    }
    /// `self - d`, saturating at the start of the i64 range.
    pub fn minus(self, d: Nanos) -> UnixNanos {
        UnixNanos(
            self.0
                .saturating_sub(i64::try_from(d.0).unwrap_or(i64::MAX)),
        )
    }
    /// `self - earlier` as a duration, 0 if `earlier` is later.
    pub fn since(self, earlier: UnixNanos) -> Nanos {
        Nanos(u64::try_from(self.0.saturating_sub(earlier.0)).unwrap_or(0))
    }
}

impl fmt::Display for Watts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.6} W", self.0)
    }
}
impl fmt::Display for Joules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.6} J", self.0)
    }
}
impl fmt::Display for Volts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} V", self.0)
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
impl fmt::Display for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.9} s", self.as_secs_f64())
    }
}
impl fmt::Display for UnixNanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ns", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions() {
        assert_eq!(Watts(2.0).times(Nanos(1_500_000_000)), Joules(3.0));
        assert_eq!(Joules(3.0).over(Nanos(1_500_000_000)), Some(Watts(2.0)));
        assert_eq!(Joules(3.0).over(Nanos::ZERO), None);
        assert_eq!(Nanos::from_secs_f64(0.001), Nanos(1_000_000));
        assert_eq!(Nanos::from_secs_f64(f64::NAN), Nanos(0));
        assert_eq!(UnixNanos(10).since(UnixNanos(4)), Nanos(6));
        assert_eq!(UnixNanos(4).since(UnixNanos(10)), Nanos(0));
        assert_eq!(UnixNanos(i64::MAX - 1).plus(Nanos(10)), UnixNanos(i64::MAX));
        assert_eq!(UnixNanos(5).minus(Nanos(10)), UnixNanos(-5));
        assert_eq!(Hertz(1000.0).period_ns(), 1e6);
    }
}
