//! GEMM, GEMV and cuBLASLt matmul without a device (unit and host tiers).
//!
//! - unit: every argument check of the GEMM family runs before any library
//!   call, names the argument and both values; how layouts map to
//!   `transa`/`transb`/`lda` and operand swaps; compute-type resolution
//!   (TF32 never by default); epilogue sizes; plan keys.
//! - host: the cuBLASLt descriptors are built on the CPU by the real
//!   library, and every attribute this crate sets reads back as set (on
//!   cuBLAS 13 and 12); handle creation without a device is a clean error.
//!
//! Run against cuBLAS 12.9 too:
//! `CUDNN_RS_SEARCH_PATH=$PWD/.cuda-libs/cuda12 cargo test -p cudnn-rs --features dnn,blas,reference --test host gemm::`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// `ensure!(err <= tol, ..)` negates a float comparison on purpose: NaN fails.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use crate::support;

use cudnn::Error;
use cudnn::blas::{
    ComputeType, Epilogue, EpilogueArgs, GemmPlan, GemvPlan, Layout, LtHandle, LtMatrixLayout,
    MatmulDesc, MatmulDescriptors, MatmulKey, MatmulPreference, MatmulSpec, Matrix, MatrixMut,
    Order, ScaleType,
};
use cudnn::runtime::{DeviceBuffer, Stream};
use cudnn::sys::cublas::{
    cublasComputeType_t as CT, cublasLtEpilogue_t as EP, cublasLtOrder_t, cublasOperation_t as Op,
};
use cudnn::sys::cudart::cudaDataType_t as DT;
use half::{bf16, f16};
use support::*;

type R = Result<(), libtest_mimic::Failed>;

pub fn main() {
    run(vec![
        unit("layout_accessors_and_offsets", layout_accessors),
        unit("layout_validation_names_field", layout_validation),
        unit("output_batch_stride_must_not_overlap", output_overlap),
        unit("buffer_length_checks_name_buffer", buffer_lengths),
        unit("shape_mismatch_errors_name_dims", shape_mismatch),
        unit("batch_count_mismatch", batch_mismatch),
        unit("int_limits_named", int_limits),
        unit("row_major_swaps_operands", row_major_swaps),
        unit("col_major_and_transposes_map_to_ops", col_major_ops),
        unit("strided_batch_args", strided_args),
        unit("compute_resolution_and_scale_types", compute_resolution),
        unit("tf32_is_never_the_default", tf32_never_default),
        unit("gemv_plan_checks", gemv_checks),
        unit("pointer_batch_checks", pointer_batch_checks),
        unit("matmul_spec_checks_and_sizes", spec_checks),
        unit("matmul_aux_offsets", aux_offsets),
        unit("epilogue_buffer_checks", epilogue_buffer_checks),
        unit("epilogue_args_builder_lengths", epilogue_args_builder),
        unit("plan_keys", plan_keys),
        unit("epilogue_raw_mapping", epilogue_raw),
        host("lt_matmul_desc_round_trip", desc_round_trip),
        host("lt_matrix_layout_round_trip", layout_round_trip),
        host("lt_preference_round_trip", preference_round_trip),
        host("lt_descriptors_for_col_major_spec", descriptors_col_major),
        host("lt_descriptors_for_row_major_spec", descriptors_row_major),
        host(
            "lt_descriptors_for_batched_aux_spec",
            descriptors_batched_aux,
        ),
        host(
            "lt_descriptors_every_epilogue_and_pair",
            descriptors_all_epilogues,
        ),
        host("lt_descriptors_for_empty_shapes", descriptors_empty),
        host(
            "lt_handle_without_gpu_is_clean_error",
            lt_handle_without_gpu,
        ),
        host(
            "blas_handle_without_gpu_is_clean_error",
            blas_handle_without_gpu,
        ),
    ])
}

fn err_text(e: &Error) -> String {
    e.to_string()
}

fn expect_invalid<T: std::fmt::Debug>(r: cudnn::Result<T>, arg: &str) -> R {
    match r {
        Err(Error::InvalidArgument { arg: a, .. }) if a == arg => Ok(()),
        other => Err(format!("expected InvalidArgument `{arg}`, got {other:?}").into()),
    }
}

fn expect_mismatch<T: std::fmt::Debug>(r: cudnn::Result<T>, what: &str) -> R {
    match r {
        Err(Error::Mismatch { what: w, .. }) if w.contains(what) => Ok(()),
        other => Err(format!("expected Mismatch containing `{what}`, got {other:?}").into()),
    }
}

// ---------------------------------------------------------------------------
// Layouts

fn layout_accessors() -> R {
    let l = Layout::row_major(3, 4);
    ensure!(
        (l.rows(), l.cols(), l.ld(), l.order()) == (3, 4, 4, Order::RowMajor),
        "{l:?}"
    );
    ensure!(!l.is_column_contiguous() && l.strides() == (4, 1), "{l:?}");
    ensure!(
        l.offset(0, 1, 2) == Some(6) && l.offset(0, 3, 0).is_none(),
        "row-major offsets"
    );
    let c = Layout::col_major(3, 4);
    ensure!(
        c.ld() == 3 && c.is_column_contiguous() && c.offset(0, 1, 2) == Some(7),
        "{c:?}"
    );
    // Transposed: the logical shape swaps, the memory does not move.
    let t = Layout::row_major(3, 4).with_ld(6).t();
    ensure!(
        (t.rows(), t.cols(), t.stored_rows(), t.stored_cols()) == (4, 3, 3, 4),
        "{t:?}"
    );
    ensure!(
        t.is_column_contiguous() && t.offset(0, 2, 1) == Some(6 + 2),
        "{t:?}"
    );
    ensure!(
        t.t() == Layout::row_major(3, 4).with_ld(6),
        "t() twice is the identity"
    );
    // Spans and batches.
    ensure!(
        Layout::row_major(3, 4).with_ld(6).span() == Some(2 * 6 + 4),
        "span with ld"
    );
    ensure!(Layout::col_major(0, 4).span() == Some(0), "empty span");
    let b = Layout::col_major(2, 2).batched(3, 5);
    ensure!(
        b.required_len() == Some(2 * 5 + 4) && b.offset(2, 1, 1) == Some(10 + 3),
        "{b:?}"
    );
    ensure!(
        Layout::col_major(2, 2).batched(3, 0).required_len() == Some(4),
        "broadcast batch"
    );
    ensure!(
        Layout::new(Order::ColMajor, 2, 5) == Layout::col_major(2, 5),
        "new"
    );
    ensure!(
        Layout::col_major(2, 0).min_ld() == 2 && Layout::row_major(2, 0).min_ld() == 1,
        "min_ld"
    );
    Ok(())
}

