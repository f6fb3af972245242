//! Unit tier (nothing needed): plan files, device specs and caches are
//! JSON, and the numbers in them (scales, epsilons, clock rates) must come
//! back from our parser bit for bit. serde_json's default float parser is
//! fast but not correctly rounded (about one literal in six of 17 digits
//! came back one ulp off); the workspace turns on its `float_roundtrip`
//! feature. The truth here is Rust's own formatter: `{}` and `{:?}` print
//! the shortest decimal that reads back as the same value (the standard
//! library's documented round-trip guarantee), so every literal must parse
//! to exactly the bits it was printed from.

use crate::support;

use support::*;

/// SplitMix64 (public-domain constants): a fixed, dependency-free stream.
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        crate::support::splitmix64(&mut self.0)
    }
}

const CASES: usize = 20_003;

/// Random finite values: half raw bit patterns (every exponent), half
/// uniform in `[0, 1)` times a power of ten (the values plan files hold).
fn f64_values() -> Vec<f64> {
    let mut r = Mix(20_261_205);
    let mut out = Vec::with_capacity(CASES);
    while out.len() < CASES {
        let x = if out.len() % 2 == 0 {
            f64::from_bits(r.next())
        } else {
            let u = (r.next() >> 11) as f64 / (1u64 << 53) as f64;
            let p = (r.next() % 40) as i32 - 20;
            u * 10f64.powi(p)
        };
        if x.is_finite() {
            out.push(x);
        }
    }
    out
}

fn check_f64(fmt: fn(f64) -> String) -> TestResult {
    let mut off = Vec::new();
    let values = f64_values();
    for &x in &values {
        let text = fmt(x);
        let back: f64 = serde_json::from_str(&text).map_err(|e| format!("{text}: {e}"))?;
        if back.to_bits() != x.to_bits() {
            off.push(format!("{text} -> {back:?}"));
        }
    }
    ensure!(
        off.is_empty(),
        "{} of {} shortest-form f64 literals did not parse back bit for bit, e.g. {:?}",
        off.len(),
        values.len(),
        &off[..off.len().min(5)]
    );
    Ok(())
}

fn f64_debug_roundtrip() -> TestResult {
    check_f64(|x| format!("{x:?}"))
}

fn f64_display_roundtrip() -> TestResult {
    check_f64(|x| format!("{x}"))
}

/// Through `serde_json::Value` too, the way the plan loader reads a file.
fn f64_in_a_document() -> TestResult {
    let values = f64_values();
    let text = format!(
        "{{\"v\":[{}]}}",
        values
            .iter()
            .map(|x| format!("{x:?}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    let doc: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let arr = doc["v"].as_array().ok_or("no array")?;
    ensure!(arr.len() == values.len(), "length {}", arr.len());
    let off = arr
        .iter()
        .zip(&values)
        .filter(|(v, x)| v.as_f64().map(f64::to_bits) != Some(x.to_bits()))
        .count();
    ensure!(off == 0, "{off} of {} values off", values.len());
    Ok(())
}

/// f32 values printed shortest as f32, read as f64 and narrowed (what a
/// reader of an f32 field does): the nearest f32 of the correctly rounded
/// f64 must be the value printed.
fn f32_roundtrip() -> TestResult {
    let mut r = Mix(31);
    let mut n = 0;
    let mut off = Vec::new();
    while n < CASES {
        let x = f32::from_bits(r.next() as u32);
        if !x.is_finite() {
            continue;
        }
        n += 1;
        for text in [format!("{x:?}"), format!("{x}")] {
            let back: f32 = serde_json::from_str(&text).map_err(|e| format!("{text}: {e}"))?;
            if back.to_bits() != x.to_bits() {
                off.push(format!("{text} -> {back:?}"));
            }
        }
    }
    ensure!(
        off.is_empty(),
        "{} f32 literals off, e.g. {:?}",
        off.len(),
        &off[..off.len().min(5)]
    );
    Ok(())
}

/// Hand-picked literals whose correctly rounded value is known: the
/// smallest subnormal, the largest finite, 0.1 + 0.2's sum, and a
/// 17-digit value the fast parser used to round the wrong way.
fn known_literals() -> TestResult {
    for (text, bits) in [
        ("5e-324", 1u64),
        ("1.7976931348623157e308", 0x7fef_ffff_ffff_ffff),
        ("0.30000000000000004", 0x3fd3_3333_3333_3334),
        ("0.1", 0x3fb9_9999_9999_999a),
        ("2.2250738585072014e-308", 0x0010_0000_0000_0000),
    ] {
        let back: f64 = serde_json::from_str(text).map_err(|e| format!("{text}: {e}"))?;
        ensure!(
            back.to_bits() == bits,
            "{text}: {:#x} vs {bits:#x}",
            back.to_bits()
        );
    }
    Ok(())
}

pub fn main() {
    run(vec![
        unit("json_floats::f64_debug_roundtrip", f64_debug_roundtrip),
        unit("json_floats::f64_display_roundtrip", f64_display_roundtrip),
        unit("json_floats::f64_in_a_document", f64_in_a_document),
        unit("json_floats::f32_roundtrip", f32_roundtrip),
        unit("json_floats::known_literals", known_literals),
    ])
}
