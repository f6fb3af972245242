//! Plans: the descriptors for a spec, epilogue buffers, [`MatmulPlan`]
//! and [`PlanCache`].

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fmt;
use std::marker::PhantomData;
use std::mem;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::super::gemm::{GemmTypes, Operand, ScaleValue};
use super::call::*;
use super::desc::*;
use super::handle::*;
use super::spec::*;
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::runtime::{Device, DeviceSlice, DeviceSliceMut};
use crate::sys::cublas::{
    cublasLtMatmulDescAttributes_t as DescAttr, cublasLtMatmulHeuristicResult_t, cublasOperation_t,
    cublasStatus_t,
};
use crate::sys::cudart::cudaDataType_t;

// ---------------------------------------------------------------------------
// Descriptors for a spec

/// The descriptors of one spec: the matmul descriptor (compute, scale,
/// transposes, epilogue, aux leading dimension), the layouts of the first
/// and second operand and of C/D as the library sees them, and the
/// preference (workspace limit, alignment). Host objects: building them
/// needs the library but no device.
#[derive(Debug)]
pub struct MatmulDescriptors {
    pub(super) shape: MatmulShape,
    pub(super) desc: MatmulDesc,
    pub(super) first: LtMatrixLayout,
    pub(super) second: LtMatrixLayout,
    pub(super) out: LtMatrixLayout,
    pub(super) pref: MatmulPreference,
    /// The addresses set as bias / aux pointers (placeholders until a run).
    pub(super) bias_ptr: usize,
    pub(super) aux_ptr: usize,
}

pub(super) fn lt_layout(
    dtype: cudaDataType_t,
    o: &Operand,
    batch: usize,
) -> Result<LtMatrixLayout> {
    let u = |v: usize| u64::try_from(v).unwrap_or(u64::MAX);
    let i = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
    let mut l = LtMatrixLayout::new(dtype, u(o.rows), u(o.cols), i(o.ld))?;
    if batch > 1 {
        l.set_batch(i32::try_from(batch).unwrap_or(i32::MAX), i(o.stride))?;
    }
    Ok(l)
}

pub(super) fn trans(t: bool) -> cublasOperation_t {
    if t {
        cublasOperation_t::CUBLAS_OP_T
    } else {
        cublasOperation_t::CUBLAS_OP_N
    }
}

impl MatmulDescriptors {
    /// Check `spec` for `A` and `D` and build its descriptors, with the
    /// preference limited to `workspace_limit` bytes. The bias and aux
    /// pointers are set to placeholders aligned exactly to the spec's
    /// alignment (the heuristic reads their alignment, never their
    /// contents); a run sets the real ones.
    ///
    /// # Errors
    /// As [`MatmulSpec::check`]; [`Error::Cublas`] from the descriptors.
    pub fn new<A: GemmTypes<D>, D: DataType>(
        spec: &MatmulSpec,
        workspace_limit: usize,
    ) -> Result<Self> {
        let shape = spec.check::<A, D>()?;
        let ctx = |e: Error| e.with_context(spec.describe());
        let f = &shape.frame;
        let mut desc = MatmulDesc::new(shape.raw_compute, shape.scale.to_raw()).map_err(ctx)?;
        desc.set_transposes(trans(f.first.transposed), trans(f.second.transposed))
            .map_err(ctx)?;
        desc.set_epilogue(shape.raw_epilogue()).map_err(ctx)?;
        let placeholder = spec.alignment;
        let (mut bias_ptr, mut aux_ptr) = (0, 0);
        if shape.epilogue.bias_use().is_some() {
            desc.set(DescAttr::CUBLASLT_MATMUL_DESC_BIAS_POINTER, placeholder)
                .map_err(ctx)?;
            bias_ptr = placeholder;
            if shape.bias_stride > 0 {
                let s = i64::try_from(shape.bias_stride).unwrap_or(i64::MAX);
                desc.set(DescAttr::CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, s)
                    .map_err(ctx)?;
            }
        }
        if shape.epilogue.aux().is_some() {
            desc.set(
                DescAttr::CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                placeholder,
            )
            .map_err(ctx)?;
            aux_ptr = placeholder;
            let i = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
            desc.set(
                DescAttr::CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                i(shape.aux_ld),
            )
            .map_err(ctx)?;
            if shape.aux_stride > 0 {
                desc.set(
                    DescAttr::CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE,
                    i(shape.aux_stride),
                )
                .map_err(ctx)?;
            }
        }
        let first = lt_layout(A::CUDA, &f.first, f.batch).map_err(ctx)?;
        let second = lt_layout(A::CUDA, &f.second, f.batch).map_err(ctx)?;
        let out = lt_layout(D::CUDA, &f.out, f.batch).map_err(ctx)?;
        let mut pref = MatmulPreference::new().map_err(ctx)?;
        pref.set_max_workspace(u64::try_from(workspace_limit).unwrap_or(u64::MAX))
            .map_err(ctx)?;
        pref.set_min_alignment(u32::try_from(spec.alignment).unwrap_or(256))
            .map_err(ctx)?;
        Ok(MatmulDescriptors {
            shape,
            desc,
            first,
            second,
            out,
            pref,
            bias_ptr,
            aux_ptr,
        })
    }