fn layout_validation() -> R {
    expect_invalid(Layout::row_major(3, 4).with_ld(3).validate("a"), "a.ld")?;
    expect_invalid(Layout::col_major(3, 4).with_ld(2).validate("b"), "b.ld")?;
    expect_invalid(Layout::col_major(3, 4).with_ld(0).validate("c"), "c.ld")?;
    // ld 0 is invalid even for an empty matrix (>= 1).
    expect_invalid(Layout::col_major(0, 4).with_ld(0).validate("a"), "a.ld")?;
    expect_invalid(
        Layout::col_major(3, 4).batched(0, 12).validate("a"),
        "a.batch_count",
    )?;
    expect_invalid(Layout::col_major(usize::MAX, 4).validate("a"), "a")?;
    expect_invalid(
        Layout::col_major(3, 4)
            .batched(usize::MAX, usize::MAX)
            .validate("a"),
        "a.batch_stride",
    )?;
    Layout::row_major(3, 4).with_ld(7).validate("a")?;
    // The message names the rule and the value.
    let e = Layout::row_major(3, 4)
        .with_ld(3)
        .validate("a")
        .unwrap_err();
    let s = err_text(&e);
    ensure!(
        s.contains("a.ld") && s.contains(">= 4") && s.contains("got 3"),
        "{s}"
    );
    Ok(())
}

fn output_overlap() -> R {
    let a = Layout::col_major(4, 3).batched(2, 12);
    let b = Layout::col_major(3, 5).batched(2, 15);
    // c's matrices span 4 + 4*4 = 20 elements: stride 19 overlaps.
    let c = Layout::col_major(4, 5).batched(2, 19);
    expect_invalid(
        GemmPlan::<f32, f32>::new(a, b, c, ComputeType::Default),
        "c.batch_stride",
    )?;
    expect_invalid(
        GemmPlan::<f32, f32>::new(a, b, c.batched(2, 0), ComputeType::Default),
        "c.batch_stride",
    )?;
    GemmPlan::<f32, f32>::new(a, b, c.batched(2, 20), ComputeType::Default)?;
    // Inputs may overlap or repeat (stride 0 broadcasts).
    GemmPlan::<f32, f32>::new(
        a.batched(2, 0),
        b.batched(2, 1),
        c.batched(2, 20),
        ComputeType::Default,
    )?;
    // The same rule for cuBLASLt specs, and a single output needs none.
    expect_invalid(
        MatmulSpec::new(a, b, c).check::<f32, f32>(),
        "c.batch_stride",
    )?;
    let e = GemmPlan::<f32, f32>::new(a, b, c, ComputeType::Default).unwrap_err();
    ensure!(err_text(&e).contains("do not overlap"), "{e}");
    Ok(())
}

fn buffer_lengths() -> R {
    let plan = GemmPlan::<f32, f32>::new(
        Layout::row_major(2, 3).with_ld(5),
        Layout::col_major(3, 4),
        Layout::row_major(2, 4).batched(1, 0),
        ComputeType::Default,
    )?;
    // a spans 5 + 3 = 8, b 12, c 8.
    plan.check_lengths(8, 12, 8)?;
    expect_mismatch(plan.check_lengths(7, 12, 8), "a buffer length")?;
    expect_mismatch(plan.check_lengths(8, 11, 8), "b buffer length")?;
    expect_mismatch(plan.check_lengths(8, 12, 7), "c buffer length")?;
    let e = plan.check_lengths(7, 12, 8).unwrap_err();
    let s = err_text(&e);
    ensure!(s.contains(">= 8") && s.contains("got 7"), "{s}");
    // Batches count every matrix.
    let plan = GemmPlan::<f32, f32>::new(
        Layout::col_major(2, 2).batched(3, 4),
        Layout::col_major(2, 2).batched(3, 0),
        Layout::col_major(2, 2).batched(3, 6),
        ComputeType::Default,
    )?;
    plan.check_lengths(12, 4, 16)?;
    expect_mismatch(plan.check_lengths(11, 4, 16), "a buffer length")?;
    expect_mismatch(plan.check_lengths(12, 4, 15), "c buffer length")?;
    Ok(())
}

fn shape_mismatch() -> R {
    let c = Layout::row_major(2, 4);
    expect_mismatch(
        GemmPlan::<f32, f32>::new(
            Layout::row_major(3, 3),
            Layout::row_major(3, 4),
            c,
            ComputeType::Default,
        ),
        "a rows (m)",
    )?;
    expect_mismatch(
        GemmPlan::<f32, f32>::new(
            Layout::row_major(2, 3),
            Layout::row_major(2, 4),
            c,
            ComputeType::Default,
        ),
        "b rows (k)",
    )?;
    expect_mismatch(
        GemmPlan::<f32, f32>::new(
            Layout::row_major(2, 3),
            Layout::row_major(3, 5),
            c,
            ComputeType::Default,
        ),
        "b cols (n)",
    )?;
    // A transposed view fixes it: a 3x2 stored matrix used as 2x3.
    GemmPlan::<f32, f32>::new(
        Layout::row_major(3, 2).t(),
        Layout::row_major(3, 4),
        c,
        ComputeType::Default,
    )?;
    // The same checks in cuBLASLt specs.
    expect_mismatch(
        MatmulSpec::new(Layout::row_major(2, 3), Layout::row_major(2, 4), c).check::<f32, f32>(),
        "b rows (k)",
    )?;
    let e = GemmPlan::<f32, f32>::new(
        Layout::row_major(2, 3),
        Layout::row_major(2, 4),
        c,
        ComputeType::Default,
    )
    .unwrap_err();
    let s = err_text(&e);
    ensure!(s.contains("expected 3") && s.contains("got 2"), "{s}");
    Ok(())
}

fn batch_mismatch() -> R {
    let a = Layout::col_major(2, 2).batched(3, 4);
    let b = Layout::col_major(2, 2).batched(2, 4);
    let c = Layout::col_major(2, 2).batched(3, 4);
    expect_mismatch(
        GemmPlan::<f32, f32>::new(a, b, c, ComputeType::Default),
        "b batch_count",
    )?;
    expect_mismatch(
        GemmPlan::<f32, f32>::new(Layout::col_major(2, 2), c, c, ComputeType::Default),
        "a batch_count",
    )?;
    Ok(())
}

