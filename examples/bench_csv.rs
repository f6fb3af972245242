//! Machine-readable output of the `bench_*` examples (`--csv FILE`): one
//! row per measured case, read by `xtask/device/compare_torch.py`, which
//! runs the same cases through PyTorch. Included by each benchmark with
//! `#[path = "bench_csv.rs"] mod bench_csv;`.
//!
//! Columns:
//!
//! | column | meaning |
//! |---|---|
//! | `suite` | `gemm`, `conv` or `ops` |
//! | `case` | human label (`resnet50 3x3 @56`, `square 1024`, `activation relu forward`) |
//! | `op` | machine key of the operation (`gemm`, `fwd`, `bwd_data`, `relu_fwd`, ...) |
//! | `shape` | `key=value` pairs joined by `;` (`m=256;n=256;k=256;batch=1`) |
//! | `dtype` | `f32`, `tf32` (f32 data, TF32 compute), `f16`, `bf16` |
//! | `layout` | `row-major`, `NCHW` or `NHWC` |
//! | `metric` | `TFLOP/s` or `GB/s` |
//! | `work` | floating-point operations (TFLOP/s rows) or bytes (GB/s rows) of one call |
//! | `ours_value` | our rate in `metric` units; empty when the case failed |
//! | `device_us` | device time per call, µs (CUDA events) |
//! | `host_us` | host time to queue one call, µs |
//! | `detail` | the algorithm, or the error |

// Each benchmark uses part of this.
#![allow(dead_code)]

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

/// The header line.
pub const HEADER: &str =
    "suite,case,op,shape,dtype,layout,metric,work,ours_value,device_us,host_us,detail";

/// One measured case.
#[derive(Debug)]
pub struct CsvRow<'a> {
    pub suite: &'a str,
    pub case: &'a str,
    pub op: &'a str,
    pub shape: String,
    pub dtype: &'a str,
    pub layout: &'a str,
    /// `"TFLOP/s"` or `"GB/s"`.
    pub metric: &'a str,
    /// FLOP or bytes of one call.
    pub work: f64,
    /// Device µs per call; `None` when the case failed.
    pub device_us: Option<f64>,
    /// Host µs to queue one call.
    pub host_us: Option<f64>,
    pub detail: String,
}

impl CsvRow<'_> {
    /// `work` per `device_us`, in `metric` units.
    pub fn rate(&self) -> Option<f64> {
        let us = self.device_us.filter(|&t| t > 0.0)?;
        let per_s = self.work / (us * 1e-6);
        Some(if self.metric == "TFLOP/s" {
            per_s / 1e12
        } else {
            per_s / 1e9
        })
    }
}

/// A CSV file being written; `None` inside when no `--csv` was given.
#[derive(Debug)]
pub struct Csv(Option<BufWriter<File>>);

impl Csv {
    /// Create `path` (or do nothing for `None`) and write the header.
    pub fn create(path: Option<&Path>) -> io::Result<Self> {
        let Some(path) = path else {
            return Ok(Csv(None));
        };
        let mut w =
            BufWriter::new(File::create(path).map_err(|e| {
                io::Error::new(e.kind(), format!("creating {}: {e}", path.display()))
            })?);
        writeln!(w, "{HEADER}")?;
        Ok(Csv(Some(w)))
    }

    /// Append one row.
    pub fn row(&mut self, r: &CsvRow<'_>) -> io::Result<()> {
        let Some(w) = &mut self.0 else {
            return Ok(());
        };
        let num = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.6}"));
        let fields = [
            field(r.suite),
            field(r.case),
            field(r.op),
            field(&r.shape),
            field(r.dtype),
            field(r.layout),
            field(r.metric),
            format!("{:.0}", r.work),
            num(r.rate()),
            num(r.device_us),
            num(r.host_us),
            field(&r.detail),
        ];
        writeln!(w, "{}", fields.join(","))
    }

    /// Flush what was written so far (so a run stopped by a time limit
    /// keeps its finished rows).
    pub fn flush(&mut self) -> io::Result<()> {
        match &mut self.0 {
            Some(w) => w.flush(),
            None => Ok(()),
        }
    }

    /// Flush to disk.
    pub fn finish(self) -> io::Result<()> {
        match self.0 {
            Some(mut w) => w.flush(),
            None => Ok(()),
        }
    }
}

/// One field, quoted when it holds a comma, a quote or a line break
/// (RFC 4180); line breaks become spaces.
fn field(s: &str) -> String {
    let s = s.replace(['\n', '\r'], " ");
    if s.contains([',', '"']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

/// `a x b x c` joined with `x`, for shape strings.
pub fn dims(v: &[usize]) -> String {
    v.iter().map(usize::to_string).collect::<Vec<_>>().join("x")
}

/// The value after `flag` in `args`.
pub fn flag_value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    let i = args.iter().position(|a| a == flag)?;
    args.get(i + 1).map(String::as_str)
}
