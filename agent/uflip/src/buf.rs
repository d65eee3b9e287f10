//! The IO buffer of the engine and of the target's verification reads: aligned for O_DIRECT
//! without `unsafe`. A leaf (it imports nothing of the crate), so both can use it without the
//! target depending on the engine; another buffer shape goes here beside it.

/// An IO buffer aligned for O_DIRECT without `unsafe`: a `Vec<u8>` over-allocated by `align` bytes
/// and sliced at the first aligned address. Allocated once per process per run, before timing.
pub struct AlignedBuf {
    raw: Vec<u8>,
    off: usize,
    len: usize,
}

impl AlignedBuf {
    /// `len` usable bytes starting at an address that is a multiple of `align` (a power of two).
    pub fn new(len: usize, align: usize) -> std::io::Result<Self> {
        let align = align.max(1).next_power_of_two();
        let raw = vec![0u8; len + align];
        let off = raw.as_ptr().align_offset(align);
        if off == usize::MAX || off + len > raw.len() {
            return Err(std::io::Error::other(format!("cannot align a {len}-byte buffer to {align}")));
        }
        Ok(AlignedBuf { raw, off, len })
    }
    /// The aligned bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.raw[self.off..self.off + self.len]
    }
    /// The aligned bytes, mutable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.raw[self.off..self.off + self.len]
    }
    /// Fill with pseudo-random bytes (xorshift64*), so writes are not trivially compressible.
    pub fn fill_pattern(&mut self, seed: u64) {
        let mut x = seed | 1;
        for chunk in self.as_mut_slice().chunks_mut(8) {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let v = x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_buffer_is_aligned() {
        for align in [512usize, 4096, 65536] {
            let b = AlignedBuf::new(12345, align).unwrap();
            assert_eq!(b.as_slice().as_ptr() as usize % align, 0);
            assert_eq!(b.as_slice().len(), 12345);
        }
        let mut b = AlignedBuf::new(16, 4096).unwrap();
        b.fill_pattern(1);
        assert!(b.as_slice().iter().any(|&x| x != 0));
    }
}
