//! The typed refusal of plan JSON, shared by the checks (its own file so
//! that [`super::dupkeys`], which the device-properties loader uses too,
//! does not reach back into the whole plan checker).

use crate::error::Error;

/// `InvalidArgument` naming the JSON path, with the value shortened.
pub(super) fn bad(path: &str, rule: impl Into<String>, value: impl std::fmt::Display) -> Error {
    Error::invalid(format!("plan JSON {path}"), rule, short(&value.to_string()))
}

/// At most 80 bytes of `s` (on a char boundary), with the full length.
pub(super) fn short(s: &str) -> String {
    if s.len() <= 80 {
        s.to_string()
    } else {
        let mut end = 80;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}... ({} bytes)", &s[..end], s.len())
    }
}
