//! Duplicate keys in plan and device-properties JSON.

use std::collections::HashSet;

use super::refuse::{bad, short};
use crate::error::Result;

/// Refuse JSON (already parsed: valid) with an object that has a key twice.
/// serde_json keeps the last of duplicates and cuDNN's parser may keep
/// another: what this crate checks (whether a plan carries compiled code,
/// its tensors, its bounds) and what cuDNN reads must be the same object.
/// Keys compare after unescaping (`"a"` and `"\u0061"` are one key).
pub(crate) fn no_duplicate_keys(json: &str) -> Result<()> {
    let b = json.as_bytes();
    // One entry per open container: the keys seen, for an object.
    let mut open: Vec<Option<HashSet<String>>> = Vec::new();
    let mut key_next = false;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'{' => {
                open.push(Some(HashSet::new()));
                key_next = true;
            }
            b'[' => {
                open.push(None);
                key_next = false;
            }
            b'}' | b']' => {
                open.pop();
                key_next = false;
            }
            b',' => key_next = matches!(open.last(), Some(Some(_))),
            b'"' => {
                let start = i;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    // An escape is a backslash and one ASCII byte (valid JSON).
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                if key_next {
                    let raw = json.get(start..=i.min(b.len() - 1)).unwrap_or_default();
                    let key: String = serde_json::from_str(raw)
                        .map_err(|e| bad("", format!("must be JSON ({e})"), short(raw)))?;
                    if let Some(Some(seen)) = open.last_mut()
                        && !seen.insert(key.clone())
                    {
                        return Err(bad(
                            "",
                            "must not repeat a key in one object (parsers differ on which they keep)",
                            short(&key),
                        ));
                    }
                }
                key_next = false;
            }
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    fn refused(json: &str, key: &str) {
        match no_duplicate_keys(json) {
            Err(e @ Error::InvalidArgument { .. }) => {
                let s = e.to_string();
                assert!(s.contains("repeat a key") && s.contains(key), "{json}: {s}");
            }
            other => panic!("{json}: {other:?}"),
        }
    }

    #[test]
    fn duplicate_keys_refused() {
        refused(r#"{"a": 1, "a": 2}"#, "a");
        // Unescaped before comparing: the same key.
        refused(r#"{"a": 1, "\u0061": 2}"#, "a");
        // Nested, after a nested object and an array of objects.
        refused(
            r#"{"x": {"k": [1, {"y": 1}], "k2": "s,\"k\"", "k": 3}}"#,
            "k",
        );
        refused(r#"[{"e": 1}, {"e": 1, "e": 2}]"#, "e");
        // The engine's knobs, where a duplicate would decide what cuDNN runs.
        refused(
            r#"{"engine": {"knobChoices": {"CUDNN_KNOB_TYPE_KERNEL_CFG": 1, "CUDNN_KNOB_TYPE_KERNEL_CFG": 2}}}"#,
            "CUDNN_KNOB_TYPE_KERNEL_CFG",
        );
    }

    #[test]
    fn distinct_keys_pass() {
        for ok in [
            r#"{}"#,
            r#"{"a": 1, "b": {"a": 2}, "c": [{"a": 3}, {"a": 4}]}"#,
            // A key equal to a string value is no repeat.
            r#"{"a": "b", "b": "a"}"#,
            r#"{"s": "{\"a\": 1, \"a\": 2}"}"#,
            r#"[1, "a", "a", {"a": null}]"#,
        ] {
            assert!(no_duplicate_keys(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn parse_refuses_duplicates() {
        // The loader's parse: serde_json alone keeps the last value.
        let j = r#"{"cudnnVersion": 92801, "cudnnVersion": 91000}"#;
        assert!(serde_json::from_str::<serde_json::Value>(j).is_ok());
        assert!(super::super::parse(j).is_err());
    }
}
