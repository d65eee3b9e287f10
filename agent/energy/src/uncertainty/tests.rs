//! Hand-computed checks of the uncertainty model: each test spells out its arithmetic.

use super::*;

fn model(reporting: Reporting, update_ms: u64) -> SourceModel {
    SourceModel {
        reporting,
        update: Nanos(update_ms * 1_000_000),
        read: Nanos(5_000_000),
        jitter: Nanos(0),
        resolution_j: Joules(0.0),
        resolution_w: Watts(0.0),
        noise: Watts(0.0),
        accuracy: 0.0,
        align: Nanos(0),
        placement: Nanos(0),
        held: false,
    }
}

fn run(d_ms: u64, mean: f64, baseline: f64) -> RunFigures {
    let d = d_ms as f64 / 1e3;
    RunFigures {
        duration: Nanos(d_ms * 1_000_000),
        energy: Joules(mean * d),
        above_idle: Joules((mean - baseline) * d),
        background: Joules(0.0),
        background_duration: Nanos(0),
        mean: Watts(mean),
        baseline: Watts(baseline),
        peak: Watts(mean),
        tail_cut: false,
        split_start: false,
        split_end: false,
        start_updates: None,
        end_updates: None,
        visible_above: Joules((mean - baseline) * d),
    }
}

/// Two uniforms of half-ranges `a1`, `a2` exactly (a trapezoid), a third, `a3`, in quadrature:
/// the 95 % half-width the by-hand checks below spell out.
fn two_exactly_one_in_quadrature(a1: f64, a2: f64, a3: f64) -> f64 {
    1.96 * (((a1 + a2 - (0.2 * a1 * a2).sqrt()) / 1.96).powi(2) + a3 * a3 / 3.0).sqrt()
}

/// The 95 % quantiles by hand: one uniform ±a: 0.95·a; two equal (a triangle on ±2a): the
/// tails beyond q hold (2a − q)²/(4a²) = 5 %, q = (2 − √0.2)·a; a normal: 1.96·σ.
#[test]
fn expand_by_hand() {
    assert!((expand(&[1.0], 0.0) - 0.95).abs() < 1e-12);
    assert!((expand(&[1.0, 1.0], 0.0) - (2.0 - 0.2f64.sqrt())).abs() < 1e-12);
    assert!((expand(&[], 4.0) - 3.92).abs() < 1e-12);
}

/// By hand: a 100 ms sample-and-hold source read every 10 ms, a 3 W step over a 2 W idle.
/// A 1 s run: X = 3 J, U/(2D) = 0.05 of it moved out: 0.15 J; each edge's read, half a read
/// (5 ms) · 3 W = 15 mJ: q = 0.165 − √(0.2·0.15·0.015) J with the second 15 mJ in quadrature.
/// A 20 ms run (its update shows 2 + 3·0.02/0.1 = 2.6 W, it and its surroundings 60 mJ above
/// idle): 1 − D/(2U) = 0.9 of 60 mJ out, 54 mJ; the same 15 mJ edges.
#[test]
fn sample_and_hold_spreading_by_hand() {
    let idle = IdleU { u95: Watts(0.0), statistical: Watts(0.0) };
    let mut m = model(Reporting::SampleHold, 100);
    m.read = Nanos(10_000_000);
    let by_hand = |loss: f64, edge: f64| {
        let q = loss + edge - (0.2 * loss * edge).sqrt();
        1.96 * ((q / 1.96).powi(2) + edge * edge / 3.0).sqrt()
    };
    let u = m.run(&run(1000, 5.0, 2.0), &idle);
    let want = by_hand(0.15, 0.015);
    assert!((u.energy.0 - want).abs() < 1e-12, "{} vs {want}", u.energy.0);
    let short = RunFigures { peak: Watts(2.6), visible_above: Joules(0.06), ..run(20, 5.0, 2.0) };
    let u = m.run(&short, &idle);
    let want = by_hand(0.054, 0.015);
    assert!((u.energy.0 - want).abs() < 1e-12, "{} vs {want}", u.energy.0);
}

