//! The crate's plan-file text format (plan files and plan-cache files): the
//! format and cuDNN versions they record, the IO signature section, and a
//! line reader whose errors say where.
//!
//! Versions: plan-file format 2 (this one) records the cuDNN that made each
//! plan (`cudnn 92801` for 9.28.1). Format 1 plan files (written before the
//! version was recorded) are still read; their cuDNN version is checked
//! against the plan JSON's own `cudnnVersion` field. Plan-cache files have
//! their own version (`cache::CACHE_FORMAT`, 3: its graph keys changed).

use super::graph::{IoSignature, IoTensor};
use super::tensor::{DType, TensorSpec};
use crate::error::{Error, Result};

/// The format version this crate writes.
pub(crate) const FORMAT: u32 = 2;

/// The plan-file header of a format version.
pub(crate) fn plan_header(format: u32) -> String {
    format!("cudnn-rs plan v{format}")
}

/// The loaded cuDNN's version as cuDNN encodes it in plan JSON
/// (`major * 10000 + minor * 100 + patch`: 92801 for 9.28.1).
///
/// # Errors
/// cuDNN missing or of unknown version.
pub(crate) fn loaded_cudnn_version() -> Result<u64> {
    let v = crate::check::cudnn()?
        .info()
        .version
        .ok_or_else(|| Error::Unsupported {
            what: "a plan file needs the loaded cuDNN's version, which is unknown".to_string(),
            needs: None,
        })?;
    Ok(u64::from(v.major) * 10_000 + u64::from(v.minor) * 100 + u64::from(v.patch))
}

/// `92801` as `9.28.1`.
pub(crate) fn fmt_cudnn_version(v: u64) -> String {
    format!("{}.{}.{}", v / 10_000, (v / 100) % 100, v % 100)
}

/// Which format a header line names (1 or 2), if it is one of ours.
pub(crate) fn header_format(line: &str, prefix: &str) -> Option<u32> {
    let v = line.strip_prefix(prefix)?.strip_prefix(" v")?;
    match v {
        "1" => Some(1),
        "2" => Some(2),
        _ => None,
    }
}

pub(crate) fn write_io(s: &mut String, io: &IoSignature) {
    s.push_str(&format!("tensors {}\n", io.tensors.len()));
    for t in &io.tensors {
        s.push_str(&format!(
            "{} {} {} {} {} {}\n",
            t.uid,
            if t.is_output { "out" } else { "in" },
            t.spec.dtype(),
            join(t.spec.dims()),
            join(t.spec.strides()),
            t.name.len()
        ));
        s.push_str(&t.name);
        s.push('\n');
    }
    s.push_str(&format!("scalars {}\n", io.scalars.len()));
    for (uid, dtype, v) in &io.scalars {
        s.push_str(&format!("{uid} {dtype} {}\n", v.to_bits()));
    }
    // Written only when there are some, so files without scratch read as before.
    if !io.scratch.is_empty() {
        s.push_str(&format!("scratch {}\n", io.scratch.len()));
        for (uid, bytes) in &io.scratch {
            s.push_str(&format!("{uid} {bytes}\n"));
        }
    }
    // Likewise only when there are some.
    if !io.ragged_offsets.is_empty() {
        s.push_str(&format!("ragged {}\n", join(&io.ragged_offsets)));
    }
}

