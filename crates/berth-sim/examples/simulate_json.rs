//! `berth simulate FILE... -o json` without the command line's other crates (kube-rs, clap):
//! a release build of only berth-core and berth-sim, for measuring the simulator with
//! `/usr/bin/time -v` or callgrind on machines where building the whole binary is slow.
//!
//! `cargo run --release -p berth-sim --example simulate_json -- FILE... > out.json`

use berth_sim::{run, Format, Options};

fn main() {
    let options = Options {
        files: std::env::args().skip(1).collect(),
        output: Format::Json,
        ..Options::default()
    };
    let out = run(&options, &mut std::io::stdin().lock());
    print!("{}", out.stdout);
    eprint!("{}", out.stderr);
    std::process::exit(out.code);
}
