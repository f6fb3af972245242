//! `cargo run --release --example attention`: one transformer block's
//! attention, forward (training, saving the softmax statistics) and
//! backward, in bf16 through cuDNN's fused SDPA graph ops, checked against
//! the f64 reference (`cudnn::reference::attention`).
//!
//! The block: batch 2, 8 query heads sharing 2 key/value heads
//! (grouped-query attention), sequence 256, head dim 64, causal, stored
//! BSHD (what a `[B, S, H*D]` projection gives). The loss is
//! `sum(O * dO)` for a random `dO`; the example prints the largest errors
//! of O, dQ, dK and dV against the reference.
//!
//! `--composite` builds both graphs as the matmul–softmax–matmul composite
//! (what a cuDNN without the SDPA operation gets) instead of letting
//! `SdpaImpl::Auto` choose.
//!
//! Without a GPU it plans both graphs for an H200 (deviceless planning; the
//! driver stub stands in for `libcuda`), through the SDPA operation and
//! through the composite, prints what it would run (engines, workspace,
//! plan file sizes) and exits 0. Exit status 1 when the check on a GPU
//! fails, or the libraries are missing.

use std::process::ExitCode;

use cudnn::dnn::Handle;
use cudnn::graph::*;
use cudnn::reference::attention as ra;
use cudnn::runtime::{Device, DeviceBuffer, Stream};
use half::bf16;

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

fn config() -> SdpaConfig {
    let imp = if std::env::args().any(|a| a == "--composite") {
        SdpaImpl::Composite
    } else {
        SdpaImpl::Auto
    };
    SdpaConfig::new(2, 8, 256, 64, DType::BF16)
        .gqa(2)
        .causal(true)
        .training(true)
        .implementation(imp)
}

/// The forward graph: q, k, v in; o and stats out.
fn forward_graph(cfg: &SdpaConfig) -> cudnn::Result<Graph> {
    let mut g = Graph::new();
    let q = g.input("q", cfg.q_spec()?)?;
    let k = g.input("k", cfg.k_spec()?)?;
    let v = g.input("v", cfg.v_spec()?)?;
    // A training forward: its statistics are a `Tensor`, never missing.
    let f = g.sdpa_forward_training(q, k, v, cfg)?;
    g.rename(f.o, "o")?;
    g.rename(f.stats, "stats")?;
    Ok(g)
}

/// The backward graph: q, k, v, o, do, stats in; dq, dk, dv out.
fn backward_graph(cfg: &SdpaConfig) -> cudnn::Result<Graph> {
    let mut g = Graph::new();
    let q = g.input("q", cfg.q_spec()?)?;
    let k = g.input("k", cfg.k_spec()?)?;
    let v = g.input("v", cfg.v_spec()?)?;
    let o = g.input("o", cfg.o_spec()?)?;
    let d_o = g.input("do", cfg.o_spec()?)?;
    let st = g.input("stats", cfg.stats_spec()?)?;
    let b = g.sdpa_backward(q, k, v, o, d_o, st, cfg)?;
    g.rename(b.dq, "dq")?;
    g.rename(b.dk, "dk")?;
    g.rename(b.dv, "dv")?;
    Ok(g)
}

fn plan_for(g: &Graph, target: &Target, what: &str) -> AnyResult<Plan> {
    let og = g.build()?;
    let (plan, report) = Plan::build(&og, target, &Policy::default())?;
    println!(
        "{what}: engine {:?} of {} configurations ({} engines), workspace {} B, \
         heuristics {:.2} s, finalize {:.2} s, plan file {} B",
        report.chosen,
        report.candidates.len(),
        og.engine_count()?,
        plan.workspace_size(),
        report.heuristics_s,
        report.finalize_s,
        plan.serialize()?.len()
    );
    Ok(plan)
}

