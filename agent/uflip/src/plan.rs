//! Run plans: the nine micro-benchmarks as the 34 experiments of spec §4.2, their value lists (§4.3),
//! repetitions, the run order of §4.2/§7, run placement with the fresh-area allocator (§5), the
//! preparation runs (§6.2) and the format (§6.1) as plan items.
//!
//! [`build_plan`] is pure: it takes [`PlanOptions`] (including the device size) and returns a
//! [`Plan`], a flat list of [`RunSpec`]s in execution order, each holding the exact pattern(s) the
//! engine will run. To add a micro-benchmark: add a [`Bench`] variant (name, code, varying
//! parameter), its experiments in [`experiments`] at the right order number, a value list in
//! [`ValueLists`], and a placement arm in `Planner::place`.

use crate::alloc::FreshAreaAllocator;
use crate::format::FormatKind;
use crate::pattern::{Baseline, MixSpec, PatternSpec, BLOCK, SECTOR};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

const KIB: u64 = 1024;

/// The nine micro-benchmarks (§4.1), numbered as `genBench.h`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Bench {
    /// 1 GRA: IOSize varies.
    Granularity,
    /// 2 ALI: IOShift varies.
    Alignment,
    /// 3 LOC: TargetSize = v·IOSize varies.
    Locality,
    /// 4 PAT: number of partitions varies.
    Partitioning,
    /// 5 ORD: Order (increment) varies.
    Order,
    /// 6 PAR: parallel degree varies.
    Parallelism,
    /// 7 MIX: ratio between two patterns varies.
    Mix,
    /// 8 PIO: pause after every IO varies.
    Pause,
    /// 9 PBU: IOs per burst varies (pause between bursts fixed).
    Bursts,
}

impl Bench {
    /// All nine, in ID order.
    pub const ALL: [Bench; 9] =
        [Bench::Granularity, Bench::Alignment, Bench::Locality, Bench::Partitioning, Bench::Order, Bench::Parallelism, Bench::Mix, Bench::Pause, Bench::Bursts];

    /// Lowercase name used in selections and results ("granularity").
    pub fn name(self) -> &'static str {
        match self {
            Bench::Granularity => "granularity",
            Bench::Alignment => "alignment",
            Bench::Locality => "locality",
            Bench::Partitioning => "partitioning",
            Bench::Order => "order",
            Bench::Parallelism => "parallelism",
            Bench::Mix => "mix",
            Bench::Pause => "pause",
            Bench::Bursts => "bursts",
        }
    }

    /// The original's three-letter code (`genBench.h`).
    pub fn code(self) -> &'static str {
        match self {
            Bench::Granularity => "GRA",
            Bench::Alignment => "ALI",
            Bench::Locality => "LOC",
            Bench::Partitioning => "PAT",
            Bench::Order => "ORD",
            Bench::Parallelism => "PAR",
            Bench::Mix => "MIX",
            Bench::Pause => "PIO",
            Bench::Bursts => "PBU",
        }
    }

    /// Name of the varying parameter as recorded in [`crate::RunResult::varying`].
    pub fn varying(self) -> &'static str {
        match self {
            Bench::Granularity => "io_size",
            Bench::Alignment => "io_shift",
            Bench::Locality => "target_size_ios",
            Bench::Partitioning => "partitions",
            Bench::Order => "order",
            Bench::Parallelism => "parallel_degree",
            Bench::Mix => "ratio",
            Bench::Pause => "pause_io_us",
            Bench::Bursts => "burst_io",
        }
    }

    /// Parse a lowercase name or three-letter code.
    pub fn parse(s: &str) -> Option<Bench> {
        let t = s.trim().to_ascii_lowercase();
        Bench::ALL.into_iter().find(|b| b.name() == t || b.code().eq_ignore_ascii_case(&t))
    }

    /// Parse a comma/space separated selection; `all` selects the nine.
    pub fn parse_list(s: &str) -> Result<Vec<Bench>, PlanError> {
        let mut out = Vec::new();
        for tok in s.split(|c: char| c == ',' || c.is_whitespace()).filter(|t| !t.is_empty()) {
            if tok.eq_ignore_ascii_case("all") {
                return Ok(Bench::ALL.to_vec());
            }
            let b = Bench::parse(tok).ok_or_else(|| PlanError::UnknownBench(tok.to_string()))?;
            if !out.contains(&b) {
                out.push(b);
            }
        }
        if out.is_empty() {
            return Err(PlanError::UnknownBench(s.to_string()));
        }
        Ok(out)
    }
}

