//! `conv2d` on candle tensors as candle `CustomOp`s: the forward runs one
//! cuDNN graph (convolution, bias and, where cuDNN fuses it on candle's
//! NCHW layout, ReLU), the backward (candle's autograd) the data-gradient
//! and filter-gradient graphs, the bias gradient a sum over `(N, H, W)`.
//!
//! Fusion: for NCHW tensors (candle's layout) cuDNN's engines on Hopper
//! take convolution alone, convolution + bias, and convolution + bias +
//! ReLU (planned for an H200 in the host tests); GELU, SiLU and a ReLU
//! without bias have no engine there (runtime fusion wants NHWC, where it
//! fuses all of them in f16 / bf16: a transpose of x and w to get there
//! costs more traffic than the activation's own pass over y), so they
//! run as candle's own ops on the result, and candle's autograd
//! differentiates them. A ReLU without bias, or one whose fused graph
//! does not plan on the device (no engine: remembered per shape), runs
//! as candle's ReLU kernel after the graph, inside the same op. Either
//! way its backward keeps the output: the gradient passes where `y > 0`
//! (where `conv + bias > 0`: PyTorch's rule; candle's `relu` also passes
//! it at exactly 0); nothing is recomputed.

use candle_core::backend::BackendStorage;
use candle_core::{
    CpuStorage, CudaStorage, CustomOp2, CustomOp3, DType as CDType, Layout, Shape, Tensor,
};
use cudarc::driver::{CudaSlice, CudaView};
use cudnn::Error;

use crate::conv_graphs::{self, Activation, Conv2dParams, ConvCfg, names};
use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

use cudnn::graph::Graph;

use crate::device::{self, IntoCandle, to_candle, with_handle};
use crate::exec::count;
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

/// Whether a buffer starting `offset` elements of `elem_size` bytes into
/// a fresh allocation meets cuDNN's binding rule
/// ([`cudnn::graph::BYTE_ALIGNMENT`]); `false` when the byte count overflows.
pub(crate) fn offset_aligned(offset: usize, elem_size: usize) -> bool {
    offset
        .checked_mul(elem_size)
        .is_some_and(|b| b % cudnn::graph::BYTE_ALIGNMENT == 0)
}

/// `t` as cuDNN can bind it: contiguous, its start offset a multiple of
/// 16 bytes. candle's views (`narrow` on the first dim, `chunk`) keep a
/// contiguous layout at any offset; those are copied to a fresh buffer
/// (one copy, as `.contiguous()` makes for strided views).
pub(crate) fn for_cudnn(t: &Tensor) -> candle_core::Result<Tensor> {
    crate::precheck::prepared();
    let t = t.contiguous()?;
    if offset_aligned(t.layout().start_offset(), t.dtype().size_in_bytes()) {
        Ok(t)
    } else {
        t.force_contiguous()
    }
}

/// The convolutions (device ordinal, checked call) whose fused graph did
/// not plan: planned without the activation from then on.
fn unfusable() -> std::sync::MutexGuard<'static, HashSet<(usize, String)>> {
    static SET: OnceLock<Mutex<HashSet<(usize, String)>>> = OnceLock::new();
    SET.get_or_init(|| Mutex::new(HashSet::new()))
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// The forward graph of `cfg` and whether a ReLU is left to apply after
/// it. A ReLU runs in the graph where cuDNN fuses it ([`fuses`]) and
/// `plan` (the device's planning) succeeds; where `fuses` says no, or
/// planning is refused (`Unsupported`: no engine; `Cudnn`: cuDNN's own
/// refusal), the graph without it runs and the ReLU after it. Other
/// activations never reach here (candle ops after the graph).
///
/// # Errors
/// Building the graph; a planning error other than a refusal.
pub(crate) fn forward_graph(
    cfg: &ConvCfg,
    plan: impl FnOnce(&Graph) -> cudnn::Result<()>,
) -> cudnn::Result<(Graph, bool)> {
    let plain = || {
        conv_graphs::forward(&ConvCfg {
            activation: Activation::None,
            ..cfg.clone()
        })
    };
    match cfg.activation {
        Activation::None => Ok((conv_graphs::forward(cfg)?, false)),
        Activation::Relu if !fuses(Activation::Relu, cfg.bias) => Ok((plain()?, true)),
        Activation::Relu => {
            let fused = conv_graphs::forward(cfg)?;
            match plan(&fused) {
                Ok(()) => Ok((fused, false)),
                Err(Error::Unsupported { .. } | Error::Cudnn { .. }) => Ok((plain()?, true)),
                Err(e) => Err(e),
            }
        }
        other => Err(Error::invalid(
            "conv2d graph activation",
            "must be None or Relu (the others run as candle ops)",
            format!("{other:?}"),
        )),
    }
}

