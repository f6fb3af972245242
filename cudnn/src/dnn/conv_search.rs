//! Algorithm search for the convolution plans (crate-private): the
//! candidates cuDNN offers (`cudnnGetConvolution*Algorithm_v7`, or measured
//! with `cudnnFindConvolution*AlgorithmEx`), filtered by the caller's policy
//! (workspace limit, determinism, math type), then tried in order until one
//! gets its workspace.

use std::ffi::c_void;

use super::algo_cache::{ConvDirection, MathPolicy};
use super::conv::{ConvDescriptor, MathType};
use super::filter::FilterDescriptor;
use super::handle::Handle;
use super::tensor::TensorDescriptor;
use crate::check::{self, cudnn_call};
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::runtime::{DeviceBuffer, Hazard, Stream};
use crate::sys::cudnn as dnn;

/// The descriptors a plan owns: `x` (or `dx`), `w` (or `dw`), `y` (or `dy`)
/// and the convolution, whose math type the search sets.
pub(crate) struct Descs<T: DataType> {
    pub(crate) x: TensorDescriptor<T>,
    pub(crate) w: FilterDescriptor<T>,
    pub(crate) y: TensorDescriptor<T>,
    pub(crate) conv: ConvDescriptor,
}

/// Device pointers for a measured search; the written one depends on the
/// direction (`y` forward, `x` backward data, `w` backward filter).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawBufs {
    pub(crate) x: *mut c_void,
    pub(crate) w: *mut c_void,
    pub(crate) y: *mut c_void,
}

/// One algorithm cuDNN offered, whatever the direction.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Candidate {
    pub(crate) algo: u32,
    /// Normalised to the bindings' (cuDNN 9) numbering.
    pub(crate) status: dnn::cudnnStatus_t,
    /// Measured time (exhaustive search), if any.
    pub(crate) time_ms: Option<f32>,
    /// Workspace cuDNN says the algorithm needs.
    pub(crate) memory: usize,
    /// `None` when unknown (a fixed algorithm).
    pub(crate) deterministic: Option<bool>,
    pub(crate) math: dnn::cudnnMathType_t,
}

impl Candidate {
    /// A caller-chosen algorithm: nothing is known about it yet.
    pub(crate) fn fixed(algo: u32, math: MathType) -> Self {
        Candidate {
            algo,
            status: dnn::cudnnStatus_t::CUDNN_STATUS_SUCCESS,
            time_ms: None,
            memory: 0,
            deterministic: None,
            math: math.to_raw(),
        }
    }
}

/// What the search settled on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Choice {
    pub(crate) algo: u32,
    pub(crate) math: MathType,
    pub(crate) workspace: usize,
    pub(crate) time_ms: Option<f32>,
}

/// The filters of [`PlanOptions`](super::PlanOptions) that apply to candidates.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Filters {
    pub(crate) math: MathPolicy,
    pub(crate) deterministic: bool,
    pub(crate) workspace_limit: Option<usize>,
}

fn is_half(t: dnn::cudnnDataType_t) -> bool {
    t == dnn::cudnnDataType_t::CUDNN_DATA_HALF || t == dnn::cudnnDataType_t::CUDNN_DATA_BFLOAT16
}

/// Whether tensor cores may run a convolution of element type `t` under
/// `policy`: for f16/bf16 (and f64) unless forbidden; for f32 only with
/// [`MathPolicy::AllowTf32`] (f32 on tensor cores is TF32).
pub(crate) fn tensor_cores_allowed(t: dnn::cudnnDataType_t, policy: MathPolicy) -> bool {
    match policy {
        MathPolicy::ForbidTensorCores => false,
        MathPolicy::AllowTf32 => true,
        MathPolicy::Default | MathPolicy::AllowTensorCores => {
            t != dnn::cudnnDataType_t::CUDNN_DATA_FLOAT
        }
    }
}

/// The math type set on the descriptor while searching.
pub(crate) fn search_math(t: dnn::cudnnDataType_t, policy: MathPolicy) -> MathType {
    if !tensor_cores_allowed(t, policy) {
        MathType::Fma
    } else if t == dnn::cudnnDataType_t::CUDNN_DATA_DOUBLE {
        MathType::Default
    } else {
        MathType::TensorOp
    }
}

