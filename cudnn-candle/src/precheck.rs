//! The cheap checks of a call's tensors, made before anything is copied.
//!
//! The entry points prepare their inputs (a strided view made contiguous,
//! a view at an unaligned offset copied, a decode row repeated, f16 sinks
//! widened) before the op's own checks run. A copy of a dtype the op does
//! not take runs candle's copy kernel for that dtype (candle 0.11's F8
//! copies are broken on CUDA) and fails with candle's untyped error, or
//! worse. So every input's dtype (and device) is checked here first,
//! with the crate's typed error naming the argument; the pure rules
//! ([`attn_dtypes`], [`conv_dtypes`]) are unit-tested over every dtype.
//!
//! `prepared` marks each place an input may be copied; the unit tests
//! count them to show that no refused dtype reaches one.

use candle_core::{DType as CDType, Tensor};
use cudnn::{Error, Result};

use crate::device::{IntoCandle, to_candle};
use crate::params::{AttnParams, attn_dtype};

#[cfg(test)]
thread_local! {
    static PREPARED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A place where an input may be copied (counted in the unit tests).
#[inline]
pub(crate) fn prepared() {
    #[cfg(test)]
    PREPARED.with(|c| c.set(c.get() + 1));
}

/// How many preparation points this thread has passed (unit tests).
#[cfg(test)]
pub(crate) fn prepared_count() -> usize {
    PREPARED.with(std::cell::Cell::get)
}

/// Attention's element types: `q` f16 or bf16, `k` and `v` `q`'s; `names`
/// the three arguments' names in errors.
///
/// # Errors
/// The first argument that breaks a rule, named, with its dtype.
pub fn attn_dtypes(names: [&str; 3], [q, k, v]: [CDType; 3]) -> Result<()> {
    attn_dtype(names[0], q)?;
    for (name, dt) in [(names[1], k), (names[2], v)] {
        if dt != q {
            return Err(Error::mismatch(
                format!("{name} dtype ({}'s)", names[0]),
                format!("{q:?}"),
                format!("{dt:?}"),
            ));
        }
    }
    Ok(())
}

/// The side inputs' element types: ALiBi slopes f32 (FlashAttention's
/// rule), sinks f32, f16 or bf16 (widened to f32).
///
/// # Errors
/// A side input of another dtype, named.
pub fn side_dtypes(slopes: Option<CDType>, sinks: Option<CDType>) -> Result<()> {
    if let Some(dt) = slopes.filter(|&d| d != CDType::F32) {
        return Err(Error::invalid(
            "alibi_slopes dtype",
            "must be f32 (FlashAttention's rule)",
            format!("{dt:?}"),
        ));
    }
    if let Some(dt) = sinks.filter(|d| !matches!(d, CDType::F32 | CDType::F16 | CDType::BF16)) {
        return Err(Error::invalid(
            "sinks dtype",
            "must be f32, f16 or bf16",
            format!("{dt:?}"),
        ));
    }
    Ok(())
}

/// `conv2d`'s element types: `x` f32, f16 or bf16, `w` and the bias `x`'s.
///
/// # Errors
/// The first argument that breaks a rule, named, with its dtype.
pub fn conv_dtypes(x: CDType, w: CDType, bias: Option<CDType>) -> Result<()> {
    crate::conv_graphs::conv_dtype("x", x)?;
    for (name, dt) in [("w", Some(w)), ("bias", bias)] {
        if let Some(dt) = dt.filter(|&d| d != x) {
            return Err(Error::mismatch(
                format!("{name} dtype (x's)"),
                format!("{x:?}"),
                format!("{dt:?}"),
            ));
        }
    }
    Ok(())
}

fn same_device(first: (&str, &Tensor), other: (&str, &Tensor)) -> candle_core::Result<()> {
    if !first.1.device().same_device(other.1.device()) {
        return Err(to_candle(Error::mismatch(
            format!("{} device ({}'s)", other.0, first.0),
            format!("{:?}", first.1.device().location()),
            format!("{:?}", other.1.device().location()),
        )));
    }
    Ok(())
}

/// An attention call's tensors before any preparation: q, k, v (named
/// `names`) and the side inputs of `p`: dtypes ([`attn_dtypes`],
/// [`side_dtypes`]) and devices (all on q's).
///
/// # Errors
/// Typed, naming the argument.
pub(crate) fn attn_inputs(
    names: [&str; 3],
    [q, k, v]: [&Tensor; 3],
    p: &AttnParams,
) -> candle_core::Result<()> {
    attn_dtypes(names, [q.dtype(), k.dtype(), v.dtype()]).c()?;
    side_dtypes(
        p.alibi_slopes.as_ref().map(Tensor::dtype),
        p.sinks.as_ref().map(Tensor::dtype),
    )
    .c()?;
    for (name, t) in [(names[1], Some(k)), (names[2], Some(v))]
        .into_iter()
        .chain([
            ("alibi_slopes", p.alibi_slopes.as_ref()),
            ("sinks", p.sinks.as_ref()),
        ])
    {
        if let Some(t) = t {
            same_device((names[0], q), (name, t))?;
        }
    }
    Ok(())
}

/// `conv2d`'s tensors before any preparation: dtypes ([`conv_dtypes`])
/// and devices (on x's).
///
/// # Errors
/// Typed, naming the argument.
pub(crate) fn conv_inputs(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
) -> candle_core::Result<()> {
    conv_dtypes(x.dtype(), w.dtype(), bias.map(Tensor::dtype)).c()?;
    same_device(("x", x), ("w", w))?;
    if let Some(b) = bias {
        same_device(("x", x), ("bias", b))?;
    }
    Ok(())
}

/// The norms' element types (`layer_norm`, `rms_norm`): `x` f32, f16 or
/// bf16 (cuDNN's norm graphs), `weight` and `bias` x's (candle-nn's
/// convention).
///
/// # Errors
/// The first argument that breaks a rule, named, with its dtype.
pub fn norm_dtypes(x: CDType, weight: CDType, bias: Option<CDType>) -> Result<()> {
    if !matches!(x, CDType::F32 | CDType::F16 | CDType::BF16) {
        return Err(Error::invalid(
            "x dtype",
            "must be f32, f16 or bf16 (cuDNN's norm graphs)",
            format!("{x:?}"),
        ));
    }
    for (name, dt) in [("weight", Some(weight)), ("bias", bias)] {
        if let Some(dt) = dt.filter(|&d| d != x) {
            return Err(Error::mismatch(
                format!("{name} dtype (x's, candle-nn's convention)"),
                format!("{x:?}"),
                format!("{dt:?}"),
            ));
        }
    }
    Ok(())
}

/// A norm's tensors before any preparation: dtypes ([`norm_dtypes`]) and
/// devices (on x's).
///
/// # Errors
/// Typed, naming the argument.
pub(crate) fn norm_inputs(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
) -> candle_core::Result<()> {
    norm_dtypes(x.dtype(), weight.dtype(), bias.map(Tensor::dtype)).c()?;
    same_device(("x", x), ("weight", weight))?;
    if let Some(b) = bias {
        same_device(("x", x), ("bias", b))?;
    }
    Ok(())
}

/// One attention input's own dtype (f16 or bf16), checked where it is
/// prepared (`q_ready`, `kv_ready`: the capture entry points too).
///
/// # Errors
/// Another dtype, naming `name`.
pub(crate) fn attn_input(name: &str, t: &Tensor) -> candle_core::Result<()> {
    attn_dtype(name, t.dtype()).c().map(|_| ())
}

#[cfg(test)]
mod tests {
    use candle_core::{DType as CDType, Device, Tensor};
    use proptest::prelude::*;

    use super::*;

    const ALL: [CDType; 14] = [
        CDType::U8,
        CDType::U32,
        CDType::I16,
        CDType::I32,
        CDType::I64,
        CDType::BF16,
        CDType::F16,
        CDType::F32,
        CDType::F64,
        CDType::F8E4M3,
        CDType::F6E2M3,
        CDType::F6E3M2,
        CDType::F4,
        CDType::F8E8M0,
    ];

    /// How an input is laid out: contiguous, strided (a transposed
    /// view), at an offset (a `narrow` of the first dim), or with rows
    /// not packed (a `narrow` of the last dim).
    #[derive(Clone, Copy, Debug)]
    enum Lay {
        Contiguous,
        Strided,
        Offset,
        Rows,
    }

    const LAYS: [Lay; 4] = [Lay::Contiguous, Lay::Strided, Lay::Offset, Lay::Rows];

    /// A CPU tensor of `dims` in `dt` laid out as `lay`; `None` where
    /// candle cannot make one of that dtype on the CPU.
    fn tensor(dims: &[usize], dt: CDType, lay: Lay) -> Option<Tensor> {
        let mut big = dims.to_vec();
        let n = big.len();
        match lay {
            Lay::Contiguous => {}
            Lay::Strided => big.swap(n - 2, n - 1),
            Lay::Offset => big[0] += 1,
            Lay::Rows => big[n - 1] += 2,
        }
        let t = Tensor::zeros(big, dt, &Device::Cpu).ok()?;
        let t = match lay {
            Lay::Contiguous => t,
            Lay::Strided => t.transpose(n - 2, n - 1).ok()?,
            Lay::Offset => t.narrow(0, 1, dims[0]).ok()?,
            Lay::Rows => t.narrow(n - 1, 1, dims[n - 1]).ok()?,
        };
        (t.dims() == dims).then_some(t)
    }

    /// The crate's typed error in `e`, as text.
    fn typed(e: candle_core::Error) -> String {
        match e {
            candle_core::Error::Cuda(b) => match b.downcast_ref::<Error>() {
                Some(t) => t.to_string(),
                None => panic!("not the crate's error: {b}"),
            },
            other => panic!("not the crate's error: {other}"),
        }
    }

    fn attn_ok(dt: CDType) -> bool {
        matches!(dt, CDType::F16 | CDType::BF16)
    }

    /// The pure rule over every pair of dtypes, by hand: q f16 / bf16,
    /// k and v q's; the error names the first argument that breaks it.
    #[test]
    fn attn_dtypes_by_hand() {
        for q in ALL {
            for k in ALL {
                let r = attn_dtypes(["q", "k", "v"], [q, k, q]);
                match (attn_ok(q), k == q) {
                    (true, true) => assert!(r.is_ok(), "{q:?} {k:?}"),
                    (false, _) => {
                        let e = r.unwrap_err().to_string();
                        assert!(
                            e.contains("q dtype") && e.contains(&format!("{q:?}")),
                            "{e}"
                        );
                    }
                    (true, false) => {
                        let e = r.unwrap_err().to_string();
                        assert!(e.contains("k dtype (q's)"), "{e}");
                    }
                }
            }
        }
        for x in ALL {
            let ok = matches!(x, CDType::F32 | CDType::F16 | CDType::BF16);
            assert_eq!(conv_dtypes(x, x, Some(x)).is_ok(), ok, "{x:?}");
        }
        let e = conv_dtypes(CDType::F32, CDType::F16, None).unwrap_err();
        assert!(e.to_string().contains("w dtype (x's)"), "{e}");
        let e = conv_dtypes(CDType::F16, CDType::F16, Some(CDType::F8E4M3)).unwrap_err();
        assert!(e.to_string().contains("bias dtype (x's)"), "{e}");
        assert!(side_dtypes(Some(CDType::F32), Some(CDType::BF16)).is_ok());
        let e = side_dtypes(Some(CDType::F16), None).unwrap_err();
        assert!(e.to_string().contains("alibi_slopes dtype"), "{e}");
        let e = side_dtypes(None, Some(CDType::F8E4M3)).unwrap_err();
        assert!(e.to_string().contains("sinks dtype"), "{e}");
    }

    /// Which entry point a case calls.
    #[derive(Clone, Copy, Debug)]
    enum Entry {
        Dense,
        DenseSinkDecode,
        KvCache,
        Paged,
        Varlen,
        Conv,
        LayerNorm,
        RmsNorm,
    }

    const ENTRIES: [Entry; 8] = [
        Entry::Dense,
        Entry::DenseSinkDecode,
        Entry::KvCache,
        Entry::Paged,
        Entry::Varlen,
        Entry::Conv,
        Entry::LayerNorm,
        Entry::RmsNorm,
    ];

    /// Calls `e` on CPU tensors: the first input of `dt_first` (q or x)
    /// laid out `lay_first`, the second (k, or w) of `dt_second` laid out
    /// `lay_second`, the rest well formed. `None` where candle cannot make
    /// such tensors on the CPU.
    fn call(
        e: Entry,
        (dt_first, lay_first): (CDType, Lay),
        (dt_second, lay_second): (CDType, Lay),
    ) -> Option<candle_core::Result<Tensor>> {
        let cpu = &Device::Cpu;
        let h = 2;
        let p = AttnParams::new(0.5);
        Some(match e {
            Entry::Dense | Entry::DenseSinkDecode => {
                let sq = if matches!(e, Entry::Dense) { 4 } else { 1 };
                let q = tensor(&[2, sq, h, 8], dt_first, lay_first)?;
                let k = tensor(&[2, 4, h, 8], dt_second, lay_second)?;
                let v = tensor(&[2, 4, h, 8], dt_second, Lay::Contiguous)?;
                let p = p.sinks(Some(Tensor::zeros(h, CDType::F32, cpu).ok()?));
                crate::flash_attn_with(&q, &k, &v, &p)
            }
            Entry::KvCache => {
                let q = tensor(&[2, 1, h, 8], dt_first, lay_first)?;
                let k = tensor(&[2, 4, h, 8], dt_second, lay_second)?;
                let v = tensor(&[2, 4, h, 8], dt_second, Lay::Contiguous)?;
                let lens = Tensor::new(&[3u32, 4], cpu).ok()?;
                crate::flash_attn_kvcache(&q, &k, &v, &lens, &p)
            }
            Entry::Paged => {
                let q = tensor(&[2, 1, h, 8], dt_first, lay_first)?;
                let k = tensor(&[3, 4, h, 8], dt_second, lay_second)?;
                let v = tensor(&[3, 4, h, 8], dt_second, Lay::Contiguous)?;
                let table = Tensor::new(&[[0i32], [1]], cpu).ok()?;
                let lens = Tensor::new(&[3i32, 4], cpu).ok()?;
                crate::flash_attn_paged(&q, &k, &v, &table, &lens, &p)
            }
            Entry::Varlen => {
                let q = tensor(&[5, h, 8], dt_first, lay_first)?;
                let k = tensor(&[6, h, 8], dt_second, lay_second)?;
                let v = tensor(&[6, h, 8], dt_second, Lay::Contiguous)?;
                let cq = Tensor::new(&[0u32, 2, 5], cpu).ok()?;
                let ck = Tensor::new(&[0u32, 3, 6], cpu).ok()?;
                crate::flash_attn_varlen_with(&q, &k, &v, &cq, &ck, 3, 3, &p)
            }
            Entry::Conv => {
                let x = tensor(&[1, 2, 5, 5], dt_first, lay_first)?;
                let w = tensor(&[3, 2, 3, 3], dt_second, lay_second)?;
                crate::conv2d(&x, &w, 1, 1, 1, 1)
            }
            Entry::LayerNorm | Entry::RmsNorm => {
                // x (2, 3, 8) and weight (8,) as given; a bias of x's
                // dtype, so the weight's dtype is the one that can differ.
                let x = tensor(&[2, 3, 8], dt_first, lay_first)?;
                let w = tensor(&[2, 8], dt_second, lay_second).and_then(|w| w.get(0).ok())?;
                let b = tensor(&[8], dt_first, Lay::Contiguous)?;
                if matches!(e, Entry::LayerNorm) {
                    crate::layer_norm(&x, &w, Some(&b), 1e-5)
                } else {
                    crate::rms_norm(&x, &w, Some(&b), 1e-5)
                }
            }
        })
    }

    fn first_ok(e: Entry, dt: CDType) -> bool {
        match e {
            Entry::Conv | Entry::LayerNorm | Entry::RmsNorm => {
                matches!(dt, CDType::F32 | CDType::F16 | CDType::BF16)
            }
            _ => attn_ok(dt),
        }
    }

    /// Every dtype x layout x entry point, on CPU tensors (the checks run
    /// before the op, so no device is needed to see them): a refused
    /// dtype of the first or the second input is the crate's typed error
    /// naming that input, and no preparation point (where a copy may be
    /// made) was reached. The accepted dtypes pass the preparation (at
    /// least one point) and fail later, with the op's "on the CPU".
    #[test]
    fn no_refused_dtype_reaches_a_copy() {
        let mut f8_cases = 0;
        for e in ENTRIES {
            let good = if matches!(e, Entry::Conv | Entry::LayerNorm | Entry::RmsNorm) {
                CDType::F32
            } else {
                CDType::BF16
            };
            for dt in ALL {
                for lay in LAYS {
                    for (first, second, which) in [
                        ((dt, lay), (good, Lay::Contiguous), 0),
                        ((good, Lay::Contiguous), (dt, lay), 1),
                    ] {
                        let before = prepared_count();
                        let Some(r) = call(e, first, second) else {
                            continue;
                        };
                        let passed = prepared_count() - before;
                        f8_cases += usize::from(dt == CDType::F8E4M3);
                        // A first input of an accepted dtype other than
                        // `good` is refused as the second's mismatch.
                        let refused = dt != good;
                        let which = if which == 0 && first_ok(e, dt) {
                            1
                        } else {
                            which
                        };
                        let msg = typed(r.unwrap_err());
                        let ctx = format!("{e:?} {dt:?} {lay:?} input {which}: {msg}");
                        if refused {
                            assert_eq!(passed, 0, "{ctx}");
                            let name = match (e, which) {
                                (Entry::Conv | Entry::LayerNorm | Entry::RmsNorm, 0) => "x dtype",
                                (Entry::Conv, _) => "w dtype (x's)",
                                (Entry::LayerNorm | Entry::RmsNorm, _) => "weight dtype (x's",
                                (_, 0) => "q dtype",
                                (Entry::KvCache | Entry::Paged, _) => "k_cache dtype (q's)",
                                _ => "k dtype (q's)",
                            };
                            assert!(msg.contains(name), "{ctx}");
                        } else {
                            assert!(passed > 0, "{ctx}");
                            assert!(msg.contains("on the CPU"), "{ctx}");
                        }
                    }
                }
            }
        }
        // F8E4M3 (the dtype whose copy is broken on CUDA) was among them.
        assert_eq!(f8_cases, ENTRIES.len() * LAYS.len() * 2);
    }

    /// Side inputs of a refused dtype (slopes f16, sinks F8, a block
    /// table f32 and strided) are refused, typed, before any preparation.
    #[test]
    fn side_inputs_are_checked_before_a_copy() {
        let cpu = &Device::Cpu;
        let q = tensor(&[2, 1, 2, 8], CDType::BF16, Lay::Strided).unwrap();
        let k = tensor(&[3, 4, 2, 8], CDType::BF16, Lay::Strided).unwrap();
        let slopes = Tensor::new(&[[0.5f32, 0.25], [0.5, 0.25]], cpu)
            .unwrap()
            .to_dtype(CDType::F16)
            .unwrap()
            .t()
            .unwrap();
        let sinks = tensor(&[2], CDType::F8E4M3, Lay::Offset).unwrap();
        for (p, name) in [
            (
                AttnParams::new(1.0).alibi_slopes(Some(slopes)),
                "alibi_slopes dtype",
            ),
            (AttnParams::new(1.0).sinks(Some(sinks)), "sinks dtype"),
        ] {
            let before = prepared_count();
            let e = typed(crate::flash_attn_with(&q, &k, &k, &p).unwrap_err());
            assert!(e.contains(name), "{e}");
            assert_eq!(prepared_count(), before, "{e}");
        }
        let table = Tensor::new(&[[0f32, 1.0], [1.0, 2.0]], cpu)
            .unwrap()
            .t()
            .unwrap();
        let lens = Tensor::new(&[3i32, 4], cpu).unwrap();
        let before = prepared_count();
        let e = typed(
            crate::flash_attn_paged(&q, &k, &k, &table, &lens, &AttnParams::new(1.0)).unwrap_err(),
        );
        // q and the caches pass their checks (bf16), the table does not:
        // refused at its own check, before its copy (`flatten_all`).
        assert!(e.contains("block_table dtype"), "{e}");
        assert!(prepared_count() - before <= 2, "{e}");
    }

    proptest! {
        /// Random dtype pairs, layouts and entry points: as
        /// `no_refused_dtype_reaches_a_copy`, never a panic.
        #[test]
        fn any_dtype_and_layout_is_typed(
            e in 0usize..ENTRIES.len(),
            a in 0usize..ALL.len(),
            b in 0usize..ALL.len(),
            la in 0usize..LAYS.len(),
            lb in 0usize..LAYS.len(),
        ) {
            let (e, a, b) = (ENTRIES[e], ALL[a], ALL[b]);
            let before = prepared_count();
            if let Some(r) = call(e, (a, LAYS[la]), (b, LAYS[lb])) {
                let passed = prepared_count() - before;
                let msg = typed(r.unwrap_err());
                let refused = !first_ok(e, a) || a != b;
                prop_assert_eq!(refused, passed == 0, "{:?} {:?} {:?}: {}", e, a, b, msg);
                prop_assert!(refused == msg.contains("dtype"), "{}", msg);
            }
        }
    }
}
