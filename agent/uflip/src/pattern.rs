//! IO patterns: the uFLIP pattern model (spec §1–§3) and its exact LBA functions, in bytes.
//!
//! A [`PatternSpec`] is one process's run: a baseline (SR/RR/SW/RW), a constant IO size, a window
//! `[target_offset, target_offset + target_size)`, and the location modifiers (IOShift, Order,
//! Partitions) or a second pattern for Mix. [`PatternSpec::generate`] turns it into the exact
//! sequence of IOs, before any timing starts, so the IO engine, the fio iolog writer (§10) and the
//! tests all see the same addresses.
//!
//! To add a location modifier: add a field to [`PatternSpec`], check it in
//! [`PatternSpec::validate`], apply it in `sequential_offset`/`random_offset`, and add a
//! hand-computed sequence test at the bottom of this file.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A uFLIP sector (§2): all original parameters are in 512-byte units; wattflip keeps bytes.
pub const SECTOR: u64 = 512;
/// uFLIP BLOCK (§2): 256 sectors = 128 KiB; every target offset chosen by the planner is aligned to it.
pub const BLOCK: u64 = 256 * SECTOR;
/// `MAX_PARTITIONS` of the original (§2).
pub const MAX_PARTITIONS: u64 = 256;
/// `MAX_PARALLEL` of the original (§2).
pub const MAX_PARALLEL: u32 = 32;

/// The four baseline patterns (§1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Baseline {
    /// Sequential read.
    SR,
    /// Random read.
    RR,
    /// Sequential write.
    SW,
    /// Random write.
    RW,
}

impl Baseline {
    /// All baselines in the order used by per-baseline tables (`[SR, RR, SW, RW]`).
    pub const ALL: [Baseline; 4] = [Baseline::SR, Baseline::RR, Baseline::SW, Baseline::RW];

    /// Sequential (SR, SW) or random (RR, RW).
    pub fn is_sequential(self) -> bool {
        matches!(self, Baseline::SR | Baseline::SW)
    }

    /// The mode function of §1: constant per baseline.
    pub fn mode(self) -> Mode {
        match self {
            Baseline::SR | Baseline::RR => Mode::Read,
            Baseline::SW | Baseline::RW => Mode::Write,
        }
    }

    /// Index into per-baseline tables such as [`crate::plan::BaselineTable`].
    pub fn index(self) -> usize {
        match self {
            Baseline::SR => 0,
            Baseline::RR => 1,
            Baseline::SW => 2,
            Baseline::RW => 3,
        }
    }

    /// "SR", "RR", "SW" or "RW".
    pub fn as_str(self) -> &'static str {
        match self {
            Baseline::SR => "SR",
            Baseline::RR => "RR",
            Baseline::SW => "SW",
            Baseline::RW => "RW",
        }
    }

    /// Parse "SR"/"RR"/"SW"/"RW" (case-insensitive).
    pub fn parse(s: &str) -> Option<Baseline> {
        match s.to_ascii_uppercase().as_str() {
            "SR" => Some(Baseline::SR),
            "RR" => Some(Baseline::RR),
            "SW" => Some(Baseline::SW),
            "RW" => Some(Baseline::RW),
            _ => None,
        }
    }
}

impl fmt::Display for Baseline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Read or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Mode {
    /// `pread`.
    Read,
    /// `pwrite` (O_DSYNC).
    Write,
}

impl Mode {
    /// "read"/"write", as in a fio iolog.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Read => "read",
            Mode::Write => "write",
        }
    }
}

/// One IO: byte offset, byte length, mode (§1: the submission time is the closed loop's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Io {
    /// Byte offset on the target.
    pub offset: u64,
    /// Byte length (the pattern's IOSize).
    pub len: u64,
    /// Read or write.
    pub mode: Mode,
}

