//! Host tier (the real cuDNN, no GPU) for the ops: the new descriptors
//! (op-tensor, reduce-tensor) round-trip through cuDNN, the batch-norm
//! parameter descriptor cuDNN derives has the shape and type we expect,
//! dropout reserve sizes come back, and every shape, broadcast, length and
//! range check rejects bad arguments with our own error (never a cuDNN
//! status: the library is not called) naming the argument and the values.
//!
//! Run against cuDNN 9 (default) and 8.9:
//! `CUDNN_RS_SEARCH_PATH=$PWD/.cuda-libs/cuda12 cargo test -p cudnn-rs --features dnn,blas,reference --test host ops::`.

use crate::support;

use cudnn::dnn::*;
use cudnn::runtime::{DeviceSlice, DeviceSliceMut};
use cudnn::sys::cudnn as raw;
use cudnn::{DataType, Error};
use half::{bf16, f16};
use support::*;

/// Ours, not cuDNN's: a validation error, with every `needle` in its text.
fn our_error<T: std::fmt::Debug>(r: cudnn::Result<T>, needles: &[&str]) -> TestResult {
    let e = match r {
        Ok(v) => return Err(format!("expected an error, got Ok({v:?})").into()),
        Err(e) => e,
    };
    ensure!(
        e.cudnn_status().is_none(),
        "must be rejected before cuDNN is called: {e}"
    );
    ensure!(
        matches!(e, Error::InvalidArgument { .. } | Error::Mismatch { .. }),
        "not a validation error: {e:?}"
    );
    let msg = e.to_string();
    for n in needles {
        ensure!(msg.contains(n), "error {msg:?} must mention {n:?}");
    }
    Ok(())
}

fn nchw<T: DataType>(n: usize, c: usize, h: usize, w: usize) -> cudnn::Result<TensorDescriptor<T>> {
    TensorDescriptor::nchw(n, c, h, w)
}

// ---------------------------------------------------------------------------
// Descriptors

fn op_tensor_descriptor_for<T: DataType>() -> TestResult {
    for op in OpTensorOp::ALL {
        for nan in [NanPropagation::Propagate, NanPropagation::NotPropagate] {
            let d = OpTensorDescriptor::<T>::new(op, nan)?;
            ensure!(d.op() == op && d.nan_propagation() == nan, "{d:?}");
            // Round trip through cuDNN's getter.
            let p = d.into_raw();
            // SAFETY: `p` came from `into_raw` and is handed back once.
            let back = unsafe { OpTensorDescriptor::<T>::from_raw(p) }?;
            ensure!(
                back.op() == op && back.nan_propagation() == nan,
                "{} {op:?}: read back {back:?}",
                T::NAME
            );
            back.destroy()?;
        }
    }
    Ok(())
}

fn op_tensor_descriptors() -> TestResult {
    op_tensor_descriptor_for::<f32>()?;
    op_tensor_descriptor_for::<f64>()?;
    op_tensor_descriptor_for::<f16>()?;
    op_tensor_descriptor_for::<bf16>()?;
    // A double-compute descriptor is not one for f32 tensors.
    let p = OpTensorDescriptor::<f64>::new(OpTensorOp::Add, NanPropagation::Propagate)?.into_raw();
    // SAFETY: live descriptor from `into_raw`; on error it is left to us.
    let r = unsafe { OpTensorDescriptor::<f32>::from_raw(p) };
    our_error(r, &["compute type"])?;
    // SAFETY: it was not adopted; we destroy it once.
    let _ = unsafe { OpTensorDescriptor::<f64>::from_raw(p) }?;
    // SAFETY: null is rejected before any use.
    let r = unsafe { OpTensorDescriptor::<f32>::from_raw(std::ptr::null_mut()) };
    our_error(r, &["null"])?;
    Ok(())
}

