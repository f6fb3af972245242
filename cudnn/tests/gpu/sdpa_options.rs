//! GPU tier for issue 24's paged KV cache (skipped visibly without a
//! device; a failure under `CUDNN_RS_REQUIRE_GPU=1`): a prefill and a
//! decode step over K / V containers whose pages are scattered through
//! page tables, through cuDNN's SDPA operation (`Auto`, where the loaded
//! cuDNN has it) and the composite, against the f64 reference over the
//! same pages (`reference::attention::paged_gather`). Inputs are rounded
//! to bf16 before the reference sees them, the output is poisoned with NaN
//! first (NaN never passes), the bound is 3e-2 relative to `max(1, |want|)`
//! over the rows each sequence's length makes valid.
//!
//! Also ragged (packed THD) batches: the sequences packed at the offsets
//! `SdpaConfig::ragged_offsets` computes (the safe `Bindings::input`
//! refuses them; bound with the unsafe `input_ragged_offsets`), run through
//! `Plan::execute`, against the reference over the unpacked
//! batch (`reference::attention::ragged_unpack`).
//!
//! (The bottom-right causal mask and the sliding window are GPU-tested in
//! `gpu/graph_attention`, with the other attention configurations.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// `ensure!(err <= tol)` must fail for NaN: a negated partial comparison on purpose.
#![allow(clippy::neg_cmp_op_on_partial_ord)]
use crate::support;
use crate::support::sdpa_plans::fwd_any;

use crate::support::gpu_sdpa::{dims, hashed, strides, up_bf16 as up};
use cudnn::dnn::Handle;
use cudnn::graph::*;
use cudnn::reference::attention as ra;
use cudnn::runtime::{Device, DeviceBuffer, Stream};
use half::bf16;
use support::*;

type R<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// Element `i` of stream `seed`, in `[-1, 1)`, bf16-exact.
fn value(seed: u64, i: usize) -> f64 {
    hashed(seed, i, 1.0)
}

