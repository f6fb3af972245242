//! Host tier for the graph API's FP8 ops (issue 25): no GPU; the real cuDNN
//! plans them for named targets through the driver stub. Prints `engines /
//! configs / plans / engine / workspace` per case and target.
//!
//! - `unit::` the FP8 matmul pattern's shape (the ops, their compute type,
//!   what a plan binds) and its typed errors; the FP8 target rule.
//! - `host::` every FP8 matmul case plans on H200, H100, B200 and L4, and
//!   A100 is refused with `Unsupported` before cuDNN (whose own reason there
//!   is that its FP8 kernels do not run on sm_80: the conformance tier shows
//!   the frontend getting no engine); the plans' JSON passes the crate's
//!   allow-list (the amax makes cuDNN finalize a GENERIC_MATMUL_FUSION).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// `ensure!(err < bound)` negates a float comparison on purpose: NaN fails.
#![allow(clippy::neg_cmp_op_on_partial_ord)]
use crate::support;
use crate::support::fp8_graphs;
use crate::support::graph_plans;
use std::sync::Arc;

use crate::support::sdpa_plans::plan_all;
use cudnn::Error;
use cudnn::graph::*;
use fp8_graphs::*;
use graph_plans::host9;
use support::*;

/// The targets with FP8 tensor cores, and the one without.
const FP8_TARGETS: [&str; 4] = ["h200", "h100", "b200", "l4"];

/// Engines cuDNN has, configs heuristics offer, plans that finalize (at
/// most `max` tried), and the plans.
fn plans(g: &Graph, target: &str, max: usize) -> Result<(i64, usize, Vec<Plan>), Error> {
    let (engines, configs, plans, _) = plan_all(g, target, max)?;
    Ok((engines, configs, plans))
}

/// The loaded cuDNN's version.
fn cudnn_version() -> Result<(u32, u32, u32), Error> {
    let v = cudnn::sys::cudnn::load()?.info().version;
    Ok(v.map_or((0, 0, 0), |v| (v.major, v.minor, v.patch)))
}

fn arg_of(e: &Error) -> String {
    match e {
        Error::InvalidArgument { arg, .. } => arg.clone(),
        Error::Mismatch { what, .. } => what.clone(),
        Error::Unsupported { what, .. } => what.clone(),
        other => format!("{other:?}"),
    }
}

fn scales(g: &mut Graph, rank: usize, scale_c: bool) -> Result<Fp8MatmulScales, Error> {
    let one = TensorSpec::row_major(DType::F32, &vec![1; rank])?;
    Ok(Fp8MatmulScales {
        descale_a: g.input("descale_a", one.clone())?,
        descale_b: g.input("descale_b", one.clone())?,
        scale_c: if scale_c {
            Some(g.input("scale_c", one)?)
        } else {
            None
        },
    })
}

