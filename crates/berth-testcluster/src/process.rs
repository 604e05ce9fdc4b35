//! Child processes (etcd, kube-apiserver) that cannot outlive the test process.
//!
//! A test that panics, is killed, or keeps its cluster in a `static` never runs `Drop`, so
//! the children are started with `PR_SET_PDEATHSIG(SIGKILL)`: the kernel kills them when
//! their parent goes. That signal is tied to the *thread* that forked the child, not to the
//! process, so every child is forked by one spawner thread that lives as long as the test
//! process does (a test's own thread ends with the test; a cluster shared between tests
//! must survive it).

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

type Reply = mpsc::Sender<io::Result<Child>>;

/// The spawner thread's inbox; `None` if the thread could not be started.
static SPAWNER: OnceLock<Option<Mutex<mpsc::Sender<(Command, Reply)>>>> = OnceLock::new();

/// A running child whose output goes to a log file.
#[derive(Debug)]
pub(crate) struct Proc {
    pub(crate) name: &'static str,
    child: Child,
}

impl Proc {
    /// Starts `program args...` with stdout and stderr appended to `log`.
    pub(crate) fn start(
        name: &'static str,
        program: &Path,
        args: &[String],
        log: &Path,
    ) -> io::Result<Proc> {
        let out = File::options().create(true).append(true).open(log)?;
        let err = out.try_clone()?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            // The API server would otherwise pick up a developer's proxy settings for its
            // own loopback calls to etcd; nothing here should leave the machine.
            .env_remove("HTTP_PROXY")
            .env_remove("HTTPS_PROXY")
            .env_remove("http_proxy")
            .env_remove("https_proxy");
        let parent = std::process::id();
        // SAFETY: the closure runs between fork and exec and only calls async-signal-safe
        // functions (prctl, getppid) and builds an error from a raw errno (no allocation).
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                // The parent may have died before prctl took effect: then nobody would
                // kill this child, so do not start it.
                if libc::getppid() as u32 != parent {
                    return Err(io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
        let child = spawn(cmd)?;
        Ok(Proc { name, child })
    }

    /// `Some(status)` once the process has exited.
    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGKILL and reap. A test cluster's state is disposable, so there is nothing to
    /// flush and no reason to wait for a graceful shutdown.
    pub(crate) fn kill(&mut self) {
        if self.exited().is_none() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// `--- NAME (LOG, last N lines) ---` followed by the lines, for error messages.
pub(crate) fn tail(name: &str, log: &Path, lines: usize) -> String {
    let mut last = VecDeque::with_capacity(lines);
    match File::open(log) {
        Ok(f) => {
            for line in BufReader::new(f).lines().map_while(Result::ok) {
                if last.len() == lines {
                    last.pop_front();
                }
                last.push_back(line);
            }
        }
        Err(e) => last.push_back(format!("(cannot read the log: {e})")),
    }
    let mut out = format!(
        "--- {name} ({}, last {} lines) ---\n",
        log.display(),
        last.len()
    );
    for line in last {
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// Forks `cmd` on the spawner thread (see the module documentation).
fn spawn(cmd: Command) -> io::Result<Child> {
    let inbox = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<(Command, Reply)>();
        std::thread::Builder::new()
            .name("berth-testcluster-spawner".into())
            .spawn(move || {
                // Ends only when every sender is gone; the static one never is.
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .ok()
            .map(|_| Mutex::new(tx))
    });
    let gone = || io::Error::other("the berth-testcluster spawner thread is not running");
    let inbox = inbox.as_ref().ok_or_else(gone)?;
    let (reply, answer) = mpsc::channel();
    inbox
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .send((cmd, reply))
        .map_err(|_| gone())?;
    answer.recv().map_err(|_| gone())?
}
