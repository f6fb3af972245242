//! Host tier for the graph API: no GPU. The real cuDNN (>= 9.8) builds
//! operation graphs, runs heuristics and finalizes execution plans for named
//! targets (H200, A100, B200) with the crate's driver stub. On cuDNN 8.9 the
//! module must refuse with a typed error instead.
use crate::support;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use cudnn::Error;
use cudnn::graph::backend::{Descriptor, attr, kind};
use cudnn::graph::*;
use proptest::prelude::*;
use support::*;

const TARGETS: [&str; 3] = ["h200", "a100", "b200"];

fn is_cudnn9() -> bool {
    cudnn::sys::cudnn::load()
        .ok()
        .and_then(|l| l.info().version)
        .is_some_and(|v| (v.major, v.minor) >= (9, 8))
}

/// A test that needs cuDNN >= 9.8 (on the cuda12 stack these are skipped
/// visibly; `old_cudnn_refuses` covers that stack).
fn host9(name: &str, f: impl FnOnce() -> TestResult + Send + 'static) -> libtest_mimic::Trial {
    if libs_missing().is_none() && !is_cudnn9() {
        eprintln!("skipped: host::{name}: needs cuDNN >= 9.8 (this stack has an older cuDNN)");
        return crate::support::trial(format!("host::{name}"), f).with_ignored_flag(true);
    }
    host(name, f)
}

fn conv_graph(dtype: DType, nhwc: bool, dir: ConvDirection) -> cudnn::Result<Graph> {
    let spec = |d: &[i64]| {
        if nhwc {
            TensorSpec::nhwc(dtype, d)
        } else {
            TensorSpec::nchw(dtype, d)
        }
    };
    let p = ConvParams::new_2d([1, 1], [1, 1], [1, 1]);
    let (xd, wd) = ([8i64, 64, 28, 28], [64i64, 64, 3, 3]);
    let mut g = Graph::new();
    let out = match dir {
        ConvDirection::Fprop => {
            let x = g.input("x", spec(&xd)?)?;
            let w = g.input("w", spec(&wd)?)?;
            g.conv_fprop(x, w, &p)?
        }
        ConvDirection::Dgrad => {
            let dy = g.input("dy", spec(&xd)?)?;
            let w = g.input("w", spec(&wd)?)?;
            g.conv_dgrad(dy, w, &xd, &p)?
        }
        ConvDirection::Wgrad => {
            let x = g.input("x", spec(&xd)?)?;
            let dy = g.input("dy", spec(&xd)?)?;
            g.conv_wgrad(x, dy, &wd, &p)?
        }
    };
    g.output(out, dtype)?;
    g.rename(out, "out")?;
    Ok(g)
}

/// conv (f16/bf16 NHWC) followed by an epilogue chain.
fn conv_epilogue(dtype: DType, epi: &str) -> cudnn::Result<Graph> {
    let mut g = Graph::new();
    let x = g.input("x", TensorSpec::nhwc(dtype, &[8, 64, 28, 28])?)?;
    let w = g.input("w", TensorSpec::nhwc(dtype, &[64, 64, 3, 3])?)?;
    let mut y = g.conv_fprop(x, w, &ConvParams::new_2d([1, 1], [1, 1], [1, 1]))?;
    for step in epi.split('+').filter(|s| !s.is_empty()) {
        y = match step {
            "bias" => {
                let b = g.input("bias", TensorSpec::nhwc(dtype, &[1, 64, 1, 1])?)?;
                g.bias(y, b)?
            }
            "relu" => g.relu(y)?,
            "sigmoid" => g.sigmoid(y)?,
            "tanh" => g.tanh(y)?,
            "gelu" => g.gelu_erf(y)?,
            "scale" => g.scale(y, 0.5)?,
            "mul" => {
                let m = g.input("m", TensorSpec::nhwc(dtype, &[8, 64, 28, 28])?)?;
                g.mul(y, m)?
            }
            "add" => {
                let z = g.input("z", TensorSpec::nhwc(dtype, &[8, 64, 28, 28])?)?;
                g.add(y, z)?
            }
            other => return Err(cudnn::Error::invalid("epilogue step", "unknown", other)),
        };
    }
    g.output(y, dtype)?;
    g.rename(y, "y")?;
    Ok(g)
}

#[derive(Clone, Copy)]
enum Mm {
    Batched,
    Broadcast,
    Transposed,
}

fn matmul_graph(dtype: DType, shape: Mm, epi: Option<Pointwise>) -> cudnn::Result<Graph> {
    let (b, m, k, n) = (4i64, 128i64, 64i64, 256i64);
    let mut g = Graph::new();
    let a = g.input("a", TensorSpec::row_major(dtype, &[b, m, k])?)?;
    let bt = match shape {
        Mm::Batched => g.input("b", TensorSpec::row_major(dtype, &[b, k, n])?)?,
        Mm::Broadcast => g.input("b", TensorSpec::row_major(dtype, &[1, k, n])?)?,
        // [b, k, n] logically, stored as [b, n, k] (column-major per batch).
        Mm::Transposed => g.input("b", TensorSpec::new(dtype, &[b, k, n], &[k * n, 1, k])?)?,
    };
    let mut c = g.matmul(a, bt)?;
    match epi {
        None => {}
        Some(Pointwise::Add) => {
            let bias = g.input("bias", TensorSpec::row_major(dtype, &[1, 1, n])?)?;
            c = g.bias(c, bias)?;
        }
        Some(Pointwise::Mul) => {
            let s = g.input("s", TensorSpec::row_major(dtype, &[b, m, n])?)?;
            c = g.mul(c, s)?;
        }
        Some(mode) => c = g.pointwise(mode, &[c])?,
    }
    g.output(c, dtype)?;
    g.rename(c, "c")?;
    Ok(g)
}

/// Heuristics (mode A) count and a finalized plan; prints both.
fn plan_counts(label: &str, g: &Graph, target: &str) -> Result<(usize, Plan), Error> {
    let og = g.build()?;
    let t = Target::preset(target)?;
    let policy = Policy::default()
        .with_modes(vec![HeurMode::A])
        .with_allow_tf32(true)
        .with_allow_reduced_precision(true);
    let n = heuristics::candidates(&og, &t, &policy)?.len();
    let (p, r) = Plan::build(
        &og,
        &t,
        &policy.with_modes(vec![HeurMode::A, HeurMode::Fallback]),
    )?;
    eprintln!(
        "  {label} on {target}: {n} configs (mode A), plan engine {:?}, ws {} B, finalize {:.3} s",
        r.chosen,
        p.workspace_size(),
        r.finalize_s
    );
    Ok((n, p))
}

fn expect_unsupported(r: cudnn::Result<(usize, Plan)>, what: &str) -> TestResult {
    match r {
        Err(Error::Unsupported { what: w, .. }) => {
            eprintln!(
                "  {what}: typed Unsupported: {}",
                w.chars().take(160).collect::<String>()
            );
            Ok(())
        }
        Err(e) => Err(format!("{what}: expected a typed Unsupported error, got {e}").into()),
        Ok((n, _)) => Err(format!("{what}: expected no engine, got a plan ({n} configs)").into()),
    }
}

fn h200() -> cudnn::Result<Target> {
    Target::preset("h200")
}

fn simple_pointwise() -> cudnn::Result<Graph> {
    let mut g = Graph::new();
    // cuDNN has pointwise-only engines for channels-last 4-d tensors (none for NCHW).
    let x = g.input("x", TensorSpec::nhwc(DType::F16, &[8, 64, 32, 32])?)?;
    let y = g.relu(x)?;
    g.output(y, DType::F16)?;
    g.rename(y, "y")?;
    Ok(g)
}