/// The second pattern of a Mix run (§3.2). Pattern 1 is the enclosing spec's baseline and window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MixSpec {
    /// Base2.
    pub baseline2: Baseline,
    /// Signed ratio: ≥ 0 → IO i is pattern 2 iff `i % (ratio+1) == 0`; < 0 → IO i is pattern 1 iff
    /// `i % (|ratio|+1) == 0`.
    pub ratio: i64,
    /// TOffs2 in bytes.
    pub target_offset2: u64,
    /// TSize2 in bytes.
    pub target_size2: u64,
}

/// One process's pattern (the parameters of §2, in bytes and µs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PatternSpec {
    /// Base.
    pub baseline: Baseline,
    /// IOSize in bytes.
    pub io_size: u64,
    /// IOCount.
    pub io_count: u64,
    /// IgnoreIO: start-up IOs excluded from statistics (§6.3).
    pub ignore_io: u64,
    /// IOShift in bytes (0 ≤ shift ≤ io_size), added to every address (Alignment).
    pub io_shift: u64,
    /// TargetOffset in bytes.
    pub target_offset: u64,
    /// TargetSize in bytes.
    pub target_size: u64,
    /// Order ("Incr"): −1 reverse, 0 in place, 1 sequential, k > 1 gaps.
    pub order: i64,
    /// nbPartition (1 = not partitioned); sequential patterns only.
    pub partitions: u64,
    /// ParDeg of the run this process belongs to (1 = not parallel).
    pub parallel_degree: u32,
    /// PID: this process's index in `0..parallel_degree`.
    pub process_id: u32,
    /// PIO: busy-wait after every IO, µs.
    pub pause_io_us: u64,
    /// BurstIO: IOs per burst (≥ 1).
    pub burst_io: u64,
    /// PBurst: busy-wait after every `burst_io` IOs, µs.
    pub pause_burst_us: u64,
    /// Second pattern (Mix only).
    pub mix: Option<MixSpec>,
    /// Seed of the ChaCha8 stream for random addresses (recorded with the run).
    pub seed: u64,
}

/// A pattern whose parameters cannot produce a valid address sequence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid pattern parameter {parameter}: {reason}; fix the plan value")]
pub struct PatternError {
    /// The offending parameter (spec §2 name).
    pub parameter: &'static str,
    /// What is wrong, with the values.
    pub reason: String,
}

fn perr(parameter: &'static str, reason: String) -> PatternError {
    PatternError { parameter, reason }
}

impl PatternSpec {
    /// A plain pattern: order 1, one partition, no shift, no pause, no mix.
    pub fn new(baseline: Baseline, io_size: u64, io_count: u64, target_offset: u64, target_size: u64) -> Self {
        PatternSpec {
            baseline,
            io_size,
            io_count,
            ignore_io: 0,
            io_shift: 0,
            target_offset,
            target_size,
            order: 1,
            partitions: 1,
            parallel_degree: 1,
            process_id: 0,
            pause_io_us: 0,
            burst_io: 1,
            pause_burst_us: 0,
            mix: None,
            seed: 0,
        }
    }

    /// Whether any IO of this pattern writes.
    pub fn writes(&self) -> bool {
        self.baseline.mode() == Mode::Write || self.mix.as_ref().is_some_and(|m| m.baseline2.mode() == Mode::Write)
    }

    /// Highest byte (exclusive) any IO of this pattern can touch, from the parameters alone.
    pub fn max_extent(&self) -> u64 {
        let first = self.target_offset + self.target_size + self.io_shift;
        match &self.mix {
            Some(m) => first.max(m.target_offset2 + m.target_size2),
            None => first,
        }
    }

