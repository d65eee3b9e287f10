//! What a probe's plan varies and how long its runs are: a profile of value lists and IO counts
//! (`spec` = docs/uflip-method.md §4.3 and §2, `small` for a file, `quick` for the demo) chosen with `--values`
//! or `values = "..."`, and per-parameter overrides from a `[[probes]]` entry applied on top of it.

use wattflip_uflip::{Baseline, Bench, PlanOptions};

/// The value lists, IO counts and pauses a plan starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ValuesProfile {
    /// The spec's proposed lists (§4.3) and counts (§2): 1 044 runs with `all`, for a real drive.
    Spec,
    /// A few points per experiment and smaller counts, so `all` fits a 1 GiB file in minutes.
    #[default]
    Small,
    /// The `small` lists with Granularity at 4, 32, 128 KiB, short runs and one repetition.
    Quick,
}

impl ValuesProfile {
    /// Parses `spec`, `small` or `quick`.
    pub fn parse(s: &str) -> Result<ValuesProfile, String> {
        match s.trim() {
            "spec" => Ok(ValuesProfile::Spec),
            "small" => Ok(ValuesProfile::Small),
            "quick" => Ok(ValuesProfile::Quick),
            other => Err(format!("`{other}` is not a value profile; use spec (docs/uflip-method.md §4.3 lists), small or quick")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ValuesProfile::Spec => "spec",
            ValuesProfile::Small => "small",
            ValuesProfile::Quick => "quick",
        }
    }

    /// The engine's options of this profile for a target of `device_size` bytes.
    pub fn options(self, device_size: u64) -> PlanOptions {
        match self {
            ValuesProfile::Spec => PlanOptions::spec_defaults(device_size),
            ValuesProfile::Small => PlanOptions::small(device_size),
            ValuesProfile::Quick => PlanOptions::quick(device_size),
        }
    }
}

/// Per-parameter overrides of a profile. `None` keeps the profile's list (or, for counts, the
/// profile's or the stored calibration's value); an override wins over both.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanOverrides {
    /// Granularity: IOSize in bytes.
    pub io_sizes: Option<Vec<u64>>,
    /// Alignment: IOShift in bytes.
    pub io_shifts: Option<Vec<u64>>,
    /// Locality: TargetSize in IOs.
    pub target_size_ios: Option<Vec<u64>>,
    /// Partitioning: number of partitions.
    pub partitions: Option<Vec<u64>>,
    /// Order: increments (−1 reverse, 0 in place, k strided).
    pub orders: Option<Vec<i64>>,
    /// Parallelism: parallel degrees.
    pub parallel_degrees: Option<Vec<u32>>,
    /// Mix: signed ratios.
    pub mix_ratios: Option<Vec<i64>>,
    /// Pause: pause after every IO, µs.
    pub pause_io_us: Option<Vec<u64>>,
    /// Bursts: IOs per burst.
    pub burst_io: Option<Vec<u64>>,
    /// IOCount per baseline, `[SR, RR, SW, RW]`.
    pub io_count: [Option<u64>; 4],
    /// IgnoreIO per baseline, `[SR, RR, SW, RW]`.
    pub ignore_io: [Option<u64>; 4],
}

/// The baselines in table order (`BaselineTable` index), with their config keys.
pub const BASELINES: [(Baseline, &str); 4] = [(Baseline::SR, "SR"), (Baseline::RR, "RR"), (Baseline::SW, "SW"), (Baseline::RW, "RW")];

impl PlanOverrides {
    /// Replaces the overridden lists and counts in `o`.
    pub fn apply(&self, o: &mut PlanOptions) {
        let v = &mut o.values;
        set(&mut v.granularity_io_sizes, &self.io_sizes);
        set(&mut v.alignment_shifts, &self.io_shifts);
        set(&mut v.locality_factors, &self.target_size_ios);
        set(&mut v.partitions, &self.partitions);
        set(&mut v.orders, &self.orders);
        set(&mut v.parallel_degrees, &self.parallel_degrees);
        set(&mut v.mix_ratios, &self.mix_ratios);
        set(&mut v.pause_io_us, &self.pause_io_us);
        set(&mut v.burst_io, &self.burst_io);
        for i in 0..4 {
            if let Some(c) = self.io_count[i] {
                o.counts.io_count[i] = c;
            }
            if let Some(g) = self.ignore_io[i] {
                o.counts.ignore_io[i] = g;
            }
        }
    }

    /// The value lists that are overridden, as (config key, the benchmark that varies it).
    pub fn overridden_lists(&self) -> Vec<(&'static str, Bench)> {
        let lists = [
            ("io_sizes", self.io_sizes.is_some(), Bench::Granularity),
            ("io_shifts", self.io_shifts.is_some(), Bench::Alignment),
            ("target_size_ios", self.target_size_ios.is_some(), Bench::Locality),
            ("partitions", self.partitions.is_some(), Bench::Partitioning),
            ("orders", self.orders.is_some(), Bench::Order),
            ("parallel_degrees", self.parallel_degrees.is_some(), Bench::Parallelism),
            ("mix_ratios", self.mix_ratios.is_some(), Bench::Mix),
            ("pause_io_us", self.pause_io_us.is_some(), Bench::Pause),
            ("burst_io", self.burst_io.is_some(), Bench::Bursts),
        ];
        lists.into_iter().filter(|l| l.1).map(|(k, _, b)| (k, b)).collect()
    }
}

fn set<T: Clone>(dst: &mut Vec<T>, src: &Option<Vec<T>>) {
    if let Some(s) = src {
        dst.clone_from(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_parse_and_name_themselves() {
        for p in [ValuesProfile::Spec, ValuesProfile::Small, ValuesProfile::Quick] {
            assert_eq!(ValuesProfile::parse(p.as_str()), Ok(p));
        }
        assert_eq!(ValuesProfile::parse("full"), Err("`full` is not a value profile; use spec (docs/uflip-method.md §4.3 lists), small or quick".to_string()));
        assert_eq!(ValuesProfile::Spec.options(1 << 30), PlanOptions::spec_defaults(1 << 30));
    }
}
