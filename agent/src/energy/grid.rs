//! Places a slow counter's updates from many reads at once (issue 37): a counter read faster than
//! it updates moves at the read after each update, so each update lies inside the read interval
//! that moved it (±half a read). The sensor's updates come at a steady period on its own clock,
//! which drifts against the host's reads, so the update's offset inside its read interval walks
//! through the read period; mapped onto one update by whole periods, the intervals of its
//! neighbours cut its own down to a fraction of a read (a vernier). Used by
//! [`super::live`] to place each update and by [`super::uncertain`] for the placement's half-range.
//! Another way of placing updates adds a function here returning the same `(instant, half-range)`.

/// Updates on each side of one whose read intervals are mapped onto it: with a clock off by
/// 0.25 % a 10 ms counter's offsets walk 6 ms (more than a 5 ms read) over 2 × 128 updates.
const WINDOW: usize = 128;

/// How far a read's timestamp may lie from the instant the counter was read (ns): a sysfs read
/// takes microseconds, and the recorder stamps it on the monotonic clock just after.
const STAMP_MARGIN_NS: i64 = 100_000;

/// Each move's update: its placed instant and the half-range it is known to (ns). `moves` are
/// the read intervals `(previous read, this read]` of the readings that moved the counter, in
/// order; `update` the nominal period. Consecutive moves are whole updates apart (rounded from
/// the nominal period); the mean period over the recording (its two ends' placements over the
/// updates between: the reads' midpoints, then the finer cut placements; three passes) maps
/// each neighbour's interval onto the update, widened by what that period may be off by over the
/// distance (the two ends' half-ranges over the recording's updates). Where the mapped intervals do not
/// meet (a stuck or restarted counter, a clock that jumped), the update keeps its own interval.
pub fn place_updates(moves: &[(i64, i64)], update: i64) -> Vec<(i64, i64)> {
    if moves.len() < 3 || update <= 0 {
        return moves.iter().map(own).collect();
    }
    let mid = |i: usize| (moves[i].0 + moves[i].1) / 2;
    let mut k = Vec::with_capacity(moves.len());
    k.push(0i64);
    for i in 1..moves.len() {
        let gap = mid(i) - mid(i - 1);
        k.push(k[i - 1] + ((gap as f64 / update as f64).round() as i64).max(1));
    }
    // The mean period from the two ends' placements, each within its half-range of its update:
    // first from the reads' midpoints, then from the cut placements, which are finer.
    let mut placed: Vec<(i64, i64)> = moves.iter().map(own).collect();
    for _ in 0..3 {
        let (first, last) = (placed[0], placed[placed.len() - 1]);
        let updates = (k[k.len() - 1] - k[0]) as f64;
        let period = (last.0 - first.0) as f64 / updates;
        placed = cut(moves, &k, period, (first.1 + last.1) as f64 / updates);
    }
    placed
}

/// A move's own read interval as its placement, widened by the stamp margin.
fn own(&(a, b): &(i64, i64)) -> (i64, i64) {
    ((a + b) / 2, (b - a) / 2 + STAMP_MARGIN_NS)
}

/// Each move's update cut down by its neighbours' intervals, mapped by `period` (ns per update,
/// known to `per_update`). The update's own interval is among them, so the cut lies inside it;
/// where the mapped intervals do not meet, the update keeps its own. A neighbour `j` after `i`
/// maps its start to `a_j − (k_j − k_i)·(period + per_update)`, one before it with
/// `period − per_update` (the slack always widens): each side is a sliding maximum (minimum for
/// the ends) of a term of `j` alone plus one of `i`, so the whole cut is O(n).
fn cut(moves: &[(i64, i64)], k: &[i64], period: f64, per_update: f64) -> Vec<(i64, i64)> {
    let origin = moves[0].0;
    let (fast, slow) = (period + per_update, period - per_update);
    let term = |x: i64, j: usize, p: f64| (x - origin) as f64 - k[j] as f64 * p;
    let starts = |p: f64| moves.iter().enumerate().map(|(j, m)| term(m.0, j, p)).collect::<Vec<f64>>();
    let ends = |p: f64| moves.iter().enumerate().map(|(j, m)| -term(m.1, j, p)).collect::<Vec<f64>>();
    let (lo_after, lo_before) = (window_max(&starts(fast), true), window_max(&starts(slow), false));
    let (hi_after, hi_before) = (window_max(&ends(slow), true), window_max(&ends(fast), false));
    let margin = STAMP_MARGIN_NS as f64;
    (0..moves.len())
        .map(|i| {
            let ki = k[i] as f64;
            let lo = (lo_after[i] + ki * fast).max(lo_before[i] + ki * slow) - margin;
            let hi = (-hi_after[i] + ki * slow).min(-hi_before[i] + ki * fast) + margin;
            if lo < hi {
                (origin + ((lo + hi) / 2.0).round() as i64, ((hi - lo) / 2.0).round() as i64)
            } else {
                own(&moves[i])
            }
        })
        .collect()
}

