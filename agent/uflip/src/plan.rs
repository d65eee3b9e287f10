//! Run plans: the nine micro-benchmarks as the 34 experiments of spec §4.2, their value lists (§4.3),
//! repetitions, the run order of §4.2/§7, run placement with the fresh-area allocator (§5), the
//! preparation runs (§6.2) and the format (§6.1) as plan items.
//!
//! [`build_plan`] is pure: it takes [`PlanOptions`] (including the device size) and returns a
//! [`Plan`], a flat list of [`RunSpec`]s in execution order, each holding the exact pattern(s) the
//! engine will run. To add a micro-benchmark: add a [`Bench`] variant (name, code, varying
//! parameter), its experiments in [`experiments`] at the right order number (`plan/experiments.rs`),
//! a value list in [`ValueLists`], and a placement arm in `place` (`plan/place.rs`).

use crate::format::FormatKind;
use crate::pattern::{Baseline, PatternSpec, SECTOR};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

// The experiment table and the placement are their own files (this one was over 1,200 lines);
// their public items are re-exported here, where they were.
mod experiments;
mod place;
pub use experiments::{experiments, Bench, Experiment};
pub use place::build_plan;

const KIB: u64 = 1024;

/// Per-baseline IOCount and IgnoreIO (§2 `IOCSR…`, `IgnIOSR…`; each baseline its own, §3.5 bug 2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaselineTable {
    /// IOCount for `[SR, RR, SW, RW]`.
    pub io_count: [u64; 4],
    /// IgnoreIO for `[SR, RR, SW, RW]`.
    pub ignore_io: [u64; 4],
}

impl BaselineTable {
    /// The IO counts multiplied by `scale` (rounded up, at least IgnoreIO + 1); `scale` ≤ 0, not
    /// finite, or 1: unchanged.
    pub fn scaled(&self, scale: f64) -> Self {
        if !(scale.is_finite() && scale > 0.0) || scale == 1.0 {
            return self.clone();
        }
        let mut t = self.clone();
        for (c, i) in t.io_count.iter_mut().zip(self.ignore_io) {
            *c = ((*c as f64 * scale).ceil() as u64).max(i + 1);
        }
        t
    }
    /// The code defaults of §2: 128/256/1024/5116 and 0/0/0/50.
    pub fn spec_defaults() -> Self {
        BaselineTable { io_count: [128, 256, 1024, 5116], ignore_io: [0, 0, 0, 50] }
    }
    /// IOCount of a baseline.
    pub fn count(&self, b: Baseline) -> u64 {
        self.io_count[b.index()]
    }
    /// IgnoreIO of a baseline.
    pub fn ignore(&self, b: Baseline) -> u64 {
        self.ignore_io[b.index()]
    }
}

/// The varying-parameter values of each benchmark (§4.3), in bytes/µs/counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValueLists {
    /// GRA: IOSize in bytes.
    pub granularity_io_sizes: Vec<u64>,
    /// ALI: IOShift in bytes (at the default IOSize).
    pub alignment_shifts: Vec<u64>,
    /// LOC: TargetSize = v·IOSize.
    pub locality_factors: Vec<u64>,
    /// PAT: partitions.
    pub partitions: Vec<u64>,
    /// ORD: increments.
    pub orders: Vec<i64>,
    /// PAR: parallel degrees.
    pub parallel_degrees: Vec<u32>,
    /// MIX: signed ratios.
    pub mix_ratios: Vec<i64>,
    /// PIO: pause after every IO, µs.
    pub pause_io_us: Vec<u64>,
    /// PBU: IOs per burst.
    pub burst_io: Vec<u64>,
}

fn pow2(from: u32, to: u32) -> impl DoubleEndedIterator<Item = u64> {
    (from..=to).map(|k| 1u64 << k)
}

impl ValueLists {
    /// The proposed lists of §4.3.
    pub fn spec_defaults() -> Self {
        let mut ratios: Vec<i64> = pow2(0, 6).rev().map(|v| -(v as i64)).collect();
        ratios.extend(pow2(0, 6).map(|v| v as i64));
        let mut orders = vec![-1, 0];
        orders.extend(pow2(0, 8).map(|v| v as i64));
        let mut pio = vec![0];
        pio.extend(pow2(0, 6).map(|k| k * 100));
        let mut shifts = vec![0];
        shifts.extend(pow2(0, 6).map(|s| s * SECTOR));
        ValueLists {
            granularity_io_sizes: pow2(0, 10).map(|s| s * SECTOR).collect(),
            alignment_shifts: shifts,
            locality_factors: pow2(0, 16).collect(),
            partitions: pow2(0, 8).collect(),
            orders,
            parallel_degrees: vec![1, 2, 4, 8, 16],
            mix_ratios: ratios,
            pause_io_us: pio,
            burst_io: pow2(0, 6).collect(),
        }
    }

