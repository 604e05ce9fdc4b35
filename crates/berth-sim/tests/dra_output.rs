//! What the DRA scenarios under `tests/scenarios/dra/` leave in the final cluster state that
//! a Scenario `expect` cannot say: every claim's `status.allocation` and `reservedFor`, the
//! generated claims' names and owners, the pods' `resourceClaimStatuses` and phases. Each
//! test runs one scenario with `-o json` and reads the `List`, as an outside checker would.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use berth_sim::{run, Format, Options};

fn dra(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/scenarios/dra")
        .join(name)
}

fn items_of(file: &Path) -> Vec<Value> {
    let options = Options {
        files: vec![file.to_string_lossy().into_owned()],
        output: Format::Json,
        ..Options::default()
    };
    let out = run(&options, &mut std::io::empty());
    assert_eq!(out.code, 0, "{}", out.stderr);
    let list: Value = serde_json::from_str(&out.stdout).expect("one JSON List");
    list["items"].as_array().cloned().unwrap_or_default()
}

fn of_kind<'a>(items: &'a [Value], kind: &str) -> impl Iterator<Item = &'a Value> + 'a {
    let kind = kind.to_string();
    items.iter().filter(move |i| i["kind"] == kind.as_str())
}

/// (pool, device) per allocation result of every claim.
fn allocated(items: &[Value]) -> Vec<(String, String, String)> {
    of_kind(items, "ResourceClaim")
        .flat_map(|c| {
            let name = c["metadata"]["name"].as_str().unwrap_or("").to_string();
            c["status"]["allocation"]["devices"]["results"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |r| {
                    (
                        name.clone(),
                        r["pool"].as_str().unwrap_or("").to_string(),
                        r["device"].as_str().unwrap_or("").to_string(),
                    )
                })
        })
        .collect()
}

#[test]
fn a_burst_of_100_claims_gets_64_distinct_devices_and_only_allocated_pods_run() {
    let items = items_of(&dra("burst-100-claims-64-devices.yaml"));
    let results = allocated(&items);
    let mut per_device: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for (claim, pool, device) in &results {
        per_device
            .entry((pool.clone(), device.clone()))
            .or_default()
            .push(claim.clone());
    }
    assert_eq!(per_device.len(), 64);
    for (device, claims) in &per_device {
        assert_eq!(claims.len(), 1, "{device:?} allocated to {claims:?}");
    }
    let running = of_kind(&items, "Pod")
        .filter(|p| p["status"]["phase"] == "Running")
        .count();
    assert_eq!(running, 64);
    // Every pod's generated claim is owned by it and named `<pod>-gpu-<5>`.
    for pod in of_kind(&items, "Pod") {
        let name = pod["metadata"]["name"].as_str().unwrap();
        let claim = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
            .as_str()
            .unwrap_or_else(|| panic!("{name} has no generated claim"));
        assert!(claim.starts_with(&format!("{name}-gpu-")), "{claim}");
        assert_eq!(claim.len(), name.len() + "-gpu-".len() + 5);
        let c = of_kind(&items, "ResourceClaim")
            .find(|c| c["metadata"]["name"] == claim)
            .expect("generated claim exists");
        assert_eq!(c["metadata"]["ownerReferences"][0]["name"], name);
        let placed = pod["spec"]["nodeName"].is_string();
        assert_eq!(placed, c["status"]["allocation"].is_object(), "{name}");
        if placed {
            assert_eq!(c["status"]["reservedFor"][0]["name"], name);
        }
    }
}

