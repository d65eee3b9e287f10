//! Truth-trace generator for the energy tests: a probe schedule (runs with first submit, last
//! completion, background tail) is turned into a piecewise-constant power model whose every joule is
//! known, sampled like a scope (each sample is the model's mean over its interval, plus white noise on
//! the shunt voltage), with NaN gaps. The truth (each run's start, end, tail and energy) is computed
//! analytically from the model, never with the code under test. Add a scenario by building a
//! `Schedule`; add a file format by writing `Trace::volts` in it.

#![allow(dead_code)]

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub const MS: i64 = 1_000_000;
pub const S: i64 = 1_000_000_000;

/// One run of the schedule, times in ns from the trace start.
#[derive(Debug, Clone)]
pub struct Run {
    pub first_submit: i64,
    pub last_complete: i64,
    /// Delay from the first submit to the power rise.
    pub latency: i64,
    /// Active power above idle during [first_submit + latency, last_complete), before ripple.
    pub active_w: f64,
    /// Background work after the last completion: [last_complete, last_complete + tail) at this
    /// power above idle.
    pub tail: i64,
    pub tail_w: f64,
    pub experiment: usize,
    pub value: f64,
}

/// How a run's background work after its last completion looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TailShape {
    /// Constant ±5 % in chunks of 2–5 ms.
    Flat,
    /// Decaying exponentially to 13.5 % of `tail_w` at its end.
    Decaying,
    /// Bursts at `tail_w` with short idle gaps.
    Bursty,
}

/// The truth for one run, from the model.
#[derive(Debug, Clone, PartialEq)]
pub struct Truth {
    pub start: i64,
    pub end: i64,
    /// Background work was still going on at the next run's first submit.
    pub cut: bool,
    /// `end − last_complete` (0 if none).
    pub tail: i64,
    /// ∫ P dt over [start, end), gap time excluded.
    pub energy: f64,
}

#[derive(Debug, Clone)]
pub struct Schedule {
    pub idle_w: f64,
    pub runs: Vec<Run>,
    /// Idle recorded before the first run (the probe's idle window) and after the last.
    pub lead: i64,
    pub trail: i64,
}

/// A random schedule: `n` runs of `run_ms`, pauses of `pause_ms`, tails of `tail_ms` (ranges),
/// some tails running into the next run.
pub fn random_schedule(rng: &mut ChaCha8Rng, n: usize, run_ms: (f64, f64), pause_ms: (f64, f64), tail_ms: (f64, f64)) -> Schedule {
    let idle_w = rng.random_range(1.0..4.0);
    let lead = S;
    let mut t = lead;
    let mut runs = Vec::with_capacity(n);
    for i in 0..n {
        let dur = log_uniform(rng, run_ms) * MS as f64;
        let tail = if rng.random_bool(0.3) { 0 } else { (log_uniform(rng, tail_ms) * MS as f64) as i64 };
        runs.push(Run {
            first_submit: t,
            last_complete: t + dur as i64,
            latency: rng.random_range(0..100_000),
            active_w: rng.random_range(0.3..4.0),
            tail,
            tail_w: rng.random_range(0.2..1.5),
            experiment: i % 3,
            value: (i / 3) as f64,
        });
        t += dur as i64 + (log_uniform(rng, pause_ms) * MS as f64) as i64;
    }
    let mut s = Schedule { idle_w, runs, lead, trail: 2 * S };
    s.avoid_ambiguous_tails();
    s
}

/// The model of a device behind a real probe's runs (the imported-trace e2e tests and the real
/// schedule tests share it): idle 2.4 W; 1.5–3 W above it during each run (from 30 µs after its
/// first submit); after every write run a tail at 0.8 W, 4 ms after RW (inside a 10 ms pause) and
/// 40 ms after SW (longer than a 10 ms pause: cut by the next run). `runs`: (first submit, last
/// completion, pattern) in ns from the trace start, which has 1 s of idle before the first run.
pub fn probe_schedule(runs: &[(i64, i64, &str)]) -> Schedule {
    let runs = runs
        .iter()
        .enumerate()
        .map(|(i, (s, e, pat))| Run {
            first_submit: *s,
            last_complete: *e,
            latency: 30_000,
            active_w: 1.5 + 0.5 * (i % 4) as f64,
            tail: match *pat {
                "SW" => 40 * MS,
                "RW" => 4 * MS,
                _ => 0,
            },
            tail_w: 0.8,
            experiment: 0,
            value: 0.0,
        })
        .collect();
    let mut s = Schedule { idle_w: 2.4, runs, lead: S, trail: 2 * S };
    s.avoid_ambiguous_tails();
    s
}