/// The view of `s` from `l`'s start offset, `n` elements.
pub(crate) fn view<'a, T: Elem>(
    s: &'a CudaStorage,
    l: &Layout,
    name: &str,
    n: usize,
) -> candle_core::Result<CudaView<'a, T>> {
    let slice: &CudaSlice<T> = s.as_cuda_slice::<T>()?;
    let end = l.start_offset().checked_add(n);
    end.and_then(|e| slice.try_slice(l.start_offset()..e))
        .ok_or_else(|| {
            to_candle(Error::invalid(
                format!("{name} start offset + elements"),
                format!("must be inside its buffer of {} elements", slice.len()),
                format!("{} + {n}", l.start_offset()),
            ))
        })
}

pub(crate) fn same(
    a: &CudaStorage,
    b: &CudaStorage,
    name: &str,
    of: &str,
) -> candle_core::Result<()> {
    if a.device.id() != b.device.id() {
        return Err(to_candle(Error::mismatch(
            format!("{name} device ({of}'s)"),
            format!("{:?}", a.device.id()),
            format!("{:?}", b.device.id()),
        )));
    }
    if a.dtype() != b.dtype() {
        return Err(to_candle(Error::mismatch(
            format!("{name} dtype ({of}'s)"),
            format!("{:?}", a.dtype()),
            format!("{:?}", b.dtype()),
        )));
    }
    Ok(())
}

fn dims_usize(d: [i64; 4]) -> candle_core::Result<Vec<usize>> {
    d.iter()
        .map(|&v| {
            usize::try_from(v).map_err(|_| to_candle(Error::invalid("dim", "must be >= 0", v)))
        })
        .collect()
}

/// The forward op: `x, w` (`CustomOp2`) or `x, w, bias` (`CustomOp3`).
#[derive(Clone, Debug)]
struct Conv2d {
    p: Conv2dParams,
}

