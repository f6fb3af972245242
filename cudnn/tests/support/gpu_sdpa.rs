//! Data helpers shared by the SDPA GPU tests (`gpu/sdpa_*`): reproducible
//! bf16-exact inputs, bf16 / f32 copies to and from the device through
//! `f64`, a spec's dims and strides, and the relative-error check against
//! the f64 reference. Each test file keeps its own tolerances and floors.
#![allow(dead_code)]
// `ensure!(err <= bound)` must fail for NaN: a negated partial comparison on purpose.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use cudnn::DataType;
use cudnn::graph::{Bindings, TensorSpec};
use cudnn::runtime::DeviceBuffer;
use half::bf16;

use crate::support::TestResult;
use crate::support::gpu_data::R;

/// A reproducible value in `[-amp, amp)` for element `i` of stream `seed`
/// (a splitmix-style hash), rounded to bf16: what the device reads.
pub fn hashed(seed: u64, i: usize, amp: f64) -> f64 {
    let mut x = seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 33;
    x = x.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    x ^= x >> 33;
    let v = ((x >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * amp;
    f64::from(bf16::from_f64(v))
}

/// `v` rounded to bf16 on the device.
pub fn up_bf16(v: &[f64]) -> R<DeviceBuffer<bf16>> {
    let h: Vec<bf16> = v.iter().map(|&x| bf16::from_f64(x)).collect();
    Ok(DeviceBuffer::from_host(&h)?)
}

/// `v` rounded to f32 on the device.
pub fn up_f32(v: &[f64]) -> R<DeviceBuffer<f32>> {
    let h: Vec<f32> = v.iter().map(|&x| x as f32).collect();
    Ok(DeviceBuffer::from_host(&h)?)
}

/// The first `n` bf16 values of `b`, on the host.
pub fn down_bf16(b: &DeviceBuffer<bf16>, n: usize) -> R<Vec<f64>> {
    let mut h = vec![bf16::from_f32(0.0); n];
    b.copy_to_host(&mut h)?;
    Ok(h.iter().map(|x| x.to_f64()).collect())
}

/// The first `n` f32 values of `b`, on the host.
pub fn down_f32(b: &DeviceBuffer<f32>, n: usize) -> R<Vec<f64>> {
    let mut h = vec![0f32; n];
    b.copy_to_host(&mut h)?;
    Ok(h.iter().map(|&x| f64::from(x)).collect())
}

/// A rank-4 spec's dims.
pub fn dims(spec: &TensorSpec) -> [usize; 4] {
    let d = spec.dims();
    [d[0] as usize, d[1] as usize, d[2] as usize, d[3] as usize]
}

/// A rank-4 spec's strides.
pub fn strides(spec: &TensorSpec) -> [usize; 4] {
    let s = spec.strides();
    [s[0] as usize, s[1] as usize, s[2] as usize, s[3] as usize]
}

/// The largest error of `got` against `want` relative to
/// `max(floor, |want|)`; NaN and a length mismatch are infinite.
pub fn worst_floor(got: &[f64], want: &[f64], floor: f64) -> f64 {
    if got.len() != want.len() {
        return f64::INFINITY;
    }
    got.iter().zip(want).fold(0f64, |w, (&g, &x)| {
        let e = (g - x).abs() / x.abs().max(floor);
        if e.is_nan() { f64::INFINITY } else { w.max(e) }
    })
}

/// `got` has as many values as `want` and is within `bound` of it
/// ([`worst_floor`] with `floor`); prints the error.
pub fn check(what: &str, got: &[f64], want: &[f64], floor: f64, bound: f64) -> TestResult {
    crate::ensure!(
        got.len() == want.len(),
        "{what}: {} vs {} values",
        got.len(),
        want.len()
    );
    let e = worst_floor(got, want, floor);
    eprintln!("  {what}: max rel error {e:.2e} (bound {bound:.0e})");
    crate::ensure!(e <= bound, "{what} differs from the reference: {e}");
    Ok(())
}

/// Binds an attention backward's inputs by their names in the graph: `q`,
/// `k`, `v`, `o`, `do` (element type `T`) and `stats` (f32).
pub fn bind_backward_inputs<'a, T: DataType>(
    bi: &mut Bindings<'a>,
    [q, k, v, o, d_o]: [&'a DeviceBuffer<T>; 5],
    stats: &'a DeviceBuffer<f32>,
) -> cudnn::Result<()> {
    bi.input("q", q.as_slice())?
        .input("k", k.as_slice())?
        .input("v", v.as_slice())?
        .input("o", o.as_slice())?
        .input("do", d_o.as_slice())?
        .input("stats", stats.as_slice())?;
    Ok(())
}

/// Binds an attention backward's gradients `dq`, `dk`, `dv`.
pub fn bind_grads<'a, T: DataType>(
    bi: &mut Bindings<'a>,
    [dq, dk, dv]: [&'a mut DeviceBuffer<T>; 3],
) -> cudnn::Result<()> {
    bi.output("dq", dq.as_slice_mut())?
        .output("dk", dk.as_slice_mut())?
        .output("dv", dv.as_slice_mut())?;
    Ok(())
}