fn reduce_descriptor_for<T: DataType>() -> TestResult {
    for op in ReduceOp::ALL {
        for indices in [false, true] {
            let r = ReduceTensorDescriptor::<T>::new(op, NanPropagation::Propagate, indices);
            if indices && !op.has_indices() {
                our_error(r, &["indices", "Min and Max"])?;
                continue;
            }
            let d = r?;
            ensure!(d.op() == op && d.indices() == indices, "{d:?}");
            let p = d.into_raw();
            // SAFETY: from `into_raw`, handed back once.
            let back = unsafe { ReduceTensorDescriptor::<T>::from_raw(p) }?;
            ensure!(
                back.op() == op
                    && back.indices() == indices
                    && back.nan_propagation() == NanPropagation::Propagate,
                "{} {op:?}: read back {back:?}",
                T::NAME
            );
        }
    }
    Ok(())
}

struct RawReduce(raw::cudnnReduceTensorDescriptor_t);
impl Drop for RawReduce {
    fn drop(&mut self) {
        if let Ok(api) = raw::load() {
            // SAFETY: created by the test, destroyed once.
            let _ = unsafe { api.cudnnDestroyReduceTensorDescriptor(self.0) };
        }
    }
}

fn reduce_descriptors() -> TestResult {
    reduce_descriptor_for::<f32>()?;
    reduce_descriptor_for::<f64>()?;
    reduce_descriptor_for::<f16>()?;
    reduce_descriptor_for::<bf16>()?;
    // Settings cuDNN accepts that `from_raw` rejects: indices with ADD, and
    // 64-bit indices.
    let api = raw::load()?;
    for (op, ind_type, needle) in [
        (
            raw::cudnnReduceTensorOp_t::CUDNN_REDUCE_TENSOR_ADD,
            raw::cudnnIndicesType_t::CUDNN_32BIT_INDICES,
            "Min and Max",
        ),
        (
            raw::cudnnReduceTensorOp_t::CUDNN_REDUCE_TENSOR_MAX,
            raw::cudnnIndicesType_t::CUDNN_64BIT_INDICES,
            "32BIT",
        ),
    ] {
        let mut p = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        let st = unsafe { api.cudnnCreateReduceTensorDescriptor(&mut p) }?;
        ensure!(api.normalize_status(st).0 == 0, "create: {}", st.0);
        let guard = RawReduce(p);
        // SAFETY: live descriptor; known constants.
        let st = unsafe {
            api.cudnnSetReduceTensorDescriptor(
                p,
                op,
                raw::cudnnDataType_t::CUDNN_DATA_FLOAT,
                raw::cudnnNanPropagation_t::CUDNN_PROPAGATE_NAN,
                raw::cudnnReduceTensorIndices_t::CUDNN_REDUCE_TENSOR_FLATTENED_INDICES,
                ind_type,
            )
        }?;
        ensure!(api.normalize_status(st).0 == 0, "cuDNN accepts: {}", st.0);
        // SAFETY: live descriptor; on error it stays ours (the guard destroys it).
        let r = unsafe { ReduceTensorDescriptor::<f32>::from_raw(guard.0) };
        our_error(r, &[needle])?;
    }
    Ok(())
}

fn batch_norm_descriptor_for<T: Float>() -> TestResult {
    // [n, c, h, w] = [2, 3, 4, 5]: spatial parameters [1, 3, 1, 1] (strides
    // 3, 1, 1, 1); per activation [1, 3, 4, 5] (strides 60, 20, 5, 1).
    let cases: [(TensorDescriptor<T>, &[usize]); 3] = [
        (nchw(2, 3, 4, 5)?, &[2, 3, 4, 5]),
        (TensorDescriptor::nhwc(2, 3, 4, 5)?, &[2, 3, 4, 5]),
        (
            TensorDescriptor::packed(&[2, 3, 4, 5, 6])?,
            &[2, 3, 4, 5, 6],
        ),
    ];
    for (x, shape) in &cases {
        for mode in [
            BatchNormMode::Spatial,
            BatchNormMode::SpatialPersistent,
            BatchNormMode::PerActivation,
        ] {
            // The element type is checked when the derived descriptor is
            // read back: f32 for half inputs, f64 for f64.
            let p = derive_batch_norm_descriptor(x, mode)?;
            let want = mode.param_shape(shape);
            ensure!(
                p.shape() == want.as_slice() && p.is_packed(),
                "{} {mode:?} {shape:?}: derived {p:?}, want {want:?} packed",
                T::NAME
            );
        }
    }
    let spatial = BatchNormMode::Spatial.param_shape(&[2, 3, 4, 5]);
    ensure!(spatial == [1, 3, 1, 1], "spatial {spatial:?}");
    let pa = BatchNormMode::PerActivation.param_shape(&[2, 3, 4, 5]);
    ensure!(pa == [1, 3, 4, 5], "per activation {pa:?}");
    // A plan holds the same descriptor.
    let plan = BatchNormPlan::new(BatchNormMode::Spatial, nchw::<T>(2, 3, 4, 5)?, 1e-3)?;
    ensure!(
        plan.param_desc().shape() == [1, 3, 1, 1] && plan.param_desc().strides() == [3, 1, 1, 1],
        "{plan:?}"
    );
    Ok(())
}