    /// Short lists for a file target: a few points per experiment, same shape as §4.3.
    pub fn small() -> Self {
        ValueLists {
            granularity_io_sizes: vec![512, 4 * KIB, 32 * KIB, 128 * KIB],
            alignment_shifts: vec![0, 512, 4 * KIB],
            locality_factors: vec![1, 16, 256],
            partitions: vec![1, 4, 16],
            orders: vec![-1, 0, 1, 4],
            parallel_degrees: vec![1, 4, 8],
            mix_ratios: vec![-4, -1, 1, 4],
            pause_io_us: vec![0, 100, 1000],
            burst_io: vec![4, 64],
        }
    }
}

/// How to build a plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanOptions {
    /// Selected micro-benchmarks (see [`Bench::parse_list`]).
    pub benches: Vec<Bench>,
    /// Target size in bytes (placement needs it, §5).
    pub device_size: u64,
    /// Seed of the planner's random placements and of every run's address stream.
    pub seed: u64,
    /// nbRun: consecutive repetitions per value (§7).
    pub repetitions: u32,
    /// IOSize for every benchmark except Granularity (§4.3: 32 KiB).
    pub io_size: u64,
    /// Per-baseline IOCount/IgnoreIO (run size).
    pub counts: BaselineTable,
    /// Value lists.
    pub values: ValueLists,
    /// PBurst for the Bursts benchmark, µs.
    pub pause_burst_us: u64,
    /// Pause at the end of every run (§7), before the next one starts.
    pub pause_between_runs: Duration,
    /// LOC writes with v ≤ this get a fresh area; above it a random offset (§5, 1024 in the code).
    pub locality_fresh_max: u64,
    /// PAT SW: fresh window = spread × IOCount·IOSize, so each partition starts `spread` times its
    /// written length apart (see docs/uflip-engine.md for why this differs from the original).
    pub partition_spread: u64,
    /// Include the preparation runs of §6.2 (SPE + SIO per baseline) before the benchmarks.
    pub prepare: bool,
    /// IOC: IOs per SPE leg.
    pub spe_io_count: u64,
    /// IOC2: IOs per SIO run.
    pub prepare_io_count: u64,
    /// Pause after every preparation run (the original hard-codes 10 s).
    pub prepare_pause: Duration,
    /// Format the target after the preparation runs and before the benchmarks (§6.1).
    pub format: Option<FormatKind>,
    /// Write one fio iolog v2 per run (and per process) into this directory (§10).
    pub emit_fio_iolog: Option<PathBuf>,
    /// Write one per-IO CSV trace per run into this directory (§8 DET files).
    pub trace_dir: Option<PathBuf>,
    /// IOCount multiplier of each benchmark run, by its plan position (missing or ≤ 0: 1): the
    /// run is placed with `ceil(IOCount · scale)` IOs (at least IgnoreIO + 1), so a lengthened
    /// run gets a window of its own size (`probe --energy-target`); IgnoreIO is unchanged.
    pub io_scale: Vec<f64>,
}

impl PlanOptions {
    /// The spec's values: §4.3 lists, §2 counts, nbRun 3, 100 ms between runs (§11.6 P_min).
    pub fn spec_defaults(device_size: u64) -> Self {
        PlanOptions {
            benches: Bench::ALL.to_vec(),
            device_size,
            seed: 200, // the original's CRandomMother seed (§2), reused as our ChaCha seed
            repetitions: 3,
            io_size: 32 * KIB,
            counts: BaselineTable::spec_defaults(),
            values: ValueLists::spec_defaults(),
            pause_burst_us: 100_000,
            pause_between_runs: Duration::from_millis(100),
            locality_fresh_max: 1024,
            partition_spread: 1,
            prepare: false,
            spe_io_count: 2048,
            prepare_io_count: 20480,
            prepare_pause: Duration::from_secs(10),
            format: None,
            emit_fio_iolog: None,
            trace_dir: None,
            io_scale: Vec::new(),
        }
    }

    /// Small defaults for a file target (≈ 1 GiB): short value lists, smaller IO counts, so `all`
    /// with 3 repetitions takes a few minutes.
    pub fn small(device_size: u64) -> Self {
        PlanOptions {
            counts: BaselineTable { io_count: [128, 256, 128, 512], ignore_io: [0, 0, 0, 16] },
            values: ValueLists::small(),
            pause_burst_us: 2_000,
            pause_between_runs: Duration::from_millis(20),
            prepare_io_count: 2048,
            spe_io_count: 512,
            prepare_pause: Duration::from_secs(1),
            ..PlanOptions::spec_defaults(device_size)
        }
    }