fn int_limits() -> R {
    let big = 1usize << 31;
    // k too large for cublasGemmEx's int (the layouts themselves are fine).
    let r = GemmPlan::<f32, f32>::new(
        Layout::col_major(1, big),
        Layout::col_major(big, 1),
        Layout::col_major(1, 1),
        ComputeType::Default,
    );
    expect_invalid(r, "k (a cols)")?;
    let r = GemmPlan::<f32, f32>::new(
        Layout::col_major(2, 2).with_ld(big),
        Layout::col_major(2, 2),
        Layout::col_major(2, 2),
        ComputeType::Default,
    );
    expect_invalid(r, "a.ld")?;
    // cuBLASLt takes 64-bit sizes: the same spec is fine there.
    MatmulSpec::new(
        Layout::col_major(1, big),
        Layout::col_major(big, 1),
        Layout::col_major(1, 1),
    )
    .check::<f32, f32>()?;
    Ok(())
}

fn row_major_swaps() -> R {
    // Row-major C (m=2 x n=4) = A (2x3) · B (3x4): cuBLAS gets Cᵀ = Bᵀ·Aᵀ,
    // whose operands are column-major as stored: no transposes, no hand swap.
    let p = GemmPlan::<f32, f32>::new(
        Layout::row_major(2, 3),
        Layout::row_major(3, 4),
        Layout::row_major(2, 4),
        ComputeType::Default,
    )?;
    ensure!(p.swaps_operands(), "row-major C must swap");
    ensure!(
        p.transposes() == (Op::CUBLAS_OP_N, Op::CUBLAS_OP_N),
        "{:?}",
        p.transposes()
    );
    ensure!(
        p.dims() == (4, 2, 3) && p.lds() == (4, 3, 4),
        "{:?} {:?}",
        p.dims(),
        p.lds()
    );
    // Row-major X (8x16) · Wᵀ with W row-major (32x16): the linear layer.
    let p = GemmPlan::<f32, f32>::new(
        Layout::row_major(8, 16),
        Layout::row_major(32, 16).t(),
        Layout::row_major(8, 32),
        ComputeType::Default,
    )?;
    ensure!(
        p.swaps_operands() && p.transposes() == (Op::CUBLAS_OP_T, Op::CUBLAS_OP_N),
        "{p:?}"
    );
    ensure!(p.dims() == (32, 8, 16) && p.lds() == (16, 16, 32), "{p:?}");
    ensure!(p.flops() == 2.0 * 8.0 * 32.0 * 16.0, "flops");
    Ok(())
}

fn col_major_ops() -> R {
    let p = GemmPlan::<f64, f64>::new(
        Layout::col_major(2, 3).with_ld(5),
        Layout::col_major(3, 4),
        Layout::col_major(2, 4).with_ld(7),
        ComputeType::Default,
    )?;
    ensure!(
        !p.swaps_operands() && p.transposes() == (Op::CUBLAS_OP_N, Op::CUBLAS_OP_N),
        "{p:?}"
    );
    ensure!(p.dims() == (2, 4, 3) && p.lds() == (5, 3, 7), "{p:?}");
    // Mixed: A row-major (op T), B column-major transposed (op T).
    let p = GemmPlan::<f64, f64>::new(
        Layout::row_major(2, 3),
        Layout::col_major(4, 3).t(),
        Layout::col_major(2, 4),
        ComputeType::Default,
    )?;
    ensure!(
        p.transposes() == (Op::CUBLAS_OP_T, Op::CUBLAS_OP_T) && p.lds() == (3, 4, 2),
        "{p:?}"
    );
    // Column-major C stored as row-major transposed is column-contiguous too.
    let p = GemmPlan::<f64, f64>::new(
        Layout::col_major(2, 3),
        Layout::col_major(3, 4),
        Layout::row_major(4, 2).t(),
        ComputeType::Default,
    )?;
    ensure!(!p.swaps_operands() && p.lds() == (2, 3, 2), "{p:?}");
    Ok(())
}

fn strided_args() -> R {
    let p = GemmPlan::<f32, f32>::new(
        Layout::row_major(4, 8).batched(32, 32),
        Layout::row_major(8, 2).batched(32, 0),
        Layout::row_major(4, 2).batched(32, 8),
        ComputeType::Default,
    )?;
    ensure!(p.batch_count() == 32 && p.swaps_operands(), "{p:?}");
    ensure!(
        format!("{p:?}").contains("stride_a: 0") && format!("{p:?}").contains("stride_b: 32"),
        "{p:?}"
    );
    Ok(())
}

fn compute_resolution() -> R {
    let l = Layout::col_major(4, 4);
    let p = GemmPlan::<f16, f16>::new(l, l, l, ComputeType::Default)?;
    ensure!(
        p.compute() == ComputeType::F32 && p.compute_type() == CT::CUBLAS_COMPUTE_32F,
        "{p:?}"
    );
    ensure!(
        p.scale_type() == ScaleType::F32,
        "f16 with f32 accumulation scales in f32"
    );
    let p = GemmPlan::<f16, f16>::new(l, l, l, ComputeType::F16)?;
    ensure!(
        p.compute_type() == CT::CUBLAS_COMPUTE_16F && p.scale_type() == ScaleType::F16,
        "{p:?}"
    );
    let p = GemmPlan::<bf16, f32>::new(l, l, l, ComputeType::Default)?;
    ensure!(
        p.compute_type() == CT::CUBLAS_COMPUTE_32F && p.scale_type() == ScaleType::F32,
        "{p:?}"
    );
    let p = GemmPlan::<f64, f64>::new(l, l, l, ComputeType::Default)?;
    ensure!(
        p.compute_type() == CT::CUBLAS_COMPUTE_64F && p.scale_type() == ScaleType::F64,
        "{p:?}"
    );
    let p = GemmPlan::<i8, i32>::new(l, l, l, ComputeType::Default)?;
    ensure!(
        p.compute_type() == CT::CUBLAS_COMPUTE_32I && p.scale_type() == ScaleType::I32,
        "{p:?}"
    );
    let p = GemmPlan::<f32, f32>::new(l, l, l, ComputeType::F32Pedantic)?;
    ensure!(p.compute_type() == CT::CUBLAS_COMPUTE_32F_PEDANTIC, "{p:?}");
    // Refused pairs name the argument and list the accepted ones.
    expect_invalid(
        GemmPlan::<f16, f32>::new(l, l, l, ComputeType::F16),
        "compute",
    )?;
    expect_invalid(
        GemmPlan::<f16, f16>::new(l, l, l, ComputeType::Tf32),
        "compute",
    )?;
    expect_invalid(
        GemmPlan::<f64, f64>::new(l, l, l, ComputeType::F32),
        "compute",
    )?;
    expect_invalid(
        GemmPlan::<i8, i32>::new(l, l, l, ComputeType::F32),
        "compute",
    )?;
    expect_invalid(
        GemmPlan::<bf16, bf16>::new(l, l, l, ComputeType::F16),
        "compute",
    )?;
    let e = GemmPlan::<f16, f32>::new(l, l, l, ComputeType::F16).unwrap_err();
    ensure!(
        err_text(&e).contains("F32Pedantic") && err_text(&e).contains("f16 inputs and f32 output"),
        "{e}"
    );
    ensure!(
        ScaleType::I32.to_raw() == DT::CUDA_R_32I && ScaleType::F16.to_raw() == DT::CUDA_R_16F,
        "codes"
    );
    ensure!(
        ComputeType::Default.to_raw().is_none(),
        "Default has no constant of its own"
    );
    Ok(())
}