fn log_uniform(rng: &mut ChaCha8Rng, (lo, hi): (f64, f64)) -> f64 {
    if lo >= hi {
        return lo;
    }
    (rng.random_range(lo.ln()..hi.ln())).exp()
}

impl Schedule {
    /// A tail that ends within 0.5 ms of the next run's first submit is neither clearly cut nor
    /// clearly over: move its end 1 ms further into the next run.
    pub fn avoid_ambiguous_tails(&mut self) {
        for i in 0..self.runs.len().saturating_sub(1) {
            let next = self.runs[i + 1].first_submit;
            let r = &mut self.runs[i];
            if r.tail > 0 && (r.last_complete + r.tail - next).abs() < MS / 2 {
                r.tail += MS;
            }
        }
    }

    pub fn duration(&self) -> i64 {
        let last = self.runs.iter().map(|r| r.last_complete + r.tail).max().unwrap_or(self.lead);
        last + self.trail
    }

    /// The model with flat tails ([`TailShape::Flat`]).
    pub fn model(&self, seed: u64) -> Model {
        self.model_shaped(seed, TailShape::Flat)
    }

    /// The model: sorted breakpoints and the power from each to the next. Activity ripples by
    /// ±10 % in chunks of 1–3 ms; tails have the given shape (seeded, part of the model).
    pub fn model_shaped(&self, seed: u64, shape: TailShape) -> Model {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
        // Contributions (from, to, watts above idle).
        let mut parts: Vec<(i64, i64, f64)> = Vec::new();
        for r in &self.runs {
            let mut t = r.first_submit + r.latency;
            while t < r.last_complete {
                let z = (t + rng.random_range(MS..3 * MS)).min(r.last_complete);
                parts.push((t, z, r.active_w * rng.random_range(0.9..1.1)));
                t = z;
            }
            let mut t = r.last_complete;
            let end = r.last_complete + r.tail;
            while t < end {
                let (z, w) = match shape {
                    TailShape::Flat => ((t + rng.random_range(2 * MS..5 * MS)).min(end), r.tail_w * rng.random_range(0.95..1.05)),
                    // e^(−2·x) over the tail in 0.2 ms steps: from tail_w down to 13.5 % of it.
                    TailShape::Decaying => {
                        let z = (t + MS / 5).min(end);
                        (z, r.tail_w * (-2.0 * (t - r.last_complete) as f64 / r.tail.max(1) as f64).exp())
                    }
                    // Bursts of 0.5–2 ms at tail_w with idle gaps of 0.2–1 ms between them; the
                    // last burst ends the tail.
                    TailShape::Bursty => {
                        let z = (t + rng.random_range(MS / 2..2 * MS)).min(end);
                        parts.push((t, z, r.tail_w));
                        let gap = rng.random_range(MS / 5..MS);
                        t = if z + gap + MS / 2 < end { z + gap } else { z };
                        continue;
                    }
                };
                parts.push((t, z, w));
                t = z;
            }
        }
        let mut edges: Vec<(i64, f64)> = Vec::new();
        for (a, z, w) in parts {
            edges.push((a, w));
            edges.push((z, -w));
        }
        edges.sort_by_key(|x| x.0);
        let mut at = vec![0i64];
        let mut watts = vec![self.idle_w];
        let mut level = self.idle_w;
        for (t, dw) in edges {
            level += dw;
            if *at.last().unwrap_or(&0) == t {
                if let Some(w) = watts.last_mut() {
                    *w = level;
                }
            } else {
                at.push(t);
                watts.push(level);
            }
        }
        // Cumulative energy (J) at each breakpoint.
        let mut cum = vec![0.0];
        for i in 1..at.len() {
            cum.push(cum[i - 1] + watts[i - 1] * (at[i] - at[i - 1]) as f64 * 1e-9);
        }
        Model { at, watts, cum }
    }

