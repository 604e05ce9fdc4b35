//! CPU lists at the edge of the id range. Found by the `cpuset` fuzz target (issue 15): a
//! CPU topology may name CPU 4294967295 (the largest u32, which the annotation accepts),
//! and writing a set ending there as a CPU list overflowed: a panic in a debug build, and in
//! a release build the list `"4294967295-0"`, a decreasing range that neither berth nor
//! Koordinator reads back, written into a pod's `resource-status`.

use std::collections::BTreeSet;

use berth_api::annotations::{format_cpu_list, parse_cpu_list};

#[test]
fn the_largest_cpu_id_is_written_and_read_back() {
    for (ids, text) in [
        (vec![u32::MAX], "4294967295"),
        (vec![u32::MAX - 1, u32::MAX], "4294967294-4294967295"),
        (
            vec![0, 1, u32::MAX - 2, u32::MAX],
            "0-1,4294967293,4294967295",
        ),
        (
            vec![5, u32::MAX - 3, u32::MAX - 2, u32::MAX - 1, u32::MAX],
            "5,4294967292-4294967295",
        ),
    ] {
        let set: BTreeSet<u32> = ids.into_iter().collect();
        assert_eq!(format_cpu_list(&set), text);
        assert_eq!(parse_cpu_list(text), Ok(set), "{text}");
    }
}