fn describe(cfg: &SdpaConfig) {
    println!(
        "attention: batch {}, {} query heads / {} kv heads, seq {}, head dim {}, {}, causal {}, scale {:.4}",
        cfg.batch,
        cfg.heads,
        cfg.kv_heads,
        cfg.seq_q,
        cfg.head_dim,
        cfg.dtype,
        cfg.is_causal,
        cfg.scale_value()
    );
    println!(
        "work: forward {:.3} GFLOP, backward {:.3} GFLOP",
        cfg.forward_flops() / 1e9,
        cfg.backward_flops() / 1e9
    );
}

struct Lcg(u64);
impl Lcg {
    fn vec(&mut self, n: usize) -> Vec<f64> {
        (0..n)
            .map(|_| {
                self.0 = self
                    .0
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                // bf16-exact values in [-1, 1).
                bf16::from_f64(((self.0 >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0).to_f64()
            })
            .collect()
    }
}

fn up(v: &[f64]) -> AnyResult<DeviceBuffer<bf16>> {
    let h: Vec<bf16> = v.iter().map(|&x| bf16::from_f64(x)).collect();
    Ok(DeviceBuffer::from_host(&h)?)
}
fn down(b: &DeviceBuffer<bf16>) -> AnyResult<Vec<f64>> {
    let mut h = vec![bf16::ZERO; b.len()];
    b.copy_to_host(&mut h)?;
    Ok(h.iter().map(|x| x.to_f64()).collect())
}

fn view<'a>(data: &'a [f64], spec: &TensorSpec) -> ra::View<'a> {
    let (d, s) = (spec.dims(), spec.strides());
    let u = |v: &[i64]| [v[0] as usize, v[1] as usize, v[2] as usize, v[3] as usize];
    ra::View::new(data, u(d), u(s))
}

/// Storage (BSHD) to packed BHSD, as the reference returns.
fn to_bhsd(v: &[f64], spec: &TensorSpec) -> Vec<f64> {
    let (d, s) = (spec.dims(), spec.strides());
    let mut o = Vec::with_capacity(v.len());
    for b in 0..d[0] {
        for h in 0..d[1] {
            for i in 0..d[2] {
                for t in 0..d[3] {
                    o.push(v[(b * s[0] + h * s[1] + i * s[2] + t * s[3]) as usize]);
                }
            }
        }
    }
    o
}
fn max_err(got: &[f64], want: &[f64]) -> f64 {
    got.iter()
        .zip(want)
        .map(|(g, w)| {
            let e = (g - w).abs() / w.abs().max(1.0);
            if e.is_nan() { f64::INFINITY } else { e }
        })
        .fold(0.0, f64::max)
}