fn tf32_never_default() -> R {
    let l = Layout::col_major(4, 4);
    let p = GemmPlan::<f32, f32>::new(l, l, l, ComputeType::Default)?;
    ensure!(
        p.compute_type() == CT::CUBLAS_COMPUTE_32F,
        "f32 default must be plain 32F, got {:?}",
        p.compute_type()
    );
    let p = GemmPlan::<f32, f32>::new(l, l, l, ComputeType::Tf32)?;
    ensure!(
        p.compute_type() == CT::CUBLAS_COMPUTE_32F_FAST_TF32,
        "{p:?}"
    );
    for (a, name) in [(ComputeType::Default, "default"), (ComputeType::F32, "F32")] {
        let s = MatmulSpec::new(l, l, l)
            .with_compute(a)
            .check::<f32, f32>()?;
        ensure!(
            s.compute_type() == CT::CUBLAS_COMPUTE_32F,
            "cuBLASLt {name}: {:?}",
            s.compute_type()
        );
    }
    Ok(())
}

fn gemv_checks() -> R {
    let p = GemvPlan::<f32>::new(Layout::row_major(3, 5), 1, 2)?;
    ensure!(
        p.transpose() == Op::CUBLAS_OP_T && p.vector_lengths() == (5, 5),
        "{p:?}"
    );
    p.check_lengths(15, 5, 5)?;
    expect_mismatch(p.check_lengths(14, 5, 5), "a buffer length")?;
    expect_mismatch(p.check_lengths(15, 4, 5), "x buffer length")?;
    expect_mismatch(p.check_lengths(15, 5, 4), "y buffer length")?;
    let p = GemvPlan::<f64>::new(Layout::col_major(3, 5).with_ld(4), 3, 1)?;
    ensure!(
        p.transpose() == Op::CUBLAS_OP_N && p.vector_lengths() == (13, 3),
        "{p:?}"
    );
    // Row-major A is used transposed: cuBLAS's m is A's column count, and
    // the error names the columns (not "a rows").
    expect_invalid(
        GemvPlan::<f32>::new(Layout::row_major(1, 1 << 31), 1, 1),
        "a cols",
    )?;
    expect_invalid(
        GemvPlan::<f32>::new(Layout::col_major(1 << 31, 1), 1, 1),
        "a rows",
    )?;
    expect_invalid(GemvPlan::<f32>::new(Layout::row_major(3, 5), 0, 1), "incx")?;
    expect_invalid(GemvPlan::<f32>::new(Layout::row_major(3, 5), 1, 0), "incy")?;
    expect_invalid(
        GemvPlan::<f32>::new(Layout::row_major(3, 5).with_ld(4), 1, 1),
        "a.ld",
    )?;
    expect_invalid(
        GemvPlan::<f32>::new(Layout::row_major(3, 5).batched(2, 15), 1, 1),
        "a.batch_count",
    )?;
    Ok(())
}

