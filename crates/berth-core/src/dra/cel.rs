//! CEL device selectors, evaluated as kube-apiserver's and kube-scheduler's DRA CEL
//! environment does (`k8s.io/dynamic-resource-allocation/cel`): the variable `device` with
//! `driver`, `attributes` and `capacity`, attributes grouped by domain (an unqualified name
//! belongs to the driver's domain), capacities as quantities, versions as semvers; and
//! Kubernetes' `quantity()` / `semver()` libraries (`compareTo`, `isLessThan`,
//! `isGreaterThan`, `asInteger`, `isInteger`, `sign`) and `isQuantity()` / `isSemver()`.
//!
//! Expressions are parsed by the `cel` crate once and kept (a selector is evaluated once per
//! candidate device). A missing attribute is a runtime error, as upstream; the allocator
//! turns runtime errors into the scheduling error kube-scheduler reports.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use berth_api::dra::Device;
use berth_api::ParsedQuantity;
use cel::objects::{Key, Map, Opaque, Value};
use cel::{Context, Env, ExecutionError, FunctionContext, Program};

/// Kube's per-expression cost limit is not modelled; this bounds expression length instead
/// (`resourceapi.CELSelectorExpressionMaxLength`).
pub const MAX_EXPRESSION_LENGTH: usize = 10 * 1024;

/// A compiled selector.
#[derive(Clone)]
pub struct Selector {
    program: Arc<Program>,
    /// The expression's text: what its remembered verdicts are keyed by.
    expression: Arc<str>,
}

impl std::fmt::Debug for Selector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Selector")
    }
}

/// A quantity as a CEL value: exact comparison by milli-units (device capacities are far
/// below the 9.2e15 units where that saturates).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    milli: i64,
}

impl Opaque for Quantity {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Quantity"
    }
}

/// A semantic version as a CEL value (major, minor, patch; pre-release ordered before
/// the release, compared as text).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Semver {
    core: (u64, u64, u64),
    release: bool,
    pre: String,
}

impl Opaque for Semver {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Semver"
    }
}

/// Parses a semantic version (`1.2.3`, `1.2.3-rc.1`, `+build` ignored).
pub fn parse_semver(text: &str) -> Option<Semver> {
    let text = text.split('+').next()?;
    let (core, pre) = match text.split_once('-') {
        Some((c, p)) => (c, Some(p)),
        None => (text, None),
    };
    let mut parts = core.split('.');
    let mut num = || -> Option<u64> {
        let p = parts.next()?;
        if p.is_empty() || (p.len() > 1 && p.starts_with('0')) {
            return None;
        }
        p.parse().ok()
    };
    let v = (num()?, num()?, num()?);
    if parts.next().is_some() {
        return None;
    }
    Some(Semver {
        core: v,
        release: pre.is_none(),
        pre: pre.unwrap_or("").to_string(),
    })
}

fn parse_quantity(text: &str) -> Option<Quantity> {
    ParsedQuantity::parse(text).ok().map(|q| Quantity {
        milli: q.milli_value(),
    })
}

fn env() -> &'static Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| Arc::new(Env::stdlib()))
}

/// Compiles `expression`; the error is the parser's message.
pub fn compile(expression: &str) -> Result<Selector, String> {
    if expression.len() > MAX_EXPRESSION_LENGTH {
        return Err(format!(
            "expression too long ({} bytes, at most {MAX_EXPRESSION_LENGTH})",
            expression.len()
        ));
    }
    let program = env().compile(expression).map_err(|e| e.to_string())?;
    Ok(Selector {
        program: Arc::new(program),
        expression: expression.into(),
    })
}

fn opaque<T: 'static>(v: &Value) -> Option<&T> {
    match v {
        Value::Opaque(o) => o.downcast_ref::<T>(),
        _ => None,
    }
}

/// `a.compareTo(b)` for quantities and semvers.
fn compare(ftx: &FunctionContext, this: &Value, other: &Value) -> Result<i64, ExecutionError> {
    let ord = if let (Some(a), Some(b)) = (opaque::<Quantity>(this), opaque::<Quantity>(other)) {
        a.milli.cmp(&b.milli)
    } else if let (Some(a), Some(b)) = (opaque::<Semver>(this), opaque::<Semver>(other)) {
        a.cmp(b)
    } else {
        return Err(ftx.error("compareTo: no such overload"));
    };
    Ok(ord as i64)
}

