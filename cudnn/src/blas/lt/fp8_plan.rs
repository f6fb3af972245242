//! [`Fp8MatmulPlan`]: the heuristic's algorithm for one FP8 spec, and the
//! checked `cublasLtMatmul` call with scale, amax and bias pointers.

use std::fmt;
use std::marker::PhantomData;
use std::mem;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use super::call::*;
use super::fp8::*;
use super::handle::*;
use super::plan::check_aligned;
use crate::error::{Error, Result};
use crate::runtime::{Device, DeviceSlice, DeviceSliceMut};
use crate::sys::cublas::{cublasLtMatmulHeuristicResult_t, cublasStatus_t};

/// The element types, held without owning any (Send + Sync whatever they are).
type Types<A, B, D, Bias> = PhantomData<fn() -> (A, B, D, Bias)>;

/// The per-tensor scales and the amax output of one run: device f32
/// scalars (each slice at least 1 element). A scale left `None` is 1.
/// Made from `Fp8Scaling::default()` and the `with_*` methods (the struct
/// is `#[non_exhaustive]`: scales will be added; its fields stay readable
/// and assignable).
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Fp8Scaling<'a> {
    /// Multiplies A (`CUBLASLT_MATMUL_DESC_A_SCALE_POINTER`).
    pub a: Option<DeviceSlice<'a, f32>>,
    /// Multiplies B.
    pub b: Option<DeviceSlice<'a, f32>>,
    /// Would multiply C; must be `None`: cuBLASLt takes a C scale only for
    /// an FP8 C, and C here is never FP8 (it is D, or absent for an FP8 D).
    /// Fold a C scale into `beta` instead.
    pub c: Option<DeviceSlice<'a, f32>>,
    /// Multiplies the result before it is stored (FP8 D only).
    pub d: Option<DeviceSlice<'a, f32>>,
    /// Receives max |result| before `d` (when the spec asks for it).
    pub amax_d: Option<DeviceSliceMut<'a, f32>>,
}

impl<'a> Fp8Scaling<'a> {
    /// With A's scale.
    pub fn with_a(mut self, a: DeviceSlice<'a, f32>) -> Self {
        self.a = Some(a);
        self
    }

    /// With B's scale.
    pub fn with_b(mut self, b: DeviceSlice<'a, f32>) -> Self {
        self.b = Some(b);
        self
    }

    /// With a C scale (refused at run time: see [`c`](Self::c)).
    pub fn with_c(mut self, c: DeviceSlice<'a, f32>) -> Self {
        self.c = Some(c);
        self
    }

    /// With D's scale (FP8 D only).
    pub fn with_d(mut self, d: DeviceSlice<'a, f32>) -> Self {
        self.d = Some(d);
        self
    }

    /// With the amax output.
    pub fn with_amax_d(mut self, amax_d: DeviceSliceMut<'a, f32>) -> Self {
        self.amax_d = Some(amax_d);
        self
    }
}

/// A scaled FP8 cuBLASLt matmul for one [`Fp8MatmulSpec`] and element types
/// `A`, `B` (FP8) and `D`: the descriptors and the heuristic's algorithm,
/// chosen once. Creating one needs a device (the heuristic takes an
/// [`LtHandle`]); the descriptors alone do not ([`Fp8Descriptors`]).
///
/// `Bias` is the bias vector's element type, and C's for an FP8 D: D's
/// default ([`Fp8Output::Bias`], bf16 unless D is f16) when left out; with
/// an FP8 D it may be `f16` (`Fp8MatmulPlan::<F8E4M3, F8E4M3, F8E4M3,
/// f16>`, as TransformerEngine does); any other choice is refused by
/// [`new`](Self::new) naming `bias`.
pub struct Fp8MatmulPlan<
    A: Fp8Input,
    B: Fp8Input,
    D: Fp8Output,
    Bias: Fp8Bias = <D as Fp8Output>::Bias,
> {
    spec: Fp8MatmulSpec,
    shape: Fp8Shape,
    /// What a run changes (the scale, amax and bias pointers set in the
    /// matmul descriptor; the algorithm when a handle of another device
    /// runs it), under one lock from the check to the enqueue: the plan runs
    /// from several threads at once (`&self`).
    state: Mutex<Fp8State>,
    /// The workspace bytes of the state's algorithm (read without the lock).
    workspace: AtomicUsize,
    _types: Types<A, B, D, Bias>,
}

/// An FP8 plan's mutable part (see [`Fp8MatmulPlan`]).
#[derive(Debug)]
struct Fp8State {
    descs: Fp8Descriptors,
    algo: Option<cublasLtMatmulHeuristicResult_t>,
    device: Device,
}