fn batch_norm_descriptors() -> TestResult {
    batch_norm_descriptor_for::<f32>()?;
    batch_norm_descriptor_for::<f64>()?;
    batch_norm_descriptor_for::<f16>()?;
    batch_norm_descriptor_for::<bf16>()
}

fn batch_norm_ranges() -> TestResult {
    let min = batch_norm_min_epsilon()?;
    let version = Handle::library_version()?;
    eprintln!("cuDNN {version}: CUDNN_BN_MIN_EPSILON {min}");
    // Both headers define `CUDNN_BN_MIN_EPSILON 0.0`: cuDNN 8.9's
    // `cudnn_ops_infer.h` and cuDNN 9's `cudnn_ops.h`.
    ensure!(
        min == 0.0,
        "cuDNN {version}: min epsilon {min}, the header says 0.0"
    );
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0, -1e-7] {
        our_error(
            BatchNormPlan::new(BatchNormMode::Spatial, nchw::<f32>(2, 3, 4, 5)?, bad),
            &["epsilon"],
        )?;
    }
    // Below the old, wrong 1e-5 floor, on 8.9 as on 9.
    for good in [0.0, 1e-9, 1e-6, 1e-5] {
        check_batch_norm_epsilon(good)?;
        let plan = BatchNormPlan::new(BatchNormMode::Spatial, nchw::<f32>(2, 3, 4, 5)?, good)?;
        ensure!(plan.epsilon() == good, "{plan:?}");
    }
    for bad in [-0.1, 1.1, f64::NAN] {
        our_error(check_batch_norm_momentum(bad), &["[0, 1]"])?;
    }
    check_batch_norm_momentum(0.0)?;
    check_batch_norm_momentum(1.0)?;
    Ok(())
}

