//! FP8 scaled GEMM on candle tensors ([`fp8_matmul`]): candle's `F8E4M3`
//! operands with per-tensor f32 scales, through `cudnn::blas`'s
//! [`Fp8MatmulPlan`] (cuBLASLt) on candle's stream, candle's memory lent
//! through `cudnn::interop`. Forward only.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::{CudaDType, CudaStorageSlice};
use candle_core::{CpuStorage, CudaStorage, CustomOp2, DType as CDType, Layout, Shape, Tensor};
use cudarc::driver::{CudaSlice, CudaView, DeviceRepr, ValidAsZeroBits};
use cudnn::blas::{Fp8Bias, Fp8MatmulPlan, Fp8MatmulSpec, Fp8Output, Fp8Scaling, LtHandle};
use cudnn::runtime::{Device, DeviceSlice};
use cudnn::{Error, F8E4M3};

use crate::attn::{arg, on_cuda, same_device};
use crate::device::{IntoCandle, to_candle, with_lt};
use crate::gemm::{GEMM_PLAN_CAPACITY, broadcast_operands};
use crate::params::fp8;
use crate::params::gemm::MatmulActivation;
use crate::side::f32_view;

/// The plans of one output type, by device, spec and workspace limit.
type PlanMap<D, B> = HashMap<(Device, Fp8MatmulSpec, usize), Arc<Plan<D, B>>>;
type Plans<D, B> = Mutex<PlanMap<D, B>>;
type Plan<D, B> = Fp8MatmulPlan<F8E4M3, F8E4M3, D, B>;

/// The output types: f32 (bf16 bias), f16 (f16 bias), bf16 (bf16 bias).
trait Fp8Out:
    Fp8Output + DeviceRepr + ValidAsZeroBits + CudaDType + Copy + Send + Sync + 'static
{
    /// The bias type (cuBLASLt's FP8 table).
    type B: Fp8Bias + DeviceRepr + CudaDType + Send + Sync + 'static;
    /// The process-wide plans of this output type.
    fn plans() -> &'static Plans<Self, Self::B>;
}

macro_rules! out {
    ($t:ty, $b:ty) => {
        impl Fp8Out for $t {
            type B = $b;
            fn plans() -> &'static Plans<Self, $b> {
                static P: OnceLock<Plans<$t, $b>> = OnceLock::new();
                P.get_or_init(|| Mutex::new(HashMap::new()))
            }
        }
    };
}
out!(f32, half::bf16);
out!(half::f16, half::f16);
out!(half::bf16, half::bf16);

fn lock<D: Fp8Out>() -> std::sync::MutexGuard<'static, PlanMap<D, D::B>> {
    // Nothing is left half-inserted by a panic (an entry goes in whole).
    D::plans().lock().unwrap_or_else(|p| p.into_inner())
}

/// Drop the cached FP8 plans (of every output type).
pub(crate) fn clear_plans() {
    lock::<f32>().clear();
    lock::<half::f16>().clear();
    lock::<half::bf16>().clear();
}

/// How many FP8 plans are cached, every output type together.
pub(crate) fn plan_count() -> usize {
    lock::<f32>().len() + lock::<half::f16>().len() + lock::<half::bf16>().len()
}

/// The cached plan of `spec` for `lt` (built on first use; at
/// [`GEMM_PLAN_CAPACITY`] plans a new key empties the cache first).
fn plan<D: Fp8Out>(lt: &LtHandle, spec: &Fp8MatmulSpec) -> cudnn::Result<Arc<Plan<D, D::B>>> {
    let key = (lt.device(), *spec, lt.workspace_size());
    let mut m = lock::<D>();
    if let Some(p) = m.get(&key) {
        return Ok(p.clone());
    }
    if m.len() >= GEMM_PLAN_CAPACITY {
        m.clear();
    }
    let p = Arc::new(Plan::<D, D::B>::new(lt, spec)?);
    m.insert(key, p.clone());
    Ok(p)
}