fn join(v: &[i64]) -> String {
    v.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

pub(crate) fn read_io(r: &mut Reader<'_>) -> Result<IoSignature> {
    let n = r.field("tensors")?;
    let n: usize = r.parse("tensors", &n)?;
    if n > 4096 {
        return Err(r.bad("at most 4096 tensors"));
    }
    let mut tensors = Vec::with_capacity(n);
    for _ in 0..n {
        let line = r.line()?;
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() != 6 {
            return Err(r.bad("a tensor line: uid in|out dtype dims strides name_len"));
        }
        let uid: i64 = r.parse("uid", f[0])?;
        let is_output = match f[1] {
            "in" => false,
            "out" => true,
            _ => return Err(r.bad("in or out")),
        };
        let dtype = DType::from_name(f[2]).ok_or_else(|| r.bad("a dtype name"))?;
        let dims = r.list(f[3])?;
        let strides = r.list(f[4])?;
        let name_len: usize = r.parse("name length", f[5])?;
        let name = r.line()?.to_string();
        if name.len() != name_len {
            return Err(r.bad("the tensor name of the stated length"));
        }
        let spec = TensorSpec::new(dtype, &dims, &strides)
            .map_err(|e| r.bad(&format!("a valid tensor ({e})")))?;
        tensors.push(IoTensor {
            name,
            uid,
            spec,
            is_output,
        });
    }
    let n = r.field("scalars")?;
    let n: usize = r.parse("scalars", &n)?;
    if n > 4096 {
        return Err(r.bad("at most 4096 scalars"));
    }
    let mut scalars = Vec::with_capacity(n);
    for _ in 0..n {
        let line = r.line()?;
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() != 3 {
            return Err(r.bad("a scalar line: uid dtype bits"));
        }
        let uid: i64 = r.parse("uid", f[0])?;
        let dtype = DType::from_name(f[1]).ok_or_else(|| r.bad("a dtype name"))?;
        let bits: u64 = r.parse("bits", f[2])?;
        scalars.push((uid, dtype, f64::from_bits(bits)));
    }
    let mut scratch = Vec::new();
    if r.next_starts_with("scratch ") {
        let n = r.field("scratch")?;
        let n: usize = r.parse("scratch", &n)?;
        if n > 64 {
            return Err(r.bad("at most 64 scratch tensors"));
        }
        for _ in 0..n {
            let line = r.line()?;
            let f: Vec<&str> = line.split(' ').collect();
            if f.len() != 2 {
                return Err(r.bad("a scratch line: uid bytes"));
            }
            let uid: i64 = r.parse("uid", f[0])?;
            let bytes: usize = r.parse("bytes", f[1])?;
            if bytes > 1 << 40 {
                return Err(r.bad("a scratch size of at most 1 TiB"));
            }
            scratch.push((uid, bytes));
        }
    }
    let mut ragged_offsets = Vec::new();
    if r.next_starts_with("ragged ") {
        let l = r.field("ragged")?;
        ragged_offsets = r.list(&l)?;
        if ragged_offsets.len() > 64
            || ragged_offsets
                .iter()
                .any(|u| !tensors.iter().any(|t| t.uid == *u && !t.is_output))
        {
            return Err(r.bad("at most 64 ragged offset UIDs, each a listed input"));
        }
    }
    Ok(IoSignature {
        tensors,
        scalars,
        scratch,
        ragged_offsets,
    })
}

/// A line reader for the crate's text formats, with errors that say where.
pub(crate) struct Reader<'t> {
    rest: &'t str,
    line_no: usize,
    what: &'static str,
}

impl<'t> Reader<'t> {
    pub(crate) fn new(text: &'t str) -> Self {
        Self::named(text, "plan file")
    }
    pub(crate) fn named(text: &'t str, what: &'static str) -> Self {
        Self {
            rest: text,
            line_no: 0,
            what,
        }
    }
    pub(crate) fn bad(&self, expected: &str) -> Error {
        Error::invalid(
            self.what,
            format!("line {}: expected {expected}", self.line_no),
            "malformed",
        )
    }
    /// Whether the next line starts with `prefix` (nothing consumed).
    pub(crate) fn next_starts_with(&self, prefix: &str) -> bool {
        self.rest.starts_with(prefix)
    }

    pub(crate) fn at_end(&self) -> bool {
        self.rest.is_empty()
    }
    pub(crate) fn line(&mut self) -> Result<&'t str> {
        if self.rest.is_empty() {
            self.line_no += 1;
            return Err(self.bad("more lines (the file is truncated)"));
        }
        self.line_no += 1;
        let (l, rest) = self.rest.split_once('\n').unwrap_or((self.rest, ""));
        self.rest = rest;
        Ok(l)
    }
    pub(crate) fn field(&mut self, key: &str) -> Result<String> {
        let l = self.line()?;
        match l.split_once(' ') {
            Some((k, v)) if k == key => Ok(v.to_string()),
            _ => Err(self.bad(&format!("`{key} <value>`"))),
        }
    }
    pub(crate) fn parse<T: std::str::FromStr>(&self, what: &str, s: &str) -> Result<T> {
        s.parse()
            .map_err(|_| self.bad(&format!("a number for {what}")))
    }
    pub(crate) fn list(&self, s: &str) -> Result<Vec<i64>> {
        s.split(',')
            .map(|x| self.parse("a list entry", x))
            .collect()
    }
    /// `key <len>\n<len bytes>\n`.
    pub(crate) fn blob(&mut self, key: &str) -> Result<String> {
        let n = self.field(key)?;
        let n: usize = self.parse(key, &n)?;
        if n > self.rest.len() || !self.rest.is_char_boundary(n) {
            return Err(self.bad(&format!("{n} bytes of {key} (the file is truncated)")));
        }
        let (blob, rest) = self.rest.split_at(n);
        let rest = rest
            .strip_prefix('\n')
            .ok_or_else(|| self.bad("a newline after the blob"))?;
        self.line_no += blob.matches('\n').count() + 1;
        self.rest = rest;
        Ok(blob.to_string())
    }
}
