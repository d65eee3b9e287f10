//! The IO side of a governor sweep: which uFLIP patterns run in every power state
//! ([`SweepPattern`], configured as `drives.sweep_patterns = ["SW:128KiB", …]`) and the uFLIP plan
//! that measures them ([`plan_for`]). The power-state side (order, restore) is
//! `wattflip_drives::plan_sweep`; `governor.rs` ties both together.
//!
//! A pattern is one Granularity run (§4 of docs/uflip-method.md: the baseline at one IO size), so results
//! compare directly with `probe` output. To measure something else per state (e.g. a Pause
//! value), add a variant to [`SweepPattern`] and map it in [`plan_for`].

use std::fmt;
use std::str::FromStr;
use wattflip_uflip::{Baseline, Bench, Plan, PlanOptions};

const KIB: u64 = 1024;

/// One baseline at one IO size, e.g. `SW:128KiB`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SweepPattern {
    pub baseline: Baseline,
    pub io_size: u64,
}

impl SweepPattern {
    /// The default set: sequential write and read at 128 KiB (where power caps bite:
    /// the Intel blog's 2 → 1.25 → 0.6 GB/s), random read and write at 4 KiB (unaffected there).
    pub fn defaults() -> Vec<SweepPattern> {
        vec![
            SweepPattern { baseline: Baseline::SW, io_size: 128 * KIB },
            SweepPattern { baseline: Baseline::SR, io_size: 128 * KIB },
            SweepPattern { baseline: Baseline::RR, io_size: 4 * KIB },
            SweepPattern { baseline: Baseline::RW, io_size: 4 * KIB },
        ]
    }
}

impl fmt::Display for SweepPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}KiB", self.baseline.as_str(), self.io_size / KIB)
    }
}

impl FromStr for SweepPattern {
    type Err = String;

    /// `SW:128KiB`, `rr:4KiB`, `SR:1MiB`; the size must be a multiple of 4 KiB (O_DIRECT alignment).
    fn from_str(s: &str) -> Result<Self, String> {
        let (base, size) = s.split_once(':').ok_or_else(|| format!("`{s}`: write PATTERN:SIZE, e.g. \"SW:128KiB\""))?;
        let baseline = Baseline::parse(&base.trim().to_ascii_uppercase()).ok_or_else(|| format!("`{s}`: pattern `{base}` is not SR, RR, SW or RW"))?;
        let io_size = size.trim().parse::<bytesize::ByteSize>().map_err(|e| format!("`{s}`: size `{size}`: {e}; write e.g. 4KiB or 1MiB"))?.as_u64();
        if io_size == 0 || io_size % (4 * KIB) != 0 || io_size > 64 * 1024 * KIB {
            return Err(format!("`{s}`: size must be a multiple of 4KiB up to 64MiB (O_DIRECT alignment)"));
        }
        Ok(SweepPattern { baseline, io_size })
    }
}

/// The uFLIP plan measuring `patterns` once each on a target of `device_size` bytes, in the
/// configured order. Built from the quick Granularity plan (its small IO counts keep a state's
/// measurement short) restricted to the wanted (baseline, size) pairs.
pub fn plan_for(patterns: &[SweepPattern], device_size: u64, seed: u64) -> Plan {
    let mut o = PlanOptions::quick(device_size);
    o.benches = vec![Bench::Granularity];
    o.seed = seed;
    let mut sizes: Vec<u64> = patterns.iter().map(|p| p.io_size).collect();
    sizes.sort_unstable();
    sizes.dedup();
    o.values.granularity_io_sizes = sizes;
    let full = wattflip_uflip::plan(&o);
    let mut runs = Vec::with_capacity(patterns.len());
    for p in patterns {
        if let Some(r) = full.runs.iter().find(|r| r.pattern == p.baseline.as_str() && r.value == p.io_size as f64) {
            let mut r = r.clone();
            r.index = runs.len();
            runs.push(r);
        }
    }
    Plan { runs, ..full }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_print() {
        let p: SweepPattern = "sw:128KiB".parse().unwrap();
        assert_eq!(p, SweepPattern { baseline: Baseline::SW, io_size: 131_072 });
        assert_eq!(p.to_string(), "SW:128KiB");
        assert_eq!("RR:1MiB".parse::<SweepPattern>().unwrap().io_size, 1_048_576);
        assert!("SW".parse::<SweepPattern>().unwrap_err().contains("PATTERN:SIZE"));
        assert!("XW:4KiB".parse::<SweepPattern>().unwrap_err().contains("not SR, RR, SW or RW"));
        assert!("SW:3KiB".parse::<SweepPattern>().unwrap_err().contains("multiple of 4KiB"));
    }

    #[test]
    fn plan_has_one_run_per_pattern_in_order() {
        let plan = plan_for(&SweepPattern::defaults(), 1 << 30, 7);
        let got: Vec<(String, f64, usize)> = plan.runs.iter().map(|r| (r.pattern.clone(), r.value, r.index)).collect();
        assert_eq!(
            got,
            vec![("SW".to_string(), 131_072.0, 0), ("SR".to_string(), 131_072.0, 1), ("RR".to_string(), 4096.0, 2), ("RW".to_string(), 4096.0, 3),]
        );
        assert_eq!(plan.device_size, 1 << 30);
    }
}
