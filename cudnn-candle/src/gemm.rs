//! GEMM through cuBLASLt on candle tensors with fused epilogues
//! ([`matmul_bias_act`]): a candle `CustomOp2` / `CustomOp3` running
//! `cudnn::blas`'s cached [`MatmulPlan`](cudnn::blas::MatmulPlan) on
//! candle's stream, candle's memory lent through `cudnn::interop`. The
//! backward (candle's autograd) is in [`gemm_bwd`](crate::gemm_bwd).

use std::sync::OnceLock;

use candle_core::backend::BackendStorage;
use candle_core::{
    CpuStorage, CudaStorage, CustomOp2, CustomOp3, DType as CDType, Layout, Shape, Tensor,
};
use cudarc::driver::{CudaSlice, CudaView, DeviceRepr, ValidAsZeroBits};
use cudnn::blas::{EpilogueArgs, GemmTypes, MatmulKey, MatmulSpec, PlanCache};
use cudnn::{Error, Scale};

use crate::attn::{arg, on_cuda, same_device, same_dtype};
use crate::device::{IntoCandle, to_candle, with_lt};
use crate::gemm_bwd;
use crate::params::gemm::{self, MatmulActivation};

/// The element types of the GEMM: f32, f16, bf16 (D of A's type).
trait GemmElem:
    GemmTypes<Self>
    + DeviceRepr
    + ValidAsZeroBits
    + candle_core::cuda_backend::CudaDType
    + Copy
    + Send
    + Sync
    + 'static
{
    /// The process-wide plans of this type.
    fn plans() -> &'static PlanCache<Self, Self>;
}

macro_rules! elem {
    ($t:ty) => {
        impl GemmElem for $t {
            fn plans() -> &'static PlanCache<Self, Self> {
                static P: OnceLock<PlanCache<$t, $t>> = OnceLock::new();
                P.get_or_init(PlanCache::new)
            }
        }
    };
}
elem!(f32);
elem!(half::f16);
elem!(half::bf16);

/// How many GEMM plans each element type's process-wide cache keeps. A
/// plan is keyed by the whole shape (every distinct `m`, i.e. every prompt
/// length, is a key) and the operands' alignment: at this many, a new key
/// empties the cache first (plans in use live on through their `Arc`s;
/// the working set is planned again, once). [`clear_gemm_plans`] empties
/// it on demand.
pub const GEMM_PLAN_CAPACITY: usize = 512;

/// Drop the cached GEMM plans of every element type, FP8 ones
/// ([`fp8_matmul`](crate::fp8_matmul)) included (plans in use live on
/// while their calls run).
pub fn clear_gemm_plans() {
    <f32 as GemmElem>::plans().clear();
    <half::f16 as GemmElem>::plans().clear();
    <half::bf16 as GemmElem>::plans().clear();
    crate::fp8::clear_plans();
}

/// How many GEMM plans are cached, all element types together (at most
/// `3 * GEMM_PLAN_CAPACITY` for [`matmul_bias_act`] and as many for
/// [`fp8_matmul`](crate::fp8_matmul), one cache per output type).
pub fn gemm_plan_count() -> usize {
    <f32 as GemmElem>::plans().len()
        + <half::f16 as GemmElem>::plans().len()
        + <half::bf16 as GemmElem>::plans().len()
        + crate::fp8::plan_count()
}

/// Whether a cache holding `len` plans must be emptied before a key it
/// does not hold (`present`: it holds it) is added: at the capacity.
fn must_evict(len: usize, present: bool) -> bool {
    !present && len >= GEMM_PLAN_CAPACITY
}

/// The largest power of two (at most 256) dividing every address: the
/// alignment the plan may assume (candle's views start anywhere).
fn alignment(addrs: &[u64]) -> usize {
    addrs
        .iter()
        .fold(MatmulSpec::DEFAULT_ALIGNMENT as u64, |acc, &a| {
            acc.min(if a == 0 {
                acc
            } else {
                1u64 << a.trailing_zeros()
            })
        }) as usize
}

