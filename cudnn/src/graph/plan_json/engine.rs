//! The device profile and the engine (its knobs and compiled payload) of a
//! plan JSON.

use serde_json::Value;

use super::super::target::{EXTRA_PROFILE_FIELDS, Target, property_fault};
use super::{MAX_JSON_BYTES, arr, bad, int, keys, obj, one_of, string};
use crate::error::{Error, Result};

const MAX_KERNELS: usize = 256;
const MAX_PARAMS: usize = 4096;

/// The device profile: fields of cuDNN's device properties only, each in
/// range, and the same architecture and SM count as `target`.
pub(super) fn profile(v: &Value, target: Option<&Target>) -> Result<i64> {
    let path = "/GPUProfile";
    let m = obj(v, path)?;
    let mut allowed: Vec<&str> = super::super::REQUIRED_FIELDS.to_vec();
    allowed.extend(EXTRA_PROFILE_FIELDS);
    // cuDNN 9.28 writes every field of the device properties; older releases
    // (9.10, 9.19) a subset. The architecture and SM count are always there.
    keys(m, path, &allowed, &["deviceVer", "multiProcessorCount"])?;
    // The same range check as a target's properties (`Target` planning and
    // reload agree).
    for (k, val) in m {
        if let Some(Err(f)) = property_fault(k, val) {
            return Err(bad(&format!("{path}/{k}{}", f.at), f.rule, f.got));
        }
    }
    let ver = m["deviceVer"].as_i64().unwrap_or(0);
    if !(500..2000).contains(&ver) || ver % 10 != 0 {
        return Err(bad(
            "/GPUProfile/deviceVer",
            "must be major*100 + minor*10 (H200: 900)",
            ver,
        ));
    }
    let Some(target) = target else {
        return Ok(ver);
    };
    let props = target.properties();
    let sms = m["multiProcessorCount"].as_i64().unwrap_or(0);
    if ver != props.device_ver() || sms != props.sm_count() {
        return Err(Error::Unsupported {
            what: format!(
                "this plan was compiled for another GPU architecture (plan JSON /GPUProfile: \
                 deviceVer {ver}, {sms} SMs), not {} (deviceVer {}, {} SMs)",
                target.fingerprint(),
                props.device_ver(),
                props.sm_count()
            ),
            needs: Some("a plan built for this target".to_string()),
        });
    }
    Ok(ver)
}

/// Whether `s` holds only standard base64 characters (`A-Z a-z 0-9 + / =`).
/// Compiled payloads are megabytes of it: checked 64 bytes at a time with
/// branch-free range tests the compiler turns into vector code.
fn is_base64(s: &str) -> bool {
    fn ok(b: u8) -> bool {
        (b.wrapping_sub(b'A') < 26)
            | (b.wrapping_sub(b'a') < 26)
            | (b.wrapping_sub(b'0') < 10)
            | (b == b'+')
            | (b == b'/')
            | (b == b'=')
    }
    let b = s.as_bytes();
    let mut chunks = b.chunks_exact(64);
    for c in &mut chunks {
        if !c.iter().fold(true, |all, &x| all & ok(x)) {
            return false;
        }
    }
    chunks.remainder().iter().all(|&x| ok(x))
}

/// Decoded length of standard base64 text (checked to be base64 before).
fn base64_len(s: &str) -> usize {
    let pad = s.bytes().rev().take_while(|&b| b == b'=').count();
    (s.len() / 4 * 3).saturating_sub(pad)
}

/// A kernel parameter patched from a tensor: its address (or TMA
/// descriptor), or its value.
#[derive(Clone, Debug)]
pub(super) struct Param {
    /// The JSON path of its uid.
    pub path: String,
    pub uid: i64,
    /// Patched with the tensor's value (a by-value scalar), `size` bytes.
    pub by_value: bool,
    pub size: i64,
}

/// What [`engine`] found in a plan's engine.
pub(super) struct EngineInfo {
    /// Whether it carries compiled kernel code.
    pub runtime_compiled: bool,
    /// Every kernel parameter patched from a tensor.
    pub param_uids: Vec<Param>,
    /// `(path, header)` of every attention descriptor in a kernel's
    /// parameter block (see [`super::attention`]).
    pub attn_headers: Vec<(String, [u32; 8])>,
}

