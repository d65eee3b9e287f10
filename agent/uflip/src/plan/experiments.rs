//! The nine micro-benchmarks ([`Bench`]) and the 34 experiments of spec §4.2 in their run order
//! ([`experiments`]). A new micro-benchmark is a [`Bench`] variant (name, code, varying parameter)
//! and its experiments at the right order number here.

use super::PlanError;
use crate::pattern::Baseline;
use serde::{Deserialize, Serialize};
use std::fmt;

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