    /// Truth per run from the model (the run's energy is split at a cut, like the method says).
    pub fn truth(&self, model: &Model, gaps: &[(i64, i64)]) -> Vec<Truth> {
        let mut out: Vec<Truth> = Vec::new();
        let mut work_until = i64::MIN; // end of the latest background work so far
        for (i, r) in self.runs.iter().enumerate() {
            let next = self.runs.get(i + 1).map_or(i64::MAX, |x| x.first_submit);
            let prev_cut = out.last().is_some_and(|p| p.cut);
            let start = if prev_cut { r.first_submit } else { r.first_submit + r.latency };
            work_until = work_until.max(r.last_complete + r.tail);
            let cut = work_until > next;
            let end = if cut { next } else { work_until.max(r.last_complete) };
            let mut energy = model.energy(start, end);
            for &(a, z) in gaps {
                energy -= model.energy(a.max(start), z.min(end));
            }
            out.push(Truth { start, end, cut, tail: end - r.last_complete, energy });
        }
        out
    }
}

/// Piecewise-constant power: `watts[i]` from `at[i]` to `at[i + 1]` (the last forever).
pub struct Model {
    at: Vec<i64>,
    watts: Vec<f64>,
    cum: Vec<f64>,
}

impl Model {
    /// ∫ P dt over [0, t), in J.
    pub fn integral(&self, t: i64) -> f64 {
        let i = self.at.partition_point(|x| *x <= t).saturating_sub(1);
        self.cum[i] + self.watts[i] * (t - self.at[i]) as f64 * 1e-9
    }
    pub fn energy(&self, from: i64, to: i64) -> f64 {
        if to <= from {
            return 0.0;
        }
        self.integral(to) - self.integral(from)
    }
}

/// A sampled trace: shunt volts per sample (NaN in gaps) at `rate` Hz from t = 0.
pub struct Trace {
    pub rate: f64,
    pub volts: Vec<f64>,
    /// Gap intervals [from, to) in ns (sample-aligned).
    pub gaps: Vec<(i64, i64)>,
    pub shunt_ohms: f64,
    pub supply_volts: f64,
}

/// Sample the model at `rate`: each sample is the model's mean power over its interval (a scope's
/// anti-alias filter), turned into the shunt voltage of a high-side shunt R on supply U
/// (P = V/R·(U − V), solved for V), plus Gaussian noise of `noise_v` V. `gaps` NaN stretches of up
/// to 2 ms are placed away (≥ 3 ms) from every run edge.
pub fn sample(sched: &Schedule, model: &Model, rate: f64, noise_v: f64, gaps: usize, seed: u64) -> Trace {
    let (r, u) = (0.05, 12.0);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let period = 1e9 / rate;
    let n = (sched.duration() as f64 / period) as usize;
    let mut volts = Vec::with_capacity(n);
    let mut prev = model.integral(0);
    for k in 0..n {
        let t1 = ((k + 1) as f64 * period).round() as i64;
        let t0 = (k as f64 * period).round() as i64;
        let now = model.integral(t1);
        let p = (now - prev) / ((t1 - t0) as f64 * 1e-9);
        prev = now;
        let v = (u - (u * u - 4.0 * r * p).sqrt()) / 2.0;
        // Box–Muller.
        let (a, b): (f64, f64) = (rng.random_range(f64::EPSILON..1.0), rng.random());
        let z = (-2.0 * a.ln()).sqrt() * (2.0 * std::f64::consts::PI * b).cos();
        volts.push(v + noise_v * z);
    }
    let edges: Vec<i64> = sched.runs.iter().flat_map(|r| [r.first_submit, r.first_submit + r.latency, r.last_complete, r.last_complete + r.tail]).collect();
    let mut gap_list = Vec::new();
    let mut tries = 0;
    while gap_list.len() < gaps && tries < 1000 {
        tries += 1;
        let k = rng.random_range(0..n.saturating_sub(400).max(1));
        let len = rng.random_range(1..200usize);
        let (a, z) = ((k as f64 * period).round() as i64, ((k + len) as f64 * period).round() as i64);
        if edges.iter().any(|&e| e > a - 3 * MS && e < z + 3 * MS) || a < sched.lead {
            continue;
        }
        for v in &mut volts[k..k + len] {
            *v = f64::NAN;
        }
        gap_list.push((a, z));
    }
    Trace { rate, volts, gaps: gap_list, shunt_ohms: r, supply_volts: u }
}
