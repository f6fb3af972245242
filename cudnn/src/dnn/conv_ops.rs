//! Convolution ops as reusable plans: forward, backward data, backward
//! filter ([`ConvForwardPlan`], [`ConvBackwardDataPlan`],
//! [`ConvBackwardFilterPlan`]), and, in the fused module, the bias gradient
//! and convolution + bias + activation.
//!
//! # Two stages
//! 1. [`ConvProblem`], the descriptor side (host only, no device): it
//!    validates the shapes, resolves the compute type, computes the output
//!    shape in Rust ([`ConvDescriptor::output_shape`]) and cross-checks it
//!    with cuDNN (`cudnnGetConvolutionNdForwardOutputDim`), builds the
//!    output descriptor in the input's layout, the [`AlgoKey`], and checks
//!    buffer lengths ([`ConvProblem::check_buffers`]).
//! 2. `problem.plan(&mut handle, &options)` (needs a device): picks the
//!    algorithm by [`AlgoSearch`] under the filters of [`PlanOptions`],
//!    consulting the [`AlgoCache`] first, and sizes the workspace.
//!
//! # One library call per run
//! A plan owns its descriptors (copies of the problem's, with the chosen math
//! type set), the algorithm and the workspace size. `run` checks the buffer
//! lengths in Rust, takes the handle's workspace (which allocates only when
//! it must grow, normally never: planning already grew it), and makes exactly
//! one cuDNN call. `run_with_workspace` takes the caller's workspace instead,
//! checked against the plan's size and [`WORKSPACE_ALIGNMENT`]. (A plan made from a known choice,
//! `plan_with`, also asks cuDNN once, on its first run, how much workspace
//! the algorithm needs, so a wrong size is an error rather than an overrun;
//! a cached choice is checked the same way when the plan is built.)
//!
//! # Element and compute types
//! [`ConvDataType`]: `f32`, `f64`, `f16`, `bf16`. The compute type is the
//! descriptor's when cuDNN accepts it for the element type (f32 for f32;
//! f64 for f64; f32, or f16 "true half", for f16; f32 for bf16), and the
//! descriptor's default f32 becomes f64 for f64 data; anything else is an
//! error. Half types accumulate in f32 by default.
//!
//! Math types follow [`MathPolicy`]: tensor cores for f16/bf16 unless
//! forbidden; for f32 data TF32 only with [`MathPolicy::AllowTf32`] (without
//! it, cuDNN's default math, which allows TF32 on Ampere and newer, is
//! replaced by `CUDNN_FMA_MATH`). The rule applies to every source of a math
//! type: a searched candidate, a fixed algorithm, a cache entry (also one
//! loaded from a file), and a caller's saved choice
//! ([`plan_with_policy`](ConvProblem::plan_with_policy)).
//!
//! Descriptors of different element types cannot be mixed; this does not
//! compile:
//! ```compile_fail
//! use cudnn::dnn::*;
//! let x = TensorDescriptor::<f32>::nchw(1, 3, 8, 8)?;
//! let w = FilterDescriptor::<half::f16>::nchw(4, 3, 3, 3)?;
//! let conv = ConvDescriptor::new_2d([1, 1], [1, 1], [1, 1])?;
//! let p = ConvProblem::forward(&x, &w, &conv)?;
//! # Ok::<(), cudnn::Error>(())
//! ```
//! while this (the same with one element type) does:
//! ```no_run
//! use cudnn::dnn::*;
//! let x = TensorDescriptor::<half::f16>::nchw(1, 3, 8, 8)?;
//! let w = FilterDescriptor::<half::f16>::nchw(4, 3, 3, 3)?;
//! let conv = ConvDescriptor::new_2d([1, 1], [1, 1], [1, 1])?;
//! let p = ConvProblem::forward(&x, &w, &conv)?;
//! assert_eq!(p.output_shape(), [1, 4, 8, 8]);
//! # Ok::<(), cudnn::Error>(())
//! ```
//!
//! # Shapes
//! 2-d and 3-d (and up to 6 spatial dimensions) directly; 1-d as 2-d with a
//! unit height (`x: [n, c, 1, w]`, filter `[k, c, 1, kw]`, padding
//! `[0, p]`). Groups (depthwise is `groups == c`), dilation, padding and
//! stride per dimension; NCHW and NHWC (channels-last strides; the output
//! follows the input's layout).

use std::cell::Cell;
use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;

use half::{bf16, f16};

use super::activation::{ActivationDescriptor, ActivationMode};
use super::algo_cache::{AlgoCache, AlgoChoice, AlgoKey, ConvDirection, MathPolicy};
use super::conv::{ComputeType, ConvDescriptor, MathType};
use super::conv_fused::{ConvBackwardBiasPlan, ConvBiasActivationPlan, FusedPath};
use super::conv_search::{self as search, Candidate, Descs, Filters, RawBufs};
use super::filter::FilterDescriptor;
use super::handle::Handle;
use super::tensor::{TensorDescriptor, TensorFormat};
use crate::check::{self, cudnn_call};
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::runtime::{Device, DeviceBuffer, DeviceSlice, DeviceSliceMut};
use crate::sys::cudnn as dnn;

mod sealed {
    pub trait Sealed {}
    pub trait SealedPass {}
}

// ---------------------------------------------------------------------------
// Element types and directions

/// An element type cuDNN convolves: `f32`, `f64`, `f16`, `bf16`. Sealed.
pub trait ConvDataType: DataType + sealed::Sealed {
    /// The compute type used when the descriptor's default (f32) is not one
    /// cuDNN accepts for this type (f64 data computes in f64).
    const DEFAULT_COMPUTE: ComputeType;
    /// Whether cuDNN convolves this type with compute type `c`.
    fn allows_compute(c: ComputeType) -> bool;
}

impl sealed::Sealed for f32 {}
impl sealed::Sealed for f64 {}
impl sealed::Sealed for f16 {}
impl sealed::Sealed for bf16 {}

impl ConvDataType for f32 {
    const DEFAULT_COMPUTE: ComputeType = ComputeType::F32;
    fn allows_compute(c: ComputeType) -> bool {
        c == ComputeType::F32
    }
}
impl ConvDataType for f64 {
    const DEFAULT_COMPUTE: ComputeType = ComputeType::F64;
    fn allows_compute(c: ComputeType) -> bool {
        c == ComputeType::F64
    }
}
impl ConvDataType for f16 {
    const DEFAULT_COMPUTE: ComputeType = ComputeType::F32;
    fn allows_compute(c: ComputeType) -> bool {
        matches!(c, ComputeType::F32 | ComputeType::F16)
    }
}
impl ConvDataType for bf16 {
    const DEFAULT_COMPUTE: ComputeType = ComputeType::F32;
    fn allows_compute(c: ComputeType) -> bool {
        c == ComputeType::F32
    }
}

/// Which pass a [`ConvProblem`] describes (a type-level
/// [`ConvDirection`]). Sealed; the types are [`ConvFwd`], [`ConvBwdData`],
/// [`ConvBwdFilter`].
pub trait ConvPass: sealed::SealedPass + fmt::Debug + Send + Sync + 'static {
    /// The direction.
    const DIRECTION: ConvDirection;
    /// The names of the `x`, `w` and `y` buffers in this pass.
    const NAMES: [&'static str; 3];
}

/// Forward: `y = conv(x, w)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ConvFwd;
/// Backward data: `dx = conv_bwd_data(w, dy)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ConvBwdData;
/// Backward filter: `dw = conv_bwd_filter(x, dy)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ConvBwdFilter;

impl sealed::SealedPass for ConvFwd {}
impl sealed::SealedPass for ConvBwdData {}
impl sealed::SealedPass for ConvBwdFilter {}
impl ConvPass for ConvFwd {
    const DIRECTION: ConvDirection = ConvDirection::Forward;
    const NAMES: [&'static str; 3] = ["x", "w", "y"];
}
impl ConvPass for ConvBwdData {
    const DIRECTION: ConvDirection = ConvDirection::BackwardData;
    const NAMES: [&'static str; 3] = ["dx", "w", "dy"];
}
impl ConvPass for ConvBwdFilter {
    const DIRECTION: ConvDirection = ConvDirection::BackwardFilter;
    const NAMES: [&'static str; 3] = ["x", "dw", "dy"];
}

// ---------------------------------------------------------------------------
// Algorithms and options

/// A convolution algorithm of one direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConvAlgo {
    /// A forward algorithm (`cudnnConvolutionFwdAlgo_t`).
    Forward(dnn::cudnnConvolutionFwdAlgo_t),
    /// A backward-data algorithm (`cudnnConvolutionBwdDataAlgo_t`).
    BackwardData(dnn::cudnnConvolutionBwdDataAlgo_t),
    /// A backward-filter algorithm (`cudnnConvolutionBwdFilterAlgo_t`).
    BackwardFilter(dnn::cudnnConvolutionBwdFilterAlgo_t),
}

/// The constant names without their `CUDNN_CONVOLUTION_*_ALGO_` prefix.
pub(crate) fn algo_name(dir: ConvDirection, algo: u32) -> String {
    let names: &[&str] = match dir {
        ConvDirection::Forward => &[
            "IMPLICIT_GEMM",
            "IMPLICIT_PRECOMP_GEMM",
            "GEMM",
            "DIRECT",
            "FFT",
            "FFT_TILING",
            "WINOGRAD",
            "WINOGRAD_NONFUSED",
        ],
        ConvDirection::BackwardData => &[
            "ALGO_0",
            "ALGO_1",
            "FFT",
            "FFT_TILING",
            "WINOGRAD",
            "WINOGRAD_NONFUSED",
        ],
        ConvDirection::BackwardFilter => &[
            "ALGO_0",
            "ALGO_1",
            "FFT",
            "ALGO_3",
            "WINOGRAD",
            "WINOGRAD_NONFUSED",
            "FFT_TILING",
        ],
    };
    names
        .get(algo as usize)
        .map_or_else(|| format!("ALGO_{algo}"), |s| (*s).to_string())
}

impl ConvAlgo {
    /// The forward implicit precomputed GEMM, the one algorithm the fused
    /// convolution + bias + identity supports.
    pub const IMPLICIT_PRECOMP_GEMM: ConvAlgo = ConvAlgo::Forward(
        dnn::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
    );

