//! Convolution plans: the launch helpers and the plan types'
//! shared parts (the rules are in the `dnn` module docs).

use std::fmt;

use half::{bf16, f16};

use super::algo_cache::{AlgoCache, ConvDirection, MathPolicy};
use super::conv::{ComputeType, ConvDescriptor, MathType};
use super::conv_search::{self as search, Filters};
use super::filter::FilterDescriptor;
use super::tensor::{TensorDescriptor, TensorFormat};
use crate::dtype::DataType;
use crate::error::{Error, Result};
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

/// Which pass a [`ConvProblem`](crate::dnn::ConvProblem) describes (a type-level
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
        search::algo_name(self.direction(), self.to_raw())
    }
}

impl fmt::Display for ConvAlgo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// How a plan picks its algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum AlgoSearch {
    /// cuDNN's heuristics (`cudnnGetConvolution*Algorithm_v7`): every
    /// candidate, best first, the first that passes the filters and gets its
    /// workspace wins. Fast (no kernels run). The default.
    #[default]
    Heuristic,
    /// Measure every candidate (`cudnnFindConvolution*AlgorithmEx`) on the
    /// caller's buffers ([`ConvProblem::plan_on`](crate::dnn::ConvProblem::plan_on)) or on scratch buffers
    /// ([`ConvProblem::plan`](crate::dnn::ConvProblem::plan)); the fastest that passes the filters wins.
    /// The trials run in a temporary workspace of the search's own (freed
    /// when it returns); the handle's grows only to the chosen algorithm's
    /// size. Slow (runs every algorithm); cache the result. Refused while
    /// the handle's stream is capturing a CUDA graph
    /// ([`Error::CaptureUnsafe`](crate::Error::CaptureUnsafe)): plan before
    /// the capture.
    Exhaustive,
    /// This algorithm (of the plan's direction), with the policy's math
    /// type; only its workspace size is asked. Never cached. Determinism is
    /// the caller's responsibility.
    Fixed(ConvAlgo),
}

impl AlgoSearch {
    /// The code of its [`CacheSearch`](super::CacheSearch) (what
    /// [`AlgoKey::search`](crate::dnn::AlgoKey::search) holds and a saved cache file writes): 0
    /// heuristic, 1 exhaustive, 2 fixed.
    pub fn code(self) -> u8 {
        super::CacheSearch::from(self).code()
    }
}

// Beside `AlgoSearch`, so the cache's file does not import the ops'.
impl From<AlgoSearch> for super::CacheSearch {
    fn from(search: AlgoSearch) -> Self {
        match search {
            AlgoSearch::Heuristic => super::CacheSearch::Heuristic,
            AlgoSearch::Exhaustive => super::CacheSearch::Exhaustive,
            AlgoSearch::Fixed(_) => super::CacheSearch::Fixed,
        }
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
/// let opts = PlanOptions::new(AlgoSearch::Exhaustive)
///     .with_deterministic(true)
///     .with_workspace_limit(Some(64 << 20));
/// assert_eq!(opts.math, MathPolicy::Default);
/// ```
///
/// The struct is `#[non_exhaustive]` (options will be added): make it with
/// [`PlanOptions::new`] or `default()` and the `with_*` methods; its
/// fields stay readable and assignable.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
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

impl<'c> PlanOptions<'c> {
    /// With [`search`](Self::search).
    pub fn with_search(mut self, search: AlgoSearch) -> Self {
        self.search = search;
        self
    }

    /// With [`math`](Self::math).
    pub fn with_math(mut self, math: MathPolicy) -> Self {
        self.math = math;
        self
    }

    /// With [`deterministic`](Self::deterministic).
    pub fn with_deterministic(mut self, on: bool) -> Self {
        self.deterministic = on;
        self
    }

    /// With [`workspace_limit`](Self::workspace_limit) (`None`: no limit).
    pub fn with_workspace_limit(mut self, bytes: Option<usize>) -> Self {
        self.workspace_limit = bytes;
        self
    }

    /// With [`cache`](Self::cache) (the lifetime becomes the cache's).
    pub fn with_cache<'d>(self, cache: CachePolicy<'d>) -> PlanOptions<'d> {
        PlanOptions {
            search: self.search,
            math: self.math,
            deterministic: self.deterministic,
            workspace_limit: self.workspace_limit,
            cache,
        }
    }
}

impl PlanOptions<'_> {
    pub(super) fn filters(&self) -> Filters {
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

pub(super) fn clone_filter<T: DataType>(d: &FilterDescriptor<T>) -> Result<FilterDescriptor<T>> {
    FilterDescriptor::new(d.format(), d.shape())
}

pub(super) fn clone_conv(
    c: &ConvDescriptor,
    compute: ComputeType,
    math: MathType,
) -> Result<ConvDescriptor> {
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

pub(super) fn packed_strides(dims: &[usize]) -> Vec<usize> {
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
pub(super) fn layout_of<T: DataType>(
    x: &TensorDescriptor<T>,
    w: &FilterDescriptor<T>,
) -> TensorFormat {
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

pub(super) fn resolve_compute<T: ConvDataType>(c: ComputeType) -> Result<ComputeType> {
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

pub(super) fn need_len(name: &str, what: &str, need: usize, got: usize) -> Result<()> {
    if got < need {
        return Err(Error::mismatch(
            format!("{name} buffer length in elements ({what})"),
            format!("at least {need}"),
            got,
        ));
    }
    Ok(())
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
