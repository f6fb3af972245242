//! Layer norm and RMS norm on candle tensors as candle `CustomOp`s, with
//! candle-nn's conventions (`candle_nn::ops::layer_norm` / `rms_norm`:
//! normalize over the last dim, weight and bias `(hidden)` of x's dtype,
//! `eps`). The forward runs cuDNN's norm node in inference mode (nothing
//! saved); the backward (candle's autograd) runs it again in training mode
//! for the mean and inverse std it saves (recomputed: a `CustomOp` cannot
//! return them beside its output), then cuDNN's norm backward, giving the
//! gradients of x, weight and bias in one graph. The weight and bias are
//! passed to cuDNN in f32 (its norm engines take f32 parameters with any
//! x; candle converts them, and their gradients back).
//!
//! Differences from candle-nn: `eps` must be in (0, 1] (cuDNN's range;
//! candle-nn takes any value, 0 and negative included): anything else is
//! refused, typed, naming `eps`.
//!
//! Per-call costs beyond the graph: half-precision weight and bias are
//! converted to f32 on every call (one small kernel each; a cache keyed
//! by tensor would go stale when a `Var` is updated in place); layer norm
//! without bias passes a zero bias, allocated per call (cuDNN's layer
//! norm node takes a bias, and the crate's builder requires one), and its
//! backward computes a bias gradient nobody reads; the backward's
//! statistics pass writes a `y` it throws away (the node's output is
//! required) and, for layer norm, binds a zero bias. Each is one
//! allocation or pass over `hidden` (or, for `y`, over x).

use candle_core::backend::BackendStorage;
use candle_core::{
    CpuStorage, CudaStorage, CustomOp2, CustomOp3, DType as CDType, Layout, Shape, Tensor,
};
use cudnn::Error;

use crate::conv::{for_cudnn, same, view};
use crate::device::{IntoCandle, to_candle};
use crate::exec::count;
use crate::norm_graphs::{self, NormCfg, NormKind, names};
use crate::params::Arg;
use crate::run::{self, Elem, Io};

fn arg<'a>(name: &'a str, l: &'a Layout, dtype: CDType) -> Arg<'a> {
    Arg {
        name,
        dims: l.dims(),
        strides: l.stride(),
        dtype,
    }
}

fn on_cuda(op: &str) -> candle_core::Error {
    to_candle(Error::Unsupported {
        what: format!("{op} on the CPU"),
        needs: Some("tensors on a CUDA device (cudnn-candle runs cuDNN)".to_string()),
    })
}

fn f32_param(s: &CudaStorage, name: &str) -> candle_core::Result<()> {
    if s.dtype() != CDType::F32 {
        return Err(to_candle(Error::mismatch(
            format!("{name} dtype (passed to cuDNN as f32)"),
            "F32",
            format!("{:?}", s.dtype()),
        )));
    }
    Ok(())
}

/// The forward op: `x, weight` (`CustomOp2`, RMS norm without bias) or
/// `x, weight, bias` (`CustomOp3`); weight and bias f32.
#[derive(Clone, Debug)]
struct Norm {
    kind: NormKind,
    eps: f64,
}

impl Norm {
    fn cfg(
        &self,
        (x, xl): (&CudaStorage, &Layout),
        (w, wl): (&CudaStorage, &Layout),
        b: Option<(&CudaStorage, &Layout)>,
    ) -> candle_core::Result<NormCfg> {
        f32_param(w, "weight")?;
        if w.device.id() != x.device.id() {
            return Err(to_candle(Error::mismatch(
                "weight device (x's)",
                format!("{:?}", x.device.id()),
                format!("{:?}", w.device.id()),
            )));
        }
        if let Some((b, _)) = b {
            same(w, b, "bias", "weight")?;
        }
        let ba = b.map(|(b, bl)| arg("bias", bl, b.dtype()));
        norm_graphs::check(
            self.kind,
            &arg("x", xl, x.dtype()),
            &arg("weight", wl, w.dtype()),
            ba.as_ref(),
            self.eps,
        )
        .c()
    }