fn on_gpu(cfg: &SdpaConfig) -> AnyResult<bool> {
    Device::new(0)?;
    let stream = Stream::new()?;
    let mut handle = Handle::new(&stream)?;
    let target = Target::device(0)?;
    println!("device: {}", target.properties().name());
    let fwd = plan_for(&forward_graph(cfg)?, &target, "forward")?;
    let bwd = plan_for(&backward_graph(cfg)?, &target, "backward")?;
    let (qs, ks, vs, os) = (cfg.q_spec()?, cfg.k_spec()?, cfg.v_spec()?, cfg.o_spec()?);
    let mut rng = Lcg(42);
    let (q, k, v) = (
        rng.vec(qs.span_elements()?),
        rng.vec(ks.span_elements()?),
        rng.vec(vs.span_elements()?),
    );
    let d_o = rng.vec(os.span_elements()?);
    let (qb, kb, vb, dob) = (up(&q)?, up(&k)?, up(&v)?, up(&d_o)?);
    let nan = vec![f64::NAN; os.span_elements()?];
    let mut ob = up(&nan)?;
    let mut sb =
        DeviceBuffer::<f32>::from_host(&vec![f32::NAN; cfg.stats_spec()?.span_elements()?])?;
    {
        let mut b = fwd.bindings();
        b.input("q", qb.as_slice())?
            .input("k", kb.as_slice())?
            .input("v", vb.as_slice())?
            .output("o", ob.as_slice_mut())?
            .output("stats", sb.as_slice_mut())?;
        fwd.execute(&mut handle, &mut b)?;
    }
    let mut dq = up(&vec![f64::NAN; q.len()])?;
    let mut dk = up(&vec![f64::NAN; k.len()])?;
    let mut dv = up(&vec![f64::NAN; v.len()])?;
    {
        let mut b = bwd.bindings();
        b.input("q", qb.as_slice())?
            .input("k", kb.as_slice())?
            .input("v", vb.as_slice())?
            .input("o", ob.as_slice())?
            .input("do", dob.as_slice())?
            .input("stats", sb.as_slice())?
            .output("dq", dq.as_slice_mut())?
            .output("dk", dk.as_slice_mut())?
            .output("dv", dv.as_slice_mut())?;
        bwd.execute(&mut handle, &mut b)?;
    }
    stream.synchronize()?;
    let mut rc = ra::SdpaConfig::new(cfg.scale_value());
    rc.causal = ra::CausalMask::TopLeft;
    let (qv, kv, vv) = (view(&q, &qs), view(&k, &ks), view(&v, &vs));
    let want = ra::forward(&qv, &kv, &vv, &rc)?;
    let o_dev = down(&ob)?;
    let mut stats = vec![0f32; sb.len()];
    sb.copy_to_host(&mut stats)?;
    let stats: Vec<f64> = stats.iter().map(|&s| f64::from(s)).collect();
    // The backward reference from the device's O (as the device's backward saw it).
    let grads = ra::backward(
        &qv,
        &kv,
        &vv,
        &view(&o_dev, &os),
        &view(&d_o, &os),
        &stats,
        &rc,
    )?;
    let errs = [
        ("O", max_err(&to_bhsd(&o_dev, &os), &want.o)),
        ("stats", max_err(&stats, &want.stats)),
        ("dQ", max_err(&to_bhsd(&down(&dq)?, &qs), &grads.dq)),
        ("dK", max_err(&to_bhsd(&down(&dk)?, &ks), &grads.dk)),
        ("dV", max_err(&to_bhsd(&down(&dv)?, &vs), &grads.dv)),
    ];
    let bound = 3e-2;
    let mut ok = true;
    for (name, e) in errs {
        let pass = e <= bound;
        ok &= pass;
        println!(
            "{name:>5}: max error {e:.2e} relative to max(1, |ref|) (bound {bound:.0e}) {}",
            if pass { "ok" } else { "FAILED" }
        );
    }
    Ok(ok)
}

fn main() -> ExitCode {
    let cfg = config();
    describe(&cfg);
    let gpu = matches!(Device::count(), Ok(n) if n > 0);
    if gpu {
        return match on_gpu(&cfg) {
            Ok(true) => {
                println!("attention forward and backward agree with the f64 reference");
                ExitCode::SUCCESS
            }
            Ok(false) => ExitCode::FAILURE,
            Err(e) => {
                eprintln!("attention: {e}");
                ExitCode::FAILURE
            }
        };
    }
    println!("no GPU here: planning for an H200 instead (nothing is executed)");
    let run = || -> AnyResult<()> {
        let target = Target::preset("h200")?;
        println!(
            "with this cuDNN, {:?} builds the forward as {:?} and the backward as {:?}",
            cfg.implementation,
            cfg.resolve(false)?,
            cfg.resolve(true)?
        );
        for imp in [SdpaImpl::Native, SdpaImpl::Composite] {
            let cfg = cfg.clone().implementation(imp);
            if let Err(e) = cfg.check(false).and_then(|()| cfg.check(true)) {
                println!("{imp:?}: not with this cuDNN ({e})");
                continue;
            }
            let f = forward_graph(&cfg)?;
            let b = backward_graph(&cfg)?;
            plan_for(&f, &target, &format!("{imp:?} forward"))?;
            plan_for(&b, &target, &format!("{imp:?} backward"))?;
        }
        println!(
            "on a GPU it would run: the forward (q, k, v -> o, stats), then the backward \
             (q, k, v, o, do, stats -> dq, dk, dv), and compare both with the f64 reference"
        );
        Ok(())
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("attention: {e}");
            ExitCode::FAILURE
        }
    }
}
