//! The efficiency ratios of a stable measurement interval (`docs/efficiency.md` §4): ready-idle W,
//! W/TB and GB/W; IOPS/W, MiB/s/W, J/IO and J/MiB of an active profile (and J/IO, J/MiB above the
//! ready-idle power). Each is a [`Figure`]: its value and the half-width of its 95 % interval,
//! propagated from the energy figure it derives from (IO counts, bytes, times and capacity are
//! exact; the energy's relative uncertainty carries over to every ratio), `None` while that
//! energy's uncertainty is unknown. A new metric is a field here, filled from the same inputs.

use super::EnergyFigure;
use serde::Serialize;

const MIB: f64 = 1_048_576.0;

/// A value with the half-width of its 95 % interval (`None`: unknown).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Figure {
    pub value: f64,
    pub u95: Option<f64>,
}

impl Figure {
    /// `value` with the relative uncertainty `rel` (`None` stays unknown).
    fn rel(value: f64, rel: Option<f64>) -> Figure {
        Figure { value, u95: rel.map(|r| (value * r).abs()) }
    }

    /// The value as text with its interval (`12.3 ± 0.4`, or `12.3 (± unknown)`).
    pub fn describe(&self, decimals: usize) -> String {
        match self.u95 {
            Some(u) => format!("{:.*} ± {:.*}", decimals, self.value, decimals, u),
            None => format!("{:.*} (± unknown)", decimals, self.value),
        }
    }
}

/// The relative half-width of an energy figure, `None` when unknown or the energy is not positive.
fn relative(e: &EnergyFigure) -> Option<f64> {
    let u = e.u95?;
    (e.energy.0 > 0.0).then(|| u.0 / e.energy.0)
}

/// Ready idle: the mean power, per terabyte of capacity (10^12 bytes) and capacity per watt
/// (GB, 10^9 bytes: Emerald's idle metric).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct IdleMetrics {
    pub watts: Figure,
    /// `None` without a known capacity (a file target without `--capacity`).
    pub watts_per_tb: Option<Figure>,
    pub gb_per_watt: Option<Figure>,
    pub capacity_bytes: Option<u64>,
}

/// The ready-idle metrics of an interval of `secs` seconds with energy `e`.
pub fn idle_metrics(e: &EnergyFigure, secs: f64, capacity_bytes: Option<u64>) -> IdleMetrics {
    let r = relative(e);
    let w = e.energy.0 / secs;
    let cap = capacity_bytes.filter(|&c| c > 0);
    IdleMetrics {
        watts: Figure::rel(w, r),
        watts_per_tb: cap.map(|c| Figure::rel(w / (c as f64 / 1e12), r)),
        // (c/1e9)/W: the same relative uncertainty to first order (r ≪ 1).
        gb_per_watt: cap.map(|c| Figure::rel(c as f64 / 1e9 / w, r)),
        capacity_bytes: cap,
    }
}

/// An active profile's interval: throughput, power and the ratios.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ActiveMetrics {
    pub ios: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub iops: f64,
    pub mib_per_s: f64,
    pub watts: Figure,
    pub iops_per_watt: Figure,
    pub mib_per_s_per_watt: Figure,
    pub joules_per_io: Figure,
    pub joules_per_mib: Figure,
    /// Above the ready-idle power (`E − P_idle·t`): the energy the IO itself costs; `None` without
    /// a stable idle phase.
    pub joules_per_io_above_idle: Option<Figure>,
    pub joules_per_mib_above_idle: Option<Figure>,
}