impl fmt::Display for Bench {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One experiment: a benchmark applied to one baseline (or a pair for Mix), §4.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Experiment {
    /// Order number 1..=34 of §4.2 (runs are emitted in increasing order).
    pub number: u32,
    /// The micro-benchmark.
    pub bench: Bench,
    /// Base (pattern 1).
    pub base: Baseline,
    /// Base2 (Mix only).
    pub base2: Option<Baseline>,
}

impl Experiment {
    /// "granularity/SR", or "mix/SR-RW" for a Mix pair.
    pub fn name(&self) -> String {
        match self.base2 {
            Some(b2) => format!("{}/{}-{}", self.bench.name(), self.base, b2),
            None => format!("{}/{}", self.bench.name(), self.base),
        }
    }

    /// "SR".."RW", or "MIX".
    pub fn pattern(&self) -> &'static str {
        if self.base2.is_some() {
            "MIX"
        } else {
            self.base.as_str()
        }
    }

    /// Whether any run of this experiment writes.
    pub fn writes(&self) -> bool {
        self.base.mode() == crate::pattern::Mode::Write || self.base2.is_some_and(|b| b.mode() == crate::pattern::Mode::Write)
    }
}

/// The 34 experiments in the order of §4.2: read-only 1–15, random writes 16–22, sequential writes
/// 23–27, mixes with SW 28–30, then PAR RW, PAT SW, PAR SW, ORD SW (31–34).
pub fn experiments() -> Vec<Experiment> {
    use Baseline::*;
    use Bench::*;
    let list: [(Bench, Baseline, Option<Baseline>); 34] = [
        // (1) read-only, Exp. 1–15
        (Granularity, SR, None),
        (Granularity, RR, None),
        (Alignment, SR, None),
        (Alignment, RR, None),
        (Locality, SR, None),
        (Locality, RR, None),
        (Partitioning, SR, None),
        (Order, SR, None),
        (Parallelism, SR, None),
        (Parallelism, RR, None),
        (Mix, SR, Some(RR)),
        (Pause, SR, None),
        (Pause, RR, None),
        (Bursts, SR, None),
        (Bursts, RR, None),
        // (2) random writes on the whole device, Exp. 16–22
        (Granularity, RW, None),
        (Alignment, RW, None),
        (Locality, RW, None),
        (Pause, RW, None),
        (Bursts, RW, None),
        (Mix, SR, Some(RW)),
        (Mix, RR, Some(RW)),
        // (3) sequential writes on fresh areas, Exp. 23–27
        (Granularity, SW, None),
        (Alignment, SW, None),
        (Locality, SW, None),
        (Pause, SW, None),
        (Bursts, SW, None),
        // (4) mixes with SW, Exp. 28–30
        (Mix, SR, Some(SW)),
        (Mix, RR, Some(SW)),
        (Mix, SW, Some(RW)),
        // (5) parallel and partitioned, Exp. 31–33; (6) ordered, Exp. 34
        (Parallelism, RW, None),
        (Partitioning, SW, None),
        (Parallelism, SW, None),
        (Order, SW, None),
    ];
    list.iter().enumerate().map(|(i, &(bench, base, base2))| Experiment { number: i as u32 + 1, bench, base, base2 }).collect()
}

/// Per-baseline IOCount and IgnoreIO (§2 `IOCSR…`, `IgnIOSR…`; each baseline its own, §3.5 bug 2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaselineTable {
    /// IOCount for `[SR, RR, SW, RW]`.
    pub io_count: [u64; 4],
    /// IgnoreIO for `[SR, RR, SW, RW]`.
    pub ignore_io: [u64; 4],
}

impl BaselineTable {
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

struct Planner<'a> {
    o: &'a PlanOptions,
    alloc: FreshAreaAllocator,
    rng: ChaCha8Rng,
    dev: u64,
}

struct Placed {
    to: u64,
    ts: u64,
    warnings: Vec<Warning>,
}

impl Planner<'_> {
    /// Random BLOCK-aligned offset with room for `size` inside `[lo, lo+span)`; clipped + Warn 2 when
    /// `size` does not fit.
    fn random_in(&mut self, lo: u64, span: u64, size: u64) -> Placed {
        if size > span {
            return Placed { to: lo, ts: span, warnings: vec![Warning::TestExceedDevice] };
        }
        let slots = (span - size) / BLOCK;
        let to = lo + self.rng.random_range(0..=slots) * BLOCK;
        Placed { to, ts: size, warnings: vec![] }
    }

    fn random(&mut self, size: u64) -> Placed {
        self.random_in(0, self.dev, size)
    }

    /// A fresh area (best fit); when none is left, a random offset and Warn 1 (§5 ORD rule,
    /// applied to every write that wants a fresh area).
    fn fresh(&mut self, size: u64) -> Placed {
        if size <= self.dev {
            if let Some(a) = self.alloc.alloc_best_fit(size) {
                return Placed { to: a.start, ts: size, warnings: vec![] };
            }
        }
        let mut p = self.random(size);
        p.warnings.insert(0, Warning::DeviceTooSmall);
        p
    }

    fn whole(&self) -> Placed {
        Placed { to: 0, ts: self.dev, warnings: vec![] }
    }

    /// Window for a plain baseline of `size` bytes (GRA/ALI/PIO/PBU rule of §5).
    fn baseline_window(&mut self, b: Baseline, size: u64) -> Placed {
        match b {
            Baseline::RR | Baseline::RW => self.whole(),
            Baseline::SR => self.random(size),
            Baseline::SW => self.fresh(size),
        }
    }
}