    /// Check the parameters against the constraints of §2/§3 so generation cannot misbehave.
    pub fn validate(&self) -> Result<(), PatternError> {
        if self.io_size == 0 {
            return Err(perr("IOSize", "must be > 0".into()));
        }
        if self.io_count == 0 {
            return Err(perr("IOCount", "must be > 0".into()));
        }
        if self.ignore_io >= self.io_count {
            return Err(perr("IgnoreIO", format!("{} must be < IOCount {} (statistics need a running phase)", self.ignore_io, self.io_count)));
        }
        if self.io_shift > self.io_size {
            return Err(perr("IOShift", format!("{} B exceeds IOSize {} B (§2: 0 ≤ IOShift ≤ IOSize)", self.io_shift, self.io_size)));
        }
        if self.burst_io == 0 {
            return Err(perr("BurstIO", "must be ≥ 1".into()));
        }
        if self.target_size < self.io_size {
            return Err(perr("TargetSize", format!("{} B is smaller than IOSize {} B", self.target_size, self.io_size)));
        }
        if let Some(m) = &self.mix {
            if m.target_size2 < self.io_size {
                return Err(perr("TargetSize2", format!("{} B is smaller than IOSize {} B", m.target_size2, self.io_size)));
            }
            return Ok(()); // §3.2: shift, order and partitions do not apply to Mix.
        }
        if self.partitions == 0 || self.partitions > MAX_PARTITIONS || self.partitions > self.io_count {
            return Err(perr("Partitions", format!("{} must be in 1..={} and ≤ IOCount {}", self.partitions, MAX_PARTITIONS, self.io_count)));
        }
        if self.partitions > 1 && self.target_size / self.partitions < self.io_size {
            return Err(perr(
                "Partitions",
                format!("partition size {} B (TargetSize/{}) is below IOSize {} B", self.target_size / self.partitions, self.partitions, self.io_size),
            ));
        }
        if !self.baseline.is_sequential() && self.io_shift > 0 && self.target_size / self.io_size < 2 {
            return Err(perr("TargetSize", "a shifted random pattern needs at least two IOSize slots (§3.1 clamp)".into()));
        }
        if self.order < 0 && !self.target_size.is_multiple_of(self.io_size) {
            return Err(perr("TargetSize", format!("reverse order needs TargetSize ({} B) to be a multiple of IOSize ({} B)", self.target_size, self.io_size)));
        }
        if self.parallel_degree == 0 || self.parallel_degree > MAX_PARALLEL || self.process_id >= self.parallel_degree {
            return Err(perr("ParallelDegree", format!("degree {} / process {} out of range (1..={})", self.parallel_degree, self.process_id, MAX_PARALLEL)));
        }
        Ok(())
    }

    /// Generate the exact IO sequence (§3). Random draws come from ChaCha8 seeded with `self.seed`,
    /// in IO order, so the same spec always gives the same sequence.
    pub fn generate(&self) -> Result<Vec<Io>, PatternError> {
        self.validate()?;
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let cap = usize::try_from(self.io_count).map_err(|_| perr("IOCount", "too large for this host".into()))?;
        let mut ios = Vec::with_capacity(cap);
        match &self.mix {
            None => {
                let mode = self.baseline.mode();
                for i in 0..self.io_count {
                    let offset = if self.baseline.is_sequential() { self.sequential_offset(i) } else { self.random_offset(&mut rng) };
                    ios.push(Io { offset, len: self.io_size, mode });
                }
            }
            Some(m) => {
                // §3.2: separate counters iP1, iP2; IO 0 goes to pattern 2 when ratio ≥ 0.
                let (mut ip1, mut ip2) = (0u64, 0u64);
                let r = m.ratio.unsigned_abs() + 1;
                for i in 0..self.io_count {
                    let hit = i % r == 0;
                    let second = if m.ratio >= 0 { hit } else { !hit };
                    let (base, to, ts, counter) = if second {
                        (m.baseline2, m.target_offset2, m.target_size2, &mut ip2)
                    } else {
                        (self.baseline, self.target_offset, self.target_size, &mut ip1)
                    };
                    let offset = if base.is_sequential() {
                        to + mul_mod(*counter, self.io_size, ts)
                    } else {
                        to + rng.random_range(0..=(ts / self.io_size - 1)) * self.io_size
                    };
                    *counter += 1;
                    ios.push(Io { offset, len: self.io_size, mode: base.mode() });
                }
            }
        }
        Ok(ios)
    }