fn quantity_of(ftx: &FunctionContext, v: &Value) -> Result<Quantity, ExecutionError> {
    opaque::<Quantity>(v)
        .copied()
        .ok_or_else(|| ftx.error("no such overload: expected a quantity"))
}

fn add_functions(cx: &mut Context) -> Result<(), String> {
    let e = |e: cel::DeclarationError| format!("{e:?}");
    cx.add_function("quantity", |ftx: &FunctionContext, s: Arc<String>| {
        parse_quantity(&s)
            .map(|q| Value::Opaque(Arc::new(q)))
            .ok_or_else(|| ftx.error(format!("quantities must match the regular expression: {s}")))
    })
    .map_err(e)?;
    cx.add_function("isQuantity", |s: Arc<String>| parse_quantity(&s).is_some())
        .map_err(e)?;
    cx.add_function("semver", |ftx: &FunctionContext, s: Arc<String>| {
        parse_semver(&s)
            .map(|v| Value::Opaque(Arc::new(v)))
            .ok_or_else(|| ftx.error(format!("could not parse {s:?} as semver")))
    })
    .map_err(e)?;
    cx.add_function("isSemver", |s: Arc<String>| parse_semver(&s).is_some())
        .map_err(e)?;
    cx.add_function(
        "compareTo",
        |ftx: &FunctionContext,
         cel::extractors::This(this): cel::extractors::This<Value>,
         other: Value| { compare(ftx, &this, &other) },
    )
    .map_err(e)?;
    cx.add_function(
        "isLessThan",
        |ftx: &FunctionContext,
         cel::extractors::This(this): cel::extractors::This<Value>,
         other: Value| { compare(ftx, &this, &other).map(|c| c < 0) },
    )
    .map_err(e)?;
    cx.add_function(
        "isGreaterThan",
        |ftx: &FunctionContext,
         cel::extractors::This(this): cel::extractors::This<Value>,
         other: Value| { compare(ftx, &this, &other).map(|c| c > 0) },
    )
    .map_err(e)?;
    cx.add_function(
        "asInteger",
        |ftx: &FunctionContext, cel::extractors::This(this): cel::extractors::This<Value>| {
            let q = quantity_of(ftx, &this)?;
            if q.milli % 1000 != 0 {
                return Err(ftx.error("cannot convert value to integer"));
            }
            Ok(q.milli / 1000)
        },
    )
    .map_err(e)?;
    cx.add_function(
        "isInteger",
        |ftx: &FunctionContext, cel::extractors::This(this): cel::extractors::This<Value>| {
            quantity_of(ftx, &this).map(|q| q.milli % 1000 == 0)
        },
    )
    .map_err(e)?;
    cx.add_function(
        "sign",
        |ftx: &FunctionContext, cel::extractors::This(this): cel::extractors::This<Value>| {
            quantity_of(ftx, &this).map(|q| q.milli.signum())
        },
    )
    .map_err(e)?;
    Ok(())
}

/// Splits a qualified attribute name into (domain, id); an unqualified one belongs to the
/// driver.
fn qualified<'a>(driver: &'a str, name: &'a str) -> (&'a str, &'a str) {
    match name.split_once('/') {
        Some((domain, id)) => (domain, id),
        None => (driver, name),
    }
}

fn grouped(driver: &str, entries: impl Iterator<Item = (String, Value)>) -> Value {
    let mut by_domain: HashMap<Key, HashMap<Key, Value>> = HashMap::new();
    for (name, value) in entries {
        let (domain, id) = qualified(driver, &name);
        by_domain
            .entry(Key::from(domain.to_string()))
            .or_default()
            .insert(Key::from(id.to_string()), value);
    }
    let outer: HashMap<Key, Value> = by_domain
        .into_iter()
        .map(|(k, v)| (k, Value::Map(Map::from(v))))
        .collect();
    Value::Map(Map::from(outer))
}