pub fn main() {
    let mut t = vec![];

    t.push(unit("fp8_matmul_pattern_shape", || {
        for case in matmul_cases() {
            let mut g = case.graph()?;
            let sig = g.signature();
            let muls = sig.matches("pointwise Mul").count();
            let want_muls = if case.out.is_fp8() { 3 } else { 2 };
            ensure!(
                muls == want_muls,
                "{}: {muls} multiplies in {sig}",
                case.tag()
            );
            ensure!(
                sig.contains("matmul a=t1,b=t2,c=t")
                    && sig.matches("compute=f32").count() == want_muls + 1 + usize::from(case.amax),
                "{}: {sig}",
                case.tag()
            );
            ensure!(
                sig.contains("reduction AMax") == case.amax,
                "{}: amax reduction present iff asked: {sig}",
                case.tag()
            );
            // Every op computes in f32 whatever the graph's compute type was.
            ensure!(!sig.contains("compute=f16"), "{sig}");
            // What a plan binds: the inputs and outputs, by name, role and type.
            let bound: Vec<String> = sig
                .split(';')
                .filter_map(|t| {
                    let f: Vec<&str> = t.split(' ').collect();
                    let role = *f.get(2)?;
                    (role == "in" || role == "out").then(|| {
                        let name = f[1].split_once(':').map_or("", |x| x.1);
                        format!("{name} {role} {}", f[3])
                    })
                })
                .collect();
            let mut want = vec![
                format!("a in {}", case.a),
                format!("b in {}", case.b),
                "descale_a in f32".to_string(),
                "descale_b in f32".to_string(),
            ];
            if case.out.is_fp8() {
                want.push("scale_c in f32".to_string());
            }
            want.push(format!("c out {}", case.out));
            if case.amax {
                want.push("amax out f32".to_string());
                ensure!(sig.contains("4:amax out f32 [1, 1, 1]"), "{sig}");
            }
            let mut bound = bound;
            bound.sort();
            want.sort();
            ensure!(
                bound == want,
                "{}: binds {bound:?}, want {want:?}",
                case.tag()
            );
            let [batch, m, _, n] = case.dims;
            let c_dims = format!("1:c out {} [{batch}, {m}, {n}]", case.out);
            ensure!(sig.contains(&c_dims), "{}: {sig}", case.tag());
            g.set_compute_type(DType::F16);
        }
        // The graph's compute type is left as it was.
        let mut g = Graph::new();
        g.set_compute_type(DType::F16);
        let a = g.input("a", TensorSpec::row_major(DType::Fp8E4M3, &[16, 32])?)?;
        let b = g.input("b", TensorSpec::new(DType::Fp8E4M3, &[32, 16], &[1, 32])?)?;
        let s = scales(&mut g, 2, false)?;
        let r = g.fp8_matmul(a, b, &s, false)?;
        ensure!(g.compute_type() == DType::F16, "compute type restored");
        ensure!(r.amax.is_none(), "no amax unless asked");
        ensure!(
            g.spec(r.c)?.dtype() == DType::F32,
            "the f32 result until output"
        );
        ensure!(!g.signature().contains("compute=f16"), "{}", g.signature());
        // Plain matmul after it takes f16 again.
        let x = g.input("x", TensorSpec::row_major(DType::F16, &[16, 16])?)?;
        let y = g.matmul(r.c, x)?;
        ensure!(
            g.spec(y)?.dtype() == DType::F16,
            "later ops use the graph's type"
        );
        Ok(())
    }));

    t.push(unit("fp8_matmul_errors_are_typed_and_named", || {
        use DType::*;
        // (a, b, descale dims, descale type, expected argument text)
        type Case = (DType, DType, Vec<i64>, DType, &'static str);
        let cases: Vec<Case> = vec![
            (BF16, Fp8E4M3, vec![1, 1, 1], F32, "a's element type"),
            (Fp8E4M3, F32, vec![1, 1, 1], F32, "b's element type"),
            (I8, Fp8E4M3, vec![1, 1, 1], F32, "a's element type"),
            (
                Fp8E5M2,
                Fp8E5M2,
                vec![1, 1, 1],
                F32,
                "both a and b in fp8e5m2",
            ),
            (
                Fp8E4M3,
                Fp8E4M3,
                vec![1, 1, 1],
                F16,
                "descale_a's element type",
            ),
            (Fp8E4M3, Fp8E4M3, vec![1, 1, 2], F32, "descale_a's dims"),
            (Fp8E4M3, Fp8E4M3, vec![1, 1], F32, "descale_a's dims"),
            (Fp8E4M3, Fp8E4M3, vec![1, 1, 1, 1], F32, "descale_a's dims"),
        ];
        for (at, bt, sd, st, want) in cases {
            let mut g = Graph::new();
            let a = g.input("a", TensorSpec::row_major(at, &[2, 16, 32])?)?;
            let b = g.input("b", TensorSpec::row_major(bt, &[2, 32, 16])?)?;
            let one = TensorSpec::row_major(st, &sd)?;
            let s = Fp8MatmulScales {
                descale_a: g.input("descale_a", one.clone())?,
                descale_b: g.input("descale_b", one)?,
                scale_c: None,
            };
            let e = g
                .fp8_matmul(a, b, &s, true)
                .err()
                .ok_or(format!("{want}: accepted"))?;
            ensure!(arg_of(&e).contains(want), "{want}: got {e}");
            if want.contains("both") {
                ensure!(matches!(e, Error::Unsupported { .. }), "{e:?}");
            }
            ensure!(
                g.signature().is_empty() || !g.signature().contains("matmul"),
                "no op added on error"
            );
        }
        // scale_c checked too, and the matmul's own shape rules hold.
        let mut g = Graph::new();
        let a = g.input("a", TensorSpec::row_major(DType::Fp8E4M3, &[2, 16, 32])?)?;
        let b = g.input("b", TensorSpec::row_major(DType::Fp8E4M3, &[2, 31, 16])?)?;
        let mut s = scales(&mut g, 3, false)?;
        s.scale_c = Some(g.input("scale_c", TensorSpec::row_major(DType::BF16, &[1, 1, 1])?)?);
        let e = g
            .fp8_matmul(a, b, &s, false)
            .err()
            .ok_or("bf16 scale_c accepted")?;
        ensure!(arg_of(&e).contains("scale_c's element type"), "{e}");
        s.scale_c = None;
        let e = g
            .fp8_matmul(a, b, &s, false)
            .err()
            .ok_or("K mismatch accepted")?;
        ensure!(matches!(e, Error::Mismatch { .. }), "{e:?}");
        ensure!(
            g.compute_type() == DType::F32,
            "compute type restored after an error"
        );
        // A tensor of another graph.
        let mut other = Graph::new();
        let x = other.input("x", TensorSpec::row_major(DType::F32, &[1, 1, 1])?)?;
        s.descale_b = x;
        let e = g
            .fp8_matmul(a, a, &s, false)
            .err()
            .ok_or("foreign tensor accepted")?;
        ensure!(arg_of(&e).contains("tensor"), "{e}");
        Ok(())
    }));

    t.push(unit("fp8_target_rule", || {
        for (ver, ok) in [
            (890, true),
            (900, true),
            (1000, true),
            (1200, true),
            (880, false),
            (870, false),
            (800, false),
            (750, false),
            (0, false),
            (-10, false),
            (i64::MIN, false),
            (i64::MAX, true),
        ] {
            let r = check_fp8_target("an FP8 matmul", ver);
            ensure!(r.is_ok() == ok, "{ver}: {r:?}");
            if let Err(e) = r {
                ensure!(
                    matches!(e, Error::Unsupported { needs: Some(_), .. }),
                    "{e:?}"
                );
                ensure!(e.to_string().contains("8.9"), "{e}");
            }
        }
        Ok(())
    }));

    t.push(unit("fp8_sdpa_rules_at_their_boundaries", || {
        use DType::*;
        let v = |a, b, c| (a, b, c);
        // (config, backward, device_ver, cuDNN, allowed) by the frontend 1.32's rules.
        let c = |d: i64, o: DType| Fp8SdpaConfig::new(1, 2, 128, 128, d).o_dtype(o);
        let cases = [
            (c(128, Fp8E4M3), false, 900, v(9, 28, 1), true),
            (c(128, Fp8E4M3), false, 890, v(9, 28, 1), false),
            (c(128, Fp8E4M3), false, 900, v(9, 0, 0), false),
            (c(128, Fp8E4M3), false, 900, v(9, 1, 0), true),
            (c(128, Fp8E4M3), false, 900, v(9, 10, 0), false),
            (c(128, Fp8E4M3), false, 900, v(9, 10, 1), true),
            (c(256, Fp8E4M3), false, 900, v(9, 28, 1), true),
            (c(272, Fp8E4M3), false, 900, v(9, 28, 1), false),
            (c(256, Fp8E4M3), false, 1000, v(9, 25, 0), false),
            (c(256, Fp8E4M3), false, 1000, v(9, 26, 0), true),
            (c(144, Fp8E4M3), false, 1000, v(9, 28, 1), false),
            (c(128, BF16), false, 900, v(9, 28, 1), false),
            (c(128, BF16), false, 1000, v(9, 12, 0), false),
            (c(128, BF16), false, 1000, v(9, 13, 0), true),
            (c(128, Fp8E4M3), true, 900, v(9, 28, 1), true),
            (c(64, Fp8E4M3), true, 900, v(9, 28, 1), false),
            (c(64, Fp8E4M3), true, 1000, v(9, 28, 1), true),
            (c(256, Fp8E4M3), true, 1000, v(9, 28, 1), false),
            (c(128, Fp8E4M3), true, 800, v(9, 28, 1), false),
        ];
        for (cfg, bwd, ver, cu, allowed) in cases {
            let r = cfg.check_target_for(bwd, ver, cu);
            ensure!(
                r.is_ok() == allowed,
                "d{} {} bwd={bwd} sm{ver} {cu:?}: {r:?}",
                cfg.head_dim,
                cfg.o_dtype
            );
            if let Err(e) = r {
                ensure!(
                    matches!(e, Error::Unsupported { needs: Some(_), .. }),
                    "{e:?}"
                );
            }
        }
        // Config errors name the field.
        let bad = [
            (Fp8SdpaConfig::new(0, 1, 1, 1, 16), "batch"),
            (Fp8SdpaConfig::new(1, 1, 1, 1, 24), "head_dim"),
            (Fp8SdpaConfig::new(1, 1, 1 << 40, 1, 16), "seq_q"),
            (Fp8SdpaConfig::new(1, 1, 1, 1, 16).dtype(BF16), "dtype"),
            (Fp8SdpaConfig::new(1, 1, 1, 1, 16).o_dtype(F32), "o_dtype"),
            (Fp8SdpaConfig::new(1, 1, 1, 1, 16).scale(f64::NAN), "scale"),
            // Finite in f64, +inf and 0 in the f32 cuDNN gets.
            (Fp8SdpaConfig::new(1, 1, 1, 1, 16).scale(1e39), "scale"),
            (Fp8SdpaConfig::new(1, 1, 1, 1, 16).scale(1e-50), "scale"),
            (
                Fp8SdpaConfig::new(i64::MAX, i64::MAX, 1, 1, 16),
                "element count",
            ),
        ];
        for (cfg, field) in bad {
            let e = cfg.validate().err().ok_or(format!("{field}: accepted"))?;
            ensure!(arg_of(&e).contains(field), "{field}: {e}");
        }
        // Builder errors: a q of another type, a bf16 O for the backward.
        let cfg = Fp8SdpaConfig::new(1, 2, 64, 64, 64);
        let mut g = Graph::new();
        let q = g.input("q", cfg.q_spec()?.with_dtype(F16))?;
        let k = g.input("k", cfg.kv_spec()?)?;
        let v = g.input("v", cfg.kv_spec()?)?;
        let e = g
            .sdpa_fp8_forward(q, k, v, &cfg)
            .err()
            .ok_or("f16 q accepted")?;
        ensure!(arg_of(&e).contains("q `q` element type"), "{e}");
        let o = g.input("o", cfg.q_spec()?)?;
        let st = g.input("st", cfg.stats_spec()?)?;
        let bcfg = cfg.clone().o_dtype(BF16);
        let e = g
            .sdpa_fp8_backward(k, k, v, o, o, st, Fp8E5M2, &bcfg)
            .err()
            .ok_or("bf16 o accepted")?;
        ensure!(arg_of(&e).contains("o_dtype"), "{e}");
        let e = g
            .sdpa_fp8_backward(k, k, v, o, o, st, BF16, &cfg)
            .err()
            .ok_or("bf16 grad accepted")?;
        ensure!(arg_of(&e).contains("grad"), "{e}");
        ensure!(!g.signature().contains("sdpa_fp8"), "no op added on error");
        Ok(())
    }));

    t.push(unit("reference_attention_fp8_by_hand", || {
        use cudnn::Fp8Format::E4M3;
        use cudnn::reference::attention_fp8::{Fp8AttnScales, Fp8AttnShape, forward};
        use cudnn::reference::gemm_fp8::OutputType;
        // Causal, S_q = S_kv = 2, D = 1: q = [1, 1], k = [1, 2], v = [4, 8].
        // Row 0 sees key 0 only: P = [1, 0], O = 4, stats = 1.
        // Row 1: P = softmax([1, 2]) = [0.2689, 0.7311], in E4M3 0.28125 and
        // 0.75 (steps 2^-5 and 2^-4): O = 0.28125*4 + 0.75*8 = 7.125,
        // stats = 2 + ln(1 + e^-1).
        let shape = Fp8AttnShape {
            batch: 1,
            heads: 1,
            seq_q: 2,
            seq_kv: 2,
            head_dim: 1,
        };
        let r = forward(
            &[1.0, 1.0],
            &[1.0, 2.0],
            &[4.0, 8.0],
            shape,
            1.0,
            true,
            E4M3,
            OutputType::F32,
            &Fp8AttnScales::default(),
        )?;
        ensure!(r.o == [4.0, 7.125], "o {:?}", r.o);
        ensure!((r.stats[0] - 1.0).abs() < 1e-12, "stats {:?}", r.stats);
        ensure!(
            (r.stats[1] - (2.0 + (1.0 + (-1.0f64).exp()).ln())).abs() < 1e-12,
            "stats {:?}",
            r.stats
        );
        ensure!(
            r.amax_s == 1.0 && r.amax_o == 7.125,
            "amax {} {}",
            r.amax_s,
            r.amax_o
        );
        // The descales multiply the scores: 2 * 0.5 changes nothing; scale_o
        // doubles O (exact in f32), amax_o is taken before it.
        let s = Fp8AttnScales {
            descale_q: 2.0,
            descale_k: 0.5,
            scale_o: 2.0,
            ..Fp8AttnScales::default()
        };
        let r2 = forward(
            &[1.0, 1.0],
            &[1.0, 2.0],
            &[4.0, 8.0],
            shape,
            1.0,
            true,
            E4M3,
            OutputType::F32,
            &s,
        )?;
        ensure!(r2.o == [8.0, 14.25] && r2.amax_o == 7.125, "{r2:?}");
        // Inputs are rounded to E4M3 first: 1.03 reads as 1.0.
        let r3 = forward(
            &[1.03, 1.0],
            &[1.0, 2.0],
            &[4.0, 8.0],
            shape,
            1.0,
            true,
            E4M3,
            OutputType::F32,
            &Fp8AttnScales::default(),
        )?;
        ensure!(r3.o == r.o, "{r3:?}");
        // Typed errors naming the argument.
        let e = forward(
            &[1.0],
            &[1.0, 2.0],
            &[4.0, 8.0],
            shape,
            1.0,
            true,
            E4M3,
            OutputType::F32,
            &Fp8AttnScales::default(),
        )
        .err()
        .ok_or("short q accepted")?;
        ensure!(arg_of(&e).contains("q length"), "{e}");
        let bad = Fp8AttnScales {
            scale_o: f64::NAN,
            ..Fp8AttnScales::default()
        };
        let e = forward(
            &[1.0, 1.0],
            &[1.0, 2.0],
            &[4.0, 8.0],
            shape,
            1.0,
            true,
            E4M3,
            OutputType::F32,
            &bad,
        )
        .err()
        .ok_or("NaN scale accepted")?;
        ensure!(arg_of(&e).contains("scale_o"), "{e}");
        // Backward by hand: one query, two equal keys (P = [0.5, 0.5], exact
        // in FP8), v = [2, 4] so O = 3; dO = 1: Δ = 3, dP = (v - 3) * 0.5 =
        // [-0.5, 0.5], dQ = dP·K = 0, dK = dPᵀ·Q = [-0.5, 0.5], dV = Pᵀ·dO
        // = [0.5, 0.5].
        use cudnn::reference::attention_fp8::{Fp8AttnBwdScales, backward};
        let s1 = Fp8AttnShape {
            batch: 1,
            heads: 1,
            seq_q: 1,
            seq_kv: 2,
            head_dim: 1,
        };
        let stats = [1.0 + 2f64.ln()];
        let g = backward(
            &[1.0],
            &[1.0, 1.0],
            &[2.0, 4.0],
            &[3.0],
            &[1.0],
            &stats,
            s1,
            1.0,
            false,
            E4M3,
            cudnn::Fp8Format::E5M2,
            &Fp8AttnBwdScales::default(),
        )?;
        ensure!(
            g.dq == [0.0] && g.dk == [-0.5, 0.5] && g.dv == [0.5, 0.5],
            "{g:?}"
        );
        // (exp(-ln 2) is 0.5 within an ulp in f64.)
        let near = |a: [f64; 4], b: [f64; 4]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-12);
        ensure!(near(g.amax, [0.0, 0.5, 0.5, 0.5]), "amax {:?}", g.amax);
        // The gradient scales multiply after the amax; E5M2 rounds 0.5 * 3 = 1.5 exactly.
        let sc = Fp8AttnBwdScales {
            scale_dv: 3.0,
            scale_dk: 3.0,
            ..Fp8AttnBwdScales::default()
        };
        let g2 = backward(
            &[1.0],
            &[1.0, 1.0],
            &[2.0, 4.0],
            &[3.0],
            &[1.0],
            &stats,
            s1,
            1.0,
            false,
            E4M3,
            cudnn::Fp8Format::E5M2,
            &sc,
        )?;
        ensure!(
            g2.dv == [1.5, 1.5] && g2.dk == [-1.5, 1.5] && g2.amax == g.amax,
            "{g2:?}"
        );
        let e = backward(
            &[1.0],
            &[1.0, 1.0],
            &[2.0, 4.0],
            &[3.0],
            &[1.0],
            &[],
            s1,
            1.0,
            false,
            E4M3,
            E4M3,
            &Fp8AttnBwdScales::default(),
        )
        .err()
        .ok_or("empty stats accepted")?;
        ensure!(arg_of(&e).contains("stats length"), "{e}");
        let huge = Fp8AttnShape {
            batch: 1 << 20,
            heads: 1 << 20,
            seq_q: 1 << 20,
            seq_kv: 1,
            head_dim: 1,
        };
        ensure!(
            forward(
                &[],
                &[],
                &[],
                huge,
                1.0,
                false,
                E4M3,
                OutputType::F32,
                &Fp8AttnScales::default()
            )
            .is_err(),
            "huge shape"
        );
        Ok(())
    }));

    t.push(host9("fp8_matmul_plans_per_target", || {
        let mut failures = vec![];
        for case in matmul_cases() {
            for tgt in crate::support::targets(&FP8_TARGETS) {
                match case.graph().and_then(|g| plans(&g, tgt, 4)) {
                    Ok((e, c, p)) => {
                        let first = p.first();
                        eprintln!(
                            "fp8 matmul {:<42} {tgt}: engines {e:>2} configs {c:>2} plans {:>2} engine {:?} workspace {:?}",
                            case.tag(),
                            p.len(),
                            first.and_then(|p| p.engine()),
                            first.map(|p| p.workspace_size())
                        );
                        if p.is_empty() {
                            failures.push(format!("{} on {tgt}: no plan", case.tag()));
                        }
                    }
                    Err(err) => failures.push(format!("{} on {tgt}: {err}", case.tag())),
                }
            }
            match case.graph().and_then(|g| plans(&g, "a100", 4)) {
                Err(Error::Unsupported { what, needs }) => {
                    ensure!(what.contains("FP8 matmul") && what.contains("8.0"), "{what}");
                    ensure!(needs.is_some_and(|n| n.contains("8.9")), "names what is needed");
                }
                other => failures.push(format!(
                    "{} on a100: want a typed Unsupported, got {:?}",
                    case.tag(),
                    other.map(|(e, c, p)| (e, c, p.len()))
                )),
            }
        }
        ensure!(failures.is_empty(), "{failures:#?}");
        Ok(())
    }));

    t.push(host9("fp8_matmul_plan_json_passes_the_allow_list", || {
        for case in [
            MatmulCase::new(DType::Fp8E4M3, DType::Fp8E4M3, DType::BF16),
            MatmulCase::new(DType::Fp8E4M3, DType::Fp8E5M2, DType::Fp8E5M2),
        ] {
            let g = case.graph()?;
            let og = g.build()?;
            let target = Target::preset("h200")?;
            let (plan, _) = Plan::build(&og, &target, &Policy::default())?;
            let json = plan.cudnn_json()?;
            check_plan_json(&json, og.io(), &target, None)
                .map_err(|e| format!("{}: {e}", case.tag()))?;
            // The allow-list admits this finalize mode, not any other text.
            let mode = "\"GENERIC_MATMUL_FUSION\"";
            if json.contains(mode) {
                let bad = json.replace(mode, "\"GENERIC_MATMUL_FUSION_X\"");
                let e = check_plan_json(&bad, og.io(), &target, None)
                    .err()
                    .ok_or("an unknown finalize mode passed")?;
                ensure!(e.to_string().contains("finalizeMode"), "{e}");
            }
            // Our own plan (a runtime-compiled one carries kernel code: trusted).
            // SAFETY: `json` is cuDNN's JSON, unchanged, of the plan built just above with the
            // loaded cuDNN, and `og.io()` is that plan's own IoSignature.
            let back = unsafe {
                Plan::from_cudnn_json_unverified(&json, &target, Arc::new(og.io().clone()))
            }?;
            ensure!(back.io() == plan.io(), "the same tensors back");
            ensure!(
                back.workspace_size() == plan.workspace_size(),
                "the same workspace"
            );
            eprintln!(
                "fp8 matmul {} h200 plan JSON: {} bytes, finalize mode {}",
                case.tag(),
                json.len(),
                if json.contains("GENERIC_MATMUL_FUSION") {
                    "GENERIC_MATMUL_FUSION"
                } else {
                    "other"
                }
            );
        }
        Ok(())
    }));

    t.push(host9("fp8_sdpa_forward_plans_per_target", || {
        let cudnn = cudnn_version()?;
        let mut failures = vec![];
        for cfg in sdpa_fwd_cases() {
            for (tgt, ver) in [("h200", 900), ("b200", 1000), ("l4", 890), ("a100", 800)] {
                let rule = cfg.check_target_for(false, ver, cudnn);
                match sdpa_fwd_graph(&cfg).and_then(|g| plans(&g, tgt, 3)) {
                    Ok((e, c, p)) => {
                        let first = p.first();
                        eprintln!(
                            "fp8 sdpa fwd {:<40} {tgt}: engines {e:>2} configs {c:>2} plans {:>2} engine {:?} workspace {:?}",
                            sdpa_tag(&cfg),
                            p.len(),
                            first.and_then(|p| p.engine()),
                            first.map(|p| p.workspace_size())
                        );
                        if p.is_empty() || rule.is_err() {
                            failures.push(format!("{} on {tgt}: {} plans, rule {rule:?}", sdpa_tag(&cfg), p.len()));
                        }
                    }
                    Err(err) => {
                        let text = err.to_string();
                        eprintln!("fp8 sdpa fwd {:<40} {tgt}: refused: {}", sdpa_tag(&cfg), &text[..text.len().min(200)]);
                        if rule.is_ok() {
                            failures.push(format!("{} on {tgt}: the rule allows it, cuDNN: {err}", sdpa_tag(&cfg)));
                        } else if !matches!(err, Error::Unsupported { .. }) {
                            failures.push(format!("{} on {tgt}: untyped {err:?}", sdpa_tag(&cfg)));
                        }
                    }
                }
            }
        }
        ensure!(failures.is_empty(), "{failures:#?}");
        Ok(())
    }));

    t.push(host9("fp8_sdpa_backward_plans_per_target", || {
        let cudnn = cudnn_version()?;
        let mut failures = vec![];
        for (cfg, grad) in sdpa_bwd_cases() {
            for (tgt, ver) in [("h200", 900), ("b200", 1000), ("l4", 890), ("a100", 800)] {
                let rule = cfg.check_target_for(true, ver, cudnn);
                let tag = format!("{} grad {grad}", sdpa_tag(&cfg));
                match sdpa_bwd_graph(&cfg, grad).and_then(|g| plans(&g, tgt, 3)) {
                    Ok((e, c, p)) => {
                        let first = p.first();
                        eprintln!(
                            "fp8 sdpa bwd {tag:<48} {tgt}: engines {e:>2} configs {c:>2} plans {:>2} engine {:?} workspace {:?}",
                            p.len(),
                            first.and_then(|p| p.engine()),
                            first.map(|p| p.workspace_size())
                        );
                        if p.is_empty() || rule.is_err() {
                            failures.push(format!("{tag} on {tgt}: {} plans, rule {rule:?}", p.len()));
                        }
                    }
                    Err(err) => {
                        let text = err.to_string();
                        eprintln!("fp8 sdpa bwd {tag:<48} {tgt}: refused: {}", &text[..text.len().min(200)]);
                        if rule.is_ok() {
                            failures.push(format!("{tag} on {tgt}: the rule allows it, cuDNN: {err}"));
                        } else if !matches!(err, Error::Unsupported { .. }) {
                            failures.push(format!("{tag} on {tgt}: untyped {err:?}"));
                        }
                    }
                }
            }
        }
        ensure!(failures.is_empty(), "{failures:#?}");
        Ok(())
    }));

    t.push(host9("block_scale_ops_finalize_and_are_gated", || {
        let cudnn = cudnn_version()?;
        // Quantize: bf16 [128, 256] -> E4M3 values and E8M0 scales [128, 8].
        let mut g = Graph::new();
        let x = g.input("x", TensorSpec::row_major(DType::BF16, &[128, 256])?)?;
        let q = g.block_scale_quantize(x, DType::Fp8E4M3)?;
        ensure!(
            g.dims(q.scale)? == [128, 8],
            "scale dims {:?}",
            g.dims(q.scale)?
        );
        ensure!(g.spec(q.scale)?.dtype() == DType::Fp8E8M0, "E8M0 scales");
        // The same, 4-D (whole 128 x 4 scale tiles: rows 128, last 128).
        let mut g4 = Graph::new();
        let x4 = g4.input("x", TensorSpec::row_major(DType::F32, &[2, 1, 128, 128])?)?;
        let q4 = g4.block_scale_quantize(x4, DType::Fp8E5M2)?;
        ensure!(g4.dims(q4.scale)? == [2, 1, 128, 4], "4-D scale dims");
        // Shapes whose scales NVIDIA pads (rows not a multiple of 128, or
        // fewer than 4 scale columns) are refused before cuDNN.
        let mut gp = Graph::new();
        let xp = gp.input("x", TensorSpec::row_major(DType::F32, &[2, 1, 64, 64])?)?;
        let err = gp
            .block_scale_quantize(xp, DType::Fp8E5M2)
            .err()
            .ok_or("padded 4-D accepted")?;
        ensure!(arg_of(&err).contains("x's dims"), "{err}");
        // Dequantize (its own graph): E4M3 [128, 256] with its scales -> f32.
        let mut d = Graph::new();
        let xq = d.input("xq", TensorSpec::row_major(DType::Fp8E4M3, &[128, 256])?)?;
        let sc = d.input("scale", TensorSpec::row_major(DType::Fp8E8M0, &[128, 8])?)?;
        let y = d.block_scale_dequantize(xq, sc)?;
        d.output(y, DType::F32)?;
        for (name, graph) in [("quantize", &g), ("quantize 4-D", &g4), ("dequantize", &d)] {
            // cuDNN finalizes both operations and their graphs on the host.
            let og = graph
                .build()
                .map_err(|e| format!("{name}: cuDNN {cudnn:?} refuses the graph: {e}"))?;
            eprintln!(
                "block scale {name}: graph finalized, {} engines",
                og.engine_count()?
            );
            for tgt in ["h200", "a100"] {
                let e = Plan::build(&og, &Target::preset(tgt)?, &Policy::default())
                    .err()
                    .ok_or(format!("{name} planned for {tgt}"))?;
                ensure!(
                    matches!(e, Error::Unsupported { .. }) && e.to_string().contains("Blackwell"),
                    "{name} {tgt}: {e}"
                );
            }
            // Blackwell passes the crate's rule; without a device cuDNN offers
            // no engine (a typed refusal), which the GPU tier will tell apart.
            match Plan::build(&og, &Target::preset("b200")?, &Policy::default()) {
                Ok((p, _)) => {
                    eprintln!("block scale {name} b200: planned, engine {:?}", p.engine())
                }
                Err(e) => {
                    eprintln!("block scale {name} b200: {e}");
                    ensure!(
                        is_typed(&e) && !e.to_string().contains("Blackwell"),
                        "{name} b200: {e:?}"
                    );
                }
            }
        }
        // 3-D: cuDNN 9.28.1 wants the scales of a 3-D quantize in the
        // F8_128x4 reordered layout (BAD_PARAM_ATTRIBUTE_TYPE at finalize
        // otherwise), which the crate's tensors cannot describe: both
        // operations refuse a 3-D x with Unsupported, naming the 4-D view.
        let mut t3 = Graph::new();
        let x3 = t3.input("x", TensorSpec::row_major(DType::BF16, &[1, 128, 256])?)?;
        let err = t3
            .block_scale_quantize(x3, DType::Fp8E4M3)
            .err()
            .ok_or("3-D quantize accepted")?;
        ensure!(
            matches!(err, Error::Unsupported { .. })
                && err.to_string().contains("[1, 1, 128, 256]"),
            "{err}"
        );
        let x3q = t3.input("xq", TensorSpec::row_major(DType::Fp8E4M3, &[1, 128, 256])?)?;
        let s3 = t3.input("s", TensorSpec::row_major(DType::Fp8E8M0, &[1, 128, 8])?)?;
        let err = t3
            .block_scale_dequantize(x3q, s3)
            .err()
            .ok_or("3-D dequantize accepted")?;
        ensure!(matches!(err, Error::Unsupported { .. }), "{err}");
        // The rule itself.
        ensure!(
            check_block_scale_target(1000, (9, 7, 0)).is_ok(),
            "b200, 9.7"
        );
        ensure!(check_block_scale_target(1000, (9, 6, 1)).is_err(), "9.6");
        ensure!(check_block_scale_target(900, (9, 28, 1)).is_err(), "h200");
        // Typed builder errors.
        let mut e = Graph::new();
        let f = e.input("f", TensorSpec::row_major(DType::BF16, &[4, 48])?)?;
        let err = e
            .block_scale_quantize(f, DType::Fp8E4M3)
            .err()
            .ok_or("48 accepted")?;
        ensure!(arg_of(&err).contains("last dim"), "{err}");
        let g32 = e.input("g", TensorSpec::row_major(DType::BF16, &[4, 64])?)?;
        let err = e
            .block_scale_quantize(g32, DType::BF16)
            .err()
            .ok_or("bf16 out accepted")?;
        ensure!(arg_of(&err).contains("out"), "{err}");
        let s_bad = e.input("s", TensorSpec::row_major(DType::Fp8E8M0, &[128, 1])?)?;
        let x8 = e.input("x8", TensorSpec::row_major(DType::Fp8E4M3, &[128, 128])?)?;
        let err = e
            .block_scale_dequantize(x8, s_bad)
            .err()
            .ok_or("bad scale dims accepted")?;
        ensure!(matches!(err, Error::Mismatch { .. }), "{err:?}");
        let err = e
            .block_scale_dequantize(g32, s_bad)
            .err()
            .ok_or("bf16 x accepted")?;
        ensure!(arg_of(&err).contains("x's element type"), "{err}");
        Ok(())
    }));

    run(t)
}

/// Unsupported, Cudnn, InvalidArgument or Mismatch.
fn is_typed(e: &Error) -> bool {
    support::norm_attention_graphs::is_typed_refusal(e)
}