impl<A: Fp8Input, B: Fp8Input, D: Fp8Output, Bias: Fp8Bias> fmt::Debug
    for Fp8MatmulPlan<A, B, D, Bias>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fp8MatmulPlan")
            .field(
                "types",
                &format_args!(
                    "{} x {} -> {} (bias {})",
                    A::NAME,
                    B::NAME,
                    D::NAME,
                    Bias::NAME
                ),
            )
            .field("spec", &self.spec)
            .field("workspace", &self.workspace_size())
            .finish()
    }
}

/// Whether a device of compute capability `cc` has block-scaled (MXFP8)
/// matmuls, and the error when it has not.
pub fn check_scale_mode_for(mode: Fp8ScaleMode, cc: (u32, u32)) -> Result<()> {
    match mode {
        Fp8ScaleMode::Tensor if cc.0 < 9 && cc != (8, 9) => Err(Error::Unsupported {
            what: format!(
                "FP8 matmul on sm_{}{} (FP8 tensor cores start with Ada sm_89 and Hopper sm_90)",
                cc.0, cc.1
            ),
            needs: Some("a device of compute capability 8.9 or newer".into()),
        }),
        Fp8ScaleMode::Mxfp8 if cc.0 < 10 => Err(Error::Unsupported {
            what: format!(
                "block-scaled MXFP8 matmul (CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0) on sm_{}{}",
                cc.0, cc.1
            ),
            needs: Some("Blackwell: compute capability 10.0 or newer".into()),
        }),
        Fp8ScaleMode::Mxfp8 => Err(Error::Unsupported {
            what: format!(
                "block-scaled MXFP8 matmul on sm_{}{}: the scale-factor tensors' tiled layout is not implemented in this crate yet",
                cc.0, cc.1
            ),
            needs: None,
        }),
        _ => Ok(()),
    }
}

impl<A: Fp8Input, B: Fp8Input, D: Fp8Output, Bias: Fp8Bias> Fp8MatmulPlan<A, B, D, Bias> {
    /// Check the spec, build the descriptors and ask the heuristic for the
    /// best algorithm within `lt`'s workspace.
    ///
    /// # Errors
    /// As [`Fp8MatmulSpec::check`] (a `Bias` type D does not take is
    /// refused naming `bias`); [`Error::Unsupported`] for a scale mode
    /// or FP8 on a device without it (naming the architecture) or when the
    /// heuristic finds no algorithm; [`Error::Cublas`].
    #[doc(alias = "cublasLtMatmulAlgoGetHeuristic")]
    pub fn new(lt: &LtHandle, spec: &Fp8MatmulSpec) -> Result<Self> {
        let types = Fp8Types::of::<A, B, D>().with_bias(Bias::TYPE);
        let descs = Fp8Descriptors::new(spec, types, lt.workspace_size())?;
        let device = lt.device();
        check_scale_mode_for(spec.scale_mode, device.compute_capability()?)?;
        let (m, n, _) = descs.shape.dims();
        let algo = if m == 0 || n == 0 || descs.shape.batch_count() == 0 {
            None
        } else {
            Some(Self::heuristic(lt, spec, &descs)?)
        };
        Ok(Fp8MatmulPlan {
            spec: *spec,
            shape: descs.shape,
            workspace: AtomicUsize::new(algo.map_or(0, |a| a.workspaceSize)),
            state: Mutex::new(Fp8State {
                descs,
                algo,
                device,
            }),
            _types: PhantomData,
        })
    }

    fn what(spec: &Fp8MatmulSpec) -> String {
        format!(
            "FP8 matmul {} x {} -> {} with {}",
            A::NAME,
            B::NAME,
            D::NAME,
            spec.describe()
        )
    }

