//! The efficiency truth generator (issue 42): a drive model with a known power and IO rate per
//! profile, a meter whose window readings carry Gaussian noise of known σ (so its 95 % interval is
//! known), and optional drift or a decaying warm-up. It shares no code with the agent: its
//! energies are the model's integrals, its truths the model's ratios. Shared through `#[path]` by
//! `efficiency_truth.rs` and `efficiency_states.rs`.

#![allow(dead_code)]

use wattflip_agent::probes::efficiency::{EnergyFigure, PhaseSource, Profile, Window};
use wattflip_energy::Joules;

pub const S: i64 = 1_000_000_000;

/// xorshift64* and Box–Muller: the generator's own noise.
pub struct Rng(pub u64);
impl Rng {
    pub fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        ((self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    pub fn gauss(&mut self) -> f64 {
        let (a, b) = (self.uniform(), self.uniform());
        (-2.0 * a.ln()).sqrt() * (2.0 * std::f64::consts::PI * b).cos()
    }
}

/// One profile of the model drive: P(t) = watts · (1 + drift·t/s + warm·e^(−t/τ)), IOs at `iops`.
#[derive(Clone, Copy)]
pub struct Model {
    pub watts: f64,
    pub iops: u64,
    pub io_bytes: u64,
    /// Relative power change per second.
    pub drift: f64,
    /// Relative excess at the phase's start, decaying with time constant `tau_s`.
    pub warm: f64,
    pub tau_s: f64,
}

impl Model {
    /// ∫ P dt over [a, b] seconds after the phase start (closed form).
    pub fn energy(&self, a: f64, b: f64) -> f64 {
        let base = b - a + self.drift * (b * b - a * a) / 2.0;
        let warm = if self.warm == 0.0 { 0.0 } else { self.warm * self.tau_s * ((-a / self.tau_s).exp() - (-b / self.tau_s).exp()) };
        self.watts * (base + warm)
    }
}

/// The drive and its meter: windows of 1 s, the meter's error per window N(0, σ·E_window).
pub struct Drive {
    pub model: Model,
    pub rng: Rng,
    pub sigma: f64,
    /// The meter states its 95 % interval (as the energy uncertainty model will); false: unknown.
    pub states_u95: bool,
    pub t0: i64,
    pub now: i64,
    /// Per window: [start, end) in ns, true and measured energy.
    pub log: Vec<(i64, i64, f64, f64)>,
}

impl Drive {
    pub fn new(model: Model, seed: u64, sigma: f64) -> Drive {
        Drive::starting_at(model, seed, sigma, 10 * S)
    }
    /// A phase that starts at `t0` (UTC ns): phases run one after another on one clock.
    pub fn starting_at(model: Model, seed: u64, sigma: f64, t0: i64) -> Drive {
        Drive { model, rng: Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1), sigma, states_u95: true, t0, now: t0, log: Vec::new() }
    }
    pub fn sec(&self, ns: i64) -> f64 {
        (ns - self.t0) as f64 / 1e9
    }
}

impl PhaseSource for Drive {
    type Error = std::convert::Infallible;
    fn next_window(&mut self, _: Profile) -> Result<Window, Self::Error> {
        let (a, b) = (self.now, self.now + S);
        self.now = b;
        let truth = self.model.energy(self.sec(a), self.sec(b));
        let measured = truth * (1.0 + self.sigma * self.rng.gauss());
        self.log.push((a, b, truth, measured));
        let ios = self.model.iops;
        Ok(Window { start_ns: a, end_ns: b, ios, bytes: ios * self.model.io_bytes, energy: Some(EnergyFigure { energy: Joules(measured), u95: None }) })
    }
    fn interval_energy(&mut self, from: i64, to: i64) -> Option<EnergyFigure> {
        let ws: Vec<_> = self.log.iter().filter(|w| w.0 >= from && w.1 <= to).collect();
        let measured: f64 = ws.iter().map(|w| w.3).sum();
        // Independent window errors: σ_interval = √Σ(σ·E_i)².
        let sd = ws.iter().map(|w| (self.sigma * w.2).powi(2)).sum::<f64>().sqrt();
        Some(EnergyFigure { energy: Joules(measured), u95: self.states_u95.then_some(Joules(1.96 * sd)) })
    }
}

pub fn steady(watts: f64, iops: u64, io_bytes: u64) -> Model {
    Model { watts, iops, io_bytes, drift: 0.0, warm: 0.0, tau_s: 1.0 }
}
