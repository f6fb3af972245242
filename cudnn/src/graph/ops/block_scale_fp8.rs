//! Block-scale (MXFP8) quantize and dequantize in the graph: cuDNN's
//! `CUDNN_BACKEND_OPERATION_BLOCK_SCALE_QUANTIZE_DESCRIPTOR` and
//! `..._DEQUANTIZE_DESCRIPTOR`. A block of [`MXFP8_BLOCK`] consecutive
//! elements along the last dim shares one E8M0 scale (a power of two):
//! `y = fp8(x / scale)`, `x ≈ y * scale`.
//!
//! Rules: cuDNN 9.7.0 or newer (the release that added the operations) and
//! a Blackwell GPU (compute capability 10.0 or newer: MXFP8 is a Blackwell
//! tensor-core format); elsewhere `Plan::build` refuses with `Unsupported`.
//!
//! Rank: not 3 (2 and 4 are what the host tier finalizes). cuDNN ties a 3-D block scale to
//! the `CUDNN_TENSOR_REORDERING_F8_128x4` layout (the scales of a GEMM
//! operand, swizzled in tiles of 128 x 4 and padded to whole tiles): cuDNN
//! 9.28.1 refuses a 3-D quantize whose scale is not so reordered
//! (`BAD_PARAM_ATTRIBUTE_TYPE` at finalize). The crate's tensors carry no
//! reordering and its bindings are checked against the packed row-major
//! size, so a 3-D x is refused here with `Unsupported` for both operations
//! (for the dequantize, which cuDNN finalizes, as a precaution: a kernel
//! reading padded 128 x 4 tiles from a row-major buffer would read past
//! it). View the same memory as 4-D (`[1, a, b, c]`) instead.
//!
//! Scale buffer size: the scales are described to cuDNN packed row-major
//! (x's dims with the last divided by 32), but NVIDIA documents MXFP8
//! scale factors in whole 128 x 4 tiles (cuBLASLt's
//! `VEC32_UE8M0` layout; cuDNN's `F8_128x4` reordering; the frontend's
//! block-scale samples size them as rows rounded up to 128 times scale
//! columns rounded up to 4), and whether a kernel reading or writing
//! non-reordered scales stays inside the packed size for other shapes is
//! not documented and cannot be seen without a Blackwell GPU. An undersized
//! scale buffer is an out-of-bounds access on the device, and the bound
//! buffer is checked against the packed span, so both operations accept
//! only shapes whose padded size equals the packed one
//! ([`mxfp8_scale_sizes`]): the second-to-last dim of x (its rows; for a
//! 2-D x, all of them) a multiple of [`MXFP8_SCALE_TILE_ROWS`] (128) and
//! the last dim a multiple of `32 * `[`MXFP8_SCALE_TILE_COLS`] (128).
//! Other shapes are refused with a typed error naming both sizes (pad the
//! tensor). The rule reads the last two *logical* dims as the tile's rows
//! and columns, which is the memory layout only for a packed row-major x
//! (the scale tensor is row-major): both operations require x (and the
//! dequantize its scale) packed row-major, refusing other strides with a
//! typed error naming them (a `[B, H, S, D]` x stored BSHD would be tiled
//! over another axis by a kernel that follows memory order). A 1-D x (one
//! row) never fills a 128-row tile and is refused with its own message.
//!
//! What the host tier shows (cuDNN 9.28.1, no device): both operations and
//! their graphs finalize for 2-D and 4-D tensors, but cuDNN offers no
//! engine for them without a live device. Their plans are for the GPU tier. A plan JSON holding these nodes is not on
//! the plan-JSON allow-list (no plan, so no node fields, could be observed
//! here) and is refused by `from_cudnn_json` as an unknown node.

use super::{Built, OpNode};
use crate::error::{Error, Result};
use crate::graph::backend::{Descriptor, attr, kind};
use crate::graph::graph::{Graph, Tensor};
use crate::graph::tensor::{DType, TensorSpec, fmt_dims};