/// The engine: its id, knobs and compiled payload. Returns whether it
/// carries compiled code, the `(JSON path, uid)` of every kernel parameter
/// patched with a tensor's address or value (each must name a tensor of the
/// plan's graph: the caller checks), and the attention kernels' descriptors
/// (every SDPA kernel must have one: the caller checks them against the
/// graph).
pub(super) fn engine(v: &Value, device_ver: i64) -> Result<EngineInfo> {
    let path = "/engine";
    let m = obj(v, path)?;
    keys(
        m,
        path,
        &["engineId", "smVersion", "knobChoices", "payload"],
        &["engineId", "smVersion", "knobChoices"],
    )?;
    int(&m["engineId"], "/engine/engineId", 0, 1 << 20)?;
    int(&m["smVersion"], "/engine/smVersion", device_ver, device_ver)?;
    let knobs = obj(&m["knobChoices"], "/engine/knobChoices")?;
    if knobs.len() > 64 {
        return Err(bad(
            "/engine/knobChoices",
            "must have at most 64 knobs",
            knobs.len(),
        ));
    }
    for (k, val) in knobs {
        let p = format!("/engine/knobChoices/{k}");
        let known = k.strip_prefix("CUDNN_KNOB_TYPE_").is_some_and(|r| {
            !r.is_empty()
                && r.bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        });
        if !known {
            return Err(bad(&p, "must be a knob type (CUDNN_KNOB_TYPE_...)", k));
        }
        int(val, &p, -1, i64::from(i32::MAX))?;
    }
    let Some(payload) = m.get("payload") else {
        return Ok(EngineInfo {
            runtime_compiled: false,
            param_uids: Vec::new(),
            attn_headers: Vec::new(),
        });
    };
    let mut uids = Vec::new();
    let mut headers = Vec::new();
    let path = "/engine/payload";
    let p = obj(payload, path)?;
    if p.contains_key("kernels") {
        keys(p, path, &["kernels"], &["kernels"])?;
        let kernels = arr(&p["kernels"], "/engine/payload/kernels", MAX_KERNELS)?;
        let mut names = std::collections::HashSet::new();
        for (i, k) in kernels.iter().enumerate() {
            let kp = format!("/engine/payload/kernels/{i}");
            let km = obj(k, &kp)?;
            keys(
                km,
                &kp,
                &["kernelName", "kernelParams", "cubin"],
                &["kernelName", "cubin"],
            )?;
            let name = string(&km["kernelName"], &format!("{kp}/kernelName"), 4096)?;
            // Each kernel once (cuDNN 9.10 crashes on a repeated one).
            if !names.insert(name) {
                return Err(bad(
                    &format!("{kp}/kernelName"),
                    "must be unique in the payload",
                    name,
                ));
            }
            let cubin = string(&km["cubin"], &format!("{kp}/cubin"), MAX_JSON_BYTES)?;
            if !is_base64(cubin) {
                return Err(bad(&format!("{kp}/cubin"), "must be base64", "other bytes"));
            }
            let before = headers.len();
            if let Some(params) = km.get("kernelParams") {
                kernel_params(
                    params,
                    &format!("{kp}/kernelParams"),
                    &mut uids,
                    &mut headers,
                )?;
            }
            // An SDPA kernel walks the shapes of its attention descriptor:
            // without one, nothing ties it to the graph's.
            if name.contains("_sdpa_") && headers.len() == before {
                return Err(bad(
                    &format!("{kp}/kernelParams"),
                    "must hold the attention descriptor (`attnDesc`) of its SDPA kernel",
                    name,
                ));
            }
        }
    } else {
        keys(
            p,
            path,
            &["Records", "RecordSize", "Fatbins", "guid"],
            &["Records", "RecordSize", "Fatbins", "guid"],
        )?;
        let rec = string(&p["Records"], "/engine/payload/Records", MAX_JSON_BYTES)?;
        if !is_base64(rec) {
            return Err(bad(
                "/engine/payload/Records",
                "must be base64",
                "other bytes",
            ));
        }
        let size = int(&p["RecordSize"], "/engine/payload/RecordSize", 1, 1 << 30)?;
        if usize::try_from(size).ok() != Some(base64_len(rec)) {
            return Err(Error::mismatch(
                "plan JSON /engine/payload/RecordSize (the decoded Records)",
                base64_len(rec),
                size,
            ));
        }
        let fatbins = arr(&p["Fatbins"], "/engine/payload/Fatbins", 0)?;
        let _ = fatbins;
        int(&p["guid"], "/engine/payload/guid", 0, i64::from(i32::MAX))?;
    }
    Ok(EngineInfo {
        runtime_compiled: true,
        param_uids: uids,
        attn_headers: headers,
    })
}