/// The metrics of an interval of `secs` seconds, `ios` IOs and `bytes` bytes with energy `e`;
/// `idle_w` (the ready-idle power and its u95) gives the above-idle figures.
pub fn active_metrics(e: &EnergyFigure, secs: f64, ios: u64, bytes: u64, idle_w: Option<&Figure>) -> ActiveMetrics {
    let r = relative(e);
    let j = e.energy.0;
    let mib = bytes as f64 / MIB;
    // The above-idle energy's uncertainty: the interval's and the idle power's (× t), taken as
    // independent (different windows of the same source), combined in quadrature.
    let above = idle_w.map(|p| {
        let a = j - p.value * secs;
        let u = match (e.u95, p.u95) {
            (Some(ue), Some(up)) => Some((ue.0 * ue.0 + (up * secs).powi(2)).sqrt()),
            _ => None,
        };
        (a, u)
    });
    let per = |(a, u): (f64, Option<f64>), n: f64| (n > 0.0).then(|| Figure { value: a / n, u95: u.map(|u| u / n) });
    ActiveMetrics {
        ios,
        bytes,
        seconds: secs,
        iops: ios as f64 / secs,
        mib_per_s: mib / secs,
        watts: Figure::rel(j / secs, r),
        iops_per_watt: Figure::rel(ios as f64 / j, r),
        mib_per_s_per_watt: Figure::rel(mib / j, r),
        joules_per_io: Figure::rel(j / ios.max(1) as f64, r),
        joules_per_mib: Figure::rel(if mib > 0.0 { j / mib } else { f64::NAN }, r),
        joules_per_io_above_idle: above.and_then(|a| per(a, ios as f64)),
        joules_per_mib_above_idle: above.and_then(|a| per(a, mib)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wattflip_energy::Joules;

    /// Equal to rounding (the figures are products of a few exact quotients).
    fn close(f: Figure, value: f64, u95: f64) -> bool {
        (f.value - value).abs() <= 1e-12 * value.abs() && f.u95.is_some_and(|u| (u - u95).abs() <= 1e-12 * u95.abs())
    }

    #[test]
    fn ratios_and_their_uncertainty_by_hand() {
        // 10 s at 8 W = 80 J ± 0.8 J (1 %); 20 000 IOs of 4 KiB (78.125 MiB).
        let e = EnergyFigure { energy: Joules(80.0), u95: Some(Joules(0.8)) };
        let idle = Figure { value: 5.0, u95: Some(0.03) };
        let m = active_metrics(&e, 10.0, 20_000, 20_000 * 4096, Some(&idle));
        assert_eq!((m.iops, m.mib_per_s), (2000.0, 7.8125));
        assert!(close(m.watts, 8.0, 0.08), "{:?}", m.watts);
        assert!(close(m.iops_per_watt, 250.0, 2.5), "{:?}", m.iops_per_watt);
        assert!(close(m.joules_per_io, 0.004, 0.00004), "{:?}", m.joules_per_io);
        assert!(close(m.mib_per_s_per_watt, 78.125 / 80.0, 78.125 / 8000.0), "{:?}", m.mib_per_s_per_watt);
        assert!(close(m.joules_per_mib, 80.0 / 78.125, 0.8 / 78.125), "{:?}", m.joules_per_mib);
        // Above idle: 80 − 50 = 30 J, u = √(0.8² + 0.3²) = 0.8544 J, per IO / 20 000.
        assert!(close(m.joules_per_io_above_idle.unwrap(), 30.0 / 20_000.0, 0.73f64.sqrt() / 20_000.0), "{m:?}");
        // Unknown energy uncertainty: every ratio says unknown, the values stand.
        let m = active_metrics(&EnergyFigure { energy: Joules(80.0), u95: None }, 10.0, 20_000, 0, None);
        assert_eq!((m.iops_per_watt.value, m.iops_per_watt.u95, m.joules_per_io_above_idle), (250.0, None, None));
        assert!(m.joules_per_mib.value.is_nan());
    }

    #[test]
    fn idle_per_capacity_by_hand() {
        // 60 s at 4.8 W on 3.84 TB: 1.25 W/TB, 800 GB/W, both ± 0.5 %.
        let e = EnergyFigure { energy: Joules(288.0), u95: Some(Joules(1.44)) };
        let m = idle_metrics(&e, 60.0, Some(3_840_000_000_000));
        assert!(close(m.watts, 4.8, 0.024), "{m:?}");
        assert!(close(m.watts_per_tb.unwrap(), 1.25, 0.00625), "{m:?}");
        assert!(close(m.gb_per_watt.unwrap(), 800.0, 4.0), "{m:?}");
        assert_eq!(idle_metrics(&e, 60.0, None).watts_per_tb, None);
        assert_eq!(Figure { value: 1.0, u95: None }.describe(2), "1.00 (± unknown)");
    }
}
