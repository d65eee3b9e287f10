//! The efficiency preset's phase loop and metrics against a truth generator (issue 42): a drive
//! model with a known power and IO rate per profile, a known ready-idle power and capacity, a
//! meter whose window readings carry Gaussian noise of known σ (so its 95 % interval is known),
//! and optional drift or a decaying warm-up. The generator below shares no code with the agent:
//! its energies are the model's integrals, its truths the model's ratios.

// Integration tests: a panic with a message is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use wattflip_agent::probes::efficiency::metrics::Figure;
use wattflip_agent::probes::efficiency::run::phase_report;
use wattflip_agent::probes::efficiency::stability::{Reason, StabilityConfig};
use wattflip_agent::probes::efficiency::{measure_phase, EnergyFigure, PhaseBudget, PhaseSource, Profile, Window};
use wattflip_energy::Joules;

const S: i64 = 1_000_000_000;

/// xorshift64* and Box–Muller: the generator's own noise.
struct Rng(u64);
impl Rng {
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        ((self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    fn gauss(&mut self) -> f64 {
        let (a, b) = (self.uniform(), self.uniform());
        (-2.0 * a.ln()).sqrt() * (2.0 * std::f64::consts::PI * b).cos()
    }
}

/// One profile of the model drive: P(t) = watts · (1 + drift·t/s + warm·e^(−t/τ)), IOs at `iops`.
#[derive(Clone, Copy)]
struct Model {
    watts: f64,
    iops: u64,
    io_bytes: u64,
    /// Relative power change per second.
    drift: f64,
    /// Relative excess at the phase's start, decaying with time constant `tau_s`.
    warm: f64,
    tau_s: f64,
}

impl Model {
    /// ∫ P dt over [a, b] seconds after the phase start (closed form).
    fn energy(&self, a: f64, b: f64) -> f64 {
        let base = b - a + self.drift * (b * b - a * a) / 2.0;
        let warm = if self.warm == 0.0 { 0.0 } else { self.warm * self.tau_s * ((-a / self.tau_s).exp() - (-b / self.tau_s).exp()) };
        self.watts * (base + warm)
    }
}

/// The drive and its meter: windows of 1 s, the meter's error per window N(0, σ·E_window).
struct Drive {
    model: Model,
    rng: Rng,
    sigma: f64,
    /// The meter states its 95 % interval (as the energy uncertainty model will); false: unknown.
    states_u95: bool,
    t0: i64,
    now: i64,
    /// Per window: [start, end) in ns, true and measured energy.
    log: Vec<(i64, i64, f64, f64)>,
}

impl Drive {
    fn new(model: Model, seed: u64, sigma: f64) -> Drive {
        Drive { model, rng: Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1), sigma, states_u95: true, t0: 10 * S, now: 10 * S, log: Vec::new() }
    }
    fn sec(&self, ns: i64) -> f64 {
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

fn steady(watts: f64, iops: u64, io_bytes: u64) -> Model {
    Model { watts, iops, io_bytes, drift: 0.0, warm: 0.0, tau_s: 1.0 }
}

fn budget() -> PhaseBudget {
    PhaseBudget { window: std::time::Duration::from_secs(1), budget: std::time::Duration::from_secs(60) }
}

/// The median of a sample (for the printed figures).
fn errs_median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Whether `truth` lies in the figure's stated interval.
fn covers(f: &Figure, truth: f64) -> bool {
    (f.value - truth).abs() <= f.u95.unwrap()
}

#[test]
fn steady_profiles_report_their_true_efficiency_within_the_stated_interval() {
    let cfg = StabilityConfig::default();
    let cap = 3_840_000_000_000u64;
    let (mut hits, mut total, mut errs, mut halfs) = (0, 0, Vec::new(), Vec::new());
    for seed in 1..=100u64 {
        // Ready idle 4.8 W on 3.84 TB: 1.25 W/TB, 800 GB/W.
        let mut idle = Drive::new(steady(4.8, 0, 0), seed, 0.004);
        let p = measure_phase(Profile::ReadyIdle, &mut idle, &cfg, &budget()).unwrap();
        let r = phase_report(&p, Some(cap), None);
        assert_eq!((r.verdict, r.windows_run, r.interval_windows), ("stable", 10, 10), "{r:?}");
        let i = r.idle.unwrap();
        let wtb = i.watts_per_tb.unwrap();
        for (f, truth) in [(i.watts, 4.8), (wtb, 1.25), (i.gb_per_watt.unwrap(), 800.0)] {
            hits += usize::from(covers(&f, truth));
            total += 1;
        }
        // Random reads: 9.6 W at 180 000 IOPS → 18 750 IOPS/W; above idle 4.8 W → 26.67 µJ/IO.
        let mut rr = Drive::new(steady(9.6, 180_000, 4096), seed + 1000, 0.004);
        let p = measure_phase(Profile::RandomRead4k, &mut rr, &cfg, &budget()).unwrap();
        let a = phase_report(&p, Some(cap), Some(&i.watts)).active.unwrap();
        for (f, truth) in [(a.iops_per_watt, 18_750.0), (a.joules_per_io, 9.6 / 180_000.0), (a.joules_per_io_above_idle.unwrap(), 4.8 / 180_000.0)] {
            hits += usize::from(covers(&f, truth));
            total += 1;
        }
        errs.push((a.iops_per_watt.value - 18_750.0).abs());
        halfs.push(a.iops_per_watt.u95.unwrap());
        // Sequential writes: 12 W at 3 000 × 128 KiB/s = 375 MiB/s → 31.25 MiB/s/W.
        let mut sw = Drive::new(steady(12.0, 3000, 128 << 10), seed + 2000, 0.004);
        let p = measure_phase(Profile::SeqWrite128k, &mut sw, &cfg, &budget()).unwrap();
        let a = phase_report(&p, Some(cap), None).active.unwrap();
        assert_eq!((a.iops, a.mib_per_s), (3000.0, 375.0));
        hits += usize::from(covers(&a.mib_per_s_per_watt, 31.25));
        total += 1;
    }
    // The stated 95 % intervals cover the truth about 95 % of the time (700 figures)...
    let share = hits as f64 / total as f64;
    eprintln!("coverage {share} over {total} figures; median |error| {} IOPS/W, median u95 {} IOPS/W", errs_median(&errs), errs_median(&halfs));
    assert!((0.92..=0.985).contains(&share), "coverage {share} over {total} figures");
    // ...and are not padded: the median error is about 0.67/1.96 of the half-width.
    errs.sort_by(f64::total_cmp);
    halfs.sort_by(f64::total_cmp);
    let ratio = errs[50] / halfs[50];
    assert!((0.2..=0.5).contains(&ratio), "median error / median u95 = {ratio}");
}

#[test]
fn without_a_stated_uncertainty_the_value_is_the_measured_ratio_and_says_unknown() {
    let mut d = Drive::new(steady(9.6, 180_000, 4096), 7, 0.004);
    d.states_u95 = false;
    let p = measure_phase(Profile::RandomRead4k, &mut d, &StabilityConfig::default(), &budget()).unwrap();
    let a = phase_report(&p, None, None).active.unwrap();
    let measured: f64 = d.log.iter().map(|w| w.3).sum();
    assert_eq!(a.iops_per_watt, Figure { value: 1_800_000.0 / measured, u95: None });
    assert_eq!(a.joules_per_io_above_idle, None);
}

#[test]
fn a_drifting_phase_is_reported_unstable_without_figures() {
    // +0.5 %/s: 4.5 % over a 10-window interval, far beyond the 2 % tolerance, never settling.
    let mut m = steady(9.6, 180_000, 4096);
    m.drift = 0.005;
    let mut d = Drive::new(m, 3, 0.004);
    let p = measure_phase(Profile::RandomWrite4k, &mut d, &StabilityConfig::default(), &budget()).unwrap();
    let r = phase_report(&p, None, None);
    assert_eq!((r.verdict, r.windows_run, r.active.is_none(), p.energy), ("unstable", 60, true, None), "{r:?}");
    assert!(r.assessment.reasons.iter().any(|x| matches!(x, Reason::Trend { .. })), "{:?}", r.assessment.reasons);
    // The last interval tested is windows 50–59 (t = 50…60 s): IOPS/W ∝ 1/(1 + 0.005 t), a change
    // over nine windows of −0.005·9/(1 + 0.005·55) = −3.53 % (noise: σ ≈ 0.4 % on the fit).
    let want = -0.005 * 9.0 / (1.0 + 0.005 * 55.0);
    assert!((r.assessment.trend_change - want).abs() < 0.012, "{} vs {want}", r.assessment.trend_change);
}

#[test]
fn a_warming_phase_is_extended_until_its_trailing_interval_is_stable() {
    // +20 % at the start, decaying with τ = 4 s: the first windows lie outside the band, and the
    // phase runs on until the trailing ten are stable; the figure is then the steady one.
    let mut m = steady(9.6, 180_000, 4096);
    (m.warm, m.tau_s) = (0.2, 4.0);
    let mut d = Drive::new(m, 5, 0.002);
    let p = measure_phase(Profile::RandomRead4k, &mut d, &StabilityConfig::default(), &budget()).unwrap();
    let r = phase_report(&p, None, None);
    assert_eq!(r.verdict, "stable", "{r:?}");
    assert!(r.windows_run > 10 && r.interval_windows == 10, "{r:?}");
    // The interval's true efficiency (model energy over its windows): within the stated interval.
    let (from, to) = (r.interval_start_ns.unwrap(), r.interval_end_ns.unwrap());
    let truth_e: f64 = d.log.iter().filter(|w| w.0 >= from && w.1 <= to).map(|w| w.2).sum();
    let a = r.active.unwrap();
    assert!(covers(&a.iops_per_watt, 1_800_000.0 / truth_e), "{:?} vs {}", a.iops_per_watt, 1_800_000.0 / truth_e);
    // And close to the steady 18 750 IOPS/W: the warm-up left less than the 2 % tolerance.
    assert!((a.iops_per_watt.value / 18_750.0 - 1.0).abs() < 0.02, "{:?}", a.iops_per_watt);
}