/// The math type to run a candidate with, or `None` when the policy rules it
/// out. `CUDNN_DEFAULT_MATH` permits TF32 for f32 data on Ampere and newer,
/// so without the opt-in it becomes `CUDNN_FMA_MATH`; the f32→f16
/// down-conversion (`..._ALLOW_CONVERSION`) is only accepted for f16/bf16
/// data, where it converts nothing.
pub(crate) fn effective_math(
    t: dnn::cudnnDataType_t,
    policy: MathPolicy,
    offered: dnn::cudnnMathType_t,
) -> Option<MathType> {
    let tc = tensor_cores_allowed(t, policy);
    match MathType::from_raw(offered).ok()? {
        MathType::Fma => Some(MathType::Fma),
        MathType::Default => Some(if tc { MathType::Default } else { MathType::Fma }),
        MathType::TensorOp => tc.then_some(MathType::TensorOp),
        MathType::TensorOpAllowConversion => {
            (tc && is_half(t)).then_some(MathType::TensorOpAllowConversion)
        }
    }
}

/// The algorithm count of a direction (`CUDNN_CONVOLUTION_*_ALGO_COUNT`).
pub(crate) fn algo_count(dir: ConvDirection) -> u32 {
    match dir {
        ConvDirection::Forward => {
            dnn::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_COUNT.0
        }
        ConvDirection::BackwardData => {
            dnn::cudnnConvolutionBwdDataAlgo_t::CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT.0
        }
        ConvDirection::BackwardFilter => {
            dnn::cudnnConvolutionBwdFilterAlgo_t::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT.0
        }
    }
}

macro_rules! perf_array {
    ($perf:ident, $algo:ident, $n:expr) => {
        vec![
            dnn::$perf {
                algo: dnn::$algo(0),
                status: dnn::cudnnStatus_t(0),
                time: 0.0,
                memory: 0,
                determinism: dnn::cudnnDeterminism_t(0),
                mathType: dnn::cudnnMathType_t(0),
                reserved: [0; 3],
            };
            $n
        ]
    };
}

macro_rules! candidates {
    ($api:expr, $perf:expr, $returned:expr, $measured:expr) => {{
        let n = usize::try_from($returned).unwrap_or(0).min($perf.len());
        $perf[..n]
            .iter()
            .map(|p| Candidate {
                algo: p.algo.0,
                status: $api.normalize_status(p.status),
                time_ms: ($measured && p.time >= 0.0).then_some(p.time),
                memory: p.memory,
                deterministic: Some(p.determinism == dnn::cudnnDeterminism_t::CUDNN_DETERMINISTIC),
                math: p.mathType,
            })
            .collect::<Vec<_>>()
    }};
}

/// How many results to ask for: cuDNN's own maximum (at least the algorithm
/// count, at most 64).
fn max_count(api: &dnn::Cudnn, h: dnn::cudnnHandle_t, dir: ConvDirection) -> Result<usize> {
    let mut n = 0i32;
    // SAFETY: (all three arms) `h` is a live handle (borrowed from a `Handle` by
    // the caller); `n` is a valid, writable out-pointer.
    unsafe {
        match dir {
            ConvDirection::Forward => {
                cudnn_call!(api, cudnnGetConvolutionForwardAlgorithmMaxCount(h, &mut n))
            }
            ConvDirection::BackwardData => {
                cudnn_call!(
                    api,
                    cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &mut n)
                )
            }
            ConvDirection::BackwardFilter => {
                cudnn_call!(
                    api,
                    cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &mut n)
                )
            }
        }
    }?;
    let n = usize::try_from(n).unwrap_or(0);
    Ok(n.max(algo_count(dir) as usize).min(64))
}