    /// The direction the algorithm is for.
    pub fn direction(self) -> ConvDirection {
        match self {
            ConvAlgo::Forward(_) => ConvDirection::Forward,
            ConvAlgo::BackwardData(_) => ConvDirection::BackwardData,
            ConvAlgo::BackwardFilter(_) => ConvDirection::BackwardFilter,
        }
    }

    /// The raw enum value.
    pub fn to_raw(self) -> u32 {
        match self {
            ConvAlgo::Forward(a) => a.0,
            ConvAlgo::BackwardData(a) => a.0,
            ConvAlgo::BackwardFilter(a) => a.0,
        }
    }

    /// From a raw value of `direction`'s enum.
    ///
    /// # Errors
    /// A value at or past that enum's `..._ALGO_COUNT`.
    pub fn from_raw(direction: ConvDirection, algo: u32) -> Result<Self> {
        let count = search::algo_count(direction);
        if algo >= count {
            return Err(Error::invalid(
                "algo",
                format!("must be below the {direction:?} algorithm count {count}"),
                algo,
            ));
        }
        Ok(match direction {
            ConvDirection::Forward => ConvAlgo::Forward(dnn::cudnnConvolutionFwdAlgo_t(algo)),
            ConvDirection::BackwardData => {
                ConvAlgo::BackwardData(dnn::cudnnConvolutionBwdDataAlgo_t(algo))
            }
            ConvDirection::BackwardFilter => {
                ConvAlgo::BackwardFilter(dnn::cudnnConvolutionBwdFilterAlgo_t(algo))
            }
        })
    }

    /// The constant's name without its prefix (`"IMPLICIT_PRECOMP_GEMM"`).
    pub fn name(self) -> String {
        algo_name(self.direction(), self.to_raw())
    }
}

impl fmt::Display for ConvAlgo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// How a plan picks its algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AlgoSearch {
    /// cuDNN's heuristics (`cudnnGetConvolution*Algorithm_v7`): every
    /// candidate, best first, the first that passes the filters and gets its
    /// workspace wins. Fast (no kernels run). The default.
    #[default]
    Heuristic,
    /// Measure every candidate (`cudnnFindConvolution*AlgorithmEx`) on the
    /// caller's buffers ([`ConvProblem::plan_on`]) or on scratch buffers
    /// ([`ConvProblem::plan`]); the fastest that passes the filters wins.
    /// The trials run in a temporary workspace of the search's own (freed
    /// when it returns); the handle's grows only to the chosen algorithm's
    /// size. Slow (runs every algorithm); cache the result.
    Exhaustive,
    /// This algorithm (of the plan's direction), with the policy's math
    /// type; only its workspace size is asked. Never cached. Determinism is
    /// the caller's responsibility.
    Fixed(ConvAlgo),
}

impl AlgoSearch {
    /// The code of its [`CacheSearch`](super::CacheSearch) (what
    /// [`AlgoKey::search`] holds and a saved cache file writes): 0
    /// heuristic, 1 exhaustive, 2 fixed.
    pub fn code(self) -> u8 {
        super::CacheSearch::from(self).code()
    }
}

/// Which [`AlgoCache`] a plan consults before searching and fills after.
#[derive(Clone, Copy, Default)]
pub enum CachePolicy<'c> {
    /// [`AlgoCache::global`]. The default.
    #[default]
    Global,
    /// No cache: always search.
    Off,
    /// The caller's cache.
    Use(&'c AlgoCache),
}

impl<'c> CachePolicy<'c> {
    /// The cache to use, if any.
    pub fn cache(self) -> Option<&'c AlgoCache> {
        match self {
            CachePolicy::Global => Some(AlgoCache::global()),
            CachePolicy::Off => None,
            CachePolicy::Use(c) => Some(c),
        }
    }
}

impl fmt::Debug for CachePolicy<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CachePolicy::Global => f.write_str("Global"),
            CachePolicy::Off => f.write_str("Off"),
            CachePolicy::Use(c) => f.debug_tuple("Use").field(c).finish(),
        }
    }
}

/// How a plan is built: search, filters and cache.
///
/// ```
/// use cudnn::dnn::{AlgoSearch, MathPolicy, PlanOptions};
/// let opts = PlanOptions {
///     search: AlgoSearch::Exhaustive,
///     deterministic: true,
///     workspace_limit: Some(64 << 20),
///     ..PlanOptions::default()
/// };
/// assert_eq!(opts.math, MathPolicy::Default);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct PlanOptions<'c> {
    /// How the algorithm is picked.
    pub search: AlgoSearch,
    /// Which math types (tensor cores, TF32) candidates may use.
    pub math: MathPolicy,
    /// Only algorithms cuDNN reports as deterministic (bitwise reproducible).
    pub deterministic: bool,
    /// The most workspace, in bytes, the algorithm may use.
    pub workspace_limit: Option<usize>,
    /// The algorithm cache.
    pub cache: CachePolicy<'c>,
}

impl PlanOptions<'static> {
    /// The defaults with `search`.
    pub fn new(search: AlgoSearch) -> Self {
        PlanOptions {
            search,
            ..PlanOptions::default()
        }
    }
}

impl PlanOptions<'_> {
    fn filters(&self) -> Filters {
        Filters {
            math: self.math,
            deterministic: self.deterministic,
            workspace_limit: self.workspace_limit,
        }
    }
}

// ---------------------------------------------------------------------------
// Descriptor helpers

pub(crate) fn clone_tensor<T: DataType>(d: &TensorDescriptor<T>) -> Result<TensorDescriptor<T>> {
    TensorDescriptor::new(d.shape(), d.strides())
}

fn clone_filter<T: DataType>(d: &FilterDescriptor<T>) -> Result<FilterDescriptor<T>> {
    FilterDescriptor::new(d.format(), d.shape())
}

fn clone_conv(c: &ConvDescriptor, compute: ComputeType, math: MathType) -> Result<ConvDescriptor> {
    let mut out = ConvDescriptor::new(c.pad(), c.stride(), c.dilation())?;
    if c.mode() != out.mode() {
        out.set_mode(c.mode())?;
    }
    if compute != out.compute_type() {
        out.set_compute_type(compute)?;
    }
    if c.groups() != 1 {
        out.set_groups(c.groups())?;
    }
    out.set_math_type(math)?;
    Ok(out)
}

/// Packed channels-last strides for logical dims `[n, c, spatial...]`.
pub(crate) fn channels_last_strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![0usize; dims.len()];
    if dims.len() < 2 {
        return s;
    }
    let mut step = 1usize;
    s[1] = 1;
    step = step.saturating_mul(dims[1]);
    for i in (2..dims.len()).rev() {
        s[i] = step;
        step = step.saturating_mul(dims[i]);
    }
    s[0] = step;
    s
}

fn packed_strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![0usize; dims.len()];
    let mut step = 1usize;
    for i in (0..dims.len()).rev() {
        s[i] = step;
        step = step.saturating_mul(dims[i]);
    }
    s
}

/// The layout of `x` (channels-last when its strides are packed
/// channels-last, ignoring dimensions of size 1; a tensor that is both, like
/// `c == 1`, follows the filter's format).
fn layout_of<T: DataType>(x: &TensorDescriptor<T>, w: &FilterDescriptor<T>) -> TensorFormat {
    let dims = x.shape();
    let matches = |want: &[usize]| {
        dims.iter()
            .zip(want)
            .zip(x.strides())
            .all(|((&d, &a), &b)| d == 1 || a == b)
    };
    let last = matches(&channels_last_strides(dims));
    let first = matches(&packed_strides(dims));
    match (last, first) {
        (true, false) => TensorFormat::Nhwc,
        (true, true) if w.format() == TensorFormat::Nhwc => TensorFormat::Nhwc,
        _ => TensorFormat::Nchw,
    }
}

/// A packed tensor of `dims` in `layout`.
pub(crate) fn packed_tensor<T: DataType>(
    dims: &[usize],
    layout: TensorFormat,
) -> Result<TensorDescriptor<T>> {
    match layout {
        TensorFormat::Nchw => TensorDescriptor::packed(dims),
        TensorFormat::Nhwc => {
            // Channels-last packed spans its element count too; name `dims`.
            let total = dims.iter().map(|&d| d as u128).product::<u128>();
            if total > i32::MAX as u128 {
                let expr = dims
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join("*");
                return Err(Error::invalid(
                    "dims",
                    "the element count (product of dims) of a packed tensor must be <= i32::MAX",
                    format!("{expr} = {total}"),
                ));
            }
            TensorDescriptor::new(dims, &channels_last_strides(dims))
        }
    }
}

fn resolve_compute<T: ConvDataType>(c: ComputeType) -> Result<ComputeType> {
    if T::allows_compute(c) {
        Ok(c)
    } else if c == ComputeType::F32 {
        Ok(T::DEFAULT_COMPUTE)
    } else {
        Err(Error::invalid(
            "conv compute type",
            format!(
                "must be one cuDNN accepts for {} data (f32: F32; f64: F64; f16: F32 or F16; bf16: F32)",
                T::NAME
            ),
            format!("{c:?}"),
        ))
    }
}

