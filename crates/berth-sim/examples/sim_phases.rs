//! Where `berth simulate`'s time goes: the CPU time of reading the input (files, YAML,
//! strict checks, typed objects), of the run (scheduling on the virtual clock), of writing
//! the output and of dropping the final state, measured in-process, RUNS times over.
//!
//! CPU time is the main thread's (`/proc/thread-self/schedstat`, nanoseconds on a CPU), so
//! other jobs on a shared machine lengthen the wall time but not the numbers. The output
//! goes to a sink, as to `/dev/null`. The line per run and the medians are on standard
//! error; the share is (read + output) / (read + run + output).
//!
//! `cargo run --release -p berth-sim --example sim_phases -- [-o FORMAT] [-n RUNS] [--read-only] FILE...`
//! (`--read-only`: only read the input, for profiling that part.)

use std::time::Instant;

use berth_core::Config;
use berth_sim::sim::Hooks;
use berth_sim::{input, output, Format, Simulation};

/// Nanoseconds this thread has been on a CPU.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

#[derive(Default, Clone, Copy)]
struct Phases {
    read: f64,
    run: f64,
    output: f64,
    drop: f64,
    wall: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut format = Format::Table;
    let mut runs = 3;
    let mut read_only = false;
    loop {
        match args.first().map(String::as_str) {
            Some("-o") if args.len() > 1 => {
                format = args[1].parse().unwrap_or(Format::Table);
                args.drain(..2);
            }
            Some("-n") if args.len() > 1 => {
                runs = args[1].parse().unwrap_or(3);
                args.drain(..2);
            }
            Some("--read-only") => {
                read_only = true;
                args.remove(0);
            }
            _ => break,
        }
    }
    let mut all = Vec::new();
    let mut pods = 0usize;
    for i in 0..runs {
        let wall = Instant::now();
        let t0 = cpu_ns();
        let input = match input::read_files(&args, &mut std::io::stdin().lock()) {
            Ok(i) => i,
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(2);
            }
        };
        pods = input
            .items
            .iter()
            .filter(|(_, i)| i.kind_name() == "Pod")
            .count();
        let t1 = cpu_ns();
        if read_only {
            drop(input);
            eprintln!("run {i}: read {:.3}s (cpu)", (t1 - t0) as f64 / 1e9);
            continue;
        }
        let sim = Simulation::run_input(vec![], Config::default(), input, Hooks::default());
        let t2 = cpu_ns();
        if let Err(e) = output::write(&sim, format, &mut std::io::sink()) {
            eprintln!("error: {e}");
        }
        let t3 = cpu_ns();
        drop(sim);
        let t4 = cpu_ns();
        let s = |a: u64, b: u64| (b - a) as f64 / 1e9;
        let p = Phases {
            read: s(t0, t1),
            run: s(t1, t2),
            output: s(t2, t3),
            drop: s(t3, t4),
            wall: wall.elapsed().as_secs_f64(),
        };
        let total = p.read + p.run + p.output;
        eprintln!(
            "run {i}: read {:.3}s  run {:.3}s  output {:.3}s  drop {:.3}s  (cpu)  wall {:.3}s  share {:.1}%",
            p.read,
            p.run,
            p.output,
            p.drop,
            p.wall,
            100.0 * (p.read + p.output) / total
        );
        all.push(p);
    }
    if all.is_empty() {
        return;
    }
    let m = |f: fn(&Phases) -> f64| median(all.iter().map(f).collect());
    let (read, run, out, drop) = (m(|p| p.read), m(|p| p.run), m(|p| p.output), m(|p| p.drop));
    let total = read + run + out;
    let us = |x: f64| 1e6 * x / pods.max(1) as f64;
    eprintln!(
        "median of {runs}, {pods} pods: read {read:.3}s ({:.1}%, {:.1} us/pod)  run {run:.3}s ({:.1}%, {:.1} us/pod)  output {out:.3}s ({:.1}%, {:.1} us/pod)  drop {drop:.3}s  parse+output share {:.1}%  pods/s {:.0}",
        100.0 * read / total,
        us(read),
        100.0 * run / total,
        us(run),
        100.0 * out / total,
        us(out),
        100.0 * (read + out) / total,
        pods as f64 / total
    );
}
