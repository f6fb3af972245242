//! Host tier (cuDNN's libraries, no device): every graph the attention
//! functions run plans for an H200 (`Target::preset("h200")`, the crate's
//! driver stub standing in), and its output layout is the one the crate
//! allocates; the functions' refusals on the host are typed.

// The trials are plain functions: clippy's test allowances do not reach
// them (as in the crate's own test binaries).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "host/attn_options.rs"]
mod attn_options;
#[path = "../examples/candle_transformer_block/block.rs"]
mod block;
#[path = "host/conv_norm.rs"]
mod conv_norm;
#[path = "host/example_block.rs"]
mod example_block;
#[path = "host/gemm.rs"]
mod gemm;
mod support;
#[path = "host/varlen_alibi.rs"]
mod varlen_alibi;

use candle_core::{DType as CDType, Device, Tensor};
use cudnn::graph::{Plan, Policy, SdpaConfig, Target};
use cudnn_candle::device::expect_layout;
use cudnn_candle::graphs::{self, bshd, names};
use cudnn_candle::params::{self, Arg, AttnParams};
use support::{TestResult, host, run, typed, unit};

fn contiguous(d: &[usize]) -> Vec<usize> {
    let mut s = vec![1; d.len()];
    for i in (0..d.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * d[i + 1];
    }
    s
}

/// A dense call's config: q `(b, sq, h, d)`, k / v `(b, skv, hkv, d)`, bf16.
fn dense(
    b: usize,
    sq: usize,
    skv: usize,
    h: usize,
    hkv: usize,
    d: usize,
    p: &AttnParams,
) -> params::Dense {
    let (qd, kd) = ([b, sq, h, d], [b, skv, hkv, d]);
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
    params::dense(&q, &k, &v, p).expect("a valid call")
}

