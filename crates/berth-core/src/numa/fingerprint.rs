//! Pod-set fingerprint ("podfingerprint" v001), byte-exact with the node agents.
//!
//! A fingerprint identifies a **multiset** of pods by `(namespace, name)` only:
//!
//! 1. per pod: `h = XXH64(name, seed = XXH64(namespace, 0))`;
//! 2. sort the `h` values ascending (as `u64`);
//! 3. concatenate them as 8-byte little-endian words and take `XXH64(.., 0)` of that;
//! 4. the signature is `"pfp0" + "v001" + 16 lowercase hex digits` of the sum (big-endian).
//!
//! The order pods are added in does not matter; duplicates count (adding a pod twice changes
//! the result). The node agents publish the signature in the NRT attribute
//! [`ATTRIBUTE`] (and, legacy, the annotation [`ANNOTATION`]); the reserve cache compares it
//! with the signature of the pods the scheduler believes are on the node.

use std::fmt::Write as _;

use xxhash_rust::xxh64::xxh64;

/// Signature prefix (always 4 bytes).
pub const PREFIX: &str = "pfp0";
/// Algorithm version (always 4 bytes, `vNNN`).
pub const VERSION: &str = "v001";
/// Legacy NRT annotation carrying the signature.
pub const ANNOTATION: &str = "topology.node.k8s.io/fingerprint";
/// NRT top-level attribute carrying the signature.
pub const ATTRIBUTE: &str = "nodeTopologyPodsFingerprint";
/// NRT top-level attribute naming the method the agent used to select pods.
pub const ATTRIBUTE_METHOD: &str = "nodeTopologyPodsFingerprintMethod";
/// Method: every pod the kubelet reports.
pub const METHOD_ALL: &str = "all";
/// Method: only pods with exclusive resources (exclusive CPUs, NUMA-pinned memory, devices).
pub const METHOD_WITH_EXCLUSIVE_RESOURCES: &str = "with-exclusive-resources";
/// Method (newer agents): all pods but terminal ones.
pub const METHOD_EXCLUDE_TERMINAL: &str = "exclude-terminal";

/// Length of a well-formed signature: prefix + version + 16 hex digits.
pub const SIGNATURE_LEN: usize = 24;

/// Why a signature did not check out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FingerprintError {
    /// Too short, or not starting with [`PREFIX`].
    #[error("malformed fingerprint")]
    Malformed,
    /// Version other than [`VERSION`].
    #[error("incompatible version")]
    IncompatibleVersion,
    /// Well-formed, but for a different pod set.
    #[error("fingerprint mismatch got={got:?} expected={expected:?}")]
    SignatureMismatch {
        /// The signature's hex part.
        got: String,
        /// The recomputed hex part.
        expected: String,
    },
}

/// The per-pod hash: `XXH64(name, seed = XXH64(namespace, 0))`.
pub fn pod_hash(namespace: &str, name: &str) -> u64 {
    xxh64(name.as_bytes(), xxh64(namespace.as_bytes(), 0))
}

/// Accumulates pods and produces the signature.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fingerprint {
    hashes: Vec<u64>,
}

impl Fingerprint {
    /// An empty fingerprint.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty fingerprint with room for `pods` pods.
    pub fn with_capacity(pods: usize) -> Self {
        Self {
            hashes: Vec::with_capacity(pods),
        }
    }

    /// Adds one pod.
    pub fn add(&mut self, namespace: &str, name: &str) {
        self.hashes.push(pod_hash(namespace, name));
    }

    /// Number of pods added.
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    /// True when no pod was added.
    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// The 64-bit sum (sorts the internal hashes; calling it again is fine).
    pub fn sum(&mut self) -> u64 {
        self.hashes.sort_unstable();
        let mut bytes = Vec::with_capacity(self.hashes.len() * 8);
        for h in &self.hashes {
            bytes.extend_from_slice(&h.to_le_bytes());
        }
        xxh64(&bytes, 0)
    }

    /// The signature string, e.g. `pfp0v001e477a4e3b2fc0ec6`.
    pub fn sign(&mut self) -> String {
        let mut out = String::with_capacity(SIGNATURE_LEN);
        out.push_str(PREFIX);
        out.push_str(VERSION);
        // Writing into a String cannot fail.
        let _ = write!(out, "{:016x}", self.sum());
        out
    }