/// Every candidate cuDNN's heuristics offer, best first
/// (`cudnnGetConvolution*Algorithm_v7`).
pub(crate) fn heuristic<T: DataType>(
    handle: &Handle,
    d: &Descs<T>,
    dir: ConvDirection,
) -> Result<Vec<Candidate>> {
    let _on = handle.enter()?;
    let api = check::cudnn()?;
    let h = handle.as_raw();
    let n = max_count(api, h, dir)?;
    let mut returned = 0i32;
    let req = n as i32;
    let out = match dir {
        ConvDirection::Forward => {
            let mut perf = perf_array!(
                cudnnConvolutionFwdAlgoPerfStruct,
                cudnnConvolutionFwdAlgo_t,
                n
            );
            // SAFETY: `h` is live; the descriptors are owned by `d`, set, and
            // describe this problem; `perf` holds `req` entries, the count
            // passed; `returned` is a valid out-pointer.
            unsafe {
                cudnn_call!(
                    api,
                    cudnnGetConvolutionForwardAlgorithm_v7(
                        h,
                        d.x.as_raw(),
                        d.w.as_raw(),
                        d.conv.as_raw(),
                        d.y.as_raw(),
                        req,
                        &mut returned,
                        perf.as_mut_ptr()
                    )
                )
            }?;
            candidates!(api, perf, returned, false)
        }
        ConvDirection::BackwardData => {
            let mut perf = perf_array!(
                cudnnConvolutionBwdDataAlgoPerfStruct,
                cudnnConvolutionBwdDataAlgo_t,
                n
            );
            // SAFETY: as for the forward query (w, dy, conv, dx order).
            unsafe {
                cudnn_call!(
                    api,
                    cudnnGetConvolutionBackwardDataAlgorithm_v7(
                        h,
                        d.w.as_raw(),
                        d.y.as_raw(),
                        d.conv.as_raw(),
                        d.x.as_raw(),
                        req,
                        &mut returned,
                        perf.as_mut_ptr()
                    )
                )
            }?;
            candidates!(api, perf, returned, false)
        }
        ConvDirection::BackwardFilter => {
            let mut perf = perf_array!(
                cudnnConvolutionBwdFilterAlgoPerfStruct,
                cudnnConvolutionBwdFilterAlgo_t,
                n
            );
            // SAFETY: as for the forward query (x, dy, conv, dw order).
            unsafe {
                cudnn_call!(
                    api,
                    cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                        h,
                        d.x.as_raw(),
                        d.y.as_raw(),
                        d.conv.as_raw(),
                        d.w.as_raw(),
                        req,
                        &mut returned,
                        perf.as_mut_ptr()
                    )
                )
            }?;
            candidates!(api, perf, returned, false)
        }
    };
    Ok(out)
}

