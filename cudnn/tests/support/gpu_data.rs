//! Shared by the graph GPU tests (`gpu/graph_norm`, `gpu/graph_attention`,
//! `gpu/sdpa_softcap`): element types, host <-> device copies through `f64`,
//! NaN poisoning, the error measure, a device context and planning, and the
//! attention layouts. Each test file keeps its own tolerances.
#![allow(dead_code)]
// `ensure!(err <= tol)` must fail for NaN: a negated partial comparison on purpose.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use cudnn::DataType;
use cudnn::dnn::Handle;
use cudnn::graph::{AttnLayout, DType, Graph, Plan, Policy, Target, TensorSpec};
use cudnn::reference::attention as ra;
use cudnn::runtime::{Device, DeviceBuffer, Stream};
use half::{bf16, f16};

pub type R<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// xorshift64*: deterministic test data.
pub struct Rng(pub u64);

impl Rng {
    /// A value in [0, 1).
    pub fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `n` values in [lo, hi).
    pub fn vec(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..n).map(|_| lo + (hi - lo) * self.next()).collect()
    }
}

/// An element type the tests run in.
pub trait El: DataType + Copy {
    const DT: DType;
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
}

impl El for f16 {
    const DT: DType = DType::F16;
    fn from_f64(v: f64) -> Self {
        f16::from_f64(v)
    }
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
}

impl El for bf16 {
    const DT: DType = DType::BF16;
    fn from_f64(v: f64) -> Self {
        bf16::from_f64(v)
    }
    fn to_f64(self) -> f64 {
        bf16::to_f64(self)
    }
}

impl El for f32 {
    const DT: DType = DType::F32;
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
}

/// Round to `T` and back: what the device sees.
pub fn round<T: El>(v: &[f64]) -> Vec<f64> {
    v.iter().map(|&x| T::from_f64(x).to_f64()).collect()
}

pub fn up<T: El>(v: &[f64]) -> R<DeviceBuffer<T>> {
    let h: Vec<T> = v.iter().map(|&x| T::from_f64(x)).collect();
    Ok(DeviceBuffer::from_host(&h)?)
}

/// `n` NaNs on the device: an output the op does not write never passes.
pub fn poisoned<T: El>(n: usize) -> R<DeviceBuffer<T>> {
    up::<T>(&vec![f64::NAN; n])
}

pub fn down<T: El>(b: &DeviceBuffer<T>) -> R<Vec<f64>> {
    let mut h = vec![T::from_f64(0.0); b.len()];
    b.copy_to_host(&mut h)?;
    Ok(h.iter().map(|x| x.to_f64()).collect())
}

/// The worst error relative to `max(1, |want|)` and where it is; NaN and a
/// length mismatch count as infinite.
pub fn worst_at(got: &[f64], want: &[f64]) -> (f64, usize) {
    if got.len() != want.len() {
        return (f64::INFINITY, 0);
    }
    let mut worst = (0.0f64, 0usize);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let e = (g - w).abs() / w.abs().max(1.0);
        if e.is_nan() || e > worst.0 {
            worst = (if e.is_nan() { f64::INFINITY } else { e }, i);
        }
        if worst.0.is_infinite() {
            break;
        }
    }
    worst
}

/// The worst error relative to `max(1, |want|)` (see [`worst_at`]).
pub fn worst(got: &[f64], want: &[f64]) -> f64 {
    worst_at(got, want).0
}

/// A stream, a handle on it and the device's target.
pub struct Cx {
    pub h: Handle,
    pub target: Target,
    pub rng: Rng,
}

pub fn cx(seed: u64) -> R<Cx> {
    Device::new(0)?;
    let stream = Stream::new()?;
    Ok(Cx {
        h: Handle::new(&stream)?,
        target: Target::device(0)?,
        rng: Rng(seed),
    })
}

/// Plan `g` for the device, saying which engine and workspace.
pub fn plan(cx: &Cx, g: &Graph, what: &str) -> R<Plan> {
    let (p, r) = Plan::build(&g.build()?, &cx.target, &Policy::default())?;
    let what = if what.is_empty() {
        String::new()
    } else {
        format!("{what}: ")
    };
    eprintln!(
        "  {what}engine {:?} of {} configs, ws {} B",
        r.chosen,
        r.candidates.len(),
        p.workspace_size()
    );
    Ok(p)
}

pub fn dims4(spec: &TensorSpec) -> [usize; 4] {
    let d = spec.dims();
    [d[0] as usize, d[1] as usize, d[2] as usize, d[3] as usize]
}

/// The reference's strided view of a tensor stored as `spec` says.
pub fn view<'a>(data: &'a [f64], spec: &TensorSpec) -> ra::View<'a> {
    let s = spec.strides();
    ra::View::new(
        data,
        dims4(spec),
        [s[0] as usize, s[1] as usize, s[2] as usize, s[3] as usize],
    )
}

/// Packed BHSD from the layout's storage.
pub fn to_bhsd(v: &[f64], layout: AttnLayout, [b, h, s, d]: [usize; 4]) -> Vec<f64> {
    if layout == AttnLayout::Bhsd {
        return v.to_vec();
    }
    let mut o = vec![0.0; v.len()];
    for n in 0..b {
        for hh in 0..h {
            for i in 0..s {
                for t in 0..d {
                    o[((n * h + hh) * s + i) * d + t] = v[((n * s + i) * h + hh) * d + t];
                }
            }
        }
    }
    o
}

/// Packed BHSD into the layout's storage.
pub fn store(v: &[f64], layout: AttnLayout, [b, h, s, d]: [usize; 4]) -> Vec<f64> {
    if layout == AttnLayout::Bhsd {
        return v.to_vec();
    }
    let mut o = vec![0.0; v.len()];
    for n in 0..b {
        for hh in 0..h {
            for i in 0..s {
                for t in 0..d {
                    o[((n * s + i) * h + hh) * d + t] = v[((n * h + hh) * s + i) * d + t];
                }
            }
        }
    }
    o
}

/// `got` within `tol` of `want` (relative to `max(1, |want|)`), naming the
/// worst element; NaN never passes.
pub fn close(what: &str, got: &[f64], want: &[f64], tol: f64) -> crate::support::TestResult {
    crate::ensure!(
        got.len() == want.len(),
        "{what}: {} values, want {}",
        got.len(),
        want.len()
    );
    let (e, i) = worst_at(got, want);
    eprintln!("  {what}: max rel error {e:.2e} (bound {tol:.0e})");
    crate::ensure!(
        e <= tol,
        "{what}: element {i} is {}, want {} (rel error {e:.3e} > {tol:.0e})",
        got.get(i).copied().unwrap_or(f64::NAN),
        want.get(i).copied().unwrap_or(f64::NAN)
    );
    Ok(())
}
