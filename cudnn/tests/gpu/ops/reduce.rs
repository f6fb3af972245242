//! Reduction (`cudnnReduceTensor`) against the reference, every op, with
//! and without indices, in both layouts (split from `ops.rs` by job; the
//! harness is the parent's).

use super::*;

/// The value of `a` (logical, packed, shape `a_shape`) at flattened index
/// `k` of the reduced sub-tensor of output element `ci`.
pub(super) fn reduced_value(
    a: &[f64],
    a_shape: &[usize],
    c_shape: &[usize],
    ci: usize,
    k: usize,
) -> Option<f64> {
    let rank = a_shape.len();
    let (mut ci, mut k) = (ci, k);
    let mut idx = vec![0usize; rank];
    for d in (0..rank).rev() {
        if c_shape[d] == 1 {
            idx[d] = k % a_shape[d];
            k /= a_shape[d];
        } else {
            idx[d] = ci % c_shape[d];
        }
        ci /= c_shape[d];
    }
    if k != 0 {
        return None;
    }
    let st = r::packed_strides(a_shape);
    a.get(idx.iter().zip(&st).map(|(i, s)| i * s).sum::<usize>())
        .copied()
}

/// The dimensions a reduction of `a_shape` to `c_shape` reduces (size 1 in
/// `c`, larger in `a`).
pub(super) fn reduced_dims(a_shape: &[usize], c_shape: &[usize]) -> Vec<usize> {
    (0..a_shape.len())
        .filter(|&d| c_shape[d] == 1 && a_shape[d] > 1)
        .collect()
}

pub(super) fn reduction<T: Float>(cx: &mut Cx) -> TestResult {
    let shape = [2, 3, 4, 5];
    for layout in LAYOUTS {
        // Several reduced dimensions and one (H; C, the innermost in NHWC).
        // None reduced is refused typed before cuDNN (cuDNN 9.19 answers
        // BAD_PARAM "!dims_differ"; checked below).
        for cshape in [
            [1, 3, 1, 1],
            [1, 1, 1, 1],
            [2, 1, 4, 1],
            [2, 3, 1, 5],
            [2, 1, 4, 5],
        ] {
            for op in ReduceOp::ALL {
                for indices in [false, true] {
                    if indices && !op.has_indices() {
                        continue;
                    }
                    let what = format!(
                        "reduce {} {layout:?} {op:?} to {cshape:?} indices {indices}",
                        T::NAME
                    );
                    cx.combo(&what, must::<T>(layout), |cx| {
                        let ad = packed_in_layout::<T>(&shape, layout)?;
                        let cd = TensorDescriptor::<T>::packed(&cshape)?;
                        let n = ad.element_count();
                        let vals = match op {
                            ReduceOp::Mul => cx.rng.vec(n, 0.95, 1.05),
                            ReduceOp::MulNoZeros => cx
                                .rng
                                .vec(n, 0.95, 1.05)
                                .into_iter()
                                .enumerate()
                                .map(|(i, v)| if i % 7 == 3 { 0.0 } else { v })
                                .collect(),
                            _ => cx.rng.vec(n, -2.0, 2.0),
                        };
                        let (a, ab) = upload(&ad, &vals)?;
                        let (want, _) = r::reduce(op, &a, &shape, &cshape)?;
                        let desc = ReduceTensorDescriptor::<T>::new(op, NanPropagation::Propagate, indices)?;
                        let plan = ReducePlan::new(&cx.h, desc, same_desc(&ad)?, same_desc(&cd)?)?;
                        let mut cb = poison(&cd)?;
                        let mut ib = DeviceBuffer::<i32>::from_host(&vec![-1; plan.indices_len()])?;
                        let ind = indices.then(|| ib.as_slice_mut());
                        plan.run(&mut cx.h, sc::<T>(1.0), &ab, sc::<T>(0.0), &mut cb, ind)?;
                        let got = download(&cd, &cb)?;
                        check(&what, &got, &want, tol::<T>())?;
                        if indices {
                            // cuDNN documents the flattened index's order
                            // only where it is unambiguous: one reduced
                            // dimension (the index along it) or none (0).
                            // Over several, only its range is checked; the
                            // values were compared above.
                            let reduced = reduced_dims(&shape, &cshape);
                            let span: usize = reduced.iter().map(|&d| shape[d]).product();
                            let ind = ib.to_vec()?;
                            for (ci, &w) in want.iter().enumerate() {
                                let k = usize::try_from(ind[ci]).map_err(|_| format!("{what}: index {}", ind[ci]))?;
                                ensure!(k < span, "{what}: index {k} of element {ci} is not below {span}");
                                if reduced.len() <= 1 {
                                    let v = reduced_value(&a, &shape, &cshape, ci, k)
                                        .ok_or_else(|| format!("{what}: index {k} of element {ci} out of range"))?;
                                    ensure!(v == w, "{what}: index {k} of element {ci} points at {v}, the result is {w}");
                                }
                            }
                        }
                        // The same through the handle, blended (sum only: alpha
                        // scales the result).
                        if op == ReduceOp::Add {
                            let (c0, mut cb) = upload(&cd, &cx.rng.vec(cd.element_count(), -1.0, 1.0))?;
                            cx.h.reduce_tensor(
                                plan.reduce_desc(),
                                sc::<T>(0.5),
                                DeviceTensor::new(&ad, &ab)?,
                                sc::<T>(0.25),
                                DeviceTensorMut::new(&cd, &mut cb)?,
                                None,
                            )?;
                            check(
                                &format!("{what} blended"),
                                &download(&cd, &cb)?,
                                &r::blend(0.5, &want, 0.25, &c0)?,
                                tol::<T>(),
                            )?;
                        }
                        Ok(())
                    })?;
                }
            }
        }
    }
    // Nothing reduced: refused typed, before cuDNN (which answers BAD_PARAM
    // "!dims_differ", cuDNN 9.19).
    let ad = TensorDescriptor::<T>::packed(&shape)?;
    let desc = ReduceTensorDescriptor::<T>::new(ReduceOp::Add, NanPropagation::Propagate, false)?;
    match ReducePlan::new(&cx.h, desc, same_desc(&ad)?, same_desc(&ad)?) {
        Err(Error::InvalidArgument { arg, .. }) if arg == "c.shape" => {}
        other => {
            return Err(format!(
                "reduce {} to its own shape: want InvalidArgument c.shape, got {other:?}",
                T::NAME
            )
            .into());
        }
    }
    Ok(())
}