pub fn main() {
    if let Ok(path) = std::env::var("CUDNN_RS_GRAPH_CHILD") {
        std::process::exit(child_load(&path));
    }
    let mut t = vec![];

    t.push(host("old_cudnn_refuses", || {
        if is_cudnn9() {
            // On cuDNN >= 9.8 the check passes; the refusal is tested on the cuda12 stack.
            ensure!(
                require_graph_support().is_ok(),
                "cuDNN >= 9.8 must be accepted"
            );
            ensure!(
                Graph::new().build().is_err(),
                "an empty graph must be refused"
            );
            return Ok(());
        }
        let plan = (|| -> cudnn::Result<()> {
            let og = simple_pointwise()?.build()?;
            Plan::build(&og, &Target::preset("h200")?, &Policy::default()).map(|_| ())
        })();
        for r in [
            require_graph_support(),
            simple_pointwise()?.build().map(|_| ()),
            plan,
            Target::device(0).map(|_| ()),
        ] {
            match r {
                Err(Error::Unsupported {
                    what,
                    needs: Some(n),
                }) => {
                    ensure!(
                        n.contains("9.8") && what.contains("without a device"),
                        "message: {what} / {n}"
                    );
                }
                other => {
                    return Err(format!(
                        "expected Unsupported needing cuDNN >= 9.8, got {other:?}"
                    )
                    .into());
                }
            }
        }
        Ok(())
    }));

    t.push(host9("driver_is_stub_without_a_gpu", || {
        let d = driver::ensure()?;
        if has_gpu() {
            ensure!(
                d == driver::Driver::Real,
                "a real driver is there; got {d:?}"
            );
        } else {
            ensure!(
                matches!(d, driver::Driver::Stub(_)) || d == driver::Driver::Real,
                "{d:?}"
            );
            eprintln!("  driver: {d:?}");
        }
        // The stub must not make the runtime think there is a device.
        let rt = cudnn::sys::cudart::load()?;
        let mut n = -1;
        // SAFETY: valid out-pointer.
        let st = unsafe { rt.cudaGetDeviceCount(&mut n) }?;
        if !has_gpu() {
            ensure!(
                st != cudnn::sys::cudart::cudaError::cudaSuccess || n == 0,
                "cudaGetDeviceCount: status {} count {n}",
                st.0
            );
        }
        Ok(())
    }));

    // ---- every op kind and fused pattern, per target ----
    t.push(host9("conv_fprop_dgrad_wgrad_all_targets", || {
        for target in crate::support::targets(&TARGETS) {
            for dir in [
                ConvDirection::Fprop,
                ConvDirection::Dgrad,
                ConvDirection::Wgrad,
            ] {
                for (dtype, nhwc) in [
                    (DType::F32, false),
                    (DType::F32, true),
                    (DType::F16, true),
                    (DType::BF16, true),
                ] {
                    let label = format!("{dir:?} {dtype} {}", if nhwc { "NHWC" } else { "NCHW" });
                    let (n, p) = plan_counts(&label, &conv_graph(dtype, nhwc, dir)?, target)?;
                    ensure!(n > 0, "{label} on {target}: no engine configs");
                    ensure!(p.io().tensors.len() == 3, "{label}: io {:?}", p.io());
                }
            }
        }
        Ok(())
    }));

    t.push(host9("conv_fused_epilogues", || {
        for target in crate::support::targets(&TARGETS) {
            for dtype in [DType::F16, DType::BF16] {
                for epi in [
                    "bias",
                    "bias+relu",
                    "relu",
                    "sigmoid",
                    "tanh",
                    "mul",
                    "scale+bias+relu",
                    "add+relu",
                    "bias+gelu",
                ] {
                    let label = format!("conv+{epi} {dtype}");
                    let (n, _) = plan_counts(&label, &conv_epilogue(dtype, epi)?, target)?;
                    ensure!(n > 0, "{label} on {target}: no engine configs");
                }
            }
        }
        Ok(())
    }));

    t.push(host9("matmul_shapes_and_epilogues", || {
        let epis = [
            None,
            Some(Pointwise::Add),
            Some(Pointwise::Relu),
            Some(Pointwise::GeluErf),
            Some(Pointwise::GeluTanh),
            Some(Pointwise::Sigmoid),
            Some(Pointwise::Tanh),
            Some(Pointwise::Mul),
        ];
        for target in crate::support::targets(&TARGETS) {
            for dtype in [DType::F16, DType::BF16] {
                for shape in [Mm::Batched, Mm::Broadcast, Mm::Transposed] {
                    for epi in epis {
                        // Every epilogue on the batched shape; the plain matmul on the others.
                        if !matches!(shape, Mm::Batched) && epi.is_some() {
                            continue;
                        }
                        let label = format!(
                            "matmul {} {dtype}{}",
                            match shape {
                                Mm::Batched => "batched",
                                Mm::Broadcast => "broadcast",
                                Mm::Transposed => "transposed",
                            },
                            epi.map(|e| format!(" + {e:?}")).unwrap_or_default()
                        );
                        let (n, _) =
                            plan_counts(&label, &matmul_graph(dtype, shape, epi)?, target)?;
                        ensure!(n > 0, "{label} on {target}: no engine configs");
                    }
                }
            }
        }
        Ok(())
    }));

    t.push(host9(
        "dgrad_relu_backward_pointwise_reduction_rowsum",
        || {
            for target in crate::support::targets(&TARGETS) {
                // dgrad + relu backward.
                let mut g = Graph::new();
                let dy = g.input("dy", TensorSpec::nhwc(DType::F16, &[8, 64, 28, 28])?)?;
                let w = g.input("w", TensorSpec::nhwc(DType::F16, &[64, 64, 3, 3])?)?;
                let x = g.input("x", TensorSpec::nhwc(DType::F16, &[8, 64, 28, 28])?)?;
                let dx = g.conv_dgrad(
                    dy,
                    w,
                    &[8, 64, 28, 28],
                    &ConvParams::new_2d([1, 1], [1, 1], [1, 1]),
                )?;
                let dx = g.relu_backward(dx, x)?;
                g.output(dx, DType::F16)?;
                let (n, _) = plan_counts("dgrad + relu backward", &g, target)?;
                ensure!(n > 0, "dgrad + relu bwd on {target}");
                // pointwise alone.
                let (n, _) = plan_counts("relu alone", &simple_pointwise()?, target)?;
                ensure!(n > 0, "pointwise alone on {target}");
                // reduction ADD to [1, C, 1, 1].
                let mut g = Graph::new();
                let x = g.input("x", TensorSpec::nhwc(DType::F16, &[8, 64, 28, 28])?)?;
                let r = g.reduction(Reduce::Add, x, &[1, 64, 1, 1])?;
                g.output(r, DType::F32)?;
                let (n, _) = plan_counts("reduction add to [1,C,1,1]", &g, target)?;
                ensure!(n > 0, "reduction on {target}");
                // matmul + row sum.
                let mut g = Graph::new();
                let a = g.input("a", TensorSpec::row_major(DType::F16, &[4, 128, 64])?)?;
                let b = g.input("b", TensorSpec::row_major(DType::F16, &[4, 64, 256])?)?;
                let c = g.matmul(a, b)?;
                let s = g.reduction(Reduce::Add, c, &[4, 128, 1])?;
                g.output(s, DType::F32)?;
                let (n, _) = plan_counts("matmul + row sum", &g, target)?;
                ensure!(n > 0, "matmul + row sum on {target}");
            }
            Ok(())
        },
    ));

    t.push(host9("every_pointwise_mode_builds", || {
        // Every mode the loaded cuDNN has must make a valid op graph;
        // engines exist for the common ones.
        let v = cudnn::sys::cudnn::load()?
            .info()
            .version
            .ok_or("cuDNN version")?;
        let mut with_plans = 0;
        let mut refused = 0;
        for mode in Pointwise::all() {
            let mut g = Graph::new();
            let shape = [4i64, 32, 256];
            let x = g.input("x", TensorSpec::row_major(DType::F32, &shape)?)?;
            let ins: Vec<Tensor> = match mode.arity() {
                Arity::Unary => vec![x],
                Arity::Binary => vec![x, g.input("b", TensorSpec::row_major(DType::F32, &shape)?)?],
                Arity::Backward => vec![
                    g.input("dy", TensorSpec::row_major(DType::F32, &shape)?)?,
                    x,
                ],
                Arity::Ternary => vec![
                    x,
                    g.input("b", TensorSpec::row_major(DType::F32, &shape)?)?,
                    g.input("t", TensorSpec::row_major(DType::Bool, &shape)?)?,
                ],
            };
            let y = g.pointwise(mode, &ins)?;
            let out_type = if mode.is_logical() {
                DType::Bool
            } else {
                DType::F32
            };
            g.output(y, out_type)?;
            // A mode newer than the loaded cuDNN: a typed refusal naming
            // the mode and both versions, before cuDNN is asked.
            if let Some(need) = mode.min_cudnn().filter(|n| (v.major, v.minor) < *n) {
                match g.build() {
                    Err(Error::Unsupported {
                        what,
                        needs: Some(needs),
                    }) => {
                        let want = format!("cuDNN {}.{} or newer", need.0, need.1);
                        ensure!(
                            what.contains(&mode.name())
                                && what.contains(&format!("{}.{}", v.major, v.minor))
                                && needs == want,
                            "{mode:?}: {what} / {needs}"
                        );
                        refused += 1;
                        eprintln!(
                            "  {mode:?}: refused on {}.{}: {what}; needs {needs}",
                            v.major, v.minor
                        );
                        continue;
                    }
                    other => return Err(format!("{mode:?} on cuDNN {v:?}: {other:?}").into()),
                }
            }
            let og = g
                .build()
                .map_err(|e| format!("{mode:?}: op graph refused: {e}"))?;
            let n = heuristics::candidates(
                &og,
                &h200()?,
                &Policy::default().with_modes(vec![HeurMode::A]),
            )?
            .len();
            if n > 0 {
                with_plans += 1;
            }
            eprintln!("  {mode:?}: {n} configs");
        }
        ensure!(
            with_plans >= 30,
            "only {with_plans} pointwise modes have engines on H200"
        );
        let newer = Pointwise::all()
            .into_iter()
            .filter(|m| m.min_cudnn().is_some_and(|n| (v.major, v.minor) < n))
            .count();
        ensure!(
            refused == newer,
            "{refused} refused, {newer} newer than {v:?}"
        );
        Ok(())
    }));

    t.push(unit("pointwise_version_rule", || {
        // FloorMod came with cuDNN 9.26 (NVIDIA's release notes); every
        // other mode is in every cuDNN the graph API runs on (9.8 on).
        ensure!(Pointwise::FloorMod.min_cudnn() == Some((9, 26)), "FloorMod");
        let mut runner = crate::support::prop_runner(400);
        let modes = Pointwise::all();
        let n = modes.len();
        runner
            .run(&(0..n, 0u32..20, 0u32..60), |(i, major, minor)| {
                let mode = modes[i];
                let r = mode.supported_by(major, minor);
                let newer = mode == Pointwise::FloorMod && (major, minor) < (9, 26);
                match (newer, r) {
                    (false, Ok(())) => Ok(()),
                    (
                        true,
                        Err(Error::Unsupported {
                            what,
                            needs: Some(needs),
                        }),
                    ) if what.contains("FloorMod")
                        && what.contains(&format!("{major}.{minor}"))
                        && needs == "cuDNN 9.26 or newer" =>
                    {
                        Ok(())
                    }
                    (_, r) => Err(TestCaseError::fail(format!(
                        "{mode:?} on {major}.{minor}: {r:?}"
                    ))),
                }
            })
            .map_err(|e| e.to_string())?;
        Ok(())
    }));

    t.push(host9("real_limits_are_typed_unsupported", || {
        // relu backward then wgrad: "No mainloop fusion".
        let mut g = Graph::new();
        let x = g.input("x", TensorSpec::nhwc(DType::F16, &[8, 64, 28, 28])?)?;
        let dy = g.input("dy", TensorSpec::nhwc(DType::F16, &[8, 64, 28, 28])?)?;
        let a = g.input("act", TensorSpec::nhwc(DType::F16, &[8, 64, 28, 28])?)?;
        let dy2 = g.relu_backward(dy, a)?;
        let dw = g.conv_wgrad(
            x,
            dy2,
            &[64, 64, 3, 3],
            &ConvParams::new_2d([1, 1], [1, 1], [1, 1]),
        )?;
        g.output(dw, DType::F32)?;
        expect_unsupported(
            plan_counts("relu bwd then wgrad", &g, "h200"),
            "relu backward then wgrad",
        )?;
        // MAX reduction to [N, C, 1, 1].
        let mut g = Graph::new();
        let x = g.input("x", TensorSpec::nhwc(DType::F16, &[8, 64, 28, 28])?)?;
        let r = g.reduction(Reduce::Max, x, &[8, 64, 1, 1])?;
        g.output(r, DType::F32)?;
        expect_unsupported(
            plan_counts("max reduction to [N,C,1,1]", &g, "h200"),
            "MAX reduction to [N,C,1,1]",
        )
    }));

    t.push(host9("policy_filters", || {
        let og = conv_graph(DType::F32, true, ConvDirection::Fprop)?.build()?;
        let t = h200()?;
        let all = heuristics::candidates(&og, &t, &Policy::default().with_allow_tf32(true).with_allow_reduced_precision(true))?;
        let strict = heuristics::candidates(&og, &t, &Policy::default())?;
        ensure!(all.iter().all(|c| c.rejected.is_none()), "permissive policy rejected something");
        let tf32 = all.iter().filter(|c| c.numerical_notes.contains(&NumericalNote::TensorCore)).count();
        let rejected = strict.iter().filter(|c| c.rejected.is_some()).count();
        eprintln!("  f32 conv: {} configs, {tf32} tensor-core (TF32), {rejected} rejected by the default policy", all.len());
        ensure!(rejected >= tf32, "TF32 engines must be rejected by default ({rejected} < {tf32})");
        let (p, _) = Plan::build(&og, &t, &Policy::default())?;
        let chosen = strict.iter().find(|c| Some(c.engine) == p.engine()).ok_or("chosen engine not among candidates")?;
        ensure!(!chosen.numerical_notes.contains(&NumericalNote::TensorCore), "default policy chose a TF32 engine");
        // Workspace limit 0: every chosen plan needs none.
        let (p, _) = Plan::build(&og, &t, &Policy::default().with_max_workspace(Some(0)))?;
        ensure!(p.workspace_size() == 0, "workspace limit 0 gave {}", p.workspace_size());
        // Deterministic only.
        let det = heuristics::candidates(&og, &t, &Policy::default().with_deterministic_only(true))?;
        ensure!(
            det.iter().filter(|c| c.rejected.is_none()).all(|c| !c.numerical_notes.contains(&NumericalNote::Nondeterministic)),
            "a nondeterministic engine passed deterministic_only"
        );
        // No runtime compilation: matmul (runtime-compiled only) has none left.
        let og = matmul_graph(DType::F16, Mm::Batched, Some(Pointwise::Relu))?.build()?;
        let r = Plan::build(&og, &t, &Policy::default().with_allow_runtime_compilation(false));
        match r {
            Err(Error::Unsupported { what, .. }) => ensure!(what.contains("ruled out"), "{what}"),
            Ok((p, _)) => {
                let c = heuristics::candidates(&og, &t, &Policy::default())?;
                let e = c.iter().find(|c| Some(c.engine) == p.engine()).ok_or("engine")?;
                ensure!(!e.behavior_notes.contains(&BehaviorNote::RuntimeCompilation), "runtime-compiled engine chosen");
            }
            Err(e) => return Err(e.to_string().into()),
        }
        // Mode order: FALLBACK first gives FALLBACK's configs first.
        let og = conv_graph(DType::F16, true, ConvDirection::Fprop)?.build()?;
        let c = heuristics::candidates(&og, &t, &Policy::default().with_modes(vec![HeurMode::Fallback, HeurMode::A]))?;
        ensure!(c.first().is_some_and(|c| c.mode == HeurMode::Fallback), "mode order not kept");
        ensure!(
            heuristics::candidates(&og, &t, &Policy::default().with_modes(vec![])).is_err(),
            "no modes must be an error"
        );
        for c in c.iter().take(3) {
            eprintln!("  {}", c.describe());
        }
        Ok(())
    }));

    t.push(host9("shape_errors_name_op_tensor_and_shapes", || {
        let mut g = Graph::new();
        let x = g.input("x", TensorSpec::nhwc(DType::F16, &[8, 64, 28, 28])?)?;
        let w = g.input("w", TensorSpec::nhwc(DType::F16, &[64, 48, 3, 3])?)?;
        let e = g
            .conv_fprop(x, w, &ConvParams::new_2d([1, 1], [1, 1], [1, 1]))
            .err()
            .ok_or("channels 64 vs 48 accepted")?;
        ensure!(
            e.to_string().contains("conv_fprop") && e.to_string().contains("48"),
            "{e}"
        );
        let dy = g.input("dy", TensorSpec::nhwc(DType::F16, &[8, 64, 14, 14])?)?;
        let w2 = g.input("w2", TensorSpec::nhwc(DType::F16, &[64, 64, 3, 3])?)?;
        let e = g
            .conv_dgrad(
                dy,
                w2,
                &[8, 64, 28, 28],
                &ConvParams::new_2d([1, 1], [1, 1], [1, 1]),
            )
            .err()
            .ok_or("dgrad with a wrong dy accepted")?;
        let s = e.to_string();
        ensure!(
            s.contains("dy `dy`") && s.contains("[8, 64, 28, 28]") && s.contains("[8, 64, 14, 14]"),
            "{s}"
        );
        let a = g.input("a", TensorSpec::row_major(DType::F16, &[2, 8, 16])?)?;
        let b = g.input("b", TensorSpec::row_major(DType::F16, &[2, 15, 4])?)?;
        let s = g
            .matmul(a, b)
            .err()
            .ok_or("inner dims 16 vs 15 accepted")?
            .to_string();
        ensure!(
            s.contains("matmul") && s.contains("16") && s.contains("15"),
            "{s}"
        );
        // cuDNN's own refusal comes back with the op, the tensors and cuDNN's reason.
        let mut g = Graph::new();
        let x = g.input("x", TensorSpec::row_major(DType::F16, &[4, 8])?)?;
        let y = g.scale(x, 2.0)?;
        g.output(y, DType::Bool)?; // a float multiply into a boolean output
        match g.build() {
            Ok(_) => eprintln!("  (cuDNN accepts a bool output of mul; no refusal to check)"),
            Err(e) => {
                let s = e.to_string();
                eprintln!("  cuDNN refusal: {s}");
                ensure!(s.contains("op #0") || s.contains("graph"), "{s}");
            }
        }
        Ok(())
    }));

    t.push(host9("structure_errors", || {
        // unused intermediate
        let mut g = Graph::new();
        let x = g.input("x", TensorSpec::row_major(DType::F32, &[4, 8, 2, 2])?)?;
        let _y = g.relu(x)?;
        let s = g
            .build()
            .err()
            .ok_or("unused intermediate accepted")?
            .to_string();
        ensure!(s.contains("neither used nor marked an output"), "{s}");
        // disconnected ops
        let mut g = Graph::new();
        let x = g.input("x", TensorSpec::row_major(DType::F32, &[4, 8, 2, 2])?)?;
        let z = g.input("z", TensorSpec::row_major(DType::F32, &[4, 8, 2, 2])?)?;
        let y1 = g.relu(x)?;
        let y2 = g.tanh(z)?;
        g.output(y1, DType::F32)?;
        g.output(y2, DType::F32)?;
        let s = g.build().err().ok_or("disconnected accepted")?.to_string();
        ensure!(s.contains("connected"), "{s}");
        // tensor from another graph, duplicate names, outputs of inputs
        let mut g2 = Graph::new();
        ensure!(g2.relu(x).is_err(), "tensor of another graph accepted");
        ensure!(
            g2.input("q", TensorSpec::row_major(DType::F32, &[1])?)
                .is_ok(),
            "input"
        );
        ensure!(
            g2.input("q", TensorSpec::row_major(DType::F32, &[1])?)
                .is_err(),
            "duplicate name accepted"
        );
        let q = g2.input("q2", TensorSpec::row_major(DType::F32, &[1])?)?;
        ensure!(g2.output(q, DType::F32).is_err(), "an input made an output");
        ensure!(Graph::new().build().is_err(), "an empty graph accepted");
        // specs
        ensure!(TensorSpec::row_major(DType::F32, &[]).is_err(), "rank 0");
        ensure!(
            TensorSpec::row_major(DType::F32, &[1; 9]).is_err(),
            "rank 9"
        );
        ensure!(TensorSpec::row_major(DType::F32, &[0, 3]).is_err(), "dim 0");
        ensure!(
            TensorSpec::new(DType::F32, &[2, 3], &[3]).is_err(),
            "stride count"
        );
        ensure!(
            TensorSpec::row_major(DType::F32, &[1 << 40, 1 << 40]).is_err(),
            "span overflow"
        );
        Ok(())
    }));

    t.push(host9("backend_misuse_is_an_error", || {
        let mut t = Descriptor::<kind::Tensor>::new()?;
        ensure!(
            t.get_one(attr::TENSOR_UNIQUE_ID).is_err(),
            "read before finalize accepted"
        );
        // Finalize with attributes missing: cuDNN's error, no crash.
        ensure!(t.finalize().is_err(), "an empty tensor finalized");
        t.set(attr::TENSOR_DATA_TYPE, &[DType::F32.raw()])?;
        t.set(attr::TENSOR_DIMENSIONS, &[2, 3])?;
        t.set(attr::TENSOR_STRIDES, &[3, 1])?;
        t.set(attr::TENSOR_UNIQUE_ID, &[7])?;
        t.set(attr::TENSOR_BYTE_ALIGNMENT, &[16])?;
        t.finalize()?;
        ensure!(t.get_one(attr::TENSOR_UNIQUE_ID)? == 7, "uid round trip");
        let mut dims = [0i64; 8];
        let n = t.get(attr::TENSOR_DIMENSIONS, &mut dims)?;
        ensure!(dims[..n] == [2, 3], "dims round trip {:?}", &dims[..n]);
        let s = t
            .set(attr::TENSOR_UNIQUE_ID, &[8])
            .err()
            .ok_or("set after finalize accepted")?
            .to_string();
        ensure!(s.contains("already finalized"), "{s}");
        ensure!(t.finalize().is_err(), "second finalize accepted");
        // An unfinalized descriptor handed over: refused before cuDNN sees it.
        let raw = Descriptor::<kind::Tensor>::new()?;
        let mut op = Descriptor::<kind::PointwiseOp>::new()?;
        let s = op
            .set_descriptors(attr::OPERATION_POINTWISE_XDESC, &[&raw])
            .err()
            .ok_or("unfinalized accepted")?
            .to_string();
        ensure!(s.contains("finalized first"), "{s}");
        // An op graph with no ops, and with an unfinalized op.
        let mut og = Descriptor::<kind::OperationGraph>::new()?;
        ensure!(
            og.set_operations(attr::OPERATIONGRAPH_OPS, &[]).is_err(),
            "no ops accepted"
        );
        ensure!(
            og.set_operations(attr::OPERATIONGRAPH_OPS, &[&op]).is_err(),
            "unfinalized op accepted"
        );
        // Heuristics with no device properties: cuDNN would silently return nothing;
        // the safe layer cannot express it (candidates() always takes a Target).
        // A bad device-properties JSON is our error before cuDNN.
        for bad in [
            "",
            "[]",
            "{}",
            "{\"deviceVer\": 900}",
            &DeviceSpec::h200().to_json().replace("900", "90"),
        ] {
            ensure!(
                DeviceProperties::from_json(bad).is_err(),
                "bad JSON accepted: {bad}"
            );
        }
        let mut spec = DeviceSpec::h200();
        spec.compute_capability = (90, 0);
        ensure!(
            DeviceProperties::from_spec(&spec).is_err(),
            "deviceVer 9000 accepted"
        );
        Ok(())
    }));

    t.push(host9("device_properties_presets", || {
        // The presets make the JSON cuDNN accepts, and agree with the measured encodings.
        for (name, ver) in [
            ("h100", 900),
            ("h200", 900),
            ("a100", 800),
            ("l4", 890),
            ("b200", 1000),
        ] {
            let spec = DeviceSpec::preset(name).ok_or("preset")?;
            ensure!(
                spec.device_ver() == ver,
                "{name}: deviceVer {}",
                spec.device_ver()
            );
            let p = DeviceProperties::from_spec(&spec)?;
            let v: serde_json::Value = serde_json::from_str(p.json())?;
            for f in REQUIRED_FIELDS {
                ensure!(v.get(f).is_some(), "{name}: field {f} missing");
            }
            // cuDNN finalizes a device-properties descriptor from it: plan a relu.
            let og = simple_pointwise()?.build()?;
            let n = heuristics::candidates(&og, &Target::spec(&spec)?, &Policy::default())?.len();
            eprintln!("  {name}: relu configs {n}");
        }
        // The team's hand-written H200 file (shared research) parses the same way.
        let h = DeviceProperties::from_json(&DeviceSpec::h200().to_json())?;
        ensure!(
            h.device_ver() == 900 && h.sm_count() == 132 && h.name() == "NVIDIA H200",
            "{h:?}"
        );
        ensure!(Target::preset("v100").is_err(), "unknown preset accepted");
        Ok(())
    }));

    t.push(host9("compute_type_per_op_in_signature_and_plan", || {
        // Each op keeps the compute type current when it was added: the
        // signature (the cache key) differs with it, and cuDNN's JSON of the
        // plan carries each op's own.
        let t = h200()?;
        let build = |mm: DType, pw: DType| -> Result<Graph, Error> {
            let mut g = Graph::new();
            let a = g.input("a", TensorSpec::row_major(DType::F16, &[1, 128, 128])?)?;
            let b = g.input("b", TensorSpec::row_major(DType::F16, &[1, 128, 128])?)?;
            g.set_compute_type(mm);
            let c = g.matmul(a, b)?;
            g.set_compute_type(pw);
            let y = g.relu(c)?;
            g.output(y, DType::F16)?;
            g.rename(y, "y")?;
            Ok(g)
        };
        let f32_all = build(DType::F32, DType::F32)?;
        let f16_mm = build(DType::F16, DType::F32)?;
        ensure!(
            f32_all.signature() != f16_mm.signature(),
            "graphs differing only in compute type must not share a cache key"
        );
        // The math precision cuDNN recorded for the node of `op`.
        let prec = |json: &str, op: &str| -> Option<String> {
            let at = json.find(&format!("\"operation\":\"{op}\""))?;
            let node = &json[at..at + json[at..].find('}')?];
            let p = node.find("\"mathPrec\":\"")? + "\"mathPrec\":\"".len();
            Some(node[p..p + node[p..].find('"')?].to_string())
        };
        for (label, g, mm, pw) in [
            ("f32 matmul, f32 relu", &f32_all, "FLOAT", "FLOAT"),
            ("f16 matmul, f32 relu", &f16_mm, "HALF", "FLOAT"),
        ] {
            let (p, _) = Plan::build(&g.build()?, &t, &Policy::default())?;
            let json = p.cudnn_json()?;
            let got_mm = prec(&json, "CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR");
            let got_pw = prec(&json, "CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR");
            eprintln!("{label}: plan JSON matmul {got_mm:?}, relu {got_pw:?}");
            ensure!(
                got_mm.as_deref() == Some(&format!("CUDNN_DATA_{mm}")[..])
                    && got_pw.as_deref() == Some(&format!("CUDNN_DATA_{pw}")[..]),
                "{label}: matmul {got_mm:?} relu {got_pw:?}"
            );
        }
        Ok(())
    }));

    t.push(host9("plan_json_round_trip_same_and_fresh_process", || {
        let t = h200()?;
        for (label, g) in [
            (
                "conv f16",
                conv_graph(DType::F16, true, ConvDirection::Fprop)?,
            ),
            (
                "matmul+bias+gelu",
                matmul_graph(DType::BF16, Mm::Batched, Some(Pointwise::GeluErf))?,
            ),
        ] {
            let (p, _) = Plan::build(&g.build()?, &t, &Policy::default())?;
            let json = p.cudnn_json()?;
            let file = p.serialize()?;
            // Written by this test a moment ago: trusted (the matmul fusion
            // carries compiled code, which an untrusted load refuses).
            // SAFETY: `file` is `serialize()` of the plan built just above with the loaded
            // cuDNN, unchanged.
            let q = unsafe { Plan::deserialize_unverified(&file, &t) }?;
            ensure!(
                q.workspace_size() == p.workspace_size(),
                "{label}: workspace {} vs {}",
                q.workspace_size(),
                p.workspace_size()
            );
            ensure!(
                q.cudnn_json()? == json,
                "{label}: JSON differs after a reload"
            );
            ensure!(q.io() == p.io(), "{label}: io differs");
            // Fresh process.
            // A fresh private folder (0700, made here: `create` fails on
            // a folder that is already there), so only this test writes
            // the file the child loads.
            let dir = std::env::temp_dir().join(format!(
                "cudnn-rs-plan-{}-{:x}-{label_n}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.subsec_nanos()),
                label_n = label.len()
            ));
            {
                use std::os::unix::fs::DirBuilderExt;
                std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
            }
            let path = dir.join("plan.txt");
            std::fs::write(&path, &file)?;
            std::fs::write(dir.join("plan.json"), &json)?;
            let out = std::process::Command::new(std::env::current_exe()?)
                .env("CUDNN_RS_GRAPH_CHILD", &path)
                .output()?;
            let _ = std::fs::remove_dir_all(&dir);
            ensure!(
                out.status.success(),
                "{label}: the child failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            eprintln!(
                "  {label}: plan file {} B, reloaded in a fresh process: {}",
                file.len(),
                String::from_utf8_lossy(&out.stdout).trim()
            );
        }
        Ok(())
    }));

    t.push(host9("plan_for_h200_refused_for_a100", || {
        let (p, _) = Plan::build(
            &conv_graph(DType::F16, true, ConvDirection::Fprop)?.build()?,
            &h200()?,
            &Policy::default(),
        )?;
        let a100 = Target::preset("a100")?;
        match Plan::deserialize(&p.serialize()?, &a100, Trust::NoCompiledCode) {
            Err(Error::Unsupported { what, .. }) => {
                ensure!(what.contains("H200") && what.contains("A100"), "{what}")
            }
            other => return Err(format!("expected Unsupported, got {other:?}").into()),
        }
        // And cuDNN's own check, when our envelope is bypassed.
        match Plan::from_cudnn_json(&p.cudnn_json()?, &a100, Arc::new(p.io().clone())) {
            Err(Error::Unsupported { what, .. }) => {
                ensure!(what.contains("another GPU architecture"), "{what}");
                Ok(())
            }
            other => {
                Err(format!("expected cuDNN's arch mismatch as Unsupported, got {other:?}").into())
            }
        }
    }));

    t.push(host9("plan_cache_round_trip_lru_threads", || {
        let t = h200()?;
        let cache = PlanCache::new(2);
        let g1 = conv_graph(DType::F16, true, ConvDirection::Fprop)?;
        let g2 = conv_graph(DType::BF16, true, ConvDirection::Fprop)?;
        let g3 = simple_pointwise()?;
        let p1 = cache.get_or_build(&g1, &t, &Policy::default())?;
        let again = cache.get_or_build(&g1, &t, &Policy::default())?;
        ensure!(Arc::ptr_eq(&p1, &again), "second get built again");
        cache.get_or_build(&g2, &t, &Policy::default())?;
        cache.get(&g1, &t, &Policy::default()).ok_or("g1")?; // g1 most recent
        cache.get_or_build(&g3, &t, &Policy::default())?; // evicts g2
        ensure!(cache.len() == 2, "len {}", cache.len());
        ensure!(
            cache.get(&g2, &t, &Policy::default()).is_none(),
            "LRU evicted the wrong entry"
        );
        ensure!(
            cache
                .get(&g1, &t, &Policy::default().with_allow_tf32(true))
                .is_none(),
            "policy not in the key"
        );
        ensure!(
            cache
                .get(&g1, &Target::preset("b200")?, &Policy::default())
                .is_none(),
            "target not in the key"
        );
        // save and load in a new cache
        let dir = std::env::temp_dir().join(format!("cudnn-rs-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("plans.txt");
        // SAFETY: a key file only `load_or_create` writes, in this test's own folder.
        let key = unsafe { PlanKey::load_or_create(&dir) }?;
        cache.save(&path, &key)?;
        let fresh = PlanCache::new(8);
        // Saved signed by this test: runtime-compiled entries load too.
        let r = fresh.load(&path, &t, Trust::SignedBy(&key))?;
        ensure!(r.loaded == 2 && r.is_complete(), "loaded count: {r}");
        let q = fresh
            .get(&g1, &t, &Policy::default())
            .ok_or("g1 missing after load")?;
        ensure!(
            q.workspace_size() == p1.workspace_size(),
            "workspace after load"
        );
        // threads
        let shared = Arc::new(PlanCache::new(16));
        let handles: Vec<_> = (0..4)
            .map(|i| {
                let c = shared.clone();
                let t = t.clone();
                std::thread::spawn(move || -> Result<(), String> {
                    let g = if i % 2 == 0 {
                        simple_pointwise()
                    } else {
                        conv_graph(DType::F16, true, ConvDirection::Fprop)
                    }
                    .map_err(|e| e.to_string())?;
                    for _ in 0..5 {
                        c.get_or_build(&g, &t, &Policy::default())
                            .map_err(|e| e.to_string())?;
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join().map_err(|_| "thread panicked")??;
        }
        ensure!(shared.len() == 2, "threads: {} entries", shared.len());
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    }));

    t.push(host9("plan_cache_corrupt_files_leave_it_unchanged", || {
        let t = h200()?;
        let cache = PlanCache::new(8);
        let g = simple_pointwise()?;
        cache.get_or_build(&g, &t, &Policy::default())?;
        let good = cache.to_text()?;
        let target_line = format!("target {}", t.properties().arch_key());
        let json_at = good.find("\njson ").ok_or("no json")? + 1;
        let mut bad: Vec<(String, Vec<u8>)> = vec![
            ("empty".into(), vec![]),
            ("header only".into(), b"cudnn-rs plan cache v3\n".to_vec()),
            (
                "wrong header".into(),
                good.replacen("cache v3", "cache v9", 1).into_bytes(),
            ),
            ("not text".into(), vec![0xff, 0xfe, 0x00, 0x41]),
            (
                "count too high".into(),
                good.replacen("entries 1", "entries 2", 1).into_bytes(),
            ),
            (
                "count not a number".into(),
                good.replacen("entries 1", "entries x", 1).into_bytes(),
            ),
            (
                "huge count".into(),
                good.replacen("entries 1", "entries 99999999999", 1)
                    .into_bytes(),
            ),
            (
                "foreign target".into(),
                good.replacen(&target_line, "target NVIDIA A100-SXM4-80GB|sm80|108sms", 1)
                    .into_bytes(),
            ),
            ("json length too long".into(), {
                let l = good[json_at..].lines().next().unwrap_or("").to_string();
                good.replacen(&l, "json 99999999", 1).into_bytes()
            }),
            ("json length short".into(), {
                let l = good[json_at..].lines().next().unwrap_or("").to_string();
                good.replacen(&l, "json 10", 1).into_bytes()
            }),
            ("json not json".into(), {
                let l = good[json_at..].lines().next().unwrap_or("").to_string();
                let body_start = json_at + l.len() + 1;
                let n: usize = l[5..].parse().unwrap_or(0);
                let mut s = good[..body_start].to_string();
                s.push_str(&"x".repeat(n));
                s.push_str(&good[body_start + n..]);
                s.into_bytes()
            }),
            ("json truncated braces".into(), {
                let l = good[json_at..].lines().next().unwrap_or("").to_string();
                let body_start = json_at + l.len() + 1;
                let n: usize = l[5..].parse().unwrap_or(0);
                let mut s = good[..json_at].to_string();
                s.push_str(&format!("json {}\n", n / 2));
                s.push_str(&good[body_start..body_start + n / 2]);
                s.push('\n');
                s.into_bytes()
            }),
            (
                "trailing garbage".into(),
                format!("{good}garbage\n").into_bytes(),
            ),
            (
                "bad tensor line".into(),
                io_replace(&good, " in f16 ", " sideways f16 ").into_bytes(),
            ),
            (
                "bad dtype".into(),
                io_replace(&good, " in f16 ", " in f17 ").into_bytes(),
            ),
            (
                "bad dims".into(),
                io_replace(&good, "8,64,32,32", "8,64,x,32").into_bytes(),
            ),
            (
                "zero dim".into(),
                io_replace(&good, "8,64,32,32", "8,0,32,32").into_bytes(),
            ),
            (
                "bad tensors count".into(),
                good.replacen("tensors 2", "tensors 5", 1).into_bytes(),
            ),
            (
                "bad scalars count".into(),
                good.replacen("scalars 0", "scalars 3", 1).into_bytes(),
            ),
            (
                "name length wrong".into(),
                io_replace(&good, " 1\nx\n", " 4\nx\n").into_bytes(),
            ),
            ("graph length wrong".into(), {
                let l = good.lines().nth(2).unwrap_or("").to_string();
                good.replacen(&l, "graph 3", 1).into_bytes()
            }),
        ];
        for cut in [10, good.len() / 3, good.len() / 2, good.len() - 2] {
            bad.push((
                format!("truncated at {cut}"),
                good.as_bytes()[..cut].to_vec(),
            ));
        }
        ensure!(bad.len() >= 20, "only {} corrupt cases", bad.len());
        let dir = std::env::temp_dir().join(format!("cudnn-rs-corrupt-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let target = cache.get(&g, &t, &Policy::default()).ok_or("entry")?;
        for (i, (what, bytes)) in bad.iter().enumerate() {
            let path = dir.join(format!("bad{i}.txt"));
            std::fs::write(&path, bytes)?;
            let before = cache.len();
            let r = catch_unwind(AssertUnwindSafe(|| {
                cache.load(&path, &t, Trust::NoCompiledCode)
            }));
            match r {
                Err(_) => return Err(format!("{what}: panicked").into()),
                Ok(Ok(n)) => return Err(format!("{what}: accepted ({n:?})").into()),
                Ok(Err(e)) => eprintln!(
                    "  {what}: {}",
                    e.to_string().chars().take(140).collect::<String>()
                ),
            }
            ensure!(cache.len() == before, "{what}: the cache changed");
            let still = cache.get(&g, &t, &Policy::default()).ok_or("entry lost")?;
            ensure!(
                Arc::ptr_eq(&still, &target),
                "{what}: the entry was replaced"
            );
        }
        // Oversized (sparse) file, and a missing file.
        let big = dir.join("big.txt");
        let f = std::fs::File::create(&big)?;
        f.set_len(300 << 20)?;
        ensure!(
            cache.load(&big, &t, Trust::NoCompiledCode).is_err(),
            "oversized file accepted"
        );
        ensure!(
            cache
                .load(&dir.join("missing"), &t, Trust::NoCompiledCode)
                .is_err(),
            "missing file accepted"
        );
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    }));

    t.push(host9("bindings_are_checked", || {
        // Without a device no buffer can be allocated; the checks that need
        // no memory run here on zero-length views (every binding is refused
        // before anything reaches cuDNN).
        let (p, _) = Plan::build(
            &conv_epilogue(DType::F16, "bias+relu")?.build()?,
            &h200()?,
            &Policy::default(),
        )?;
        let names: Vec<&str> = p.io().tensors.iter().map(|t| t.name.as_str()).collect();
        ensure!(names == ["x", "w", "bias", "y"], "io names {names:?}");
        let mut b = p.bindings();
        // SAFETY: a zero-length view over a null pointer is never dereferenced.
        let empty = unsafe {
            cudnn::runtime::DeviceSlice::<half::f16>::from_raw_parts(std::ptr::null(), 0)
        };
        let s = b
            .input("nope", empty)
            .err()
            .ok_or("unknown name accepted")?
            .to_string();
        ensure!(s.contains("must be one of"), "{s}");
        let s = b
            .input("x", empty)
            .err()
            .ok_or("short buffer accepted")?
            .to_string();
        ensure!(s.contains("bytes"), "{s}");
        // SAFETY: as above.
        let emptyf =
            unsafe { cudnn::runtime::DeviceSlice::<f32>::from_raw_parts(std::ptr::null(), 0) };
        let s = b
            .input("x", emptyf)
            .err()
            .ok_or("wrong dtype accepted")?
            .to_string();
        ensure!(s.contains("element type"), "{s}");
        // SAFETY: a dangling but aligned, never-dereferenced pointer with a large length: only checked, never used.
        let fake = unsafe {
            cudnn::runtime::DeviceSlice::<half::f16>::from_raw_parts(
                4096 as *const half::f16,
                1 << 24,
            )
        };
        b.input("x", fake)?;
        let s = b
            .input("x", fake)
            .err()
            .ok_or("double binding accepted")?
            .to_string();
        ensure!(s.contains("exactly once"), "{s}");
        // SAFETY: as above, misaligned on purpose.
        let odd = unsafe {
            cudnn::runtime::DeviceSlice::<half::f16>::from_raw_parts(
                4098 as *const half::f16,
                1 << 24,
            )
        };
        let s = b
            .input("w", odd)
            .err()
            .ok_or("misaligned accepted")?
            .to_string();
        ensure!(s.contains("aligned"), "{s}");
        let s = b
            .input("y", fake)
            .err()
            .ok_or("output bound as input")?
            .to_string();
        ensure!(s.contains("is an output"), "{s}");
        Ok(())
    }));

    t.push(host9("property_conv_shapes_agree_with_cudnn", || {
        let mut runner = crate::support::prop_runner(60);
        let strat = (
            1i64..4,
            1i64..5,
            1i64..4,
            1i64..20,
            1i64..20,
            1i64..6,
            1i64..6,
            0i64..4,
            1i64..4,
            1i64..3,
            any::<bool>(),
        );
        let stats = std::sync::Mutex::new((0u32, 0u32));
        runner
            .run(
                &strat,
                |(n, cg, groups, h, w, r, s, pad, stride, dil, nhwc)| {
                    let c = cg * groups;
                    let k = groups * 2;
                    let out = catch_unwind(AssertUnwindSafe(|| {
                        conv_case(n, c, k, groups, h, w, r, s, pad, stride, dil, nhwc)
                    }));
                    match out {
                        Err(_) => Err(TestCaseError::fail("panicked")),
                        Ok(Err(e)) => Err(TestCaseError::fail(e)),
                        Ok(Ok(valid)) => {
                            let mut st = stats.lock().unwrap_or_else(|p| p.into_inner());
                            if valid {
                                st.0 += 1
                            } else {
                                st.1 += 1
                            }
                            Ok(())
                        }
                    }
                },
            )
            .map_err(|e| e.to_string())?;
        let st = stats.lock().unwrap_or_else(|p| p.into_inner());
        eprintln!(
            "  conv: {} valid, {} invalid configurations agreed",
            st.0, st.1
        );
        ensure!(
            st.0 > 5 && st.1 > 0,
            "the generator must make both kinds ({} / {})",
            st.0,
            st.1
        );
        Ok(())
    }));

    t.push(host9("property_matmul_shapes_agree_with_cudnn", || {
        let mut runner = crate::support::prop_runner(60);
        let strat = (
            1i64..4,
            0i64..2,
            0i64..2,
            1i64..70,
            1i64..70,
            1i64..70,
            -1i64..2,
        );
        let stats = std::sync::Mutex::new((0u32, 0u32));
        runner
            .run(&strat, |(b, ba1, bb1, m, k, n, kdelta)| {
                let out = catch_unwind(AssertUnwindSafe(|| {
                    matmul_case(b, ba1 == 1, bb1 == 1, m, k, n, kdelta)
                }));
                match out {
                    Err(_) => Err(TestCaseError::fail("panicked")),
                    Ok(Err(e)) => Err(TestCaseError::fail(e)),
                    Ok(Ok(valid)) => {
                        let mut st = stats.lock().unwrap_or_else(|p| p.into_inner());
                        if valid {
                            st.0 += 1
                        } else {
                            st.1 += 1
                        }
                        Ok(())
                    }
                }
            })
            .map_err(|e| e.to_string())?;
        let st = stats.lock().unwrap_or_else(|p| p.into_inner());
        eprintln!(
            "  matmul: {} valid, {} invalid configurations agreed",
            st.0, st.1
        );
        ensure!(
            st.0 > 5 && st.1 > 0,
            "the generator must make both kinds ({} / {})",
            st.0,
            st.1
        );
        Ok(())
    }));

    run(t)
}

/// Replace the first `from` in the IO section (after the policy), not in the graph key.
fn io_replace(good: &str, from: &str, to: &str) -> String {
    let at = good.find("\ntensors ").unwrap_or(0);
    let (head, tail) = good.split_at(at);
    format!("{head}{}", tail.replacen(from, to, 1))
}

/// Child process of the fresh-process test: load the plan file, print its workspace.
fn child_load(path: &str) -> i32 {
    let r = (|| -> cudnn::Result<String> {
        let text =
            std::fs::read_to_string(path).map_err(|e| Error::invalid("path", "readable", e))?;
        let t = Target::preset("h200")?;
        // SAFETY: `path` is the plan file the parent test wrote with `serialize()` of a
        // plan it built with the loaded cuDNN, unchanged, into a fresh 0700 folder
        // it made (no other user can change it).
        let p = unsafe { Plan::deserialize_unverified(&text, &t) }?;
        let json = std::fs::read_to_string(std::path::Path::new(path).with_file_name("plan.json"))
            .map_err(|e| Error::invalid("path", "readable", e))?;
        if p.cudnn_json()? != json {
            return Err(Error::invalid(
                "plan",
                "JSON must be byte-identical after a reload",
                "differs",
            ));
        }
        Ok(format!(
            "workspace {} B, JSON identical",
            p.workspace_size()
        ))
    })();
    match r {
        Ok(s) => {
            println!("{s}");
            0
        }
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

/// One conv configuration: our shape inference against cuDNN's legacy
/// output-shape function and the graph op's accept/reject. Returns whether it was valid.
#[allow(clippy::too_many_arguments)]
fn conv_case(
    n: i64,
    c: i64,
    k: i64,
    groups: i64,
    h: i64,
    w: i64,
    r: i64,
    s: i64,
    pad: i64,
    stride: i64,
    dil: i64,
    nhwc: bool,
) -> Result<bool, String> {
    use cudnn::dnn::{ConvDescriptor, FilterDescriptor, TensorDescriptor};
    let p = ConvParams::new_2d([pad, pad], [stride, stride], [dil, dil]);
    let spec = |d: &[i64]| {
        if nhwc {
            TensorSpec::nhwc(DType::F32, d)
        } else {
            TensorSpec::nchw(DType::F32, d)
        }
    };
    let mut g = Graph::new();
    let x = g
        .input("x", spec(&[n, c, h, w]).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let wt = g
        .input(
            "w",
            spec(&[k, c / groups, r, s]).map_err(|e| e.to_string())?,
        )
        .map_err(|e| e.to_string())?;
    let ours = g.conv_fprop(x, wt, &p);
    // The independent truth: cudnnGetConvolutionNdForwardOutputDim.
    let legacy = (|| -> cudnn::Result<Vec<i64>> {
        let xd = TensorDescriptor::<f32>::nchw(n as usize, c as usize, h as usize, w as usize)?;
        let fd = FilterDescriptor::<f32>::nchw(
            k as usize,
            (c / groups) as usize,
            r as usize,
            s as usize,
        )?;
        let cd =
            ConvDescriptor::new_2d([pad as usize; 2], [stride as usize; 2], [dil as usize; 2])?
                .with_groups(groups as usize)?;
        let dims: Vec<i64> = cd
            .output_shape_from_cudnn(&xd, &fd)?
            .iter()
            .map(|&d| d as i64)
            .collect();
        if dims.iter().any(|&d| d < 1) {
            return Err(cudnn::Error::invalid(
                "legacy output",
                "has an empty dim",
                format!("{dims:?}"),
            ));
        }
        Ok(dims)
    })();
    match (ours, legacy) {
        (Ok(y), Ok(ld)) => {
            let dims = g.dims(y).map_err(|e| e.to_string())?.to_vec();
            if dims != ld {
                return Err(format!("ours {dims:?} vs cuDNN {ld:?}"));
            }
            g.output(y, DType::F32).map_err(|e| e.to_string())?;
            g.build()
                .map_err(|e| format!("valid conv {dims:?} refused by the graph API: {e}"))?;
            // cuDNN must refuse one more output row.
            let mut wrong = dims.clone();
            wrong[2] += 1;
            if raw_conv_accepts(
                &[n, c, h, w],
                &[k, c / groups, r, s],
                &wrong,
                pad,
                stride,
                dil,
            )? {
                return Err(format!(
                    "cuDNN accepted a wrong output {wrong:?} (right: {dims:?})"
                ));
            }
            Ok(true)
        }
        (Err(_), Err(_)) => Ok(false),
        (Ok(y), Err(e)) => Err(format!(
            "we accept ({:?}), cuDNN refuses: {e}",
            g.dims(y).ok()
        )),
        (Err(e), Ok(ld)) => Err(format!("we refuse ({e}), cuDNN gives {ld:?}")),
    }
}

/// Build a conv fprop op through the raw backend layer with a given output shape.
fn raw_conv_accepts(
    x: &[i64],
    w: &[i64],
    y: &[i64],
    pad: i64,
    stride: i64,
    dil: i64,
) -> Result<bool, String> {
    let tensor = |d: &[i64], uid: i64| -> cudnn::Result<Descriptor<kind::Tensor>> {
        let spec = TensorSpec::nchw(DType::F32, d)?;
        let mut t = Descriptor::<kind::Tensor>::new()?;
        t.set(attr::TENSOR_DATA_TYPE, &[DType::F32.raw()])?;
        t.set(attr::TENSOR_DIMENSIONS, d)?;
        t.set(attr::TENSOR_STRIDES, spec.strides())?;
        t.set(attr::TENSOR_UNIQUE_ID, &[uid])?;
        t.set(attr::TENSOR_BYTE_ALIGNMENT, &[16])?;
        t.finalize()?;
        Ok(t)
    };
    let r = (|| -> cudnn::Result<()> {
        let (xt, wt, yt) = (tensor(x, 1)?, tensor(w, 2)?, tensor(y, 3)?);
        let mut c = Descriptor::<kind::Convolution>::new()?;
        c.set(attr::CONVOLUTION_SPATIAL_DIMS, &[2])?;
        c.set(attr::CONVOLUTION_COMP_TYPE, &[DType::F32.raw()])?;
        c.set(
            attr::CONVOLUTION_CONV_MODE,
            &[cudnn::sys::cudnn::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION],
        )?;
        c.set(attr::CONVOLUTION_PRE_PADDINGS, &[pad, pad])?;
        c.set(attr::CONVOLUTION_POST_PADDINGS, &[pad, pad])?;
        c.set(attr::CONVOLUTION_FILTER_STRIDES, &[stride, stride])?;
        c.set(attr::CONVOLUTION_DILATIONS, &[dil, dil])?;
        c.finalize()?;
        let mut op = Descriptor::<kind::ConvForwardOp>::new()?;
        op.set_descriptors(attr::OPERATION_CONVOLUTION_FORWARD_X, &[&xt])?;
        op.set_descriptors(attr::OPERATION_CONVOLUTION_FORWARD_W, &[&wt])?;
        op.set_descriptors(attr::OPERATION_CONVOLUTION_FORWARD_Y, &[&yt])?;
        op.set_descriptors(attr::OPERATION_CONVOLUTION_FORWARD_CONV_DESC, &[&c])?;
        op.set(attr::OPERATION_CONVOLUTION_FORWARD_ALPHA, &[1.0])?;
        op.set(attr::OPERATION_CONVOLUTION_FORWARD_BETA, &[0.0])?;
        op.finalize()
    })();
    match r {
        Ok(()) => Ok(true),
        Err(Error::Cudnn { .. }) => Ok(false),
        Err(e) => Err(format!("unexpected error kind: {e}")),
    }
}

/// One matmul configuration: our accept/reject against the raw backend's.
fn matmul_case(
    b: i64,
    a_one: bool,
    b_one: bool,
    m: i64,
    k: i64,
    n: i64,
    kdelta: i64,
) -> Result<bool, String> {
    let (ab, bb) = (if a_one { 1 } else { b }, if b_one { 1 } else { b });
    let kb = (k + kdelta).max(1);
    let mut g = Graph::new();
    let a = g
        .input(
            "a",
            TensorSpec::row_major(DType::F16, &[ab, m, k]).map_err(|e| e.to_string())?,
        )
        .map_err(|e| e.to_string())?;
    let bt = g
        .input(
            "b",
            TensorSpec::row_major(DType::F16, &[bb, kb, n]).map_err(|e| e.to_string())?,
        )
        .map_err(|e| e.to_string())?;
    match g.matmul(a, bt) {
        Ok(c) => {
            let dims = g.dims(c).map_err(|e| e.to_string())?.to_vec();
            if dims != [ab.max(bb), m, n] {
                return Err(format!("inferred {dims:?}"));
            }
            g.output(c, DType::F16).map_err(|e| e.to_string())?;
            g.build()
                .map_err(|e| format!("valid matmul {dims:?} refused: {e}"))?;
            Ok(true)
        }
        Err(_) => {
            // cuDNN must refuse it too (given the naive output shape).
            let tensor = |d: &[i64], uid: i64| -> cudnn::Result<Descriptor<kind::Tensor>> {
                let spec = TensorSpec::row_major(DType::F16, d)?;
                let mut t = Descriptor::<kind::Tensor>::new()?;
                t.set(attr::TENSOR_DATA_TYPE, &[DType::F16.raw()])?;
                t.set(attr::TENSOR_DIMENSIONS, d)?;
                t.set(attr::TENSOR_STRIDES, spec.strides())?;
                t.set(attr::TENSOR_UNIQUE_ID, &[uid])?;
                t.set(attr::TENSOR_BYTE_ALIGNMENT, &[16])?;
                t.finalize()?;
                Ok(t)
            };
            let r = (|| -> cudnn::Result<()> {
                let (at, bt2, ct) = (
                    tensor(&[ab, m, k], 1)?,
                    tensor(&[bb, kb, n], 2)?,
                    tensor(&[ab.max(bb), m, n], 3)?,
                );
                let mut md = Descriptor::<kind::Matmul>::new()?;
                md.set(attr::MATMUL_COMP_TYPE, &[DType::F32.raw()])?;
                md.finalize()?;
                let mut op = Descriptor::<kind::MatmulOp>::new()?;
                op.set_descriptors(attr::OPERATION_MATMUL_ADESC, &[&at])?;
                op.set_descriptors(attr::OPERATION_MATMUL_BDESC, &[&bt2])?;
                op.set_descriptors(attr::OPERATION_MATMUL_CDESC, &[&ct])?;
                op.set_descriptors(attr::OPERATION_MATMUL_DESC, &[&md])?;
                op.finalize()?;
                let mut og = Descriptor::<kind::OperationGraph>::new()?;
                og.set_operations(attr::OPERATIONGRAPH_OPS, &[&op])?;
                og.finalize()
            })();
            match r {
                Err(Error::Cudnn { .. }) => Ok(false),
                Ok(()) => Err(format!(
                    "we refuse [{ab},{m},{k}]x[{bb},{kb},{n}], cuDNN accepts"
                )),
                Err(e) => Err(format!("unexpected: {e}")),
            }
        }
    }
}
