//! [`ConvProblem`]: the descriptor side of a convolution (validation,
//! output shape, algorithm key, buffer checks), its algorithm search, and
//! the plan core every convolution plan is built on.

use std::cell::Cell;
use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;

use super::algo_cache::{AlgoChoice, AlgoKey, ConvDirection, MathPolicy};
use super::conv::{ComputeType, ConvDescriptor, MathType};
use super::conv_ops::*;
use super::conv_search::{self as search, Candidate, Descs, RawBufs};
use super::filter::FilterDescriptor;
use super::handle::Handle;
use super::tensor::TensorDescriptor;
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::runtime::{Device, DeviceBuffer};
use crate::sys::cudnn as dnn;

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
    pub(super) x: TensorDescriptor<T>,
    pub(super) w: FilterDescriptor<T>,
    pub(super) y: TensorDescriptor<T>,
    pub(super) conv: ConvDescriptor,
    pub(super) _pass: PhantomData<D>,
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

    pub(super) fn describe(&self) -> String {
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

    pub(super) fn descs(&self, math: MathType) -> Result<Descs<T>> {
        Ok(Descs {
            x: clone_tensor(&self.x)?,
            w: clone_filter(&self.w)?,
            y: clone_tensor(&self.y)?,
            conv: clone_conv(&self.conv, self.conv.compute_type(), math)?,
        })
    }

    /// A plan core from a known choice (no search, no device), its math
    /// type adjusted to `policy`.
    pub(super) fn core_with(&self, choice: AlgoChoice, policy: MathPolicy) -> Result<PlanCore<T>> {
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
    pub(super) fn core(
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

        if matches!(opts.search, AlgoSearch::Exhaustive) {
            // Before the scratch buffers (cudaMalloc) and the timed trials.
            let hazard = crate::runtime::Hazard::AlgorithmSearch;
            crate::runtime::forbid_during_capture("an exhaustive search", handle.stream(), hazard)?;
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
pub(super) fn choice_math<T: ConvDataType>(raw: u32, policy: MathPolicy) -> Result<MathType> {
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

pub(super) fn check_three<T: DataType>(
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
pub(super) struct Scratch<T: DataType> {
    pub(super) x: DeviceBuffer<T>,
    pub(super) w: DeviceBuffer<T>,
    pub(super) y: DeviceBuffer<T>,
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
    pub(super) dir: ConvDirection,
    pub(super) names: [&'static str; 3],
    pub(super) algo: ConvAlgo,
    pub(super) math: MathType,
    pub(crate) workspace: usize,
    pub(super) from_cache: bool,
    pub(super) time_ms: Option<f32>,
    pub(super) describe: String,
    /// The device on which cuDNN last confirmed `workspace` is enough
    /// (`None` for a plan made from a caller's choice until its first run;
    /// such a plan is confirmed again on each new device it runs on).
    pub(super) verified: Cell<Option<Device>>,
    /// The device of the handle the algorithm was chosen with (`None` for
    /// a plan from a caller's choice, which was made without a device).
    pub(super) device: Option<Device>,
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
