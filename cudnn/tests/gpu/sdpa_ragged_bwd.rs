//! GPU tier for the ragged (packed THD) attention backward (skipped
//! visibly without a device; a failure under `CUDNN_RS_REQUIRE_GPU=1`):
//! Q, K, V, O, dO packed at the offsets `SdpaConfig::ragged_offsets`
//! computes, dQ / dK / dV written at Q's / K's / V's offsets, through the
//! composite (whose dS·K reads K at K's offsets, review finding 1) and
//! `Auto`, with and without GQA, lengths `[128, 37, 90]`, against the f64
//! reference (`reference::attention::backward`) over the unpacked, padded
//! batch. The outputs are poisoned with NaN first (NaN never passes); the
//! bound is 5e-2 relative to `max(1, |want|)` over the valid tokens.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// `ensure!(err <= tol)` must fail for NaN: a negated partial comparison on purpose.
#![allow(clippy::neg_cmp_op_on_partial_ord)]
use crate::support;

use crate::support::gpu_sdpa::bind_backward_inputs;
use crate::support::gpu_sdpa::{dims, down_bf16 as down, hashed, up_bf16 as up};
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

fn bf(v: &[f64]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(bf16::from_f64(x))).collect()
}

/// The worst error over the valid tokens of `[b, h, s, d]` (padded BHSD).
fn worst(got: &[f64], want: &[f64], lens: &[usize], [_, h, s, d]: [usize; 4]) -> f64 {
    let mut w = 0f64;
    for (n, &ln) in lens.iter().enumerate() {
        for hh in 0..h {
            for i in 0..ln {
                for t in 0..d {
                    let at = ((n * h + hh) * s + i) * d + t;
                    let e = (got[at] - want[at]).abs() / want[at].abs().max(1.0);
                    w = if e.is_nan() { f64::INFINITY } else { w.max(e) };
                }
            }
        }
    }
    w
}

