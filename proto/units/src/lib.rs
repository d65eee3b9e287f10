//! wattflip's unit newtypes, defined once and shared by the wire crate (`wattflip-proto`), the
//! agent and its libraries (`wattflip-energy`, `wattflip-drives`). Every physical quantity in a
//! public signature is one of these; conversions happen only through the named constructors, so a
//! µJ never meets a J, nor a Kelvin a °C, by accident.
//!
//! To add a unit: a `#[serde(transparent)]` newtype here over the value in its SI unit, `from_*`
//! constructors named after the raw encoding their source uses (µW, m°C, NVMe Kelvin, ...), and a
//! `Display` only if something prints it. Units used by one crate only (e.g. energy's Ω, Hz, J/MiB)
//! stay in that crate.

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

/// Energy in microjoules as read from counters (RAPL `energy_uj`, hwmon `energy*_input`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MicroJoules(pub u64);

/// Temperature in degrees Celsius.
///
/// The same drive reports 323 (nvme-cli, Kelvin), 50 (smartctl, `K − 273`) and 49850 (hwmon,
/// m°C) — docs/sources-and-drives.md §8.1. Each constructor names the encoding it accepts.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Celsius(pub f64);

/// Electric potential in volts (supply rail, shunt drop).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Volts(pub f64);

/// Electric current in amperes.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Amperes(pub f64);

/// A UTC wall-clock instant in integer nanoseconds since the Unix epoch (the wire's timestamp).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct UnixNanos(pub i64);

/// A non-negative duration, or an offset from a trace's first sample, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Nanos(pub u64);

impl Watts {
    /// hwmon `power*_input` is in microwatts.
    pub fn from_microwatts(uw: i64) -> Self {
        Watts(uw as f64 / 1e6)
    }

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

    /// [`Joules::over`] for an interval counted in raw nanoseconds (the samplers' `interval_ns`).
    pub fn over_nanos(self, interval_ns: u64) -> Option<Watts> {
        self.over(Nanos(interval_ns))
    }
}

impl MicroJoules {
    pub fn to_joules(self) -> Joules {
        Joules(self.0 as f64 / 1e6)
    }
}

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

    /// From hwmon millidegrees (`temp*_input`, `(K − 273.15) × 1000`).
    pub fn from_millidegrees(millidegrees: i64) -> Self {
        Celsius(millidegrees as f64 / 1000.0)
    }

    /// The value in °C.
    pub fn value(self) -> f64 {
        self.0
    }
}

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
    /// `t` as nanoseconds since the Unix epoch: negative before it, and saturating at the ends of
    /// the i64 range (the years 1677 and 2262) where a bare `as i64` would wrap to the other end.
    /// The one SystemTime → ns conversion; every wall-clock stamp goes through it.
    pub fn from_system_time(t: std::time::SystemTime) -> UnixNanos {
        match t.duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => UnixNanos(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)),
            Err(before) => UnixNanos(i64::try_from(before.duration().as_nanos()).map(|n| -n).unwrap_or(i64::MIN)),
        }
    }
    /// The wall clock now ([`UnixNanos::from_system_time`]).
    pub fn now() -> UnixNanos {
        Self::from_system_time(std::time::SystemTime::now())
    }
    /// `self + d`, saturating at the end of the i64 range.
    pub fn plus(self, d: Nanos) -> UnixNanos {
        UnixNanos(self.0.saturating_add(i64::try_from(d.0).unwrap_or(i64::MAX)))
    }
    /// `self - d`, saturating at the start of the i64 range.
    pub fn minus(self, d: Nanos) -> UnixNanos {
        UnixNanos(self.0.saturating_sub(i64::try_from(d.0).unwrap_or(i64::MAX)))
    }
    /// `self - earlier` as a duration, 0 if `earlier` is later.
    pub fn since(self, earlier: UnixNanos) -> Nanos {
        Nanos(u64::try_from(self.0.saturating_sub(earlier.0)).unwrap_or(0))
    }
}

/// Microwatt resolution: the finest any source reads (hwmon µW).
impl fmt::Display for Watts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.6} W", self.0)
    }
}

/// Microjoule resolution: the finest counter (RAPL `energy_uj`).
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

impl fmt::Display for UnixNanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ns", self.0)
    }
}

/// Two decimals: NVMe Kelvin converts to exact hundredths (`from_kelvin`).
impl fmt::Display for Celsius {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.2} °C", self.0)
    }
}