/// The MXFP8 block size: 32 elements share a scale.
pub const MXFP8_BLOCK: i64 = 32;

/// The rows of one MXFP8 scale tile (NVIDIA's 128 x 4 layout).
pub const MXFP8_SCALE_TILE_ROWS: i64 = 128;

/// The scale columns of one MXFP8 scale tile (4 scales: 128 elements of x).
pub const MXFP8_SCALE_TILE_COLS: i64 = 4;

/// `(packed, padded)`: the E8M0 scale elements of an x of `dims` (block
/// along the last dim), packed row-major (`product(dims) / 32`) and in
/// whole 128 x 4 tiles as NVIDIA documents the MXFP8 scale layout: the
/// leading dims (all but the last two) times the second-to-last rounded up
/// to 128, times the scale columns (`last / 32`) rounded up to 4. A 1-D x
/// has one row. E.g. x `[129, 64]`: packed 129 x 2 = 258, padded 256 x 4 =
/// 1024. This is the larger of the two ways a kernel may tile a 4-D x (per
/// leading index or over all rows).
///
/// # Errors
/// A dim below 1, a last dim not a multiple of [`MXFP8_BLOCK`], or a size
/// that overflows (`InvalidArgument` naming `dims`).
pub fn mxfp8_scale_sizes(dims: &[i64]) -> Result<(usize, usize)> {
    let bad = |rule: &str| Error::invalid("dims", rule.to_string(), fmt_dims(dims));
    let (&last, head) = dims.split_last().ok_or_else(|| bad("must not be empty"))?;
    if dims.iter().any(|&d| d < 1) {
        return Err(bad("every dim must be >= 1"));
    }
    if last % MXFP8_BLOCK != 0 {
        return Err(bad(
            "the last dim must be a multiple of the MXFP8 block (32)",
        ));
    }
    let cols = last / MXFP8_BLOCK;
    let (rows, lead) = match head.split_last() {
        Some((&r, lead)) => (r, lead),
        None => (1, &[][..]),
    };
    let overflow = || bad("the scale size overflows");
    let lead = lead
        .iter()
        .try_fold(1i64, |a, &d| a.checked_mul(d))
        .ok_or_else(overflow)?;
    let round = |n: i64, m: i64| n.checked_add(m - 1).map(|x| x / m * m);
    let packed = lead
        .checked_mul(rows)
        .and_then(|x| x.checked_mul(cols))
        .ok_or_else(overflow)?;
    let padded = round(rows, MXFP8_SCALE_TILE_ROWS)
        .zip(round(cols, MXFP8_SCALE_TILE_COLS))
        .and_then(|(r, c)| lead.checked_mul(r)?.checked_mul(c))
        .ok_or_else(overflow)?;
    let to_usize = |n: i64| usize::try_from(n).map_err(|_| overflow());
    Ok((to_usize(packed)?, to_usize(padded)?))
}

/// What [`Graph::block_scale_quantize`] adds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockScaled {
    /// The FP8 values (a graph output, x's dims and layout).
    pub y: Tensor,
    /// The E8M0 block scales (a graph output: x's dims with the last
    /// divided by [`MXFP8_BLOCK`], packed row-major; x's shape fills whole
    /// 128 x 4 scale tiles, so this is also NVIDIA's padded size, see the
    /// [module](super::block_scale_fp8) docs).
    pub scale: Tensor,
}

/// The per-target rule of the block-scale operations.
///
/// # Errors
/// `Unsupported` below compute capability 10.0 or cuDNN 9.7.0.
pub fn check_block_scale_target(device_ver: i64, cudnn: (u32, u32, u32)) -> Result<()> {
    let needs = if cudnn < (9, 7, 0) {
        Some("cuDNN 9.7.0 or newer")
    } else if device_ver < 1000 {
        Some("a Blackwell GPU (compute capability 10.0 or newer)")
    } else {
        None
    };
    match needs {
        None => Ok(()),
        Some(n) => Err(Error::Unsupported {
            what: format!(
                "block-scale (MXFP8) quantize / dequantize on a GPU of compute capability {}.{} with cuDNN {}.{}.{}",
                device_ver / 100,
                (device_ver % 100) / 10,
                cudnn.0,
                cudnn.1,
                cudnn.2
            ),
            needs: Some(n.to_string()),
        }),
    }
}