    /// The checked shape.
    pub fn shape(&self) -> &MatmulShape {
        &self.shape
    }

    /// The matmul descriptor.
    pub fn matmul_desc(&self) -> &MatmulDesc {
        &self.desc
    }

    /// The layout of the library's first operand (A, or Bᵀ when swapped).
    pub fn first_layout(&self) -> &LtMatrixLayout {
        &self.first
    }

    /// The layout of the library's second operand (B, or Aᵀ when swapped).
    pub fn second_layout(&self) -> &LtMatrixLayout {
        &self.second
    }

    /// The layout of C and D (D, or Dᵀ when swapped).
    pub fn output_layout(&self) -> &LtMatrixLayout {
        &self.out
    }

    /// The preference.
    pub fn preference(&self) -> &MatmulPreference {
        &self.pref
    }
}

// ---------------------------------------------------------------------------
// Plans

/// The epilogue's buffers for one run. Which ones an epilogue needs:
/// [`Epilogue::bias_use`] and [`Epilogue::aux`]; their sizes:
/// [`MatmulShape::bias_buffer_len`] and [`MatmulShape::aux_bytes`].
#[derive(Debug)]
pub struct EpilogueArgs<'a, D: DataType> {
    pub(super) bias: Option<DeviceSlice<'a, D>>,
    pub(super) bias_grad: Option<DeviceSliceMut<'a, D>>,
    pub(super) aux_out: Option<DeviceSliceMut<'a, u8>>,
    pub(super) aux_in: Option<DeviceSlice<'a, u8>>,
}

impl<D: DataType> Default for EpilogueArgs<'_, D> {
    fn default() -> Self {
        EpilogueArgs {
            bias: None,
            bias_grad: None,
            aux_out: None,
            aux_in: None,
        }
    }
}

impl<'a, D: DataType> EpilogueArgs<'a, D> {
    /// No buffers (epilogues None, Relu, Gelu).
    pub fn none() -> Self {
        Self::default()
    }

    /// With the bias vector read by the `*Bias` epilogues.
    pub fn bias(mut self, bias: impl Into<DeviceSlice<'a, D>>) -> Self {
        self.bias = Some(bias.into());
        self
    }

    /// With the bias gradient written by the `*Bgrad*` epilogues.
    pub fn bias_grad(mut self, grad: impl Into<DeviceSliceMut<'a, D>>) -> Self {
        self.bias_grad = Some(grad.into());
        self
    }

    /// With the auxiliary output written by the `*Aux*` epilogues.
    pub fn aux_out(mut self, aux: impl Into<DeviceSliceMut<'a, u8>>) -> Self {
        self.aux_out = Some(aux.into());
        self
    }

