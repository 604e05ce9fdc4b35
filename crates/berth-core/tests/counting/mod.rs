//! A global allocator that counts heap allocations (and reallocations), for the tests that
//! hold the per-node part of a cycle to allocating nothing. It sees every allocation of the
//! test binary that includes it, so such a binary holds a single test.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Heap allocations so far in this process.
pub fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}

/// Heap allocations made while `f` ran.
pub fn during(f: impl FnOnce()) -> u64 {
    let before = allocations();
    f();
    allocations() - before
}

/// Runs `cycles` scheduling cycles (each must attempt a pod), calling `after` between them
/// (to confirm the cycle's effects), and returns the heap allocations the cycles made and
/// the nodes they filtered: what both allocation tests measure.
pub fn over_cycles(
    s: &mut berth_core::Scheduler,
    cycles: usize,
    mut after: impl FnMut(&mut berth_core::Scheduler),
) -> (u64, u64) {
    let mut total = 0;
    let filtered = s.stats().nodes_filtered;
    let attempts = s.stats().attempts;
    for _ in 0..cycles {
        total += during(|| assert!(s.schedule_next(0)));
        after(s);
    }
    assert_eq!(
        s.stats().attempts - attempts,
        cycles as u64,
        "one cycle each"
    );
    (total, s.stats().nodes_filtered - filtered)
}

/// Confirms every bind the scheduler asked for, as the watch would (the pod comes back
/// with its node), dropping the other effects.
pub fn confirm_binds(s: &mut berth_core::Scheduler) {
    use berth_core::{Effect, Event, Object};
    while let Some(e) = s.poll_effect() {
        if let Effect::Bind { pod, node, .. } = e {
            if let Some(entry) = s.pod(&pod) {
                let mut p = (*entry.info.pod).clone();
                p.spec.get_or_insert_with(Default::default).node_name = Some(node);
                s.handle(0, Event::Applied(Object::Pod(std::sync::Arc::new(p))));
            }
        }
    }
}
