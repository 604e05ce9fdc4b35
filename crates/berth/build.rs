//! Stamps `berth --version` with the commit it was built from and whether the tree had
//! uncommitted changes: `0.1.0 (commit 0123456789ab, clean)`.
//!
//! The commit comes from `git` when the source is a checkout; a build from a tarball or a
//! container context without `.git` (or without `git` installed) says `commit unknown` rather
//! than failing. `BERTH_GIT_COMMIT` (and optionally `BERTH_GIT_DIRTY=true|false`) in the
//! environment override both, for builds that know the commit but have no `.git` (the
//! Containerfile passes them as build arguments).

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let root = manifest.join("../..");
    println!("cargo:rerun-if-env-changed=BERTH_GIT_COMMIT");
    println!("cargo:rerun-if-env-changed=BERTH_GIT_DIRTY");
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let stamp = match std::env::var("BERTH_GIT_COMMIT") {
        Ok(commit) if !commit.is_empty() => {
            let dirty = std::env::var("BERTH_GIT_DIRTY").ok();
            match dirty.as_deref() {
                Some("true") => format!("commit {commit}, dirty"),
                Some("false") => format!("commit {commit}, clean"),
                _ => format!("commit {commit}"),
            }
        }
        _ => from_git(&root).unwrap_or_else(|| "commit unknown".to_string()),
    };
    println!("cargo:rustc-env=BERTH_VERSION={version} ({stamp})");
}

/// `commit <short hash>, clean|dirty`, or `None` when this is not a git checkout.
fn from_git(root: &Path) -> Option<String> {
    let dirs = git(root, &["rev-parse", "--git-dir", "--git-common-dir"])?;
    let mut dirs = dirs.lines().map(|d| root.join(d));
    let (git_dir, common_dir) = (dirs.next()?, dirs.next()?);
    // Re-run when the commit moves or the index changes (a commit, `git add`, a checkout),
    // and when any source changes (edits make the tree dirty). Cargo re-runs the script
    // for a directory when anything under it changes.
    for path in [
        git_dir.join("HEAD"),
        git_dir.join("index"),
        common_dir.join("refs"),
        common_dir.join("packed-refs"),
        root.join("crates"),
        root.join("Cargo.toml"),
        root.join("Cargo.lock"),
    ] {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    let commit = git(root, &["rev-parse", "--short=12", "HEAD"])?;
    let commit = commit.trim();
    // Tracked files only: a stray untracked file does not make a build dirty.
    let status = git(root, &["status", "--porcelain", "--untracked-files=no"])?;
    let state = if status.trim().is_empty() {
        "clean"
    } else {
        "dirty"
    };
    Some(format!("commit {commit}, {state}"))
}

fn git(root: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8(out.stdout).ok()
}