/// One paged attention on the device against the reference: `lens_q`,
/// `lens_kv` per sequence; the page table reverses each sequence's pages
/// and interleaves the sequences.
fn paged_case(cfg: SdpaConfig, lens_q: Vec<usize>, lens_kv: Vec<usize>) -> TestResult {
    Device::new(0)?;
    let stream = Stream::new()?;
    let mut h = Handle::new(&stream)?;
    let target = Target::device(0)?;
    let b = cfg.batch as usize;
    let pages = cfg.pages_per_seq().ok_or("a paged config")? as usize;
    let p = cfg.paged.ok_or("a paged config")?;
    let table: Vec<i32> = (0..b * pages)
        .map(|i| {
            let (n, pg) = (i / pages, i % pages);
            ((pages - 1 - pg) * b + n) as i32
        })
        .collect();
    ensure!(
        table.iter().all(|&t| (t as i64) < p.num_blocks),
        "the test's page table fits the container"
    );
    let (qs, ks, vs, os) = (cfg.q_spec()?, cfg.k_spec()?, cfg.v_spec()?, cfg.o_spec()?);
    let q: Vec<f64> = (0..qs.span_elements()?).map(|i| value(1, i)).collect();
    let k: Vec<f64> = (0..ks.span_elements()?).map(|i| value(2, i)).collect();
    let v: Vec<f64> = (0..vs.span_elements()?).map(|i| value(3, i)).collect();

    let mut g = Graph::new();
    let qt = g.input("q", qs.clone())?;
    let kt = g.input("k", ks.clone())?;
    let vt = g.input("v", vs.clone())?;
    let f = fwd_any(&mut g, qt, kt, vt, &cfg)?;
    g.rename(f.o, "o")?;
    let (plan, r) = Plan::build(&g.build()?, &target, &Policy::default())?;
    eprintln!(
        "  {:?}: engine {:?} of {} configs",
        cfg.resolve(false)?,
        r.chosen,
        r.candidates.len()
    );
    let (qb, kb, vb) = (up(&q)?, up(&k)?, up(&v)?);
    let mut ob = up(&vec![f64::NAN; os.span_elements()?])?;
    let lens = |v: &[usize], extent: i64| -> R<SeqLengths> {
        let v: Vec<i32> = v.iter().map(|&x| x as i32).collect();
        Ok(SeqLengths::new(&v, v.len(), extent)?)
    };
    let (lq, lkv) = (lens(&lens_q, cfg.seq_q)?, lens(&lens_kv, cfg.seq_kv)?);
    let tb = DeviceBuffer::from_host(&table)?;
    {
        let name = |t: Option<Tensor>| -> R<String> {
            Ok(g.name(t.ok_or("a paged graph input")?)?.to_string())
        };
        let mut bi = plan.bindings();
        bi.input("q", qb.as_slice())?
            .input("k", kb.as_slice())?
            .input("v", vb.as_slice())?
            .seq_lengths(&name(f.seq_len_q)?, &lq)?
            .seq_lengths(&name(f.seq_len_kv)?, &lkv)?
            .output("o", ob.as_slice_mut())?;
        for t in [f.page_table_k, f.page_table_v] {
            // SAFETY: every entry is below `num_blocks` (checked above) and
            // every key length is at most `seq_kv <= pages * block_size`.
            unsafe { bi.input_page_table(&name(t)?, tb.as_slice())? };
        }
        plan.execute(&mut h, &mut bi)?;
    }
    h.stream().synchronize()?;
    let mut out = vec![bf16::from_f32(0.0); os.span_elements()?];
    ob.copy_to_host(&mut out)?;

    let s_kv = cfg.seq_kv as usize;
    let kg = ra::paged_gather(
        &ra::View::new(&k, dims(&ks), strides(&ks)),
        &table,
        b,
        pages,
        s_kv,
    )?;
    let vg = ra::paged_gather(
        &ra::View::new(&v, dims(&vs), strides(&vs)),
        &table,
        b,
        pages,
        s_kv,
    )?;
    let mut rc = ra::SdpaConfig::new(cfg.scale_value());
    rc.causal = ra::CausalMask::BottomRight;
    rc.seq_len_q = Some(&lens_q);
    rc.seq_len_kv = Some(&lens_kv);
    let hkv = cfg.kv_heads as usize;
    let want = ra::forward(
        &ra::View::new(&q, dims(&qs), strides(&qs)),
        &ra::View::bhsd(&kg, [b, hkv, s_kv, cfg.head_dim as usize]),
        &ra::View::bhsd(&vg, [b, hkv, s_kv, cfg.head_dim_v as usize]),
        &rc,
    )?;
    let [_, hq, sq, dv] = dims(&os);
    let os_str = strides(&os);
    let mut worst = 0f64;
    for n in 0..b {
        for hh in 0..hq {
            for i in 0..lens_q[n] {
                for t in 0..dv {
                    let got = out[n * os_str[0] + hh * os_str[1] + i * os_str[2] + t].to_f64();
                    let w = want.o[((n * hq + hh) * sq + i) * dv + t];
                    let e = (got - w).abs() / w.abs().max(1.0);
                    worst = if e.is_nan() {
                        f64::INFINITY
                    } else {
                        worst.max(e)
                    };
                }
            }
        }
    }
    eprintln!("  o: max rel error {worst:.2e} (bound 3e-2)");
    ensure!(
        worst <= 3e-2,
        "paged attention differs from the reference: {worst}"
    );
    Ok(())
}