fn need_len(name: &str, what: &str, need: usize, got: usize) -> Result<()> {
    if got < need {
        return Err(Error::mismatch(
            format!("{name} buffer length in elements ({what})"),
            format!("at least {need}"),
            got,
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// The problem

/// The descriptor side of a convolution (host only): validated shapes, the
/// output descriptor, the compute type, buffer checks and the cache key.
/// `D` is the pass: [`ConvFwd`] (the default), [`ConvBwdData`],
/// [`ConvBwdFilter`].
///
/// The constructors fix the pass (`ConvProblem::backward_data(..)` is a
/// `ConvProblem<T, ConvBwdData>`); with a turbofish, name it unless it is
/// forward (`ConvProblem::<f32>::forward`, `ConvProblem::<f32,
/// ConvBwdData>::backward_data`).
///
/// The problem owns copies of the descriptors, so the caller's may change
/// or drop afterwards. Buffer names follow the pass: `x`, `w`, `y` forward;
/// `dx`, `w`, `dy` backward data; `x`, `dw`, `dy` backward filter.
///
/// ```no_run
/// # use cudnn::dnn::*;
/// # fn main() -> cudnn::Result<()> {
/// let x = TensorDescriptor::<f32>::nchw(8, 3, 224, 224)?;
/// let w = FilterDescriptor::<f32>::nchw(64, 3, 7, 7)?;
/// let conv = ConvDescriptor::new_2d([3, 3], [2, 2], [1, 1])?;
/// let problem = ConvProblem::forward(&x, &w, &conv)?;
/// assert_eq!(problem.output_shape(), [8, 64, 112, 112]);
/// problem.check_buffers(8 * 3 * 224 * 224, 64 * 3 * 7 * 7, 8 * 64 * 112 * 112)?;
///
/// let stream = cudnn::runtime::Stream::new()?;
/// let mut handle = Handle::new(&stream)?;
/// let plan = problem.plan(&mut handle, &PlanOptions::default())?;
/// println!("{} with {} bytes of workspace", plan.algo(), plan.workspace_size());
/// # Ok(()) }
/// ```
pub struct ConvProblem<T: ConvDataType, D: ConvPass = ConvFwd> {
    x: TensorDescriptor<T>,
    w: FilterDescriptor<T>,
    y: TensorDescriptor<T>,
    conv: ConvDescriptor,
    _pass: PhantomData<D>,
}

impl<T: ConvDataType, D: ConvPass> fmt::Debug for ConvProblem<T, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConvProblem")
            .field("direction", &D::DIRECTION)
            .field("x", &self.x)
            .field("w", &self.w)
            .field("y", &self.y)
            .field("conv", &self.conv)
            .finish()
    }
}

impl<T: ConvDataType> ConvProblem<T, ConvFwd> {
    /// A forward convolution `y = conv(x, w)`; `y` is packed, in `x`'s layout.
    ///
    /// # Errors
    /// Ranks that disagree, channels that do not match `w` channels times
    /// groups, output channels not divisible by groups, an empty output, a
    /// compute type cuDNN does not accept for `T` (all before cuDNN is
    /// asked); cuDNN's output shape differing from ours.
    #[doc(alias = "cudnnGetConvolutionNdForwardOutputDim")]
    pub fn forward(
        x: &TensorDescriptor<T>,
        w: &FilterDescriptor<T>,
        conv: &ConvDescriptor,
    ) -> Result<Self> {
        Self::build(x, w, conv)
    }
}

impl<T: ConvDataType> ConvProblem<T, ConvBwdData> {
    /// The data gradient `dx` of the convolution of `x` by `w`: `dx` is
    /// described by `dx` (the forward input's shape), `dy` is packed in its
    /// layout (replace it with [`with_y`](Self::with_y)).
    ///
    /// # Errors
    /// As [`ConvProblem::forward`].
    pub fn backward_data(
        dx: &TensorDescriptor<T>,
        w: &FilterDescriptor<T>,
        conv: &ConvDescriptor,
    ) -> Result<Self> {
        Self::build(dx, w, conv)
    }
}

impl<T: ConvDataType> ConvProblem<T, ConvBwdFilter> {
    /// The filter gradient `dw` (described by `dw`) of the convolution of
    /// `x`; `dy` is packed in `x`'s layout.
    ///
    /// # Errors
    /// As [`ConvProblem::forward`].
    pub fn backward_filter(
        x: &TensorDescriptor<T>,
        dw: &FilterDescriptor<T>,
        conv: &ConvDescriptor,
    ) -> Result<Self> {
        Self::build(x, dw, conv)
    }
}

impl<T: ConvDataType, D: ConvPass> ConvProblem<T, D> {
    fn build(
        x: &TensorDescriptor<T>,
        w: &FilterDescriptor<T>,
        conv: &ConvDescriptor,
    ) -> Result<Self> {
        let compute = resolve_compute::<T>(conv.compute_type())?;
        let shape = conv.output_shape(x, w)?;
        let conv = clone_conv(conv, compute, conv.math_type())?;
        let theirs = conv.output_shape_from_cudnn(x, w)?;
        if theirs != shape {
            return Err(Error::mismatch(
                "convolution output shape (cudnnGetConvolutionNdForwardOutputDim vs ours)",
                format!("{theirs:?}"),
                format!("{shape:?}"),
            ));
        }
        let layout = layout_of(x, w);
        let y = packed_tensor::<T>(&shape, layout).map_err(|e| match e {
            // Too big for one descriptor: say it is the output the problem
            // derives (the caller passed no strides for it).
            Error::InvalidArgument { rule, value, .. } => Error::invalid(
                "y (the output descriptor)",
                format!(
                    "the output shape {shape:?} (packed, {layout:?} like x) must fit one cuDNN tensor: {rule}"
                ),
                value,
            ),
            e => e,
        })?;
        Ok(Self {
            x: clone_tensor(x)?,
            w: clone_filter(w)?,
            y,
            conv,
            _pass: PhantomData,
        })
    }

    /// Use `y` (`dy` in the backward passes) instead of the packed one, for
    /// strided or differently laid out outputs.
    ///
    /// # Errors
    /// [`Error::Mismatch`] when its shape is not the convolution's output shape.
    pub fn with_y(mut self, y: &TensorDescriptor<T>) -> Result<Self> {
        if y.shape() != self.y.shape() {
            return Err(Error::mismatch(
                format!("{} shape (the convolution's output shape)", D::NAMES[2]),
                format!("{:?}", self.y.shape()),
                format!("{:?}", y.shape()),
            ));
        }
        self.y = clone_tensor(y)?;
        Ok(self)
    }

    /// Forward, backward data or backward filter.
    pub fn direction(&self) -> ConvDirection {
        D::DIRECTION
    }

    /// The input image tensor (`x`, or `dx` for backward data).
    pub fn x(&self) -> &TensorDescriptor<T> {
        &self.x
    }

    /// The filter (`w`, or `dw` for backward filter).
    pub fn w(&self) -> &FilterDescriptor<T> {
        &self.w
    }

    /// The output image tensor (`y`, or `dy` in the backward passes).
    pub fn y(&self) -> &TensorDescriptor<T> {
        &self.y
    }

    /// The convolution, with the resolved compute type.
    pub fn conv(&self) -> &ConvDescriptor {
        &self.conv
    }

    /// The forward output shape `[n, k, out...]` (the shape of `y`/`dy`).
    pub fn output_shape(&self) -> &[usize] {
        self.y.shape()
    }

    /// The compute type the plans use.
    pub fn compute_type(&self) -> ComputeType {
        self.conv.compute_type()
    }

    /// Floating-point operations of one pass: `2 * n * k * prod(out) *
    /// (c / groups) * prod(window)` (the same in all three directions).
    pub fn flops(&self) -> f64 {
        let y: f64 = self.y.shape().iter().map(|&v| v as f64).product();
        let w: f64 = self.w.shape()[1..].iter().map(|&v| v as f64).product();
        2.0 * y * w
    }

    /// Check buffer lengths (in elements) against the descriptors: `x` and
    /// `y` at least their `len_required()`, `w` at least its element count.
    ///
    /// # Errors
    /// [`Error::Mismatch`] naming the buffer (`"dy buffer length ..."`), what
    /// it needs and what it got.
    pub fn check_buffers(&self, x_len: usize, w_len: usize, y_len: usize) -> Result<()> {
        check_three(D::NAMES, [&self.x, &self.y], &self.w, [x_len, w_len, y_len])
    }

    /// The algorithm cache key of this problem under `options`, on `device`.
    pub fn algo_key(&self, options: &PlanOptions<'_>, device: i32) -> AlgoKey {
        let v = |s: &[usize]| s.iter().map(|&v| v as i64).collect::<Vec<i64>>();
        AlgoKey {
            device,
            direction: D::DIRECTION,
            x_type: T::CUDNN.0,
            w_type: T::CUDNN.0,
            y_type: T::CUDNN.0,
            compute_type: self.conv.compute_type().to_raw().0,
            x_dims: v(self.x.shape()),
            x_strides: v(self.x.strides()),
            w_dims: v(self.w.shape()),
            w_format: self.w.format().to_raw().0,
            y_dims: v(self.y.shape()),
            y_strides: v(self.y.strides()),
            pad: v(self.conv.pad()),
            stride: v(self.conv.stride()),
            dilation: v(self.conv.dilation()),
            groups: self.conv.groups() as i64,
            mode: self.conv.mode().to_raw().0,
            math: options.math,
            deterministic: options.deterministic,
            workspace_limit: options.workspace_limit,
            search: options.search.into(),
        }
    }

    /// A plan for the bias gradient of this convolution (`db` from `dy`).
    ///
    /// # Errors
    /// What creating the bias descriptor reports.
    pub fn backward_bias_plan(&self) -> Result<ConvBackwardBiasPlan<T>> {
        ConvBackwardBiasPlan::new(&self.y)
    }

    fn describe(&self) -> String {
        format!(
            "{} {:?}: {} {:?} (strides {:?}), {} {:?} ({:?}), {} {:?} (strides {:?}), pad {:?} stride {:?} dilation {:?} groups {}",
            T::NAME,
            D::DIRECTION,
            D::NAMES[0],
            self.x.shape(),
            self.x.strides(),
            D::NAMES[1],
            self.w.shape(),
            self.w.format(),
            D::NAMES[2],
            self.y.shape(),
            self.y.strides(),
            self.conv.pad(),
            self.conv.stride(),
            self.conv.dilation(),
            self.conv.groups()
        )
    }

    fn descs(&self, math: MathType) -> Result<Descs<T>> {
        Ok(Descs {
            x: clone_tensor(&self.x)?,
            w: clone_filter(&self.w)?,
            y: clone_tensor(&self.y)?,
            conv: clone_conv(&self.conv, self.conv.compute_type(), math)?,
        })
    }

    /// A plan core from a known choice (no search, no device), its math
    /// type adjusted to `policy`.
    fn core_with(&self, choice: AlgoChoice, policy: MathPolicy) -> Result<PlanCore<T>> {
        let algo = ConvAlgo::from_raw(D::DIRECTION, choice.algo)?;
        let math = choice_math::<T>(choice.math_type, policy)?;
        Ok(PlanCore {
            d: self.descs(math)?,
            dir: D::DIRECTION,
            names: D::NAMES,
            algo,
            math,
            workspace: choice.workspace_bytes,
            from_cache: false,
            time_ms: None,
            describe: self.describe(),
            verified: Cell::new(None),
            device: None,
        })
    }

    /// Search (or look up) the algorithm and build the plan core.
    fn core(
        &self,
        handle: &mut Handle,
        opts: &PlanOptions<'_>,
        bufs: Option<RawBufs>,
    ) -> Result<PlanCore<T>> {
        // The search, its scratch buffers and the workspace belong to the
        // handle's device, whatever device is current.
        let _on = handle.enter()?;
        let dir = D::DIRECTION;
        if let AlgoSearch::Fixed(a) = opts.search
            && a.direction() != dir
        {
            return Err(Error::mismatch(
                "AlgoSearch::Fixed algorithm direction",
                format!("{dir:?}"),
                format!("{:?} ({a})", a.direction()),
            ));
        }
        let smath = search::search_math(T::CUDNN, opts.math);
        let mut d = self.descs(smath)?;
        let device = i32::try_from(handle.device().ordinal()).unwrap_or(i32::MAX);
        let key = self.algo_key(opts, device);
        let cache = match opts.search {
            AlgoSearch::Fixed(_) => None,
            _ => opts.cache.cache(),
        };
        let describe = self.describe();

        if let Some(choice) = cache.and_then(|c| c.get(&key)) {
            // An entry may come from a file: its math type goes through the
            // policy like a searched one (an entry the policy rules out is
            // searched again and replaced).
            let usable = ConvAlgo::from_raw(dir, choice.algo)
                .ok()
                .zip(choice_math::<T>(choice.math_type, opts.math).ok())
                .filter(|_| {
                    opts.workspace_limit
                        .is_none_or(|l| choice.workspace_bytes <= l)
                });
            if let Some((algo, math)) = usable {
                // The entry may come from a file: ask what the algorithm
                // needs rather than trusting its workspace size.
                let need = d
                    .conv
                    .set_math_type(math)
                    .and_then(|()| search::workspace_size(handle, &d, dir, algo.to_raw()));
                if let Ok(need) = need {
                    let bytes = need.max(choice.workspace_bytes);
                    let fits = opts.workspace_limit.is_none_or(|l| bytes <= l);
                    if fits && handle.workspace(bytes).is_ok() {
                        return Ok(PlanCore {
                            d,
                            dir,
                            names: D::NAMES,
                            algo,
                            math,
                            workspace: bytes,
                            from_cache: true,
                            time_ms: None,
                            describe,
                            verified: Cell::new(Some(handle.device())),
                            device: Some(handle.device()),
                        });
                    }
                }
                d.conv.set_math_type(smath)?;
            }
        }

        let candidates = match opts.search {
            AlgoSearch::Heuristic => search::heuristic(handle, &d, dir)?,
            AlgoSearch::Exhaustive => match bufs {
                // SAFETY: `plan_on` checked the caller's buffers against
                // these descriptors; the written one is exclusively borrowed.
                Some(b) => unsafe { search::exhaustive(handle, &d, dir, b, opts.workspace_limit) }?,
                None => {
                    let mut scratch = Scratch::alloc(&d)?;
                    let b = scratch.raw();
                    // SAFETY: the scratch buffers have exactly the sizes the
                    // descriptors address, are distinct allocations, and live
                    // until after the (host-blocking) search returns.
                    unsafe { search::exhaustive(handle, &d, dir, b, opts.workspace_limit) }?
                }
            },
            AlgoSearch::Fixed(a) => vec![Candidate::fixed(a.to_raw(), smath)],
        };
        let choice = search::pick(handle, &mut d, dir, &candidates, opts.filters(), || {
            describe.clone()
        })?;
        let algo = ConvAlgo::from_raw(dir, choice.algo)?;
        if let Some(c) = cache {
            c.insert(
                key,
                AlgoChoice {
                    algo: choice.algo,
                    math_type: choice.math.to_raw().0,
                    workspace_bytes: choice.workspace,
                },
            );
        }
        Ok(PlanCore {
            d,
            dir,
            names: D::NAMES,
            algo,
            math: choice.math,
            workspace: choice.workspace,
            from_cache: false,
            time_ms: choice.time_ms,
            describe,
            verified: Cell::new(Some(handle.device())),
            device: Some(handle.device()),
        })
    }
}

/// The math type a saved choice runs with under `policy`: its raw
/// `cudnnMathType_t` through [`effective_math`](search::effective_math), as
/// a searched candidate's (so `CUDNN_DEFAULT_MATH` for f32 data becomes
/// `CUDNN_FMA_MATH` unless TF32 is allowed).
fn choice_math<T: ConvDataType>(raw: u32, policy: MathPolicy) -> Result<MathType> {
    let offered = MathType::from_raw(dnn::cudnnMathType_t(raw))?;
    search::effective_math(T::CUDNN, policy, offered.to_raw()).ok_or_else(|| {
        Error::invalid(
            "choice math type",
            format!(
                "is ruled out for {} data by MathPolicy::{policy:?} (tensor-op math on f32 is TF32: opt in with MathPolicy::AllowTf32)",
                T::NAME
            ),
            format!("{offered:?} ({raw})"),
        )
    })
}

fn check_three<T: DataType>(
    names: [&str; 3],
    [x, y]: [&TensorDescriptor<T>; 2],
    w: &FilterDescriptor<T>,
    [x_len, w_len, y_len]: [usize; 3],
) -> Result<()> {
    need_len(
        names[0],
        "len_required of its descriptor",
        x.len_required(),
        x_len,
    )?;
    need_len(names[1], "filter element count", w.element_count(), w_len)?;
    need_len(
        names[2],
        "len_required of its descriptor",
        y.len_required(),
        y_len,
    )
}

/// Zeroed device buffers of a problem's sizes, for a measured search
/// without the caller's buffers.
struct Scratch<T: DataType> {
    x: DeviceBuffer<T>,
    w: DeviceBuffer<T>,
    y: DeviceBuffer<T>,
}

impl<T: DataType> Scratch<T> {
    fn alloc(d: &Descs<T>) -> Result<Self> {
        Ok(Scratch {
            x: DeviceBuffer::zeroed(d.x.len_required())?,
            w: DeviceBuffer::zeroed(d.w.element_count())?,
            y: DeviceBuffer::zeroed(d.y.len_required())?,
        })
    }

    fn raw(&mut self) -> RawBufs {
        RawBufs {
            x: self.x.as_raw_mut(),
            w: self.w.as_raw_mut(),
            y: self.y.as_raw_mut(),
        }
    }
}

// ---------------------------------------------------------------------------
// Plans

/// What every plan holds.
pub(crate) struct PlanCore<T: DataType> {
    pub(crate) d: Descs<T>,
    dir: ConvDirection,
    names: [&'static str; 3],
    algo: ConvAlgo,
    math: MathType,
    pub(crate) workspace: usize,
    from_cache: bool,
    time_ms: Option<f32>,
    describe: String,
    /// The device on which cuDNN last confirmed `workspace` is enough
    /// (`None` for a plan made from a caller's choice until its first run;
    /// such a plan is confirmed again on each new device it runs on).
    verified: Cell<Option<Device>>,
    /// The device of the handle the algorithm was chosen with (`None` for
    /// a plan from a caller's choice, which was made without a device).
    device: Option<Device>,
}

impl<T: DataType> PlanCore<T> {
    /// Once per plan made from a caller's choice and device it runs on: ask
    /// cuDNN what the algorithm needs there, so a too-small workspace is an
    /// error, not an overrun (another architecture may need more). A plan
    /// whose algorithm was searched on one device refuses another
    /// ([`Error::DeviceMismatch`]): the choice was measured there.
    pub(crate) fn verify(&self, handle: &Handle) -> Result<()> {
        if let Some(d) = self.device
            && d != handle.device()
        {
            return Err(Error::device_mismatch(
                format!(
                    "the handle running a plan searched on another device ({})",
                    self.context()
                ),
                d.ordinal(),
                handle.device().ordinal(),
            ));
        }
        if self.verified.get() == Some(handle.device()) {
            return Ok(());
        }
        let need = search::workspace_size(handle, &self.d, self.dir, self.algo.to_raw())
            .map_err(|e| e.with_context(self.context()))?;
        if need > self.workspace {
            return Err(Error::mismatch(
                format!(
                    "workspace bytes of the plan's choice ({} with {})",
                    self.algo, self.describe
                ),
                format!("at least {need} (what cuDNN says the algorithm needs)"),
                self.workspace,
            ));
        }
        self.verified.set(Some(handle.device()));
        Ok(())
    }

    pub(crate) fn check_buffers(&self, x_len: usize, w_len: usize, y_len: usize) -> Result<()> {
        check_three(
            self.names,
            [&self.d.x, &self.d.y],
            &self.d.w,
            [x_len, w_len, y_len],
        )
    }

    pub(crate) fn check_workspace(&self, bytes: usize) -> Result<()> {
        if bytes < self.workspace {
            return Err(Error::mismatch(
                format!(
                    "workspace length in bytes ({} with {})",
                    self.algo, self.describe
                ),
                format!("at least {}", self.workspace),
                bytes,
            ));
        }
        Ok(())
    }

    /// [`check_workspace`](Self::check_workspace), and the start aligned to
    /// [`WORKSPACE_ALIGNMENT`] when the plan uses a workspace.
    pub(crate) fn check_caller_workspace(&self, ptr: *const c_void, bytes: usize) -> Result<()> {
        self.check_workspace(bytes)?;
        let addr = ptr as usize;
        if self.workspace > 0 && !addr.is_multiple_of(WORKSPACE_ALIGNMENT) {
            return Err(Error::invalid(
                "workspace",
                format!(
                    "must start at a multiple of {WORKSPACE_ALIGNMENT} bytes (WORKSPACE_ALIGNMENT; {} with {})",
                    self.algo, self.describe
                ),
                format!("{ptr:p} ({} past a multiple)", addr % WORKSPACE_ALIGNMENT),
            ));
        }
        Ok(())
    }

    pub(crate) fn context(&self) -> String {
        format!(
            "{}, algo {} ({:?} math, {} workspace bytes)",
            self.describe, self.algo, self.math, self.workspace
        )
    }
}

/// The alignment in bytes a caller's workspace must start at
/// (`run_with_workspace`). cuDNN's legacy convolution calls do not document
/// one, and the handle's own workspace is always a `cudaMalloc` pointer;
/// 256 is what `cudaMalloc` guarantees (and what
/// NVIDIA requires of cuBLAS workspaces), so any allocation passes, and an
/// offset slice of a larger buffer passes when the offset is a multiple of
/// it. A plan that needs no workspace takes any pointer.
pub const WORKSPACE_ALIGNMENT: usize = 256;

/// Raw arguments of one launch, checked by the caller.
pub(crate) struct Launch {
    pub(crate) h: dnn::cudnnHandle_t,
    pub(crate) a: *const c_void,
    pub(crate) b: *const c_void,
    pub(crate) out: *mut c_void,
    pub(crate) ws: *mut c_void,
    pub(crate) ws_bytes: usize,
}

macro_rules! plan_common {
    ($(#[$meta:meta])* $name:ident, $pass:ty) => {
        $(#[$meta])*
        pub struct $name<T: ConvDataType>(pub(crate) PlanCore<T>);

        impl<T: ConvDataType> $name<T> {
            /// The algorithm.
            pub fn algo(&self) -> ConvAlgo {
                self.0.algo
            }

            /// The math type set on the convolution descriptor (from the
            /// chosen result's `mathType`, adjusted to the policy).
            pub fn math_type(&self) -> MathType {
                self.0.math
            }

            /// Workspace bytes one run needs.
            pub fn workspace_size(&self) -> usize {
                self.0.workspace
            }

            /// Whether the algorithm came from the [`AlgoCache`].
            pub fn from_cache(&self) -> bool {
                self.0.from_cache
            }

            /// The time cuDNN measured, for an exhaustive search.
            pub fn measured_time_ms(&self) -> Option<f32> {
                self.0.time_ms
            }

            /// The direction.
            pub fn direction(&self) -> ConvDirection {
                self.0.dir
            }

            /// The input image tensor (`x`, or `dx` for backward data).
            pub fn x(&self) -> &TensorDescriptor<T> {
                &self.0.d.x
            }

            /// The filter (`w`, or `dw` for backward filter).
            pub fn w(&self) -> &FilterDescriptor<T> {
                &self.0.d.w
            }

            /// The output image tensor (`y`, or `dy` in the backward passes).
            pub fn y(&self) -> &TensorDescriptor<T> {
                &self.0.d.y
            }

            /// The convolution descriptor the plan runs with.
            pub fn conv(&self) -> &ConvDescriptor {
                &self.0.d.conv
            }

            /// As [`ConvProblem::check_buffers`].
            ///
            /// # Errors
            /// [`Error::Mismatch`] naming the buffer.
            pub fn check_buffers(&self, x_len: usize, w_len: usize, y_len: usize) -> Result<()> {
                self.0.check_buffers(x_len, w_len, y_len)
            }

            /// Check a caller's workspace of `bytes` bytes is large enough.
            ///
            /// # Errors
            /// [`Error::Mismatch`] naming both sizes.
            pub fn check_workspace(&self, bytes: usize) -> Result<()> {
                self.0.check_workspace(bytes)
            }

            /// What `run_with_workspace` checks of the caller's workspace
            /// starting at `ptr`, `bytes` long: large enough
            /// ([`check_workspace`](Self::check_workspace)) and, when the
            /// plan uses one, starting at a multiple of
            /// [`WORKSPACE_ALIGNMENT`]. Only the address is looked at.
            ///
            /// # Errors
            /// [`Error::Mismatch`] for a short workspace;
            /// [`Error::InvalidArgument`] naming the address and the
            /// alignment for a misaligned one.
            pub fn check_caller_workspace(&self, ptr: *const c_void, bytes: usize) -> Result<()> {
                self.0.check_caller_workspace(ptr, bytes)
            }
        }

        impl<T: ConvDataType> fmt::Debug for $name<T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("problem", &self.0.describe)
                    .field("algo", &self.0.algo)
                    .field("math", &self.0.math)
                    .field("workspace", &self.0.workspace)
                    .field("from_cache", &self.0.from_cache)
                    .finish()
            }
        }

        impl<T: ConvDataType> ConvProblem<T, $pass> {
            /// Pick the algorithm (see [`AlgoSearch`]; an exhaustive search
            /// runs on zeroed scratch buffers) and build the plan. Consults
            /// and fills the cache of `options`. Grows the handle's
            /// workspace to the algorithm's size, so the first run does not
            /// allocate. Uses the current device (the handle's).
            ///
            /// # Errors
            /// [`Error::Unsupported`] listing why each candidate was
            /// rejected when none fits; what cuDNN and CUDA report.
            pub fn plan(&self, handle: &mut Handle, options: &PlanOptions<'_>) -> Result<$name<T>> {
                self.core(handle, options, None).map($name)
            }

            /// A plan from a known choice (a saved cache entry), without a
            /// search or a device, under the default [`MathPolicy`] (as
            /// [`plan_with_policy`](Self::plan_with_policy)). Its first run
            /// asks cuDNN how much workspace the algorithm needs (one extra
            /// call, once) and refuses a choice whose workspace is smaller;
            /// cuDNN reports an algorithm that does not support the problem.
            ///
            /// # Errors
            /// As [`plan_with_policy`](Self::plan_with_policy).
            pub fn plan_with(&self, choice: AlgoChoice) -> Result<$name<T>> {
                self.plan_with_policy(choice, MathPolicy::Default)
            }

            /// As [`plan_with`](Self::plan_with), the choice's math type
            /// adjusted to `math` exactly as a searched candidate's is
            /// (`CUDNN_DEFAULT_MATH` on f32 data becomes `CUDNN_FMA_MATH`
            /// unless TF32 is allowed).
            ///
            /// # Errors
            /// An algorithm outside the direction's enum, an unknown math
            /// type, a math type `math` rules out (tensor-op math on f32
            /// without [`MathPolicy::AllowTf32`]).
            pub fn plan_with_policy(&self, choice: AlgoChoice, math: MathPolicy) -> Result<$name<T>> {
                self.core_with(choice, math).map($name)
            }
        }
    };
}

plan_common!(
    /// A forward convolution `y = alpha * conv(x, w) + beta * y`, ready to
    /// run: descriptors, algorithm, math type, workspace size. Each
    /// [`run`](Self::run) is one `cudnnConvolutionForward` call.
    ConvForwardPlan,
    ConvFwd
);
plan_common!(
    /// A backward-data convolution `dx = alpha * conv_bwd_data(w, dy) + beta
    /// * dx`, ready to run. Each [`run`](Self::run) is one
    /// `cudnnConvolutionBackwardData` call.
    ConvBackwardDataPlan,
    ConvBwdData
);
plan_common!(
    /// A backward-filter convolution `dw = alpha * conv_bwd_filter(x, dy) +
    /// beta * dw`, ready to run. Each [`run`](Self::run) is one
    /// `cudnnConvolutionBackwardFilter` call.
    ConvBackwardFilterPlan,
    ConvBwdFilter
);

/// Alpha and beta as the `const void *` cuDNN takes.
fn scale_ptr<S>(s: &S) -> *const c_void {
    (s as *const S).cast()
}

/// The handle's workspace of `bytes` bytes and the raw handle, for one launch.
fn handle_workspace(
    handle: &mut Handle,
    bytes: usize,
) -> Result<(dnn::cudnnHandle_t, *mut c_void, usize)> {
    let h = handle.as_raw();
    let mut ws = handle.workspace(bytes)?;
    Ok((h, ws.as_raw_mut(), ws.len()))
}

impl<T: ConvDataType> ConvForwardPlan<T> {
    /// The output descriptor `y`.
    pub fn output(&self) -> &TensorDescriptor<T> {
        &self.0.d.y
    }

    /// `y = alpha * conv(x, w) + beta * y` on the handle's stream, with the
    /// handle's workspace. One `cudnnConvolutionForward` call (plus a
    /// workspace allocation if the handle's is too small).
    ///
    /// # Errors
    /// [`Error::Mismatch`] for a buffer shorter than its descriptor needs
    /// (checked before anything runs); what cuDNN reports, with the problem
    /// as context.
    #[doc(alias = "cudnnConvolutionForward")]
    pub fn run<'x, 'w, 'y>(
        &self,
        handle: &mut Handle,
        alpha: T::Scale,
        x: impl Into<DeviceSlice<'x, T>>,
        w: impl Into<DeviceSlice<'w, T>>,
        beta: T::Scale,
        y: impl Into<DeviceSliceMut<'y, T>>,
    ) -> Result<()> {
        let (x, w, mut y) = (x.into(), w.into(), y.into());
        self.0.check_buffers(x.len(), w.len(), y.len())?;
        let _on = handle.launch(
            "convolution forward",
            &[("x", x.device()), ("w", w.device()), ("y", y.device())],
        )?;
        self.0.verify(handle)?;
        let (h, ws, ws_bytes) = handle_workspace(handle, self.0.workspace)?;
        let l = Launch {
            h,
            a: x.as_raw(),
            b: w.as_raw(),
            out: y.as_raw_mut(),
            ws,
            ws_bytes,
        };
        // SAFETY: `h` is live (borrowed from `handle` for this call); the
        // buffers hold at least what the descriptors address (checked
        // above); `y` is exclusively borrowed; the workspace view is valid
        // for `ws_bytes` bytes and only used by work on the handle's stream.
        unsafe { self.launch(&l, alpha, beta) }
    }

    /// As [`run`](Self::run), with the caller's workspace (at least
    /// [`workspace_size`](Self::workspace_size) bytes), so the handle's is
    /// not touched. The caller orders the workspace's other uses with the
    /// handle's stream.
    ///
    /// # Safety
    /// The workspace is read and written by work queued on the handle's
    /// stream, after this call returns. Until that work has finished, no
    /// other work (on any stream) may use the workspace, and it must not be
    /// freed: order other uses after the handle's stream (an event, or
    /// [`Stream::wait_for`](crate::runtime::Stream::wait_for)), and do not
    /// pass a stream-ordered buffer of another stream. cuDNN keeps indices
    /// there, so a race is an out-of-bounds access, not just wrong numbers.
    ///
    /// # Errors
    /// As [`run`](Self::run); what
    /// [`check_caller_workspace`](Self::check_caller_workspace) reports (a
    /// short or misaligned workspace).
    #[allow(clippy::too_many_arguments)]
    #[doc(alias = "cudnnConvolutionForward")]
    pub unsafe fn run_with_workspace<'x, 'w, 'y, 's>(
        &self,
        handle: &Handle,
        alpha: T::Scale,
        x: impl Into<DeviceSlice<'x, T>>,
        w: impl Into<DeviceSlice<'w, T>>,
        beta: T::Scale,
        y: impl Into<DeviceSliceMut<'y, T>>,
        workspace: impl Into<DeviceSliceMut<'s, u8>>,
    ) -> Result<()> {
        let (x, w, mut y, mut ws) = (x.into(), w.into(), y.into(), workspace.into());
        self.0.check_buffers(x.len(), w.len(), y.len())?;
        self.0.check_caller_workspace(ws.as_raw(), ws.len())?;
        let _on = handle.launch(
            "convolution forward (caller workspace)",
            &[
                ("x", x.device()),
                ("w", w.device()),
                ("y", y.device()),
                ("workspace", ws.device()),
            ],
        )?;
        self.0.verify(handle)?;
        let l = Launch {
            h: handle.as_raw(),
            a: x.as_raw(),
            b: w.as_raw(),
            out: y.as_raw_mut(),
            ws: ws.as_raw_mut(),
            ws_bytes: self.0.workspace,
        };
        // SAFETY: as in `run`; the caller's workspace holds at least
        // `ws_bytes` bytes (checked) and is exclusively borrowed.
        unsafe { self.launch(&l, alpha, beta) }
    }

    /// The one cuDNN call.
    ///
    /// # Safety
    /// `l.h` is a live handle; `l.a`/`l.b`/`l.out` point to device memory
    /// valid for `x`/`w`/`y` of this plan (`out` writable, not aliasing the
    /// inputs); `l.ws` is valid for `l.ws_bytes` bytes.
    pub(crate) unsafe fn launch(&self, l: &Launch, alpha: T::Scale, beta: T::Scale) -> Result<()> {
        let api = check::cudnn()?;
        let d = &self.0.d;
        let ConvAlgo::Forward(algo) = self.0.algo else {
            return Err(Error::invalid(
                "algo",
                "must be a forward algorithm",
                self.0.algo,
            ));
        };
        // SAFETY: the caller's contract; the descriptors are owned by the
        // plan and live; alpha and beta are `T::Scale`, the type cuDNN reads
        // for `T` data.
        unsafe {
            cudnn_call!(
                api,
                cudnnConvolutionForward(
                    l.h,
                    scale_ptr(&alpha),
                    d.x.as_raw(),
                    l.a,
                    d.w.as_raw(),
                    l.b,
                    d.conv.as_raw(),
                    algo,
                    l.ws,
                    l.ws_bytes,
                    scale_ptr(&beta),
                    d.y.as_raw(),
                    l.out
                )
            )
        }
        .map_err(|e| e.with_context(self.0.context()))
    }
}

impl<T: ConvDataType> ConvBackwardDataPlan<T> {
    /// The output descriptor `dx`.
    pub fn output(&self) -> &TensorDescriptor<T> {
        &self.0.d.x
    }

    /// `dx = alpha * conv_bwd_data(w, dy) + beta * dx` on the handle's
    /// stream. One `cudnnConvolutionBackwardData` call.
    ///
    /// # Errors
    /// As [`ConvForwardPlan::run`].
    #[doc(alias = "cudnnConvolutionBackwardData")]
    pub fn run<'w, 'y, 'x>(
        &self,
        handle: &mut Handle,
        alpha: T::Scale,
        w: impl Into<DeviceSlice<'w, T>>,
        dy: impl Into<DeviceSlice<'y, T>>,
        beta: T::Scale,
        dx: impl Into<DeviceSliceMut<'x, T>>,
    ) -> Result<()> {
        let (w, dy, mut dx) = (w.into(), dy.into(), dx.into());
        self.0.check_buffers(dx.len(), w.len(), dy.len())?;
        let _on = handle.launch(
            "convolution backward data",
            &[("w", w.device()), ("dy", dy.device()), ("dx", dx.device())],
        )?;
        self.0.verify(handle)?;
        let (h, ws, ws_bytes) = handle_workspace(handle, self.0.workspace)?;
        let l = Launch {
            h,
            a: w.as_raw(),
            b: dy.as_raw(),
            out: dx.as_raw_mut(),
            ws,
            ws_bytes,
        };
        // SAFETY: as in `ConvForwardPlan::run` (w, dy read; dx written).
        unsafe { self.launch(&l, alpha, beta) }
    }

    /// As [`run`](Self::run), with the caller's workspace.
    ///
    /// # Safety
    /// The workspace is read and written by work queued on the handle's
    /// stream, after this call returns. Until that work has finished, no
    /// other work (on any stream) may use the workspace, and it must not be
    /// freed: order other uses after the handle's stream (an event, or
    /// [`Stream::wait_for`](crate::runtime::Stream::wait_for)), and do not
    /// pass a stream-ordered buffer of another stream. cuDNN keeps indices
    /// there, so a race is an out-of-bounds access, not just wrong numbers.
    ///
    /// # Errors
    /// As [`run`](Self::run); what
    /// [`check_caller_workspace`](Self::check_caller_workspace) reports (a
    /// short or misaligned workspace).
    #[allow(clippy::too_many_arguments)]
    #[doc(alias = "cudnnConvolutionBackwardData")]
    pub unsafe fn run_with_workspace<'w, 'y, 'x, 's>(
        &self,
        handle: &Handle,
        alpha: T::Scale,
        w: impl Into<DeviceSlice<'w, T>>,
        dy: impl Into<DeviceSlice<'y, T>>,
        beta: T::Scale,
        dx: impl Into<DeviceSliceMut<'x, T>>,
        workspace: impl Into<DeviceSliceMut<'s, u8>>,
    ) -> Result<()> {
        let (w, dy, mut dx, mut ws) = (w.into(), dy.into(), dx.into(), workspace.into());
        self.0.check_buffers(dx.len(), w.len(), dy.len())?;
        self.0.check_caller_workspace(ws.as_raw(), ws.len())?;
        let _on = handle.launch(
            "convolution backward data (caller workspace)",
            &[
                ("w", w.device()),
                ("dy", dy.device()),
                ("dx", dx.device()),
                ("workspace", ws.device()),
            ],
        )?;
        self.0.verify(handle)?;
        let l = Launch {
            h: handle.as_raw(),
            a: w.as_raw(),
            b: dy.as_raw(),
            out: dx.as_raw_mut(),
            ws: ws.as_raw_mut(),
            ws_bytes: self.0.workspace,
        };
        // SAFETY: as in `ConvForwardPlan::run_with_workspace`.
        unsafe { self.launch(&l, alpha, beta) }
    }

    /// # Safety
    /// As [`ConvForwardPlan::launch`], with `a` = `w`, `b` = `dy`, `out` = `dx`.
    unsafe fn launch(&self, l: &Launch, alpha: T::Scale, beta: T::Scale) -> Result<()> {
        let api = check::cudnn()?;
        let d = &self.0.d;
        let ConvAlgo::BackwardData(algo) = self.0.algo else {
            return Err(Error::invalid(
                "algo",
                "must be a backward-data algorithm",
                self.0.algo,
            ));
        };
        // SAFETY: the caller's contract; descriptors owned by the plan;
        // alpha and beta are `T::Scale`.
        unsafe {
            cudnn_call!(
                api,
                cudnnConvolutionBackwardData(
                    l.h,
                    scale_ptr(&alpha),
                    d.w.as_raw(),
                    l.a,
                    d.y.as_raw(),
                    l.b,
                    d.conv.as_raw(),
                    algo,
                    l.ws,
                    l.ws_bytes,
                    scale_ptr(&beta),
                    d.x.as_raw(),
                    l.out
                )
            )
        }
        .map_err(|e| e.with_context(self.0.context()))
    }
}

impl<T: ConvDataType> ConvBackwardFilterPlan<T> {
    /// The output descriptor `dw`.
    pub fn output(&self) -> &FilterDescriptor<T> {
        &self.0.d.w
    }

    /// `dw = alpha * conv_bwd_filter(x, dy) + beta * dw` on the handle's
    /// stream. One `cudnnConvolutionBackwardFilter` call.
    ///
    /// # Errors
    /// As [`ConvForwardPlan::run`].
    #[doc(alias = "cudnnConvolutionBackwardFilter")]
    pub fn run<'x, 'y, 'w>(
        &self,
        handle: &mut Handle,
        alpha: T::Scale,
        x: impl Into<DeviceSlice<'x, T>>,
        dy: impl Into<DeviceSlice<'y, T>>,
        beta: T::Scale,
        dw: impl Into<DeviceSliceMut<'w, T>>,
    ) -> Result<()> {
        let (x, dy, mut dw) = (x.into(), dy.into(), dw.into());
        self.0.check_buffers(x.len(), dw.len(), dy.len())?;
        let _on = handle.launch(
            "convolution backward filter",
            &[("x", x.device()), ("dy", dy.device()), ("dw", dw.device())],
        )?;
        self.0.verify(handle)?;
        let (h, ws, ws_bytes) = handle_workspace(handle, self.0.workspace)?;
        let l = Launch {
            h,
            a: x.as_raw(),
            b: dy.as_raw(),
            out: dw.as_raw_mut(),
            ws,
            ws_bytes,
        };
        // SAFETY: as in `ConvForwardPlan::run` (x, dy read; dw written).
        unsafe { self.launch(&l, alpha, beta) }
    }

    /// As [`run`](Self::run), with the caller's workspace.
    ///
    /// # Safety
    /// The workspace is read and written by work queued on the handle's
    /// stream, after this call returns. Until that work has finished, no
    /// other work (on any stream) may use the workspace, and it must not be
    /// freed: order other uses after the handle's stream (an event, or
    /// [`Stream::wait_for`](crate::runtime::Stream::wait_for)), and do not
    /// pass a stream-ordered buffer of another stream. cuDNN keeps indices
    /// there, so a race is an out-of-bounds access, not just wrong numbers.
    ///
    /// # Errors
    /// As [`run`](Self::run); what
    /// [`check_caller_workspace`](Self::check_caller_workspace) reports (a
    /// short or misaligned workspace).
    #[allow(clippy::too_many_arguments)]
    #[doc(alias = "cudnnConvolutionBackwardFilter")]
    pub unsafe fn run_with_workspace<'x, 'y, 'w, 's>(
        &self,
        handle: &Handle,
        alpha: T::Scale,
        x: impl Into<DeviceSlice<'x, T>>,
        dy: impl Into<DeviceSlice<'y, T>>,
        beta: T::Scale,
        dw: impl Into<DeviceSliceMut<'w, T>>,
        workspace: impl Into<DeviceSliceMut<'s, u8>>,
    ) -> Result<()> {
        let (x, dy, mut dw, mut ws) = (x.into(), dy.into(), dw.into(), workspace.into());
        self.0.check_buffers(x.len(), dw.len(), dy.len())?;
        self.0.check_caller_workspace(ws.as_raw(), ws.len())?;
        let _on = handle.launch(
            "convolution backward filter (caller workspace)",
            &[
                ("x", x.device()),
                ("dy", dy.device()),
                ("dw", dw.device()),
                ("workspace", ws.device()),
            ],
        )?;
        self.0.verify(handle)?;
        let l = Launch {
            h: handle.as_raw(),
            a: x.as_raw(),
            b: dy.as_raw(),
            out: dw.as_raw_mut(),
            ws: ws.as_raw_mut(),
            ws_bytes: self.0.workspace,
        };
        // SAFETY: as in `ConvForwardPlan::run_with_workspace`.
        unsafe { self.launch(&l, alpha, beta) }
    }

    /// # Safety
    /// As [`ConvForwardPlan::launch`], with `a` = `x`, `b` = `dy`, `out` = `dw`.
    unsafe fn launch(&self, l: &Launch, alpha: T::Scale, beta: T::Scale) -> Result<()> {
        let api = check::cudnn()?;
        let d = &self.0.d;
        let ConvAlgo::BackwardFilter(algo) = self.0.algo else {
            return Err(Error::invalid(
                "algo",
                "must be a backward-filter algorithm",
                self.0.algo,
            ));
        };
        // SAFETY: the caller's contract; descriptors owned by the plan;
        // alpha and beta are `T::Scale`.
        unsafe {
            cudnn_call!(
                api,
                cudnnConvolutionBackwardFilter(
                    l.h,
                    scale_ptr(&alpha),
                    d.x.as_raw(),
                    l.a,
                    d.y.as_raw(),
                    l.b,
                    d.conv.as_raw(),
                    algo,
                    l.ws,
                    l.ws_bytes,
                    scale_ptr(&beta),
                    d.w.as_raw(),
                    l.out
                )
            )
        }
        .map_err(|e| e.with_context(self.0.context()))
    }
}

