//! Fresh-area allocator (spec §5, the original's `blocAlloc`): a free list of BLOCK-aligned device
//! areas that no sequential-write run has used since the last format.
//!
//! The planner asks it for areas in run order (§7); an area handed out is never handed out again, so
//! no two sequential-write runs of one plan overlap. To add a placement strategy, add a method that
//! picks a free extent and call [`FreshAreaAllocator::take`] on it.

use crate::pattern::BLOCK;
use serde::{Deserialize, Serialize};

/// A half-open byte range `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Area {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
}

impl Area {
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.end - self.start
    }
    /// Whether the area is empty.
    pub fn is_empty(&self) -> bool {
        self.end <= self.start
    }
    /// Whether two areas share at least one byte.
    pub fn overlaps(&self, other: &Area) -> bool {
        self.start < other.end && other.start < self.end
    }
}

/// Free list over `[0, device_size)` with BLOCK granularity (§2: target offsets are BLOCK-aligned).
#[derive(Debug, Clone)]
pub struct FreshAreaAllocator {
    free: Vec<Area>, // sorted, disjoint
}

/// Round `x` up to a multiple of BLOCK.
pub fn round_up_block(x: u64) -> u64 {
    x.div_ceil(BLOCK).saturating_mul(BLOCK)
}

impl FreshAreaAllocator {
    /// A fresh device: everything below the BLOCK-rounded-down size is free.
    pub fn new(device_size: u64) -> Self {
        let end = device_size / BLOCK * BLOCK;
        let free = if end > 0 { vec![Area { start: 0, end }] } else { Vec::new() };
        FreshAreaAllocator { free }
    }

    /// The free extents (sorted).
    pub fn free(&self) -> &[Area] {
        &self.free
    }

    /// Lowest free address, if anything is free.
    pub fn lowest_free(&self) -> Option<u64> {
        self.free.first().map(|a| a.start)
    }

    /// `MemSearch` best fit: the smallest free extent that holds `size` (rounded up to BLOCK); the
    /// area is taken from that extent's start.
    pub fn alloc_best_fit(&mut self, size: u64) -> Option<Area> {
        let size = round_up_block(size.max(1));
        let idx = self.free.iter().enumerate().filter(|(_, a)| a.len() >= size).min_by_key(|(_, a)| (a.len(), a.start)).map(|(i, _)| i)?;
        let start = self.free[idx].start;
        self.take(Area { start, end: start + size })
    }

    /// `MemAllocNearestAfterA`: the first free area of `size` starting at or after `addr`
    /// (BLOCK-aligned upwards); falls back to best fit when nothing fits above `addr`.
    pub fn alloc_nearest_after(&mut self, addr: u64, size: u64) -> Option<Area> {
        let size = round_up_block(size.max(1));
        let addr = round_up_block(addr);
        let found = self.free.iter().find_map(|a| {
            let s = a.start.max(addr);
            (s < a.end && a.end - s >= size).then_some(s)
        });
        match found {
            Some(start) => self.take(Area { start, end: start + size }),
            None => self.alloc_best_fit(size),
        }
    }

    /// Remove `area` from the free list; `None` if any part of it is not free.
    pub fn take(&mut self, area: Area) -> Option<Area> {
        let idx = self.free.iter().position(|a| a.start <= area.start && area.end <= a.end)?;
        let ext = self.free.remove(idx);
        let mut ins = idx;
        if ext.start < area.start {
            self.free.insert(ins, Area { start: ext.start, end: area.start });
            ins += 1;
        }
        if area.end < ext.end {
            self.free.insert(ins, Area { start: area.end, end: ext.end });
        }
        Some(area)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_fit_and_nearest() {
        let mut a = FreshAreaAllocator::new(10 * BLOCK + 100);
        assert_eq!(a.free(), &[Area { start: 0, end: 10 * BLOCK }]);
        let x = a.alloc_best_fit(1).unwrap();
        assert_eq!(x, Area { start: 0, end: BLOCK });
        let y = a.alloc_nearest_after(5 * BLOCK + 1, 2 * BLOCK).unwrap();
        assert_eq!(y, Area { start: 6 * BLOCK, end: 8 * BLOCK });
        // Free: [1,6) and [8,10) blocks; best fit for 2 blocks is the smaller extent at 8.
        let z = a.alloc_best_fit(2 * BLOCK).unwrap();
        assert_eq!(z, Area { start: 8 * BLOCK, end: 10 * BLOCK });
        // Nothing above 9 blocks → falls back to best fit at 1.
        let w = a.alloc_nearest_after(9 * BLOCK, BLOCK).unwrap();
        assert_eq!(w, Area { start: BLOCK, end: 2 * BLOCK });
        assert_eq!(a.alloc_best_fit(5 * BLOCK), None);
        assert_eq!(a.lowest_free(), Some(2 * BLOCK));
    }
}