    /// The quick plan: Granularity only (SR, RR, SW, RW) at 4, 32 and 128 KiB, small IO counts, one
    /// repetition: 12 runs, a few seconds on a 1 GiB file.
    pub fn quick(device_size: u64) -> Self {
        let mut o = PlanOptions::small(device_size);
        o.benches = vec![Bench::Granularity];
        o.repetitions = 1;
        o.counts = BaselineTable { io_count: [64, 128, 64, 128], ignore_io: [0, 0, 0, 8] };
        o.values.granularity_io_sizes = vec![4 * KIB, 32 * KIB, 128 * KIB];
        o.pause_between_runs = Duration::from_millis(10);
        o
    }
}

/// Run-level warnings carried into the result (§5: `Warn 1`, `Warn 2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Warning {
    /// No fresh area was left for a write run; it got a random offset instead.
    #[serde(rename = "DEVICE_TOO_SMALL")]
    DeviceTooSmall,
    /// The window ran past the device end and was clipped.
    #[serde(rename = "TEST_EXCEED_DEVICE")]
    TestExceedDevice,
}

impl Warning {
    /// "DEVICE_TOO_SMALL" / "TEST_EXCEED_DEVICE".
    pub fn as_str(self) -> &'static str {
        match self {
            Warning::DeviceTooSmall => "DEVICE_TOO_SMALL",
            Warning::TestExceedDevice => "TEST_EXCEED_DEVICE",
        }
    }
}

/// What a run does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Work {
    /// One pattern per process (one element unless Parallelism).
    Pattern(Vec<PatternSpec>),
    /// One process running these patterns back to back as the legs of one run, with no pause
    /// between them: the SPE run of §6.2 (SR, RW, SR), whose point is that the second SR starts
    /// while the RW's background work may still be going on. Statistics are kept per leg.
    Phases(Vec<PatternSpec>),
    /// A device format (§6.1).
    Format {
        /// Random or sequential.
        kind: FormatKind,
        /// Seed of the random write order.
        seed: u64,
    },
}

/// One run of the plan: what the observer sees in `run_started`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSpec {
    /// Position in the plan (= run_id).
    pub index: usize,
    /// Lowercase benchmark name, or "prepare"/"format".
    pub bench: String,
    /// "granularity/SR", "mix/SR-RW", "prepare/SIO.SR", "format/random".
    pub experiment: String,
    /// §4.2 order number (1..=34), 0 for preparation and format.
    pub experiment_number: u32,
    /// "SR"/"RR"/"SW"/"RW"/"MIX"/"FORMAT".
    pub pattern: String,
    /// Varying parameter name.
    pub varying: String,
    /// Its value (bytes for sizes, µs for pauses).
    pub value: f64,
    /// Repetition 0..nbRun.
    pub repetition: u32,
    /// The IO work.
    pub work: Work,
    /// Pause after the run (§7).
    pub pause_after: Duration,
    /// Placement warnings.
    pub warnings: Vec<Warning>,
    /// Keep the per-IO response-time series in the result (preparation runs, for calibration §6.3).
    pub keep_series: bool,
}

impl RunSpec {
    /// Whether the run writes.
    pub fn writes(&self) -> bool {
        match &self.work {
            Work::Pattern(p) | Work::Phases(p) => p.iter().any(|s| s.writes()),
            Work::Format { .. } => true,
        }
    }

