//! Deterministic cases of the graph fuzz target (`host/fuzz_graph`, unit
//! tier): every reproducer of the shape-arithmetic panics returns a typed
//! error quickly, and the graph signature keeps apart what must differ
//! (compute types where ops honour them, names that could read alike).

use crate::support::sdpa_plans::fwd_any;
use std::time::{Duration, Instant};

use cudnn::Error;
use cudnn::graph::{
    AttnLayout, ConvParams, DType, Graph, NormPhase, SdpaConfig, Tensor, TensorSpec,
};

use crate::support::TestResult;

// ---- the reproducers ----

fn expect_invalid<T: std::fmt::Debug>(what: &str, r: Result<T, Error>, names: &str) -> TestResult {
    match r {
        Err(e @ (Error::InvalidArgument { .. } | Error::Mismatch { .. })) => {
            ensure!(
                e.to_string().contains(names),
                "{what}: names `{names}`: {e}"
            );
            Ok(())
        }
        other => {
            Err(format!("{what}: expected a typed refusal naming `{names}`, got {other:?}").into())
        }
    }
}

fn conv_graph(x: &[i64], w: &[i64]) -> Result<(Graph, Tensor, Tensor), Error> {
    let mut g = Graph::new();
    let a = g.input("a", TensorSpec::nchw(DType::F16, x)?)?;
    let b = g.input("b", TensorSpec::nchw(DType::F16, w)?)?;
    Ok((g, a, b))
}

pub fn reproducers() -> TestResult {
    let start = Instant::now();
    let p = ConvParams::new_2d([1, 1], [1, 1], [1, 1]);
    // Remainder by zero (w_dims[1] = 0).
    let (mut g, x, dy) = conv_graph(&[4, 8, 8, 8], &[4, 4, 8, 8])?;
    expect_invalid(
        "conv_wgrad w_dims [4, 0, 3, 3]",
        g.conv_wgrad(x, dy, &[4, 0, 3, 3], &p),
        "w_dims[1]",
    )?;
    // Groups 0 (x_dims[1] = 0).
    let (mut g, dy, w) = conv_graph(&[1, 4, 8, 8], &[4, 4, 3, 3])?;
    expect_invalid(
        "conv_dgrad x_dims [1, 0, 8, 8]",
        g.conv_dgrad(dy, w, &[1, 0, 8, 8], &p),
        "x_dims[1]",
    )?;
    // i64::MIN and -1 as dims.
    expect_invalid(
        "output_dims i64::MIN",
        ConvParams::new(&[0], &[1], &[1]).output_dims("op", &[1, i64::MIN, 3], &[1, -1, 1]),
        "x[1]",
    )?;
    // i64::MAX as a filter extent: dilation * (w - 1) overflows.
    expect_invalid(
        "filter extent i64::MAX, dilation 2",
        ConvParams::new(&[0], &[1], &[2]).output_dims("op", &[1, 1, 8], &[1, 1, i64::MAX]),
        "overflows",
    )?;
    // i64::MAX as an input extent: x + pads overflows.
    expect_invalid(
        "input extent i64::MAX, padding 1",
        ConvParams::new(&[1], &[1], &[1]).output_dims("op", &[1, 1, i64::MAX], &[1, 1, 3]),
        "overflows",
    )?;
    // i64::MIN as filter and output extents.
    expect_invalid(
        "filter extent i64::MIN",
        ConvParams::new(&[0], &[1], &[1]).output_dims("op", &[1, 1, 8], &[1, 1, i64::MIN]),
        "w[2]",
    )?;
    let (mut g, x, dy) = conv_graph(&[1, 1, 8, 8], &[1, 1, 6, 6])?;
    expect_invalid(
        "conv_wgrad w_dims with i64::MAX",
        g.conv_wgrad(
            x,
            dy,
            &[1, 1, i64::MAX, 3],
            &ConvParams::new_2d([0, 0], [1, 1], [2, 2]),
        ),
        "overflows",
    )?;
    expect_invalid(
        "conv_dgrad x_dims with i64::MIN",
        g.conv_dgrad(dy, x, &[1, 1, i64::MIN, 8], &p),
        "x_dims[2]",
    )?;
    // SDPA: strides that overflow after the dims are >= 1.
    let big = SdpaConfig::new(1, 1 << 30, 1 << 30, 64, DType::F16);
    expect_invalid(
        "q_spec of 2^30 heads and 2^30 tokens",
        big.q_spec(),
        "overflow",
    )?;
    expect_invalid(
        "validate of 2^30 heads and 2^30 tokens",
        big.validate(),
        "SdpaConfig",
    )?;
    let mut g = Graph::new();
    let small = SdpaConfig::new(1, 2, 64, 64, DType::F16);
    let q = g.input("q", small.q_spec()?)?;
    let k = g.input("k", small.k_spec()?)?;
    let v = g.input("v", small.v_spec()?)?;
    expect_invalid(
        "sdpa_forward with it",
        fwd_any(&mut g, q, k, v, &big),
        "SdpaConfig",
    )?;
    expect_invalid(
        "AttnLayout::strides overflow",
        AttnLayout::Bshd.strides(1, 1 << 30, 1 << 30, 64),
        "overflows",
    )?;
    // FLOPs in f64: no overflow.
    let flops = SdpaConfig::new(i64::MAX, 2, 1, 64, DType::F16).forward_flops();
    ensure!(flops.is_finite() && flops >= 1e20, "forward_flops {flops}");
    let bflops = SdpaConfig::new(i64::MAX, i64::MAX, i64::MAX, i64::MAX, DType::F16)
        .causal(true)
        .backward_flops();
    ensure!(
        bflops.is_finite() && bflops >= 1e20,
        "backward_flops {bflops}"
    );
    expect_invalid(
        "validate i64::MAX batch",
        SdpaConfig::new(i64::MAX, 2, 1, 64, DType::F16).validate(),
        "SdpaConfig",
    )?;
    // Sequence lengths past i32 (cuDNN's lengths and indices are i32).
    expect_invalid(
        "seq 2^31",
        SdpaConfig::new(1, 1, 1 << 31, 64, DType::F16).validate(),
        "SdpaConfig.seq_q",
    )?;
    // Spans that overflow at the last step.
    expect_invalid(
        "span i64::MAX + 1",
        TensorSpec::new(DType::F32, &[2], &[i64::MAX]),
        "dims/strides",
    )?;
    expect_invalid(
        "scalar rank usize::MAX",
        Graph::new().scalar(1.0, DType::F32, usize::MAX),
        "rank",
    )?;
    // element_count saturates rather than overflowing.
    let wide = TensorSpec::new(DType::U8, &[1 << 60; 8], &[1; 8]);
    if let Ok(s) = wide {
        ensure!(s.element_count() == u128::MAX, "saturates");
    }
    let took = start.elapsed();
    ensure!(took < Duration::from_secs(5), "reproducers took {took:?}");
    Ok(())
}

