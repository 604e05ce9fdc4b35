//! `berth simulate FILE... -o json` without the command line's other crates (kube-rs, clap):
//! a release build of only berth-core and berth-sim, for measuring the simulator with
//! `/usr/bin/time -v` or callgrind on machines where building the whole binary is slow.
//!
//! `cargo run --release -p berth-sim --example simulate_json -- [-o FORMAT] FILE... > out.json`
//!
//! `-o table` or `-o yaml` first prints that format instead.

use berth_sim::observe::{run_to, Extras};
use berth_sim::{Format, Options};

fn main() {
    let mut files: Vec<String> = std::env::args().skip(1).collect();
    let mut output = Format::Json;
    if files.first().map(String::as_str) == Some("-o") && files.len() > 1 {
        match files[1].parse() {
            Ok(f) => output = f,
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(2);
            }
        }
        files.drain(..2);
    }
    let options = Options {
        files,
        output,
        ..Options::default()
    };
    // Streamed to standard output, as `berth simulate` does.
    let out = run_to(
        &options,
        &Extras::default(),
        &mut std::io::stdin().lock(),
        &mut std::io::stdout().lock(),
    );
    eprint!("{}", out.stderr);
    std::process::exit(out.code);
}
