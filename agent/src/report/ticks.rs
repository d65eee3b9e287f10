//! Axis labels and ticks of the HTML report's charts: y values printed to the precision their size
//! needs, and 1-2-5 ticks on a log axis (plotters labels only whole decades). A new axis format is
//! a function here, used by `html`.

/// A y-axis value with as many decimals as its size needs.
pub(crate) fn fmt_y(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else if a >= 0.01 {
        format!("{v:.2}")
    } else {
        format!("{v:.1e}")
    }
}

/// 1-2-5 ticks inside [lo, hi] for a log axis (plotters labels only whole decades).
pub(crate) fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut out = Vec::new();
    if !(lo > 0.0 && hi.is_finite()) {
        return out;
    }
    let mut decade = 10f64.powi(lo.log10().floor() as i32);
    while decade <= hi {
        for m in [1.0, 2.0, 5.0] {
            let t = m * decade;
            if t >= lo && t <= hi {
                out.push(t);
            }
        }
        decade *= 10.0;
    }
    out
}