    /// With the auxiliary input read by `DRelu*` / `DGelu*`.
    pub fn aux_in(mut self, aux: impl Into<DeviceSlice<'a, u8>>) -> Self {
        self.aux_in = Some(aux.into());
        self
    }
}

pub(super) fn check_aligned(name: &str, addr: usize, alignment: usize) -> Result<()> {
    if alignment > 0 && !addr.is_multiple_of(alignment) {
        return Err(Error::invalid(
            name,
            format!(
                "device pointer must be aligned to {alignment} bytes, the plan's alignment (lower it with MatmulSpec::with_alignment)"
            ),
            format!("{addr:#x}"),
        ));
    }
    Ok(())
}

/// The operation's name in device-mismatch errors.
const LT_MATMUL: &str = "cublasLtMatmul";

/// What the checks of a run that need neither a handle nor the plan's
/// state derive: the epilogue's pointers (by argument name) and the scales.
struct Checked {
    bias_addr: Option<(&'static str, usize)>,
    aux_addr: Option<(&'static str, usize)>,
    alpha: ScaleValue,
    beta: ScaleValue,
}

/// The checks of [`MatmulPlan::run`] before the plan's lock: every buffer's
/// length against the spec (the epilogue's against the shape), every
/// pointer aligned as the heuristic was told, alpha and beta held by the
/// scale type.
#[allow(clippy::too_many_arguments)]
fn host_checks<A: GemmTypes<D>, D: DataType>(
    spec: &MatmulSpec,
    shape: &MatmulShape,
    alpha: A::Scale,
    a: &DeviceSlice<'_, A>,
    b: &DeviceSlice<'_, A>,
    beta: A::Scale,
    d: &mut DeviceSliceMut<'_, D>,
    epi: &mut EpilogueArgs<'_, D>,
) -> Result<Checked> {
    spec.a.check_len("a", a.len())?;
    spec.b.check_len("b", b.len())?;
    spec.d.check_len("d", d.len())?;
    shape.check_epilogue_lengths(
        epi.bias.as_ref().map(DeviceSlice::len),
        epi.bias_grad.as_ref().map(DeviceSliceMut::len),
        epi.aux_out.as_ref().map(DeviceSliceMut::len),
        epi.aux_in.as_ref().map(DeviceSlice::len),
    )?;
    let al = spec.alignment;
    check_aligned("a", a.as_raw() as usize, al)?;
    check_aligned("b", b.as_raw() as usize, al)?;
    check_aligned("d", d.as_raw() as usize, al)?;
    let bias_addr = match (&epi.bias, &mut epi.bias_grad) {
        (Some(x), _) => Some(("epilogue.bias", x.as_raw() as usize)),
        (None, Some(g)) => Some(("epilogue.bias_grad", g.as_raw_mut() as usize)),
        _ => None,
    };
    let aux_addr = match (&mut epi.aux_out, &epi.aux_in) {
        (Some(x), _) => Some(("epilogue.aux_out", x.as_raw_mut() as usize)),
        (None, Some(x)) => Some(("epilogue.aux_in", x.as_raw() as usize)),
        _ => None,
    };
    for (name, addr) in bias_addr.iter().chain(aux_addr.iter()) {
        check_aligned(name, *addr, al)?;
    }
    Ok(Checked {
        bias_addr,
        aux_addr,
        alpha: ScaleValue::new(shape.scale, A::scale_to_f64(alpha), "alpha")?,
        beta: ScaleValue::new(shape.scale, A::scale_to_f64(beta), "beta")?,
    })
}

/// The buffers of a run and their devices, as checked against the
/// handle's (or the benchmark's) device.
fn lt_args<A: DataType, D: DataType>(
    a: &DeviceSlice<'_, A>,
    b: &DeviceSlice<'_, A>,
    d: &DeviceSliceMut<'_, D>,
    epi: &EpilogueArgs<'_, D>,
) -> [(&'static str, Option<Device>); 7] {
    [
        ("a", a.device()),
        ("b", b.device()),
        ("d", d.device()),
        ("epilogue.bias", epi.bias.as_ref().and_then(|x| x.device())),
        (
            "epilogue.bias_grad",
            epi.bias_grad.as_ref().and_then(|x| x.device()),
        ),
        (
            "epilogue.aux_out",
            epi.aux_out.as_ref().and_then(|x| x.device()),
        ),
        (
            "epilogue.aux_in",
            epi.aux_in.as_ref().and_then(|x| x.device()),
        ),
    ]
}

impl MatmulSpec {
    /// Benchmark aid (`examples/bench_launch.rs`, issue 34): the checks of
    /// [`MatmulPlan::run`] that need no handle, for the plan of this spec
    /// with inputs `A` and output `D`, its shape checked here once (as
    /// [`MatmulPlan::new`] does). See [`MatmulLaunchChecks::run`].
    ///
    /// # Errors
    /// As [`check`](Self::check).
    #[doc(hidden)]
    pub fn launch_checks<A: GemmTypes<D>, D: DataType>(&self) -> Result<MatmulLaunchChecks<A, D>> {
        Ok(MatmulLaunchChecks {
            spec: *self,
            shape: self.check::<A, D>()?,
            _types: PhantomData,
        })
    }
}

/// Benchmark aid: a spec and the shape [`MatmulSpec::check`] gave it (what
/// a [`MatmulPlan`] keeps), from [`MatmulSpec::launch_checks`].
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct MatmulLaunchChecks<A: GemmTypes<D>, D: DataType> {
    spec: MatmulSpec,
    shape: MatmulShape,
    _types: PhantomData<fn() -> (A, D)>,
}

impl<A: GemmTypes<D>, D: DataType> MatmulLaunchChecks<A, D> {
    /// The checks of [`MatmulPlan::run`] that need no handle, the same
    /// code in the same order, and no launch (nothing is dereferenced,
    /// whatever the views hold): lengths, alignment, alpha and beta; then,
    /// unless D is empty (where `run` returns first), with `device` every
    /// buffer's device against it (`run` checks them against the
    /// handle's). Left out: the plan's lock, the handle's stream and device
    /// made current, the epilogue pointers set in the descriptor when they
    /// changed; and the devices when `device` is `None`.
    ///
    /// # Errors
    /// As [`MatmulPlan::run`] for the checks run.
    #[allow(clippy::too_many_arguments)]
    pub fn run<'a, 'b, 'd>(
        &self,
        alpha: A::Scale,
        a: impl Into<DeviceSlice<'a, A>>,
        b: impl Into<DeviceSlice<'b, A>>,
        beta: A::Scale,
        d: impl Into<DeviceSliceMut<'d, D>>,
        mut epi: EpilogueArgs<'_, D>,
        device: Option<Device>,
    ) -> Result<()> {
        let (a, b, mut d) = (a.into(), b.into(), d.into());
        host_checks::<A, D>(
            &self.spec,
            &self.shape,
            alpha,
            &a,
            &b,
            beta,
            &mut d,
            &mut epi,
        )?;
        if computes_nothing(&self.shape) {
            return Ok(());
        }
        if let Some(dev) = device {
            crate::runtime::check_args(LT_MATMUL, dev, &lt_args(&a, &b, &d, &epi))?;
        }
        Ok(())
    }
}

/// Whether D is empty (no rows, columns or matrices): a plan then has no
/// algorithm and a run returns after the host checks.
fn computes_nothing(shape: &MatmulShape) -> bool {
    let (m, n, _) = shape.dims();
    m == 0 || n == 0 || shape.batch_count() == 0
}

/// A cuBLASLt matmul for one [`MatmulSpec`] and element types: the
/// descriptors and the heuristic's algorithm, chosen once.
/// [`run`](MatmulPlan::run) makes one `cublasLtMatmul` call (plus one
/// `cublasLtMatmulDescSetAttribute` per epilogue pointer that differs from
/// the previous run's).
///
/// A plan belongs to the device its [`LtHandle`] was created on; run on a
/// handle of another device, it asks the heuristic again there first.
pub struct MatmulPlan<A: GemmTypes<D>, D: DataType> {
    pub(super) spec: MatmulSpec,
    pub(super) shape: MatmulShape,
    pub(super) workspace_limit: usize,
    /// What a run may change (the epilogue pointers set in the matmul
    /// descriptor, the algorithm when a handle of another device runs it),
    /// behind one lock held from the check to the enqueue: a plan runs from
    /// several threads at once (`&self`), each run sees its own pointers in
    /// the descriptor cuBLASLt reads.
    state: Mutex<LtState>,
    /// The workspace bytes of the state's algorithm (read without the lock).
    workspace: AtomicUsize,
    pub(super) _types: PhantomData<fn() -> (A, D)>,
}

/// A plan's mutable part (see [`MatmulPlan`]).
#[derive(Debug)]
struct LtState {
    descs: MatmulDescriptors,
    algo: Option<cublasLtMatmulHeuristicResult_t>,
    /// The device the heuristic chose `algo` for (the planning handle's).
    device: Device,
}

impl<A: GemmTypes<D>, D: DataType> fmt::Debug for MatmulPlan<A, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MatmulPlan")
            .field(
                "types",
                &format_args!("{} x {} -> {}", A::NAME, A::NAME, D::NAME),
            )
            .field("spec", &self.spec)
            .field("shape", &self.shape)
            .field("workspace", &self.workspace_size())
            .finish()
    }
}