#[derive(Clone, Debug)]
pub(crate) struct BlockScaleOp {
    quantize: bool,
    x: usize,
    scale: usize,
    y: usize,
}

impl OpNode for BlockScaleOp {
    fn name(&self) -> String {
        if self.quantize {
            "block_scale_quantize".to_string()
        } else {
            "block_scale_dequantize".to_string()
        }
    }
    fn tensors(&self) -> Vec<(&'static str, usize, bool)> {
        if self.quantize {
            vec![
                ("x", self.x, false),
                ("y", self.y, true),
                ("scale", self.scale, true),
            ]
        } else {
            vec![
                ("x", self.x, false),
                ("scale", self.scale, false),
                ("y", self.y, true),
            ]
        }
    }
    fn signature(&self) -> String {
        format!("block={MXFP8_BLOCK}")
    }
    fn check_target(&self, device_ver: i64) -> Result<()> {
        check_block_scale_target(device_ver, super::sdpa::loaded_cudnn()?)
    }
    fn build(
        &self,
        t: &[Descriptor<kind::Tensor>],
        compute: DType,
        built: &mut Built,
    ) -> Result<()> {
        let block = i32::try_from(MXFP8_BLOCK).unwrap_or(32);
        if self.quantize {
            let mut d = Descriptor::<kind::BlockScaleQuantizeOp>::new()?;
            d.set_descriptors(attr::OPERATION_BLOCK_SCALE_QUANTIZE_XDESC, &[&t[self.x]])?;
            d.set_descriptors(attr::OPERATION_BLOCK_SCALE_QUANTIZE_YDESC, &[&t[self.y]])?;
            d.set_descriptors(
                attr::OPERATION_BLOCK_SCALE_QUANTIZE_SCALE_DESC,
                &[&t[self.scale]],
            )?;
            d.set(
                attr::OPERATION_BLOCK_SCALE_QUANTIZE_MATH_PREC,
                &[compute.raw()],
            )?;
            d.set(attr::OPERATION_BLOCK_SCALE_QUANTIZE_BLOCK_SIZE, &[block])?;
            d.finalize()?;
            built.ops.push(Box::new(d));
        } else {
            let mut d = Descriptor::<kind::BlockScaleDequantizeOp>::new()?;
            d.set_descriptors(attr::OPERATION_BLOCK_SCALE_DEQUANTIZE_XDESC, &[&t[self.x]])?;
            d.set_descriptors(
                attr::OPERATION_BLOCK_SCALE_DEQUANTIZE_SCALE_DESC,
                &[&t[self.scale]],
            )?;
            d.set_descriptors(attr::OPERATION_BLOCK_SCALE_DEQUANTIZE_YDESC, &[&t[self.y]])?;
            d.set(
                attr::OPERATION_BLOCK_SCALE_DEQUANTIZE_MATH_PREC,
                &[compute.raw()],
            )?;
            d.set(
                attr::OPERATION_BLOCK_SCALE_DEQUANTIZE_BLOCK_SIZE,
                &[1, block],
            )?;
            d.finalize()?;
            built.ops.push(Box::new(d));
        }
        Ok(())
    }
}