impl Conv2d {
    fn fwd<T: Elem>(
        &self,
        (x, xl): (&CudaStorage, &Layout),
        (w, wl): (&CudaStorage, &Layout),
        b: Option<(&CudaStorage, &Layout)>,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        same(x, w, "w", "x")?;
        if let Some((b, _)) = b {
            same(x, b, "bias", "x")?;
        }
        let ba = b.map(|(b, bl)| arg("bias", bl, b.dtype()));
        let cfg = conv_graphs::conv2d(
            &arg("x", xl, x.dtype()),
            &arg("w", wl, w.dtype()),
            ba.as_ref(),
            &self.p,
        )
        .c()?;
        let dev = &x.device;
        let (graph, post_relu) = with_handle(dev, |_, _, ordinal| {
            forward_graph(&cfg, |g| {
                let key = (ordinal, format!("{cfg:?}"));
                if unfusable().contains(&key) {
                    return Err(Error::Unsupported {
                        what: "this fused convolution (planning failed before)".to_string(),
                        needs: None,
                    });
                }
                let r = device::plan(ordinal, g).map(|_| ());
                if matches!(r, Err(Error::Unsupported { .. } | Error::Cudnn { .. })) {
                    unfusable().insert(key);
                }
                r
            })
            .c()
        })?;
        let xv = view::<T>(x, xl, "x", count(&cfg.x).c()?)?;
        let wv = view::<T>(w, wl, "w", count(&cfg.w).c()?)?;
        let bv = match b {
            Some((b, bl)) => Some(view::<T>(b, bl, "bias", count(&[cfg.w[0]]).c()?)?),
            None => None,
        };
        let mut y = dev.alloc_zeros::<T>(count(&cfg.y).c()?)?;
        let mut yv = y.as_view_mut();
        let mut ins = vec![(names::X, &xv), (names::W, &wv)];
        if let Some(bv) = bv.as_ref() {
            ins.push((names::B, bv));
        }
        run::run(
            "conv2d",
            dev,
            &graph,
            Io {
                ins,
                ins_f32: vec![],
                outs: vec![(names::Y, &mut yv)],
                outs_f32: vec![],
            },
        )?;
        let shape = Shape::from(dims_usize(cfg.y)?);
        let y = CudaStorage::wrap_cuda_slice(y, dev.clone());
        if post_relu {
            // candle's own ReLU kernel on the result (a graph without the
            // activation ran); the gradient rule stays the fused one
            // (`grads`: where y > 0).
            let y = y.unary_impl::<candle_core::op::Relu>(&Layout::contiguous(shape.clone()))?;
            return Ok((y, shape));
        }
        Ok((y, shape))
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
                "must be f32, f16 or bf16 (cuDNN's convolution graphs)",
                format!("{other:?}"),
            ))),
        }
    }

    /// dx, dw and the gradient of `conv + bias` (for dbias).
    fn grads(
        &self,
        x: &Tensor,
        w: &Tensor,
        y: &Tensor,
        dy: &Tensor,
    ) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
        let dz = match self.p.activation {
            Activation::Relu => (dy * y.gt(0.0)?.to_dtype(dy.dtype())?)?,
            _ => dy.clone(),
        };
        let dz = for_cudnn(&dz)?;
        let (xl, wl) = (x.layout().clone(), w.layout().clone());
        let cfg = conv_graphs::conv2d(
            &arg("x", &xl, x.dtype()),
            &arg("w", &wl, w.dtype()),
            None,
            &Conv2dParams {
                activation: Activation::None,
                ..self.p
            },
        )
        .c()?;
        let dx = dz.apply_op2_no_bwd(
            w,
            &Grad {
                cfg: cfg.clone(),
                data: true,
            },
        )?;
        let dw = x.apply_op2_no_bwd(&dz, &Grad { cfg, data: false })?;
        Ok((dx, dw, dz))
    }
}

impl CustomOp2 for Conv2d {
    fn name(&self) -> &'static str {
        "cudnn-conv2d"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        Err(on_cuda("cudnn_candle::conv2d"))
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
        y: &Tensor,
        dy: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let (dx, dw, _) = self.grads(x, w, y, dy)?;
        Ok((Some(dx), Some(dw)))
    }
}

impl CustomOp3 for Conv2d {
    fn name(&self) -> &'static str {
        "cudnn-conv2d-bias"
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
        Err(on_cuda("cudnn_candle::conv2d_with"))
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
        y: &Tensor,
        dy: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (dx, dw, dz) = self.grads(x, w, y, dy)?;
        // Summed in f32 (a half-precision sum over N * H * W loses digits).
        let db = dz
            .to_dtype(CDType::F32)?
            .sum((0, 2, 3))?
            .to_dtype(dz.dtype())?;
        Ok((Some(dx), Some(dw), Some(db)))
    }
}

/// The data gradient `(dy, w) -> dx` or the filter gradient `(x, dy) -> dw`.
#[derive(Clone, Debug)]
struct Grad {
    cfg: ConvCfg,
    data: bool,
}