#[test]
fn a_shared_claim_lists_both_consumers_and_is_given_back_when_they_are_gone() {
    let text = std::fs::read_to_string(dra("shared-claim.yaml")).unwrap();
    // Cut the timeline after the first expectation: both consumers are still there.
    let cut = text.find("  - delete:").unwrap();
    let dir = std::env::temp_dir().join(format!("berth-dra-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("shared.yaml");
    std::fs::write(&path, &text[..cut]).unwrap();
    let items = items_of(&path);
    let shared = of_kind(&items, "ResourceClaim")
        .find(|c| c["metadata"]["name"] == "shared")
        .unwrap();
    let users: Vec<&str> = shared["status"]["reservedFor"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(users, ["a", "b"]);
    // The whole timeline: both deleted, the claim is deallocated and `own` takes g0.
    let items = items_of(&dra("shared-claim.yaml"));
    let shared = of_kind(&items, "ResourceClaim")
        .find(|c| c["metadata"]["name"] == "shared")
        .unwrap();
    assert!(shared["status"]["allocation"].is_null(), "{shared}");
    assert_eq!(
        allocated(&items),
        [("own".into(), "n2".into(), "g0".into())]
    );
}

#[test]
fn exact_count_with_match_attribute_gets_the_pair_on_one_root() {
    let items = items_of(&dra("exact-count-match-attribute.yaml"));
    let got: Vec<_> = allocated(&items)
        .into_iter()
        .map(|(c, p, d)| format!("{c}:{p}/{d}"))
        .collect();
    assert_eq!(got, ["pair:n2/g1", "pair:n2/g3"]);
}

/// `claim:pool/device` per allocation result, the claim named by its pod (the part of the
/// generated name before `-gpu-`).
fn by_pod(items: &[Value]) -> Vec<String> {
    allocated(items)
        .into_iter()
        .map(|(c, p, d)| {
            let pod = c.split("-gpu-").next().unwrap_or(&c).to_string();
            format!("{pod}:{p}/{d}")
        })
        .collect()
}

/// The devices a Reservation's `reservation.berth.dev/device-allocated` lists, and its
/// `status.allocatable`.
fn reservation_devices(items: &[Value], name: &str) -> (Vec<String>, Value) {
    let r = of_kind(items, "Reservation")
        .find(|r| r["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("reservation {name}"));
    let raw = r["metadata"]["annotations"]["reservation.berth.dev/device-allocated"]
        .as_str()
        .unwrap_or_else(|| panic!("{name} has no device-allocated annotation: {r}"));
    let v: Value = serde_json::from_str(raw).expect("the annotation is JSON");
    let devices = v["claims"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["allocation"]["devices"]["results"].as_array().unwrap())
        .map(|d| {
            format!(
                "{}/{}",
                d["pool"].as_str().unwrap(),
                d["device"].as_str().unwrap()
            )
        })
        .collect();
    (devices, r["status"]["allocatable"].clone())
}

#[test]
fn a_reservation_of_two_gpus_gives_its_owner_exactly_those_devices() {
    let items = items_of(&dra("reservation-of-two-gpus.yaml"));
    let (held, allocatable) = reservation_devices(&items, "r");
    assert_eq!(held, ["gpu-1/gpu-3", "gpu-1/gpu-4"]);
    assert_eq!(
        allocatable["deviceclass.resource.kubernetes.io/gpu.example.com"],
        "2"
    );
    // Its owner's claim took both: `status.allocated` counts them as `allocatable` does.
    let r = of_kind(&items, "Reservation").next().unwrap();
    assert_eq!(
        r["status"]["allocated"]["deviceclass.resource.kubernetes.io/gpu.example.com"], "2",
        "{r}"
    );
    // The non-owner that came first got free devices, the owner its reservation's (ahead
    // of the free gpu-2), the refused stranger nothing.
    assert_eq!(
        by_pod(&items),
        [
            "other:gpu-1/gpu-0",
            "other:gpu-1/gpu-1",
            "owner:gpu-1/gpu-3",
            "owner:gpu-1/gpu-4"
        ]
    );
}

#[test]
fn a_restricted_device_reservation_refuses_more_an_aligned_one_adds_free_devices() {
    let items = items_of(&dra("owner-beyond-restricted-device-reservation.yaml"));
    assert_eq!(
        reservation_devices(&items, "restricted").0,
        ["gpu-a/gpu-0", "gpu-a/gpu-1"]
    );
    assert_eq!(
        reservation_devices(&items, "aligned").0,
        ["gpu-b/gpu-0", "gpu-b/gpu-1"]
    );
    assert_eq!(
        by_pod(&items),
        ["wide:gpu-b/gpu-0", "wide:gpu-b/gpu-1", "wide:gpu-b/gpu-2"]
    );
}

#[test]
fn a_restart_rebuilds_a_reservations_devices_from_its_annotation() {
    let items = items_of(&dra("restart-reservation-devices.yaml"));
    assert_eq!(by_pod(&items), ["narrow:n1/g0", "owner:n1/g1"]);
    let r = of_kind(&items, "Reservation").next().unwrap();
    assert_eq!(
        r["status"]["allocated"]["deviceclass.resource.kubernetes.io/gpu"], "1",
        "{r}"
    );
}