    fn fwd<T: Elem>(
        &self,
        (x, xl): (&CudaStorage, &Layout),
        (w, wl): (&CudaStorage, &Layout),
        b: Option<(&CudaStorage, &Layout)>,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let cfg = self.cfg((x, xl), (w, wl), b)?;
        let graph = norm_graphs::forward(&cfg, false).c()?;
        let dev = &x.device;
        let n = count(&cfg.x_dims()).c()?;
        let h = count(&[cfg.hidden]).c()?;
        let xv = view::<T>(x, xl, "x", n)?;
        let wv = view::<f32>(w, wl, "weight", h)?;
        let bv = match b {
            Some((b, bl)) => Some(view::<f32>(b, bl, "bias", h)?),
            None => None,
        };
        let mut y = dev.alloc_zeros::<T>(n)?;
        let mut yv = y.as_view_mut();
        let mut ins_f32 = vec![(names::SCALE, &wv)];
        if let Some(bv) = bv.as_ref() {
            ins_f32.push((names::BIAS, bv));
        }
        run::run(
            "norm",
            dev,
            &graph,
            Io {
                ins: vec![(names::X, &xv)],
                ins_f32,
                outs: vec![(names::Y, &mut yv)],
                outs_f32: vec![],
            },
        )?;
        Ok((
            CudaStorage::wrap_cuda_slice(y, dev.clone()),
            xl.shape().clone(),
        ))
    }

    fn dispatch(
        &self,
        x: (&CudaStorage, &Layout),
        w: (&CudaStorage, &Layout),
        b: Option<(&CudaStorage, &Layout)>,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        match x.0.dtype() {
            CDType::F32 => self.fwd::<f32>(x, w, b),
            CDType::F16 => self.fwd::<half::f16>(x, w, b),
            CDType::BF16 => self.fwd::<half::bf16>(x, w, b),
            other => Err(to_candle(Error::invalid(
                "x dtype",
                "must be f32, f16 or bf16 (cuDNN's norm graphs)",
                format!("{other:?}"),
            ))),
        }
    }

    /// dx, dweight, dbias (when `bias`).
    fn grads(
        &self,
        x: &Tensor,
        w: &Tensor,
        dy: &Tensor,
        bias: bool,
    ) -> candle_core::Result<(Tensor, Tensor, Option<Tensor>)> {
        let dy = for_cudnn(dy)?;
        let op = NormBwd {
            fwd: self.clone(),
            bias,
        };
        let flat = x.apply_op3_no_bwd(w, &dy, &op)?;
        let (n, h) = (x.elem_count(), w.elem_count());
        let dx = flat.narrow(0, 0, n)?.reshape(x.shape())?;
        let dw = flat.narrow(0, n, h)?.to_dtype(CDType::F32)?;
        let db = if bias {
            Some(flat.narrow(0, n + h, h)?.to_dtype(CDType::F32)?)
        } else {
            None
        };
        Ok((dx, dw, db))
    }
}

impl CustomOp2 for Norm {
    fn name(&self) -> &'static str {
        "cudnn-rms-norm"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        Err(on_cuda("cudnn_candle::rms_norm"))
    }

    fn cuda_fwd(
        &self,
        x: &CudaStorage,
        xl: &Layout,
        w: &CudaStorage,
        wl: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        self.dispatch((x, xl), (w, wl), None)
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _y: &Tensor,
        dy: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let (dx, dw, _) = self.grads(x, w, dy, false)?;
        Ok((Some(dx), Some(dw)))
    }
}

impl CustomOp3 for Norm {
    fn name(&self) -> &'static str {
        "cudnn-norm"
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
        Err(on_cuda("cudnn_candle::layer_norm / rms_norm"))
    }

    fn cuda_fwd(
        &self,
        x: &CudaStorage,
        xl: &Layout,
        w: &CudaStorage,
        wl: &Layout,
        b: &CudaStorage,
        bl: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        self.dispatch((x, xl), (w, wl), Some((b, bl)))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _b: &Tensor,
        _y: &Tensor,
        dy: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (dx, dw, db) = self.grads(x, w, dy, true)?;
        Ok((Some(dx), Some(dw), db))
    }
}

/// The backward op: `(x, weight, dy)` to `[dx | dweight | dbias]`, flat,
/// in x's type (candle's convention: the parameters have x's type).
#[derive(Clone, Debug)]
struct NormBwd {
    fwd: Norm,
    bias: bool,
}