/// The bytes of an `F8E4M3` operand from its start offset.
fn fp8_bytes<'a>(
    s: &'a CudaStorage,
    l: &Layout,
    name: &str,
) -> candle_core::Result<CudaView<'a, u8>> {
    let CudaStorageSlice::F8E4M3(slice) = &s.slice else {
        return Err(to_candle(Error::invalid(
            format!("{name} dtype"),
            "must be F8E4M3",
            format!("{:?}", s.dtype()),
        )));
    };
    let outside = || {
        to_candle(Error::invalid(
            format!("{name} start offset"),
            format!("must be inside its buffer of {} elements", slice.len()),
            l.start_offset(),
        ))
    };
    let v = slice.try_slice(l.start_offset()..).ok_or_else(outside)?;
    let n = v.len();
    // SAFETY: an F8E4M3 is one byte (candle's `float8::F8E4M3`, cuDNN's
    // `F8E4M3` and `__nv_fp8_e4m3` alike) and every byte is a valid `u8`:
    // the view covers the same `n` bytes, with the slice's events.
    unsafe { v.transmute::<u8>(n) }.ok_or_else(outside)
}

/// The bias's view of type `B`.
fn typed<'a, B: CudaDType + DeviceRepr>(
    s: &'a CudaStorage,
    l: &Layout,
    name: &str,
) -> candle_core::Result<CudaView<'a, B>> {
    let slice: &CudaSlice<B> = s.as_cuda_slice::<B>()?;
    slice.try_slice(l.start_offset()..).ok_or_else(|| {
        to_candle(Error::invalid(
            format!("{name} start offset"),
            format!("must be inside its buffer of {} elements", slice.len()),
            l.start_offset(),
        ))
    })
}

/// An FP8 view of borrowed bytes, on their device.
///
/// # Safety
/// `bytes` is valid for reads for as long as the returned view is used
/// (the caller keeps the guard it came from alive across the enqueue).
///
/// # Errors
/// A view that does not know its device (typed, naming `name`): the views
/// of `CudarcRead` always do, so this is never expected, and a view
/// without one would skip `Fp8MatmulPlan::run`'s device check.
unsafe fn as_fp8<'a>(
    bytes: DeviceSlice<'a, u8>,
    name: &str,
) -> cudnn::Result<DeviceSlice<'a, F8E4M3>> {
    let ptr = bytes.as_ptr().cast::<F8E4M3>();
    let Some(d) = bytes.device() else {
        return Err(Error::invalid(
            name,
            "must be a device view that knows its device (candle's stream's)",
            "a view without a device",
        ));
    };
    // SAFETY: `F8E4M3` is `repr(transparent)` over a byte (one byte,
    // alignment 1, every value valid); the memory is `bytes`' own, on
    // its device `d`, valid for `'a` (the caller's contract).
    Ok(unsafe { DeviceSlice::from_raw_parts_on(ptr, bytes.len(), d) })
}

#[derive(Clone, Debug)]
struct Fp8Matmul {
    scale_a: Tensor,
    scale_b: Tensor,
    bias: Option<Tensor>,
    act: MatmulActivation,
    out: CDType,
}