/// Measure the candidates on real buffers (`cudnnFindConvolution*AlgorithmEx`),
/// fastest first.
///
/// # Safety
/// `bufs` point to device memory valid for the spans of `d`'s descriptors
/// (`x`/`y`: `len_required()`, `w`: `element_count()` elements), the written
/// one (see [`RawBufs`]) writable and not aliased by the others; the caller
/// orders them with the handle's stream (the call is host-blocking).
pub(crate) unsafe fn exhaustive<T: DataType>(
    handle: &Handle,
    d: &Descs<T>,
    dir: ConvDirection,
    bufs: RawBufs,
    workspace_limit: Option<usize>,
) -> Result<Vec<Candidate>> {
    let op = "an exhaustive convolution algorithm search";
    crate::runtime::forbid_during_capture(op, handle.stream(), Hazard::AlgorithmSearch)?;
    let _on = handle.enter()?;
    let api = check::cudnn()?;
    // Size the workspace for the search: the most any usable heuristic
    // candidate wants, within the limit and half the free memory.
    let want = heuristic(handle, d, dir)?
        .iter()
        .filter(|c| c.status == dnn::cudnnStatus_t::CUDNN_STATUS_SUCCESS)
        .map(|c| c.memory)
        .max()
        .unwrap_or(0);
    let mut bytes = workspace_limit.map_or(want, |l| want.min(l));
    if let Ok(info) = handle.device().memory_info() {
        bytes = bytes.min(info.free / 2);
    }
    let n = max_count(api, handle.as_raw(), dir)?;
    let req = n as i32;
    let mut returned = 0i32;
    let h = handle.as_raw();
    // A workspace of the search's own, freed when it returns: the handle's
    // is sized later to the chosen algorithm (`pick`), not left at the
    // largest candidate's size (FFT variants can want gigabytes).
    let mut ws = {
        let _on = handle.device().guard()?;
        search_workspace(bytes, handle.stream())?
    };
    let (wp, wn) = (ws.as_raw_mut(), ws.len());
    let out = match dir {
        ConvDirection::Forward => {
            let mut perf = perf_array!(
                cudnnConvolutionFwdAlgoPerfStruct,
                cudnnConvolutionFwdAlgo_t,
                n
            );
            // SAFETY: `h` is live; descriptors owned by `d`; the buffers are
            // valid for their descriptors (this function's contract); the
            // workspace view is valid for `wn` bytes; `perf` holds `req` entries.
            unsafe {
                cudnn_call!(
                    api,
                    cudnnFindConvolutionForwardAlgorithmEx(
                        h,
                        d.x.as_raw(),
                        bufs.x,
                        d.w.as_raw(),
                        bufs.w,
                        d.conv.as_raw(),
                        d.y.as_raw(),
                        bufs.y,
                        req,
                        &mut returned,
                        perf.as_mut_ptr(),
                        wp,
                        wn
                    )
                )
            }?;
            candidates!(api, perf, returned, true)
        }
        ConvDirection::BackwardData => {
            let mut perf = perf_array!(
                cudnnConvolutionBwdDataAlgoPerfStruct,
                cudnnConvolutionBwdDataAlgo_t,
                n
            );
            // SAFETY: as for forward (w, dy read; dx written).
            unsafe {
                cudnn_call!(
                    api,
                    cudnnFindConvolutionBackwardDataAlgorithmEx(
                        h,
                        d.w.as_raw(),
                        bufs.w,
                        d.y.as_raw(),
                        bufs.y,
                        d.conv.as_raw(),
                        d.x.as_raw(),
                        bufs.x,
                        req,
                        &mut returned,
                        perf.as_mut_ptr(),
                        wp,
                        wn
                    )
                )
            }?;
            candidates!(api, perf, returned, true)
        }
        ConvDirection::BackwardFilter => {
            let mut perf = perf_array!(
                cudnnConvolutionBwdFilterAlgoPerfStruct,
                cudnnConvolutionBwdFilterAlgo_t,
                n
            );
            // SAFETY: as for forward (x, dy read; dw written).
            unsafe {
                cudnn_call!(
                    api,
                    cudnnFindConvolutionBackwardFilterAlgorithmEx(
                        h,
                        d.x.as_raw(),
                        bufs.x,
                        d.y.as_raw(),
                        bufs.y,
                        d.conv.as_raw(),
                        d.w.as_raw(),
                        bufs.w,
                        req,
                        &mut returned,
                        perf.as_mut_ptr(),
                        wp,
                        wn
                    )
                )
            }?;
            candidates!(api, perf, returned, true)
        }
    };
    Ok(out)
}

/// A temporary workspace for a measured search: `bytes`, or when that
/// cannot be allocated a quarter of it, or none.
fn search_workspace(bytes: usize, stream: &Stream) -> Result<SearchWorkspace> {
    let mut last_err = None;
    for b in [bytes, bytes / 4, 0] {
        match DeviceBuffer::<u8>::alloc(b) {
            Ok(buf) => {
                return Ok(SearchWorkspace {
                    buf,
                    stream: stream.clone(),
                });
            }
            Err(e) => last_err = Some(e),
        }
    }
    Err(last_err
        .unwrap_or_else(|| Error::invalid("search workspace", "could not be allocated", bytes)))
}

/// The search's workspace, used only by the search on the handle's
/// `stream`. `cudnnFind*AlgorithmEx` blocks the host until its trials are
/// done, and `stream` is synchronized before the memory is freed, so no
/// queued work can still use it (whatever `cudaFree` itself waits for).
struct SearchWorkspace {
    buf: DeviceBuffer<u8>,
    stream: Stream,
}

impl SearchWorkspace {
    fn as_raw_mut(&mut self) -> *mut c_void {
        self.buf.as_raw_mut()
    }
    fn len(&self) -> usize {
        self.buf.len()
    }
}

impl Drop for SearchWorkspace {
    fn drop(&mut self) {
        if !self.buf.is_empty() {
            // Ignored: Drop must not fail; the buffer is freed after this.
            let _ = self.stream.synchronize();
        }
    }
}

