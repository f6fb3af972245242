//! Host tier of the remaining attention options: ALiBi in KV-cache and
//! paged calls. The graphs the entry points run plan for an H200: a
//! decode step, a chunk after a prefix and a call with no causal mask
//! take the per-sequence score bias (`[batch, heads, seq_q, capacity]`
//! f32, no mask of their own: the bias holds it); a causal prefill into
//! empty caches (every length `seq_q`) takes cuDNN's ALiBi, top-left.
//! The native config refuses the slopes where cuDNN's ALiBi is not
//! FlashAttention's (typed).

use candle_core::{DType as CDType, Device, Tensor};
use cudnn::graph::{DiagonalAlignment, Plan, Policy, SdpaConfig, Target};
use cudnn_candle::device::expect_layout;
use cudnn_candle::graphs::{self, bshd, names};
use cudnn_candle::params::{self, Arg, AttnParams};

use super::{contiguous, plans_for_h200};
use crate::support::{TestResult, Trial, host, unit};

fn slopes(h: usize) -> Tensor {
    Tensor::new(
        cudnn::graph::alibi_slopes(h).expect("slopes").as_slice(),
        &Device::Cpu,
    )
    .expect("a tensor")
}

/// The forward graph of `cfg` plans for an H200 with O laid out as the
/// crate allocates it and, with a bias, the bias `[b, h, s_q, s_kv]`.
fn plans_forward(cfg: &SdpaConfig, strides: &[[i64; 4]; 3], what: &str) -> TestResult {
    let target = Target::preset("h200")?;
    let g = graphs::forward(cfg, strides)?;
    let (plan, _) = Plan::build(&g.build()?, &target, &Policy::default())?;
    let od = graphs::dims(cfg)[3];
    expect_layout(plan.io(), names::O, od, bshd(od))?;
    if cfg.bias.is_some() {
        let t = plan
            .io()
            .tensors
            .iter()
            .find(|t| t.name == names::BIAS)
            .ok_or("no bias input")?;
        assert_eq!(
            t.spec.dims(),
            [cfg.batch, cfg.heads, cfg.seq_q, cfg.seq_kv],
            "{what}: bias dims"
        );
    }
    eprintln!("  {what}: workspace {} bytes", plan.workspace_size());
    Ok(())
}

/// `params::kvcache` of q `(b, sq, 8, 128)` against caches `(b, cap, 2, 128)`.
fn kvcache(
    (b, sq, cap): (usize, usize, usize),
    lens: &[u32],
    p: &AttnParams,
) -> cudnn::Result<params::KvCache> {
    let (qd, kd) = ([b, sq, 8, 128], [b, cap, 2, 128]);
    let (qs, ks) = (contiguous(&qd), contiguous(&kd));
    let q = Arg {
        name: "q",
        dims: &qd,
        strides: &qs,
        dtype: CDType::BF16,
    };
    let k = Arg {
        name: "k_cache",
        dims: &kd,
        strides: &ks,
        dtype: CDType::BF16,
    };
    params::kvcache(
        &q,
        &k,
        &Arg {
            name: "v_cache",
            ..k
        },
        lens,
        p,
    )
}

/// `params::paged` of q `(3, sq, 8, 128)` against caches `(40, bs, 2, 128)`.
fn paged(
    sq: usize,
    bs: usize,
    per_seq: usize,
    lens: &[i64],
    p: &AttnParams,
) -> cudnn::Result<params::Paged> {
    let (b, nb) = (3usize, 40usize);
    let (qd, kd) = ([b, sq, 8, 128], [nb, bs, 2, 128]);
    let (qs, ks) = (contiguous(&qd), contiguous(&kd));
    let q = Arg {
        name: "q",
        dims: &qd,
        strides: &qs,
        dtype: CDType::BF16,
    };
    let k = Arg {
        name: "k_cache",
        dims: &kd,
        strides: &ks,
        dtype: CDType::BF16,
    };
    let table: Vec<i64> = (0..b * per_seq).map(|i| (i * 7 % nb) as i64).collect();
    params::paged(
        &q,
        &k,
        &Arg {
            name: "v_cache",
            ..k
        },
        (&[b, per_seq], &table),
        lens,
        p,
    )
}

/// What the entry points pass on when they build the bias: the slopes
/// and the window go into it.
fn bias_params(p: &AttnParams) -> AttnParams {
    p.clone().alibi_slopes(None).window(None, None)
}