/// Build the plan (pure; deterministic for given options).
pub fn build_plan(o: &PlanOptions) -> Plan {
    let mut pl =
        Planner { o, alloc: FreshAreaAllocator::new(o.device_size), rng: ChaCha8Rng::seed_from_u64(derive_seed(o.seed, 0x504c_414e, 0)), dev: o.device_size };
    let mut runs: Vec<RunSpec> = Vec::new();
    if o.prepare {
        prepare_runs(&mut pl, &mut runs);
    }
    if let Some(kind) = o.format {
        let index = runs.len();
        runs.push(RunSpec {
            index,
            bench: "format".into(),
            experiment: format!("format/{}", kind.as_str()),
            experiment_number: 0,
            pattern: "FORMAT".into(),
            varying: "none".into(),
            value: 0.0,
            repetition: 0,
            work: Work::Format { kind, seed: derive_seed(o.seed, index as u64, 0) },
            pause_after: o.prepare_pause,
            warnings: vec![],
            keep_series: false,
        });
        // A format resets freshness (§5 "since the last format").
        pl.alloc = FreshAreaAllocator::new(o.device_size);
    }
    for exp in experiments().into_iter().filter(|e| o.benches.contains(&e.bench)) {
        for (value, vnum) in values_of(o, exp.bench) {
            for rep in 0..o.repetitions {
                let index = runs.len();
                let seed = derive_seed(o.seed, index as u64, 1);
                let (work, warnings) = place(&mut pl, &exp, vnum, seed);
                runs.push(RunSpec {
                    index,
                    bench: exp.bench.name().into(),
                    experiment: exp.name(),
                    experiment_number: exp.number,
                    pattern: exp.pattern().into(),
                    varying: exp.bench.varying().into(),
                    value,
                    repetition: rep,
                    work,
                    pause_after: o.pause_between_runs,
                    warnings,
                    keep_series: false,
                });
            }
        }
    }
    Plan { runs, seed: o.seed, device_size: o.device_size, emit_fio_iolog: o.emit_fio_iolog.clone(), trace_dir: o.trace_dir.clone() }
}

/// A value of the varying parameter, both as f64 for the result and as the raw integer.
#[derive(Clone, Copy)]
enum V {
    U(u64),
    I(i64),
}

impl V {
    fn u(self) -> u64 {
        match self {
            V::U(x) => x,
            V::I(x) => x.max(0) as u64,
        }
    }
    fn i(self) -> i64 {
        match self {
            V::U(x) => x as i64,
            V::I(x) => x,
        }
    }
}

fn values_of(o: &PlanOptions, b: Bench) -> Vec<(f64, V)> {
    let v = &o.values;
    let u = |l: &[u64]| l.iter().map(|&x| (x as f64, V::U(x))).collect::<Vec<_>>();
    let i = |l: &[i64]| l.iter().map(|&x| (x as f64, V::I(x))).collect::<Vec<_>>();
    match b {
        Bench::Granularity => u(&v.granularity_io_sizes),
        Bench::Alignment => u(&v.alignment_shifts),
        Bench::Locality => u(&v.locality_factors),
        Bench::Partitioning => u(&v.partitions),
        Bench::Order => i(&v.orders),
        Bench::Parallelism => v.parallel_degrees.iter().map(|&d| (d as f64, V::U(d as u64))).collect(),
        Bench::Mix => i(&v.mix_ratios),
        Bench::Pause => u(&v.pause_io_us),
        Bench::Bursts => u(&v.burst_io),
    }
}