fn dropout_sizes() -> TestResult {
    // The reserve holds the mask; cuDNN sizes it per element, so a bigger
    // tensor never needs less.
    let mut last = 0;
    for n in [1, 2, 8, 64] {
        let x = nchw::<f32>(n, 3, 16, 16)?;
        let bytes = dropout_reserve_size(&x)?;
        ensure!(
            bytes > 0 && bytes >= last,
            "n = {n}: {bytes} bytes after {last}"
        );
        last = bytes;
        ensure!(
            dropout_reserve_size(&nchw::<f16>(n, 3, 16, 16)?)? > 0,
            "f16"
        );
    }
    let x = nchw::<f32>(2, 3, 4, 5)?;
    let need = dropout_reserve_size(&x)?;
    ensure!(check_dropout(&x, &x, need)? == need, "exact size");
    our_error(
        check_dropout(&x, &x, need - 1),
        &[format!(">= {need}").as_str()],
    )?;
    our_error(
        check_dropout(&x, &nchw(2, 3, 5, 4)?, need),
        &["y shape", "[2, 3, 4, 5]"],
    )?;
    for bad in [-0.1f32, 1.0, 1.5, f32::NAN] {
        our_error(check_dropout_probability(bad), &["probability"])?;
    }
    check_dropout_probability(0.0)?;
    check_dropout_probability(0.999)?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Shape, broadcast and length checks

fn pooling_checks() -> TestResult {
    let pool = PoolingDescriptor::new_2d(PoolingMode::Max, [3, 3], [1, 1], [2, 2])?;
    let x = nchw::<f32>(2, 3, 9, 10)?;
    // (9 + 2 - 3) / 2 + 1 = 5, (10 + 2 - 3) / 2 + 1 = 5.
    check_pooling_forward(&pool, &x, &nchw(2, 3, 5, 5)?)?;
    our_error(
        check_pooling_forward(&pool, &x, &nchw(2, 3, 5, 4)?),
        &["y shape", "[2, 3, 5, 5]", "[2, 3, 5, 4]"],
    )?;
    let y = nchw::<f32>(2, 3, 5, 5)?;
    check_pooling_backward(&pool, &y, &y, &x, &x)?;
    our_error(
        check_pooling_backward(&pool, &y, &nchw(2, 3, 5, 6)?, &x, &x),
        &["dy shape"],
    )?;
    our_error(
        check_pooling_backward(&pool, &y, &y, &x, &nchw(2, 3, 9, 9)?),
        &["dx shape", "[2, 3, 9, 10]"],
    )?;
    // A 3-d pooling of a 4-d tensor: the rank is wrong.
    let pool3 = PoolingDescriptor::new(
        PoolingMode::AverageExcludePadding,
        NanPropagation::Propagate,
        &[2, 2, 2],
        &[0, 0, 0],
        &[1, 1, 1],
    )?;
    our_error(check_pooling_forward(&pool3, &x, &x), &["rank"])?;
    // Plans: the output is packed in the input's layout.
    let plan = PoolingPlan::new(
        PoolingDescriptor::new_2d(PoolingMode::Max, [2, 2], [0, 0], [2, 2])?,
        TensorDescriptor::<f16>::nhwc(2, 3, 8, 6)?,
    )?;
    // [2, 3, 4, 3] channels-last: C 1, W 3, H 9, N 36.
    ensure!(
        plan.y_desc().shape() == [2, 3, 4, 3] && plan.y_desc().strides() == [36, 1, 9, 3],
        "nhwc output {:?}",
        plan.y_desc()
    );
    ensure!(
        TensorLayout::of(plan.y_desc()) == TensorLayout::ChannelsLast,
        "layout"
    );
    let plan = PoolingPlan::new(pool3, TensorDescriptor::<f32>::packed(&[1, 2, 4, 4, 4])?)?;
    ensure!(
        plan.y_desc().shape() == [1, 2, 3, 3, 3] && plan.y_desc().is_packed(),
        "3-d output {:?}",
        plan.y_desc()
    );
    // 5-d channels-last input.
    let x5 = packed_in_layout::<f32>(&[1, 2, 4, 4, 4], TensorLayout::ChannelsLast)?;
    // C 1, W 2, H 8, D 32, N 128.
    ensure!(x5.strides() == [128, 1, 32, 8, 2], "{x5:?}");
    let plan = PoolingPlan::new(
        PoolingDescriptor::new(
            PoolingMode::Max,
            NanPropagation::Propagate,
            &[2, 2, 2],
            &[0; 3],
            &[2; 3],
        )?,
        x5,
    )?;
    // [1, 2, 2, 2, 2] channels-last: C 1, W 2, H 4, D 8, N 16.
    ensure!(
        plan.y_desc().strides() == [16, 1, 8, 4, 2],
        "{:?}",
        plan.y_desc()
    );
    our_error(
        PoolingPlan::with_output(
            PoolingDescriptor::new_2d(PoolingMode::Max, [2, 2], [0, 0], [2, 2])?,
            nchw::<f32>(1, 1, 4, 4)?,
            nchw::<f32>(1, 1, 3, 3)?,
        ),
        &["[1, 1, 2, 2]"],
    )?;
    // A window larger than the padded input.
    our_error(
        PoolingPlan::new(
            PoolingDescriptor::new_2d(PoolingMode::Max, [5, 5], [0, 0], [1, 1])?,
            nchw::<f32>(1, 1, 4, 4)?,
        ),
        &["window"],
    )?;
    Ok(())
}

fn elementwise_checks() -> TestResult {
    let x = nchw::<f32>(2, 3, 4, 5)?;
    let xt = TensorDescriptor::<f32>::nhwc(2, 3, 4, 5)?;
    let other = nchw::<f32>(2, 3, 5, 4)?;
    check_activation_forward(&x, &xt)?;
    our_error(check_activation_forward(&x, &other), &["y shape"])?;
    check_activation_backward(&x, &x, &x, &xt)?;
    our_error(check_activation_backward(&x, &other, &x, &x), &["dy shape"])?;
    our_error(check_activation_backward(&other, &x, &x, &x), &["y shape"])?;
    our_error(check_activation_backward(&x, &x, &x, &other), &["dx shape"])?;
    check_softmax_forward(&x, &xt)?;
    our_error(check_softmax_forward(&x, &other), &["y shape"])?;
    check_softmax_backward(&x, &xt, &x)?;
    our_error(check_softmax_backward(&x, &x, &other), &["dx shape"])?;
    // Transform: layouts and element types may differ, shapes may not.
    check_transform_tensor(&x, &TensorDescriptor::<f16>::nhwc(2, 3, 4, 5)?)?;
    our_error(
        check_transform_tensor(&x, &nchw::<bf16>(2, 3, 4, 6)?),
        &["y shape", "[2, 3, 4, 6]"],
    )?;
    Ok(())
}

fn broadcast_checks() -> TestResult {
    let c = nchw::<f32>(2, 3, 4, 5)?;
    // Bias shapes: per channel, per pixel, scalar, full.
    for a in [
        [1, 3, 1, 1],
        [1, 1, 4, 5],
        [1, 1, 1, 1],
        [2, 3, 4, 5],
        [2, 1, 1, 5],
    ] {
        check_add_tensor(&nchw::<f32>(a[0], a[1], a[2], a[3])?, &c)?;
    }
    our_error(
        check_add_tensor(&nchw::<f32>(1, 2, 1, 1)?, &c),
        &["a.shape[1]", "(3)", "got 2"],
    )?;
    our_error(
        check_add_tensor(&TensorDescriptor::<f32>::packed(&[1, 3, 1])?, &c),
        &["rank"],
    )?;
    // Op tensor: a must match c, b broadcasts.
    let b = nchw::<f32>(1, 3, 1, 1)?;
    check_op_tensor(OpTensorOp::Mul, &c, Some(&b), &c)?;
    our_error(
        check_op_tensor(OpTensorOp::Mul, &b, Some(&b), &c),
        &["a shape", "[2, 3, 4, 5]", "[1, 3, 1, 1]"],
    )?;
    our_error(
        check_op_tensor(OpTensorOp::Add, &c, Some(&nchw(1, 3, 2, 1)?), &c),
        &["b.shape[2]", "(4)"],
    )?;
    our_error(
        check_op_tensor(OpTensorOp::Max, &c, None, &c),
        &["b", "Max"],
    )?;
    check_op_tensor(OpTensorOp::Sqrt, &c, None, &c)?;
    check_op_tensor(OpTensorOp::Not, &c, None, &c)?;
    // Reduce: c broadcasts onto a.
    let a = nchw::<f32>(2, 3, 4, 5)?;
    for cs in [[1, 1, 1, 1], [2, 3, 1, 1], [1, 3, 4, 5], [2, 1, 4, 1]] {
        check_reduce(&a, &nchw::<f32>(cs[0], cs[1], cs[2], cs[3])?)?;
    }
    our_error(
        check_reduce(&a, &nchw(2, 3, 2, 1)?),
        &["c.shape[2]", "(4)", "got 2"],
    )?;
    // A reduction that reduces nothing: cuDNN 9.19 answers BAD_PARAM
    // "!dims_differ" (first GPU run, H100); refused typed before it.
    our_error(
        check_reduce(&a, &nchw(2, 3, 4, 5)?),
        &["c.shape", "[2, 3, 4, 5]", "at least one dimension"],
    )?;
    let one = nchw::<f32>(1, 1, 1, 1)?;
    our_error(check_reduce(&one, &one), &["c.shape", "[1, 1, 1, 1]"])?;
    // Every pair of shapes in {1, 2, 3}^4 (6,561 pairs): accepted exactly
    // when each c dimension equals a's or is 1 and at least one differs
    // (cuDNN's rule, and its refusal of a reduction of nothing); every
    // refusal is typed and names c.
    let dims = |i: usize| [i % 3 + 1, i / 3 % 3 + 1, i / 9 % 3 + 1, i / 27 % 3 + 1];
    for ia in 0..81 {
        let sa = dims(ia);
        let a = nchw::<f32>(sa[0], sa[1], sa[2], sa[3])?;
        for ic in 0..81 {
            let scs = dims(ic);
            let c = nchw::<f32>(scs[0], scs[1], scs[2], scs[3])?;
            let want = scs.iter().zip(&sa).all(|(&x, &y)| x == y || x == 1) && scs != sa;
            match check_reduce(&a, &c) {
                Ok(()) => ensure!(want, "{sa:?} -> {scs:?} accepted"),
                Err(Error::InvalidArgument { arg, .. }) if !want && arg.starts_with("c.shape") => {}
                Err(e) => return Err(format!("{sa:?} -> {scs:?}: {e:?} (want ok: {want})").into()),
            }
        }
    }
    Ok(())
}

fn buffer_length_checks() -> TestResult {
    let x = nchw::<f32>(2, 3, 4, 5)?;
    // SAFETY: an empty view (null, length 0) is the documented empty slice.
    let empty = unsafe { DeviceSlice::<f32>::from_raw_parts(std::ptr::null(), 0) };
    our_error(DeviceTensor::new(&x, empty), &[">= 120", "got 0"])?;
    // SAFETY: as above, writable and empty.
    let empty_mut = unsafe { DeviceSliceMut::<f32>::from_raw_parts_mut(std::ptr::null_mut(), 0) };
    our_error(DeviceTensorMut::new(&x, empty_mut), &[">= 120", "got 0"])?;
    // A strided descriptor needs its span, not its element count: [1, 1, 2, 2]
    // with row stride 3 spans 1 + 1*3 + 1*1 = 5 elements.
    let gap = TensorDescriptor::<f32>::new(&[1, 1, 2, 2], &[6, 6, 3, 1])?;
    // SAFETY: as above.
    let empty = unsafe { DeviceSlice::<f32>::from_raw_parts(std::ptr::null(), 0) };
    our_error(DeviceTensor::new(&gap, empty), &[">= 5"])?;
    Ok(())
}

fn layouts() -> TestResult {
    let d = packed_in_layout::<f32>(&[2, 3, 4, 5], TensorLayout::ChannelsLast)?;
    let nhwc = TensorDescriptor::<f32>::nhwc(2, 3, 4, 5)?;
    ensure!(d.strides() == nhwc.strides(), "{d:?} vs {nhwc:?}");
    ensure!(
        TensorLayout::of(&nhwc) == TensorLayout::ChannelsLast,
        "nhwc"
    );
    ensure!(
        TensorLayout::of(&nchw::<f32>(2, 3, 4, 5)?) == TensorLayout::ChannelsFirst,
        "nchw"
    );
    // With one channel, NHWC and NCHW coincide: reported as channels-first.
    ensure!(
        TensorLayout::of(&TensorDescriptor::<f32>::nhwc(2, 1, 4, 5)?)
            == TensorLayout::ChannelsFirst,
        "c = 1"
    );
    our_error(
        packed_in_layout::<f32>(&[2, 3], TensorLayout::ChannelsLast),
        &["dims.len()"],
    )?;
    our_error(
        packed_in_layout::<f32>(&[2, 0, 3], TensorLayout::ChannelsLast),
        &["dims[1]"],
    )?;
    Ok(())
}

pub fn main() {
    run(vec![
        host("ops::op_tensor_descriptors", op_tensor_descriptors),
        host("ops::reduce_descriptors", reduce_descriptors),
        host("ops::batch_norm_descriptors", batch_norm_descriptors),
        host("ops::batch_norm_ranges", batch_norm_ranges),
        host("ops::dropout_sizes", dropout_sizes),
        host("ops::pooling_checks", pooling_checks),
        host("ops::elementwise_checks", elementwise_checks),
        host("ops::broadcast_checks", broadcast_checks),
        host("ops::buffer_length_checks", buffer_length_checks),
        host("ops::layouts", layouts),
    ])
}