/// Plan the forward (inference and training) and the backward of `cfg`
/// for an H200; check the outputs' layouts.
fn plans_for_h200(cfg: &SdpaConfig, strides: &[[i64; 4]; 3]) -> TestResult {
    let target = Target::preset("h200")?;
    let [qd, kd, vd, od] = graphs::dims(cfg);
    for training in [false, true] {
        let c = cfg.clone().training(training);
        let g = graphs::forward(&c, strides)?;
        let (plan, _) = Plan::build(&g.build()?, &target, &Policy::default())?;
        expect_layout(plan.io(), names::O, od, bshd(od))?;
        eprintln!(
            "  forward (training {training}): workspace {} bytes",
            plan.workspace_size()
        );
    }
    let c = cfg.clone().training(true);
    let g = graphs::backward(&c)?;
    let (plan, _) = Plan::build(&g.build()?, &target, &Policy::default())?;
    for (n, d) in [(names::DQ, qd), (names::DK, kd), (names::DV, vd)] {
        expect_layout(plan.io(), n, d, bshd(d))?;
    }
    eprintln!("  backward: workspace {} bytes", plan.workspace_size());
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn dense_case(
    name: &str,
    b: usize,
    sq: usize,
    skv: usize,
    h: usize,
    hkv: usize,
    d: usize,
    p: AttnParams,
) -> support::Trial {
    host(name, move || {
        let r = dense(b, sq, skv, h, hkv, d, &p);
        plans_for_h200(&r.cfg, &r.strides)
    })
}

fn main() {
    let s = 0.125f32;
    let mut trials = vec![
        dense_case(
            "plan_h200_flash_attn",
            2,
            128,
            128,
            8,
            8,
            64,
            AttnParams::new(s),
        ),
        dense_case(
            "plan_h200_flash_attn_causal",
            2,
            128,
            128,
            8,
            8,
            64,
            AttnParams::new(s).causal(true),
        ),
        dense_case(
            "plan_h200_flash_attn_gqa_causal",
            1,
            256,
            256,
            16,
            4,
            128,
            AttnParams::new(s).causal(true),
        ),
        dense_case(
            "plan_h200_flash_attn_decode_step",
            4,
            1,
            300,
            8,
            2,
            128,
            AttnParams::new(s).causal(true),
        ),
        dense_case(
            "plan_h200_flash_attn_chunked_prefill",
            1,
            64,
            320,
            8,
            8,
            64,
            AttnParams::new(s).causal(true),
        ),
        dense_case(
            "plan_h200_flash_attn_windowed",
            2,
            256,
            256,
            8,
            8,
            64,
            AttnParams::new(s).window(Some(63), Some(0)),
        ),
        dense_case(
            "plan_h200_flash_attn_softcap",
            2,
            128,
            128,
            8,
            8,
            128,
            AttnParams::new(s).causal(true).softcap(Some(50.0)),
        ),
        host("plan_h200_flash_attn_strided_q_from_fused_qkv", || {
            // q narrowed out of (b, s, 3*h, d): the parent's strides.
            let (b, sq, h, d) = (2usize, 64usize, 8usize, 64usize);
            let st = [sq * 3 * h * d, 3 * h * d, d, 1];
            let dims = [b, sq, h, d];
            let q = Arg {
                name: "q",
                dims: &dims,
                strides: &st,
                dtype: CDType::F16,
            };
            let r = params::dense(&q, &q, &q, &AttnParams::new(0.125).causal(true))?;
            assert!(params::bshd_ordered(&dims, &st));
            plans_for_h200(&r.cfg, &r.strides)
        }),
        host("plan_h200_flash_attn_varlen", || {
            let (qd, kd) = ([40usize, 8, 64], [40usize, 8, 64]);
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
            let r = params::varlen(
                &q,
                &k,
                &v,
                &[0, 5, 6, 40],
                &[0, 5, 6, 40],
                34,
                34,
                &AttnParams::new(0.125).causal(true),
            )?;
            let [qd, kd, vd, _] = graphs::dims(&r.cfg);
            plans_for_h200(&r.cfg, &[bshd(qd), bshd(kd), bshd(vd)])
        }),
        host("plan_h200_flash_attn_varlen_q_ne_k", || {
            // Decode-like (one query per sequence, keys of other lengths)
            // and chunked prefill (fewer queries than keys), GQA, causal:
            // the ragged offsets of Q / O follow the query lengths, K / V
            // the key lengths, and the diagonal is bottom-right per sequence.
            for (cu_q, cu_k, hkv) in [
                (vec![0u32, 1, 2, 3], vec![0u32, 17, 22, 62], 2usize),
                (vec![0, 3, 11, 12], vec![0, 10, 18, 51], 8),
            ] {
                let (qd, kd) = (
                    [cu_q[cu_q.len() - 1] as usize, 8, 64],
                    [cu_k[cu_k.len() - 1] as usize, hkv, 64],
                );
                let (qs, ks) = (contiguous(&qd), contiguous(&kd));
                let q = Arg {
                    name: "q",
                    dims: &qd,
                    strides: &qs,
                    dtype: CDType::F16,
                };
                let k = Arg {
                    name: "k",
                    dims: &kd,
                    strides: &ks,
                    dtype: CDType::F16,
                };
                let v = Arg { name: "v", ..k };
                let lens = |cu: &[u32]| cu.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(1);
                let (mq, mk) = (lens(&cu_q) as usize, lens(&cu_k) as usize);
                let r = params::varlen(
                    &q,
                    &k,
                    &v,
                    &cu_q,
                    &cu_k,
                    mq,
                    mk,
                    &AttnParams::new(0.125).causal(true),
                )?;
                assert_eq!(r.cfg.diagonal, cudnn::graph::DiagonalAlignment::BottomRight);
                assert_eq!((r.cfg.seq_q, r.cfg.seq_kv), (mq as i64, mk as i64));
                let [qd, kd, vd, _] = graphs::dims(&r.cfg);
                plans_for_h200(&r.cfg, &[bshd(qd), bshd(kd), bshd(vd)])?;
            }
            Ok(())
        }),
        host("plan_h200_flash_attn_kvcache_decode", || {
            let (qd, kd) = ([4usize, 1, 8, 128], [4usize, 512, 2, 128]);
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
            let r = params::kvcache(
                &q,
                &k,
                &v,
                &[1, 77, 512, 300],
                &AttnParams::new(0.125).causal(true),
            )?;
            assert!(r.dense.cfg.padding);
            assert_eq!(r.lens_kv, [1, 77, 512, 300]);
            let target = Target::preset("h200")?;
            let g = graphs::forward(&r.dense.cfg, &r.dense.strides)?;
            let (plan, _) = Plan::build(&g.build()?, &target, &Policy::default())?;
            let od = graphs::dims(&r.dense.cfg)[3];
            expect_layout(plan.io(), names::O, od, bshd(od))?;
            let e =
                params::kvcache(&q, &k, &v, &[1, 2, 513, 3], &AttnParams::new(0.125)).unwrap_err();
            assert!(
                matches!(&e, cudnn::Error::InvalidArgument { arg, .. } if arg == "cache_seqlens[2]"),
                "{e}"
            );
            Ok(())
        }),
        host("plan_h200_flash_attn_paged_decode_and_prefill", || {
            // vLLM's layout: caches (num_blocks, block_size, kv_heads, d),
            // a block table (batch, max_blocks_per_seq); decode (one query)
            // and a chunked prefill (8 queries) against the same cache.
            let target = Target::preset("h200")?;
            // A decode step with sinks runs on two query rows.
            for (sq, bs, per_seq, sink) in [
                (1usize, 16usize, 8usize, false),
                (8, 32, 4, false),
                (1, 64, 2, false),
                (2, 16, 8, true),
            ] {
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
                let v = Arg {
                    name: "v_cache",
                    ..k
                };
                let table: Vec<i64> = (0..b * per_seq).map(|i| (i * 7 % nb) as i64).collect();
                let cover = (per_seq * bs) as i64;
                let lens = [cover, cover / 2 + 1, sq as i64];
                let r = params::paged(
                    &q,
                    &k,
                    &v,
                    (&[b, per_seq], &table),
                    &lens,
                    &AttnParams::new(0.088).causal(true).sinks(
                        sink.then(|| Tensor::zeros(8, CDType::F32, &Device::Cpu))
                            .transpose()?,
                    ),
                )?;
                assert_eq!(r.cfg.sink, sink);
                let g = graphs::forward(&r.cfg, &[r.q_strides, r.kv_strides[0], r.kv_strides[1]])?;
                let (plan, _) = Plan::build(&g.build()?, &target, &Policy::default())?;
                let od = graphs::dims(&r.cfg)[3];
                expect_layout(plan.io(), names::O, od, bshd(od))?;
                for n in [names::PAGE_TABLE_K, names::PAGE_TABLE_V] {
                    let t = plan.io().tensors.iter().find(|t| t.name == n).ok_or(n)?;
                    assert_eq!(t.spec.dims(), [b as i64, 1, per_seq as i64, 1], "{n}");
                }
                eprintln!(
                    "  paged s_q {sq}, block {bs}, {per_seq} blocks/seq: workspace {} bytes",
                    plan.workspace_size()
                );
            }
            Ok(())
        }),
        host("plan_h200_flash_attn_alibi", || {
            let slopes = Tensor::new(cudnn::graph::alibi_slopes(8)?.as_slice(), &Device::Cpu)?;
            for p in [
                AttnParams::new(0.125).causal(true),
                AttnParams::new(0.125).window(Some(31), Some(0)),
            ] {
                let r = dense(2, 128, 128, 8, 8, 64, &p.alibi_slopes(Some(slopes.clone())));
                assert!(r.cfg.alibi);
                plans_for_h200(&r.cfg, &r.strides)?;
                let g = graphs::forward(&r.cfg, &r.strides)?;
                let (plan, _) =
                    Plan::build(&g.build()?, &Target::preset("h200")?, &Policy::default())?;
                let t = plan
                    .io()
                    .tensors
                    .iter()
                    .find(|t| t.name == names::ALIBI)
                    .ok_or("slopes")?;
                assert_eq!(t.spec.dims(), [1, 8, 1, 1]);
            }
            Ok(())
        }),
        host("plan_h200_flash_attn_alibi_as_bias", || {
            // ALiBi that cuDNN's own cannot compute (decode, chunked
            // prefill, not causal): no cuDNN mask, a (1, H, S_q, S_kv) f32
            // bias holding the ALiBi terms and the mask.
            for (b, sq, skv, hkv) in [
                (4usize, 1usize, 300usize, 2usize),
                (1, 16, 48, 8),
                (2, 48, 48, 8),
            ] {
                let r = dense(b, sq, skv, 8, hkv, 64, &AttnParams::new(0.125));
                let cfg = params::alibi::with_alibi_bias(r.cfg);
                assert_eq!(cfg.bias_spec()?.dims(), [1, 8, sq as i64, skv as i64]);
                plans_for_h200(&cfg, &r.strides)?;
                let g = graphs::forward(&cfg, &r.strides)?;
                let (plan, _) =
                    Plan::build(&g.build()?, &Target::preset("h200")?, &Policy::default())?;
                assert!(plan.io().tensors.iter().any(|t| t.name == names::BIAS));
            }
            Ok(())
        }),
        host("plan_h200_flash_attn_sinks_decode_padded", || {
            // A decode step with sinks runs with two query rows.
            let sinks = Tensor::zeros(8, CDType::F32, &Device::Cpu)?;
            let p = AttnParams::new(0.125).causal(true).sinks(Some(sinks));
            let r = dense(4, 2, 300, 8, 2, 128, &p);
            assert_eq!(r.cfg.diagonal, cudnn::graph::DiagonalAlignment::BottomRight);
            let target = Target::preset("h200")?;
            let g = graphs::forward(&r.cfg, &r.strides)?;
            let (plan, _) = Plan::build(&g.build()?, &target, &Policy::default())?;
            let od = graphs::dims(&r.cfg)[3];
            expect_layout(plan.io(), names::O, od, bshd(od))?;
            Ok(())
        }),
        host("plan_h200_flash_attn_sinks_decode_one_key", || {
            // A sinks decode step on a one-key cache (seq_kv = 1), causal or
            // left-windowed: FlashAttention takes it (one query row: causal
            // changes nothing). As padded to two rows with the mask kept,
            // cuDNN refuses it (bottom-right causal with seq_q 2 > seq_kv 1);
            // with the single row's mask (single_row_mask) it plans, with
            // and without the ALiBi score bias.
            let sinks = Tensor::zeros(8, CDType::F32, &Device::Cpu)?;
            let target = Target::preset("h200")?;
            for p in [
                AttnParams::new(0.125).causal(true),
                AttnParams::new(0.125).window(Some(0), None),
                AttnParams::new(0.125).window(Some(0), Some(0)),
            ] {
                let p = p.sinks(Some(sinks.clone()));
                let kept = dense(4, 2, 1, 8, 2, 64, &p);
                let refused = graphs::forward(&kept.cfg, &kept.strides)
                    .and_then(|g| g.build())
                    .and_then(|g| Plan::build(&g, &target, &Policy::default()));
                match refused {
                    Err(e) => eprintln!("  unreduced mask refused: {e}"),
                    Ok(_) => panic!("the unreduced mask plans: {p:?}"),
                }
                let reduced = params::single_row_mask(&p, 1);
                assert_eq!(
                    (reduced.window_size_left, reduced.window_size_right),
                    (None, None)
                );
                let r = dense(4, 2, 1, 8, 2, 64, &reduced);
                assert!(r.cfg.sink);
                plans_for_h200(&r.cfg, &r.strides)?;
                let cfg = params::alibi::with_alibi_bias(r.cfg.clone());
                assert_eq!(cfg.bias_spec()?.dims(), [1, 8, 2, 1]);
                plans_for_h200(&cfg, &r.strides)?;
            }
            Ok(())
        }),
        host("plan_h200_flash_attn_sinks_with_alibi", || {
            // Sinks with cuDNN's own ALiBi (causal, seq_q == seq_kv) and
            // with the ALiBi score bias (chunked prefill): both plan,
            // forward and backward.
            let sinks = Tensor::zeros(8, CDType::F32, &Device::Cpu)?;
            let slopes = Tensor::ones(8, CDType::F32, &Device::Cpu)?;
            let p = AttnParams::new(0.125)
                .causal(true)
                .sinks(Some(sinks.clone()))
                .alibi_slopes(Some(slopes));
            let r = dense(2, 48, 48, 8, 2, 64, &p);
            assert!(r.cfg.sink && r.cfg.alibi);
            plans_for_h200(&r.cfg, &r.strides)?;
            let p = AttnParams::new(0.125).sinks(Some(sinks));
            let r = dense(1, 16, 40, 8, 8, 64, &p);
            let cfg = params::alibi::with_alibi_bias(r.cfg);
            assert!(cfg.sink);
            plans_for_h200(&cfg, &r.strides)?;
            Ok(())
        }),
        host("dense_causal_rows_without_keys_refused_typed", || {
            // Dense, causal, seq_q 8 > seq_kv 4: FlashAttention's rows 0..3
            // see no key (it writes zeros there); cuDNN's planning refuses
            // it, typed (Unsupported), before any GPU work.
            let r = dense(1, 8, 4, 8, 8, 64, &AttnParams::new(0.125).causal(true));
            let e = graphs::forward(&r.cfg, &r.strides)
                .and_then(|g| g.build())
                .and_then(|g| Plan::build(&g, &Target::preset("h200")?, &Policy::default()))
                .err()
                .ok_or("planned")?;
            assert!(matches!(e, cudnn::Error::Unsupported { .. }), "{e}");
            Ok(())
        }),
        host("plan_h200_flash_attn_sinks", || {
            let sinks = Tensor::zeros(8, CDType::F32, &Device::Cpu)?;
            for p in [
                AttnParams::new(0.125).causal(true),
                AttnParams::new(0.125).window(Some(63), Some(0)),
                AttnParams::new(0.125),
            ] {
                let r = dense(2, 128, 128, 8, 2, 64, &p.sinks(Some(sinks.clone())));
                assert!(r.cfg.sink);
                plans_for_h200(&r.cfg, &r.strides)?;
            }
            Ok(())
        }),
        unit("matmul_bias_act_cpu_and_shapes_refused_typed", || {
            let a = Tensor::zeros((4, 8), CDType::F32, &Device::Cpu)?;
            let b = Tensor::zeros((8, 2), CDType::F32, &Device::Cpu)?;
            let e =
                cudnn_candle::matmul_bias_act(&a, &b, None, cudnn_candle::MatmulActivation::Relu)
                    .expect_err("CPU tensors");
            assert!(
                matches!(typed(&e), Some(cudnn::Error::Unsupported { .. })),
                "{e}"
            );
            let v = Tensor::zeros(8, CDType::F32, &Device::Cpu)?;
            let e =
                cudnn_candle::matmul_bias_act(&v, &b, None, cudnn_candle::MatmulActivation::None)
                    .expect_err("rank 1");
            assert!(
                matches!(typed(&e), Some(cudnn::Error::InvalidArgument { arg, .. }) if arg == "a, b ranks"),
                "{e}"
            );
            Ok(())
        }),
        unit("cpu_tensors_are_refused_typed", || {
            let q = Tensor::zeros((1, 4, 2, 8), CDType::BF16, &Device::Cpu)?;
            let e = cudnn_candle::flash_attn(&q, &q, &q, 1.0, true).expect_err("CPU tensors");
            match typed(&e) {
                Some(cudnn::Error::Unsupported { what, .. }) => {
                    assert!(what.contains("on the CPU"), "{what}")
                }
                other => panic!("not the typed refusal: {other:?} ({e})"),
            }
            Ok(())
        }),
        unit("varlen_seqlens_dtype_is_named", || {
            let q = Tensor::zeros((4, 2, 8), CDType::BF16, &Device::Cpu)?;
            let cu = Tensor::new(&[0i64, 4], &Device::Cpu)?;
            let cu32 = Tensor::new(&[0u32, 4], &Device::Cpu)?;
            let e = cudnn_candle::flash_attn_varlen(&q, &q, &q, &cu, &cu32, 4, 4, 1.0, false)
                .expect_err("i64 offsets");
            match typed(&e) {
                Some(cudnn::Error::InvalidArgument { arg, .. }) => assert_eq!(arg, "seqlens_q"),
                other => panic!("not the typed refusal: {other:?} ({e})"),
            }
            Ok(())
        }),
    ];
    trials.push(unit("default_scale_is_the_callers", || {
        // FlashAttention takes the scale from the caller: nothing defaults.
        let r = dense(1, 8, 8, 2, 2, 64, &AttnParams::new(0.3));
        assert_eq!(r.cfg.scale, Some(f64::from(0.3f32)));
        Ok(())
    }));
    trials.extend(conv_norm::trials());
    trials.extend(conv_norm::nhwc_fusion());
    trials.extend(conv_norm::norm_trials());
    trials.extend(conv_norm::refusal_trials());
    trials.extend(example_block::trials());
    trials.extend(gemm::trials());
    trials.extend(varlen_alibi::trials());
    trials.extend(attn_options::trials());
    run(trials);
}
