//! The `candle_transformer_block` example's parts that need no GPU: its
//! reference attention against values worked out by hand, its paged cache
//! against plain concatenation, its tolerances against the rounding error
//! of the same block computed on the CPU in the GPU's types, and its
//! attention graphs planned for an H200.

use candle_core::{DType, Device, Tensor};

use super::block::{self, B, CAP, HD, HKV, S, STEPS};
use super::support::{TestResult, Trial, host, unit};

fn t4(v: &[f32], dims: (usize, usize, usize, usize)) -> candle_core::Result<Tensor> {
    Tensor::from_vec(v.to_vec(), dims, &Device::Cpu)
}

fn near(got: f32, want: f64, what: &str) -> TestResult {
    if (f64::from(got) - want).abs() > 1e-6 {
        return Err(format!("{what}: {got} != {want}").into());
    }
    Ok(())
}

fn max_abs(a: &Tensor, b: &Tensor) -> candle_core::Result<f32> {
    (a - b)?.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()
}

/// How many values of `pool` are the filler (noise is never exactly it).
fn fill_count(pool: &Tensor) -> candle_core::Result<usize> {
    let v = pool.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?;
    Ok(v.iter().filter(|&&x| f64::from(x) == block::FILL).count())
}

pub fn trials() -> Vec<Trial> {
    vec![
        unit("example_block_reference_attention_by_hand", || {
            // Two query heads sharing one KV head (d = 1, scale 1):
            // query 0 sees key 0 only; query 1 both keys, with scores
            // (q·k0, q·k1) = (0, q): softmax weight p = e^q / (1 + e^q)
            // on v1 = 3, 1 - p on v0 = 1.
            let q = t4(&[1.0, -1.0, 2.0, 0.5], (1, 2, 2, 1))?;
            let k = t4(&[0.0, 1.0], (1, 2, 1, 1))?;
            let v = t4(&[1.0, 3.0], (1, 2, 1, 1))?;
            let o = block::reference_attention(&q, &k, &v, 0)?
                .flatten_all()?
                .to_vec1::<f32>()?;
            let w = |s: f64| 1.0 + 2.0 * s.exp() / (1.0 + s.exp());
            for (got, want, what) in [
                (o[0], 1.0, "query 0 head 0"),
                (o[1], 1.0, "query 0 head 1"),
                (o[2], w(2.0), "query 1 head 0"),
                (o[3], w(0.5), "query 1 head 1"),
            ] {
                near(got, want, what)?;
            }
            // One query at offset 1 (a decode step) sees both keys; d = 4
            // scales the scores by 1/2: (0, 4 / 2).
            let q = t4(&[1.0; 4], (1, 1, 1, 4))?;
            let k = t4(&[0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0], (1, 2, 1, 4))?;
            let v = t4(&[1.0, 1.0, 1.0, 1.0, 3.0, 3.0, 3.0, 3.0], (1, 2, 1, 4))?;
            let o = block::reference_attention(&q, &k, &v, 1)?
                .flatten_all()?
                .to_vec1::<f32>()?;
            for x in o {
                near(x, w(2.0), "decode query")?;
            }
            // The same query at offset 0 sees key 0 alone.
            let o = block::reference_attention(&q, &k, &v, 0)?
                .flatten_all()?
                .to_vec1::<f32>()?;
            for x in o {
                near(x, 1.0, "offset 0")?;
            }
            // KV heads that do not divide the query heads (0 among them)
            // are an error, not a division by zero.
            for hk in [0, 3] {
                let k = Tensor::zeros((1, 2, hk, 4), DType::F32, &Device::Cpu)?;
                let q = Tensor::zeros((1, 1, 2, 4), DType::F32, &Device::Cpu)?;
                let e = block::reference_attention(&q, &k, &k, 1)
                    .err()
                    .ok_or("accepted")?;
                assert!(e.to_string().contains(&format!("{hk} KV heads")), "{e}");
            }
            Ok(())
        }),
        unit("example_block_paged_cache_is_the_concatenation", || {
            // Written token by token through a permuted table, read back
            // through it: exactly the appended tensors, concatenated, each
            // sequence with its own length; every slot not written still
            // holds the filler.
            let mut cache = block::PagedCache::new(B, CAP, DType::F32, &Device::Cpu)?;
            let ids: Vec<usize> = cache.host_table.iter().map(|&b| b as usize).collect();
            let mut sorted = ids.clone();
            sorted.sort_unstable();
            assert_eq!(
                sorted,
                (0..ids.len()).collect::<Vec<_>>(),
                "not a permutation"
            );
            assert_ne!(sorted, ids, "the blocks are in order: the case tests less");
            assert_ne!(block::PROMPT_LENS[0], block::PROMPT_LENS[1]);
            let (k0, v0) = (
                block::noise(&[B, S, HKV, HD], 11)?,
                block::noise(&[B, S, HKV, HD], 12)?,
            );
            cache.append_first(&k0, &v0, &block::PROMPT_LENS)?;
            let mut parts: Vec<(Vec<Tensor>, Vec<Tensor>)> = (0..B)
                .map(|i| -> candle_core::Result<_> {
                    let n = block::PROMPT_LENS[i];
                    Ok((
                        vec![k0.narrow(0, i, 1)?.narrow(1, 0, n)?],
                        vec![v0.narrow(0, i, 1)?.narrow(1, 0, n)?],
                    ))
                })
                .collect::<candle_core::Result<_>>()?;
            for step in 0..STEPS {
                let (k, v) = (
                    block::noise(&[B, 1, HKV, HD], 20 + step as u64)?,
                    block::noise(&[B, 1, HKV, HD], 40 + step as u64)?,
                );
                cache.append(&k, &v)?;
                for (i, (ks, vs)) in parts.iter_mut().enumerate() {
                    ks.push(k.narrow(0, i, 1)?);
                    vs.push(v.narrow(0, i, 1)?);
                    let (gk, gv) = cache.gathered(i)?;
                    for (got, parts) in [(gk, &*ks), (gv, &*vs)] {
                        assert_eq!(max_abs(&got, &Tensor::cat(parts, 1)?)?, 0.0, "step {step}");
                    }
                }
                let written: usize = cache.lens.iter().sum();
                assert_eq!(fill_count(&cache.k)?, (B * CAP - written) * HKV * HD);
                assert_eq!(fill_count(&cache.v)?, (B * CAP - written) * HKV * HD);
            }
            let want: Vec<usize> = block::PROMPT_LENS.iter().map(|n| n + STEPS).collect();
            assert_eq!(cache.lens, want);
            assert_eq!(cache.lens[0], CAP);
            let one = block::noise(&[B, 1, HKV, HD], 99)?;
            assert!(cache.append(&one, &one).is_err(), "past the capacity");
            assert_eq!(cache.lens, want, "a refused append wrote nothing");
            // The table as cuDNN reads it: (batch, per_seq) i32.
            assert_eq!(cache.lens(&Device::Cpu)?.to_vec1::<i32>()?, [40, 35]);
            Ok(())
        }),
        unit("example_block_paged_cache_property", || {
            // Any batch, capacity and run of appends (each sequence its
            // own count): what is read back through the table is the
            // concatenation of what was appended to that sequence, and
            // nothing else was written (the filler count); an append past
            // the capacity of any sequence is refused and writes nothing.
            use proptest::prelude::{Strategy, prop_oneof};
            use proptest::test_runner::{Config, TestCaseError, TestRunner};
            let mut runner = TestRunner::new(Config {
                cases: 64,
                failure_persistence: None,
                ..Config::default()
            });
            // Batch 0 and capacities of 0 or not a multiple of the block
            // drawn too: those are errors (a batch of 0 or a capacity
            // under one block once looped forever).
            let strategy = (
                0usize..=3,
                prop_oneof![
                    (1usize..=5).prop_map(|n| n * block::BLOCK),
                    0usize..=6 * block::BLOCK
                ],
                proptest::collection::vec(proptest::collection::vec(0usize..=12, 3), 1..8),
            );
            runner
                .run(&strategy, |(batch, cap, appends)| {
                    let fail = |e: candle_core::Error| TestCaseError::fail(e.to_string());
                    let made = block::PagedCache::new(batch, cap, DType::F32, &Device::Cpu);
                    if batch == 0 || cap == 0 || cap % block::BLOCK != 0 {
                        let e = match made {
                            Ok(_) => return Err(TestCaseError::fail("accepted")),
                            Err(e) => e.to_string(),
                        };
                        proptest::prop_assert!(
                            e.contains(&format!("batch {batch} and capacity {cap}")),
                            "{}",
                            e
                        );
                        return Ok(());
                    }
                    let mut cache = made.map_err(fail)?;
                    let mut parts: Vec<Vec<Tensor>> = vec![Vec::new(); batch];
                    for (a, counts) in appends.into_iter().enumerate() {
                        let n = &counts[..batch];
                        let s = n.iter().copied().max().unwrap_or(0).max(1);
                        let k = block::noise(&[batch, s, HKV, HD], 100 + a as u64).map_err(fail)?;
                        let before = cache.lens.clone();
                        if n.iter().zip(&before).any(|(n, l)| n + l > cap) {
                            proptest::prop_assert!(cache.append_first(&k, &k, n).is_err());
                            proptest::prop_assert_eq!(&cache.lens, &before);
                        } else {
                            cache.append_first(&k, &k, n).map_err(fail)?;
                            for (i, p) in parts.iter_mut().enumerate() {
                                p.push(
                                    k.narrow(0, i, 1)
                                        .and_then(|t| t.narrow(1, 0, n[i]))
                                        .map_err(fail)?,
                                );
                            }
                        }
                        for (i, p) in parts.iter().enumerate() {
                            let (gk, gv) = cache.gathered(i).map_err(fail)?;
                            proptest::prop_assert_eq!(gk.dim(1).map_err(fail)?, cache.lens[i]);
                            if cache.lens[i] == 0 {
                                continue;
                            }
                            let want = Tensor::cat(p, 1).map_err(fail)?;
                            for got in [gk, gv] {
                                proptest::prop_assert_eq!(max_abs(&got, &want).map_err(fail)?, 0.0);
                            }
                        }
                        let written: usize = cache.lens.iter().sum();
                        let fills = fill_count(&cache.k).map_err(fail)?;
                        proptest::prop_assert_eq!(fills, (batch * cap - written) * HKV * HD);
                    }
                    Ok(())
                })
                .map_err(|e| e.to_string())?;
            Ok(())
        }),
        unit("example_block_tolerances_cover_rounding", || {
            // The block in the GPU's types on the CPU (the reference
            // attention in bf16, or f16 in the f32 run) against f32: every
            // tolerance the GPU check uses is at least twice that error.
            let inputs = block::Inputs::new(1)?;
            for p in [block::BF16, block::F32] {
                let (rows, _) = block::compare(&inputs, &Device::Cpu, p, block::How::Cpu)?;
                for r in &rows {
                    eprintln!("  CPU {r}");
                }
                for r in rows {
                    if 2.0 * r.error > r.tolerance || !r.error.is_finite() {
                        return Err(format!(
                            "{}: CPU rounding error {:.2e} leaves no 2x margin under {:.1e}",
                            r.what, r.error, r.tolerance
                        )
                        .into());
                    }
                }
            }
            Ok(())
        }),
        unit("example_block_tolerances_reject_wrong_attention", || {
            // Planted bugs in the attention (on the CPU, in the GPU's
            // types): the check's tolerances must fail every row a bug
            // reaches (the training output, the loss, each decode step),
            // and pass the rows it cannot reach (a mask bug cannot reach
            // a decode step: its one query sees every key anyway; a decode
            // bug cannot reach training). The loss of GQA's head mix-up
            // moves 6.8e-4 in bf16, under its 1e-3: the output catches it.
            // bf16 for every bug (its bounds are the looser); f32 for the
            // closest one, the scale 10% high.
            use block::Mutation::*;
            let inputs = block::Inputs::new(1)?;
            let d = (block::HD as f64).sqrt();
            // (bug, output, loss, decode steps): the rows it must fail.
            let cases = [
                (NoCausal, true, true, false),
                (OneFutureKey, true, true, false),
                (Scale(d), true, true, true),
                (Scale(1.0 / d), true, true, true),
                (Scale(1.1), true, true, true),
                (GqaModulo, true, false, true),
                (TableIgnored, false, false, true),
                (OtherSequenceBlock, false, false, true),
                (TopLeftCausal, false, false, true),
                (SameLength, false, false, true),
            ];
            let runs = cases
                .iter()
                .map(|c| (block::BF16, *c))
                .chain([(block::F32, (Scale(1.1), true, true, true))]);
            let mut bad = Vec::new();
            for (p, (m, out, loss, dec)) in runs {
                let (rows, _) = block::compare(&inputs, &Device::Cpu, p, block::How::Mutated(m))?;
                for r in &rows {
                    let w = &r.what;
                    let must = if w.contains("training output") {
                        Some(out)
                    } else if w.contains("training loss") {
                        (!matches!(m, GqaModulo)).then_some(loss)
                    } else if w.contains("decode step") {
                        Some(dec)
                    } else {
                        // Gradients: a prefill bug moves them (not all
                        // rows by much); a decode bug must not.
                        (!out).then_some(false)
                    };
                    eprintln!("  {m:?} {r}");
                    match must {
                        Some(true) if r.ok() => bad.push(format!("{m:?} passed {w}")),
                        Some(false) if !r.ok() => bad.push(format!("{m:?} failed {w}")),
                        _ => {}
                    }
                }
            }
            if !bad.is_empty() {
                return Err(
                    format!("the tolerances misjudge planted bugs: {}", bad.join("; ")).into(),
                );
            }
            Ok(())
        }),
        host("example_block_plans_for_h200", || {
            let planned = block::plan_for_h200()?;
            let names: Vec<&str> = planned.iter().map(|p| p.what.as_str()).collect();
            assert_eq!(
                names,
                [
                    "prompt: forward",
                    "prompt: training forward",
                    "prompt: backward",
                    "decode step (paged cache): forward"
                ]
            );
            for p in &planned {
                assert!(p.candidates > 0, "{}: no engine", p.what);
            }
            Ok(())
        }),
    ]
}