/// The workspace `algo` needs with the descriptor's current math type.
pub(crate) fn workspace_size<T: DataType>(
    handle: &Handle,
    d: &Descs<T>,
    dir: ConvDirection,
    algo: u32,
) -> Result<usize> {
    let _on = handle.enter()?;
    let api = check::cudnn()?;
    let h = handle.as_raw();
    let mut size = 0usize;
    // SAFETY: (all three arms) `h` is live; the descriptors are owned by `d` and
    // set; `size` is a valid out-pointer; the algorithm is a plain value
    // cuDNN validates.
    unsafe {
        match dir {
            ConvDirection::Forward => cudnn_call!(
                api,
                cudnnGetConvolutionForwardWorkspaceSize(
                    h,
                    d.x.as_raw(),
                    d.w.as_raw(),
                    d.conv.as_raw(),
                    d.y.as_raw(),
                    dnn::cudnnConvolutionFwdAlgo_t(algo),
                    &mut size
                )
            ),
            ConvDirection::BackwardData => cudnn_call!(
                api,
                cudnnGetConvolutionBackwardDataWorkspaceSize(
                    h,
                    d.w.as_raw(),
                    d.y.as_raw(),
                    d.conv.as_raw(),
                    d.x.as_raw(),
                    dnn::cudnnConvolutionBwdDataAlgo_t(algo),
                    &mut size
                )
            ),
            ConvDirection::BackwardFilter => cudnn_call!(
                api,
                cudnnGetConvolutionBackwardFilterWorkspaceSize(
                    h,
                    d.x.as_raw(),
                    d.y.as_raw(),
                    d.conv.as_raw(),
                    d.w.as_raw(),
                    dnn::cudnnConvolutionBwdFilterAlgo_t(algo),
                    &mut size
                )
            ),
        }
    }?;
    Ok(size)
}

/// Filter the candidates, then try them in order: set the math type, ask
/// for the workspace size, grow the handle's workspace. The first that
/// passes wins; the error lists why each one failed.
pub(crate) fn pick<T: DataType>(
    handle: &mut Handle,
    d: &mut Descs<T>,
    dir: ConvDirection,
    candidates: &[Candidate],
    f: Filters,
    describe: impl FnOnce() -> String,
) -> Result<Choice> {
    let mut why = Vec::new();
    for c in candidates {
        let name = algo_name(dir, c.algo);
        if c.status != dnn::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
            why.push(format!("{name}: {}", check::cudnn_status_name(c.status)));
            continue;
        }
        if f.deterministic && c.deterministic == Some(false) {
            why.push(format!("{name}: not deterministic"));
            continue;
        }
        let Some(math) = effective_math(T::CUDNN, f.math, c.math) else {
            why.push(format!(
                "{name}: math type {} ruled out by {:?}",
                c.math.0, f.math
            ));
            continue;
        };
        if let Some(limit) = f.workspace_limit
            && c.memory > limit
        {
            why.push(format!(
                "{name}: needs {} workspace bytes > limit {limit}",
                c.memory
            ));
            continue;
        }
        if let Err(e) = d.conv.set_math_type(math) {
            why.push(format!("{name}: {e}"));
            continue;
        }
        let bytes = match workspace_size(handle, d, dir, c.algo) {
            Ok(b) => b.max(c.memory),
            Err(e) => {
                why.push(format!("{name}: {e}"));
                continue;
            }
        };
        if let Some(limit) = f.workspace_limit
            && bytes > limit
        {
            why.push(format!(
                "{name}: needs {bytes} workspace bytes > limit {limit}"
            ));
            continue;
        }
        if let Err(e) = handle.workspace(bytes) {
            why.push(format!("{name}: workspace of {bytes} bytes: {e}"));
            continue;
        }
        return Ok(Choice {
            algo: c.algo,
            math,
            workspace: bytes,
            time_ms: c.time_ms,
        });
    }
    if candidates.is_empty() {
        why.push("cuDNN offered no candidates".into());
    }
    Err(Error::Unsupported {
        what: format!(
            "no {dir:?} convolution algorithm fits {} (deterministic: {}, math: {:?}, workspace limit: {:?}); {}",
            describe(),
            f.deterministic,
            f.math,
            f.workspace_limit,
            why.join("; ")
        ),
        needs: None,
    })
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
