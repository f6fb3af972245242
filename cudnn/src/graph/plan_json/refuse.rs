//! The typed refusal of plan JSON, shared by the checks (its own file so
//! that [`super::dupkeys`], which the device-properties loader uses too,
//! does not reach back into the whole plan checker).

use crate::error::Error;

/// `InvalidArgument` naming the JSON path, with the value shortened.
pub(super) fn bad(path: impl At, rule: impl Into<String>, value: impl std::fmt::Display) -> Error {
    bad_text(path.at(), rule.into(), &value.to_string())
}

/// [`bad`]'s body, compiled once (not once per argument types).
fn bad_text(path: String, rule: String, value: &str) -> Error {
    Error::invalid(format!("plan JSON {path}"), rule, short(value))
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

/// Where a value sits in a plan JSON, for the error that names it: a path,
/// or a path and a suffix (and index) joined only when an error is made
/// (a plan's check reads hundreds of fields, and formatting every path up
/// front cost more than the reads).
pub(in crate::graph) trait At {
    /// The whole path.
    fn at(&self) -> String;
}

impl At for &str {
    fn at(&self) -> String {
        (*self).to_string()
    }
}

impl At for &String {
    fn at(&self) -> String {
        (*self).clone()
    }
}

/// `path` + `suffix`, joined on demand.
pub(in crate::graph) struct Sub<'a>(pub &'a str, pub &'static str);

impl At for Sub<'_> {
    fn at(&self) -> String {
        format!("{}{}", self.0, self.1)
    }
}

/// `path` + `suffix` + `index`, joined on demand.
pub(in crate::graph) struct Idx<'a>(pub &'a str, pub &'static str, pub usize);

impl At for Idx<'_> {
    fn at(&self) -> String {
        format!("{}{}{}", self.0, self.1, self.2)
    }
}

/// `path` + `/` + `key`, joined on demand (a node's field).
#[derive(Clone, Copy)]
pub(in crate::graph) struct Key<'a>(pub &'a str, pub &'a str);

impl At for Key<'_> {
    fn at(&self) -> String {
        format!("{}/{}", self.0, self.1)
    }
}

/// `path` + `/` + `key` + `/` + `index`, joined on demand.
pub(in crate::graph) struct KeyIdx<'a>(pub &'a str, pub &'a str, pub usize);

impl At for KeyIdx<'_> {
    fn at(&self) -> String {
        format!("{}/{}/{}", self.0, self.1, self.2)
    }
}
