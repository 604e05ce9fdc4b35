//! Where `berth simulate`'s memory goes: heap bytes live (and the peak so far) after reading
//! the input, after the run, and after printing the output, counted by a global allocator.
//!
//! `cargo run --release -p berth-sim --example sim_memory -- [-o FORMAT] FILE... > /dev/null`

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use berth_core::Config;
use berth_sim::sim::Hooks;
use berth_sim::{input, output, Format, Simulation};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(live, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn mib(n: usize) -> String {
    format!("{:.1} MiB", n as f64 / f64::from(1 << 20))
}

fn stage(name: &str, start: std::time::Instant) {
    eprintln!(
        "{name:<14} live {:>12}  peak {:>12}  at {:.2}s",
        mib(LIVE.load(Ordering::Relaxed)),
        mib(PEAK.load(Ordering::Relaxed)),
        start.elapsed().as_secs_f64()
    );
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut format = Format::Json;
    if args.first().map(String::as_str) == Some("-o") && args.len() > 1 {
        format = args[1].parse().unwrap_or(Format::Json);
        args.drain(..2);
    }
    let start = std::time::Instant::now();
    let input = match input::read_files(&args, &mut std::io::stdin().lock()) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    stage("read", start);
    let sim = Simulation::run_input(vec![], Config::default(), input, Hooks::default());
    stage("simulated", start);
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = output::write(&sim, format, &mut stdout) {
        eprintln!("error: {e}");
    }
    stage("printed", start);
}
