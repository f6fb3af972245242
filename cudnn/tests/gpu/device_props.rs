//! The crate's device presets against a real device's device-properties
//! JSON, field by field.
//!
//! GPU tier: the JSON comes from `$CUDNN_RS_DEVICE_PROPS_JSON` when that
//! file exists (the device check captures it raw, first thing, with the
//! `device_props` example), else from cuDNN for device 0. It is compared
//! with the preset of the same GPU (by name: H200, H100, A100, L4, B200;
//! H200 when the name matches none), and every field that differs is
//! printed (`differs: field: device X, preset Y`), from the raw JSON and
//! before anything parses it, so that a JSON the crate or cuDNN refuses
//! still shows its differences. Then the checks: every required field is
//! there, cuDNN takes the JSON back, and the fields that decide which
//! engines and plans fit (compute capability, SM count, shared memory,
//! registers, thread and block limits) agree; sizes, clocks and versions
//! are reported only.
//!
//! Unit tier: the comparison itself, on the presets (a preset against its
//! own JSON has no difference; a changed field is found and named).

use crate::support;

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
    check(&json, &source, &mut |line| eprintln!("{line}")).map_err(Into::into)
}

/// The device JSON against its preset: the differences first, from the raw
/// JSON, each passed to `log` as soon as it is known, so a JSON that cuDNN's
/// parser or the required-field check refuses still shows where it differs;
/// then the checks, all of them, reported together.
fn check(json: &str, source: &str, log: &mut dyn FnMut(String)) -> Result<(), String> {
    let raw = object(json, "device JSON")?;
    let name = raw
        .get("deviceName")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let (key, spec, matched) = preset_for(&name);
    log(format!(
        "device {name:?} ({source}) against the {key} preset{}",
        if matched {
            ""
        } else {
            " (no preset has this name)"
        }
    ));
    let diffs = compare(json, &spec.to_json())?;
    for diff in &diffs {
        log(format!("  {diff}"));
    }
    log(format!(
        "  {} field(s) differ, {} of them decide plans",
        diffs.len(),
        diffs.iter().filter(|d| d.must_agree).count()
    ));

    // cuDNN 9.19 writes no memoryBusWidth for a live device (first device
    // run, 2026-12-05, H100): logged, and the live-device path must take
    // the JSON without it; any other required field missing is a problem.
    let mut problems: Vec<String> = Vec::new();
    for f in REQUIRED_FIELDS.iter().filter(|f| !raw.contains_key(**f)) {
        if *f == "memoryBusWidth" {
            log(format!(
                "  the device JSON has no {f} (cuDNN 9.19 writes none)"
            ));
        } else {
            problems.push(format!("the device JSON lacks required field {f}"));
        }
    }
    // The crate must take what cuDNN gave for the live device.
    if let Err(e) = DeviceProperties::from_device(0) {
        problems.push(format!("DeviceProperties::from_device(0) refuses: {e}"));
    }
    if matched {
        problems.extend(
            diffs
                .iter()
                .filter(|d| d.must_agree)
                .map(|d| format!("the {key} preset differs where plans depend on it: {d}")),
        );
    }
    ensure!(problems.is_empty(), "{}", problems.join("\n"));
    Ok(())
}

/// A JSON the checks refuse (a required field missing, a field that decides
/// plans changed) still has its differences logged, before the verdict, and
/// the verdict names every problem.
fn unit_check_logs_differences_before_refusing() -> TestResult {
    let mut obj = object(&DeviceSpec::h200().to_json(), "preset")?;
    obj.remove("maxRegistersPerSM")
        .ok_or("the H200 preset has no maxRegistersPerSM")?;
    obj.insert("multiProcessorCount".into(), Value::from(7));
    let json = serde_json::to_string(&obj).map_err(|e| e.to_string())?;
    let mut lines = Vec::new();
    let verdict = check(&json, "test", &mut |l| lines.push(l));
    let text = lines.join("\n");
    ensure!(
        text.contains("differs: maxRegistersPerSM: device (absent)")
            && text.contains("differs: multiProcessorCount: device 7")
            && text.contains("2 field(s) differ, 2 of them decide plans"),
        "logged:\n{text}"
    );
    let err = match verdict {
        Ok(()) => return Err("a JSON without maxRegistersPerSM passed".into()),
        Err(e) => e,
    };
    ensure!(
        err.contains("lacks required field maxRegistersPerSM")
            && err
                .contains("preset differs where plans depend on it: differs: multiProcessorCount"),
        "verdict: {err}"
    );
    // The preset itself: logged, and nothing but (maybe) cuDNN's parser to
    // refuse it when no library is loaded here.
    let mut lines = Vec::new();
    let verdict = check(&DeviceSpec::h200().to_json(), "test", &mut |l| {
        lines.push(l)
    });
    ensure!(
        lines.iter().any(|l| l.contains("0 field(s) differ")),
        "{lines:?}"
    );
    if let Err(e) = verdict {
        ensure!(
            !e.contains("lacks required") && !e.contains("preset differs"),
            "the preset against itself: {e}"
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

pub fn main() {
    run(vec![
        unit(
            "device_props::compare_finds_each_field",
            unit_compare_finds_each_field,
        ),
        unit(
            "device_props::check_logs_differences_before_refusing",
            unit_check_logs_differences_before_refusing,
        ),
        gpu("device_props::matches_preset", gpu_matches_preset),
    ]);
}
