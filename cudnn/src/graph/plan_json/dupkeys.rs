//! Duplicate keys in plan and device-properties JSON.

use std::borrow::Cow;
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
    let mut open: Vec<Option<Seen<'_>>> = Vec::new();
    let mut key_next = false;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'{' => {
                open.push(Some(Seen::default()));
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
                let mut escaped = false;
                i += 1;
                loop {
                    // Strings are most of a plan's bytes (compiled payloads
                    // in base64): skip to the next quote or backslash a word
                    // at a time.
                    i = quote_or_backslash(b, i);
                    match b.get(i) {
                        // An escape is a backslash and one ASCII byte (valid JSON).
                        Some(b'\\') => {
                            escaped = true;
                            i += 2;
                        }
                        _ => break,
                    }
                }
                if key_next {
                    let raw = json.get(start..=i.min(b.len() - 1)).unwrap_or_default();
                    // Unescaped only where it has an escape; otherwise the
                    // text between the quotes is the key.
                    let key: Cow<'_, str> = match raw.get(1..raw.len().saturating_sub(1)) {
                        Some(k) if !escaped && raw.len() >= 2 => Cow::Borrowed(k),
                        _ => Cow::Owned(
                            serde_json::from_str(raw)
                                .map_err(|e| bad("", format!("must be JSON ({e})"), short(raw)))?,
                        ),
                    };
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

/// The keys of one object: a list while it is short (most objects of a
/// plan have a handful of keys, and hashing them cost more than comparing),
/// a hash set past [`Seen::LIST`] keys (no quadratic time on a huge object).
#[derive(Default)]
struct Seen<'a> {
    list: Vec<Cow<'a, str>>,
    set: HashSet<Cow<'a, str>>,
}

impl<'a> Seen<'a> {
    const LIST: usize = 16;

    /// Add `key`; `false` when it was there already.
    fn insert(&mut self, key: Cow<'a, str>) -> bool {
        if self.list.contains(&key) {
            return false;
        }
        if self.list.len() < Self::LIST {
            self.list.push(key);
            return true;
        }
        self.set.insert(key)
    }
}

/// The index of the first `"` or `\\` in `b` at or after `from` (`b.len()`
/// if none), eight bytes at a time: a word's bytes equal to either are
/// found with the zero-byte test (`(x - 0x01..) & !x & 0x80..` flags the
/// lowest zero byte exactly), applied to the word XORed with each.
fn quote_or_backslash(b: &[u8], from: usize) -> usize {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let zero = |x: u64| x.wrapping_sub(LO) & !x & HI;
    let rest = b.get(from..).unwrap_or_default();
    let mut chunks = rest.chunks_exact(8);
    let mut at = from;
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        let w = u64::from_le_bytes(w);
        let hit = zero(w ^ (LO * u64::from(b'"'))) | zero(w ^ (LO * u64::from(b'\\')));
        if hit != 0 {
            // Little-endian: the lowest flagged byte is the first one.
            return at + (hit.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    for &x in chunks.remainder() {
        if x == b'"' || x == b'\\' {
            return at;
        }
        at += 1;
    }
    at
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

    /// The word-at-a-time search against the byte loop it replaces, at
    /// every start and alignment, with quotes and backslashes anywhere.
    #[test]
    fn quote_or_backslash_matches_a_byte_loop() {
        let naive = |b: &[u8], from: usize| {
            (from..b.len())
                .find(|&i| b[i] == b'"' || b[i] == b'\\')
                .unwrap_or(b.len())
        };
        let alphabet = b"ab\"\\\x00\x22\x5c\xff\x7f\x80\x21\x23\x5b\x5d";
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for len in 0..80usize {
            for _ in 0..20 {
                let v: Vec<u8> = (0..len)
                    .map(|_| {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        // Mostly plain bytes, some specials.
                        if state.is_multiple_of(5) {
                            alphabet[(state >> 8) as usize % alphabet.len()]
                        } else {
                            b'A' + (state >> 16) as u8 % 26
                        }
                    })
                    .collect();
                for from in 0..=len + 1 {
                    assert_eq!(
                        quote_or_backslash(&v, from),
                        if from > len { from } else { naive(&v, from) },
                        "{v:?} from {from}"
                    );
                }
            }
        }
    }

    /// Objects past the short list: a repeat is found wherever the two
    /// copies fall (both in the list, one in each, both in the set).
    #[test]
    fn long_objects_find_every_repeat() {
        for n in [1usize, 15, 16, 17, 40] {
            let keys: Vec<String> = (0..n).map(|i| format!("k{i}")).collect();
            let body = |ks: &[String]| {
                ks.iter()
                    .map(|k| format!("\"{k}\": 1"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            assert!(no_duplicate_keys(&format!("{{{}}}", body(&keys))).is_ok());
            for a in 0..n {
                let mut ks = keys.clone();
                ks.push(keys[a].clone());
                refused(&format!("{{{}}}", body(&ks)), &keys[a]);
                let mut ks = keys.clone();
                ks.insert(a, keys[a].clone());
                refused(&format!("{{{}}}", body(&ks)), &keys[a]);
            }
        }
    }

    #[test]
    fn escaped_and_plain_keys_compare_unescaped() {
        refused(r#"{"\u0061b": 1, "ab": 2}"#, "ab");
        refused(r#"{"a\"b": 1, "a\u0022b": 2}"#, "a\"b");
        assert!(no_duplicate_keys(r#"{"a\\": 1, "a": 2, "a\\\\": 3}"#).is_ok());
    }

    #[test]
    fn parse_refuses_duplicates() {
        // The loader's parse: serde_json alone keeps the last value.
        let j = r#"{"cudnnVersion": 92801, "cudnnVersion": 91000}"#;
        assert!(serde_json::from_str::<serde_json::Value>(j).is_ok());
        assert!(super::super::parse(j).is_err());
    }
}