/// By hand: a 20 ms run over a 2 W baseline on a source held for 100 ms shows 60 mJ above
/// the baseline over 225 ms around it. Its energy is 2 W · 20 ms + 30 mJ = 70 mJ, its energy
/// above idle 30 mJ, each ± 30 mJ plus the rest: with a 5 % class, 70 mJ · 0.05 / 0.95 =
/// 3.684 mJ of gain (alone: 0.95 of it) and the baseline's 10 mW over 225 ms (2.25 mJ, in
/// quadrature): 30 + 1.96 · √((3.5/1.96)² + 2.25²) = 35.630 mJ. A negative sum is none above.
#[test]
fn a_run_shorter_than_the_update_takes_the_middle_of_what_is_shown() {
    let idle = IdleU { u95: Watts(0.0), statistical: Watts(0.01) };
    let m = SourceModel { accuracy: 0.05, ..model(Reporting::SampleHold, 100) };
    let b = m.bounded(0.02, Watts(2.0), Joules(0.06), 0.225, &idle);
    assert!((b.energy.0 - 0.07).abs() < 1e-12, "{}", b.energy.0);
    assert!((b.above_idle.0 - 0.03).abs() < 1e-12, "{}", b.above_idle.0);
    let gain: f64 = 0.95 * 0.07 * 0.05 / 0.95;
    let want = 0.03 + 1.96 * ((gain / 1.96).powi(2) + 0.00225f64.powi(2)).sqrt();
    assert!((b.u95.energy.0 - want).abs() < 1e-12, "{} vs {want}", b.u95.energy.0);
    assert!((want - 0.035630).abs() < 1e-6, "{want}");
    let none = m.bounded(0.02, Watts(2.0), Joules(-0.001), 0.225, &idle);
    assert_eq!((none.energy.0, none.above_idle.0), (0.04, 0.0));
}

