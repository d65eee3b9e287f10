//! Shunt traces from oscilloscopes and data loggers (`docs/sources-and-drives.md` §4, `docs/uflip-method.md` §11.1): the circuit
//! model, the streaming integrators and the file importers (`csv`, `raw`). To support a new file format,
//! add a module that decodes it into chunks for [`FixedRateIntegrator`] (fixed sample rate) or samples
//! for [`TimedIntegrator`] (explicit timestamps), and re-export its entry point here.

pub mod csv;
mod integrator;
pub mod raw;

pub use integrator::{FixedRateIntegrator, TimedIntegrator};

/// Collects the samples whose times fall in given ranges (sorted or not, may overlap), fed in time
/// order: the second pass of an import, which reads only the samples around run edges.
#[derive(Debug, Clone)]
pub(crate) struct RangeCollector {
    /// (from, to, index into `out`), sorted by `from`.
    ranges: Vec<(i64, i64, usize)>,
    next: usize,
    active: Vec<(i64, usize)>,
    out: Vec<Vec<(UnixNanos, f64)>>,
}

impl RangeCollector {
    pub(crate) fn new(ranges: &[(UnixNanos, UnixNanos)]) -> Self {
        let mut r: Vec<(i64, i64, usize)> = ranges.iter().enumerate().map(|(i, (a, z))| (a.0, z.0, i)).collect();
        r.sort_unstable();
        RangeCollector { ranges: r, next: 0, active: Vec::new(), out: vec![Vec::new(); ranges.len()] }
    }

    #[inline]
    pub(crate) fn push(&mut self, t: UnixNanos, p: Watts) {
        while self.next < self.ranges.len() && self.ranges[self.next].0 <= t.0 {
            let (_, z, i) = self.ranges[self.next];
            self.active.push((z, i));
            self.next += 1;
        }
        if self.active.is_empty() {
            return;
        }
        self.active.retain(|(z, _)| *z > t.0);
        for (_, i) in &self.active {
            self.out[*i].push((t, p.0));
        }
    }

    pub(crate) fn done(&self) -> bool {
        self.next == self.ranges.len() && self.active.is_empty()
    }

    pub(crate) fn finish(self) -> Vec<Vec<(UnixNanos, f64)>> {
        self.out
    }
}

use crate::error::ConfigError;
use crate::units::{Joules, Nanos, Ohms, UnixNanos, Volts, Watts};
use serde::{Deserialize, Serialize};

/// A high-side current shunt: resistance R, supply U and the shunt reading at zero current.
///
/// Power at one sample is the paper's `P = (V/R)·(U − V)` with `V = V_shunt − zero_offset`: the current
/// is V/R and the device sees U − V.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ShuntCircuit {
    shunt: Ohms,
    supply: Volts,
    zero_offset: Volts,
}

impl ShuntCircuit {
    /// `shunt` and `supply` must be finite and > 0.
    pub fn new(shunt: Ohms, supply: Volts) -> Result<Self, ConfigError> {
        if !(shunt.0.is_finite() && shunt.0 > 0.0) {
            return Err(ConfigError::new("shunt_ohms", format!("must be a finite number > 0, got {}", shunt.0)));
        }
        if !(supply.0.is_finite() && supply.0 > 0.0) {
            return Err(ConfigError::new("supply_volts", format!("must be a finite number > 0, got {}", supply.0)));
        }
        Ok(ShuntCircuit { shunt, supply, zero_offset: Volts(0.0) })
    }

    /// Subtract `offset` (the shunt reading with no current, measured before the run) from every sample.
    pub fn with_zero_offset(mut self, offset: Volts) -> Result<Self, ConfigError> {
        if !offset.0.is_finite() {
            return Err(ConfigError::new("offset_volts", "must be finite"));
        }
        self.zero_offset = offset;
        Ok(self)
    }

    pub fn shunt(&self) -> Ohms {
        self.shunt
    }
    pub fn supply(&self) -> Volts {
        self.supply
    }
    pub fn zero_offset(&self) -> Volts {
        self.zero_offset
    }

    /// Instantaneous device power for one shunt reading.
    #[inline]
    pub fn power(&self, v_shunt: Volts) -> Watts {
        let v = v_shunt.0 - self.zero_offset.0;
        Watts(v / self.shunt.0 * (self.supply.0 - v))
    }

    /// Energy of one sample held for `dt`: the paper's `E_t = (V/R)·(U − V)·Δ`.
    pub fn sample_energy(&self, v_shunt: Volts, dt: Nanos) -> Joules {
        self.power(v_shunt).times(dt)
    }
}

/// Sample encoding of a raw binary trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SampleFormat {
    /// IEEE-754 float32, little-endian, volts × scale.
    F32le,
    /// Signed 16-bit integer, little-endian, counts × scale volts.
    I16le,
}

impl SampleFormat {
    pub fn bytes(self) -> usize {
        match self {
            SampleFormat::F32le => 4,
            SampleFormat::I16le => 2,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            SampleFormat::F32le => "f32le",
            SampleFormat::I16le => "i16le",
        }
    }
}

/// One decimation window of a trace.
///
/// Each sample holds its power until the next sample (the last one for one sample period) and all of
/// that energy is booked to the window that contains the sample's timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PowerWindow {
    /// Window start, as an offset from the trace's first sample.
    pub offset: Nanos,
    /// Time covered by the window's samples (the window length except at the end or across gaps).
    pub span: Nanos,
    /// Valid samples in the window.
    pub samples: u64,
    /// Samples that were NaN/∞ (gaps); they carry no energy.
    pub gap_samples: u64,
    /// Time-weighted mean power of the valid samples.
    pub mean: Watts,
    pub min: Watts,
    pub max: Watts,
    pub energy: Joules,
}

/// What the integration of a whole trace yields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceSummary {
    /// UTC time of the first sample, when the file or the caller says it.
    pub start: Option<UnixNanos>,
    pub samples: u64,
    pub gap_samples: u64,
    /// Time covered by all samples (last sample included, held for one period).
    pub duration: Nanos,
    pub energy: Joules,
    pub mean_power: Watts,
    pub min_power: Watts,
    pub max_power: Watts,
    /// The decimation window requested.
    pub window: Nanos,
    /// Windows not yet drained by the caller (all of them unless `drain_windows` was used).
    pub windows: Vec<PowerWindow>,
}

/// Default decimation window: 1 ms, fine enough for the run detector's `w ≈ 1 ms` (`docs/uflip-method.md` §11.3).
pub const DEFAULT_WINDOW: Nanos = Nanos(1_000_000);