/// For each `i`, the largest of `v` over the [`WINDOW`] after it (`ahead`) or before it, `i`
/// included (a monotonic queue: each index enters and leaves it once).
fn window_max(v: &[f64], ahead: bool) -> Vec<f64> {
    let n = v.len();
    let mut out = vec![f64::NEG_INFINITY; n];
    let mut queue = std::collections::VecDeque::<usize>::new();
    let order: Box<dyn Iterator<Item = usize>> = if ahead { Box::new((0..n).rev()) } else { Box::new(0..n) };
    for i in order {
        while queue.back().is_some_and(|&j| v[j] <= v[i]) {
            queue.pop_back();
        }
        queue.push_back(i);
        while queue.front().is_some_and(|&j| j.abs_diff(i) > WINDOW) {
            queue.pop_front();
        }
        out[i] = queue.front().map_or(f64::NEG_INFINITY, |&j| v[j]);
    }
    out
}

/// The read intervals of the readings of `t`/`watts`/`interval_ns` that moved a counter (a
/// reading's interval is the time since the reading before it).
pub fn moves_of(t: &[i64], watts: &[f64], interval_ns: &[u64]) -> Vec<(i64, i64)> {
    t.iter()
        .zip(watts)
        .zip(interval_ns)
        .filter(|((_, w), iv)| **w * **iv as f64 > 0.0)
        .map(|((&t, _), &iv)| (t.saturating_sub(i64::try_from(iv).unwrap_or(i64::MAX)), t))
        .collect()
}

/// The half-range (ns) of a uniform with the spread of a recording's update placements (the root
/// mean square of their half-ranges: a placement error is uniform within its own half-range, and
/// the mixture over the updates has that variance), `None` with fewer than 3 moves: the edge term
/// of a counter slower than its reads.
pub fn placement_half_range(moves: &[(i64, i64)], update: i64) -> Option<i64> {
    if moves.len() < 3 {
        return None;
    }
    let placed = place_updates(moves, update);
    let mean_square = placed.iter().map(|(_, h)| (*h as f64).powi(2)).sum::<f64>() / placed.len() as f64;
    Some(mean_square.sqrt().round() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// A sensor updating every `period` ns (its own clock) from `phase`, read every 5 ms late by
    /// 0–100 µs: the true update instants and the read intervals that saw them.
    fn recording(period: f64, phase: f64, seconds: i64, seed: u64) -> (Vec<i64>, Vec<(i64, i64)>) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let reads: Vec<i64> = (1..seconds * 200).map(|k| k * 5_000_000 + rng.random_range(0..100_000)).collect();
        let updates: Vec<i64> =
            (0..).map(|k| (phase + k as f64 * period) as i64).take_while(|u| *u < reads[reads.len() - 1]).filter(|u| *u > reads[0]).collect();
        let moves = reads.windows(2).filter(|w| updates.iter().any(|u| *u > w[0] && *u <= w[1])).map(|w| (w[0], w[1])).collect();
        (updates, moves)
    }

    fn rms(placed: &[(i64, i64)]) -> f64 {
        (placed.iter().map(|(_, h)| (*h as f64).powi(2)).sum::<f64>() / placed.len() as f64).sqrt()
    }

    /// A 10 ms counter whose clock runs 0.3 % slow, read for 6 s: every update lies within its
    /// placement, and the placements are far finer than half a read (2.5 ms and the margin).
    #[test]
    fn a_drifting_sensors_updates_are_placed_finer_than_half_a_read() {
        let (updates, moves) = recording(10_030_000.0, 1_234_567.0, 6, 7);
        assert_eq!(updates.len(), moves.len());
        let placed = place_updates(&moves, 10_000_000);
        for (u, (at, h)) in updates.iter().zip(&placed) {
            assert!((u - at).abs() <= *h, "update at {u} placed at {at} ± {h}");
        }
        let own = rms(&moves.iter().map(own).collect::<Vec<_>>());
        assert!(own > 2_550_000.0, "{own}");
        // 0.30 ms (seed 7) against 2.6 ms.
        assert!(rms(&placed) < 350_000.0, "{} ns", rms(&placed));
        assert_eq!(placement_half_range(&moves, 10_000_000), Some(rms(&placed).round() as i64));
    }

    /// A clock locked to the reads' (the period divides into whole reads, no drift): the offsets
    /// never walk, so the neighbours add little, and the placements still hold every update.
    #[test]
    fn a_locked_phase_gains_little_and_still_covers() {
        let (updates, moves) = recording(10_000_000.0, 1_234_567.0, 4, 9);
        let placed = place_updates(&moves, 10_000_000);
        for (u, (at, h)) in updates.iter().zip(&placed) {
            assert!((u - at).abs() <= *h, "update at {u} placed at {at} ± {h}");
        }
        // 2.58 ms (seed 9) against 2.6 ms.
        assert!(rms(&placed) > 2_500_000.0, "{} ns", rms(&placed));
    }

    /// Fewer than three moves, or no period: each update keeps its own read interval.
    #[test]
    fn too_few_moves_keep_their_own_interval() {
        let moves = [(0, 5_000_000), (10_000_000, 15_000_000)];
        assert_eq!(place_updates(&moves, 10_000_000), vec![(2_500_000, 2_600_000), (12_500_000, 2_600_000)]);
        assert_eq!(placement_half_range(&moves, 10_000_000), None);
        assert_eq!(place_updates(&[(0, 4), (10, 14), (20, 24)], 0).len(), 3);
    }
}