// ---------------------------------------------------------------------------
// Measured searches on the caller's buffers, and the fused plan

/// The search a fused plan tries first: `IMPLICIT_PRECOMP_GEMM` for the
/// activations the fused call supports (ReLU, identity), unless the caller
/// fixed another algorithm; `None` when there is nothing to try first.
fn fused_first_search(mode: ActivationMode, search: AlgoSearch) -> Option<AlgoSearch> {
    let precomp = AlgoSearch::Fixed(ConvAlgo::IMPLICIT_PRECOMP_GEMM);
    match (mode, search) {
        (ActivationMode::Relu | ActivationMode::Identity, AlgoSearch::Fixed(a))
            if a != ConvAlgo::IMPLICIT_PRECOMP_GEMM =>
        {
            None
        }
        (ActivationMode::Relu | ActivationMode::Identity, _) => Some(precomp),
        _ => None,
    }
}

impl<T: ConvDataType> ConvProblem<T, ConvFwd> {
    /// As [`plan`](Self::plan), but an exhaustive search measures on the
    /// caller's buffers (`y` is overwritten with scratch results).
    ///
    /// # Errors
    /// As [`plan`](Self::plan); [`Error::Mismatch`] for a short buffer.
    #[doc(alias = "cudnnFindConvolutionForwardAlgorithmEx")]
    pub fn plan_on<'x, 'w, 'y>(
        &self,
        handle: &mut Handle,
        options: &PlanOptions<'_>,
        x: impl Into<DeviceSlice<'x, T>>,
        w: impl Into<DeviceSlice<'w, T>>,
        y: impl Into<DeviceSliceMut<'y, T>>,
    ) -> Result<ConvForwardPlan<T>> {
        let (x, w, mut y) = (x.into(), w.into(), y.into());
        self.check_buffers(x.len(), w.len(), y.len())?;
        let bufs = RawBufs {
            x: x.as_raw().cast_mut(),
            w: w.as_raw().cast_mut(),
            y: y.as_raw_mut(),
        };
        let _on = handle.launch(
            "convolution forward search",
            &[("x", x.device()), ("w", w.device()), ("y", y.device())],
        )?;
        self.core(handle, options, Some(bufs)).map(ConvForwardPlan)
    }

    /// A fused `y = act(alpha1 * conv(x, w) + alpha2 * z + bias)` plan
    /// (`cudnnConvolutionBiasActivationForward`). The fused form is used
    /// where NVIDIA documents it ([`check_fusable`](super::check_fusable)):
    /// ReLU, or identity with the `IMPLICIT_PRECOMP_GEMM` algorithm. For
    /// both, `IMPLICIT_PRECOMP_GEMM` is tried first (the algorithm the fused
    /// call supports most widely; unless `options` fixes another), then the
    /// search of `options` (ReLU stays fused, identity falls back). Any other
    /// activation, or cuDNN reporting the fused call unsupported at run time,
    /// takes the fallback: convolution, add and activation ([`FusedPath`]).
    ///
    /// # Errors
    /// As [`plan`](Self::plan).
    pub fn plan_bias_activation(
        &self,
        handle: &mut Handle,
        options: &PlanOptions<'_>,
        activation: &ActivationDescriptor,
    ) -> Result<ConvBiasActivationPlan<T>> {
        let mode = activation.mode();
        if let Some(first) = fused_first_search(mode, options.search) {
            let fixed = PlanOptions {
                search: first,
                ..*options
            };
            if let Ok(p) = self.plan(handle, &fixed) {
                return ConvBiasActivationPlan::new(p, activation, FusedPath::Fused);
            }
        }
        let plan = self.plan(handle, options)?;
        let path = if super::check_fusable(mode, plan.algo()).is_ok() {
            FusedPath::Fused
        } else {
            FusedPath::Fallback
        };
        ConvBiasActivationPlan::new(plan, activation, path)
    }

    /// A fused plan from a known forward choice (see
    /// [`plan_with`](Self::plan_with)), taking `path`.
    ///
    /// # Errors
    /// As [`plan_with`](Self::plan_with);
    /// [`check_fusable`](super::check_fusable)'s for [`FusedPath::Fused`]
    /// with an activation or algorithm the fused call does not support.
    pub fn plan_bias_activation_with(
        &self,
        choice: AlgoChoice,
        activation: &ActivationDescriptor,
        path: FusedPath,
    ) -> Result<ConvBiasActivationPlan<T>> {
        ConvBiasActivationPlan::new(self.plan_with(choice)?, activation, path)
    }
}