impl<A: GemmTypes<D>, D: DataType> MatmulPlan<A, D> {
    /// Build the descriptors and ask the heuristic for the best algorithm
    /// within `lt`'s workspace (`cublasLtMatmulAlgoGetHeuristic`).
    ///
    /// # Errors
    /// As [`MatmulDescriptors::new`]; [`Error::Cublas`] from the heuristic;
    /// [`Error::Unsupported`] when it finds no algorithm.
    #[doc(alias = "cublasLtMatmulAlgoGetHeuristic")]
    pub fn new(lt: &LtHandle, spec: &MatmulSpec) -> Result<Self> {
        let workspace_limit = lt.workspace_size();
        let descs = MatmulDescriptors::new::<A, D>(spec, workspace_limit)?;
        let algo = if computes_nothing(&descs.shape) {
            None
        } else {
            Some(Self::heuristic(lt, spec, &descs)?)
        };
        Ok(MatmulPlan {
            spec: *spec,
            shape: descs.shape,
            workspace_limit,
            workspace: AtomicUsize::new(algo.map_or(0, |a| a.workspaceSize)),
            state: Mutex::new(LtState {
                descs,
                algo,
                device: lt.device(),
            }),
            _types: PhantomData,
        })
    }

    fn heuristic(
        lt: &LtHandle,
        spec: &MatmulSpec,
        d: &MatmulDescriptors,
    ) -> Result<cublasLtMatmulHeuristicResult_t> {
        let _on = lt.enter()?;
        let api = cublas_lt()?;
        // SAFETY: an all-zero heuristic result is a valid value of this
        // plain-data struct (integers, floats and a u64 array).
        let mut result: cublasLtMatmulHeuristicResult_t = unsafe { mem::zeroed() };
        let mut count = 0;
        // SAFETY: every descriptor is valid and alive; `result` has room for
        // the one result requested and `count` is a valid out-pointer.
        let r = unsafe {
            lt_call!(
                api,
                cublasLtMatmulAlgoGetHeuristic(
                    lt.as_raw(),
                    d.desc.as_raw(),
                    d.first.as_raw(),
                    d.second.as_raw(),
                    d.out.as_raw(),
                    d.out.as_raw(),
                    d.pref.as_raw(),
                    1,
                    &mut result,
                    &mut count,
                )
            )
        };
        let what = || {
            format!(
                "cuBLASLt matmul {} x {} -> {} with {} on this device (no algorithm within {} bytes of workspace)",
                A::NAME,
                A::NAME,
                D::NAME,
                spec.describe(),
                lt.workspace_size()
            )
        };
        match r {
            // The heuristic says NOT_SUPPORTED when it has nothing for this
            // configuration: the same answer as an empty result.
            Err(Error::Cublas { code, text, .. })
                if code == cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED.0 =>
            {
                return Err(Error::Unsupported {
                    what: format!("{} (cublasLtMatmulAlgoGetHeuristic: {text})", what()),
                    needs: None,
                });
            }
            r => r.map_err(|e| {
                e.with_context(format!(
                    "{} ({} x {} -> {})",
                    spec.describe(),
                    A::NAME,
                    A::NAME,
                    D::NAME
                ))
            })?,
        }
        if count < 1 || result.state != cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            return Err(Error::Unsupported {
                what: what(),
                needs: None,
            });
        }
        Ok(result)
    }

    /// The spec.
    pub fn spec(&self) -> &MatmulSpec {
        &self.spec
    }

    /// The checked shape (frame, epilogue sizes).
    pub fn shape(&self) -> &MatmulShape {
        &self.shape
    }

    fn state(&self) -> MutexGuard<'_, LtState> {
        // A run that panicked left the state as consistent as any (each
        // pointer is recorded only after cuBLASLt took it).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The descriptors. Exclusive access (`&mut self`): no run can change
    /// them meanwhile (a plan shared through an `Arc` runs; it is not
    /// inspected).
    pub fn descriptors(&mut self) -> &MatmulDescriptors {
        &self
            .state
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .descs
    }

    /// The heuristic's result a run uses (the algorithm and its workspace
    /// bytes), for the device the plan last ran on; `None` when D is empty
    /// (nothing to compute). Exclusive access, as
    /// [`descriptors`](Self::descriptors).
    pub fn heuristic_result(&mut self) -> Option<cublasLtMatmulHeuristicResult_t> {
        self.state.get_mut().unwrap_or_else(|e| e.into_inner()).algo
    }

    /// The cache key.
    pub fn key(&self) -> MatmulKey {
        MatmulKey::new::<A, D>(&self.spec, self.workspace_limit)
    }

    /// Workspace bytes the chosen algorithm needs.
    pub fn workspace_size(&self) -> usize {
        self.workspace.load(Ordering::Relaxed)
    }

    /// Queue D = epilogue(alpha·A·B + beta·D) on `lt`'s stream, with the
    /// epilogue's buffers in `epi`. With `beta == 0`, D is not read. A plan
    /// runs from several threads at once (each with its own handle); its
    /// runs take turns only around the descriptor update and the enqueue.
    ///
    /// # Errors
    /// [`Error::Mismatch`] for short buffers or a workspace smaller than the
    /// algorithm needs; [`Error::InvalidArgument`] for a misaligned pointer,
    /// a missing or unexpected epilogue buffer, or an alpha/beta the scale
    /// type cannot hold; [`Error::Cublas`].
    #[doc(alias = "cublasLtMatmul")]
    #[allow(clippy::too_many_arguments)]
    pub fn run<'a, 'b, 'd>(
        &self,
        lt: &LtHandle,
        alpha: A::Scale,
        a: impl Into<DeviceSlice<'a, A>>,
        b: impl Into<DeviceSlice<'b, A>>,
        beta: A::Scale,
        d: impl Into<DeviceSliceMut<'d, D>>,
        mut epi: EpilogueArgs<'_, D>,
    ) -> Result<()> {
        let (a, b, mut d) = (a.into(), b.into(), d.into());
        let spec = self.spec;
        let shape = self.shape;
        let Checked {
            bias_addr,
            aux_addr,
            alpha,
            beta,
        } = host_checks::<A, D>(&spec, &shape, alpha, &a, &b, beta, &mut d, &mut epi)?;
        let mut state = self.state();
        let Some(mut algo) = state.algo else {
            return Ok(()); // an empty D: nothing to compute
        };
        let _on = lt.enter()?;
        crate::runtime::check_args(LT_MATMUL, lt.device(), &lt_args(&a, &b, &d, &epi))?;
        if lt.device() != state.device {
            // The algorithm was chosen for another device (maybe another
            // architecture): ask the heuristic again on this one.
            algo = Self::heuristic(lt, &spec, &state.descs)?;
            state.algo = Some(algo);
            state.device = lt.device();
            self.workspace.store(algo.workspaceSize, Ordering::Relaxed);
        }
        let have = lt.workspace_size();
        if algo.workspaceSize > have {
            return Err(Error::mismatch(
                "cuBLASLt workspace bytes (the plan's algorithm needs more than the handle has; rebuild the plan)",
                format!(">= {}", algo.workspaceSize),
                have,
            ));
        }
        let descs = &mut state.descs;
        if let Some((_, addr)) = bias_addr
            && addr != descs.bias_ptr
        {
            descs
                .desc
                .set(DescAttr::CUBLASLT_MATMUL_DESC_BIAS_POINTER, addr)?;
            descs.bias_ptr = addr;
        }
        if let Some((_, addr)) = aux_addr
            && addr != descs.aux_ptr
        {
            descs
                .desc
                .set(DescAttr::CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, addr)?;
            descs.aux_ptr = addr;
        }
        let (p1, p2) = if shape.frame.swap {
            (b.as_raw(), a.as_raw())
        } else {
            (a.as_raw(), b.as_raw())
        };
        let dp = d.as_raw_mut();
        let ws = lt.workspace_ptr();
        let api = cublas_lt()?;
        let x = &state.descs;
        // SAFETY: the handle and descriptors are valid (the plan's lock,
        // held to the end of the enqueue, keeps other runs from changing
        // them meanwhile); A, B and D's buffer
        // lengths were checked against their layouts (which the descriptors
        // were built from), and the epilogue buffers against the epilogue's
        // sizes, with the bias/aux attributes pointing at them; every pointer
        // is aligned as the heuristic was told; alpha/beta are host values of
        // the scale type; the workspace is the handle's own, at least as large
        // as the algorithm needs, and stays allocated until work queued on
        // this stream is done (it is freed with cudaFree, which waits). C is D
        // (in place), which cuBLASLt allows with identical layouts.
        let r = unsafe {
            lt_call!(
                api,
                cublasLtMatmul(
                    lt.as_raw(),
                    x.desc.as_raw(),
                    alpha.as_ptr(),
                    p1,
                    x.first.as_raw(),
                    p2,
                    x.second.as_raw(),
                    beta.as_ptr(),
                    dp.cast_const(),
                    x.out.as_raw(),
                    dp,
                    x.out.as_raw(),
                    &algo.algo,
                    ws,
                    have,
                    lt.stream().as_raw(),
                )
            )
        };
        r.map_err(|e| {
            e.with_context(format!(
                "{} ({} x {} -> {})",
                spec.describe(),
                A::NAME,
                A::NAME,
                D::NAME
            ))
        })
    }
}