impl Fp8Matmul {
    fn run<D: Fp8Out>(
        &self,
        (a, al): (&CudaStorage, &Layout),
        (b, bl): (&CudaStorage, &Layout),
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        same_device(a, b, "b")?;
        let (sa_st, sa_l) = self.scale_a.storage_and_layout();
        let (sb_st, sb_l) = self.scale_b.storage_and_layout();
        let gx = self.bias.as_ref().map(|t| t.storage_and_layout());
        fp8::scale(&arg("scale_a", sa_l, self.scale_a.dtype())).c()?;
        fp8::scale(&arg("scale_b", sb_l, self.scale_b.dtype())).c()?;
        let bias_arg = match (&gx, &self.bias) {
            (Some((_, l)), Some(t)) => Some(arg("bias", l, t.dtype())),
            _ => None,
        };
        let g = fp8::fp8_gemm(
            &arg("a", al, a.dtype()),
            &arg("b", bl, b.dtype()),
            bias_arg.as_ref(),
            self.act,
            self.out,
        )
        .c()?;
        fp8::start_offset("a", al.start_offset(), 1).c()?;
        fp8::start_offset("b", bl.start_offset(), 1).c()?;
        if let Some((_, l)) = &gx {
            fp8::start_offset("bias", l.start_offset(), 2).c()?;
        }
        let sa = f32_view(&sa_st, sa_l, a, "scale_a")?;
        let sb = f32_view(&sb_st, sb_l, a, "scale_b")?;
        let xv = match &gx {
            Some((st, l)) => {
                let candle_core::Storage::Cuda(x) = &**st else {
                    return Err(on_cuda("cudnn_candle::fp8_matmul (bias)"));
                };
                same_device(a, x, "bias")?;
                Some(typed::<D::B>(x, l, "bias")?)
            }
            None => None,
        };
        let dev = &a.device;
        let n_out = g.spec.layouts().2.required_len().ok_or_else(|| {
            to_candle(Error::invalid(
                "output size",
                "must fit usize",
                format!("{:?}", g.out_dims),
            ))
        })?;
        let av = fp8_bytes(a, al, "a")?;
        let bv = fp8_bytes(b, bl, "b")?;
        let mut d = dev.alloc_zeros::<D>(n_out)?;
        with_lt(dev, |cs, lt| {
            if cs.capture_status().c()? != cudnn::runtime::CaptureStatus::None {
                return Err(to_candle(Error::Unsupported {
                    what: "cudnn-candle fp8_matmul while candle's stream is capturing".to_string(),
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
            // SAFETY: as above.
            let (sar, sbr) = unsafe { (cs.read(&sa), cs.read(&sb)) };
            let (sar, sbr) = (sar.c()?, sbr.c()?);
            let xr = match &xv {
                // SAFETY: as above.
                Some(x) => Some(unsafe { cs.read(x) }.c()?),
                None => None,
            };
            // SAFETY: as above.
            let mut dw = unsafe { cs.write(&mut d) }.c()?;
            // SAFETY: the byte views live in `ar` / `br`, alive until the
            // end of this closure, after the enqueue that uses them.
            let (a8, b8) = unsafe { (as_fp8(ar.view(), "a"), as_fp8(br.view(), "b")) };
            let (a8, b8) = (a8.c()?, b8.c()?);
            let mut addrs = vec![
                ("a", a8.as_raw() as usize),
                ("b", b8.as_raw() as usize),
                ("d", dw.view().as_raw() as usize),
            ];
            if let Some(x) = &xr {
                addrs.push(("bias", x.view().as_raw() as usize));
            }
            // The start offsets were checked in 16 bytes; cudarc's buffers
            // are 256-byte aligned. A pointer that is not is refused, typed.
            if let Some((name, addr)) = addrs.iter().find(|(_, p)| p % 16 != 0) {
                return Err(to_candle(Error::invalid(
                    *name,
                    "device address must be 16-byte aligned for an FP8 matmul",
                    format!("{addr:#x}"),
                )));
            }
            let al = addrs
                .iter()
                .map(|(_, p)| {
                    if *p == 0 {
                        256
                    } else {
                        1usize << p.trailing_zeros().min(8)
                    }
                })
                .min()
                .unwrap_or(256);
            let spec = g.spec.with_alignment(al);
            let plan = plan::<D>(lt, &spec).c()?;
            let scaling = Fp8Scaling::default().with_a(sar.view()).with_b(sbr.view());
            plan.run(
                lt,
                1.0,
                a8,
                b8,
                0.0,
                dw.view_mut(),
                scaling,
                xr.as_ref().map(|x| x.view()),
            )
            .c()
        })?;
        Ok((
            CudaStorage::wrap_cuda_slice(d, dev.clone()),
            Shape::from(g.out_dims),
        ))
    }
}

impl CustomOp2 for Fp8Matmul {
    fn name(&self) -> &'static str {
        "cudnn-fp8-matmul"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        Err(on_cuda("cudnn_candle::fp8_matmul"))
    }

    fn cuda_fwd(
        &self,
        a: &CudaStorage,
        al: &Layout,
        b: &CudaStorage,
        bl: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        match self.out {
            CDType::F32 => self.run::<f32>((a, al), (b, bl)),
            CDType::F16 => self.run::<half::f16>((a, al), (b, bl)),
            CDType::BF16 => self.run::<half::bf16>((a, al), (b, bl)),
            other => Err(to_candle(fp8::out_type(other).err().unwrap_or_else(|| {
                Error::invalid(
                    "out_dtype",
                    "must be f32, f16 or bf16",
                    format!("{other:?}"),
                )
            }))),
        }
    }
}

/// No argument tracks a gradient (candle's `track_op`: a `Var` or an op's
/// result on one): this op has no backward, and candle's rule for an op
/// without one is an error, not a missing gradient (`CustomOp2::bwd`'s
/// default is `BackwardNotSupported`). Checked on the caller's tensors,
/// before any view or broadcast of them.
fn untracked(
    a: &Tensor,
    b: &Tensor,
    scale_a: &Tensor,
    scale_b: &Tensor,
    bias: Option<&Tensor>,
) -> cudnn::Result<()> {
    let all = [("a", Some(a)), ("b", Some(b))]
        .into_iter()
        .chain([("scale_a", Some(scale_a)), ("scale_b", Some(scale_b))])
        .chain([("bias", bias)]);
    for (name, t) in all {
        if t.is_some_and(Tensor::track_op) {
            return Err(Error::invalid(
                name,
                "must not track a gradient: fp8_matmul has no backward (candle has no FP8 gradients), so its gradient would be missing; pass it detached (t.detach())",
                "a tensor that tracks a gradient (a Var, or an op's result on one)",
            ));
        }
    }
    Ok(())
}

/// Every check of a call on the tensors' layouts (no device): what
/// `cuda_fwd` checks again on the storages it is given.
fn check(
    a: &Tensor,
    b: &Tensor,
    scale_a: &Tensor,
    scale_b: &Tensor,
    bias: Option<&Tensor>,
    act: MatmulActivation,
    out: CDType,
) -> cudnn::Result<()> {
    fp8::scale(&arg("scale_a", scale_a.layout(), scale_a.dtype()))?;
    fp8::scale(&arg("scale_b", scale_b.layout(), scale_b.dtype()))?;
    let x = bias.map(|t| arg("bias", t.layout(), t.dtype()));
    fp8::fp8_gemm(
        &arg("a", a.layout(), a.dtype()),
        &arg("b", b.layout(), b.dtype()),
        x.as_ref(),
        act,
        out,
    )?;
    fp8::start_offset("a", a.layout().start_offset(), 1)?;
    fp8::start_offset("b", b.layout().start_offset(), 1)?;
    if let Some(t) = bias {
        fp8::start_offset("bias", t.layout().start_offset(), 2)?;
    }
    Ok(())
}

/// `act(scale_a · scale_b · (a · b) + bias)` with FP8 operands, through
/// cuBLASLt (PyTorch's `torch._scaled_mm`, mistral.rs's
/// `fused_batch_matmul_f8`): `a` `(batch.., m, k)` and `b` `(batch.., k,
/// n)` of candle's `DType::F8E4M3` (batch dims broadcast as candle's
/// `broadcast_matmul`; a contiguous `a` times a 2-d `b` runs as one
/// `(batch·m, k)` GEMM), `scale_a` / `scale_b` f32 tensors of one element
/// on the device (the dequantization scales: `a`'s real value is
/// `scale_a · a`; read by cuBLASLt on the device, no host sync), `bias`
/// `(n,)` (bf16 for a bf16 output, f16 for an f16 one: cuBLASLt's FP8
/// table; none with an f32 output, which PyTorch's `_scaled_mm` refuses
/// too, see [`params::fp8::fp8_gemm`](crate::params::fp8::fp8_gemm)),
/// `out_dtype` f32, f16 or bf16; f32 accumulation. Returns `(batch.., m,
/// n)`, contiguous.
///
/// Forward only: candle has no FP8 gradients, so an argument that tracks
/// a gradient (a `Var`, or the result of an op on one) is refused, typed,
/// naming it, rather than its gradient silently missing from
/// `backward()`: pass `t.detach()` for inference.
///
/// cuBLASLt's FP8 rules on Hopper, checked before anything reaches the
/// GPU (typed errors naming the argument): `a` with its last dim (k)
/// contiguous and `b` with its row dim (k) contiguous, i.e. `b = w.t()`
/// for a contiguous `(n, k)` weight ("TN"); `k` and `n` multiples of 16;
/// row strides, batch strides and start offsets multiples of 16 bytes.
/// Nothing is copied to satisfy them.
///
/// Candle 0.11.1's CUDA backend cannot make `F8E4M3` tensors itself: its
/// casts to and from `F8E4M3` and its strided `F8E4M3` copy (`contiguous`
/// of a view) ask for kernels under names its kernel library does not
/// have (`cast_f32_f8e4m3` for `cast_f32_f8_e4m3`), failing with
/// `CUDA_ERROR_NOT_FOUND`. Quantize on the CPU (or with your own kernel)
/// and copy the bytes over, as below; this function itself runs no candle
/// kernel on its `F8E4M3` operands (views only, no copy).
///
/// ```no_run
/// # fn main() -> candle_core::Result<()> {
/// use candle_core::{DType, Device, Tensor};
/// use cudnn_candle::MatmulActivation;
/// let dev = Device::new_cuda(0)?;
/// let x = Tensor::randn(0f32, 1.0, (32, 64), &Device::Cpu)?;
/// let w = Tensor::randn(0f32, 1.0, (128, 64), &Device::Cpu)?; // (out, in), candle's Linear
/// // Per-tensor scales: quantize x / sx, w / sw (on the CPU: see above);
/// // the GEMM multiplies back.
/// let (sx, sw) = (0.02f32, 0.01f32);
/// let x8 = (x / f64::from(sx))?.to_dtype(DType::F8E4M3)?.to_device(&dev)?;
/// let w8 = (w / f64::from(sw))?.to_dtype(DType::F8E4M3)?.to_device(&dev)?;
/// let (sx, sw) = (Tensor::new(sx, &dev)?, Tensor::new(sw, &dev)?);
/// let y = cudnn_candle::fp8_matmul(&x8, &w8.t()?, &sx, &sw, None, MatmulActivation::None, DType::BF16)?;
/// assert_eq!(y.dims(), &[32, 128]);
/// # Ok(()) }
/// ```
///
/// # Errors
/// A shape, dtype, layout, offset or device that does not fit, or an
/// argument that tracks a gradient (a `candle_core::Error::Cuda` holding
/// the typed [`cudnn::Error`] naming the argument); a device without FP8 (before Ada / Hopper), typed
/// `Unsupported`; cuBLASLt's.
#[doc(alias = "scaled_mm")]
#[doc(alias = "_scaled_mm")]
#[doc(alias = "fused_batch_matmul_f8")]
pub fn fp8_matmul(
    a: &Tensor,
    b: &Tensor,
    scale_a: &Tensor,
    scale_b: &Tensor,
    bias: Option<&Tensor>,
    act: MatmulActivation,
    out_dtype: CDType,
) -> candle_core::Result<Tensor> {
    fp8::out_type(out_dtype).c()?;
    untracked(a, b, scale_a, scale_b, bias).c()?;
    let (ra, rb) = (a.rank(), b.rank());
    if ra > 2 && rb == 2 && a.is_contiguous() && a.elem_count() > 0 {
        let k = a.dim(ra - 1)?;
        let y = fp8_matmul(
            &a.reshape(((), k))?,
            b,
            scale_a,
            scale_b,
            bias,
            act,
            out_dtype,
        )?;
        let mut d = a.dims()[..ra - 1].to_vec();
        d.push(y.dim(1)?);
        return y.reshape(d);
    }
    let (a, b) = broadcast_operands(a, b, "fp8_matmul")?;
    check(&a, &b, scale_a, scale_b, bias, act, out_dtype).c()?;
    let op = Fp8Matmul {
        scale_a: scale_a.detach(),
        scale_b: scale_b.detach(),
        bias: bias.map(Tensor::detach),
        act,
        out: out_dtype,
    };
    a.detach().apply_op2_no_bwd(&b.detach(), &op)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A view that records no device is refused, typed, naming the
    /// operand: cast to FP8 without one, `Fp8MatmulPlan::run` could not
    /// check the memory's device (the views of `CudarcRead` record it).
    #[test]
    fn an_fp8_view_needs_its_device() {
        // SAFETY: a null pointer with length 0 is an allowed empty view
        // (`from_raw_parts`' contract); it is never dereferenced.
        let bytes = unsafe { DeviceSlice::<u8>::from_raw_parts(std::ptr::null(), 0) };
        assert!(bytes.device().is_none());
        // SAFETY: as above: the view is only checked, never used.
        match unsafe { as_fp8(bytes, "a") } {
            Err(Error::InvalidArgument { arg, .. }) => assert_eq!(arg, "a"),
            other => panic!("{other:?}"),
        }
    }
}