pub fn compute_type_in_signature() -> TestResult {
    // Two graphs that differ only in the compute type have different
    // signatures, and a type set after an op applies only to later ops.
    let build = |first: DType, second: DType| -> Result<Graph, Error> {
        let mut g = Graph::new();
        let a = g.input("a", TensorSpec::row_major(DType::F16, &[1, 64, 64])?)?;
        let b = g.input("b", TensorSpec::row_major(DType::F16, &[1, 64, 64])?)?;
        g.set_compute_type(first);
        let c = g.matmul(a, b)?;
        g.set_compute_type(second);
        let y = g.relu(c)?;
        g.output(y, DType::F16)?;
        Ok(g)
    };
    let f32 = build(DType::F32, DType::F32)?.signature();
    let f16 = build(DType::F16, DType::F32)?.signature();
    let late = build(DType::F32, DType::F16)?.signature();
    ensure!(f32 != f16, "f16 vs f32 matmul accumulation:\n{f32}\n{f16}");
    ensure!(f32 != late, "the relu's compute type:\n{f32}\n{late}");
    ensure!(
        f16.contains("matmul") && f16.contains("compute=f16") && f16.contains("compute=f32"),
        "each op names its own: {f16}"
    );
    // A norm op has no compute type in cuDNN: its entry names none (the
    // compute type is in its result's element type, with the tensors).
    let mut g = Graph::new();
    let x = g.input("x", TensorSpec::row_major(DType::F16, &[4, 8, 1, 1])?)?;
    let sc = g.input("s", TensorSpec::row_major(DType::F32, &[1, 8, 1, 1])?)?;
    g.set_compute_type(DType::F16);
    let y = g.rms_norm(x, sc, None, 1e-5, NormPhase::Inference)?.y;
    g.output(y, DType::F16)?;
    let sig = g.signature();
    let op = sig.split(';').find(|e| e.contains("rms_norm forward"));
    ensure!(
        op.is_some_and(|e| !e.contains("compute=")),
        "a norm op names no compute type: {sig}"
    );
    // Names are length-prefixed: a name holding the text of another node
    // (spaces, `;`) cannot make one input read as the two inputs `p`, `q`.
    let spec = TensorSpec::row_major(DType::F16, &[1, 2])?;
    let mut two = Graph::new();
    two.input("p", spec.clone())?;
    two.input("q", spec.clone())?;
    let two = two.signature();
    // The text after a node's name up to its `;` (role, type, dims, strides).
    let rest = two
        .split(';')
        .next()
        .and_then(|n| n.strip_prefix("t1 1:p "))
        .ok_or(format!("node text: {two}"))?;
    let forged = format!("p {rest};t2 q");
    let mut one = Graph::new();
    one.input(&forged, spec)?;
    let one = one.signature();
    // Without the prefixes both would read `t1 p {rest};t2 q {rest};`.
    ensure!(one != two, "a forged name collides:\n{one}\n{two}");
    ensure!(
        one.contains(&format!("{}:{forged}", forged.len())),
        "the name is length-prefixed: {one}"
    );
    Ok(())
}