    /// §3.1 sequential branch, with the portable port's `LBA %= TS; LBA += TO` (§3.5 bug 1 fixed).
    fn sequential_offset(&self, i: u64) -> u64 {
        let (to, ts, sz, shift) = (self.target_offset, self.target_size, self.io_size, self.io_shift);
        if self.partitions > 1 {
            // Partitioning: round-robin over P partitions, each with its own cursor.
            let p = self.partitions;
            let ps = ts / p;
            let base = ps as u128 * (i % p) as u128 + mul_mod(i / p, sz, ps) as u128 + shift as u128;
            return to + (base % ts as u128) as u64;
        }
        if self.order < 0 {
            // [Proposal] fix of the reverse-order off-by-one: IO 0 is the last IOSize of the window
            // (area_end − IOSize), then downwards, wrapping inside the window.
            // validate() guarantees TS % IOSize == 0, so m ≤ TS − IOSize and nothing underflows.
            let m = (self.order.unsigned_abs() as u128 * i as u128 * sz as u128 % ts as u128) as u64;
            return to + (ts - sz - m) + shift;
        }
        let base = self.order as u128 * i as u128 * sz as u128 + shift as u128;
        to + (base % ts as u128) as u64
    }

    /// §3.1 random branch: uniform over IOSize-aligned slots, with replacement; with a shift the
    /// top slot is dropped so the IO stays inside the window ([Proposal] clamp).
    fn random_offset(&self, rng: &mut ChaCha8Rng) -> u64 {
        let slots = self.target_size / self.io_size;
        let top = if self.io_shift > 0 { slots - 2 } else { slots - 1 };
        self.target_offset + rng.random_range(0..=top) * self.io_size + self.io_shift
    }
}