/// One ragged (packed THD) forward on the device against the reference:
/// the sequences packed from the host-computed offsets, the safe `input`
/// refusing them (typed), bound with the unsafe `input_ragged_offsets` and
/// run through the safe `execute`, O compared
/// over the valid tokens (the reference over the unpacked, padded batch).
fn ragged_case(cfg: SdpaConfig, lens_q: Vec<usize>, lens_kv: Vec<usize>) -> TestResult {
    Device::new(0)?;
    let stream = Stream::new()?;
    let mut h = Handle::new(&stream)?;
    let target = Target::device(0)?;
    let (qs, ks, vs, os) = (cfg.q_spec()?, cfg.k_spec()?, cfg.v_spec()?, cfg.o_spec()?);
    let i32v = |v: &[usize]| v.iter().map(|&x| x as i32).collect::<Vec<_>>();
    let off = |w: RaggedTensor, l: &[usize]| cfg.ragged_offsets(w, &i32v(l));
    let (oq, ok, ov, oo) = (
        off(RaggedTensor::Q, &lens_q)?,
        off(RaggedTensor::K, &lens_kv)?,
        off(RaggedTensor::V, &lens_kv)?,
        off(RaggedTensor::O, &lens_q)?,
    );
    // Random values everywhere (what lies past the packed tokens is never read).
    let q: Vec<f64> = (0..qs.span_elements()?).map(|i| value(11, i)).collect();
    let k: Vec<f64> = (0..ks.span_elements()?).map(|i| value(12, i)).collect();
    let v: Vec<f64> = (0..vs.span_elements()?).map(|i| value(13, i)).collect();

    let mut g = Graph::new();
    let qt = g.input("q", qs.clone())?;
    let kt = g.input("k", ks.clone())?;
    let vt = g.input("v", vs.clone())?;
    let f = fwd_any(&mut g, qt, kt, vt, &cfg)?;
    g.rename(f.o, "o")?;
    let (plan, r) = Plan::build(&g.build()?, &target, &Policy::default())?;
    eprintln!(
        "  {:?}: engine {:?} of {} configs",
        cfg.resolve(false)?,
        r.chosen,
        r.candidates.len()
    );
    let (qb, kb, vb) = (up(&q)?, up(&k)?, up(&v)?);
    let mut ob = up(&vec![f64::NAN; os.span_elements()?])?;
    let dev = |v: &[i32]| -> R<DeviceBuffer<i32>> { Ok(DeviceBuffer::from_host(v)?) };
    let lq = SeqLengths::new(&i32v(&lens_q), lens_q.len(), cfg.seq_q)?;
    let lkv = SeqLengths::new(&i32v(&lens_kv), lens_kv.len(), cfg.seq_kv)?;
    let (dq, dk, dv, do_) = (dev(&oq)?, dev(&ok)?, dev(&ov)?, dev(&oo)?);
    let rg = f.ragged.ok_or("ragged offsets")?;
    let name = |t: Option<Tensor>| -> R<String> { Ok(g.name(t.ok_or("an input")?)?.to_string()) };
    let mut bi = plan.bindings();
    bi.input("q", qb.as_slice())?
        .input("k", kb.as_slice())?
        .input("v", vb.as_slice())?
        .output("o", ob.as_slice_mut())?
        .seq_lengths(&name(f.seq_len_q)?, &lq)?
        .seq_lengths(&name(f.seq_len_kv)?, &lkv)?;
    // The safe `input` refuses ragged offsets (typed), before any launch.
    match bi.input(&name(Some(rg.q))?, dq.as_slice()) {
        Err(cudnn::Error::Unsupported { what, .. }) if what.contains("ragged") => {}
        other => return Err(format!("safe input of ragged offsets: {:?}", other.err()).into()),
    }
    // SAFETY: the offsets are `ragged_offsets` of lengths within the
    // sequence extents (the same lengths bound through `seq_lengths`), so
    // every sequence lies inside its tensor's span; the buffers outlive the
    // bindings and the stream is synchronized before any is dropped.
    unsafe {
        bi.input_ragged_offsets(&name(Some(rg.q))?, dq.as_slice())?
            .input_ragged_offsets(&name(rg.k)?, dk.as_slice())?
            .input_ragged_offsets(&name(rg.v)?, dv.as_slice())?
            .input_ragged_offsets(&name(Some(rg.o))?, do_.as_slice())?;
    }
    plan.execute(&mut h, &mut bi)?;
    drop(bi);
    h.stream().synchronize()?;
    let mut out = vec![bf16::from_f32(0.0); os.span_elements()?];
    ob.copy_to_host(&mut out)?;
    let out: Vec<f64> = out.iter().map(|x| x.to_f64()).collect();

    let [b, hq, sq, d] = dims(&qs);
    let [_, hkv, skv, _] = dims(&ks);
    let dvv = cfg.head_dim_v as usize;
    let qu = ra::ragged_unpack(&q, &oq, &lens_q, [b, hq, sq, d])?;
    let ku = ra::ragged_unpack(&k, &ok, &lens_kv, [b, hkv, skv, d])?;
    let vu = ra::ragged_unpack(&v, &ov, &lens_kv, [b, hkv, skv, dvv])?;
    let got = ra::ragged_unpack(&out, &oo, &lens_q, [b, hq, sq, dvv])?;
    let mut rc = ra::SdpaConfig::new(cfg.scale_value());
    if cfg.is_causal {
        rc.causal = ra::CausalMask::TopLeft;
    }
    rc.seq_len_q = Some(&lens_q);
    rc.seq_len_kv = Some(&lens_kv);
    let want = ra::forward(
        &ra::View::bhsd(&qu, [b, hq, sq, d]),
        &ra::View::bhsd(&ku, [b, hkv, skv, d]),
        &ra::View::bhsd(&vu, [b, hkv, skv, dvv]),
        &rc,
    )?;
    let mut worst = 0f64;
    for (n, &ln) in lens_q.iter().enumerate() {
        for hh in 0..hq {
            for i in 0..ln {
                for t in 0..dvv {
                    let at = ((n * hq + hh) * sq + i) * dvv + t;
                    let (gv, w) = (got[at], want.o[at]);
                    let e = (gv - w).abs() / w.abs().max(1.0);
                    worst = if e.is_nan() {
                        f64::INFINITY
                    } else {
                        worst.max(e)
                    };
                }
            }
        }
    }
    eprintln!("  ragged o: max rel error {worst:.2e} (bound 3e-2)");
    ensure!(
        worst <= 3e-2,
        "ragged attention differs from the reference: {worst}"
    );
    Ok(())
}

