//! FP8 matmul in the graph: the `Graph` method that builds the pattern
//! NVIDIA's frontend builds for a per-tensor-scaled FP8 GEMM (FP8 inputs, an
//! f32 matmul, the two descales, the output's amax and scale), and the
//! target rule every FP8 op shares (FP8 tensor cores: compute capability 8.9
//! or newer).
//!
//! The pattern, with `a`, `b` in E4M3 or E5M2 and every scale an f32 graph
//! input of the matmul's rank with all dims 1:
//!
//! ```text
//! acc  = a @ b                      (f32 accumulation)
//! d    = acc * descale_a * descale_b
//! amax = max |d|                    (before the output scale, as Transformer
//!                                    Engine keeps it for the next step's scale)
//! c    = d * scale_c                (when an FP8 output is wanted)
//! ```
//!
//! `c` is a virtual result: make it an output with [`Graph::output`] in the
//! type wanted (an FP8 type with `scale_c`, or bf16 / f16 / f32 without).

use crate::error::{Error, Result};
use crate::graph::graph::{Graph, Tensor};
use crate::graph::ops::reduction::Reduce;
use crate::graph::tensor::{DType, fmt_dims};

/// The scale inputs of [`Graph::fp8_matmul`]: graph inputs (f32, the
/// matmul's rank, every dim 1), bound at execution like any input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fp8MatmulScales {
    /// Multiplies the accumulator: the inverse of the scale `a` was quantized with.
    pub descale_a: Tensor,
    /// Multiplies the accumulator: the inverse of the scale `b` was quantized with.
    pub descale_b: Tensor,
    /// Multiplies the result before it is stored (an FP8 output's scale);
    /// `None` for a bf16 / f16 / f32 output.
    pub scale_c: Option<Tensor>,
}

/// What [`Graph::fp8_matmul`] adds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fp8Matmul {
    /// The (descaled, then scaled) product: a virtual result; call
    /// [`Graph::output`] with the stored type.
    pub c: Tensor,
    /// `max |acc * descale_a * descale_b|` (all dims 1, f32), an output
    /// already; `None` unless asked for.
    pub amax: Option<Tensor>,
}

/// Whether a GPU of `device_ver` (major*100 + minor*10) has FP8 tensor
/// cores: compute capability 8.9 (Ada) or newer.
///
/// # Errors
/// `Unsupported` naming `what`, the compute capability and what is needed.
pub fn check_fp8_target(what: &str, device_ver: i64) -> Result<()> {
    if device_ver >= 890 {
        return Ok(());
    }
    Err(Error::Unsupported {
        what: format!(
            "{what} on a GPU of compute capability {}.{} (no FP8 tensor cores)",
            device_ver / 100,
            (device_ver % 100) / 10
        ),
        needs: Some(
            "a GPU of compute capability 8.9 or newer (Ada, Hopper, Blackwell)".to_string(),
        ),
    })
}

impl Graph {
    /// A per-tensor-scaled FP8 matmul: `c = (a @ b) * descale_a * descale_b
    /// [* scale_c]`, accumulated in f32, with the amax of the descaled
    /// product when `amax` is set (see the [module](self) docs for the
    /// pattern). `a` `[batch..., M, K]` and `b` `[batch..., K, N]` are FP8
    /// (E4M3 or E5M2, not both E5M2: FP8 tensor cores take at most one E5M2
    /// operand); the ops are added with f32 compute whatever the graph's
    /// compute type, which is left as it was.
    ///
    /// Plans only for GPUs with FP8 tensor cores (compute capability 8.9 or
    /// newer): `Plan::build` refuses others with `Unsupported`.
    ///
    /// # Errors
    /// `a` or `b` not FP8 (both E5M2 is `Unsupported`); a scale not f32, of
    /// another rank than `a` or with a dim other than 1; the matmul's shape
    /// errors ([`matmul`](Self::matmul)).
    pub fn fp8_matmul(
        &mut self,
        a: Tensor,
        b: Tensor,
        scales: &Fp8MatmulScales,
        amax: bool,
    ) -> Result<Fp8Matmul> {
        let label = format!("fp8_matmul {}", self.label());
        let (at, bt) = (self.node(a)?.spec.dtype(), self.node(b)?.spec.dtype());
        for (name, dt) in [("a", at), ("b", bt)] {
            if !dt.is_fp8() {
                return Err(Error::invalid(
                    format!("{label}: {name}'s element type"),
                    "must be fp8e4m3 or fp8e5m2",
                    dt,
                ));
            }
        }
        if at == DType::Fp8E5M2 && bt == DType::Fp8E5M2 {
            return Err(Error::Unsupported {
                what: format!("{label}: both a and b in fp8e5m2"),
                needs: Some("at least one operand in fp8e4m3 (FP8 tensor cores)".to_string()),
            });
        }
        let rank = self.node(a)?.spec.dims().len();
        let mut named = vec![
            ("descale_a", scales.descale_a),
            ("descale_b", scales.descale_b),
        ];
        if let Some(s) = scales.scale_c {
            named.push(("scale_c", s));
        }
        for (name, t) in &named {
            let spec = &self.node(*t)?.spec;
            if spec.dtype() != DType::F32 {
                return Err(Error::invalid(
                    format!("{label}: {name}'s element type"),
                    "must be f32",
                    spec.dtype(),
                ));
            }
            if spec.dims().len() != rank || spec.dims().iter().any(|&d| d != 1) {
                return Err(Error::invalid(
                    format!("{label}: {name}'s dims"),
                    format!("must be {rank} dims of 1 (a per-tensor scale of the matmul's rank)"),
                    fmt_dims(spec.dims()),
                ));
            }
        }
        let prev = self.compute_type();
        self.set_compute_type(DType::F32);
        let added = self.fp8_matmul_ops(a, b, scales, amax, rank);
        self.set_compute_type(prev);
        added
    }

    fn fp8_matmul_ops(
        &mut self,
        a: Tensor,
        b: Tensor,
        scales: &Fp8MatmulScales,
        amax: bool,
        rank: usize,
    ) -> Result<Fp8Matmul> {
        let acc = self.matmul(a, b)?;
        let d = self.mul(acc, scales.descale_a)?;
        let d = self.mul(d, scales.descale_b)?;
        let amax = if amax {
            let m = self.reduction(Reduce::AMax, d, &vec![1i64; rank])?;
            self.output(m, DType::F32)?;
            Some(m)
        } else {
            None
        };
        let c = match scales.scale_c {
            Some(s) => self.mul(d, s)?,
            None => d,
        };
        Ok(Fp8Matmul { c, amax })
    }
}