/// Placement of one run (§5).
fn place(pl: &mut Planner<'_>, exp: &Experiment, v: V, seed: u64) -> (Work, Vec<Warning>) {
    let o = pl.o;
    let b = exp.base;
    let mut spec = PatternSpec::new(b, o.io_size, o.counts.count(b), 0, 0);
    spec.ignore_io = o.counts.ignore(b);
    spec.seed = seed;
    let mut warnings = Vec::new();
    match exp.bench {
        Bench::Granularity | Bench::Alignment | Bench::Pause | Bench::Bursts => {
            match exp.bench {
                Bench::Granularity => spec.io_size = v.u(),
                Bench::Alignment => spec.io_shift = v.u(),
                Bench::Pause => spec.pause_io_us = v.u(),
                _ => {
                    spec.burst_io = v.u().max(1);
                    spec.pause_burst_us = o.pause_burst_us;
                }
            }
            let mut size = spec.io_size.saturating_mul(spec.io_count);
            if spec.io_shift != 0 {
                size += spec.io_size; // §5: room for the shifted last IO
            }
            let p = pl.baseline_window(b, size);
            spec.target_offset = p.to;
            spec.target_size = p.ts;
            warnings = p.warnings;
        }
        Bench::Locality => {
            let ts = v.u().max(1).saturating_mul(spec.io_size);
            let p = if b.mode() == crate::pattern::Mode::Write && v.u() <= o.locality_fresh_max { pl.fresh(ts) } else { pl.random(ts) };
            spec.target_offset = p.to;
            spec.target_size = p.ts;
            warnings = p.warnings;
        }
        Bench::Partitioning => {
            spec.partitions = v.u().max(1);
            let p = if b.mode() == crate::pattern::Mode::Write {
                // Deviation (documented): every SW run gets its own fresh window so the §5 goal
                // holds for all P; the original reused the whole device for P > 16.
                pl.fresh(spec.io_size.saturating_mul(spec.io_count).saturating_mul(o.partition_spread.max(1)))
            } else {
                let unit = 256 * BLOCK;
                let ts = if pl.dev >= unit { pl.dev / unit * unit } else { pl.dev / BLOCK * BLOCK };
                Placed { to: 0, ts, warnings: vec![] }
            };
            spec.target_offset = p.to;
            spec.target_size = p.ts;
            warnings = p.warnings;
        }
        Bench::Order => {
            spec.order = v.i();
            let ts =
                if spec.order == 0 { BLOCK.max(spec.io_size) } else { spec.order.unsigned_abs().saturating_mul(spec.io_size).saturating_mul(spec.io_count) };
            let p = if b.mode() == crate::pattern::Mode::Write { pl.fresh(ts) } else { pl.random(ts) };
            spec.target_offset = p.to;
            spec.target_size = p.ts;
            warnings = p.warnings;
        }
        Bench::Parallelism => {
            let d = (v.u().clamp(1, crate::pattern::MAX_PARALLEL as u64)) as u32;
            let slice = pl.dev / d as u64 / BLOCK * BLOCK;
            let size = spec.io_size.saturating_mul(spec.io_count);
            let start = pl.alloc.lowest_free().unwrap_or(0);
            let mut procs = Vec::new();
            for p in 0..d {
                let mut s = spec.clone();
                s.parallel_degree = d;
                s.process_id = p;
                s.seed = derive_seed(seed, p as u64, 2);
                let placed = match b {
                    Baseline::RR | Baseline::RW => Placed { to: p as u64 * slice, ts: slice, warnings: vec![] },
                    Baseline::SR => pl.random_in(p as u64 * slice, slice, size),
                    Baseline::SW => {
                        let near = start + p as u64 * (pl.dev.saturating_sub(start) / d as u64);
                        match pl.alloc.alloc_nearest_after(near, size) {
                            Some(a) => Placed { to: a.start, ts: size, warnings: vec![] },
                            None => {
                                let mut r = pl.random(size);
                                r.warnings.insert(0, Warning::DeviceTooSmall);
                                r
                            }
                        }
                    }
                };
                s.target_offset = placed.to;
                s.target_size = placed.ts;
                for w in placed.warnings {
                    if !warnings.contains(&w) {
                        warnings.push(w);
                    }
                }
                procs.push(s);
            }
            return (Work::Pattern(procs), warnings);
        }
        Bench::Mix => {
            let b2 = exp.base2.unwrap_or(Baseline::RR);
            let ratio = v.i();
            let (ign, count) = mix_counts(o.counts.ignore(b), o.counts.count(b), o.counts.ignore(b2), o.counts.count(b2), ratio);
            spec.ignore_io = ign;
            spec.io_count = count;
            // Each sub-pattern's window holds exactly the IOs it receives (§3.2 interleaving), so
            // fresh areas are not wasted on IOs that go to the other pattern.
            let (n1, n2) = mix_split(count, ratio);
            let p1 = pl.baseline_window(b, spec.io_size * n1.max(1));
            let p2 = pl.baseline_window(b2, spec.io_size * n2.max(1));
            spec.target_offset = p1.to;
            spec.target_size = p1.ts;
            spec.mix = Some(MixSpec { baseline2: b2, ratio, target_offset2: p2.to, target_size2: p2.ts });
            for w in p1.warnings.into_iter().chain(p2.warnings) {
                if !warnings.contains(&w) {
                    warnings.push(w);
                }
            }
        }
    }
    (Work::Pattern(vec![spec]), warnings)
}

