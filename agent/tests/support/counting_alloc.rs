//! A global allocator that counts the heap allocations (and reallocations) made by threads that
//! opted in with [`count_here`], forwarding everything to `System`. Shared by
//! `agent/tests/sampler_alloc.rs` and `agent/examples/sampler_bench.rs` through `#[path]`, so
//! "nothing allocated per tick" is measured the same way in the test and the benchmark. The
//! including crate declares it `#[global_allocator]` and allows `unsafe_code` for it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

pub struct Counting;

/// Allocations counted so far on opted-in threads.
pub static ALLOCS: AtomicU64 = AtomicU64::new(0);

/// Bytes allocated minus bytes freed on opted-in threads (wrapping): the difference between two
/// readings is the heap a single-threaded piece of code kept.
pub static LIVE_BYTES: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static COUNT_HERE: Cell<bool> = const { Cell::new(false) };
}

/// Starts (true) or stops (false) counting the calling thread's allocations.
pub fn count_here(on: bool) {
    COUNT_HERE.with(|c| c.set(on));
}

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNT_HERE.with(Cell::get) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
            LIVE_BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract is passed through.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if COUNT_HERE.with(Cell::get) {
            LIVE_BYTES.fetch_sub(layout.size() as u64, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract is passed through.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNT_HERE.with(Cell::get) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
            LIVE_BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
            LIVE_BYTES.fetch_sub(layout.size() as u64, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract is passed through.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
