//! The per-node part of a scheduling cycle allocates nothing: a cycle on a cluster twice as
//! large (twice the nodes filtered and scored) makes exactly as many heap allocations.
//!
//! A counting global allocator sees every allocation of this test binary, so the file holds
//! a single test (no other test thread allocates while it counts).

use berth_core::{fixtures, Config, Event, Object, Profile, Scheduler};

mod counting;

/// A cluster of `nodes` default nodes with `pods` pending default pods, after `warm`
/// cycles (scratch buffers grown to their working size).
fn cluster(nodes: usize, pods: usize, warm: usize) -> Scheduler {
    let mut s = Scheduler::new(
        vec![Profile::default_profile()],
        Config {
            seed: 1,
            ..Config::default()
        },
    );
    for n in fixtures::nodes(nodes) {
        s.handle(0, Event::Applied(Object::Node(n)));
    }
    for p in fixtures::pods("alloc", pods) {
        s.handle(0, Event::Applied(Object::Pod(p)));
    }
    while s.poll_effect().is_some() {}
    for _ in 0..warm {
        assert!(s.schedule_next(0));
        counting::confirm_binds(&mut s);
    }
    s
}

/// Heap allocations of `cycles` scheduling cycles (bind confirmations not counted), and
/// the nodes they filtered.
fn allocations(s: &mut Scheduler, cycles: usize) -> (u64, u64) {
    counting::over_cycles(s, cycles, counting::confirm_binds)
}

#[test]
fn a_cycle_allocates_the_same_on_twice_the_nodes() {
    // Below 100 nodes every node is filtered; at 100 too (percentageOfNodesToScore's
    // floor of 100 feasible nodes).
    let mut small = cluster(50, 40, 10);
    let mut large = cluster(100, 40, 10);
    let (a_small, f_small) = allocations(&mut small, 20);
    let (a_large, f_large) = allocations(&mut large, 20);
    assert!(
        f_large >= 2 * f_small - 20,
        "{f_small} vs {f_large} nodes filtered"
    );
    assert_eq!(
        a_small, a_large,
        "allocations per 20 cycles: {a_small} filtering {f_small} nodes, {a_large} filtering {f_large}"
    );
}