/// §6.2 preparation runs: SPE (one run of three back-to-back legs SR, RW, SR) and SIO.SR/RR/SW/RW
/// (nbRun × IOC2 each), each followed by `prepare_pause`. Their per-IO series are kept for
/// [`crate::calibrate`] and [`crate::spe_effect`].
fn prepare_runs(pl: &mut Planner<'_>, runs: &mut Vec<RunSpec>) {
    let o = pl.o;
    let sz = o.io_size;
    let push = |runs: &mut Vec<RunSpec>, exp: String, pattern: &str, varying: &str, value: f64, rep: u32, spec: PatternSpec, warnings: Vec<Warning>| {
        let index = runs.len();
        let mut spec = spec;
        spec.seed = derive_seed(o.seed, index as u64, 1);
        runs.push(RunSpec {
            index,
            bench: "prepare".into(),
            experiment: exp,
            experiment_number: 0,
            pattern: pattern.into(),
            varying: varying.into(),
            value,
            repetition: rep,
            work: Work::Pattern(vec![spec]),
            pause_after: o.prepare_pause,
            warnings,
            keep_series: true,
        });
    };
    // SPE: SR at a random offset in the first half, RW anywhere above it, SR again at the same place,
    // as ONE run: a pause between the RW and the second SR would let the drive finish its
    // background work and hide exactly the slowdown SPE exists to show (§6.2).
    let spe = o.spe_io_count.max(1);
    let half = (pl.dev / 2).max(sz * spe);
    let p = pl.random_in(0, half.min(pl.dev), sz * spe);
    let index = runs.len();
    let mut legs = [
        PatternSpec::new(Baseline::SR, sz, spe, p.to, p.ts),
        PatternSpec::new(Baseline::RW, sz, spe, p.to, (pl.dev - p.to) / sz * sz),
        PatternSpec::new(Baseline::SR, sz, spe, p.to, p.ts),
    ];
    for (leg, s) in legs.iter_mut().enumerate() {
        s.seed = derive_seed(o.seed, index as u64, 1 + leg as u64);
    }
    runs.push(RunSpec {
        index,
        bench: "prepare".into(),
        experiment: "prepare/SPE".into(),
        experiment_number: 0,
        pattern: "SR-RW-SR".into(),
        varying: "legs".into(),
        value: 3.0,
        repetition: 0,
        work: Work::Phases(legs.to_vec()),
        pause_after: o.prepare_pause,
        warnings: p.warnings,
        keep_series: true,
    });
    // SIO: long runs of each baseline to read start-up length and period (§6.3).
    let n = o.prepare_io_count.max(1);
    for b in Baseline::ALL {
        for rep in 0..o.repetitions {
            let size = sz * n;
            // Without a format afterwards, SW preparation runs must also take fresh areas.
            let p = match b {
                Baseline::SW if o.format.is_none() => pl.fresh(size),
                Baseline::SW | Baseline::SR => pl.random(size),
                _ => pl.whole(),
            };
            let mut s = PatternSpec::new(b, sz, n, p.to, p.ts);
            s.ignore_io = 0;
            push(runs, format!("prepare/SIO.{b}"), b.as_str(), "io_count", n as f64, rep, s, p.warnings);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::Area;

    const GIB: u64 = 1 << 30;

    #[test]
    fn thirty_four_experiments_in_order() {
        let e = experiments();
        assert_eq!(e.len(), 34);
        assert_eq!(e.iter().filter(|x| !x.writes()).count(), 15);
        assert!(e[..15].iter().all(|x| !x.writes()));
        assert!(e[15..].iter().all(|x| x.writes()));
        assert_eq!(e[15].name(), "granularity/RW");
        assert_eq!(e[21].name(), "mix/RR-RW");
        assert_eq!(e[22].name(), "granularity/SW");
        assert_eq!(e[27].name(), "mix/SR-SW");
        assert_eq!(e[29].name(), "mix/SW-RW");
        let tail: Vec<String> = e[30..].iter().map(|x| x.name()).collect();
        assert_eq!(tail, vec!["parallelism/RW", "partitioning/SW", "parallelism/SW", "order/SW"]);
        // Per-bench experiment counts: 4+4+4+2+2+4+6+4+4.
        let count = |b: Bench| e.iter().filter(|x| x.bench == b).count();
        let counts: Vec<usize> = Bench::ALL.iter().map(|&b| count(b)).collect();
        assert_eq!(counts, vec![4, 4, 4, 2, 2, 4, 6, 4, 4]);
        assert_eq!(e.iter().map(|x| x.number).collect::<Vec<_>>(), (1..=34).collect::<Vec<_>>());
    }

    #[test]
    fn bench_selection() {
        assert_eq!(Bench::parse_list("all").unwrap().len(), 9);
        assert_eq!(Bench::parse_list("mix, granularity").unwrap(), vec![Bench::Mix, Bench::Granularity]);
        assert_eq!(Bench::parse_list("PBU").unwrap(), vec![Bench::Bursts]);
        assert_eq!(Bench::parse_list("granularity,nope").unwrap_err(), PlanError::UnknownBench("nope".into()));
    }

    #[test]
    fn mix_counts_example_of_section_5() {
        // SR (0/128) with RW (50/5116) at R = 1 → IgnIO = 100, IOCount = 5166.
        assert_eq!(mix_counts(0, 128, 50, 5116, 1), (100, 5166));
        assert_eq!(mix_counts(0, 128, 50, 5116, 0), (50, 5116));
        // R = −1: roles swapped: max(0 + (−1)·1 + 1, 50·2/1 + 1) = 101.
        assert_eq!(mix_counts(0, 128, 50, 5116, -1), (101, 5167));
        // R = 4, both without start-up: max(1 − 4, 0 + 1) = 1.
        assert_eq!(mix_counts(0, 128, 0, 256, 4), (1, 257));
    }

    #[test]
    fn mix_split_matches_generator() {
        for (count, ratio) in [(7u64, 2i64), (7, -2), (4, 0), (10, 1), (9, -1), (5, 64)] {
            let mut s = PatternSpec::new(Baseline::SR, 512, count, 0, 1 << 20);
            s.mix = Some(MixSpec { baseline2: Baseline::SW, ratio, target_offset2: 1 << 20, target_size2: 1 << 20 });
            let writes = s.generate().unwrap().iter().filter(|io| io.mode == crate::pattern::Mode::Write).count() as u64;
            assert_eq!(mix_split(count, ratio), (count - writes, writes), "count {count} ratio {ratio}");
        }
        assert_eq!(mix_split(7, 2), (4, 3));
        assert_eq!(mix_split(7, -2), (3, 4));
    }

    #[test]
    fn run_order_values_and_repetitions() {
        let mut o = PlanOptions::small(GIB);
        o.benches = vec![Bench::Granularity, Bench::Order];
        let p = build_plan(&o);
        // GRA: 4 baselines × 4 sizes × 3 reps; ORD: 2 × 4 × 3.
        assert_eq!(p.total_runs(), 4 * 4 * 3 + 2 * 4 * 3);
        let nums: Vec<u32> = p.runs.iter().map(|r| r.experiment_number).collect();
        let mut sorted = nums.clone();
        sorted.sort();
        assert_eq!(nums, sorted, "runs are emitted in increasing experiment order");
        let first: Vec<(String, f64, u32)> = p.runs[..4].iter().map(|r| (r.experiment.clone(), r.value, r.repetition)).collect();
        assert_eq!(
            first,
            vec![
                ("granularity/SR".into(), 512.0, 0),
                ("granularity/SR".into(), 512.0, 1),
                ("granularity/SR".into(), 512.0, 2),
                ("granularity/SR".into(), 4096.0, 0)
            ]
        );
        // Order: SR (exp 8) comes in the read-only block, before the GRA writes; SW last.
        let order_exps: Vec<&str> = p.runs.iter().map(|r| r.experiment.as_str()).collect();
        let pos = |n: &str| order_exps.iter().position(|e| *e == n).unwrap();
        assert!(pos("order/SR") < pos("granularity/RW"));
        assert!(pos("granularity/RW") < pos("granularity/SW"));
        assert_eq!(p.runs.last().unwrap().experiment, "order/SW");
        assert!(p.runs.iter().enumerate().all(|(i, r)| r.index == i));
        // Granularity RW IOCount/IgnoreIO come from RW's own table entries (§3.5 bug 2).
        let rw = p.runs.iter().find(|r| r.experiment == "granularity/RW").unwrap();
        match &rw.work {
            Work::Pattern(ps) => {
                assert_eq!((ps[0].io_count, ps[0].ignore_io), (512, 16));
                assert_eq!((ps[0].target_offset, ps[0].target_size), (0, GIB));
            }
            _ => panic!("pattern expected"),
        }
    }

    fn write_areas(p: &Plan) -> Vec<(usize, Area)> {
        let mut v = Vec::new();
        for r in &p.runs {
            if let Work::Pattern(ps) = &r.work {
                for s in ps {
                    let mut areas = Vec::new();
                    if s.baseline == Baseline::SW {
                        areas.push(Area { start: s.target_offset, end: s.target_offset + s.target_size + s.io_shift });
                    }
                    if let Some(m) = &s.mix {
                        if m.baseline2 == Baseline::SW {
                            areas.push(Area { start: m.target_offset2, end: m.target_offset2 + m.target_size2 });
                        }
                    }
                    for a in areas {
                        // The actual IOs of plain SW runs stay inside the planned area.
                        if s.mix.is_none() {
                            for io in s.generate().unwrap() {
                                assert!(io.offset >= a.start && io.offset + io.len <= a.end, "run {} IO outside area", r.index);
                            }
                        }
                        v.push((r.index, a));
                    }
                }
            }
        }
        v
    }

    fn fresh_bytes(p: &Plan) -> u64 {
        write_areas(p).iter().map(|(_, a)| crate::alloc::round_up_block(a.len())).sum()
    }

    #[test]
    fn spec_defaults_give_348_points() {
        // 44 GRA + 32 ALI + 68 LOC + 18 PAT + 22 ORD + 20 PAR + 84 MIX + 32 PIO + 28 PBU = 348 points
        // (the paper's full run has 358, §4.4), × nbRun 3.
        let p = build_plan(&PlanOptions::spec_defaults(64 * GIB));
        assert_eq!(p.total_runs(), 348 * 3);
        assert_eq!(p.runs.iter().filter(|r| !r.writes()).count(), 3 * (22 + 16 + 34 + 9 + 11 + 10 + 14 + 16 + 14));
    }

    #[test]
    fn small_all_plan_fits_one_gib() {
        let p = build_plan(&PlanOptions::small(GIB));
        let used = fresh_bytes(&p);
        assert!(used <= GIB, "fresh areas need {used} bytes");
        assert!(p.runs.iter().all(|r| !r.warnings.contains(&Warning::DeviceTooSmall)), "a 1 GiB file holds the small plan");
    }

    #[test]
    fn sequential_write_runs_never_overlap() {
        let mut o = PlanOptions::small(8 * GIB);
        o.benches = Bench::ALL.to_vec();
        let p = build_plan(&o);
        assert_eq!(p.total_runs(), 3 * (4 * 4 + 4 * 3 + 4 * 3 + 2 * 3 + 2 * 4 + 4 * 3 + 6 * 4 + 4 * 3 + 4 * 2));
        let areas = write_areas(&p);
        assert!(areas.len() > 100);
        for (i, (ra, a)) in areas.iter().enumerate() {
            for (rb, b) in &areas[i + 1..] {
                assert!(!a.overlaps(b), "SW areas of runs {ra} and {rb} overlap: {a:?} {b:?}");
            }
        }
        assert!(p.runs.iter().all(|r| !r.warnings.contains(&Warning::DeviceTooSmall)));
    }

    #[test]
    fn exhausted_device_falls_back_with_warning() {
        let mut o = PlanOptions::small(64 << 20);
        o.benches = vec![Bench::Granularity];
        o.values.granularity_io_sizes = vec![128 * KIB];
        o.counts.io_count = [8, 8, 256, 8]; // SW run = 32 MiB; the third repetition has no room
        let p = build_plan(&o);
        let sw: Vec<&RunSpec> = p.runs.iter().filter(|r| r.pattern == "SW").collect();
        assert_eq!(sw.len(), 3);
        assert_eq!(sw[0].warnings, vec![]);
        assert_eq!(sw[1].warnings, vec![]);
        assert_eq!(sw[2].warnings, vec![Warning::DeviceTooSmall]);
    }

    #[test]
    fn locality_window_and_clip() {
        let mut o = PlanOptions::small(64 << 20);
        o.benches = vec![Bench::Locality];
        o.repetitions = 1;
        o.values.locality_factors = vec![4, 4096];
        let p = build_plan(&o);
        let get = |e: &str, v: f64| -> (PatternSpec, Vec<Warning>) {
            let r = p.runs.iter().find(|r| r.experiment == e && r.value == v).unwrap();
            match &r.work {
                Work::Pattern(ps) => (ps[0].clone(), r.warnings.clone()),
                _ => panic!(),
            }
        };
        let (s, w) = get("locality/SW", 4.0);
        assert_eq!(s.target_size, 4 * 32 * KIB);
        assert_eq!(s.target_offset % BLOCK, 0);
        assert!(w.is_empty());
        // 4096 × 32 KiB = 128 MiB > 64 MiB: clipped to the device and flagged.
        let (s, w) = get("locality/RR", 4096.0);
        assert_eq!((s.target_offset, s.target_size), (0, 64 << 20));
        assert_eq!(w, vec![Warning::TestExceedDevice]);
    }

    #[test]
    fn parallel_slices_and_seeds() {
        let mut o = PlanOptions::small(GIB);
        o.benches = vec![Bench::Parallelism];
        o.repetitions = 1;
        o.values.parallel_degrees = vec![4];
        let p = build_plan(&o);
        let rr = p.runs.iter().find(|r| r.experiment == "parallelism/RR").unwrap();
        let Work::Pattern(ps) = &rr.work else { panic!() };
        let got: Vec<(u64, u64, u32)> = ps.iter().map(|s| (s.target_offset, s.target_size, s.process_id)).collect();
        let q = GIB / 4;
        assert_eq!(got, vec![(0, q, 0), (q, q, 1), (2 * q, q, 2), (3 * q, q, 3)]);
        let mut seeds: Vec<u64> = ps.iter().map(|s| s.seed).collect();
        seeds.dedup();
        assert_eq!(seeds.len(), 4);
        // SW processes each get a fresh area near their quarter.
        let sw = p.runs.iter().find(|r| r.experiment == "parallelism/SW").unwrap();
        let Work::Pattern(ps) = &sw.work else { panic!() };
        for (i, s) in ps.iter().enumerate() {
            assert_eq!(s.target_size, 128 * 32 * KIB);
            assert!(s.target_offset >= i as u64 * q / 2, "process {i} placed at {}", s.target_offset);
        }
    }

    #[test]
    fn plan_is_deterministic_and_quick_is_small() {
        let a = build_plan(&PlanOptions::small(GIB));
        let b = build_plan(&PlanOptions::small(GIB));
        assert_eq!(a, b);
        let q = build_plan(&PlanOptions::quick(GIB));
        assert_eq!(q.total_runs(), 12);
        let sizes: Vec<f64> = q.runs.iter().map(|r| r.value).collect();
        assert_eq!(sizes[..3], [4096.0, 32768.0, 131072.0]);
        assert!(q.read_only().runs.iter().all(|r| !r.writes()));
        assert_eq!(q.read_only().total_runs(), 6);
    }

    #[test]
    fn prepare_and_format_come_first() {
        let mut o = PlanOptions::quick(GIB);
        o.prepare = true;
        o.format = Some(FormatKind::Sequential);
        let p = build_plan(&o);
        assert_eq!(p.runs[0].experiment, "prepare/SPE");
        assert_eq!(p.runs[1].experiment, "prepare/SIO.SR");
        assert!(p.runs[1].keep_series);
        assert_eq!(p.runs[1 + 4].experiment, "format/sequential");
        assert_eq!(p.runs[6].experiment, "granularity/SR");
        assert_eq!(p.total_runs(), 1 + 4 + 1 + 12);
    }

    #[test]
    fn spe_is_one_run_with_three_legs_and_no_pause_inside() {
        let mut o = PlanOptions::quick(GIB);
        o.benches = vec![];
        o.prepare = true;
        o.io_size = 4096;
        o.spe_io_count = 100;
        o.prepare_io_count = 50;
        o.repetitions = 1;
        o.prepare_pause = Duration::from_secs(10);
        let p = build_plan(&o);
        // Exact sequence: SPE, then one SIO per baseline; a pause after each, none inside SPE.
        let seq: Vec<(&str, &str, Duration)> = p.runs.iter().map(|r| (r.experiment.as_str(), r.pattern.as_str(), r.pause_after)).collect();
        let ten = Duration::from_secs(10);
        assert_eq!(
            seq,
            vec![
                ("prepare/SPE", "SR-RW-SR", ten),
                ("prepare/SIO.SR", "SR", ten),
                ("prepare/SIO.RR", "RR", ten),
                ("prepare/SIO.SW", "SW", ten),
                ("prepare/SIO.RW", "RW", ten),
            ]
        );
        let Work::Phases(legs) = &p.runs[0].work else {
            panic!("SPE must be a phased run: {:?}", p.runs[0].work);
        };
        let shape: Vec<(Baseline, u64, u64, u64, u64)> = legs.iter().map(|l| (l.baseline, l.io_size, l.io_count, l.ignore_io, l.pause_io_us)).collect();
        assert_eq!(shape, vec![(Baseline::SR, 4096, 100, 0, 0), (Baseline::RW, 4096, 100, 0, 0), (Baseline::SR, 4096, 100, 0, 0),]);
        // Both SR legs read the same window in the first half; the RW leg writes from there up.
        let (sr, rw) = (&legs[0], &legs[1]);
        assert_eq!((legs[2].target_offset, legs[2].target_size), (sr.target_offset, sr.target_size));
        assert_eq!(sr.target_size, 100 * 4096);
        assert!(sr.target_offset + sr.target_size <= GIB / 2);
        assert_eq!(rw.target_offset, sr.target_offset);
        assert_eq!(rw.target_size, GIB - sr.target_offset);
        assert!(p.runs[0].writes() && p.runs[0].keep_series);
        assert_eq!(p.runs[0].parameters()["legs"], "SR,RW,SR");
    }
}