/// By hand: a counter updating every 100 ms read every 5 ms (each update placed within half
/// a read, h = 2.5 ms), a 1 s run at 5 W over 2 W. Edges valued at the baseline with idle
/// updates beyond them, the updates holding them 20 ms outside the run (4.4 W: 20 ms at 2 W,
/// 80 at 5): the outer idle updates' level over those 20 ms (nothing) or the holding update's
/// 2.4 W over the baseline over h of them (6 mJ, uniform, at each edge), and each edge's own
/// placement moves its far part at the baseline: 2 W · h · √2 = 7.071 mJ (the two independent
/// uniforms as one of their variance). q = 7.071 + 6 − √(0.2 · 7.071 · 6) mJ, the other 6 mJ in
/// quadrature. A
/// start shared in proportion, half of its update on each side, between updates at 2 and 5 W
/// (their mean 3.5 W, no burst): (3 W seen + 1.5 W unseen, half the run's range) · 50 · 50 /
/// 100 ms = 112.5 mJ and the placement (3.5 W there, 2 W at the valued end, over h: 2.5 ms ·
/// √(3.5² + 2²) W = 10.078 mJ): q = 122.578 − √(0.2 · 112.5 · 10.078) mJ, with the valued end's
/// 6 mJ in quadrature. A 20 ms run inside one update that shows 2.6 W keeps 1 − D/(2U) = 0.9 of
/// its 60 mJ as a held mean does (54 mJ), with the placement at the baseline (7.071 mJ) exactly.
/// With another run's IO before the steady run's start, its 20 ms there count at the holding
/// update's 2.4 W (48 mJ): q = 48 + 7.071 − √(0.2 · 48 · 7.071) mJ, the 6 mJ in quadrature.
#[test]
fn a_slow_counters_edges_by_hand() {
    let idle = IdleU { u95: Watts(0.0), statistical: Watts(0.0) };
    let m = model(Reporting::Counter, 100);
    let ms = |x: u64| Nanos(x * 1_000_000);
    let starts = Straddle {
        before: Watts(2.0),
        holding: Watts(4.4),
        after: Watts(5.0),
        part_before: ms(20),
        part_after: ms(80),
        far_quiet: true,
        placed_start: Nanos(0),
        placed_end: Nanos(0),
    };
    let ends = Straddle {
        before: Watts(5.0),
        holding: Watts(4.4),
        after: Watts(2.0),
        part_before: ms(80),
        part_after: ms(20),
        far_quiet: true,
        placed_start: Nanos(0),
        placed_end: Nanos(0),
    };
    let steady = RunFigures { start_updates: Some(starts), end_updates: Some(ends), ..run(1000, 5.0, 2.0) };
    // Two uniforms exactly (a trapezoid), a third in quadrature.
    let at_baseline = 0.0025 * 2.0 * 2f64.sqrt();
    let u = m.run(&steady, &idle);
    let q = two_exactly_one_in_quadrature(at_baseline, 0.006, 0.006);
    assert!((u.energy.0 - q).abs() < 1e-12, "{} vs {q}", u.energy.0);
    let half = Straddle {
        before: Watts(2.0),
        holding: Watts(3.5),
        after: Watts(5.0),
        part_before: ms(50),
        part_after: ms(50),
        far_quiet: true,
        placed_start: Nanos(0),
        placed_end: Nanos(0),
    };
    let u = m.run(&RunFigures { split_start: true, start_updates: Some(half), end_updates: Some(ends), ..run(1000, 5.0, 2.0) }, &idle);
    let q = two_exactly_one_in_quadrature(0.1125, 0.0025 * 3.5f64.hypot(2.0), 0.006);
    assert!((u.energy.0 - q).abs() < 1e-12, "{} vs {q}", u.energy.0);
    assert!((0.0025 * 3.5f64.hypot(2.0) - 0.010078).abs() < 1e-6);
    let u = m.run(&RunFigures { peak: Watts(2.6), ..run(20, 5.0, 2.0) }, &idle);
    let q = two_exactly_one_in_quadrature(0.054, at_baseline, 0.0);
    assert!((u.energy.0 - q).abs() < 1e-12, "{} vs {q}", u.energy.0);
    // Both ends of the edges' updates placed within 0.5 ms by their neighbours' reads: the own
    // mean reaches 0.5 ms into each far part (1.2 mJ each) and each edge's placement moves 2 W
    // over 0.5 ms: √2 mJ.
    let placed = |w: Straddle| Straddle { placed_start: Nanos(500_000), placed_end: Nanos(500_000), ..w };
    let u = m.run(&RunFigures { start_updates: Some(placed(starts)), end_updates: Some(placed(ends)), ..steady }, &idle);
    let q = two_exactly_one_in_quadrature(0.001 * 2f64.sqrt(), 0.0012, 0.0012);
    assert!((u.energy.0 - q).abs() < 1e-12, "{} vs {q}", u.energy.0);
    // Boundaries placed within 8 ms only (a stalled read, more than half a read): the own mean
    // reaches 8 ms into each far part (19.2 mJ each), each placement moves 2 W over 8 ms.
    let stalled = |w: Straddle| Straddle { placed_start: Nanos(8_000_000), placed_end: Nanos(8_000_000), ..w };
    let u = m.run(&RunFigures { start_updates: Some(stalled(starts)), end_updates: Some(stalled(ends)), ..steady }, &idle);
    let q = two_exactly_one_in_quadrature(0.016 * 2f64.sqrt(), 0.0192, 0.0192);
    assert!((u.energy.0 - q).abs() < 1e-12, "{} vs {q}", u.energy.0);
    // Another run's IO in the start's far part: the holding update's level over all 20 ms.
    let busy_start = Straddle { far_quiet: false, ..starts };
    let u = m.run(&RunFigures { start_updates: Some(busy_start), ..steady }, &idle);
    let q = two_exactly_one_in_quadrature(0.048, at_baseline, 0.006);
    assert!((u.energy.0 - q).abs() < 1e-12, "{} vs {q}", u.energy.0);
}