    fn heuristic(
        lt: &LtHandle,
        spec: &Fp8MatmulSpec,
        d: &Fp8Descriptors,
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
                    d.c.as_raw(),
                    d.out.as_raw(),
                    d.pref.as_raw(),
                    1,
                    &mut result,
                    &mut count,
                )
            )
        };
        match r {
            Err(Error::Cublas { code, text, .. })
                if code == cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED.0 =>
            {
                return Err(Error::Unsupported {
                    what: format!(
                        "{} on this device (cublasLtMatmulAlgoGetHeuristic: {text})",
                        Self::what(spec)
                    ),
                    needs: None,
                });
            }
            r => r.map_err(|e| e.with_context(Self::what(spec)))?,
        }
        if count < 1 || result.state != cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            return Err(Error::Unsupported {
                what: format!(
                    "{} on this device (no algorithm within {} bytes of workspace)",
                    Self::what(spec),
                    lt.workspace_size()
                ),
                needs: None,
            });
        }
        Ok(result)
    }

    /// The spec.
    pub fn spec(&self) -> &Fp8MatmulSpec {
        &self.spec
    }

    /// The checked shape.
    pub fn shape(&self) -> &Fp8Shape {
        &self.shape
    }

    fn state(&self) -> MutexGuard<'_, Fp8State> {
        // A run that panicked left the state as consistent as any (each
        // pointer is recorded only after cuBLASLt took it).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The descriptors. Exclusive access (`&mut self`): no run can change
    /// them meanwhile (a plan shared through an `Arc` runs; it is not
    /// inspected).
    pub fn descriptors(&mut self) -> &Fp8Descriptors {
        &self
            .state
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .descs
    }

    /// Workspace bytes the chosen algorithm needs.
    pub fn workspace_size(&self) -> usize {
        self.workspace.load(Ordering::Relaxed)
    }

    /// Queue `D = scale_d · epilogue(alpha · scale_a · scale_b · A·B +
    /// beta · scale_c · D (+ bias))` on `lt`'s stream, writing D's amax when
    /// the spec asks for it. For an FP8 D, `beta` must be 0 (its C would be
    /// bf16, and there is no separate C); `scale.c` must be `None` (C is
    /// never FP8 here) and, for a D that is not FP8, so must `scale.d`. An empty D (m, n or the batch 0)
    /// queues nothing after the argument checks: the amax buffer is left as
    /// it was. A plan runs from several threads at once (each with its own
    /// handle); its runs take turns only around the descriptor update and
    /// the enqueue.
    ///
    /// # Errors
    /// [`Error::Mismatch`] for short buffers or a workspace smaller than the
    /// algorithm needs; [`Error::InvalidArgument`] naming the argument for a
    /// misaligned pointer, a missing or unexpected bias / amax / scale, a
    /// non-zero `beta` with an FP8 D, or a non-finite alpha/beta;
    /// [`Error::Cublas`].
    #[doc(alias = "cublasLtMatmul")]
    #[allow(clippy::too_many_arguments)]
    pub fn run<'a, 'b, 'd>(
        &self,
        lt: &LtHandle,
        alpha: f32,
        a: impl Into<DeviceSlice<'a, A>>,
        b: impl Into<DeviceSlice<'b, B>>,
        beta: f32,
        d: impl Into<DeviceSliceMut<'d, D>>,
        mut scale: Fp8Scaling<'_>,
        bias: Option<DeviceSlice<'_, Bias>>,
    ) -> Result<()> {
        let (a, b, mut d) = (a.into(), b.into(), d.into());
        let spec = self.spec;
        spec.a.check_len("a", a.len())?;
        spec.b.check_len("b", b.len())?;
        spec.d.check_len("d", d.len())?;
        for (name, v) in [("alpha", alpha), ("beta", beta)] {
            if !v.is_finite() {
                return Err(Error::invalid(name, "must be finite", v));
            }
        }
        let fp8_out = D::TYPE.is_fp8();
        if fp8_out && beta != 0.0 {
            return Err(Error::invalid(
                "beta",
                "must be 0 with an FP8 D (its C would be 16-bit, and this crate has no separate C)",
                beta,
            ));
        }
        if scale.c.is_some() {
            return Err(Error::invalid(
                "scale.c",
                format!(
                    "must be None: cuBLASLt takes a C scale only for an FP8 C, and C is {} here (fold the scale into beta)",
                    if fp8_out { "absent" } else { D::NAME }
                ),
                "a buffer",
            ));
        }
        if !fp8_out && scale.d.is_some() {
            return Err(Error::invalid(
                "scale.d",
                format!(
                    "must be None: cuBLASLt applies a D scale to FP8 outputs only (D is {})",
                    D::NAME
                ),
                "a buffer",
            ));
        }
        match (spec.amax_d, scale.amax_d.is_some()) {
            (true, false) => {
                return Err(Error::invalid(
                    "scale.amax_d",
                    "the spec asks for D's amax (with_amax_d): give a 1-element f32 buffer",
                    "None",
                ));
            }
            (false, true) => {
                return Err(Error::invalid(
                    "scale.amax_d",
                    "must be None: the spec does not ask for D's amax (use with_amax_d(true))",
                    "a buffer",
                ));
            }
            _ => {}
        }
        let need_bias = self.shape.bias_len;
        match (&bias, need_bias) {
            (None, n) if n > 0 => {
                return Err(Error::invalid(
                    "bias",
                    format!("epilogue {:?} needs a bias of {n} elements", spec.epilogue),
                    "None",
                ));
            }
            (Some(_), 0) => {
                return Err(Error::invalid(
                    "bias",
                    format!("must be None for epilogue {:?}", spec.epilogue),
                    "a buffer",
                ));
            }
            (Some(x), n) if x.len() < n => {
                return Err(Error::mismatch("bias length", format!(">= {n}"), x.len()));
            }
            _ => {}
        }
        let al = spec.alignment;
        check_aligned("a", a.as_raw() as usize, al)?;
        check_aligned("b", b.as_raw() as usize, al)?;
        check_aligned("d", d.as_raw() as usize, al)?;
        if let Some(x) = &bias {
            check_aligned("bias", x.as_raw() as usize, al)?;
        }
        let mut want = [0usize; 6];
        for (i, (name, s)) in [
            ("scale.a", &scale.a),
            ("scale.b", &scale.b),
            ("scale.c", &scale.c),
            ("scale.d", &scale.d),
        ]
        .into_iter()
        .enumerate()
        {
            if let Some(s) = s {
                if s.is_empty() {
                    return Err(Error::mismatch(format!("{name} length"), ">= 1", 0));
                }
                check_aligned(name, s.as_raw() as usize, 4)?;
                if let Some(slot) = want.get_mut(i) {
                    *slot = s.as_raw() as usize;
                }
            }
        }
        if let Some(x) = &mut scale.amax_d {
            if x.is_empty() {
                return Err(Error::mismatch("scale.amax_d length", ">= 1", 0));
            }
            check_aligned("scale.amax_d", x.as_raw() as usize, 4)?;
            want[4] = x.as_raw_mut() as usize;
        }
        if let Some(x) = &bias {
            want[5] = x.as_raw() as usize;
        }
        let mut state = self.state();
        let Some(mut algo) = state.algo else {
            return Ok(()); // an empty D: nothing to compute
        };
        let _on = lt.enter()?;
        let dev = |x: Option<Option<Device>>| x.flatten();
        crate::runtime::check_args(
            "cublasLtMatmul (FP8)",
            lt.device(),
            &[
                ("a", a.device()),
                ("b", b.device()),
                ("d", d.device()),
                ("bias", dev(bias.as_ref().map(|x| x.device()))),
                ("scale.a", dev(scale.a.as_ref().map(|x| x.device()))),
                ("scale.b", dev(scale.b.as_ref().map(|x| x.device()))),
                ("scale.c", dev(scale.c.as_ref().map(|x| x.device()))),
                ("scale.d", dev(scale.d.as_ref().map(|x| x.device()))),
                (
                    "scale.amax_d",
                    dev(scale.amax_d.as_ref().map(|x| x.device())),
                ),
            ],
        )?;
        if lt.device() != state.device {
            check_scale_mode_for(spec.scale_mode, lt.device().compute_capability()?)?;
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
        // Point the descriptor at this run's scales, amax and bias (unset
        // scales are null: 1). Set only what changed.
        let descs = &mut state.descs;
        for ((attr, now), new) in POINTER_ATTRS.iter().zip(descs.ptrs.iter_mut()).zip(want) {
            if *now != new {
                descs.desc.set(*attr, new)?;
                *now = new;
            }
        }
        let (p1, p2) = if self.shape.frame.swap {
            (b.as_raw(), a.as_raw())
        } else {
            (a.as_raw(), b.as_raw())
        };
        let dp = d.as_raw_mut();
        let alpha_v = alpha;
        let beta_v = beta;
        let ws = lt.workspace_ptr();
        let api = cublas_lt()?;
        let x = &state.descs;
        // C: in place (D's memory and D's own layout object, cuBLASLt's
        // in-place form C == D with Cdesc == Ddesc) when C has D's type; for
        // an FP8 D, C is bf16 and cannot be D in place, and cuBLASLt takes
        // neither D's pointer nor null there: C points at A (never read, as
        // beta is 0, checked above), with the bf16 layout the heuristic saw.
        let (cp, c_desc) = if fp8_out {
            (a.as_raw(), x.c.as_raw())
        } else {
            (dp.cast_const(), x.out.as_raw())
        };
        // SAFETY: the handle and descriptors are valid; A, B and D's lengths
        // were checked against their layouts (the descriptors' source), the
        // bias against the epilogue's length, every scale and the amax
        // buffer hold at least one f32 and the descriptor points at exactly
        // these buffers (set just above, nulls for absent scales); all are
        // on the handle's device and aligned as the heuristic was told;
        // alpha/beta are host f32 (the scale type); C is D in place with
        // D's own layout, or (FP8 D, beta 0: never read) A's pointer;
        // the workspace is the handle's own, at least as large as the
        // algorithm needs, and outlives the queued work (freed with
        // cudaFree, which waits).
        let r = unsafe {
            lt_call!(
                api,
                cublasLtMatmul(
                    lt.as_raw(),
                    x.desc.as_raw(),
                    (&alpha_v as *const f32).cast(),
                    p1,
                    x.first.as_raw(),
                    p2,
                    x.second.as_raw(),
                    (&beta_v as *const f32).cast(),
                    cp,
                    c_desc,
                    dp,
                    x.out.as_raw(),
                    &algo.algo,
                    ws,
                    have,
                    lt.stream().as_raw(),
                )
            )
        };
        r.map_err(|e| e.with_context(Self::what(&spec)))
    }
}