fn pointer_batch_checks() -> R {
    // Zero-length buffers need no device; the checks run before any call.
    let e0 = DeviceBuffer::<f32>::alloc(0)?;
    let (mut c0, mut c1) = (
        DeviceBuffer::<f32>::alloc(0)?,
        DeviceBuffer::<f32>::alloc(0)?,
    );
    let la = Layout::col_major(2, 3);
    let lb = Layout::col_major(3, 2);
    let lc = Layout::col_major(2, 2);
    let a = [Matrix::new(&e0, la), Matrix::new(&e0, la)];
    let b1 = [Matrix::new(&e0, lb)];
    {
        let c = [MatrixMut::new(&mut c0, lc), MatrixMut::new(&mut c1, lc)];
        expect_mismatch(
            GemmPlan::new_pointer_batch(&a, &b1, &c, ComputeType::Default),
            "b count",
        )?;
        let b2 = [Matrix::new(&e0, lb), Matrix::new(&e0, lb.with_ld(4))];
        expect_mismatch(
            GemmPlan::new_pointer_batch(&a, &b2, &c, ComputeType::Default),
            "b[1] layout",
        )?;
        let b3 = [Matrix::new(&e0, lb), Matrix::new(&e0, lb)];
        // Every buffer is empty: the first short one is named.
        expect_mismatch(
            GemmPlan::new_pointer_batch(&a, &b3, &c, ComputeType::Default),
            "a[0] buffer length",
        )?;
        let a2 = [
            Matrix::new(&e0, la.batched(2, 6)),
            Matrix::new(&e0, la.batched(2, 6)),
        ];
        expect_invalid(
            GemmPlan::new_pointer_batch(&a2, &b3, &c, ComputeType::Default),
            "a[0].batch_count",
        )?;
    }
    let c: [MatrixMut<'_, f32>; 0] = [];
    let none: [Matrix<'_, f32>; 0] = [];
    expect_invalid(
        GemmPlan::<f32, f32>::new_pointer_batch(&none, &none, &c, ComputeType::Default),
        "a",
    )?;
    Ok(())
}

fn spec_checks() -> R {
    // Row-major D (32 x 64): bias per column (the contiguous dimension).
    let spec = MatmulSpec::new(
        Layout::row_major(32, 128),
        Layout::row_major(64, 128).t(),
        Layout::row_major(32, 64),
    )
    .with_epilogue(Epilogue::GeluTanhBias);
    let s = spec.check::<f16, f16>()?;
    ensure!(
        s.swaps_operands() && s.dims() == (64, 32, 128) && s.bias_len() == 64,
        "{s:?}"
    );
    ensure!(s.aux_bytes() == 0 && s.aux_ld() == 0, "no aux for GeluBias");
    // Column-major D: bias per row.
    let spec = MatmulSpec::new(
        Layout::col_major(64, 128),
        Layout::col_major(128, 32),
        Layout::col_major(64, 32),
    )
    .with_epilogue(Epilogue::ReluBias);
    let s = spec.check::<f32, f32>()?;
    ensure!(
        !s.swaps_operands() && s.bias_len() == 64 && s.bias_buffer_len() == 64,
        "{s:?}"
    );
    // BgradA / BgradB are defined on the logical matrices whatever the frame.
    for d in [Layout::col_major(10, 6), Layout::row_major(10, 6)] {
        let a = Layout::row_major(10, 7);
        let b = Layout::col_major(7, 6);
        let sa = MatmulSpec::new(a, b, d)
            .with_epilogue(Epilogue::BgradA)
            .check::<f32, f32>()?;
        let sb = MatmulSpec::new(a, b, d)
            .with_epilogue(Epilogue::BgradB)
            .check::<f32, f32>()?;
        ensure!(sa.bias_len() == 10 && sb.bias_len() == 6, "{sa:?} {sb:?}");
        let swapped = sa.swaps_operands();
        ensure!(
            sa.raw_epilogue()
                == if swapped {
                    EP::CUBLASLT_EPILOGUE_BGRADB
                } else {
                    EP::CUBLASLT_EPILOGUE_BGRADA
                },
            "{sa:?}"
        );
    }
    // Aux: ReLU mask ld rounds up to 128 bits, GELU input to 8 elements.
    let l = |e| {
        MatmulSpec::new(
            Layout::col_major(100, 16),
            Layout::col_major(16, 3),
            Layout::col_major(100, 3),
        )
        .with_epilogue(e)
    };
    let s = l(Epilogue::ReluAux).check::<f32, f32>()?;
    ensure!(s.aux_ld() == 128 && s.aux_bytes() == 128 * 3 / 8, "{s:?}");
    let s = l(Epilogue::DGeluTanh).check::<f16, f16>()?;
    ensure!(s.aux_ld() == 104 && s.aux_bytes() == 104 * 3 * 2, "{s:?}");
    let s = l(Epilogue::GeluTanhAuxBias).check::<f32, f32>()?;
    ensure!(
        s.aux_ld() == 104 && s.aux_bytes() == 104 * 3 * 4 && s.bias_len() == 100,
        "{s:?}"
    );
    // Batched: one bias for all, one gradient per matrix, aux per matrix.
    let bl = |e| {
        MatmulSpec::new(
            Layout::col_major(8, 4).batched(5, 32),
            Layout::col_major(4, 2).batched(5, 8),
            Layout::col_major(8, 2).batched(5, 16),
        )
        .with_epilogue(e)
    };
    ensure!(
        bl(Epilogue::Bias).check::<f32, f32>()?.bias_buffer_len() == 8,
        "bias broadcast"
    );
    ensure!(
        bl(Epilogue::DReluBgrad)
            .check::<f32, f32>()?
            .bias_buffer_len()
            == 40,
        "gradient per matrix"
    );
    ensure!(
        bl(Epilogue::GeluTanhAux).check::<f32, f32>()?.aux_bytes() == 8 * 2 * 5 * 4,
        "aux per matrix"
    );
    // Alignment must be a power of two <= 256.
    for bad in [0, 3, 512] {
        expect_invalid(
            l(Epilogue::None).with_alignment(bad).check::<f32, f32>(),
            "alignment",
        )?;
    }
    l(Epilogue::None).with_alignment(4).check::<f32, f32>()?;
    // The compute type is checked as for GEMM.
    expect_invalid(
        l(Epilogue::None)
            .with_compute(ComputeType::Tf32)
            .check::<f16, f16>(),
        "compute",
    )?;
    let s = l(Epilogue::None)
        .with_compute(ComputeType::Tf32)
        .check::<f32, f32>()?;
    ensure!(
        s.compute_type() == CT::CUBLAS_COMPUTE_32F_FAST_TF32
            && s.flops() == 2.0 * 100.0 * 3.0 * 16.0,
        "{s:?}"
    );
    Ok(())
}

fn aux_offsets() -> R {
    // Column-major D: aux is column-major with ld aux_ld.
    let s = MatmulSpec::new(
        Layout::col_major(10, 4),
        Layout::col_major(4, 3),
        Layout::col_major(10, 3),
    )
    .with_epilogue(Epilogue::GeluTanhAux)
    .check::<f32, f32>()?;
    ensure!(
        s.aux_ld() == 16 && s.aux_offset(0, 2, 1) == Some(16 + 2),
        "{s:?}"
    );
    ensure!(
        s.aux_offset(0, 10, 0).is_none() && s.aux_offset(1, 0, 0).is_none(),
        "out of range"
    );
    // Row-major D: aux is laid out like D, rows contiguous.
    let s = MatmulSpec::new(
        Layout::row_major(3, 4),
        Layout::row_major(4, 10),
        Layout::row_major(3, 10).batched(2, 30),
    )
    .with_epilogue(Epilogue::ReluAux);
    let s = MatmulSpec::new(
        s.layouts().0.batched(2, 12),
        s.layouts().1.batched(2, 0),
        s.layouts().2,
    )
    .with_epilogue(Epilogue::ReluAux)
    .check::<f32, f32>()?;
    ensure!(s.aux_ld() == 128, "{s:?}");
    ensure!(
        s.aux_offset(1, 2, 5) == Some(128 * 3 + 2 * 128 + 5),
        "{:?}",
        s.aux_offset(1, 2, 5)
    );
    let none = MatmulSpec::new(
        Layout::col_major(2, 2),
        Layout::col_major(2, 2),
        Layout::col_major(2, 2),
    )
    .check::<f32, f32>()?;
    ensure!(none.aux_offset(0, 0, 0).is_none(), "no aux");
    Ok(())
}

fn epilogue_buffer_checks() -> R {
    let mk = |e| {
        MatmulSpec::new(
            Layout::col_major(16, 8),
            Layout::col_major(8, 4),
            Layout::col_major(16, 4),
        )
        .with_epilogue(e)
        .check::<f32, f32>()
        .unwrap()
    };
    mk(Epilogue::None).check_epilogue_lengths(None, None, None, None)?;
    expect_invalid(
        mk(Epilogue::None).check_epilogue_lengths(Some(16), None, None, None),
        "epilogue.bias",
    )?;
    expect_invalid(
        mk(Epilogue::Bias).check_epilogue_lengths(None, None, None, None),
        "epilogue.bias",
    )?;
    expect_mismatch(
        mk(Epilogue::Bias).check_epilogue_lengths(Some(15), None, None, None),
        "epilogue.bias",
    )?;
    mk(Epilogue::Bias).check_epilogue_lengths(Some(16), None, None, None)?;
    expect_invalid(
        mk(Epilogue::DReluBgrad).check_epilogue_lengths(None, Some(16), None, None),
        "epilogue.aux_in",
    )?;
    let s = mk(Epilogue::DReluBgrad);
    s.check_epilogue_lengths(None, Some(16), None, Some(s.aux_bytes()))?;
    expect_mismatch(
        s.check_epilogue_lengths(None, Some(16), None, Some(s.aux_bytes() - 1)),
        "epilogue.aux_in",
    )?;
    expect_invalid(
        s.check_epilogue_lengths(Some(16), Some(16), None, Some(64)),
        "epilogue.bias",
    )?;
    let s = mk(Epilogue::GeluTanhAuxBias);
    expect_invalid(
        s.check_epilogue_lengths(Some(16), None, None, Some(s.aux_bytes())),
        "epilogue.aux_out",
    )?;
    s.check_epilogue_lengths(Some(16), None, Some(s.aux_bytes()), None)?;
    expect_invalid(
        mk(Epilogue::BgradB).check_epilogue_lengths(None, None, None, None),
        "epilogue.bias_grad",
    )?;
    mk(Epilogue::BgradB).check_epilogue_lengths(None, Some(4), None, None)?;
    let e = mk(Epilogue::Bias)
        .check_epilogue_lengths(Some(15), None, None, None)
        .unwrap_err();
    ensure!(
        err_text(&e).contains(">= 16") && err_text(&e).contains("got 15"),
        "{e}"
    );
    Ok(())
}

fn epilogue_args_builder() -> R {
    let bias = DeviceBuffer::<f32>::alloc(0)?;
    let mut aux = DeviceBuffer::<u8>::alloc(0)?;
    let args = EpilogueArgs::<f32>::none().bias(&bias).aux_out(&mut aux);
    let dbg = format!("{args:?}");
    ensure!(
        dbg.contains("bias: Some") && dbg.contains("aux_out: Some") && dbg.contains("aux_in: None"),
        "{dbg}"
    );
    Ok(())
}

fn plan_keys() -> R {
    use std::collections::HashSet;
    let base = MatmulSpec::new(
        Layout::row_major(64, 32),
        Layout::row_major(32, 16),
        Layout::row_major(64, 16),
    );
    let k = |s: &MatmulSpec| MatmulKey::new::<f16, f16>(s, 1 << 20);
    ensure!(k(&base) == k(&base.clone()), "same spec, same key");
    ensure!(
        k(&base)
            == MatmulKey::new::<f16, f16>(
                &MatmulSpec::new(
                    Layout::row_major(64, 32),
                    Layout::row_major(32, 16),
                    Layout::row_major(64, 16)
                ),
                1 << 20
            ),
        "equal specs"
    );
    let (a, b, d) = base.layouts();
    let variants = [
        MatmulSpec::new(a.with_ld(40), b, d),
        MatmulSpec::new(Layout::col_major(64, 32), b, d),
        MatmulSpec::new(Layout::row_major(32, 64).t(), b, d),
        MatmulSpec::new(a, b, Layout::col_major(64, 16)),
        MatmulSpec::new(a, Layout::row_major(32, 8), Layout::row_major(64, 8)),
        MatmulSpec::new(a.batched(2, 2048), b.batched(2, 0), d.batched(2, 1024)),
        MatmulSpec::new(a.batched(2, 2048), b.batched(2, 512), d.batched(2, 1024)),
        base.with_epilogue(Epilogue::Bias),
        base.with_epilogue(Epilogue::GeluTanhBias),
        base.with_compute(ComputeType::F16),
        base.with_compute(ComputeType::F32),
        base.with_alignment(16),
    ];
    let mut keys: HashSet<MatmulKey> = HashSet::new();
    keys.insert(k(&base));
    for v in &variants {
        ensure!(keys.insert(k(v)), "spec {v:?} collides with another key");
    }
    // Element types and the workspace limit are part of the key.
    ensure!(
        keys.insert(MatmulKey::new::<f16, f32>(&base, 1 << 20)),
        "output type"
    );
    ensure!(
        keys.insert(MatmulKey::new::<bf16, bf16>(&base, 1 << 20)),
        "input type"
    );
    ensure!(
        keys.insert(MatmulKey::new::<f16, f16>(&base, 1 << 21)),
        "workspace"
    );
    ensure!(
        k(&base).spec() == &base && k(&base).workspace_limit() == 1 << 20,
        "accessors"
    );
    Ok(())
}

fn epilogue_raw() -> R {
    let pairs = [
        (Epilogue::None, EP::CUBLASLT_EPILOGUE_DEFAULT),
        (Epilogue::Relu, EP::CUBLASLT_EPILOGUE_RELU),
        (Epilogue::ReluAux, EP::CUBLASLT_EPILOGUE_RELU_AUX),
        (Epilogue::Bias, EP::CUBLASLT_EPILOGUE_BIAS),
        (Epilogue::ReluBias, EP::CUBLASLT_EPILOGUE_RELU_BIAS),
        (Epilogue::ReluAuxBias, EP::CUBLASLT_EPILOGUE_RELU_AUX_BIAS),
        (Epilogue::GeluTanh, EP::CUBLASLT_EPILOGUE_GELU),
        (Epilogue::GeluTanhAux, EP::CUBLASLT_EPILOGUE_GELU_AUX),
        (Epilogue::GeluTanhBias, EP::CUBLASLT_EPILOGUE_GELU_BIAS),
        (
            Epilogue::GeluTanhAuxBias,
            EP::CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
        ),
        (Epilogue::DRelu, EP::CUBLASLT_EPILOGUE_DRELU),
        (Epilogue::DReluBgrad, EP::CUBLASLT_EPILOGUE_DRELU_BGRAD),
        (Epilogue::DGeluTanh, EP::CUBLASLT_EPILOGUE_DGELU),
        (Epilogue::DGeluTanhBgrad, EP::CUBLASLT_EPILOGUE_DGELU_BGRAD),
        (Epilogue::BgradA, EP::CUBLASLT_EPILOGUE_BGRADA),
        (Epilogue::BgradB, EP::CUBLASLT_EPILOGUE_BGRADB),
    ];
    ensure!(pairs.len() == Epilogue::ALL.len(), "every epilogue listed");
    for (e, raw) in pairs {
        ensure!(e.to_raw(false) == raw, "{e:?}");
        let swapped = match e {
            Epilogue::BgradA => EP::CUBLASLT_EPILOGUE_BGRADB,
            Epilogue::BgradB => EP::CUBLASLT_EPILOGUE_BGRADA,
            _ => raw,
        };
        ensure!(e.to_raw(true) == swapped, "{e:?} swapped");
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Host tier: the real cuBLASLt, no device

fn desc_round_trip() -> R {
    for (ct, st) in [
        (CT::CUBLAS_COMPUTE_32F, DT::CUDA_R_32F),
        (CT::CUBLAS_COMPUTE_16F, DT::CUDA_R_16F),
        (CT::CUBLAS_COMPUTE_32F_FAST_TF32, DT::CUDA_R_32F),
        (CT::CUBLAS_COMPUTE_64F, DT::CUDA_R_64F),
        (CT::CUBLAS_COMPUTE_32I, DT::CUDA_R_32I),
    ] {
        let d = MatmulDesc::new(ct, st)?;
        ensure!(
            d.compute_type()? == ct && d.scale_type()? == st,
            "{ct:?} {st:?}"
        );
        ensure!(
            d.transposes()? == (Op::CUBLAS_OP_N, Op::CUBLAS_OP_N),
            "default transposes"
        );
        ensure!(
            d.epilogue()? == EP::CUBLASLT_EPILOGUE_DEFAULT,
            "default epilogue"
        );
    }
    let mut d = MatmulDesc::new(CT::CUBLAS_COMPUTE_32F, DT::CUDA_R_32F)?;
    d.set_transposes(Op::CUBLAS_OP_T, Op::CUBLAS_OP_N)?;
    ensure!(
        d.transposes()? == (Op::CUBLAS_OP_T, Op::CUBLAS_OP_N),
        "transposes"
    );
    for e in Epilogue::ALL {
        d.set_epilogue(e.to_raw(false))?;
        ensure!(d.epilogue()? == e.to_raw(false), "{e:?}");
    }
    ensure!(
        d.aux_ld_and_stride()? == (0, 0) && d.bias_batch_stride()? == 0,
        "defaults"
    );
    ensure!(d.epilogue_pointers()? == (0, 0), "null pointers by default");
    ensure!(!d.as_raw().is_null(), "raw");
    Ok(())
}

fn layout_round_trip() -> R {
    let mut l = LtMatrixLayout::new(DT::CUDA_R_16F, 64, 32, 72)?;
    ensure!(
        l.shape()? == (DT::CUDA_R_16F, 64, 32, 72),
        "{:?}",
        l.shape()?
    );
    ensure!(l.batch()? == (1, 0), "default batch {:?}", l.batch()?);
    ensure!(
        l.order()? == cublasLtOrder_t::CUBLASLT_ORDER_COL,
        "column-major by default"
    );
    l.set_batch(8, 72 * 32)?;
    ensure!(l.batch()? == (8, 72 * 32), "{:?}", l.batch()?);
    let l = LtMatrixLayout::new(DT::CUDA_R_32I, 1 << 33, 3, 1 << 33)?;
    ensure!(
        l.shape()? == (DT::CUDA_R_32I, 1 << 33, 3, 1 << 33),
        "64-bit sizes"
    );
    Ok(())
}

fn preference_round_trip() -> R {
    let mut p = MatmulPreference::new()?;
    ensure!(p.max_workspace()? == 0, "no workspace by default");
    ensure!(
        p.min_alignment()? == [256; 4],
        "256-byte default alignment: {:?}",
        p.min_alignment()?
    );
    p.set_max_workspace(32 << 20)?;
    p.set_min_alignment(16)?;
    ensure!(
        p.max_workspace()? == 32 << 20 && p.min_alignment()? == [16; 4],
        "round trip"
    );
    Ok(())
}

fn descriptors_col_major() -> R {
    let spec = MatmulSpec::new(
        Layout::col_major(64, 40).with_ld(72),
        Layout::row_major(40, 24),
        Layout::col_major(64, 24),
    )
    .with_epilogue(Epilogue::ReluBias);
    let d = MatmulDescriptors::new::<f16, f32>(&spec, 4 << 20)?;
    let m = d.matmul_desc();
    ensure!(
        m.compute_type()? == CT::CUBLAS_COMPUTE_32F && m.scale_type()? == DT::CUDA_R_32F,
        "compute"
    );
    ensure!(
        m.transposes()? == (Op::CUBLAS_OP_N, Op::CUBLAS_OP_T),
        "{:?}",
        m.transposes()?
    );
    ensure!(m.epilogue()? == EP::CUBLASLT_EPILOGUE_RELU_BIAS, "epilogue");
    // The bias pointer is a placeholder aligned exactly to the spec's alignment.
    ensure!(
        m.epilogue_pointers()? == (256, 0),
        "{:?}",
        m.epilogue_pointers()?
    );
    ensure!(
        d.first_layout().shape()? == (DT::CUDA_R_16F, 64, 40, 72),
        "{:?}",
        d.first_layout().shape()?
    );
    // B row-major 40x24 = column-major 24x40, used transposed.
    ensure!(
        d.second_layout().shape()? == (DT::CUDA_R_16F, 24, 40, 24),
        "{:?}",
        d.second_layout().shape()?
    );
    ensure!(
        d.output_layout().shape()? == (DT::CUDA_R_32F, 64, 24, 64),
        "{:?}",
        d.output_layout().shape()?
    );
    ensure!(
        d.preference().max_workspace()? == 4 << 20 && d.preference().min_alignment()? == [256; 4],
        "pref"
    );
    ensure!(!d.shape().swaps_operands(), "column-major D");
    Ok(())
}

fn descriptors_row_major() -> R {
    // Row-major Y (32 x 64) = X (32 x 128) · Wᵀ (W row-major 64 x 128).
    let spec = MatmulSpec::new(
        Layout::row_major(32, 128),
        Layout::row_major(64, 128).t(),
        Layout::row_major(32, 64),
    )
    .with_epilogue(Epilogue::BgradA)
    .with_alignment(16);
    let d = MatmulDescriptors::new::<bf16, bf16>(&spec, 0)?;
    let m = d.matmul_desc();
    // Yᵀ (64 x 32) = W (64 x 128, column-major view of Wᵀ... stored rows) · Xᵀ.
    ensure!(
        m.transposes()? == (Op::CUBLAS_OP_T, Op::CUBLAS_OP_N),
        "{:?}",
        m.transposes()?
    );
    ensure!(
        m.epilogue()? == EP::CUBLASLT_EPILOGUE_BGRADB,
        "BgradA in the swapped frame is BGRADB"
    );
    ensure!(
        m.epilogue_pointers()? == (16, 0),
        "{:?}",
        m.epilogue_pointers()?
    );
    ensure!(
        d.first_layout().shape()? == (DT::CUDA_R_16BF, 128, 64, 128),
        "{:?}",
        d.first_layout().shape()?
    );
    ensure!(
        d.second_layout().shape()? == (DT::CUDA_R_16BF, 128, 32, 128),
        "{:?}",
        d.second_layout().shape()?
    );
    ensure!(
        d.output_layout().shape()? == (DT::CUDA_R_16BF, 64, 32, 64),
        "{:?}",
        d.output_layout().shape()?
    );
    ensure!(
        d.preference().max_workspace()? == 0 && d.preference().min_alignment()? == [16; 4],
        "pref"
    );
    ensure!(
        d.shape().swaps_operands() && d.shape().bias_len() == 32,
        "{:?}",
        d.shape()
    );
    Ok(())
}

fn descriptors_batched_aux() -> R {
    let spec = MatmulSpec::new(
        Layout::col_major(100, 16).batched(4, 1600),
        Layout::col_major(16, 8).batched(4, 0),
        Layout::col_major(100, 8).batched(4, 800),
    )
    .with_epilogue(Epilogue::DReluBgrad);
    let d = MatmulDescriptors::new::<f32, f32>(&spec, 1 << 20)?;
    let m = d.matmul_desc();
    ensure!(
        m.epilogue()? == EP::CUBLASLT_EPILOGUE_DRELU_BGRAD,
        "epilogue"
    );
    ensure!(
        m.aux_ld_and_stride()? == (128, 128 * 8),
        "{:?}",
        m.aux_ld_and_stride()?
    );
    ensure!(
        m.bias_batch_stride()? == 100,
        "one gradient per matrix: {}",
        m.bias_batch_stride()?
    );
    ensure!(
        m.epilogue_pointers()? == (256, 256),
        "{:?}",
        m.epilogue_pointers()?
    );
    ensure!(
        d.first_layout().batch()? == (4, 1600),
        "{:?}",
        d.first_layout().batch()?
    );
    ensure!(
        d.second_layout().batch()? == (4, 0),
        "{:?}",
        d.second_layout().batch()?
    );
    ensure!(
        d.output_layout().batch()? == (4, 800),
        "{:?}",
        d.output_layout().batch()?
    );
    // GELU aux: ld in elements, multiple of 8; batch stride ld x n.
    let spec = spec.with_epilogue(Epilogue::GeluTanhAuxBias);
    let d = MatmulDescriptors::new::<f32, f32>(&spec, 1 << 20)?;
    ensure!(
        d.matmul_desc().aux_ld_and_stride()? == (104, 104 * 8),
        "{:?}",
        d.matmul_desc().aux_ld_and_stride()?
    );
    ensure!(
        d.matmul_desc().bias_batch_stride()? == 0,
        "the bias is shared by the batch"
    );
    Ok(())
}

fn descriptors_all_epilogues() -> R {
    for e in Epilogue::ALL {
        for d in [Layout::col_major(24, 8), Layout::row_major(24, 8)] {
            let spec = MatmulSpec::new(Layout::col_major(24, 16), Layout::col_major(16, 8), d)
                .with_epilogue(e);
            let x = MatmulDescriptors::new::<f16, f16>(&spec, 0)?;
            ensure!(
                x.matmul_desc().epilogue()? == e.to_raw(x.shape().swaps_operands()),
                "{e:?}"
            );
            let _ = MatmulDescriptors::new::<f32, f32>(&spec, 0)?;
            let _ = MatmulDescriptors::new::<bf16, f32>(&spec, 0)?;
            let _ = MatmulDescriptors::new::<f16, f32>(&spec, 0)?;
        }
    }
    // Other pairs and compute types.
    let l = Layout::col_major(16, 16);
    let spec = MatmulSpec::new(l, l, l);
    let x = MatmulDescriptors::new::<i8, i32>(&spec, 0)?;
    ensure!(
        x.matmul_desc().compute_type()? == CT::CUBLAS_COMPUTE_32I
            && x.matmul_desc().scale_type()? == DT::CUDA_R_32I,
        "i8"
    );
    let x = MatmulDescriptors::new::<f16, f16>(&spec.with_compute(ComputeType::F16), 0)?;
    ensure!(
        x.matmul_desc().scale_type()? == DT::CUDA_R_16F,
        "f16 compute scales in f16"
    );
    let x = MatmulDescriptors::new::<f64, f64>(&spec, 0)?;
    ensure!(
        x.matmul_desc().compute_type()? == CT::CUBLAS_COMPUTE_64F,
        "f64"
    );
    // Checks still come first.
    expect_invalid(
        MatmulDescriptors::new::<f32, f32>(&spec.with_alignment(3), 0),
        "alignment",
    )?;
    Ok(())
}

fn descriptors_empty() -> R {
    // m = 0, n = 0 and k = 0: the library accepts the layouts (a plan then
    // makes no call for an empty D).
    for (a, b, d) in [
        (
            Layout::col_major(0, 8),
            Layout::col_major(8, 4),
            Layout::col_major(0, 4),
        ),
        (
            Layout::row_major(6, 8),
            Layout::row_major(8, 0),
            Layout::row_major(6, 0),
        ),
        (
            Layout::col_major(6, 0),
            Layout::col_major(0, 4),
            Layout::col_major(6, 4),
        ),
    ] {
        let x = MatmulDescriptors::new::<f32, f32>(&MatmulSpec::new(a, b, d), 0)?;
        let (_, rows, cols, ld) = x.output_layout().shape()?;
        ensure!(
            ld >= 1 && u64::try_from(d.rows() * d.cols()).unwrap() == rows * cols,
            "{:?}",
            x.output_layout().shape()?
        );
    }
    Ok(())
}

fn lt_handle_without_gpu() -> R {
    if skip_if_gpu("lt_handle_without_gpu") {
        return Ok(());
    }
    let stream = Stream::legacy();
    // Typed NoDevice (issue 33), cuBLASLt's own status kept in the detail.
    match LtHandle::with_workspace(&stream, 0) {
        Err(Error::NoDevice {
            detail: Some(d), ..
        }) => {
            ensure!(d.contains("cublasLtCreate"), "{d}");
            ensure!(d.contains("CUBLAS_STATUS_NOT_INITIALIZED"), "{d}");
        }
        other => return Err(format!("expected NoDevice, got {other:?}").into()),
    }
    match LtHandle::new(&stream) {
        Err(e @ Error::NoDevice { .. }) if e.is_no_device() => Ok(()),
        other => Err(format!("expected NoDevice, got {other:?}").into()),
    }
}

fn blas_handle_without_gpu() -> R {
    if skip_if_gpu("blas_handle_without_gpu") {
        return Ok(());
    }
    // Typed NoDevice (issue 33), cuBLAS's own status kept in the detail.
    match cudnn::blas::Handle::new(&Stream::legacy()) {
        Err(Error::NoDevice {
            detail: Some(d), ..
        }) => {
            ensure!(d.contains("CUBLAS_STATUS_NOT_INITIALIZED"), "{d}");
            Ok(())
        }
        other => Err(format!("expected NoDevice, got {other:?}").into()),
    }
}