impl<T: ConvDataType> ConvProblem<T, ConvBwdData> {
    /// As [`plan`](Self::plan), but an exhaustive search measures on the
    /// caller's buffers (`dx` is overwritten).
    ///
    /// # Errors
    /// As [`plan`](Self::plan); [`Error::Mismatch`] for a short buffer.
    #[doc(alias = "cudnnFindConvolutionBackwardDataAlgorithmEx")]
    pub fn plan_on<'w, 'y, 'x>(
        &self,
        handle: &mut Handle,
        options: &PlanOptions<'_>,
        w: impl Into<DeviceSlice<'w, T>>,
        dy: impl Into<DeviceSlice<'y, T>>,
        dx: impl Into<DeviceSliceMut<'x, T>>,
    ) -> Result<ConvBackwardDataPlan<T>> {
        let (w, dy, mut dx) = (w.into(), dy.into(), dx.into());
        self.check_buffers(dx.len(), w.len(), dy.len())?;
        let bufs = RawBufs {
            x: dx.as_raw_mut(),
            w: w.as_raw().cast_mut(),
            y: dy.as_raw().cast_mut(),
        };
        let _on = handle.launch(
            "convolution backward data search",
            &[("w", w.device()), ("dy", dy.device()), ("dx", dx.device())],
        )?;
        self.core(handle, options, Some(bufs))
            .map(ConvBackwardDataPlan)
    }
}

