//! A held power value read faster than it updates (PMBus `READ_PIN`, an INA2xx `power1_input`)
//! as the energy counter it amounts to (issue 37, `docs/energy-method.md` §4 "Live runs"): each
//! new value is the mean power over the update that just ended, so the value times the update
//! period is that update's energy, and the changes mark the updates as a slow counter's moves do.
//! The analysis then places every update and values a run's edges like a counter's
//! (`super::grid`, `uncertain::updates_around`) instead of spreading the run over whole updates.
//! Another kind of held value joins by meeting [`as_counter`]'s conditions.

use super::live::ZoneSeries;

/// Fewer changes than this in the whole recording and the value is left as it is: they cannot
/// mark its updates or measure its period.
const MIN_CHANGES: usize = 8;

/// `z` as a counter zone when it holds a value that updates every `update_ns` (more than one and
/// a half reads of `read_ns`) and is neither a counter already nor a moving average
/// (`*_average`, whose value is not one update's own mean); `None` otherwise. Each reading that
/// changed the value moves the counter by the new value over one update, plus the old value over
/// each update the gap since the last change held without a visible change (a value repeated
/// exactly); the other readings move it by 0. The period is measured from the changes over the
/// whole recording (a sensor's own oscillator is off by up to ±0.5 %, `docs/energy-method.md` §9),
/// each gap counted as a whole number of updates.
pub fn as_counter(z: &ZoneSeries, update_ns: u64, read_ns: u64) -> Option<ZoneSeries> {
    let n = z.t.len().min(z.watts.len());
    if z.is_counter() || z.path.ends_with("_average") || update_ns == 0 || (update_ns as f64) <= 1.5 * read_ns as f64 || n < 3 {
        return None;
    }
    let nominal = update_ns as f64;
    let changes = change_points(z, n);
    // Too few changes to mark its updates (a value that never moves, say a fixture's), or most
    // readings change it (the source is not slower than its reads after all): left as it is.
    if changes.len() < MIN_CHANGES || changes.len() * 5 >= n * 4 {
        return None;
    }
    let count = |a: usize, b: usize| ((z.t[b] - z.t[a]) as f64 / nominal).round().max(1.0);
    let updates: f64 = changes.windows(2).map(|w| count(w[0], w[1])).sum();
    // Never shorter than a read: changes bunched together (a burst of noise) must not make a
    // period that fills a long quiet stretch with millions of updates.
    let measured = if updates > 0.0 { (z.t[changes[changes.len() - 1]] - z.t[changes[0]]) as f64 / updates } else { nominal };
    let period = measured.max(read_ns as f64);
    let joules = update_energies(z, &changes, period, count);
    let mut out = ZoneSeries { t: Vec::with_capacity(n - 1), watts: Vec::with_capacity(n - 1), interval_ns: Vec::with_capacity(n - 1), ..z.clone() };
    out.update_ns = period.round() as u64;
    for (w, j) in z.t[..n].windows(2).zip(&joules[1..]) {
        let dt = w[1] - w[0];
        out.t.push(w[1]);
        out.watts.push(if dt > 0 { j / (dt as f64 * 1e-9) } else { 0.0 });
        out.interval_ns.push(u64::try_from(dt).unwrap_or(0));
    }
    Some(out)
}

/// The energy (J) each reading of `z` adds as a counter: a change, its new value over one update
/// (`period`, ns); an update that repeated the value exactly and so changed nothing, the value
/// held over one update, at the first reading at or after the instant it is due (spread evenly
/// between the two changes around it, `count` of them apart; before the first change and after
/// the last, whole periods from it). A sensor whose value repeats in a flat idle would otherwise
/// read as a counter that stopped.
fn update_energies(z: &ZoneSeries, changes: &[usize], period: f64, count: impl Fn(usize, usize) -> f64) -> Vec<f64> {
    let n = z.t.len().min(z.watts.len());
    let mut joules = vec![0.0; n];
    let e = |w: f64| w * period * 1e-9;
    let add = |at: f64, w: f64, joules: &mut Vec<f64>| {
        let i = z.t[..n].partition_point(|&t| (t as f64) < at);
        if (1..n).contains(&i) {
            joules[i] += e(w);
        }
    };
    let Some(&first) = changes.first() else {
        return joules;
    };
    // Before the first change: the value held until then, whole periods back to the first reading
    // (looked up once: a long flat idle before the first change holds many periods).
    let before = z.watts[..first].iter().rev().copied().find(|w| w.is_finite()).unwrap_or(0.0);
    let mut at = z.t[first] as f64 - period;
    while at > z.t[0] as f64 {
        add(at, before, &mut joules);
        at -= period;
    }
    for w in changes.windows(2) {
        let (a, b) = (w[0], w[1]);
        let k = count(a, b);
        let step = (z.t[b] - z.t[a]) as f64 / k;
        for j in 1..k as usize {
            add(z.t[a] as f64 + j as f64 * step, z.watts[a], &mut joules);
        }
    }
    for &c in changes {
        joules[c] += e(z.watts[c]);
    }
    let last = changes[changes.len() - 1];
    let mut at = z.t[last] as f64 + period;
    while at <= z.t[n - 1] as f64 {
        add(at, z.watts[last], &mut joules);
        at += period;
    }
    joules
}