impl fmt::Display for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.9} s", self.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_time_to_ns_is_checked_at_both_ends() {
        use std::time::{Duration, UNIX_EPOCH};
        assert_eq!(UnixNanos::from_system_time(UNIX_EPOCH + Duration::new(1_700_000_000, 5)), UnixNanos(1_700_000_000_000_000_005));
        assert_eq!(UnixNanos::from_system_time(UNIX_EPOCH - Duration::from_millis(1500)), UnixNanos(-1_500_000_000));
        // 2^63 ns after the epoch is past i64 (year 2262): a bare `as i64` wraps to -2^63.
        let past_2262 = UNIX_EPOCH + Duration::from_nanos(1 << 63);
        assert_eq!(UnixNanos::from_system_time(past_2262), UnixNanos(i64::MAX));
        assert_eq!(UnixNanos::from_system_time(UNIX_EPOCH - Duration::from_secs(300 * 365 * 86_400)), UnixNanos(i64::MIN));
        // A wall clock of 2024 or later (this test was written in 2026), not a wrapped value.
        assert!(UnixNanos::now().0 > 1_704_067_200_000_000_000);
    }

    #[test]
    fn conversions_use_the_source_units() {
        assert_eq!(Watts::from_microwatts(12_500_000), Watts(12.5));
        assert_eq!(MicroJoules(2_500_000).to_joules(), Joules(2.5));
        assert_eq!(Celsius::from_millidegrees(49_850), Celsius(49.85));
        assert_eq!(Volts::from_millivolts(12_150), Volts(12.15));
        assert_eq!(Amperes::from_milliamperes(1_250), Amperes(1.25));
        assert_eq!(Joules(3.0).over_nanos(1_500_000_000), Some(Watts(2.0)));
        assert_eq!(Joules(3.0).over_nanos(0), None);
    }

    #[test]
    fn kelvin_is_exact_in_hundredths() {
        assert_eq!(Celsius::from_kelvin(323), Celsius(49.85));
        assert_eq!(Celsius::from_kelvin(343), Celsius(69.85));
        assert_eq!(Celsius::from_kelvin(0), Celsius(-273.15));
        assert_eq!(Celsius::from_whole_celsius(50), Celsius(50.0));
    }

    #[test]
    fn watts_from_units() {
        assert_eq!(Watts::from_units(2500, 100), Watts(25.0));
        assert_eq!(Watts::from_units(700, 10_000), Watts(0.07));
    }

    #[test]
    fn durations_and_instants() {
        assert_eq!(Watts(2.0).times(Nanos(1_500_000_000)), Joules(3.0));
        assert_eq!(Joules(3.0).over(Nanos(1_500_000_000)), Some(Watts(2.0)));
        assert_eq!(Joules(3.0).over(Nanos::ZERO), None);
        assert_eq!(Nanos::from_secs_f64(0.001), Nanos(1_000_000));
        assert_eq!(Nanos::from_secs_f64(f64::NAN), Nanos(0));
        assert_eq!(Nanos::from_millis(u64::MAX), Nanos(u64::MAX));
        assert_eq!(UnixNanos(10).since(UnixNanos(4)), Nanos(6));
        assert_eq!(UnixNanos(4).since(UnixNanos(10)), Nanos(0));
        assert_eq!(UnixNanos(i64::MAX - 1).plus(Nanos(10)), UnixNanos(i64::MAX));
        assert_eq!(UnixNanos(5).minus(Nanos(10)), UnixNanos(-5));
        assert_eq!(UnixNanos(i64::MIN + 1).minus(Nanos(u64::MAX)), UnixNanos(i64::MIN));
    }

    #[test]
    fn display() {
        assert_eq!(Celsius::from_kelvin(323).to_string(), "49.85 °C");
        assert_eq!(Nanos(1_500_000_000).to_string(), "1.500000000 s");
        assert_eq!(Watts(2.5).to_string(), "2.500000 W");
        assert_eq!(Joules(3.0).to_string(), "3.000000 J");
        assert_eq!(Volts(12.15).to_string(), "12.15 V");
        assert_eq!(UnixNanos(-7).to_string(), "-7 ns");
    }

    #[test]
    fn serde_is_the_bare_value() {
        assert_eq!(serde_json::to_string(&Watts(2.5)).ok().as_deref(), Some("2.5"));
        assert_eq!(serde_json::to_string(&UnixNanos(-7)).ok().as_deref(), Some("-7"));
        assert_eq!(serde_json::from_str::<Celsius>("49.85").ok(), Some(Celsius(49.85)));
    }
}