/// `(a * b) % m` without overflow; `m == 0` is treated as "no modulo".
fn mul_mod(a: u64, b: u64, m: u64) -> u64 {
    if m == 0 {
        return a.saturating_mul(b);
    }
    (a as u128 * b as u128 % m as u128) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: u64 = 1024;

    fn offs(spec: &PatternSpec) -> Vec<u64> {
        spec.generate().unwrap().iter().map(|io| io.offset).collect()
    }

    #[test]
    fn sequential_plain() {
        let s = PatternSpec::new(Baseline::SR, 32 * K, 4, 1024 * K, 1024 * K);
        assert_eq!(offs(&s), vec![1024 * K, 1056 * K, 1088 * K, 1120 * K]);
        assert!(s.generate().unwrap().iter().all(|io| io.len == 32 * K && io.mode == Mode::Read));
    }

    #[test]
    fn locality_wraps_inside_window() {
        // TS = 3·IOSize, 7 IOs: 0,1,2,0,1,2,0 slots after TO (circular, §3.1).
        let s = PatternSpec::new(Baseline::SW, 4 * K, 7, 256 * K, 12 * K);
        assert_eq!(offs(&s), vec![256 * K, 260 * K, 264 * K, 256 * K, 260 * K, 264 * K, 256 * K]);
        assert!(s.generate().unwrap().iter().all(|io| io.mode == Mode::Write));
    }

    #[test]
    fn window_larger_than_offset_is_not_the_v23_bug() {
        // §3.5 bug 1: v2.3 did (LBA + TO) % (TS − IOSize); with TO > TS that folds IOs below TO.
        let s = PatternSpec::new(Baseline::SR, 512, 3, 1_000_448, 1024);
        assert_eq!(offs(&s), vec![1_000_448, 1_000_960, 1_000_448]);
    }

    #[test]
    fn alignment_shift_sequential_and_random() {
        let mut s = PatternSpec::new(Baseline::SW, 32 * K, 3, 128 * K, 128 * K);
        s.io_shift = 512;
        assert_eq!(offs(&s), vec![128 * K + 512, 160 * K + 512, 192 * K + 512]);
        // Random with shift: 2 slots → clamp leaves only slot 0, so every IO is TO + shift.
        let mut r = PatternSpec::new(Baseline::RR, 32 * K, 5, 128 * K, 64 * K);
        r.io_shift = 4 * K;
        assert_eq!(offs(&r), vec![132 * K; 5]);
        // Shift equal to IOSize is allowed (§2: 0 ≤ IOShift ≤ IOSize).
        let mut f = PatternSpec::new(Baseline::SR, 4 * K, 2, 0, 16 * K);
        f.io_shift = 4 * K;
        assert_eq!(offs(&f), vec![4 * K, 8 * K]);
    }

    #[test]
    fn random_single_slot_and_range() {
        let r = PatternSpec::new(Baseline::RW, 8 * K, 4, 64 * K, 8 * K);
        assert_eq!(offs(&r), vec![64 * K; 4]);
        let mut big = PatternSpec::new(Baseline::RR, 4 * K, 2000, 1024 * K, 64 * K);
        big.seed = 7;
        let o = offs(&big);
        assert!(o.iter().all(|&x| x >= 1024 * K && x + 4 * K <= 1088 * K && (x - 1024 * K).is_multiple_of(4 * K)));
        // Every one of the 16 slots is drawn (with replacement) in 2000 draws, and the sequence is
        // reproducible from the seed.
        let mut distinct = o.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), 16);
        assert_eq!(o, offs(&big));
        big.seed = 8;
        assert_ne!(o, offs(&big));
    }

    #[test]
    fn random_shift_clamp_never_leaves_window() {
        let mut r = PatternSpec::new(Baseline::RR, 4 * K, 3000, 0, 16 * K);
        r.io_shift = 512;
        let o = offs(&r);
        assert!(o.iter().all(|&x| x + 4 * K <= 16 * K));
        let mut d = o.clone();
        d.sort();
        d.dedup();
        assert_eq!(d, vec![512, 4 * K + 512, 8 * K + 512]);
    }

    #[test]
    fn order_reverse_in_place_and_gaps() {
        let mut s = PatternSpec::new(Baseline::SW, 4 * K, 5, 100 * K, 16 * K);
        s.order = -1;
        // [Proposal]: starts at area_end − IOSize, goes down, wraps to the top.
        assert_eq!(offs(&s), vec![112 * K, 108 * K, 104 * K, 100 * K, 112 * K]);
        s.order = 0;
        assert_eq!(offs(&s), vec![100 * K; 5]);
        let mut g = PatternSpec::new(Baseline::SR, 4 * K, 4, 0, 3 * 4 * K * 4);
        g.order = 3;
        assert_eq!(offs(&g), vec![0, 12 * K, 24 * K, 36 * K]);
        g.order = 1;
        assert_eq!(offs(&g), vec![0, 4 * K, 8 * K, 12 * K]);
        // Reverse with a window that is not a multiple of IOSize is refused, naming the parameter.
        s.order = -1;
        s.target_size = 18 * K;
        assert_eq!(s.generate().unwrap_err().parameter, "TargetSize");
    }

    #[test]
    fn partitioning_cursors() {
        // P = 4, TS = 64 KiB → PS = 16 KiB; IOSize 4 KiB; round-robin with a cursor per partition.
        let mut s = PatternSpec::new(Baseline::SW, 4 * K, 10, 1024 * K, 64 * K);
        s.partitions = 4;
        let base = 1024 * K;
        let expect: Vec<u64> = [0, 16, 32, 48, 4, 20, 36, 52, 8, 24].iter().map(|k| base + k * K).collect();
        assert_eq!(offs(&s), expect);
        // Cursor wraps within its partition: PS = 8 KiB holds 2 IOs.
        let mut w = PatternSpec::new(Baseline::SR, 4 * K, 6, 0, 16 * K);
        w.partitions = 2;
        assert_eq!(offs(&w), vec![0, 8 * K, 4 * K, 12 * K, 0, 8 * K]);
        // With a shift every partition address moves by it.
        w.io_shift = 1024;
        assert_eq!(offs(&w), vec![1024, 9 * K, 5 * K, 13 * K, 1024, 9 * K]);
    }

    #[test]
    fn mix_positive_ratio() {
        // SR (pattern 1, window at 0) mixed with SW (pattern 2, window at 1 MiB), ratio 2:
        // IO 0 → p2, IOs 1,2 → p1, IO 3 → p2, ...
        let mut s = PatternSpec::new(Baseline::SR, 4 * K, 7, 0, 1024 * K);
        s.mix = Some(MixSpec { baseline2: Baseline::SW, ratio: 2, target_offset2: 1024 * K, target_size2: 8 * K });
        let ios = s.generate().unwrap();
        let got: Vec<(u64, Mode)> = ios.iter().map(|io| (io.offset, io.mode)).collect();
        assert_eq!(
            got,
            vec![
                (1024 * K, Mode::Write),
                (0, Mode::Read),
                (4 * K, Mode::Read),
                (1028 * K, Mode::Write),
                (8 * K, Mode::Read),
                (12 * K, Mode::Read),
                (1024 * K, Mode::Write), // pattern 2's window (2 IOs) wraps
            ]
        );
    }

    #[test]
    fn mix_zero_and_negative_ratio() {
        let mut s = PatternSpec::new(Baseline::SR, 4 * K, 4, 0, 1024 * K);
        s.mix = Some(MixSpec { baseline2: Baseline::SW, ratio: 0, target_offset2: 2048 * K, target_size2: 1024 * K });
        // Ratio 0: every IO is pattern 2.
        let got: Vec<(u64, Mode)> = s.generate().unwrap().iter().map(|io| (io.offset, io.mode)).collect();
        assert_eq!(got, vec![(2048 * K, Mode::Write), (2052 * K, Mode::Write), (2056 * K, Mode::Write), (2060 * K, Mode::Write)]);
        // Ratio −2: IO i is pattern 1 iff i % 3 == 0.
        s.io_count = 7;
        s.mix = Some(MixSpec { baseline2: Baseline::SW, ratio: -2, target_offset2: 2048 * K, target_size2: 1024 * K });
        let got: Vec<(u64, Mode)> = s.generate().unwrap().iter().map(|io| (io.offset, io.mode)).collect();
        assert_eq!(
            got,
            vec![
                (0, Mode::Read),
                (2048 * K, Mode::Write),
                (2052 * K, Mode::Write),
                (4 * K, Mode::Read),
                (2056 * K, Mode::Write),
                (2060 * K, Mode::Write),
                (8 * K, Mode::Read),
            ]
        );
    }

    #[test]
    fn mix_random_subpattern_ignores_shift() {
        let mut s = PatternSpec::new(Baseline::RR, 4 * K, 4, 0, 4 * K);
        s.io_shift = 512; // §3.2: not applied to Mix
        s.mix = Some(MixSpec { baseline2: Baseline::RW, ratio: 1, target_offset2: 8 * K, target_size2: 4 * K });
        let got: Vec<(u64, Mode)> = s.generate().unwrap().iter().map(|io| (io.offset, io.mode)).collect();
        assert_eq!(got, vec![(8 * K, Mode::Write), (0, Mode::Read), (8 * K, Mode::Write), (0, Mode::Read)]);
    }

    #[test]
    fn validation_names_parameters() {
        let mut s = PatternSpec::new(Baseline::SR, 4 * K, 4, 0, 16 * K);
        s.io_shift = 8 * K;
        assert_eq!(s.validate().unwrap_err().parameter, "IOShift");
        let mut p = PatternSpec::new(Baseline::SR, 4 * K, 4, 0, 16 * K);
        p.partitions = 5;
        assert_eq!(p.validate().unwrap_err().parameter, "Partitions");
        let mut i = PatternSpec::new(Baseline::SR, 4 * K, 4, 0, 16 * K);
        i.ignore_io = 4;
        assert_eq!(i.validate().unwrap_err().parameter, "IgnoreIO");
        let t = PatternSpec::new(Baseline::SR, 4 * K, 4, 0, 2 * K);
        assert_eq!(t.validate().unwrap_err().parameter, "TargetSize");
    }
}