impl<T: ConvDataType> ConvProblem<T, ConvBwdFilter> {
    /// As [`plan`](Self::plan), but an exhaustive search measures on the
    /// caller's buffers (`dw` is overwritten).
    ///
    /// # Errors
    /// As [`plan`](Self::plan); [`Error::Mismatch`] for a short buffer.
    #[doc(alias = "cudnnFindConvolutionBackwardFilterAlgorithmEx")]
    pub fn plan_on<'x, 'y, 'w>(
        &self,
        handle: &mut Handle,
        options: &PlanOptions<'_>,
        x: impl Into<DeviceSlice<'x, T>>,
        dy: impl Into<DeviceSlice<'y, T>>,
        dw: impl Into<DeviceSliceMut<'w, T>>,
    ) -> Result<ConvBackwardFilterPlan<T>> {
        let (x, dy, mut dw) = (x.into(), dy.into(), dw.into());
        self.check_buffers(x.len(), dw.len(), dy.len())?;
        let bufs = RawBufs {
            x: x.as_raw().cast_mut(),
            w: dw.as_raw_mut(),
            y: dy.as_raw().cast_mut(),
        };
        let _on = handle.launch(
            "convolution backward filter search",
            &[("x", x.device()), ("dy", dy.device()), ("dw", dw.device())],
        )?;
        self.core(handle, options, Some(bufs))
            .map(ConvBackwardFilterPlan)
    }
}

