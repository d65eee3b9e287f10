//! The efficiency preset's phase loop and metrics against a truth generator (issue 42): a drive
//! model with a known power and IO rate per profile, a known ready-idle power and capacity, a
//! meter whose window readings carry Gaussian noise of known σ (so its 95 % interval is known),
//! and optional drift or a decaying warm-up. The generator (`support/efficiency_gen.rs`) shares no
//! code with the agent: its energies are the model's integrals, its truths the model's ratios.

// Integration tests: a panic with a message is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use wattflip_agent::probes::efficiency::metrics::Figure;
use wattflip_agent::probes::efficiency::run::phase_report;
use wattflip_agent::probes::efficiency::stability::{Reason, StabilityConfig};
use wattflip_agent::probes::efficiency::{measure_phase, PhaseBudget, Profile};

#[path = "support/efficiency_gen.rs"]
mod efficiency_gen;

use efficiency_gen::{steady, Drive};

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