impl NormBwd {
    fn run<T: Elem>(
        &self,
        (x, xl): (&CudaStorage, &Layout),
        (w, wl): (&CudaStorage, &Layout),
        (dy, dyl): (&CudaStorage, &Layout),
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        same(x, dy, "dy", "x")?;
        if dyl.dims() != xl.dims() {
            return Err(to_candle(Error::mismatch(
                "norm backward: dy dims (x's)",
                format!("{:?}", xl.dims()),
                format!("{:?}", dyl.dims()),
            )));
        }
        crate::conv_graphs::check_contiguous(&arg("dy", dyl, dy.dtype())).c()?;
        let mut cfg = self.fwd.cfg((x, xl), (w, wl), None)?;
        cfg.bias = self.bias;
        // The statistics pass: layer norm's node needs a bias (zeros: the
        // statistics do not depend on it); RMS norm's none.
        let stats_cfg = NormCfg {
            bias: cfg.kind == NormKind::Layer,
            ..cfg.clone()
        };
        let dev = &x.device;
        let n = count(&cfg.x_dims()).c()?;
        let h = count(&[cfg.hidden]).c()?;
        let r = count(&[cfg.rows]).c()?;
        let xv = view::<T>(x, xl, "x", n)?;
        let wv = view::<f32>(w, wl, "weight", h)?;
        let dyv = view::<T>(dy, dyl, "dy", n)?;
        let zero_bias = dev.alloc_zeros::<f32>(h)?;
        let zbv = zero_bias.as_view();
        let mut mean = dev.alloc_zeros::<f32>(r)?;
        let mut inv = dev.alloc_zeros::<f32>(r)?;
        {
            let mut y = dev.alloc_zeros::<T>(n)?;
            let mut yv = y.as_view_mut();
            let mut mv = mean.as_view_mut();
            let mut iv = inv.as_view_mut();
            let mut ins_f32 = vec![(names::SCALE, &wv)];
            if stats_cfg.bias {
                ins_f32.push((names::BIAS, &zbv));
            }
            let mut outs_f32 = vec![(names::INV_VARIANCE, &mut iv)];
            if cfg.kind == NormKind::Layer {
                outs_f32.push((names::MEAN, &mut mv));
            }
            run::run(
                "norm backward",
                dev,
                &norm_graphs::forward(&stats_cfg, true).c()?,
                Io {
                    ins: vec![(names::X, &xv)],
                    ins_f32,
                    outs: vec![(names::Y, &mut yv)],
                    outs_f32,
                },
            )?;
        }
        let parts = if self.bias { 2 } else { 1 };
        let total = h
            .checked_mul(parts)
            .and_then(|p| p.checked_add(n))
            .ok_or_else(|| to_candle(Error::invalid("norm backward size", "must fit usize", n)))?;
        let mut flat = dev.alloc_zeros::<T>(total)?;
        let mut dscale = dev.alloc_zeros::<f32>(h)?;
        let mut dbias = dev.alloc_zeros::<f32>(h)?;
        {
            let (mut dxv, _) = flat.split_at_mut(n);
            let (mv, iv) = (mean.as_view(), inv.as_view());
            let mut dsv = dscale.as_view_mut();
            let mut dbv = dbias.as_view_mut();
            let mut ins_f32 = vec![(names::SCALE, &wv), (names::INV_VARIANCE, &iv)];
            if cfg.kind == NormKind::Layer {
                ins_f32.push((names::MEAN, &mv));
            }
            let mut outs_f32 = vec![(names::DSCALE, &mut dsv)];
            if self.bias {
                outs_f32.push((names::DBIAS, &mut dbv));
            }
            run::run(
                "norm backward",
                dev,
                &norm_graphs::backward(&cfg).c()?,
                Io {
                    ins: vec![(names::DY, &dyv), (names::X, &xv)],
                    ins_f32,
                    outs: vec![(names::DX, &mut dxv)],
                    outs_f32,
                },
            )?;
        }
        // The parameter gradients in x's type, after dx (on candle's
        // stream, after the graph).
        let grads = if self.bias {
            vec![dscale, dbias]
        } else {
            vec![dscale]
        };
        let stream = dev.cuda_stream();
        for (i, g) in grads.into_iter().enumerate() {
            let conv = CudaStorage::wrap_cuda_slice(g, dev.clone())
                .to_dtype(&Layout::contiguous(h), x.dtype())?;
            let src = conv.as_cuda_slice::<T>()?;
            let at = n + i * h;
            let mut dst = flat.try_slice_mut(at..at + h).ok_or_else(|| {
                to_candle(Error::invalid(
                    "norm backward offset",
                    "inside the output",
                    at,
                ))
            })?;
            stream
                .memcpy_dtod(src, &mut dst)
                .map_err(|e| to_candle(cudnn::interop::driver_error("cuMemcpyDtoDAsync", e)))?;
        }
        Ok((
            CudaStorage::wrap_cuda_slice(flat, dev.clone()),
            Shape::from(total),
        ))
    }
}