/// `params::varlen` of packed q `(total_q, 8, 64)`, k / v `(total_k, 2, 64)`.
fn varlen(cu_q: &[u32], cu_k: &[u32], p: &AttnParams) -> cudnn::Result<params::Varlen> {
    let (qd, kd) = (
        [cu_q[cu_q.len() - 1] as usize, 8, 64],
        [cu_k[cu_k.len() - 1] as usize, 2, 64],
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
    let max = |cu: &[u32]| cu.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(1) as usize;
    params::varlen(
        &q,
        &k,
        &Arg { name: "v", ..k },
        cu_q,
        cu_k,
        max(cu_q),
        max(cu_k),
        p,
    )
}

pub fn trials() -> Vec<Trial> {
    vec![
        host("plan_h200_flash_attn_varlen_sinks_grad", || {
            // The sinks' gradient of a varlen call runs the ragged training
            // forward (its statistics) and the ragged backward with the
            // sinks (constants there): both plan, packed prefill and
            // chunked prefill, causal or not.
            let sinks = Tensor::zeros(8, CDType::F32, &Device::Cpu)?;
            for (cu_q, cu_k, causal) in [
                ([0u32, 5, 7, 16], [0u32, 5, 7, 16], true),
                ([0, 3, 7, 13], [0, 7, 11, 22], false),
                ([0, 3, 7, 13], [0, 7, 11, 22], true),
            ] {
                let p = AttnParams::new(0.125)
                    .causal(causal)
                    .sinks(Some(sinks.clone()));
                let r = varlen(&cu_q, &cu_k, &p)?;
                assert!(r.cfg.sink);
                let [qd, kd, vd, _] = graphs::dims(&r.cfg);
                plans_for_h200(&r.cfg, &[bshd(qd), bshd(kd), bshd(vd)])?;
            }
            // Sinks that track a gradient reach the config only from the
            // KV-cache / paged calls (forward only): refused, typed.
            let var = candle_core::Var::from_tensor(&sinks)?;
            let e = varlen(
                &[0, 5, 7],
                &[0, 5, 7],
                &AttnParams::new(0.1).sinks(Some(var.as_tensor().clone())),
            )
            .expect_err("refused");
            assert!(e.to_string().contains("KV-cache or paged"), "{e}");
            Ok(())
        }),
        host("plan_h200_flash_attn_kvcache_alibi", || {
            let alibi = AttnParams::new(0.088).alibi_slopes(Some(slopes(8)));
            // Score bias: a decode step, a causal chunk after a prefix, a
            // windowed chunk, a call with no mask.
            for (sq, lens, p) in [
                (1usize, vec![1u32, 77, 512, 300], alibi.clone().causal(true)),
                (8, vec![8, 77, 512, 300], alibi.clone().causal(true)),
                (
                    8,
                    vec![8, 77, 512, 300],
                    alibi.clone().window(Some(64), Some(0)),
                ),
                (4, vec![0, 3, 512, 300], alibi.clone()),
                // A decode step with sinks runs on two query rows, no mask.
                (
                    2,
                    vec![2, 77, 512, 300],
                    alibi
                        .clone()
                        .sinks(Some(Tensor::zeros(8, CDType::F32, &Device::Cpu)?)),
                ),
            ] {
                let r = kvcache((4, sq, 512), &lens, &bias_params(&p))?;
                let cfg = cudnn_candle::varlen_bias::with_varlen_bias(r.dense.cfg);
                assert!(cfg.padding && !cfg.alibi && !cfg.is_causal);
                assert_eq!(cfg.sink, p.sinks.is_some());
                plans_forward(&cfg, &r.dense.strides, &format!("kvcache bias s_q {sq}"))?;
            }
            // cuDNN's ALiBi: a causal prefill into empty caches.
            let p = alibi.clone().causal(true);
            let r = kvcache((4, 16, 512), &[16; 4], &p)?;
            assert!(r.dense.cfg.alibi && r.dense.cfg.is_causal && r.dense.cfg.padding);
            assert_eq!(r.dense.cfg.diagonal, DiagonalAlignment::TopLeft);
            plans_forward(&r.dense.cfg, &r.dense.strides, "kvcache native prefill")
        }),
        host("plan_h200_flash_attn_paged_alibi", || {
            let alibi = AttnParams::new(0.088).alibi_slopes(Some(slopes(8)));
            for (sq, bs, per_seq, p) in [
                (1usize, 16usize, 8usize, alibi.clone().causal(true)),
                (8, 32, 4, alibi.clone().causal(true)),
                (2, 64, 2, alibi.clone()),
            ] {
                let cover = (per_seq * bs) as i64;
                let lens = [cover, cover / 2 + 1, sq as i64];
                let r = paged(sq, bs, per_seq, &lens, &bias_params(&p))?;
                let cfg = cudnn_candle::varlen_bias::with_varlen_bias(r.cfg);
                plans_forward(
                    &cfg,
                    &[r.q_strides, r.kv_strides[0], r.kv_strides[1]],
                    &format!("paged bias s_q {sq}, block {bs}"),
                )?;
            }
            let p = alibi.causal(true);
            let r = paged(8, 16, 2, &[8, 8, 8], &p)?;
            assert!(r.cfg.alibi);
            assert_eq!(r.cfg.diagonal, DiagonalAlignment::TopLeft);
            plans_forward(
                &r.cfg,
                &[r.q_strides, r.kv_strides[0], r.kv_strides[1]],
                "paged native prefill",
            )
        }),
        unit(
            "cache_alibi_other_forms_are_refused_by_the_native_config",
            || {
                // Where cuDNN's ALiBi is not FlashAttention's (a length other
                // than seq_q, no causal mask) the config with the slopes is
                // refused, typed, naming them: the entry points build the bias.
                let s = AttnParams::new(0.1).alibi_slopes(Some(slopes(8)));
                for (lens, p) in [
                    (vec![8u32, 9, 8, 8], s.clone().causal(true)),
                    (vec![8; 4], s.clone()),
                ] {
                    let e = kvcache((4, 8, 64), &lens, &p).expect_err("refused");
                    assert!(matches!(e, cudnn::Error::Unsupported { .. }), "{e}");
                    assert!(e.to_string().contains("alibi_slopes"), "{e}");
                }
                let e = paged(2, 16, 2, &[2, 3, 2], &s.clone().causal(true)).expect_err("refused");
                assert!(matches!(e, cudnn::Error::Unsupported { .. }), "{e}");
                // Without slopes the same lengths keep the bottom-right diagonal.
                let r = kvcache((4, 8, 64), &[8; 4], &AttnParams::new(0.1).causal(true))?;
                assert_eq!(r.dense.cfg.diagonal, DiagonalAlignment::BottomRight);
                Ok(())
            },
        ),
    ]
}
