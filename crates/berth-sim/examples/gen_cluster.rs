//! Writes a large `berth simulate` input for measuring the simulator's memory and speed:
//! NODES nodes shaped like `berth bench`'s `node-default` (4 CPU, 32Gi, 110 pods, over ten
//! zones) and PODS pods shaped like `pod-default` (100m, 500Mi), all created at the start.
//!
//! An input file may hold at most 64 MiB, so the pods are split over `pods-K.yaml` files of
//! 200,000 pods each; pass every file to `berth simulate` (nodes first).
//!
//! `cargo run --release -p berth-sim --example gen_cluster -- NODES PODS DIR`

use std::io::{BufWriter, Write};
use std::path::Path;

/// Pods per file: about 150 bytes each, well under the 64 MiB per-file limit.
const PODS_PER_FILE: usize = 200_000;

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = || {
        eprintln!("usage: gen_cluster NODES PODS DIR");
        std::process::exit(2)
    };
    let [nodes, pods, dir] = args.as_slice() else {
        usage()
    };
    let (Ok(nodes), Ok(pods)) = (nodes.parse::<usize>(), pods.parse::<usize>()) else {
        usage()
    };
    let dir = Path::new(dir);
    std::fs::create_dir_all(dir)?;
    let mut out = BufWriter::new(std::fs::File::create(dir.join("nodes.yaml"))?);
    for i in 0..nodes {
        writeln!(
            out,
            "apiVersion: v1\nkind: Node\nmetadata: {{name: node-{i}, labels: {{topology.kubernetes.io/zone: zone-{}}}}}\nstatus: {{allocatable: {{cpu: \"4\", memory: 32Gi, pods: \"110\"}}}}\n---",
            i % 10
        )?;
    }
    out.flush()?;
    for (k, first) in (0..pods).step_by(PODS_PER_FILE).enumerate() {
        let file = dir.join(format!("pods-{k}.yaml"));
        let mut out = BufWriter::new(std::fs::File::create(file)?);
        for i in first..pods.min(first + PODS_PER_FILE) {
            writeln!(
                out,
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: pod-{i}}}\nspec: {{containers: [{{name: c, image: registry.k8s.io/pause:3.10, resources: {{requests: {{cpu: 100m, memory: 500Mi}}}}}}]}}\n---"
            )?;
        }
        out.flush()?;
    }
    Ok(())
}
