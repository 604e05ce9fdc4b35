//! Replays a checked-in fuzz corpus (`fuzz/corpus/<target>/`) through its harness under
//! `cargo test`, so that CI keeps every input that once mattered passing in seconds,
//! without the fuzzer or a nightly toolchain.
//!
//! Included with `#[path]` by `crates/*/tests/fuzz_corpus.rs`. Each harness panics on a
//! finding and returns whether the parser accepted its input; a corpus must hold files of
//! both kinds, so that a parser that started refusing everything (or a harness that returns
//! before its checks) fails here instead of passing silently.

use std::path::PathBuf;

/// Every file of `fuzz/corpus/<target>`, sorted; the corpus must not be empty.
fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.map(|e| e.path()).expect("readable corpus entry"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{}: empty corpus", dir.display());
    files
        .into_iter()
        .map(|p| {
            let data = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, data)
        })
        .collect()
}

/// Runs `harness` on every corpus file of `target`, naming the file that fails, and checks
/// that some files were accepted and some refused.
pub fn replay(target: &str, harness: fn(&[u8]) -> bool) {
    let (mut accepted, mut refused) = (0, 0);
    for (path, data) in corpus(target) {
        match std::panic::catch_unwind(|| harness(&data)) {
            Ok(true) => accepted += 1,
            Ok(false) => refused += 1,
            Err(_) => panic!("{target}: {} fails", path.display()),
        }
    }
    assert!(accepted > 0, "{target}: no corpus file is accepted");
    assert!(refused > 0, "{target}: no corpus file is refused");
}
