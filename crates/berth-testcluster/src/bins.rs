//! Where the Go binaries come from: `BERTH_TEST_BIN_DIR`, or `tools/build.sh` into
//! `<workspace>/target/test-cluster/bin`.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use crate::Error;

/// The binaries a test cluster runs or hands out (helm for the chart's tests, koord-scheduler
/// for the Koordinator differential tests).
pub(crate) const BINARIES: [&str; 7] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kubectl",
    "kube-scheduler",
    "helm",
    "koord-scheduler",
];

/// Exit status of `tools/build.sh` when `go` is not on `PATH`.
const EXIT_NO_GO: i32 = 3;

/// The resolved directory, once known for this process.
static BIN_DIR: Mutex<Option<PathBuf>> = Mutex::new(None);

/// The workspace root, from this crate's location (`crates/berth-testcluster`).
pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The directory holding [`BINARIES`], building them first when needed.
///
/// `BERTH_TEST_BIN_DIR` (if set and non-empty) is used as it is when it already holds every
/// binary: prebuilt binaries need no Go. Otherwise `tools/build.sh` runs, which returns at
/// once when its stamps match `tools/versions.env` and rebuilds after a version bump. A
/// mutex (threads of one test binary) and a file lock (test binaries run side by side, e.g.
/// by nextest) make sure one build runs at a time; the others wait and then find it done.
pub(crate) fn bin_dir() -> Result<PathBuf, Error> {
    let mut known = BIN_DIR.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(dir) = known.as_ref() {
        return Ok(dir.clone());
    }
    let root = workspace_root();
    let from_env = std::env::var_os("BERTH_TEST_BIN_DIR").filter(|v| !v.is_empty());
    let dir = match &from_env {
        Some(dir) => PathBuf::from(dir),
        None => root.join("target/test-cluster/bin"),
    };
    if from_env.is_none() || !all_present(&dir) {
        build(&root, &dir)?;
    }
    if let Some(missing) = BINARIES.iter().find(|b| !dir.join(b).is_file()) {
        return Err(Error::BinaryMissing {
            path: dir.join(missing),
        });
    }
    *known = Some(dir.clone());
    Ok(dir)
}

fn all_present(dir: &Path) -> bool {
    BINARIES.iter().all(|b| dir.join(b).is_file())
}

/// Runs `tools/build.sh` under the build lock. Its progress goes straight to the terminal
/// (a cold build takes many minutes; a silent test would look hung); the last lines are
/// kept for the error.
fn build(root: &Path, dir: &Path) -> Result<(), Error> {
    let io = |context: String| move |source| Error::Io { context, source };
    std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    let lock_path = dir.join(".build.lock");
    let lock = File::create(&lock_path).map_err(io(format!("creating {}", lock_path.display())))?;
    lock.lock()
        .map_err(io(format!("locking {}", lock_path.display())))?;
    let script = root.join("tools/build.sh");
    let mut child = Command::new("bash")
        .arg(&script)
        .env("BERTH_TEST_BIN_DIR", dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(io(format!("running {}", script.display())))?;
    // Both streams merged into one tail; stdout is read on a second thread so that neither
    // pipe can fill up and block the script.
    let tail = Mutex::new(VecDeque::new());
    let echo = |stream: &mut dyn std::io::Read| {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            // Written to the real stderr, not through `eprintln!`, which the test harness
            // captures until the test ends.
            let _ = writeln!(std::io::stderr(), "{line}");
            let mut tail = tail.lock().unwrap_or_else(|p| p.into_inner());
            if tail.len() == 40 {
                tail.pop_front();
            }
            tail.push_back(line);
        }
    };
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    std::thread::scope(|s| {
        if let Some(mut out) = stdout {
            s.spawn(move || echo(&mut out));
        }
        if let Some(mut err) = stderr {
            echo(&mut err);
        }
    });
    let status = child
        .wait()
        .map_err(io(format!("running {}", script.display())))?;
    drop(lock);
    let output: Vec<String> = tail.into_inner().unwrap_or_else(|p| p.into_inner()).into();
    let output = output.join("\n");
    match status.code() {
        Some(0) => Ok(()),
        Some(EXIT_NO_GO) => Err(Error::GoMissing { output }),
        _ => Err(Error::Build {
            script,
            status,
            output,
        }),
    }
}