/// Plans by [`MatmulKey`] and device: one cache serves handles of several
/// devices, each getting plans chosen for its own device. Shared by
/// reference across threads (`&self`, like [`graph::PlanCache`](crate::graph::PlanCache)):
/// plans are handed out as `Arc`s and run concurrently.
pub struct PlanCache<A: GemmTypes<D>, D: DataType> {
    /// Keyed by the handle's device too: an algorithm is chosen per device.
    plans: Mutex<Plans<A, D>>,
}

/// A cache's plans, by device and key.
type Plans<A, D> = HashMap<(Device, MatmulKey), Arc<MatmulPlan<A, D>>>;

impl<A: GemmTypes<D>, D: DataType> fmt::Debug for PlanCache<A, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlanCache")
            .field("plans", &self.len())
            .finish()
    }
}

impl<A: GemmTypes<D>, D: DataType> Default for PlanCache<A, D> {
    fn default() -> Self {
        PlanCache {
            plans: Mutex::new(HashMap::new()),
        }
    }
}

impl<A: GemmTypes<D>, D: DataType> PlanCache<A, D> {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    fn map(&self) -> MutexGuard<'_, Plans<A, D>> {
        // Nothing is left half-inserted by a panic (an entry is inserted
        // whole, after its plan was built).
        self.plans.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The plan for `spec` with `lt`'s current workspace, built on first use
    /// (under the cache's lock: two threads asking for one key build it
    /// once).
    ///
    /// # Errors
    /// As [`MatmulPlan::new`] (nothing is cached then).
    pub fn get_or_create(&self, lt: &LtHandle, spec: &MatmulSpec) -> Result<Arc<MatmulPlan<A, D>>> {
        let key = MatmulKey::new::<A, D>(spec, lt.workspace_size());
        match self.map().entry((lt.device(), key)) {
            Entry::Occupied(e) => Ok(e.get().clone()),
            Entry::Vacant(v) => Ok(v.insert(Arc::new(MatmulPlan::new(lt, spec)?)).clone()),
        }
    }