/// By hand: a moving average over 1 s read every 10 ms, 3 W over 2 W idle. A 2 s run (longer
/// than W/2): W/4 · 3 W = 0.75 J out, of which the middle, 0.375 J, goes back into its energy
/// ([`SourceModel::smear_shift`]) and 0.375 J stays a term; edges half a read · 3 W = 15 mJ. A
/// 100 ms run, 0.3 J above idle: 1 − D/W = 0.9 of it, 0.27 J, and no shift.
#[test]
fn moving_average_spreading_by_hand() {
    let idle = IdleU { u95: Watts(0.0), statistical: Watts(0.0) };
    let mut m = model(Reporting::MovingAverage, 1000);
    m.read = Nanos(10_000_000);
    // Two uniforms combined exactly (a trapezoid, or 0.95·a1 + a2 when a2 < 0.05·a1), the
    // third in quadrature.
    let by_hand = |loss: f64, edge: f64| {
        let q = if edge >= 0.05 * loss { loss + edge - (0.2 * loss * edge).sqrt() } else { 0.95 * loss + edge };
        1.96 * ((q / 1.96).powi(2) + edge * edge / 3.0).sqrt()
    };
    assert_eq!(m.smear_shift(&run(2000, 5.0, 2.0)), Joules(0.375));
    let u = m.run(&run(2000, 5.0, 2.0), &idle);
    let want = by_hand(0.375, 0.015);
    assert!((u.energy.0 - want).abs() < 1e-12, "{} vs {want}", u.energy.0);
    assert_eq!(m.smear_shift(&run(100, 5.0, 2.0)), Joules(0.0), "not longer than W/2");
    let u = m.run(&RunFigures { peak: Watts(2.3), ..run(100, 5.0, 2.0) }, &idle);
    let want = by_hand(0.27, 0.015);
    assert!((u.energy.0 - want).abs() < 1e-12, "{} vs {want}", u.energy.0);
    // Only a moving average's loss is known whatever its phase: a held value keeps its own.
    assert_eq!(model(Reporting::SampleHold, 1000).smear_shift(&run(2000, 5.0, 2.0)), Joules(0.0));
}

/// By hand: a counter updating every 1 ms read every 5 ms: half-range 0.5 ms at each edge
/// (the read period does not matter to a counter). The start has 2 W before it and 5 W after:
/// √((2² + 5²)/2) W = √14.5 W, 0.5·√14.5 mJ; the end 2 W on both sides: 1 mJ; q = a1 + a2 −
/// √(0.2·a1·a2). A 0.4 % class on 5 J is a bound: half-range 20/0.95 mJ, with the start edge
/// exactly, the 1 mJ end edge in quadrature.
#[test]
fn counter_edges_and_gain_by_hand() {
    let idle = IdleU { u95: Watts(0.0), statistical: Watts(0.0) };
    let mut m = model(Reporting::Counter, 1);
    let u = m.run(&run(1000, 5.0, 2.0), &idle);
    let start = 0.5e-3 * 14.5f64.sqrt();
    assert!((u.energy.0 - (start + 1e-3 - (0.2f64 * start * 1e-3).sqrt())).abs() < 1e-12, "{u:?}");
    m.accuracy = 0.004;
    let u = m.run(&run(1000, 5.0, 2.0), &idle);
    let gain = 0.02 / 0.95;
    let q = gain + start - (0.2f64 * gain * start).sqrt();
    let want = 1.96 * ((q / 1.96).powi(2) + 1e-6 / 3.0).sqrt();
    assert!((u.energy.0 - want).abs() < 1e-12, "{} vs {want}", u.energy.0);
}

/// By hand: the same 1 ms counter read every 5 ms, its 1 s run ending 3 ms before the end of the
/// reading holding its end, the next reading 2.8 W (0.8 W of tail over the 2 W baseline): the far
/// part, valued at the baseline, may hold 0.8 W · 3 ms = 2.4 mJ of the tail, a third uniform
/// beside the start (0.5·√14.5 mJ) and the end (1 mJ): the two largest exactly, the 1 mJ in
/// quadrature. Where the next run cut the tail, or the next reading is at the baseline, there is
/// no such term.
#[test]
fn a_counter_runs_end_inside_a_reading_may_leave_its_tail_beyond_it() {
    let idle = IdleU { u95: Watts(0.0), statistical: Watts(0.0) };
    let m = model(Reporting::Counter, 1);
    let end = |after: f64| Straddle {
        before: Watts(5.0),
        holding: Watts(4.0),
        after: Watts(after),
        part_before: Nanos(2_000_000),
        part_after: Nanos(3_000_000),
        far_quiet: true,
        placed_start: Nanos(0),
        placed_end: Nanos(0),
    };
    let u = m.run(&RunFigures { end_updates: Some(end(2.8)), ..run(1000, 5.0, 2.0) }, &idle);
    let (start, tail) = (0.5e-3 * 14.5f64.sqrt(), 2.4e-3);
    let q = start + tail - (0.2f64 * start * tail).sqrt();
    let want = 1.96 * ((q / 1.96).powi(2) + 1e-6 / 3.0).sqrt();
    assert!((u.energy.0 - want).abs() < 1e-12, "{} vs {want}", u.energy.0);
    let at_baseline = RunFigures { end_updates: Some(end(2.0)), ..run(1000, 5.0, 2.0) };
    assert_eq!(m.run(&at_baseline, &idle), m.run(&run(1000, 5.0, 2.0), &idle), "the next reading at the baseline");
    let cut = RunFigures { tail_cut: true, ..run(1000, 5.0, 2.0) };
    assert_eq!(m.run(&RunFigures { end_updates: Some(end(2.8)), ..cut }, &idle), m.run(&cut, &idle), "the tail cut by the next run");
}