/// The readings (index ≥ 1) whose finite value differs from the last finite one before them.
fn change_points(z: &ZoneSeries, n: usize) -> Vec<usize> {
    let mut last = z.watts.first().copied().filter(|w| w.is_finite());
    let mut out = Vec::new();
    for i in 1..n {
        let w = z.watts[i];
        if !w.is_finite() {
            continue;
        }
        if last.is_some_and(|l| l != w) {
            out.push(i);
        }
        last = Some(w);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 100 ms held value read every 5 ms for 1.2 s, W per update: the value 2 W repeated
    /// exactly at 200 ms (no change shows).
    const LEVELS: [f64; 12] = [1.0, 2.0, 2.0, 2.1, 5.0, 2.0, 3.0, 4.0, 3.0, 2.0, 1.0, 1.5];

    fn held() -> ZoneSeries {
        let mut z = ZoneSeries { path: "/sys/fixture/power1_input".into(), ..Default::default() };
        for k in 0..240 {
            let t = 1 + k * 5_000_000;
            z.t.push(t);
            z.watts.push(LEVELS[(t / 100_000_000) as usize]);
        }
        z
    }

    #[test]
    fn each_change_moves_the_counter_by_its_update_and_a_repeated_value_by_its_own() {
        let z = as_counter(&held(), 100_000_000, 5_000_000).expect("a held value");
        assert!(z.is_counter());
        let moved: Vec<(i64, f64)> =
            z.t.iter().zip(&z.watts).zip(&z.interval_ns).filter(|((_, w), _)| **w > 0.0).map(|((t, w), iv)| (*t, w * *iv as f64 * 1e-9)).collect();
        // Every update moves it, the repeated 2 W at 200 ms too, by its own value over 100 ms.
        assert_eq!(moved.iter().map(|m| m.0).collect::<Vec<_>>(), (1..12).map(|k| 1 + k * 100_000_000).collect::<Vec<_>>());
        let joules: Vec<f64> = moved.iter().map(|m| (m.1 * 1e6).round() / 1e6).collect();
        assert_eq!(joules, LEVELS[1..].iter().map(|w| (w * 1e5).round() / 1e6).collect::<Vec<_>>());
        assert_eq!((z.update_ns, z.t.len()), (100_000_000, 239));
    }

    #[test]
    fn counters_moving_averages_and_values_as_fast_as_their_reads_stay_as_they_are() {
        let z = held();
        assert!(as_counter(&z, 5_000_000, 5_000_000).is_none());
        let flat = ZoneSeries { watts: vec![18.0; z.t.len()], ..z.clone() };
        assert!(as_counter(&flat, 100_000_000, 5_000_000).is_none(), "a value that never moves marks no update");
        let avg = ZoneSeries { path: "/sys/fixture/power1_average".into(), ..z.clone() };
        assert!(as_counter(&avg, 100_000_000, 5_000_000).is_none());
        let counter = ZoneSeries { interval_ns: vec![5_000_000; z.t.len()], ..z };
        assert!(as_counter(&counter, 100_000_000, 5_000_000).is_none());
    }

    /// A failed read (NaN) changes nothing and moves nothing; the value it hid still counts at
    /// the next change. A source declared at 100 ms that updates every 20 ms is counted at the
    /// 20 ms its changes show, so no update's energy is lost or doubled.
    #[test]
    fn failed_reads_and_a_wrong_declared_period_lose_no_energy() {
        let mut z = held();
        for i in [30, 31, 100, 161] {
            z.watts[i] = f64::NAN;
        }
        let c = as_counter(&z, 100_000_000, 5_000_000).expect("a held value");
        let total: f64 = c.watts.iter().zip(&c.interval_ns).map(|(w, iv)| w * *iv as f64 * 1e-9).sum();
        assert!((total - LEVELS[1..].iter().sum::<f64>() / 10.0).abs() < 1e-9, "{total}");
        assert!(c.watts.iter().all(|w| w.is_finite()));

        let mut fast = ZoneSeries { path: "/sys/fixture/power1_input".into(), ..Default::default() };
        for k in 0..400 {
            let t = 1 + k * 5_000_000;
            fast.t.push(t);
            fast.watts.push(2.0 + 0.1 * ((t / 20_000_000) % 3) as f64);
        }
        let c = as_counter(&fast, 100_000_000, 5_000_000).expect("a held value");
        assert_eq!(c.update_ns, 20_000_000);
        let total: f64 = c.watts.iter().zip(&c.interval_ns).map(|(w, iv)| w * *iv as f64 * 1e-9).sum();
        // 99 changes after the first update, each its value over 20 ms.
        let want: f64 = (1..100).map(|k| (2.0 + 0.1 * (k % 3) as f64) * 0.02).sum();
        assert!((total - want).abs() < 1e-9, "{total} J against {want} J");
    }
}