fn view<'a, T: GemmElem>(
    s: &'a CudaStorage,
    l: &Layout,
    name: &str,
) -> candle_core::Result<CudaView<'a, T>> {
    let slice: &CudaSlice<T> = s.as_cuda_slice::<T>()?;
    slice.try_slice(l.start_offset()..).ok_or_else(|| {
        to_candle(Error::invalid(
            format!("{name} start offset"),
            format!("must be inside its buffer of {} elements", slice.len()),
            l.start_offset(),
        ))
    })
}

#[derive(Clone, Debug)]
struct MatmulBiasAct {
    act: MatmulActivation,
}

impl MatmulBiasAct {
    fn run<T: GemmElem>(
        &self,
        (a, al): (&CudaStorage, &Layout),
        (b, bl): (&CudaStorage, &Layout),
        bias: Option<(&CudaStorage, &Layout)>,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        same_device(a, b, "b")?;
        same_dtype(a, b, "b")?;
        if let Some((x, _)) = bias {
            same_device(a, x, "bias")?;
            same_dtype(a, x, "bias")?;
        }
        let bias_arg = bias.map(|(x, l)| arg("bias", l, x.dtype()));
        let g = gemm::gemm(
            &arg("a", al, a.dtype()),
            &arg("b", bl, b.dtype()),
            bias_arg.as_ref(),
            self.act,
        )
        .c()?;
        let dev = &a.device;
        let n_out = g.spec.layouts().2.required_len().ok_or_else(|| {
            to_candle(Error::invalid(
                "output size",
                "must fit usize",
                format!("{:?}", g.out_dims),
            ))
        })?;
        let av = view::<T>(a, al, "a")?;
        let bv = view::<T>(b, bl, "b")?;
        let xv = bias.map(|(x, l)| view::<T>(x, l, "bias")).transpose()?;
        let mut d = dev.alloc_zeros::<T>(n_out)?;
        with_lt(dev, |cs, lt| {
            if cs.capture_status().c()? != cudnn::runtime::CaptureStatus::None {
                return Err(to_candle(Error::Unsupported {
                    what: "cudnn-candle matmul_bias_act while candle's stream is capturing"
                        .to_string(),
                    needs: Some("the call outside the capture".to_string()),
                }));
            }
            // SAFETY: the contract of `CudarcStream::read` / `write`: every
            // view of these guards goes to `plan.run` on `lt` only, which is
            // bound to `cs` (candle's stream, where cudarc records the
            // events); the guards drop at the end of this closure, after the
            // enqueue; the stream is not capturing (checked above).
            let (ar, br) = unsafe { (cs.read(&av), cs.read(&bv)) };
            let (ar, br) = (ar.c()?, br.c()?);
            let xr = match &xv {
                // SAFETY: as above.
                Some(x) => Some(unsafe { cs.read(x) }.c()?),
                None => None,
            };
            // SAFETY: as above.
            let mut dw = unsafe { cs.write(&mut d) }.c()?;
            let mut addrs = vec![
                ar.view().as_raw() as u64,
                br.view().as_raw() as u64,
                dw.view().as_raw() as u64,
            ];
            if let Some(x) = &xr {
                addrs.push(x.view().as_raw() as u64);
            }
            let spec = g.spec.with_alignment(alignment(&addrs));
            let cache = T::plans();
            let key = MatmulKey::new::<T, T>(&spec, lt.workspace_size());
            if must_evict(cache.len(), cache.contains_on(lt.device(), &key)) {
                cache.clear();
            }
            let plan = cache.get_or_create(lt, &spec).c()?;
            let mut epi = EpilogueArgs::none();
            if let Some(x) = &xr {
                epi = epi.bias(x.view());
            }
            let one = <T::Scale as Scale>::from_f64(1.0);
            let zero = <T::Scale as Scale>::from_f64(0.0);
            plan.run(lt, one, ar.view(), br.view(), zero, dw.view_mut(), epi)
                .c()
        })?;
        Ok((
            CudaStorage::wrap_cuda_slice(d, dev.clone()),
            Shape::from(g.out_dims),
        ))
    }