/// The eight u32 at byte `at` of the base64 parameter block `raw`.
fn attn_header(raw: &str, at: i64, path: &str) -> Result<[u32; 8]> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(raw)
        .map_err(|_| bad(&format!("{path}/rawData"), "must be base64", "other bytes"))?;
    let at = usize::try_from(at).unwrap_or(usize::MAX);
    let words = at
        .checked_add(32)
        .and_then(|end| bytes.get(at..end))
        .ok_or_else(|| {
            bad(
                &format!("{path}/value"),
                format!(
                    "must leave the attention descriptor's 32 bytes inside the {}-byte parameter block",
                    bytes.len()
                ),
                at,
            )
        })?;
    let mut h = [0u32; 8];
    for (i, c) in words.chunks_exact(4).enumerate() {
        h[i] = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
    Ok(h)
}

/// A kernel's parameter block: every patched offset inside the raw data;
/// the attention descriptor's header (eight little-endian u32 at the
/// offset named `attnDesc`) is read out for [`super::attention`].
fn kernel_params(
    v: &Value,
    path: &str,
    uids: &mut Vec<Param>,
    headers: &mut Vec<(String, [u32; 8])>,
) -> Result<()> {
    let m = obj(v, path)?;
    keys(m, path, &["offsets", "rawData"], &["offsets", "rawData"])?;
    let raw = string(&m["rawData"], &format!("{path}/rawData"), 1 << 20)?;
    if !is_base64(raw) || raw.len() % 4 != 0 {
        return Err(bad(
            &format!("{path}/rawData"),
            "must be base64",
            "other bytes",
        ));
    }
    let len = i64::try_from(base64_len(raw)).unwrap_or(i64::MAX);
    let offsets = arr(&m["offsets"], &format!("{path}/offsets"), MAX_PARAMS)?;
    for (i, o) in offsets.iter().enumerate() {
        let p = format!("{path}/offsets/{i}");
        let om = obj(o, &p)?;
        keys(
            om,
            &p,
            &["value", "uid", "update_as", "size", "name"],
            &["value"],
        )?;
        let at = int(
            &om["value"],
            &format!("{p}/value"),
            0,
            len.saturating_sub(1),
        )?;
        let uid = match om.get("uid") {
            Some(u) => Some(int(u, &format!("{p}/uid"), i64::MIN, i64::MAX)?),
            None => None,
        };
        let size = match om.get("size") {
            Some(s) => int(s, &format!("{p}/size"), 1, 8)?,
            None => 1,
        };
        let update_as = match om.get("update_as") {
            Some(u) => Some(one_of(
                u,
                &format!("{p}/update_as"),
                &["pointer", "workspace", "value", "tma_desc"],
            )?),
            None => None,
        };
        let width = match update_as {
            Some("pointer" | "workspace") => 8,
            Some("value") => size,
            _ => 1,
        };
        // A parameter patched from a tensor (its address, value or TMA
        // descriptor) names that tensor; the workspace is the run's own.
        if let (Some(uid), Some(how)) = (uid, update_as)
            && how != "workspace"
        {
            uids.push(Param {
                path: format!("{p}/uid"),
                uid,
                by_value: how == "value",
                size,
            });
        }
        if om.contains_key("update_as") != om.contains_key("uid") {
            return Err(bad(&p, "must have both uid and update_as, or neither", o));
        }
        if let Some(n) = om.get("name") {
            let name = string(n, &format!("{p}/name"), 256)?;
            if name == "attnDesc" {
                headers.push((format!("{p}/value"), attn_header(raw, at, &p)?));
            }
        }
        if at.checked_add(width).is_none_or(|end| end > len) {
            return Err(bad(
                &format!("{p}/value"),
                format!("must leave {width} bytes inside the {len}-byte parameter block"),
                at,
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::is_base64;

    /// The chunked check against the byte-by-byte predicate it replaces,
    /// for every byte value at every position of strings across the 64-byte
    /// chunk boundary.
    #[test]
    fn is_base64_matches_the_plain_predicate() {
        let plain = |s: &[u8]| {
            s.iter()
                .all(|&b| b.is_ascii_alphanumeric() || b"+/=".contains(&b))
        };
        for len in [0usize, 1, 63, 64, 65, 127, 128, 130] {
            let base: Vec<u8> = (0..len).map(|i| b"Az09+/="[i % 7]).collect();
            let s = String::from_utf8(base.clone()).unwrap_or_default();
            assert!(is_base64(&s), "{len}");
            for at in [0, len / 2, len.saturating_sub(1)] {
                if at >= len {
                    continue;
                }
                for x in 0u8..128 {
                    let mut v = base.clone();
                    v[at] = x;
                    let s = String::from_utf8(v.clone()).unwrap_or_default();
                    assert_eq!(is_base64(&s), plain(&v), "byte {x} at {at} of {len}");
                }
                // A multi-byte character is never base64.
                let mut v = base.clone();
                v.splice(at..=at, "é".bytes());
                let s = String::from_utf8(v).unwrap_or_default();
                assert!(!is_base64(&s));
            }
        }
    }
}