/// `spec` must be packed row-major (the strides [`TensorSpec::row_major`]
/// gives its dims; a dim of extent 1 may have any stride, it is never
/// stepped along). The 128 x 4 tile rule takes the second-to-last logical
/// dim as the rows and the scale tensor is row-major: for another layout
/// (a `[B, H, S, D]` x stored BSHD) a kernel tiling in memory order would
/// take another axis as its rows, and the scale sizes would not be the
/// ones checked. Errors name `arg`'s strides.
fn require_row_major(label: &str, arg: &str, spec: &TensorSpec) -> Result<()> {
    let rm = TensorSpec::row_major(spec.dtype(), spec.dims())?;
    let same = spec
        .dims()
        .iter()
        .zip(spec.strides().iter().zip(rm.strides()))
        .all(|(&d, (&s, &r))| d == 1 || s == r);
    if same {
        return Ok(());
    }
    Err(Error::invalid(
        format!("{label}: {arg}'s strides"),
        format!(
            "must be packed row-major ({} for dims {}): the MXFP8 scale tiles are laid out \
             over the last two logical dims, which must be the innermost in memory",
            fmt_dims(rm.strides()),
            fmt_dims(spec.dims())
        ),
        fmt_dims(spec.strides()),
    ))
}

/// The scale dims of a tensor of `dims`: the last divided by the block.
/// A 3-D tensor is `Unsupported` (see the [module](self) docs); a 1-D one
/// is refused (one row never fills a 128-row scale tile).
fn scale_dims(label: &str, arg: &str, dims: &[i64]) -> Result<Vec<i64>> {
    if dims.len() == 1 {
        return Err(Error::invalid(
            format!("{label}: {arg}'s dims"),
            format!(
                "must have at least 2 dims: a 1-D {arg} is one row, and the MXFP8 scales \
                 come in tiles of {MXFP8_SCALE_TILE_ROWS} rows (view it as 2-D [rows, cols] \
                 with rows a multiple of {MXFP8_SCALE_TILE_ROWS} and cols of {})",
                MXFP8_BLOCK * MXFP8_SCALE_TILE_COLS
            ),
            fmt_dims(dims),
        ));
    }
    if dims.len() == 3 {
        return Err(Error::Unsupported {
            what: format!(
                "{label}: a 3-D {arg} {} (cuDNN's 3-D block scales are in the F8_128x4 reordered layout, which the crate does not describe)",
                fmt_dims(dims)
            ),
            needs: Some(format!(
                "{arg} viewed as 2-D or 4-D (e.g. [1, {}])",
                dims.iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        });
    }
    let mut out = dims.to_vec();
    let last = out
        .last_mut()
        .ok_or_else(|| Error::invalid(format!("{label}: {arg}"), "has no dims", 0))?;
    if *last % MXFP8_BLOCK != 0 {
        return Err(Error::invalid(
            format!("{label}: {arg}'s last dim"),
            format!("must be a multiple of the MXFP8 block ({MXFP8_BLOCK})"),
            fmt_dims(dims),
        ));
    }
    *last /= MXFP8_BLOCK;
    // The bound scale buffer is checked against the packed size: accept
    // only shapes where that is the padded 128 x 4 tile size too.
    let (packed, padded) = mxfp8_scale_sizes(dims).map_err(|e| {
        Error::invalid(
            format!("{label}: {arg}'s dims"),
            e.to_string(),
            fmt_dims(dims),
        )
    })?;
    if packed != padded {
        return Err(Error::invalid(
            format!("{label}: {arg}'s dims"),
            format!(
                "must fill whole 128 x 4 MXFP8 scale tiles (second-to-last dim a multiple of \
                 {MXFP8_SCALE_TILE_ROWS}, last a multiple of {}): NVIDIA lays the scales out \
                 padded to {padded} elements where the packed scale tensor has {packed}, and a \
                 kernel may touch the padding; pad the tensor",
                MXFP8_BLOCK * MXFP8_SCALE_TILE_COLS
            ),
            fmt_dims(dims),
        ));
    }
    Ok(out)
}

impl Graph {
    /// MXFP8 quantize `x` (f32, f16 or bf16) along its last dim into `out`
    /// (E4M3 or E5M2) and one E8M0 scale per [`MXFP8_BLOCK`] elements; both
    /// are graph outputs. Computes in the graph's compute type.
    ///
    /// # Errors
    /// `x` not f32 / f16 / bf16, `out` not E4M3 / E5M2, x's last dim not a
    /// multiple of the block, x's shape not filling whole 128 x 4 scale
    /// tiles (second-to-last dim a multiple of 128, last of 128), a 1-D x,
    /// an x that is not packed row-major (naming its strides);
    /// `Unsupported` for a 3-D `x` (see the [module](super::block_scale_fp8)
    /// docs: view it as 4-D).
    #[doc(alias = "CUDNN_BACKEND_OPERATION_BLOCK_SCALE_QUANTIZE_DESCRIPTOR")]
    pub fn block_scale_quantize(&mut self, x: Tensor, out: DType) -> Result<BlockScaled> {
        let label = format!("block_scale_quantize {}", self.label());
        let xs = self.node(x)?.spec.clone();
        if !matches!(xs.dtype(), DType::F32 | DType::F16 | DType::BF16) {
            return Err(Error::invalid(
                format!("{label}: x's element type"),
                "must be f32, f16 or bf16",
                xs.dtype(),
            ));
        }
        if !out.is_fp8() {
            return Err(Error::invalid(
                format!("{label}: out"),
                "must be fp8e4m3 or fp8e5m2",
                out,
            ));
        }
        require_row_major(&label, "x", &xs)?;
        let sd = scale_dims(&label, "x", xs.dims())?;
        let y = self.fp8_output(&label, xs.with_dtype(out))?;
        let scale = self.fp8_output(&label, TensorSpec::row_major(DType::Fp8E8M0, &sd)?)?;
        self.push_op(BlockScaleOp {
            quantize: true,
            x: self.index(x)?,
            scale: self.index(scale)?,
            y: self.index(y)?,
        });
        Ok(BlockScaled { y, scale })
    }

    /// MXFP8 dequantize: `x` (E4M3 or E5M2) times its E8M0 block `scale`
    /// (x's dims with the last divided by [`MXFP8_BLOCK`]); the result is a
    /// virtual tensor of the graph's compute type, x's dims and layout.
    ///
    /// # Errors
    /// `x` not FP8, `scale` not E8M0 or not of the block dims, x's shape not
    /// filling whole 128 x 4 scale tiles, a 1-D x, an x or scale that is
    /// not packed row-major (as for the quantize); `Unsupported` for a 3-D
    /// `x` (see the [module](super::block_scale_fp8)
    /// docs: view it as 4-D).
    #[doc(alias = "CUDNN_BACKEND_OPERATION_BLOCK_SCALE_DEQUANTIZE_DESCRIPTOR")]
    pub fn block_scale_dequantize(&mut self, x: Tensor, scale: Tensor) -> Result<Tensor> {
        let label = format!("block_scale_dequantize {}", self.label());
        let xs = self.node(x)?.spec.clone();
        let ss = self.node(scale)?.spec.clone();
        if !xs.dtype().is_fp8() {
            return Err(Error::invalid(
                format!("{label}: x's element type"),
                "must be fp8e4m3 or fp8e5m2",
                xs.dtype(),
            ));
        }
        if ss.dtype() != DType::Fp8E8M0 {
            return Err(Error::invalid(
                format!("{label}: scale's element type"),
                "must be fp8e8m0",
                ss.dtype(),
            ));
        }
        require_row_major(&label, "x", &xs)?;
        let sd = scale_dims(&label, "x", xs.dims())?;
        if ss.dims() != sd.as_slice() {
            return Err(Error::mismatch(
                format!("{label}: scale dims (x's with the last divided by {MXFP8_BLOCK})"),
                fmt_dims(&sd),
                fmt_dims(ss.dims()),
            ));
        }
        require_row_major(&label, "scale", &ss)?;
        let y = self.intermediate("block_scale_dequantize", xs.with_dtype(self.compute_type()))?;
        self.push_op(BlockScaleOp {
            quantize: false,
            x: self.index(x)?,
            scale: self.index(scale)?,
            y: self.index(y)?,
        });
        Ok(y)
    }
}