    /// Checks `signature` against the pods added so far (same rules as the agents' library:
    /// shorter than 16 bytes or wrong prefix → [`FingerprintError::Malformed`], other version →
    /// [`FingerprintError::IncompatibleVersion`], anything but the exact lowercase hex of the sum
    /// → [`FingerprintError::SignatureMismatch`]).
    pub fn check(&mut self, signature: &str) -> Result<(), FingerprintError> {
        let bytes = signature.as_bytes();
        if bytes.len() < 16 || &bytes[0..4] != PREFIX.as_bytes() {
            return Err(FingerprintError::Malformed);
        }
        if &bytes[4..8] != VERSION.as_bytes() {
            return Err(FingerprintError::IncompatibleVersion);
        }
        let expected = format!("{:016x}", self.sum());
        if &bytes[8..] != expected.as_bytes() {
            return Err(FingerprintError::SignatureMismatch {
                got: String::from_utf8_lossy(&bytes[8..]).into_owned(),
                expected,
            });
        }
        Ok(())
    }
}

/// The signature of a pod multiset given as `(namespace, name)` pairs.
pub fn sign<'a>(pods: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut fp = Fingerprint::new();
    for (ns, name) in pods {
        fp.add(ns, name);
    }
    fp.sign()
}

/// Whether a 4-byte version string is the one implemented here (`Malformed` if not 4 bytes).
pub fn is_version_compatible(version: &str) -> Result<bool, FingerprintError> {
    if version.len() != VERSION.len() {
        return Err(FingerprintError::Malformed);
    }
    Ok(version == VERSION)
}

/// How the agent selected the pods it fingerprinted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FingerprintMethod {
    /// All pods ([`METHOD_ALL`]; also assumed when the NRT does not say).
    #[default]
    All,
    /// Only pods with exclusive resources ([`METHOD_WITH_EXCLUSIVE_RESOURCES`]).
    WithExclusiveResources,
}

impl FingerprintMethod {
    /// Parses the method attribute value; unknown values (incl. `exclude-terminal`, which the
    /// scheduler's pod source already mirrors) read as [`FingerprintMethod::All`].
    pub fn from_attribute(value: &str) -> Self {
        if value == METHOD_WITH_EXCLUSIVE_RESOURCES {
            Self::WithExclusiveResources
        } else {
            Self::All
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sign_lines(text: &str) -> String {
        sign(text.lines().filter_map(|l| {
            let l = l.trim();
            if l.is_empty() || l.starts_with('#') {
                return None;
            }
            let mut f = l.split_whitespace();
            Some((f.next()?, f.next()?))
        }))
    }

    /// The 259 pods of podfingerprint's `TestCheck` vector (an OpenShift cluster's pod
    /// list), one `namespace name` per line; the signature they must give is stated in the
    /// tests below.
    fn pods_259() -> Vec<(String, String)> {
        let pods: Vec<(String, String)> = include_str!("testdata/pfp-pods-259.txt")
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                Some((f.next()?.to_string(), f.next()?.to_string()))
            })
            .collect();
        assert_eq!(pods.len(), 259);
        pods
    }

    fn fp_of(pods: &[(String, String)]) -> Fingerprint {
        let mut fp = Fingerprint::with_capacity(pods.len());
        for (ns, n) in pods {
            fp.add(ns, n);
        }
        fp
    }

    #[test]
    fn the_259_pods_match_upstream() {
        let pods = pods_259();
        let mut fp = fp_of(&pods);
        assert_eq!(fp.sign(), "pfp0v001e477a4e3b2fc0ec6");
        assert_eq!(fp.check("pfp0v001e477a4e3b2fc0ec6"), Ok(()));
        // Order independence: reversed input, same signature; Sign/Check repeatable.
        let mut rev: Vec<_> = pods.clone();
        rev.reverse();
        assert_eq!(fp_of(&rev).sign(), "pfp0v001e477a4e3b2fc0ec6");
        assert_eq!(fp.sign(), "pfp0v001e477a4e3b2fc0ec6");
    }

    #[test]
    fn negative_vectors_of_the_259_pods() {
        let mut fp = fp_of(&pods_259());
        assert_eq!(fp.check("x"), Err(FingerprintError::Malformed));
        assert_eq!(
            fp.check("wrngv001e477a4e3b2fc0ec6"),
            Err(FingerprintError::Malformed)
        );
        assert_eq!(fp.check("pfp0vX"), Err(FingerprintError::Malformed));
        assert_eq!(
            fp.check("pfp0v000e477a4e3b2fc0ec6"),
            Err(FingerprintError::IncompatibleVersion)
        );
        assert!(matches!(
            fp.check("pfp0v001e477abb123fc0ec1"),
            Err(FingerprintError::SignatureMismatch { .. })
        ));
        // Uppercase hex or trailing characters are mismatches too.
        assert!(matches!(
            fp.check("pfp0v001E477A4E3B2FC0EC6"),
            Err(FingerprintError::SignatureMismatch { .. })
        ));
        assert!(matches!(
            fp.check("pfp0v001e477a4e3b2fc0ec6 "),
            Err(FingerprintError::SignatureMismatch { .. })
        ));
    }