    fn dispatch(
        &self,
        a: (&CudaStorage, &Layout),
        b: (&CudaStorage, &Layout),
        bias: Option<(&CudaStorage, &Layout)>,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        match a.0.dtype() {
            CDType::F32 => self.run::<f32>(a, b, bias),
            CDType::F16 => self.run::<half::f16>(a, b, bias),
            CDType::BF16 => self.run::<half::bf16>(a, b, bias),
            other => Err(to_candle(Error::invalid(
                "a dtype",
                "must be f32, f16 or bf16 (cuBLASLt with epilogues)",
                format!("{other:?}"),
            ))),
        }
    }
}

impl CustomOp2 for MatmulBiasAct {
    fn name(&self) -> &'static str {
        "cudnn-matmul-act"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        Err(on_cuda("cudnn_candle::matmul_bias_act"))
    }

    fn cuda_fwd(
        &self,
        a: &CudaStorage,
        al: &Layout,
        b: &CudaStorage,
        bl: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        self.dispatch((a, al), (b, bl), None)
    }

    fn bwd(
        &self,
        a: &Tensor,
        b: &Tensor,
        res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let need = [a.track_op(), b.track_op(), false];
        let (da, db, _) =
            gemm_bwd::backward((a, b, None), res, grad_res, self.act, &untracked, need)?;
        Ok((da, db))
    }
}

impl CustomOp3 for MatmulBiasAct {
    fn name(&self) -> &'static str {
        "cudnn-matmul-bias-act"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        Err(on_cuda("cudnn_candle::matmul_bias_act"))
    }

    fn cuda_fwd(
        &self,
        a: &CudaStorage,
        al: &Layout,
        b: &CudaStorage,
        bl: &Layout,
        x: &CudaStorage,
        xl: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        self.dispatch((a, al), (b, bl), Some((x, xl)))
    }

    fn bwd(
        &self,
        a: &Tensor,
        b: &Tensor,
        x: &Tensor,
        res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let need = [a.track_op(), b.track_op(), x.track_op()];
        let (da, db, dx) =
            gemm_bwd::backward((a, b, Some(x)), res, grad_res, self.act, &untracked, need)?;
        Ok((da, db, dx))
    }
}

/// The forward GEMM `x·y (+ bias)` without an activation, on detached
/// operands (no gradient of the backward's own GEMMs is tracked).
fn untracked(x: &Tensor, y: &Tensor, bias: Option<&Tensor>) -> candle_core::Result<Tensor> {
    matmul_impl(
        &x.detach(),
        &y.detach(),
        bias.map(Tensor::detach).as_ref(),
        MatmulActivation::None,
        false,
    )
}

/// An operand as the op takes it: its strides as they are when a cuBLASLt
/// layout expresses them, else a contiguous copy.
fn operand_ready(name: &str, t: &Tensor) -> candle_core::Result<Tensor> {
    match gemm::operand(name, t.dims(), t.stride()).c()? {
        Some(_) => Ok(t.clone()),
        None => t.contiguous(),
    }
}

/// `act(a · b + bias)` through cuBLASLt with a fused epilogue: `a`
/// `(batch.., m, k)`, `b` `(batch.., k, n)` with batch dims broadcast as
/// candle's `broadcast_matmul` does (a broadcast operand is used with batch
/// stride 0 when its batch dims all broadcast, else copied; a contiguous
/// `a` times a 2-d `b`, a linear layer, runs as one `(batch·m, k)` GEMM),
/// `bias` `(n,)` one per output column; f32, f16 or bf16 alike on a CUDA
/// device (f32 accumulation). Transposed operands (candle's `t()`) are
/// used as they are. Returns `(batch.., m, n)`, contiguous. Plans are
/// cached per shape, dtype, epilogue and pointer alignment.
///
/// Backward (candle's `Tensor::backward`): `dA = dZ·Bᵀ`, `dB = Aᵀ·dZ`
/// (cuBLASLt, transposes in the layouts; per batch matrix, summed over
/// broadcast dims by candle as for `broadcast_matmul`), `dbias = Σ dZ`
/// over every dim but the last, with `dZ = dY ⊙ act'(Z)`: ReLU's from the
/// output (0 at 0), GELU's from `Z` recomputed by one GEMM
/// ([`gemm_bwd`](crate::gemm_bwd) says why).
///
/// # Errors
/// A shape, dtype or device that does not fit (a `candle_core::Error::Cuda`
/// holding the typed [`cudnn::Error`] naming the argument); cuBLASLt's.
pub fn matmul_bias_act(
    a: &Tensor,
    b: &Tensor,
    bias: Option<&Tensor>,
    act: MatmulActivation,
) -> candle_core::Result<Tensor> {
    matmul_impl(a, b, bias, act, true)
}

