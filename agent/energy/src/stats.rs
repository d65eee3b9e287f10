//! Robust statistics used by the analyses: median, MAD scaled to a normal σ (1.4826·MAD), and Spearman's
//! rank correlation. Plain functions over `f64` slices (dimensionless here; callers wrap results in unit
//! types). Add a statistic as another pure function with a test against a hand-computed value.

use std::cmp::Ordering;

/// Scale that makes the MAD a consistent estimator of σ for normal data.
pub const MAD_TO_SIGMA: f64 = 1.4826;

fn cmp_f64(a: &f64, b: &f64) -> Ordering {
    a.total_cmp(b)
}

/// Median of `xs` (mean of the two middle values for even length); `None` when empty. Reorders `xs`.
pub fn median_in_place(xs: &mut [f64]) -> Option<f64> {
    let n = xs.len();
    if n == 0 {
        return None;
    }
    let mid = n / 2;
    let (_, hi, _) = xs.select_nth_unstable_by(mid, cmp_f64);
    let hi = *hi;
    if n % 2 == 1 {
        return Some(hi);
    }
    // The lower middle is the maximum of the left part after selection.
    let lo = xs[..mid].iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some((lo + hi) / 2.0)
}

/// Median of `xs` without modifying it.
pub fn median(xs: &[f64]) -> Option<f64> {
    let mut v = xs.to_vec();
    median_in_place(&mut v)
}

/// `(median, 1.4826·MAD)` of `xs`; `None` when empty.
pub fn median_and_sigma(xs: &[f64]) -> Option<(f64, f64)> {
    let mut v = xs.to_vec();
    let m = median_in_place(&mut v)?;
    for x in v.iter_mut() {
        *x = (*x - m).abs();
    }
    let mad = median_in_place(&mut v)?;
    Some((m, MAD_TO_SIGMA * mad))
}

/// Ranks (1-based) with ties given their average rank.
fn ranks(xs: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..xs.len()).collect();
    idx.sort_by(|&a, &b| cmp_f64(&xs[a], &xs[b]));
    let mut r = vec![0.0; xs.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && xs[idx[j + 1]] == xs[idx[i]] {
            j += 1;
        }
        let avg = (i + j) as f64 / 2.0 + 1.0;
        for &k in &idx[i..=j] {
            r[k] = avg;
        }
        i = j + 1;
    }
    r
}

/// Spearman's ρ between `xs` and `ys`; `None` for fewer than 2 pairs, different lengths or a constant
/// series (ρ is undefined then).
pub fn spearman(xs: &[f64], ys: &[f64]) -> Option<f64> {
    if xs.len() != ys.len() || xs.len() < 2 {
        return None;
    }
    let rx = ranks(xs);
    let ry = ranks(ys);
    let n = rx.len() as f64;
    let mx = rx.iter().sum::<f64>() / n;
    let my = ry.iter().sum::<f64>() / n;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in rx.iter().zip(&ry) {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx) * (a - mx);
        syy += (b - my) * (b - my);
    }
    if sxx == 0.0 || syy == 0.0 {
        return None;
    }
    Some(sxy / (sxx * syy).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_odd_even_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn mad_sigma_by_hand() {
        // median 3, |x-3| = 2,1,0,1,7 -> MAD 1
        let (m, s) = median_and_sigma(&[1.0, 2.0, 3.0, 4.0, 10.0]).unwrap_or_default();
        assert_eq!(m, 3.0);
        assert!((s - 1.4826).abs() < 1e-12);
    }

    #[test]
    fn spearman_monotone_ties_constant() {
        assert_eq!(spearman(&[1.0, 2.0, 3.0, 4.0], &[1.0, 4.0, 9.0, 16.0]), Some(1.0));
        assert_eq!(spearman(&[1.0, 2.0, 3.0, 4.0], &[4.0, 3.0, 2.0, 1.0]), Some(-1.0));
        assert_eq!(spearman(&[1.0, 2.0, 3.0], &[5.0, 5.0, 5.0]), None);
        let r = spearman(&[1.0, 2.0, 3.0, 4.0], &[1.0, 1.0, 2.0, 3.0]).unwrap_or_default();
        assert!(r > 0.9 && r < 1.0, "{r}");
    }
}