impl CustomOp3 for NormBwd {
    fn name(&self) -> &'static str {
        "cudnn-norm-bwd"
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
        Err(on_cuda("cudnn_candle norm backward"))
    }

    fn cuda_fwd(
        &self,
        x: &CudaStorage,
        xl: &Layout,
        w: &CudaStorage,
        wl: &Layout,
        dy: &CudaStorage,
        dyl: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        match x.dtype() {
            CDType::F32 => self.run::<f32>((x, xl), (w, wl), (dy, dyl)),
            CDType::F16 => self.run::<half::f16>((x, xl), (w, wl), (dy, dyl)),
            CDType::BF16 => self.run::<half::bf16>((x, xl), (w, wl), (dy, dyl)),
            other => Err(to_candle(Error::invalid(
                "x dtype",
                "must be f32, f16 or bf16 (cuDNN's norm graphs)",
                format!("{other:?}"),
            ))),
        }
    }
}

/// The parameters in f32 after checking candle's convention: x's dtype.
fn param(p: &Tensor, name: &str, x: &Tensor) -> candle_core::Result<Tensor> {
    if p.dtype() != x.dtype() {
        return Err(to_candle(Error::mismatch(
            format!("{name} dtype (x's, candle-nn's convention)"),
            format!("{:?}", x.dtype()),
            format!("{:?}", p.dtype()),
        )));
    }
    crate::precheck::prepared();
    for_cudnn(&p.to_dtype(CDType::F32)?)
}

/// candle-nn's `ops::layer_norm(x, weight, bias, eps)` through cuDNN:
/// normalize over the last dim, `weight` and `bias` `(hidden)` of x's
/// dtype (f32, f16 or bf16); `bias` optional (none adds nothing);
/// differentiable in x, weight and bias.
///
/// `eps` must be in (0, 1] (cuDNN's range), where candle-nn's takes any.
///
/// # Errors
/// Shapes, dtypes or eps (cuDNN's range (0, 1]) that do not fit (typed,
/// naming the argument), CPU tensors, planning, execution.
pub fn layer_norm(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    eps: f32,
) -> candle_core::Result<Tensor> {
    crate::precheck::norm_inputs(x, weight, bias)?;
    let op = Norm {
        kind: NormKind::Layer,
        eps: f64::from(eps),
    };
    let w = param(weight, "weight", x)?;
    let b = match bias {
        Some(b) => param(b, "bias", x)?,
        None => Tensor::zeros(w.shape(), CDType::F32, w.device())?,
    };
    for_cudnn(x)?.apply_op3(&w, &b, op)
}

/// candle-nn's `ops::rms_norm(x, weight, eps)` through cuDNN (with an
/// optional bias added after the scale): normalize over the last dim,
/// differentiable in x, weight (and bias).
///
/// `eps` must be in (0, 1] (cuDNN's range), where candle-nn's takes any.
///
/// # Errors
/// As [`layer_norm`].
pub fn rms_norm(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    eps: f32,
) -> candle_core::Result<Tensor> {
    crate::precheck::norm_inputs(x, weight, bias)?;
    let op = Norm {
        kind: NormKind::Rms,
        eps: f64::from(eps),
    };
    let w = param(weight, "weight", x)?;
    let x = for_cudnn(x)?;
    match bias {
        Some(b) => x.apply_op3(&w, &param(b, "bias", &x)?, op),
        None => x.apply_op2(&w, op),
    }
}