fn case(cfg: SdpaConfig, lens_q: Vec<usize>, lens_kv: Vec<usize>) -> TestResult {
    Device::new(0)?;
    let stream = Stream::new()?;
    let mut h = Handle::new(&stream)?;
    let cfg = cfg.training(true);
    let (qs, ks, vs, os) = (cfg.q_spec()?, cfg.k_spec()?, cfg.v_spec()?, cfg.o_spec()?);
    let (dq4, dk4, dv4, do4) = (dims(&qs), dims(&ks), dims(&vs), dims(&os));
    let i32v = |v: &[usize]| v.iter().map(|&x| x as i32).collect::<Vec<_>>();
    let off = |w: RaggedTensor, l: &[usize]| cfg.ragged_offsets(w, &i32v(l));
    let (oq, ok, ov, oo) = (
        off(RaggedTensor::Q, &lens_q)?,
        off(RaggedTensor::K, &lens_kv)?,
        off(RaggedTensor::V, &lens_kv)?,
        off(RaggedTensor::O, &lens_q)?,
    );
    // Packed inputs: random values everywhere (past the packed tokens never read).
    let q: Vec<f64> = (0..qs.span_elements()?).map(|i| value(21, i)).collect();
    let k: Vec<f64> = (0..ks.span_elements()?).map(|i| value(22, i)).collect();
    let v: Vec<f64> = (0..vs.span_elements()?).map(|i| value(23, i)).collect();
    let d_o: Vec<f64> = (0..os.span_elements()?).map(|i| value(24, i)).collect();
    // The reference over the unpacked batch.
    let qu = ra::ragged_unpack(&q, &oq, &lens_q, dq4)?;
    let ku = ra::ragged_unpack(&k, &ok, &lens_kv, dk4)?;
    let vu = ra::ragged_unpack(&v, &ov, &lens_kv, dv4)?;
    let dou = ra::ragged_unpack(&d_o, &oo, &lens_q, do4)?;
    let mut rc = ra::SdpaConfig::new(cfg.scale_value());
    rc.seq_len_q = Some(&lens_q);
    rc.seq_len_kv = Some(&lens_kv);
    let (qv, kv, vv) = (
        ra::View::bhsd(&qu, dq4),
        ra::View::bhsd(&ku, dk4),
        ra::View::bhsd(&vu, dv4),
    );
    let f = ra::forward(&qv, &kv, &vv, &rc)?;
    let o_bhsd = bf(&f.o);
    // Padded query rows have no statistics (the reference's +inf): 0 there
    // (those rows are masked out).
    let stats: Vec<f64> = f
        .stats
        .iter()
        .map(|&s| {
            if s.is_finite() {
                f64::from(s as f32)
            } else {
                0.0
            }
        })
        .collect();
    let o = ra::ragged_pack(&o_bhsd, &oo, &lens_q, do4, os.span_elements()?)?;
    let want = ra::backward(
        &qv,
        &kv,
        &vv,
        &ra::View::bhsd(&o_bhsd, do4),
        &ra::View::bhsd(&dou, do4),
        &stats,
        &rc,
    )?;

    let (g, b) = support::norm_attention_graphs::sdpa_bwd(&cfg)?;
    let (plan, r) = Plan::build(&g.build()?, &Target::device(0)?, &Policy::default())?;
    eprintln!("  backward {:?}: engine {:?}", cfg.resolve(true)?, r.chosen);
    let (qb, kb, vb, ob, dob) = (up(&q)?, up(&k)?, up(&v)?, up(&o)?, up(&d_o)?);
    let sh: Vec<f32> = stats.iter().map(|&s| s as f32).collect();
    let sb = DeviceBuffer::from_host(&sh)?;
    let nan = |n: usize| up(&vec![f64::NAN; n]);
    let (mut dqb, mut dkb, mut dvb) = (nan(q.len())?, nan(k.len())?, nan(v.len())?);
    let dev = |v: &[i32]| -> R<DeviceBuffer<i32>> { Ok(DeviceBuffer::from_host(v)?) };
    let lq = SeqLengths::new(&i32v(&lens_q), lens_q.len(), cfg.seq_q)?;
    let lkv = SeqLengths::new(&i32v(&lens_kv), lens_kv.len(), cfg.seq_kv)?;
    let (rq, rk, rv, ro) = (dev(&oq)?, dev(&ok)?, dev(&ov)?, dev(&oo)?);
    let rg = b.ragged.ok_or("ragged offsets")?;
    let name = |t: Option<Tensor>| -> R<String> { Ok(g.name(t.ok_or("an input")?)?.to_string()) };
    {
        let mut bi = plan.bindings();
        bind_backward_inputs(&mut bi, [&qb, &kb, &vb, &ob, &dob], &sb)?;
        bi.output("dq", dqb.as_slice_mut())?
            .output("dk", dkb.as_slice_mut())?
            .output("dv", dvb.as_slice_mut())?
            .seq_lengths(&name(b.seq_len_q)?, &lq)?
            .seq_lengths(&name(b.seq_len_kv)?, &lkv)?;
        // SAFETY: the offsets are `ragged_offsets` of the lengths bound
        // through `seq_lengths` (each within its sequence extent), so every
        // sequence lies inside its tensor's span; the buffers outlive the
        // bindings and the stream is synchronized before any is dropped.
        unsafe {
            bi.input_ragged_offsets(&name(Some(rg.q))?, rq.as_slice())?
                .input_ragged_offsets(&name(rg.k)?, rk.as_slice())?
                .input_ragged_offsets(&name(rg.v)?, rv.as_slice())?
                .input_ragged_offsets(&name(Some(rg.o))?, ro.as_slice())?;
        }
        plan.execute(&mut h, &mut bi)?;
    }
    h.stream().synchronize()?;
    for (what, buf, len, offs, lens, d4, w) in [
        ("dq", &dqb, q.len(), &oq, &lens_q, dq4, &want.dq),
        ("dk", &dkb, k.len(), &ok, &lens_kv, dk4, &want.dk),
        ("dv", &dvb, v.len(), &ov, &lens_kv, dv4, &want.dv),
    ] {
        let got = ra::ragged_unpack(&down(buf, len)?, offs, lens, d4)?;
        let e = worst(&got, w, lens, d4);
        eprintln!("  ragged {what}: max rel error {e:.2e} (bound 5e-2)");
        ensure!(e <= 5e-2, "ragged {what} differs from the reference: {e}");
    }
    Ok(())
}

pub fn main() {
    let mut t = Vec::new();
    for (suffix, imp) in [("", SdpaImpl::Auto), ("_composite", SdpaImpl::Composite)] {
        t.push(gpu(&format!("sdpa_ragged_bwd_bf16{suffix}"), move || {
            case(
                SdpaConfig::new(3, 4, 128, 64, DType::BF16)
                    .ragged()
                    .implementation(imp),
                vec![128, 37, 90],
                vec![128, 37, 90],
            )
        }));
        t.push(gpu(
            &format!("sdpa_ragged_bwd_gqa_bf16{suffix}"),
            move || {
                case(
                    SdpaConfig::new(3, 8, 128, 64, DType::BF16)
                        .gqa(2)
                        .ragged()
                        .implementation(imp),
                    vec![128, 37, 90],
                    vec![128, 37, 90],
                )
            },
        ));
    }
    run(t)
}
