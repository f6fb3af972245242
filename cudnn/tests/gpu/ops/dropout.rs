//! Dropout (`cudnnDropoutForward`/`Backward`) against the reference
//! (split from `ops.rs` by job; the harness is the parent's).

use super::*;

pub(super) fn dropout<T: Float>(cx: &mut Cx) -> TestResult {
    // Like the other ops: a type cuDNN's dropout lacks (bf16 on some
    // versions) is a noted skip; f32 must work.
    let what = format!("dropout {}", T::NAME);
    cx.combo(
        &what,
        must::<T>(TensorLayout::ChannelsFirst),
        dropout_case::<T>,
    )
}

fn dropout_case<T: Float>(cx: &mut Cx) -> TestResult {
    let p = 0.3f32;
    let d = TensorDescriptor::<T>::nchw(4, 8, 8, 8)?;
    let n = d.element_count();
    // No zeros in x, so a zero in y means dropped.
    let xs: Vec<f64> = cx
        .rng
        .vec(n, 0.5, 2.0)
        .into_iter()
        .enumerate()
        .map(|(i, v)| if i % 2 == 0 { v } else { -v })
        .collect();
    let (x, xb) = upload(&d, &xs)?;
    let reserve = dropout_reserve_size(&d)?;
    let run = |cx: &mut Cx, dr: &mut Dropout| -> R<(Vec<f64>, DeviceBuffer<u8>)> {
        let mut yb = poison(&d)?;
        let mut rb = DeviceBuffer::<u8>::alloc(reserve)?;
        cx.h.dropout_forward(
            dr,
            DeviceTensor::new(&d, &xb)?,
            DeviceTensorMut::new(&d, &mut yb)?,
            rb.as_slice_mut(),
        )?;
        cx.h.stream().synchronize()?;
        Ok((download(&d, &yb)?, rb))
    };
    let forward = |cx: &mut Cx, seed: u64| -> R<(Vec<f64>, Dropout, DeviceBuffer<u8>)> {
        let mut dr = Dropout::new(&mut cx.h, p, seed)?;
        let (y, rb) = run(cx, &mut dr)?;
        Ok((y, dr, rb))
    };
    let (y1, drop1, mut rb1) = forward(cx, 42)?;
    let (y2, _, _) = forward(cx, 42)?;
    let (y3, _, _) = forward(cx, 43)?;
    ensure!(
        y1 == y2,
        "{}: the same seed must give the same mask",
        T::NAME
    );
    ensure!(y1 != y3, "{}: another seed must give another mask", T::NAME);
    // Issue 13, item 3: the state is initialised on the handle's stream; a
    // first forward on another (non-blocking) stream must wait for that, and
    // a later one back on the first stream for it. Same seed, same masks.
    let original = cx.h.stream().clone();
    let other = Stream::non_blocking()?;
    let mut dr = Dropout::new(&mut cx.h, p, 42)?;
    cx.h.set_stream(&other)?;
    let (y_other, _) = run(cx, &mut dr)?;
    // Back on the first stream: the second mask of `dr` must follow the
    // first (run on `other`), as it does on one stream.
    cx.h.set_stream(&original)?;
    ensure!(
        y_other == y1,
        "{}: the first mask on another stream differs from the same seed's",
        T::NAME
    );
    let mut again = Dropout::new(&mut cx.h, p, 42)?;
    let (_, _) = run(cx, &mut again)?;
    let (second, _) = run(cx, &mut again)?;
    let (second_back, _) = run(cx, &mut dr)?;
    ensure!(
        second_back == second,
        "{}: the second mask, after a stream change, differs",
        T::NAME
    );
    let mask = r::dropout_mask(&x, &y1)?;
    let dropped = mask.iter().filter(|k| !**k).count() as f64 / n as f64;
    ensure!(
        (0.2..0.4).contains(&dropped),
        "{}: dropped {dropped} of the elements, p = {p}",
        T::NAME
    );
    check(
        &format!("dropout {} y", T::NAME),
        &y1,
        &r::dropout_forward(&x, &mask, f64::from(p))?,
        tol::<T>(),
    )?;
    let (dy, dyb) = upload(&d, &cx.rng.vec(n, -1.0, 1.0))?;
    let mut dxb = poison(&d)?;
    cx.h.dropout_backward(
        &drop1,
        DeviceTensor::new(&d, &dyb)?,
        DeviceTensorMut::new(&d, &mut dxb)?,
        rb1.as_slice_mut(),
    )?;
    check(
        &format!("dropout {} dx", T::NAME),
        &download(&d, &dxb)?,
        &r::dropout_backward(&dy, &mask, f64::from(p))?,
        tol::<T>(),
    )?;
    drop1.destroy()?;
    Ok(())
}
