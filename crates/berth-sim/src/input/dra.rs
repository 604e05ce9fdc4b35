//! `resource.k8s.io/v1` ResourceSlice, DeviceClass, ResourceClaim and ResourceClaimTemplate
//! as the API server checks them on create: the strict schema, then the validation rules the
//! scheduler relies on (`resource/validation`): a slice names exactly one of `nodeName`,
//! `nodeSelector`, `allNodes`, `perDeviceNodeSelection`, its devices are unique and each
//! attribute holds exactly one value; a request is exactly one of `exactly` and
//! `firstAvailable`, names a class, asks for a known allocation mode and a count within
//! limits; every CEL selector compiles; capacities are quantities.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::Value;

use berth_api::dra::{
    DeviceClaim, DeviceClass, DeviceSelector, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use berth_core::dra::allocator::MAX_RESULTS;
use berth_core::Object;

use super::typed;
use crate::error::FieldError;
use crate::strict::{self, Schema};

/// Decodes a DRA object of `kind` (`metadata` already normalized).
pub(super) fn decode(kind: &str, value: &Value) -> Result<Object, FieldError> {
    let schema = match kind {
        "ResourceSlice" => Schema::ResourceSlice,
        "DeviceClass" => Schema::DeviceClass,
        "ResourceClaim" => Schema::ResourceClaim,
        _ => Schema::ResourceClaimTemplate,
    };
    strict::check(schema, value)?;
    if value.get("spec").is_none_or(Value::is_null) {
        return Err(FieldError::new("spec", "Required value"));
    }
    Ok(match schema {
        Schema::ResourceSlice => {
            let s: ResourceSlice = typed(value)?;
            check_slice(&s)?;
            Object::ResourceSlice(Arc::new(s))
        }
        Schema::DeviceClass => {
            let c: DeviceClass = typed(value)?;
            check_selectors(&c.spec.selectors, "spec.selectors")?;
            Object::DeviceClass(Arc::new(c))
        }
        Schema::ResourceClaim => {
            let c: ResourceClaim = typed(value)?;
            check_claim(&c.spec.devices, "spec.devices")?;
            Object::ResourceClaim(Arc::new(c))
        }
        _ => {
            let t: ResourceClaimTemplate = typed(value)?;
            check_claim(&t.spec.spec.devices, "spec.spec.devices")?;
            Object::ResourceClaimTemplate(Arc::new(t))
        }
    })
}

fn check_slice(s: &ResourceSlice) -> Result<(), FieldError> {
    let spec = &s.spec;
    if spec.driver.is_empty() {
        return Err(FieldError::new("spec.driver", "Required value"));
    }
    if spec.pool.name.is_empty() {
        return Err(FieldError::new("spec.pool.name", "Required value"));
    }
    if spec.pool.resource_slice_count < 1 {
        return Err(FieldError::new(
            "spec.pool.resourceSliceCount",
            format!(
                "Invalid value: {}: must be greater than zero",
                spec.pool.resource_slice_count
            ),
        ));
    }
    let set = [
        spec.node_name.as_deref().is_some_and(|n| !n.is_empty()),
        spec.node_selector.is_some(),
        spec.all_nodes == Some(true),
        spec.per_device_node_selection == Some(true),
    ];
    match set.iter().filter(|b| **b).count() {
        0 => {
            return Err(FieldError::new(
                "spec",
                "Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required",
            ))
        }
        1 => {}
        _ => {
            return Err(FieldError::new(
                "spec",
                "Invalid value: {`nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection`}: exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required, but multiple fields are set",
            ))
        }
    }
    let mut names = BTreeSet::new();
    for (i, d) in spec.devices.iter().enumerate() {
        let at = format!("spec.devices[{i}]");
        if !names.insert(d.name.as_str()) {
            return Err(FieldError::new(
                format!("{at}.name"),
                format!("Duplicate value: {:?}", d.name),
            ));
        }
        for (name, a) in &d.attributes {
            let n = [
                a.int.is_some(),
                a.bool.is_some(),
                a.string.is_some(),
                a.version.is_some(),
            ]
            .iter()
            .filter(|b| **b)
            .count();
            if n != 1 {
                return Err(FieldError::new(
                    format!("{at}.attributes[{name}]"),
                    "Invalid value: exactly one value must be specified",
                ));
            }
            if let Some(v) = &a.version {
                if berth_core::dra::cel::parse_semver(v).is_none() {
                    return Err(FieldError::new(
                        format!("{at}.attributes[{name}].version"),
                        format!("Invalid value: {v:?}: must be a string compatible with semver.org spec 2.0.0"),
                    ));
                }
            }
        }
        for (name, c) in &d.capacity {
            if berth_api::ParsedQuantity::parse(&c.value.0).is_err() {
                return Err(FieldError::new(
                    format!("{at}.capacity[{name}].value"),
                    format!("Invalid value: {:?}: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'", c.value.0),
                ));
            }
        }
    }
    Ok(())
}

fn check_selectors(selectors: &[DeviceSelector], at: &str) -> Result<(), FieldError> {
    for (i, s) in selectors.iter().enumerate() {
        let Some(cel) = &s.cel else {
            return Err(FieldError::new(format!("{at}[{i}].cel"), "Required value"));
        };
        if let Err(e) = berth_core::dra::cel::compile(&cel.expression) {
            return Err(FieldError::new(
                format!("{at}[{i}].cel.expression"),
                format!(
                    "Invalid value: {:?}: compilation failed: {e}",
                    cel.expression
                ),
            ));
        }
    }
    Ok(())
}

fn check_mode(mode: Option<&str>, count: Option<i64>, at: &str) -> Result<(), FieldError> {
    match mode.unwrap_or("ExactCount") {
        "ExactCount" => {
            let n = count.unwrap_or(1);
            if !(1..=MAX_RESULTS).contains(&n) {
                return Err(FieldError::new(
                    format!("{at}.count"),
                    format!(
                        "Invalid value: {n}: must be greater than zero and at most {MAX_RESULTS}"
                    ),
                ));
            }
        }
        "All" => {
            if count.is_some_and(|c| c != 0) {
                return Err(FieldError::new(
                    format!("{at}.count"),
                    "Invalid value: must not be set when allocationMode is All",
                ));
            }
        }
        other => {
            return Err(FieldError::new(
                format!("{at}.allocationMode"),
                format!("Unsupported value: {other:?}: supported values: \"All\", \"ExactCount\""),
            ))
        }
    }
    Ok(())
}

fn check_claim(devices: &DeviceClaim, at: &str) -> Result<(), FieldError> {
    let mut names = BTreeSet::new();
    for (i, r) in devices.requests.iter().enumerate() {
        let rat = format!("{at}.requests[{i}]");
        if r.name.is_empty() {
            return Err(FieldError::new(format!("{rat}.name"), "Required value"));
        }
        if !names.insert(r.name.clone()) {
            return Err(FieldError::new(
                format!("{rat}.name"),
                format!("Duplicate value: {:?}", r.name),
            ));
        }
        match (&r.exactly, r.first_available.is_empty()) {
            (Some(e), true) => {
                let eat = format!("{rat}.exactly");
                if e.device_class_name.is_empty() {
                    return Err(FieldError::new(
                        format!("{eat}.deviceClassName"),
                        "Required value",
                    ));
                }
                check_selectors(&e.selectors, &format!("{eat}.selectors"))?;
                check_mode(e.allocation_mode.as_deref(), e.count, &eat)?;
            }
            (None, false) => {
                for (j, s) in r.first_available.iter().enumerate() {
                    let sat = format!("{rat}.firstAvailable[{j}]");
                    if !names.insert(format!("{}/{}", r.name, s.name)) || s.name.is_empty() {
                        return Err(FieldError::new(
                            format!("{sat}.name"),
                            format!("Invalid value: {:?}: must be unique and not empty", s.name),
                        ));
                    }
                    if s.device_class_name.is_empty() {
                        return Err(FieldError::new(
                            format!("{sat}.deviceClassName"),
                            "Required value",
                        ));
                    }
                    check_selectors(&s.selectors, &format!("{sat}.selectors"))?;
                    check_mode(s.allocation_mode.as_deref(), s.count, &sat)?;
                }
            }
            _ => {
                return Err(FieldError::new(
                    rat,
                    "Invalid value: exactly one of `exactly` or `firstAvailable` is required",
                ))
            }
        }
    }
    for (i, c) in devices.constraints.iter().enumerate() {
        let cat = format!("{at}.constraints[{i}]");
        match &c.match_attribute {
            None => {
                return Err(FieldError::new(
                    format!("{cat}.matchAttribute"),
                    "Required value",
                ))
            }
            Some(a) if !a.contains('/') => {
                return Err(FieldError::new(
                    format!("{cat}.matchAttribute"),
                    format!("Invalid value: {a:?}: must include a domain"),
                ))
            }
            Some(_) => {}
        }
        for r in &c.requests {
            let base = r.split('/').next().unwrap_or("");
            if !names.contains(r) && !names.contains(base) {
                return Err(FieldError::new(
                    format!("{cat}.requests"),
                    format!("Invalid value: {r:?}: must be the name of a request in the claim or the name of a request and a subrequest separated by '/'"),
                ));
            }
        }
    }
    Ok(())
}