    /// Whether a plan for `key` is cached (for any device).
    pub fn contains(&self, key: &MatmulKey) -> bool {
        self.map().keys().any(|(_, k)| k == key)
    }

    /// Whether a plan for `key` is cached for `device`.
    pub fn contains_on(&self, device: Device, key: &MatmulKey) -> bool {
        self.map().contains_key(&(device, *key))
    }

    /// Number of cached plans.
    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.map().is_empty()
    }

    /// Drop the cache's references to every plan (plans handed out live on
    /// while their `Arc`s do).
    pub fn clear(&self) {
        self.map().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plans and their cache are shared across threads by reference.
    #[test]
    fn unit_plans_and_cache_are_send_and_sync() {
        fn both<T: Send + Sync>() {}
        both::<MatmulPlan<f32, f32>>();
        both::<MatmulPlan<half::f16, half::f16>>();
        both::<PlanCache<half::bf16, half::bf16>>();
        both::<Arc<MatmulPlan<f32, f32>>>();
        both::<crate::blas::Fp8MatmulPlan<crate::F8E4M3, crate::F8E4M3, half::bf16>>();
    }

    /// `launch_checks` follows `run`'s order: for an empty D (0 rows) `run`
    /// returns after the host checks, before the buffers' devices are
    /// compared, so buffers on device 1 with device 0 given pass; for a D
    /// of 4 x 4 they are refused, naming `a` (the first buffer).
    #[test]
    fn unit_launch_checks_skip_devices_for_an_empty_d() {
        use crate::blas::Layout;
        let (on0, on1) = (Device::from_runtime(0), Device::from_runtime(1));
        let check = |m: usize| {
            let spec = MatmulSpec::new(
                Layout::row_major(m, 4),
                Layout::row_major(4, 4),
                Layout::row_major(m, 4),
            );
            // SAFETY: checked only, never dereferenced.
            let (a, b, d) = unsafe {
                (
                    DeviceSlice::<f32>::from_raw_parts_on(0x1000 as *const f32, 16, on1),
                    DeviceSlice::<f32>::from_raw_parts_on(0x2000 as *const f32, 16, on1),
                    DeviceSliceMut::<f32>::from_raw_parts_mut_on(0x3000 as *mut f32, 16, on1),
                )
            };
            spec.launch_checks::<f32, f32>()?.run(
                1.0,
                a,
                b,
                0.0,
                d,
                EpilogueArgs::none(),
                Some(on0),
            )
        };
        assert!(check(0).is_ok(), "{:?}", check(0));
        match check(4) {
            Err(Error::DeviceMismatch {
                what,
                expected: 0,
                got: 1,
            }) => {
                assert!(what.contains("`a`"), "{what}")
            }
            other => panic!("{other:?}"),
        }
    }
}