/// `a` and `b` broadcast to their common batch dims (candle's rule), and
/// those dims. Ranks below 2 are refused, typed.
///
/// # Errors
/// Ranks below 2, batch dims that do not broadcast.
pub(crate) fn broadcast_operands(
    a: &Tensor,
    b: &Tensor,
    op: &'static str,
) -> candle_core::Result<(Tensor, Tensor)> {
    let (ra, rb) = (a.rank(), b.rank());
    if ra < 2 || rb < 2 {
        return Err(to_candle(Error::invalid(
            "a, b ranks",
            "must be >= 2 (batch.., rows, cols)",
            format!("{ra}, {rb}"),
        )));
    }
    let batch = candle_core::Shape::from(&a.dims()[..ra - 2])
        .broadcast_shape_binary_op(&candle_core::Shape::from(&b.dims()[..rb - 2]), op)?;
    let full = |t: &Tensor, r: usize| -> candle_core::Result<Tensor> {
        let mut d = batch.dims().to_vec();
        d.extend_from_slice(&t.dims()[r - 2..]);
        if d == t.dims() {
            Ok(t.clone())
        } else {
            t.broadcast_as(d)
        }
    };
    Ok((full(a, ra)?, full(b, rb)?))
}

fn matmul_impl(
    a: &Tensor,
    b: &Tensor,
    bias: Option<&Tensor>,
    act: MatmulActivation,
    track: bool,
) -> candle_core::Result<Tensor> {
    // The types first: nothing is copied for a call that is refused.
    gemm::dtypes(a.dtype(), b.dtype(), bias.map(Tensor::dtype)).c()?;
    let (ra, rb) = (a.rank(), b.rank());
    if ra > 2 && rb == 2 && a.is_contiguous() && a.elem_count() > 0 {
        // A linear layer: (batch.., m, k) x (k, n) is one (batch·m, k) x
        // (k, n) GEMM (and its backward's dB one GEMM, no batch sum).
        let k = a.dim(ra - 1)?;
        let y = matmul_impl(&a.reshape(((), k))?, b, bias, act, track)?;
        let mut d = a.dims()[..ra - 1].to_vec();
        d.push(y.dim(1)?);
        return y.reshape(d);
    }
    let (a, b) = broadcast_operands(a, b, "matmul_bias_act")?;
    let a = operand_ready("a", &a)?;
    let b = operand_ready("b", &b)?;
    let op = MatmulBiasAct { act };
    match (bias, track) {
        (None, true) => a.apply_op2(&b, op),
        (None, false) => a.apply_op2_no_bwd(&b, &op),
        (Some(x), true) => a.apply_op3(&b, &x.contiguous()?, op),
        (Some(x), false) => a.apply_op3_no_bwd(&b, &x.contiguous()?, &op),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bound: a cache below the capacity grows; at it, only a key it
    /// already holds is served without emptying it; the count of plans a
    /// stream of distinct keys leaves never passes the capacity.
    #[test]
    fn gemm_plan_cache_is_bounded() {
        assert!(!must_evict(0, false));
        assert!(!must_evict(GEMM_PLAN_CAPACITY - 1, false));
        assert!(must_evict(GEMM_PLAN_CAPACITY, false));
        assert!(!must_evict(GEMM_PLAN_CAPACITY, true));
        // Every prompt length a new key: simulate the cache's size.
        let mut len = 0usize;
        for _ in 0..5 * GEMM_PLAN_CAPACITY {
            if must_evict(len, false) {
                len = 0;
            }
            len += 1;
            assert!(len <= GEMM_PLAN_CAPACITY);
        }
    }
}