    /// The full parameter set, as strings (recorded in every result).
    pub fn parameters(&self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        m.insert("bench".into(), self.bench.clone());
        m.insert("experiment".into(), self.experiment.clone());
        m.insert("experiment_number".into(), self.experiment_number.to_string());
        m.insert("varying".into(), self.varying.clone());
        m.insert("value".into(), self.value.to_string());
        m.insert("repetition".into(), self.repetition.to_string());
        m.insert("pause_after_us".into(), self.pause_after.as_micros().to_string());
        match &self.work {
            Work::Format { kind, seed } => {
                m.insert("format".into(), kind.as_str().into());
                m.insert("seed".into(), seed.to_string());
            }
            Work::Pattern(ps) | Work::Phases(ps) => {
                let join = |f: &dyn Fn(&PatternSpec) -> String| ps.iter().map(f).collect::<Vec<_>>().join(",");
                if let Some(p) = ps.first() {
                    m.insert("base".into(), p.baseline.to_string());
                    m.insert("io_size".into(), p.io_size.to_string());
                    m.insert("io_count".into(), p.io_count.to_string());
                    m.insert("ignore_io".into(), p.ignore_io.to_string());
                    m.insert("io_shift".into(), p.io_shift.to_string());
                    m.insert("order".into(), p.order.to_string());
                    m.insert("partitions".into(), p.partitions.to_string());
                    m.insert("parallel_degree".into(), p.parallel_degree.to_string());
                    m.insert("pause_io_us".into(), p.pause_io_us.to_string());
                    m.insert("burst_io".into(), p.burst_io.to_string());
                    m.insert("pause_burst_us".into(), p.pause_burst_us.to_string());
                    if let Some(mx) = &p.mix {
                        m.insert("base2".into(), mx.baseline2.to_string());
                        m.insert("ratio".into(), mx.ratio.to_string());
                        m.insert("target_offset2".into(), mx.target_offset2.to_string());
                        m.insert("target_size2".into(), mx.target_size2.to_string());
                    }
                }
                m.insert("target_offset".into(), join(&|p| p.target_offset.to_string()));
                m.insert("target_size".into(), join(&|p| p.target_size.to_string()));
                m.insert("seed".into(), join(&|p| p.seed.to_string()));
                if matches!(self.work, Work::Phases(_)) {
                    // Legs run one after another: name each leg's baseline and length.
                    m.insert("legs".into(), join(&|p| p.baseline.to_string()));
                    m.insert("leg_io_count".into(), join(&|p| p.io_count.to_string()));
                }
            }
        }
        m
    }
}

/// An ordered list of runs plus what produced it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Runs in execution order.
    pub runs: Vec<RunSpec>,
    /// Seed used for placement and address streams.
    pub seed: u64,
    /// Device size the plan was placed on.
    pub device_size: u64,
    /// Where to write fio iologs, if anywhere.
    pub emit_fio_iolog: Option<PathBuf>,
    /// Where to write per-IO traces, if anywhere.
    pub trace_dir: Option<PathBuf>,
}

impl Plan {
    /// Number of runs.
    pub fn total_runs(&self) -> usize {
        self.runs.len()
    }
    /// Whether any run writes (then the target must be cleared for writes).
    pub fn writes(&self) -> bool {
        self.runs.iter().any(|r| r.writes())
    }
    /// The same plan without its write runs (allowed on any device), re-indexed.
    pub fn read_only(&self) -> Plan {
        let mut p = self.clone();
        p.runs.retain(|r| !r.writes());
        for (i, r) in p.runs.iter_mut().enumerate() {
            r.index = i;
        }
        p
    }
}

/// Plan-building errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// A benchmark name that is not one of the nine.
    #[error("unknown micro-benchmark {0:?}: use granularity, alignment, locality, partitioning, order, parallelism, mix, pause, bursts or all")]
    UnknownBench(String),
}

/// Mix IgnoreIO and IOCount from the two baselines' values (§5, from `ComputeParams`).
/// `(i1, c1)` belong to Base, `(i2, c2)` to Base2.
pub fn mix_counts(i1: u64, c1: u64, i2: u64, c2: u64, ratio: i64) -> (u64, u64) {
    if ratio == 0 {
        return (i2, c2);
    }
    // Ratio < 0: same with the roles swapped and R = |Ratio|.
    let (ia, ib) = if ratio > 0 { (i2 as i64, i1 as i64) } else { (i1 as i64, i2 as i64) };
    let r = ratio.unsigned_abs() as i64;
    let ign = (ia + (ia - 1) * r + 1).max(ib * (r + 1) / r + 1).max(0) as u64;
    let count = c1.saturating_sub(i1).max(c2.saturating_sub(i2)) + ign;
    (ign, count)
}

/// IOs going to (pattern 1, pattern 2) among `count` Mix IOs (§3.2): with ratio ≥ 0 IO i is
/// pattern 2 iff `i % (ratio+1) == 0`; with ratio < 0 IO i is pattern 1 iff `i % (|ratio|+1) == 0`.
pub fn mix_split(count: u64, ratio: i64) -> (u64, u64) {
    let hits = count.div_ceil(ratio.unsigned_abs() + 1);
    if ratio >= 0 {
        (count - hits, hits)
    } else {
        (hits, count - hits)
    }
}

/// SplitMix64: derives independent per-run/per-process seeds from the plan seed.
pub fn derive_seed(seed: u64, a: u64, b: u64) -> u64 {
    let mut z = seed ^ a.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ b.wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests;