fn decode() -> SdpaConfig {
    SdpaConfig::new(3, 8, 1, 128, DType::BF16)
        .gqa(2)
        .kv_len(200)
        .causal_bottom_right()
        .paged(32, 24)
}

fn prefill() -> SdpaConfig {
    SdpaConfig::new(2, 8, 96, 64, DType::BF16)
        .gqa(4)
        .kv_len(96)
        .causal_bottom_right()
        .paged(16, 12)
}

pub fn main() {
    let mut t = Vec::new();
    for (suffix, imp) in [("", SdpaImpl::Auto), ("_composite", SdpaImpl::Composite)] {
        t.push(gpu(&format!("sdpa_paged_decode_bf16{suffix}"), move || {
            paged_case(
                decode().implementation(imp),
                vec![1, 1, 1],
                vec![200, 77, 129],
            )
        }));
        t.push(gpu(
            &format!("sdpa_paged_prefill_bf16{suffix}"),
            move || paged_case(prefill().implementation(imp), vec![96, 50], vec![96, 50]),
        ));
    }
    for (suffix, imp) in [("", SdpaImpl::Auto), ("_composite", SdpaImpl::Composite)] {
        t.push(gpu(
            &format!("sdpa_ragged_causal_bf16{suffix}"),
            move || {
                ragged_case(
                    SdpaConfig::new(3, 4, 128, 64, DType::BF16)
                        .causal(true)
                        .ragged()
                        .implementation(imp),
                    vec![128, 37, 90],
                    vec![128, 37, 90],
                )
            },
        ));
        t.push(gpu(&format!("sdpa_ragged_gqa_bf16{suffix}"), move || {
            ragged_case(
                SdpaConfig::new(2, 8, 64, 128, DType::BF16)
                    .gqa(2)
                    .kv_len(160)
                    .ragged()
                    .implementation(imp),
                vec![64, 9],
                vec![150, 33],
            )
        }));
    }
    run(t)
}