/// By hand: a run measured over its host window on a counter updating every 100 ms (read every
/// 5 ms: h = 2.5 ms), started 30 ms into an update at 3 W (its neighbour before idle at the 2 W
/// baseline, no other run's IO there) and ending with the update after it, beyond which a tail
/// goes on at 2.6 W. The start's far part is valued at the baseline: the outer level adds nothing
/// there, the update's own 1 W above it over h (2.5 mJ) bounds a misplaced boundary; the end has no
/// far part (0) and nothing is shared in proportion inside the update (no term for that); each
/// edge's own placement moves the baseline at the start and the 2.6 W at the end: h · √(2² + 2.6²)
/// W = 8.2006 mJ; the 30 ms valued at a baseline known to 0.05 W add 1.5 mJ (normal).
/// q = 8.2006 + 2.5 − √(0.2 · 8.2006 · 2.5) mJ, with the 1.5 mJ in quadrature. (Taken as a run inside one update shared in proportion,
/// the run's visible 0.1 J above idle would have kept 65 % of it: 65 mJ.) The idle baseline of a
/// 1 s window on the same counter: its window edges within h each, 2 W · h · √(2/3) / 1 s.
#[test]
fn a_run_ending_with_its_update_by_hand() {
    let idle = IdleU { u95: Watts(0.1), statistical: Watts(0.05) };
    let m = model(Reporting::Counter, 100);
    let ms = |x: u64| Nanos(x * 1_000_000);
    let start = Straddle {
        before: Watts(2.0),
        holding: Watts(3.0),
        after: Watts(2.0),
        part_before: ms(30),
        part_after: ms(70),
        far_quiet: true,
        placed_start: Nanos(0),
        placed_end: Nanos(0),
    };
    let end = Straddle {
        before: Watts(2.0),
        holding: Watts(3.0),
        after: Watts(2.6),
        part_before: ms(100),
        part_after: ms(0),
        far_quiet: true,
        placed_start: Nanos(0),
        placed_end: Nanos(0),
    };
    // 0.3 J in the update less 30 ms at 2 W: 0.24 J over 70 ms, 0.1 J above idle.
    let r = RunFigures { start_updates: Some(start), end_updates: Some(end), visible_above: Joules(0.1), peak: Watts(3.0), ..run(70, 0.24 / 0.07, 2.0) };
    let u = m.run(&r, &idle);
    let placement = 0.0025 * 2.0f64.hypot(2.6);
    assert!((placement - 0.0082006).abs() < 1e-7, "{placement}");
    let q12 = placement + 0.0025 - (0.2 * placement * 0.0025).sqrt();
    let q = 1.96 * ((q12 / 1.96).powi(2) + 0.0015f64.powi(2)).sqrt();
    assert!((u.energy.0 - q).abs() < 1e-12, "{} vs {q}", u.energy.0);
    let i = m.idle(Watts(2.0), Nanos(1_000_000_000));
    assert!((i.statistical.0 - 2.0 * 0.0025 * (2.0f64 / 3.0).sqrt()).abs() < 1e-12, "{:?}", i);
}