impl Grad {
    fn run<T: Elem>(
        &self,
        (a, al): (&CudaStorage, &Layout),
        (b, bl): (&CudaStorage, &Layout),
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let c = &self.cfg;
        let (an, ad, bn, bd, od) = if self.data {
            ("dy", c.y, "w", c.w, c.x)
        } else {
            ("x", c.x, "dy", c.y, c.w)
        };
        same(a, b, bn, an)?;
        for (name, l, d) in [(an, al, ad), (bn, bl, bd)] {
            let want = dims_usize(d)?;
            if l.dims() != want.as_slice() {
                return Err(to_candle(Error::mismatch(
                    format!("conv2d backward: {name} dims"),
                    format!("{want:?}"),
                    format!("{:?}", l.dims()),
                )));
            }
            conv_graphs::check_contiguous(&arg(name, l, a.dtype())).c()?;
        }
        let graph = if self.data {
            conv_graphs::dgrad(c)
        } else {
            conv_graphs::wgrad(c)
        }
        .c()?;
        let dev = &a.device;
        let av = view::<T>(a, al, an, count(&ad).c()?)?;
        let bv = view::<T>(b, bl, bn, count(&bd).c()?)?;
        let mut o = dev.alloc_zeros::<T>(count(&od).c()?)?;
        let mut ov = o.as_view_mut();
        let (out, ins) = if self.data {
            (names::DX, vec![(names::DY, &av), (names::W, &bv)])
        } else {
            (names::DW, vec![(names::X, &av), (names::DY, &bv)])
        };
        run::run(
            "conv2d backward",
            dev,
            &graph,
            Io {
                ins,
                ins_f32: vec![],
                outs: vec![(out, &mut ov)],
                outs_f32: vec![],
            },
        )?;
        Ok((
            CudaStorage::wrap_cuda_slice(o, dev.clone()),
            Shape::from(dims_usize(od)?),
        ))
    }
}

impl CustomOp2 for Grad {
    fn name(&self) -> &'static str {
        if self.data {
            "cudnn-conv2d-dgrad"
        } else {
            "cudnn-conv2d-wgrad"
        }
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        Err(on_cuda("cudnn_candle::conv2d backward"))
    }

    fn cuda_fwd(
        &self,
        a: &CudaStorage,
        al: &Layout,
        b: &CudaStorage,
        bl: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        match a.dtype() {
            CDType::F32 => self.run::<f32>((a, al), (b, bl)),
            CDType::F16 => self.run::<half::f16>((a, al), (b, bl)),
            CDType::BF16 => self.run::<half::bf16>((a, al), (b, bl)),
            other => Err(to_candle(Error::invalid(
                "conv2d backward dtype",
                "must be f32, f16 or bf16",
                format!("{other:?}"),
            ))),
        }
    }
}

/// Whether cuDNN fuses `activation` after the convolution (and bias) on
/// NCHW tensors: only ReLU after a bias (cuDNN's conv-bias-activation
/// engines); the rest runs as candle ops after the fused part.
pub fn fuses(activation: Activation, bias: bool) -> bool {
    matches!(activation, Activation::None) || (bias && activation == Activation::Relu)
}

/// candle's `Tensor::conv2d(kernel, padding, stride, dilation, groups)`
/// through cuDNN: x `(N, C, H, W)`, kernel `(K, C / groups, KH, KW)`, f32,
/// f16 or bf16 on a CUDA device; differentiable (data and filter
/// gradients through cuDNN).
///
/// # Errors
/// Shapes, dtypes or parameters that do not fit (typed, naming the
/// argument: `candle_core::Error::Cuda` holding a [`cudnn::Error`]), CPU
/// tensors, planning, execution.
pub fn conv2d(
    x: &Tensor,
    kernel: &Tensor,
    padding: usize,
    stride: usize,
    dilation: usize,
    groups: usize,
) -> candle_core::Result<Tensor> {
    conv2d_with(
        x,
        kernel,
        None,
        &Conv2dParams::new(padding, stride, dilation, groups),
    )
}

