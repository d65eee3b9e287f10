//! Device formats that put the target in a known state (spec §6.1): the original's random format
//! (`rndFormat.cpp`: every block written exactly once, in random order, 9 phases of halving IO
//! size) and the portable port's sequential format.
//!
//! Both are pure generators of IO lists; the engine executes them like any other run. To add a
//! format (e.g. TRIM via BLKDISCARD), add a [`FormatKind`] variant and a generator here, then a
//! match arm in `engine::run_one`.

use crate::pattern::{Io, Mode, BLOCK};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Which format to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FormatKind {
    /// Every block once, random order, 9 phases (default in the portable port).
    Random,
    /// Whole device, 128 KiB sequential writes.
    Sequential,
}

impl FormatKind {
    /// "random"/"sequential".
    pub fn as_str(self) -> &'static str {
        match self {
            FormatKind::Random => "random",
            FormatKind::Sequential => "sequential",
        }
    }
}

/// Number of phases of the random format (§6.1).
pub const FORMAT_PHASES: u32 = 9;

/// IO size of phase `k` (0-based): 128 KiB halved each phase, never below the logical block size.
pub fn phase_io_size(k: u32, logical_block: u64) -> u64 {
    (BLOCK >> k.min(63)).max(logical_block.max(1))
}

/// Sequential format: `[0, size)` (rounded down to `logical_block`) in 128 KiB writes; the tail is
/// one shorter write.
pub fn sequential_format(size: u64, logical_block: u64) -> Vec<Io> {
    let lb = logical_block.max(1);
    let end = size / lb * lb;
    let mut out = Vec::with_capacity((end / BLOCK + 1) as usize);
    let mut off = 0;
    while off < end {
        let len = BLOCK.min(end - off);
        out.push(Io { offset: off, len, mode: Mode::Write });
        off += len;
    }
    out
}

/// Random format (§6.1): phase k writes ≈ 1/9 of the device in IOs of [`phase_io_size`], each
/// drawn uniformly without replacement from the table of not-yet-written slots of that size; the
/// last phase writes everything left. Every byte of `[0, size)` (rounded down to `logical_block`)
/// is written exactly once. Memory: one `(u64, u64)` per unwritten slot of the current phase.
pub fn random_format(size: u64, logical_block: u64, seed: u64) -> Vec<Io> {
    let lb = logical_block.max(1);
    let end = size / lb * lb;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let per_phase = end / FORMAT_PHASES as u64;
    // Unwritten regions, each of arbitrary length (a multiple of lb).
    let mut regions: Vec<(u64, u64)> = if end > 0 { vec![(0, end)] } else { Vec::new() };
    let mut out = Vec::new();
    for k in 0..FORMAT_PHASES {
        let s = phase_io_size(k, lb);
        // The table of this phase: every s-sized slot of every region; remainders carry over.
        let mut table: Vec<u64> = Vec::new();
        let mut carry: Vec<(u64, u64)> = Vec::new();
        for &(off, len) in &regions {
            let n = len / s;
            table.extend((0..n).map(|j| off + j * s));
            if len % s != 0 {
                carry.push((off + n * s, len % s));
            }
        }
        let last = k + 1 == FORMAT_PHASES;
        let want = if last { table.len() } else { (((per_phase + s / 2) / s) as usize).min(table.len()) };
        // Partial Fisher–Yates: the first `want` entries become a uniform sample without replacement.
        for i in 0..want {
            let j = rng.random_range(i..table.len());
            table.swap(i, j);
            out.push(Io { offset: table[i], len: s, mode: Mode::Write });
        }
        regions = table[want..].iter().map(|&o| (o, s)).chain(carry).collect();
    }
    // Anything still unwritten (only possible if lb does not divide the phase sizes) goes last.
    for (off, len) in regions {
        out.push(Io { offset: off, len, mode: Mode::Write });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_exact_cover(ios: &[Io], end: u64) {
        let mut v: Vec<(u64, u64)> = ios.iter().map(|io| (io.offset, io.len)).collect();
        v.sort();
        let mut pos = 0;
        for (o, l) in v {
            assert_eq!(o, pos, "gap or overlap at {pos}");
            pos += l;
        }
        assert_eq!(pos, end);
    }

    #[test]
    fn phase_sizes_halve_and_clamp() {
        let s: Vec<u64> = (0..9).map(|k| phase_io_size(k, 512)).collect();
        assert_eq!(s, vec![131072, 65536, 32768, 16384, 8192, 4096, 2048, 1024, 512]);
        let s4: Vec<u64> = (0..9).map(|k| phase_io_size(k, 4096)).collect();
        assert_eq!(s4, vec![131072, 65536, 32768, 16384, 8192, 4096, 4096, 4096, 4096]);
    }

    #[test]
    fn random_format_writes_every_block_once() {
        let size = 9 * BLOCK * 4 + 3 * 512; // not a multiple of 128 KiB on purpose
        let ios = random_format(size, 512, 1);
        assert_exact_cover(&ios, size);
        // Phase 1 is 128 KiB IOs covering ≈ 1/9 of the device (4 of 36 blocks).
        assert_eq!(ios.iter().take_while(|io| io.len == BLOCK).count(), 4);
        // IO sizes never increase along the sequence.
        assert!(ios.windows(2).all(|w| w[0].len >= w[1].len));
        assert_eq!(ios.last().unwrap().len, 512);
        // Deterministic from the seed, different with another seed.
        assert_eq!(ios, random_format(size, 512, 1));
        assert_ne!(ios, random_format(size, 512, 2));
        // 4Kn device: nothing below 4 KiB.
        let ios4 = random_format(4 << 20, 4096, 3);
        assert_exact_cover(&ios4, 4 << 20);
        assert!(ios4.iter().all(|io| io.len >= 4096 && io.offset % 4096 == 0));
    }

    #[test]
    fn sequential_format_covers_device() {
        let ios = sequential_format(3 * BLOCK + 1024 + 100, 512);
        let got: Vec<(u64, u64)> = ios.iter().map(|io| (io.offset, io.len)).collect();
        assert_eq!(got, vec![(0, BLOCK), (BLOCK, BLOCK), (2 * BLOCK, BLOCK), (3 * BLOCK, 1024)]);
    }
}
