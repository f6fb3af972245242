//! Running a plan of the convolution and norm graphs on candle's memory
//! and stream: inputs and outputs of the op's element type `T` and of f32
//! (norm parameters and statistics), lent through the crate's cudarc
//! interop on candle's own stream (as the attention functions do).

use candle_core::CudaDevice;
use candle_core::cuda_backend::CudaDType;
use cudarc::driver::{CudaView, CudaViewMut, DeviceRepr, ValidAsZeroBits};
use cudnn::graph::{Graph, IoSignature};
use cudnn::{Error, Result};

use crate::device::{self, IntoCandle, with_handle};
use crate::exec::not_capturing;

/// The element types of `conv2d` and the norms: f32, f16, bf16.
pub(crate) trait Elem:
    cudnn::DataType + DeviceRepr + ValidAsZeroBits + CudaDType + Copy + Send + Sync + 'static
{
}
impl Elem for f32 {}
impl Elem for half::f16 {}
impl Elem for half::bf16 {}

/// The packed (row-major) strides of `dims`.
pub fn packed(dims: &[i64]) -> Vec<i64> {
    let mut s = vec![1i64; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1].saturating_mul(dims[i + 1]);
    }
    s
}

/// Check that tensor `name` of a plan is packed row-major with `dims`
/// (the stride of a dim of 1 is free: it addresses nothing): the buffer
/// this crate binds to it is candle-contiguous. A refusal is typed (never
/// a wrong read or write).
///
/// # Errors
/// Unknown name, other dims or strides.
pub fn expect_packed(io: &IoSignature, name: &str, dims: &[i64]) -> Result<()> {
    let t = io
        .tensors
        .iter()
        .find(|t| t.name == name)
        .ok_or_else(|| Error::invalid("plan tensor", "must exist", name))?;
    let strides = packed(dims);
    let same_strides = t.spec.strides().len() == strides.len()
        && dims
            .iter()
            .zip(t.spec.strides().iter().zip(&strides))
            .all(|(&d, (&got, &want))| d == 1 || got == want);
    if t.spec.dims() != dims || !same_strides {
        return Err(Error::mismatch(
            format!("plan tensor `{name}` dims / strides (candle-contiguous)"),
            format!("{dims:?} / {strides:?}"),
            format!("{:?} / {:?}", t.spec.dims(), t.spec.strides()),
        ));
    }
    Ok(())
}

/// Every tensor a plan binds is packed row-major ([`expect_packed`] with
/// its own dims): what `conv2d` and the norms bind is candle-contiguous.
///
/// # Errors
/// The first tensor that is not.
pub fn expect_every_packed(io: &IoSignature) -> Result<()> {
    for t in &io.tensors {
        expect_packed(io, &t.name, t.spec.dims())?;
    }
    Ok(())
}

/// The tensors of one execution, by graph name.
pub(crate) struct Io<'s, 'v, T> {
    /// Inputs of the op's type.
    pub ins: Vec<(&'static str, &'s CudaView<'v, T>)>,
    /// f32 inputs.
    pub ins_f32: Vec<(&'static str, &'s CudaView<'v, f32>)>,
    /// Outputs of the op's type.
    pub outs: Vec<(&'static str, &'s mut CudaViewMut<'v, T>)>,
    /// f32 outputs.
    pub outs_f32: Vec<(&'static str, &'s mut CudaViewMut<'v, f32>)>,
}

/// Plan `graph` for `dev` (the process-wide cache: one planning per
/// graph), check that every bound tensor is packed as candle's
/// contiguous memory ([`expect_every_packed`]), and run it on candle's stream.
///
/// # Errors
/// Planning, a layout other than packed, binding (lengths checked against
/// the plan), a capturing stream (refused naming `op`), execution.
pub(crate) fn run<T: Elem>(
    op: &str,
    dev: &CudaDevice,
    graph: &Graph,
    io: Io<'_, '_, T>,
) -> candle_core::Result<()> {
    let Io {
        ins,
        ins_f32,
        outs,
        outs_f32,
    } = io;
    with_handle(dev, |cs, handle, ordinal| {
        let plan = device::plan(ordinal, graph).c()?;
        expect_every_packed(plan.io()).c()?;
        not_capturing(cs, op).c()?;
        // SAFETY: the contract of `CudarcStream::read`/`write`: every view
        // of these guards goes to `plan.execute` with `handle` only, which
        // is bound to `cs`, candle's stream (cudarc records its events
        // there); the guards drop at the end of this closure, after the
        // enqueue; the stream is not capturing (checked above).
        let r: Vec<_> = unsafe { ins.iter().map(|(n, v)| (*n, cs.read(*v))).collect() };
        // SAFETY: as above.
        let rf: Vec<_> = unsafe { ins_f32.iter().map(|(n, v)| (*n, cs.read(*v))).collect() };
        let mut w = Vec::with_capacity(outs.len());
        for (n, v) in outs {
            // SAFETY: as above.
            w.push((n, unsafe { cs.write(v) }.c()?));
        }
        let mut wf = Vec::with_capacity(outs_f32.len());
        for (n, v) in outs_f32 {
            // SAFETY: as above.
            wf.push((n, unsafe { cs.write(v) }.c()?));
        }
        let r = r
            .into_iter()
            .map(|(n, g)| g.map(|g| (n, g)))
            .collect::<Result<Vec<_>>>()
            .c()?;
        let rf = rf
            .into_iter()
            .map(|(n, g)| g.map(|g| (n, g)))
            .collect::<Result<Vec<_>>>()
            .c()?;
        let mut b = plan.bindings();
        for (n, g) in &r {
            b.input(n, g.view()).c()?;
        }
        for (n, g) in &rf {
            b.input(n, g.view()).c()?;
        }
        for (n, g) in w.iter_mut() {
            b.output(n, g.view_mut()).c()?;
        }
        for (n, g) in wf.iter_mut() {
            b.output(n, g.view_mut()).c()?;
        }
        plan.execute(handle, &mut b).c()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_strides_by_hand() {
        assert_eq!(packed(&[2, 3, 4, 5]), [60, 20, 5, 1]);
        assert_eq!(packed(&[7, 1, 1, 1]), [1, 1, 1, 1]);
        assert_eq!(packed(&[1, 768, 1, 1]), [768, 1, 1, 1]);
        assert_eq!(packed(&[]), Vec::<i64>::new());
    }
}