/// `act(conv2d(x, w) + bias)`: [`conv2d`] with an optional bias `(K)` and
/// an activation, in one cuDNN graph where cuDNN fuses them (see the
/// module docs); differentiable in x, w and bias.
///
/// # Errors
/// As [`conv2d`].
pub fn conv2d_with(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    p: &Conv2dParams,
) -> candle_core::Result<Tensor> {
    // Dtypes and devices before any copy (a strided F8 input would reach
    // candle's copy kernel first: untyped, or worse).
    crate::precheck::conv_inputs(x, w, bias)?;
    // ReLU is the op's own (fused, or candle's kernel after the graph:
    // one gradient rule either way); the other activations are candle ops.
    let in_op = matches!(p.activation, Activation::None | Activation::Relu);
    let op = Conv2d {
        p: Conv2dParams {
            activation: if in_op {
                p.activation
            } else {
                Activation::None
            },
            ..*p
        },
    };
    let (x, w) = (for_cudnn(x)?, for_cudnn(w)?);
    let y = match bias {
        Some(b) => x.apply_op3(&w, &for_cudnn(b)?, op)?,
        None => x.apply_op2(&w, op)?,
    };
    match p.activation {
        Activation::None | Activation::Relu => Ok(y),
        Activation::Gelu => y.gelu(),
        Activation::GeluErf => y.gelu_erf(),
        Activation::Silu => y.silu(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn cfg(bias: bool, act: Activation) -> ConvCfg {
        let (xd, wd, bd) = ([2usize, 4, 8, 8], [8usize, 4, 3, 3], [8usize]);
        let (xs, ws) = ([256usize, 64, 8, 1], [36usize, 9, 3, 1]);
        let a = |name, dims, strides| Arg {
            name,
            dims,
            strides,
            dtype: CDType::F32,
        };
        let (x, w, b) = (a("x", &xd, &xs), a("w", &wd, &ws), a("bias", &bd, &[1]));
        conv_graphs::conv2d(
            &x,
            &w,
            bias.then_some(&b),
            &Conv2dParams::new(1, 1, 1, 1).activation(act),
        )
        .expect("valid call")
    }

    /// The graph's nodes and ops (its id, unique per build, left out).
    fn dbg(g: &Graph) -> String {
        let s = format!("{g:?}");
        s.find("nodes:").map_or(s.clone(), |i| s[i..].to_string())
    }

    #[test]
    fn relu_falls_back_when_the_fused_graph_is_refused() {
        let c = cfg(true, Activation::Relu);
        let plain = conv_graphs::forward(&ConvCfg {
            activation: Activation::None,
            ..c.clone()
        })
        .expect("graph");
        let fused = conv_graphs::forward(&c).expect("graph");
        assert_ne!(dbg(&plain), dbg(&fused));
        // Planned: the fused graph, nothing after it.
        let (g, post) = forward_graph(&c, |_| Ok(())).expect("fused");
        assert_eq!((dbg(&g), post), (dbg(&fused), false));
        // No engine (cuDNN's heuristics offered none): the plain graph,
        // then ReLU.
        for refusal in [
            Error::Unsupported {
                what: "no engine".into(),
                needs: None,
            },
            Error::Cudnn {
                call: "cudnnBackendFinalize",
                status: cudnn::sys::cudnn::cudnnStatus_t::CUDNN_STATUS_NOT_SUPPORTED,
                raw: 3000,
                status_name: "CUDNN_STATUS_NOT_SUPPORTED".into(),
                text: String::new(),
                last_error: None,
                context: None,
            },
        ] {
            let (g, post) = forward_graph(&c, |_| Err(refusal)).expect("fallback");
            assert_eq!((dbg(&g), post), (dbg(&plain), true));
        }
        // Any other error is the caller's.
        let e = forward_graph(&c, |_| Err(Error::invalid("a", "b", 1))).expect_err("passed on");
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
        // ReLU without bias: never fused on NCHW, never planned here.
        let c = cfg(false, Activation::Relu);
        let (g, post) = forward_graph(&c, |_| panic!("not planned")).expect("plain");
        assert!(post);
        let plain = conv_graphs::forward(&ConvCfg {
            activation: Activation::None,
            ..c
        })
        .expect("graph");
        assert_eq!(dbg(&g), dbg(&plain));
        let c = cfg(true, Activation::None);
        let (_, post) = forward_graph(&c, |_| panic!("not planned")).expect("plain");
        assert!(!post);
        assert!(forward_graph(&cfg(true, Activation::Gelu), |_| Ok(())).is_err());
    }

    proptest::proptest! {
        /// Any contiguous narrow of a CPU tensor: `for_cudnn` gives the
        /// same values (the narrowed ones, read back element by element),
        /// starting at a multiple of 16 bytes (checked as bytes here).
        #[test]
        fn for_cudnn_any_narrow(
            rows in 1usize..6, cols in 1usize..40, start in 0usize..6, len in 1usize..6,
            half in proptest::bool::ANY,
        ) {
            let (start, len) = (start % rows, len.min(rows - start % rows));
            let n = rows * cols;
            let full = Tensor::arange(0u32, n as u32, &Device::Cpu).unwrap()
                .to_dtype(CDType::F32).unwrap().reshape((rows, cols)).unwrap();
            let full = if half { full.to_dtype(CDType::F16).unwrap() } else { full };
            let v = full.narrow(0, start, len).unwrap();
            let a = for_cudnn(&v).unwrap();
            let bytes = a.layout().start_offset() * a.dtype().size_in_bytes();
            proptest::prop_assert_eq!(bytes % 16, 0);
            proptest::prop_assert!(a.is_contiguous());
            let got = a.to_dtype(CDType::F32).unwrap().flatten_all().unwrap()
                .to_vec1::<f32>().unwrap();
            let want: Vec<f32> = (start * cols..(start + len) * cols).map(|i| i as f32).collect();
            proptest::prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn offset_alignment_by_hand() {
        // The review's cases: (2,3,9,9).narrow(0,1,1) in f32 starts 243
        // elements (972 bytes) in; (3,100).narrow(0,1,2) in f16 200 bytes.
        assert!(!offset_aligned(243, 4));
        assert!(!offset_aligned(100, 2));
        assert!(offset_aligned(0, 4));
        assert!(offset_aligned(8, 2));
        assert!(offset_aligned(4, 4));
        assert!(offset_aligned(2, 8));
        assert!(!offset_aligned(usize::MAX, 2));
    }

    #[test]
    fn for_cudnn_copies_unaligned_views_only() -> candle_core::Result<()> {
        let cpu = Device::Cpu;
        let x = Tensor::arange(0f32, 486., &cpu)?.reshape((2, 3, 9, 9))?;
        let n = x.narrow(0, 1, 1)?;
        assert!(n.is_contiguous());
        assert_eq!(n.layout().start_offset(), 243);
        let a = for_cudnn(&n)?;
        assert_eq!(a.layout().start_offset(), 0);
        // The values are the narrowed ones: 243, 244, ... (by hand).
        let v = a.flatten_all()?.to_vec1::<f32>()?;
        assert_eq!(v.len(), 243);
        assert!(v.iter().enumerate().all(|(i, &e)| e == 243. + i as f32));
        // An aligned start (8 f16 = 16 bytes) is used as it is.
        let h = Tensor::zeros((4, 8), CDType::F16, &cpu)?.narrow(0, 1, 2)?;
        assert_eq!(for_cudnn(&h)?.layout().start_offset(), 8);
        // Hidden 100 in f16: 200 bytes in, copied.
        let h = Tensor::zeros((3, 100), CDType::F16, &cpu)?.narrow(0, 1, 2)?;
        assert_eq!(for_cudnn(&h)?.layout().start_offset(), 0);
        Ok(())
    }
}