    #[test]
    fn version_compatibility() {
        assert_eq!(is_version_compatible(""), Err(FingerprintError::Malformed));
        assert_eq!(is_version_compatible("a"), Err(FingerprintError::Malformed));
        assert_eq!(
            is_version_compatible("bbbbbbbb"),
            Err(FingerprintError::Malformed)
        );
        assert_eq!(is_version_compatible("xxxx"), Ok(false));
        assert_eq!(is_version_compatible("v001"), Ok(true));
    }

    #[test]
    fn upstream_small_vectors() {
        assert_eq!(
            sign([
                ("ns1", "n1"),
                ("ns1", "n2"),
                ("ns2", "n1"),
                ("ns3", "n1"),
                ("ns3", "n2")
            ]),
            "pfp0v001b92008c14168b3a6"
        );
        assert_eq!(sign([("namespace1", "pod1")]), "pfp0v0019e0420efb37746c6");
        assert_eq!(
            sign([("default", "test-pod-0")]),
            "pfp0v001fe53c4dbd2c5f4a0"
        );
        assert_eq!(
            sign([
                ("production", "jaeger-dpgjk"),
                ("production", "nginx-rt684"),
                ("production", "envoy-g9m22"),
            ]),
            "pfp0v001607b76a0e9d3aeb4"
        );
    }

    #[test]
    fn upstream_golden_compat_files() {
        let cases = [
            (
                include_str!("testdata/pfp-compat-small-10pods-3ns.txt"),
                10,
                "pfp0v001567144e4a561bb5a",
            ),
            (
                include_str!("testdata/pfp-compat-medium-20pods-1ns.txt"),
                20,
                "pfp0v00111a79869f24a9528",
            ),
            (
                include_str!("testdata/pfp-compat-medium-50pods-5ns.txt"),
                50,
                "pfp0v0017e00808083a7fe66",
            ),
            (
                include_str!("testdata/pfp-compat-large-100pods-10ns.txt"),
                100,
                "pfp0v001e0db114971e5928c",
            ),
            (
                include_str!("testdata/pfp-compat-stress-500pods-15ns.txt"),
                500,
                "pfp0v0014e9802b0dce105f4",
            ),
        ];
        for (text, count, want) in cases {
            assert_eq!(text.lines().count(), count);
            assert_eq!(sign_lines(text), want, "{count} pods");
        }
    }

    #[test]
    fn derived_vectors() {
        assert_eq!(sign([]), "pfp0v001ef46db3751d8e999");
        assert_eq!(sign([("default", "foo")]), "pfp0v001335ceffef4a0e6ed");
        assert_eq!(
            sign([("default", "foo"), ("default", "foo")]),
            "pfp0v001967211d0a5e28c13"
        );
        assert_eq!(
            sign([("ns1", "pod1"), ("ns2", "pod2")]),
            "pfp0v001d4294c0b68c76415"
        );
        assert_eq!(
            sign([("ns2", "pod2"), ("ns1", "pod1")]),
            "pfp0v001d4294c0b68c76415"
        );
        assert_eq!(sign([("a", "b")]), "pfp0v001b62c44d557501be8");
        assert_eq!(sign([("b", "a")]), "pfp0v001c82737bcdcda55ca");
        assert_eq!(sign([("", "")]), "pfp0v001c47d32effa0690e8");
        assert_eq!(xxh64(b"namespace1", 0), 0x3575116090251dc6);
        assert_eq!(pod_hash("namespace1", "pod1"), 0x3e9009d12ccb6149);
    }

    #[test]
    fn the_nrt_examples_in_the_reference() {
        assert_eq!(
            sign([
                ("kube-system", "kube-proxy-x7k2p"),
                ("node-feature-discovery", "nfd-topology-updater-9vz4q"),
                ("numa-apps", "dpdk-app-7c9d8b6f5-q2xkz"),
            ]),
            "pfp0v001a005acd77c3e38c6"
        );
        assert_eq!(
            sign([("numa-apps", "dpdk-app-7c9d8b6f5-q2xkz")]),
            "pfp0v001e3a20cafb6299c30"
        );
    }

    #[test]
    fn method_attribute() {
        assert_eq!(
            FingerprintMethod::from_attribute("with-exclusive-resources"),
            FingerprintMethod::WithExclusiveResources
        );
        assert_eq!(
            FingerprintMethod::from_attribute("all"),
            FingerprintMethod::All
        );
        assert_eq!(
            FingerprintMethod::from_attribute("bogus"),
            FingerprintMethod::All
        );
    }
}