// ---------------------------------------------------------------------------
// Handle conveniences

impl Handle {
    /// A forward plan for `x` by `w` with default options and `search`
    /// (see [`ConvProblem::forward`] and [`ConvProblem::plan`]).
    ///
    /// ```no_run
    /// # use cudnn::dnn::*;
    /// # use cudnn::runtime::{Device, DeviceBuffer};
    /// # fn main() -> cudnn::Result<()> {
    /// let dev = Device::new(0)?;
    /// let stream = dev.create_stream()?;
    /// let mut dnn = Handle::new(&stream)?;
    /// let x = TensorDescriptor::<f32>::nchw(8, 3, 224, 224)?;
    /// let w = FilterDescriptor::<f32>::nchw(64, 3, 7, 7)?;
    /// let conv = ConvDescriptor::new_2d([3, 3], [2, 2], [1, 1])?;
    /// let plan = dnn.conv_forward_plan(&x, &w, &conv, AlgoSearch::Heuristic)?;
    /// let x_dev = DeviceBuffer::<f32>::zeroed(x.len_required())?;
    /// let w_dev = DeviceBuffer::<f32>::zeroed(w.element_count())?;
    /// let mut y = DeviceBuffer::<f32>::zeroed(plan.output().element_count())?;
    /// plan.run(&mut dnn, 1.0, &x_dev, &w_dev, 0.0, &mut y)?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`ConvProblem::forward`] and [`ConvProblem::plan`].
    pub fn conv_forward_plan<T: ConvDataType>(
        &mut self,
        x: &TensorDescriptor<T>,
        w: &FilterDescriptor<T>,
        conv: &ConvDescriptor,
        search: AlgoSearch,
    ) -> Result<ConvForwardPlan<T>> {
        ConvProblem::forward(x, w, conv)?.plan(self, &PlanOptions::new(search))
    }

