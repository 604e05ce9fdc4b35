//! The OCI image tools/image.sh builds (no registry, no container engine): unpacked as a
//! runtime would (index, manifest, config, layer), it is under 50 MB, declares the non-root
//! user 65532, and its root file system runs `berth --version` and `berth simulate` on an
//! example as that user (chroot), printing what the simulator prints outside it.
//!
//! The archive is `target/image/berth-<version>.oci.tar` (or `$BERTH_IMAGE`); when missing,
//! tools/image.sh is run, which makes a release build first (.ci/run runs it as a step of its
//! own, before `cargo test`, so its time shows). Running the image's files as another user
//! needs root (chroot); the test fails saying so otherwise, it is never skipped.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The image must stay small enough to pull quickly onto a fresh node.
const MAX_BYTES: u64 = 50 * 1024 * 1024;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn archive() -> PathBuf {
    if let Some(p) = std::env::var_os("BERTH_IMAGE").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let path = repo().join(format!(
        "target/image/berth-{}.oci.tar",
        env!("CARGO_PKG_VERSION")
    ));
    if !path.is_file() {
        let status = Command::new("bash")
            .arg(repo().join("tools/image.sh"))
            .status()
            .expect("running tools/image.sh");
        assert!(status.success(), "tools/image.sh failed");
    }
    path
}

fn run(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `sha256:abc` to its blob's path in the layout.
fn blob(layout: &Path, digest: &Value) -> PathBuf {
    let d = digest.as_str().expect("a digest");
    let hex = d.strip_prefix("sha256:").expect("a sha256 digest");
    layout.join("blobs/sha256").join(hex)
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

#[test]
fn the_image_runs_berth_as_a_non_root_user_and_is_small() {
    let archive = archive();
    let size = std::fs::metadata(&archive).expect("the archive").len();
    assert!(
        size < MAX_BYTES,
        "{} is {size} bytes, over {MAX_BYTES}",
        archive.display()
    );

    let dir = std::env::temp_dir().join(format!("berth-image-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let layout = dir.join("layout");
    std::fs::create_dir_all(&layout).unwrap();
    run(Command::new("tar")
        .arg("-xf")
        .arg(&archive)
        .arg("-C")
        .arg(&layout));

    // The layout, as a runtime reads it.
    assert_eq!(
        json(&layout.join("oci-layout"))["imageLayoutVersion"],
        "1.0.0"
    );
    let index = json(&layout.join("index.json"));
    let manifest = json(&blob(&layout, &index["manifests"][0]["digest"]));
    assert_eq!(
        manifest["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    let config = json(&blob(&layout, &manifest["config"]["digest"]));
    assert_eq!(config["os"], "linux");
    assert_eq!(config["config"]["User"], "65532:65532");
    assert_eq!(config["config"]["Entrypoint"][0], "/usr/local/bin/berth");
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1, "{manifest}");
    let layer = blob(&layout, &layers[0]["digest"]);
    let digest = run(Command::new("sha256sum").arg(&layer));
    assert!(
        String::from_utf8_lossy(&digest.stdout).starts_with(
            layers[0]["digest"]
                .as_str()
                .unwrap_or("")
                .trim_start_matches("sha256:")
        ),
        "the layer's content matches its digest"
    );

    let rootfs = dir.join("rootfs");
    std::fs::create_dir_all(&rootfs).unwrap();
    run(Command::new("tar")
        .arg("-xzf")
        .arg(&layer)
        .arg("-C")
        .arg(&rootfs));
    let passwd = std::fs::read_to_string(rootfs.join("etc/passwd")).expect("/etc/passwd");
    assert!(passwd.contains("nonroot:x:65532:65532:"), "{passwd}");
    assert!(rootfs.join("etc/ssl/certs/ca-certificates.crt").is_file());
    assert!(
        !rootfs.join("bin/sh").exists(),
        "no shell in the image: nothing but berth runs"
    );

    assert!(
        is_root(),
        "running the image's berth as user 65532 needs chroot, which needs root"
    );
    let example = repo().join("examples/quickstart.yaml");
    std::fs::copy(&example, rootfs.join("tmp/quickstart.yaml")).expect("copying the example");
    // Found on this PATH: the child's environment is cleared.
    let chroot_bin = std::env::var_os("PATH")
        .and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("chroot"))
                .find(|c| c.is_file())
        })
        .or_else(|| Some(PathBuf::from("/usr/sbin/chroot")).filter(|p| p.is_file()))
        .expect("chroot (coreutils)");
    let chroot = |args: &[&str]| {
        let mut cmd = Command::new(&chroot_bin);
        cmd.arg("--userspec=65532:65532")
            .arg(&rootfs)
            .arg("/usr/local/bin/berth")
            .args(args)
            .env_clear()
            .env("PATH", "/usr/local/bin");
        run(&mut cmd)
    };
    let version = chroot(&["--version"]);
    let version = String::from_utf8_lossy(&version.stdout).into_owned();
    assert!(
        version.starts_with(&format!("berth {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{version:?}"
    );

    let out = chroot(&[
        "simulate",
        "/tmp/quickstart.yaml",
        "--report",
        "/tmp/report.html",
    ]);
    let want = berth_sim::run(
        &berth_sim::Options {
            files: vec![example.to_string_lossy().into_owned()],
            ..berth_sim::Options::default()
        },
        &mut std::io::empty(),
    );
    assert_eq!(want.code, 0, "{}", want.stderr);
    assert_eq!(String::from_utf8_lossy(&out.stdout), want.stdout);
    // Written by the user the image runs as, not root.
    let report = std::fs::metadata(rootfs.join("tmp/report.html")).expect("the report");
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&report), 65532);

    let _ = std::fs::remove_dir_all(&dir);
}
