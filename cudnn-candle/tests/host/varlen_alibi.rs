//! Host tier of ALiBi in varlen calls: the graphs of a causal packed
//! prefill (every sequence as many keys as queries) with cuDNN's ALiBi
//! plan for an H200 (forward, training forward, backward), and the calls
//! cuDNN's ALiBi cannot compute exactly plan with a per-sequence score
//! bias instead (the native config refuses them, typed).

use candle_core::{DType as CDType, Device, Tensor};
use cudnn::graph::DiagonalAlignment;
use cudnn_candle::graphs::{self, bshd};
use cudnn_candle::params::{self, Arg, AttnParams};

use super::{contiguous, plans_for_h200};
use crate::support::{Trial, host, unit};

fn slopes(h: usize) -> Tensor {
    Tensor::new(
        cudnn::graph::alibi_slopes(h).expect("slopes").as_slice(),
        &Device::Cpu,
    )
    .expect("a tensor")
}

/// `params::varlen` of packed q `(total_q, h, d)`, k / v `(total_k, hkv, d)`.
fn varlen(
    cu_q: &[u32],
    cu_k: &[u32],
    h: usize,
    hkv: usize,
    p: &AttnParams,
) -> cudnn::Result<params::Varlen> {
    let (qd, kd) = (
        [cu_q[cu_q.len() - 1] as usize, h, 64],
        [cu_k[cu_k.len() - 1] as usize, hkv, 64],
    );
    let (qs, ks) = (contiguous(&qd), contiguous(&kd));
    let q = Arg {
        name: "q",
        dims: &qd,
        strides: &qs,
        dtype: CDType::BF16,
    };
    let k = Arg {
        name: "k",
        dims: &kd,
        strides: &ks,
        dtype: CDType::BF16,
    };
    let v = Arg { name: "v", ..k };
    let max = |cu: &[u32]| cu.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(1) as usize;
    params::varlen(&q, &k, &v, cu_q, cu_k, max(cu_q), max(cu_k), p)
}

pub fn trials() -> Vec<Trial> {
    vec![
        host("plan_h200_flash_attn_varlen_alibi_as_bias", || {
            // Chunked prefill (fewer queries than keys) and a call that is
            // not causal: the slopes and the mask go into a per-sequence
            // `[B, H, max_q, max_k]` f32 bias over the ragged tensors.
            for (cu_q, cu_k, causal) in [
                ([0u32, 5, 6, 40], [0u32, 9, 12, 50], true),
                ([0, 5, 6, 40], [0, 5, 6, 40], false),
            ] {
                let p = AttnParams::new(0.125)
                    .causal(causal)
                    .alibi_slopes(Some(slopes(8)));
                let lens = |cu: &[u32]| {
                    cu.windows(2)
                        .map(|w| (w[1] - w[0]) as i32)
                        .collect::<Vec<_>>()
                };
                let max =
                    |cu: &[u32]| cu.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(1) as usize;
                assert!(cudnn_candle::varlen_bias::needs_bias(
                    &p,
                    &lens(&cu_q),
                    &lens(&cu_k),
                    (max(&cu_q), max(&cu_k))
                )?);
                let r = varlen(
                    &cu_q,
                    &cu_k,
                    8,
                    8,
                    &p.clone().alibi_slopes(None).window(None, None),
                )?;
                let cfg = cudnn_candle::varlen_bias::with_varlen_bias(r.cfg);
                assert!(!cfg.alibi);
                let [qd, kd, vd, _] = graphs::dims(&cfg);
                plans_for_h200(&cfg, &[bshd(qd), bshd(kd), bshd(vd)])?;
            }
            Ok(())
        }),
        host("plan_h200_flash_attn_varlen_alibi_causal", || {
            let cu = [0u32, 5, 6, 40];
            let p = AttnParams::new(0.125)
                .causal(true)
                .alibi_slopes(Some(slopes(8)));
            let r = varlen(&cu, &cu, 8, 8, &p)?;
            assert!(r.cfg.alibi, "cuDNN's ALiBi");
            assert_eq!(r.cfg.diagonal, DiagonalAlignment::TopLeft);
            let [qd, kd, vd, _] = graphs::dims(&r.cfg);
            plans_for_h200(&r.cfg, &[bshd(qd), bshd(kd), bshd(vd)])
        }),
        host("plan_h200_flash_attn_varlen_alibi_windowed_gqa", || {
            let cu = [0u32, 64, 65, 130, 200];
            let p = AttnParams::new(0.125)
                .window(Some(16), Some(0))
                .alibi_slopes(Some(slopes(16)));
            let r = varlen(&cu, &cu, 16, 4, &p)?;
            assert!(r.cfg.alibi);
            assert_eq!(r.cfg.diagonal, DiagonalAlignment::TopLeft);
            let [qd, kd, vd, _] = graphs::dims(&r.cfg);
            plans_for_h200(&r.cfg, &[bshd(qd), bshd(kd), bshd(vd)])
        }),
        unit(
            "varlen_alibi_other_forms_are_refused_by_the_native_config",
            || {
                // A sequence with fewer queries than keys (chunked prefill),
                // and a call that is not causal: cuDNN's ALiBi is not
                // FlashAttention's there, so the config with the slopes is
                // refused, typed (the entry points build the bias instead).
                let s = AttnParams::new(0.125).alibi_slopes(Some(slopes(8)));
                for (cu_q, cu_k, p) in [
                    ([0u32, 5, 6, 40], [0u32, 5, 9, 43], s.clone().causal(true)),
                    ([0, 5, 6, 40], [0, 5, 6, 40], s.clone()),
                ] {
                    let e = varlen(&cu_q, &cu_k, 8, 8, &p).expect_err("refused");
                    assert!(
                        matches!(e, cudnn::Error::Unsupported { .. }),
                        "not the typed refusal: {e}"
                    );
                    assert!(e.to_string().contains("alibi_slopes"), "{e}");
                }
                // Without slopes the same calls keep their bottom-right diagonal.
                let r = varlen(
                    &[0, 5, 6, 40],
                    &[0, 5, 6, 40],
                    8,
                    8,
                    &AttnParams::new(0.1).causal(true),
                )?;
                assert_eq!(r.cfg.diagonal, DiagonalAlignment::BottomRight);
                Ok(())
            },
        ),
    ]
}