    /// A backward-data plan (`dx` described by `dx`), default options.
    ///
    /// # Errors
    /// As [`ConvProblem::backward_data`] and [`ConvProblem::plan`].
    pub fn conv_backward_data_plan<T: ConvDataType>(
        &mut self,
        dx: &TensorDescriptor<T>,
        w: &FilterDescriptor<T>,
        conv: &ConvDescriptor,
        search: AlgoSearch,
    ) -> Result<ConvBackwardDataPlan<T>> {
        ConvProblem::backward_data(dx, w, conv)?.plan(self, &PlanOptions::new(search))
    }

    /// A backward-filter plan (`dw` described by `dw`), default options.
    ///
    /// # Errors
    /// As [`ConvProblem::backward_filter`] and [`ConvProblem::plan`].
    pub fn conv_backward_filter_plan<T: ConvDataType>(
        &mut self,
        x: &TensorDescriptor<T>,
        dw: &FilterDescriptor<T>,
        conv: &ConvDescriptor,
        search: AlgoSearch,
    ) -> Result<ConvBackwardFilterPlan<T>> {
        ConvProblem::backward_filter(x, dw, conv)?.plan(self, &PlanOptions::new(search))
    }

    /// A fused convolution + bias + activation plan, default options.
    ///
    /// # Errors
    /// As [`ConvProblem::forward`] and [`ConvProblem::plan_bias_activation`].
    pub fn conv_bias_activation_plan<T: ConvDataType>(
        &mut self,
        x: &TensorDescriptor<T>,
        w: &FilterDescriptor<T>,
        conv: &ConvDescriptor,
        activation: &ActivationDescriptor,
        search: AlgoSearch,
    ) -> Result<ConvBiasActivationPlan<T>> {
        ConvProblem::forward(x, w, conv)?.plan_bias_activation(
            self,
            &PlanOptions::new(search),
            activation,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_last_strides_are_packed_nhwc() {
        assert_eq!(channels_last_strides(&[2, 3, 4, 5]), [60, 1, 15, 3]);
        assert_eq!(channels_last_strides(&[2, 3, 4, 5, 6]), [360, 1, 90, 18, 3]);
        assert_eq!(packed_strides(&[2, 3, 4, 5]), [60, 20, 5, 1]);
    }

    #[test]
    fn compute_resolution() {
        assert_eq!(
            resolve_compute::<f64>(ComputeType::F32).ok(),
            Some(ComputeType::F64)
        );
        assert_eq!(
            resolve_compute::<f16>(ComputeType::F16).ok(),
            Some(ComputeType::F16)
        );
        assert!(resolve_compute::<bf16>(ComputeType::F16).is_err());
        assert!(resolve_compute::<f32>(ComputeType::F64).is_err());
    }

    #[test]
    fn fused_plans_try_precomp_gemm_first_for_relu_and_identity() {
        let precomp = Some(AlgoSearch::Fixed(ConvAlgo::IMPLICIT_PRECOMP_GEMM));
        for mode in [ActivationMode::Relu, ActivationMode::Identity] {
            for search in [AlgoSearch::Heuristic, AlgoSearch::Exhaustive] {
                assert_eq!(
                    fused_first_search(mode, search),
                    precomp,
                    "{mode:?} {search:?}"
                );
            }
            // The caller's own fixed algorithm is respected.
            let gemm =
                ConvAlgo::Forward(dnn::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_GEMM);
            assert_eq!(fused_first_search(mode, AlgoSearch::Fixed(gemm)), None);
            assert_eq!(
                fused_first_search(mode, AlgoSearch::Fixed(ConvAlgo::IMPLICIT_PRECOMP_GEMM)),
                precomp
            );
        }
        for mode in [
            ActivationMode::Tanh,
            ActivationMode::Sigmoid,
            ActivationMode::ClippedRelu { ceiling: 6.0 },
        ] {
            assert_eq!(fused_first_search(mode, AlgoSearch::Heuristic), None);
        }
    }

    #[test]
    fn algo_names_and_ranges() {
        assert_eq!(
            ConvAlgo::IMPLICIT_PRECOMP_GEMM.name(),
            "IMPLICIT_PRECOMP_GEMM"
        );
        assert!(ConvAlgo::from_raw(ConvDirection::BackwardData, 6).is_err());
        assert_eq!(
            ConvAlgo::from_raw(ConvDirection::BackwardFilter, 6)
                .map(ConvAlgo::name)
                .ok(),
            Some("FFT_TILING".to_string())
        );
    }
}
