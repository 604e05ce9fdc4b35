//! A progress bar on standard error for long simulations and benches: drawn only when
//! standard error is a terminal, and only once the work has run for a second (a quick run
//! prints nothing extra; piped or captured output never gets escape codes).

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How long work runs before the bar appears.
pub const SHOW_AFTER: Duration = Duration::from_secs(1);

/// A bar over a known number of steps, or a spinner when the length is unknown.
pub struct Progress {
    bar: ProgressBar,
    started: Instant,
    shown: bool,
    enabled: bool,
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress")
            .field("enabled", &self.enabled)
            .field("shown", &self.shown)
            .finish()
    }
}

impl Progress {
    /// A bar of `len` steps (`None`: a spinner) labelled `what`, drawn on standard error if
    /// it is a terminal.
    pub fn new(what: &str, len: Option<u64>) -> Self {
        Self::with_terminal(what, len, std::io::stderr().is_terminal())
    }

    /// As [`Progress::new`], saying whether standard error is a terminal (tests).
    pub fn with_terminal(what: &str, len: Option<u64>, terminal: bool) -> Self {
        let bar = match len {
            Some(n) => ProgressBar::with_draw_target(Some(n), ProgressDrawTarget::hidden()),
            None => ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden()),
        };
        let style = match len {
            Some(_) => ProgressStyle::with_template(
                "{prefix} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}",
            ),
            None => ProgressStyle::with_template("{prefix} [{elapsed_precise}] {spinner} {msg}"),
        };
        if let Ok(style) = style {
            bar.set_style(style);
        }
        bar.set_prefix(what.to_string());
        Self {
            bar,
            started: Instant::now(),
            shown: false,
            enabled: terminal,
        }
    }

    /// Whether the bar is drawn (a terminal, and running for a second already).
    pub fn is_visible(&self) -> bool {
        self.shown
    }

    fn maybe_show(&mut self) {
        if self.enabled && !self.shown && self.started.elapsed() >= SHOW_AFTER {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
            self.bar.enable_steady_tick(Duration::from_millis(200));
            self.shown = true;
        }
    }

    /// Moves to `pos` with a message (virtual time, pods placed).
    pub fn set(&mut self, pos: u64, message: String) {
        self.bar.set_position(pos);
        self.bar.set_message(message);
        self.maybe_show();
    }

    /// Ticks without moving (work inside one step).
    pub fn tick(&mut self, message: String) {
        self.bar.set_message(message);
        self.maybe_show();
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}

/// Runs `work` with a spinner labelled `what` ticking on its own (for work that reports no
/// progress, such as a bench case): drawn after a second, on a terminal only.
pub fn spin<T>(what: &str, work: impl FnOnce() -> T) -> T {
    let terminal = std::io::stderr().is_terminal();
    if !terminal {
        return work();
    }
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = done.clone();
    let label = what.to_string();
    let handle = std::thread::spawn(move || {
        let started = Instant::now();
        let mut p: Option<Progress> = None;
        while !flag.load(std::sync::atomic::Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
            if started.elapsed() >= SHOW_AFTER {
                let bar = p.get_or_insert_with(|| {
                    let mut b = Progress::with_terminal(&label, None, true);
                    b.started = started;
                    b
                });
                bar.tick(String::new());
            }
        }
    });
    let out = work();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = handle.join();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_drawn_off_a_terminal_or_within_the_first_second() {
        let mut p = Progress::with_terminal("simulate", Some(10), false);
        p.started = Instant::now() - Duration::from_secs(5);
        p.set(3, "x".into());
        assert!(!p.is_visible(), "not a terminal");
        let mut p = Progress::with_terminal("simulate", Some(10), true);
        p.set(1, "x".into());
        assert!(!p.is_visible(), "shown only after a second");
    }
}