/// By hand: a whole-watt reading (a BMC's DCMI) read once a second, instantaneous, a 10 s run of
/// 5 W over 3 W, no other term. Undithered (idle noise 0: every idle reading the same step), the
/// run's updates round alike: ±0.5 W · 10 s = ±5 J, and each edge's update by its own level,
/// ±0.5 J twice; the edges' read terms (step 2 W · 0.5 s = 1 J each) join them: the two largest
/// (5 and 1) exactly, the rest in quadrature. Dithered (noise 0.6 W ≥ half a step), the rounding
/// is independent per reading: (1/√12 W)·10 s/√10 = 0.913 J standard, and the noise's own
/// share is none (an instantaneous reading's is in its edges).
#[test]
fn a_whole_watt_reading_its_noise_does_not_dither_rounds_alike_all_along() {
    let idle = IdleU { u95: Watts(0.0), statistical: Watts(0.0) };
    let mut m = model(Reporting::Instantaneous, 1000);
    (m.read, m.resolution_w) = (Nanos(1_000_000_000), Watts(1.0));
    let u = m.run(&run(10_000, 5.0, 3.0), &idle).energy.0;
    let q = 5.0 + 1.0 - (0.2f64 * 5.0).sqrt();
    let by_hand = K95 * ((q / K95).powi(2) + (1.0 + 0.25 + 0.25) / 3.0).sqrt();
    assert!((u - by_hand).abs() < 1e-9, "{u} vs {by_hand}");
    m.noise = Watts(0.6);
    let u = m.run(&run(10_000, 5.0, 3.0), &idle).energy.0;
    // The edges' step gains twice the noise: 2 + 1.2 W over half a second, 1.6 J each.
    let q = 1.6 + 1.6 - (0.2f64 * 1.6 * 1.6).sqrt();
    let by_hand = K95 * ((q / K95).powi(2) + (1.0 / 12f64.sqrt() * 10.0 / 10f64.sqrt()).powi(2)).sqrt();
    assert!((u - by_hand).abs() < 1e-9, "{u} vs {by_hand}");
}

/// By hand: a 100 ms counter read every 5 ms (each edge's boundary known to half a read, 2.5
/// ms), a 1 s run at 5 W over 2 W idle, split in proportion at both ends, each edge's update
/// holding 4 W half on each side (tb·ta/U = 25 ms). Its start comes after a 3 W tail, before the
/// run's 5 W: in proportion the run keeps (3 − 5) W · 25 ms = −50 mJ too little there. Its end
/// comes after its own 3 W tail, before the next run's 5 W: it keeps 50 mJ too much there. Each
/// edge's term is (|n − p| + (5 − 2)/2) · 25 mJ = 87.5 mJ; the seen 50 mJ cancels between them,
/// so each keeps 37.5 mJ. Where the end's step goes the other way (5 W before, 3 W after) the two
/// add up: 100 mJ, half at each edge, and the terms are the 87.5 mJ they were. Both with the
/// placement's √2 · 4 W · 2.5 ms in quadrature.
#[test]
fn a_run_shared_at_both_ends_counts_what_cancels_between_them_once() {
    let idle = IdleU { u95: Watts(0.0), statistical: Watts(0.0) };
    let m = model(Reporting::Counter, 100);
    let ms = |n: u64| Nanos(n * 1_000_000);
    let edge = |before: f64, after: f64| Straddle {
        before: Watts(before),
        holding: Watts(4.0),
        after: Watts(after),
        part_before: ms(50),
        part_after: ms(50),
        far_quiet: true,
        placed_start: Nanos(0),
        placed_end: Nanos(0),
    };
    let shared =
        |end: Straddle| RunFigures { split_start: true, tail_cut: true, start_updates: Some(edge(3.0, 5.0)), end_updates: Some(end), ..run(1000, 5.0, 2.0) };
    let placement = 0.01 * 2f64.sqrt();
    let u = m.run(&shared(edge(3.0, 5.0)), &idle);
    let q = two_exactly_one_in_quadrature(0.0375, 0.0375, placement);
    assert!((u.energy.0 - q).abs() < 1e-12, "{} vs {q}", u.energy.0);
    let u = m.run(&shared(edge(5.0, 3.0)), &idle);
    let q = two_exactly_one_in_quadrature(0.0875, 0.0875, placement);
    assert!((u.energy.0 - q).abs() < 1e-12, "{} vs {q}", u.energy.0);
}
