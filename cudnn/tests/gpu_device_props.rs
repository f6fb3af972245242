//! The crate's device presets against a real device's device-properties
//! JSON, field by field.
//!
//! GPU tier: the JSON comes from `$CUDNN_RS_DEVICE_PROPS_JSON` when that
//! file exists (the device check captures it raw, first thing, with the
//! `device_props` example), else from cuDNN for device 0. It is compared
//! with the preset of the same GPU (by name: H200, H100, A100, L4, B200;
//! H200 when the name matches none), and every field that differs is
//! printed (`differs: field: device X, preset Y`). The fields that decide
//! which engines and plans fit (compute capability, SM count, shared memory,
//! registers, thread and block limits) must agree; sizes, clocks and
//! versions are reported only.
//!
//! Unit tier: the comparison itself, on the presets (a preset against its
//! own JSON has no difference; a changed field is found and named).

mod support;

use std::collections::BTreeMap;

use cudnn::graph::{DeviceProperties, DeviceSpec, REQUIRED_FIELDS};
use serde_json::Value;
use support::*;

/// Fields whose difference means plans made for the preset may not fit.
const MUST_AGREE: &[&str] = &[
    "deviceVer",
    "multiProcessorCount",
    "maxSharedMemoryPerBlock",
    "maxSharedMemoryPerBlockOptin",
    "reservedSharedMemoryPerBlock",
    "maxRegistersPerSM",
    "regsPerBlock",
    "warpSize",
    "maxThreadsPerBlock",
    "maxThreadsPerSM",
    "maxCtasPerSM",
    "maxGridSize",
    "maxBlockSize",
];

/// One field's difference.
#[derive(Debug, PartialEq)]
struct Diff {
    field: String,
    device: Option<Value>,
    preset: Option<Value>,
    must_agree: bool,
}

impl std::fmt::Display for Diff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |v: &Option<Value>| v.as_ref().map_or("(absent)".to_string(), |v| v.to_string());
        write!(
            f,
            "differs: {}: device {}, preset {}{}",
            self.field,
            show(&self.device),
            show(&self.preset),
            if self.must_agree {
                "  <- decides plans"
            } else {
                ""
            }
        )
    }
}

fn object(json: &str, what: &str) -> Result<BTreeMap<String, Value>, String> {
    match serde_json::from_str::<Value>(json) {
        Ok(Value::Object(m)) => Ok(m.into_iter().collect()),
        Ok(other) => Err(format!("{what}: not a JSON object: {other}")),
        Err(e) => Err(format!("{what}: not JSON ({e}): {json:.200}")),
    }
}

/// Every field present in either JSON whose values differ.
fn compare(device: &str, preset: &str) -> Result<Vec<Diff>, String> {
    let d = object(device, "device JSON")?;
    let p = object(preset, "preset JSON")?;
    let mut fields: Vec<&String> = d.keys().chain(p.keys()).collect();
    fields.sort();
    fields.dedup();
    Ok(fields
        .into_iter()
        .filter(|f| d.get(*f) != p.get(*f))
        .map(|f| Diff {
            field: f.clone(),
            device: d.get(f).cloned(),
            preset: p.get(f).cloned(),
            must_agree: MUST_AGREE.contains(&f.as_str()),
        })
        .collect())
}

/// The preset for a device name, and whether the name matched one.
fn preset_for(name: &str) -> (&'static str, DeviceSpec, bool) {
    let upper = name.to_ascii_uppercase();
    for (key, spec) in [
        ("H200", DeviceSpec::h200()),
        ("H100", DeviceSpec::h100()),
        ("A100", DeviceSpec::a100()),
        ("L4", DeviceSpec::l4()),
        ("B200", DeviceSpec::b200()),
    ] {
        if upper.contains(key) {
            return (key, spec, true);
        }
    }
    ("H200", DeviceSpec::h200(), false)
}