/// The `device` variable for a device of `driver`.
pub fn device_value(driver: &str, device: &Device) -> Value {
    let attributes = grouped(
        driver,
        device.attributes.iter().map(|(name, a)| {
            let v = if let Some(i) = a.int {
                Value::Int(i)
            } else if let Some(b) = a.bool {
                Value::Bool(b)
            } else if let Some(s) = &a.string {
                Value::String(Arc::new(s.clone()))
            } else if let Some(v) = a.version.as_deref().and_then(parse_semver) {
                Value::Opaque(Arc::new(v))
            } else {
                Value::Null
            };
            (name.clone(), v)
        }),
    );
    let capacity = grouped(
        driver,
        device.capacity.iter().map(|(name, c)| {
            let v = parse_quantity(&c.value.0).map_or(Value::Null, |q| Value::Opaque(Arc::new(q)));
            (name.clone(), v)
        }),
    );
    let mut d: HashMap<Key, Value> = HashMap::new();
    d.insert(
        Key::from("driver".to_string()),
        Value::String(Arc::new(driver.into())),
    );
    d.insert(Key::from("attributes".to_string()), attributes);
    d.insert(Key::from("capacity".to_string()), capacity);
    d.insert(
        Key::from("allowMultipleAllocations".to_string()),
        Value::Bool(device.allow_multiple_allocations == Some(true)),
    );
    Value::Map(Map::from(d))
}

impl Selector {
    /// The expression's text.
    pub fn expression(&self) -> &Arc<str> {
        &self.expression
    }

    /// Evaluates the selector for `device` (a value from [`device_value`]): `Ok(true)` when it
    /// selects the device, `Err` with the runtime error's message (also when the result is
    /// not a bool).
    pub fn matches(&self, device: &Value) -> Result<bool, String> {
        let mut cx = Context::with_env(env().clone());
        add_functions(&mut cx)?;
        cx.add_variable_from_value("device", device.clone());
        match self.program.execute(&cx) {
            Ok(Value::Bool(b)) => Ok(b),
            Ok(other) => Err(format!("expression must evaluate to bool, got {other:?}")),
            Err(e) => Err(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_api::dra::{DeviceAttribute, DeviceCapacity};
    use berth_api::k8s_openapi::apimachinery::pkg::api::resource::Quantity as Q;

    fn gpu() -> Device {
        let mut d = Device {
            name: "gpu-0".into(),
            ..Default::default()
        };
        d.attributes.insert(
            "model".into(),
            DeviceAttribute {
                string: Some("a100".into()),
                ..Default::default()
            },
        );
        d.attributes.insert(
            "pcie.example.com/root".into(),
            DeviceAttribute {
                int: Some(2),
                ..Default::default()
            },
        );
        d.attributes.insert(
            "driverVersion".into(),
            DeviceAttribute {
                version: Some("1.2.3".into()),
                ..Default::default()
            },
        );
        d.capacity.insert(
            "memory".into(),
            DeviceCapacity {
                value: Q("40Gi".into()),
                request_policy: None,
            },
        );
        d
    }

    fn eval(expr: &str) -> Result<bool, String> {
        let v = device_value("gpu.example.com", &gpu());
        compile(expr)?.matches(&v)
    }

    #[test]
    fn selectors_read_driver_attributes_and_capacity() {
        assert_eq!(eval(r#"device.driver == "gpu.example.com""#), Ok(true));
        assert_eq!(
            eval(r#"device.attributes["gpu.example.com"].model == "a100""#),
            Ok(true)
        );
        assert_eq!(
            eval(r#"device.attributes["pcie.example.com"].root == 2"#),
            Ok(true)
        );
        assert_eq!(
            eval(r#"device.capacity["gpu.example.com"].memory.compareTo(quantity("32Gi")) >= 0"#),
            Ok(true)
        );
        assert_eq!(
            eval(r#"device.capacity["gpu.example.com"].memory.isGreaterThan(quantity("80Gi"))"#),
            Ok(false)
        );
        assert_eq!(
            eval(
                r#"device.attributes["gpu.example.com"].driverVersion.isLessThan(semver("1.10.0"))"#
            ),
            Ok(true)
        );
        assert_eq!(eval(r#"device.driver == "other""#), Ok(false));
    }

    #[test]
    fn missing_attribute_is_a_runtime_error_and_bad_syntax_a_compile_error() {
        assert!(eval(r#"device.attributes["gpu.example.com"].nope == 1"#).is_err());
        assert!(compile("device.driver ==").is_err());
        assert!(eval("1 + 2").is_err());
    }

    #[test]
    fn semver_orders_prerelease_first() {
        let a = parse_semver("1.0.0-rc.1").unwrap();
        let b = parse_semver("1.0.0").unwrap();
        assert!(a < b);
        assert!(parse_semver("1.0").is_none());
        assert!(parse_semver("01.0.0").is_none());
    }
}