fn device_json() -> Result<(String, String), String> {
    if let Some(path) = std::env::var_os("CUDNN_RS_DEVICE_PROPS_JSON") {
        let path = std::path::PathBuf::from(path);
        if path.is_file() {
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            return Ok((
                text,
                format!("captured by device_props: {}", path.display()),
            ));
        }
    }
    let p = DeviceProperties::from_device(0).map_err(|e| e.to_string())?;
    Ok((p.json().to_string(), "read from cuDNN for device 0".into()))
}

fn gpu_matches_preset() -> TestResult {
    let (json, source) = device_json()?;
    let name = object(&json, "device JSON")?
        .get("deviceName")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let (key, spec, matched) = preset_for(&name);
    eprintln!(
        "device {name:?} ({source}) against the {key} preset{}",
        if matched {
            ""
        } else {
            " (no preset has this name)"
        }
    );
    // cuDNN itself must take what it gave.
    DeviceProperties::from_json(&json).map_err(|e| format!("the captured JSON: {e}"))?;
    let d = object(&json, "device JSON")?;
    for f in REQUIRED_FIELDS {
        ensure!(
            d.contains_key(f),
            "the device JSON lacks required field {f}"
        );
    }
    let diffs = compare(&json, &spec.to_json())?;
    for diff in &diffs {
        eprintln!("  {diff}");
    }
    eprintln!(
        "  {} field(s) differ, {} of them decide plans",
        diffs.len(),
        diffs.iter().filter(|d| d.must_agree).count()
    );
    if matched {
        let bad: Vec<String> = diffs
            .iter()
            .filter(|d| d.must_agree)
            .map(|d| d.to_string())
            .collect();
        ensure!(
            bad.is_empty(),
            "the {key} preset differs from the device where plans depend on it:\n{}",
            bad.join("\n")
        );
    }
    Ok(())
}

fn unit_compare_finds_each_field() -> TestResult {
    for spec in [
        DeviceSpec::h200(),
        DeviceSpec::h100(),
        DeviceSpec::a100(),
        DeviceSpec::l4(),
        DeviceSpec::b200(),
    ] {
        let json = spec.to_json();
        ensure!(
            compare(&json, &json)?.is_empty(),
            "{}: self-compare",
            spec.name
        );
        let (key, found, matched) = preset_for(&spec.name);
        ensure!(matched && found == spec, "{}: preset {key}", spec.name);
    }
    // Each required field changed in turn is found, named, and ranked.
    let base = DeviceSpec::h200().to_json();
    let obj = object(&base, "preset")?;
    for f in REQUIRED_FIELDS {
        let mut changed = obj.clone();
        let v = changed.get(f).cloned().ok_or(format!("{f} missing"))?;
        let new = match &v {
            Value::Number(n) => Value::from(n.as_i64().unwrap_or(0) + 1),
            Value::String(s) => Value::from(format!("{s} (changed)")),
            Value::Array(a) => Value::from(vec![a.len() as i64; 4]),
            other => return Err(format!("{f}: unexpected {other}").into()),
        };
        changed.insert(f.to_string(), new.clone());
        let text = serde_json::to_string(&changed).map_err(|e| e.to_string())?;
        let diffs = compare(&text, &base)?;
        ensure!(
            diffs
                == vec![Diff {
                    field: f.to_string(),
                    device: Some(new),
                    preset: Some(v),
                    must_agree: MUST_AGREE.contains(&f),
                }],
            "{f}: {diffs:?}"
        );
        // A field only one side has is a difference too.
        changed.remove(f);
        let text = serde_json::to_string(&changed).map_err(|e| e.to_string())?;
        let diffs = compare(&text, &base)?;
        ensure!(
            diffs.len() == 1 && diffs[0].device.is_none(),
            "{f} removed: {diffs:?}"
        );
    }
    ensure!(
        compare("[1]", &base).is_err(),
        "an array is not a JSON object"
    );
    ensure!(compare("{", &base).is_err(), "bad JSON");
    Ok(())
}

fn main() {
    run(vec![
        unit(
            "device_props::compare_finds_each_field",
            unit_compare_finds_each_field,
        ),
        gpu("device_props::matches_preset", gpu_matches_preset),
    ]);
}
