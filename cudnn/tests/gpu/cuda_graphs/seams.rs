//! Capture hazards where the runtime meets other calls (issue 31 item 3):
//! device-wide synchronization, handle creation, dropout, another
//! thread's work on a capturing stream, and `Stream::scope` next to a
//! capture.

use super::*;

/// Issue 31 item 3 on a device: inside a capture, a device-wide
/// synchronization, creating cuDNN / cuBLAS handles, a `Stream::scope` on
/// another stream (before its closure runs), and another thread's
/// synchronization or GEMM on the capturing stream are refused (typed) and
/// queue nothing: the capture stays active. A dropout on the stream of its
/// last use is captured, and the replay writes a dropout mask (every
/// element 0 or x / (1 - p), exactly); on another capturing stream it is
/// refused. Afterwards the same dropout runs eagerly, and a device
/// synchronization while another thread captures (global mode) is refused,
/// typed, as the CUDA Programming Guide says; `Ok` fails the test.
pub(crate) fn capture_hazards_at_the_seams() -> R {
    let dev = Device::new(0)?;
    let stream = Stream::new()?;
    let mut h = Handle::new(&stream)?;
    let mut hb = blas::Handle::new(&stream)?;
    hb.set_workspace(1 << 20)?;
    let mut dropout = Dropout::new(&mut h, 0.5, 7)?;
    let d = TensorDescriptor::<f32>::nchw(1, 4, 8, 8)?;
    let x = DeviceBuffer::from_host(&data(d.element_count(), 61))?;
    let mut y = nan(d.element_count())?;
    let mut reserve = DeviceBuffer::<u8>::alloc(dropout_reserve_size(&d)?)?;
    let m = DeviceBuffer::from_host(&data(4, 62))?;
    let mut out = nan(4)?;
    let l = Layout::new(Order::RowMajor, 2, 2);
    let bad = |e: libtest_mimic::Failed| Error::invalid("test", "", format!("{e:?}"));
    let side = Stream::non_blocking()?;
    let mut host = cudnn::runtime::HostBuffer::<f32>::new(4)?;
    let mut scope_ran = false;
    let g = stream.capture(CaptureMode::Global, |s| -> cudnn::Result<()> {
        expect_capture_unsafe("Device::synchronize", dev.synchronize()).map_err(bad)?;
        expect_capture_unsafe("dnn::Handle::new", Handle::new(s).map(|_| ())).map_err(bad)?;
        expect_capture_unsafe("blas::Handle::new", blas::Handle::new(s).map(|_| ()))
            .map_err(bad)?;
        // Review finding 1A: the scope's copy would run for real on the
        // non-capturing stream while no wait for it could succeed.
        let scoped = side.scope(|a| {
            scope_ran = true;
            a.download(&m, &mut host[..])
        });
        expect_capture_unsafe("Stream::scope", scoped).map_err(bad)?;
        // On the stream of its last use (its initialisation on `stream`),
        // the dropout is captured.
        h.dropout_forward(
            &mut dropout,
            DeviceTensor::new(&d, &x)?,
            DeviceTensorMut::new(&d, &mut y)?,
            reserve.as_slice_mut(),
        )?;
        let (sync, gemm) = std::thread::scope(|t| {
            let hb = &mut hb; // Send, not Sync: moved to the thread by `&mut`
            let (m, out) = (&m, &mut out);
            let th = t.spawn(move || {
                let sync = s.synchronize();
                let gemm = hb.gemm(
                    1.0f32,
                    Matrix::new(m, l),
                    Matrix::new(m, l),
                    0.0,
                    MatrixMut::new(out, l),
                    ComputeType::F32Pedantic,
                );
                (sync, gemm)
            });
            th.join()
        })
        .map_err(|_| Error::invalid("thread", "must not panic", "panicked"))?;
        expect_capture_unsafe("another thread's synchronize", sync).map_err(bad)?;
        expect_capture_unsafe("another thread's GEMM", gemm).map_err(bad)?;
        ensure_active(s)
    })?;
    ensure!(!scope_ran, "the refused scope's closure ran");
    ensure!(
        out.to_vec()?.iter().all(|v| v.is_nan()),
        "the refused GEMM ran"
    );
    // The replay writes a dropout mask: every element 0 or 2x (p = 0.5;
    // x is a multiple of 1/64, so 2x is exact), some of each.
    let exec = instantiate(&g)?;
    y.copy_from_host(&vec![f32::NAN; d.element_count()])?;
    replay(&exec, &stream, 1)?;
    stream.synchronize()?;
    let xs = data(d.element_count(), 61);
    let ys = y.to_vec()?;
    let kept = ys
        .iter()
        .zip(&xs)
        .filter(|(y, x)| **y == 2.0 * **x && **x != 0.0)
        .count();
    for (i, (yv, xv)) in ys.iter().zip(&xs).enumerate() {
        ensure!(
            *yv == 0.0 || *yv == 2.0 * *xv,
            "replayed dropout element {i}: {yv} is neither 0 nor 2 * {xv}"
        );
    }
    ensure!(
        kept > 0 && kept < ys.len(),
        "replayed dropout kept {kept} of {} elements",
        ys.len()
    );
    drop(exec);
    drop(g);
    // On another capturing stream, the dropout is refused, typed.
    let stream2 = Stream::new()?;
    let mut h2 = Handle::new(&stream2)?;
    let refused = stream2.capture(CaptureMode::Global, |_| -> cudnn::Result<()> {
        let r = h2.dropout_forward(
            &mut dropout,
            DeviceTensor::new(&d, &x)?,
            DeviceTensorMut::new(&d, &mut y)?,
            reserve.as_slice_mut(),
        );
        expect_capture_unsafe("dropout_forward on another stream", r).map_err(bad)?;
        ensure_active(&stream2)
    })?;
    drop(refused);
    // Eagerly, after the capture, the same dropout runs.
    h.dropout_forward(
        &mut dropout,
        DeviceTensor::new(&d, &x)?,
        DeviceTensorMut::new(&d, &mut y)?,
        reserve.as_slice_mut(),
    )?;
    stream.synchronize()?;
    ensure!(
        y.to_vec()?.iter().all(|v| v.is_finite()),
        "dropout output after the capture"
    );
    // A device synchronization while another thread captures.
    let other = Stream::new()?;
    let begun = std::sync::Barrier::new(2);
    let done = std::sync::Barrier::new(2);
    let sync = std::thread::scope(|t| {
        let th = t.spawn(|| {
            other.capture(CaptureMode::Global, |_| -> cudnn::Result<()> {
                begun.wait();
                done.wait();
                Ok(())
            })
        });
        begun.wait();
        let r = dev.synchronize();
        done.wait();
        let captured = th.join();
        (r, captured.is_ok())
    });
    ensure!(sync.1, "the capturing thread panicked");
    eprintln!(
        "  Device::synchronize during another thread's capture: {:?}",
        sync.0
    );
    // Review finding 8: the Guide prohibits synchronizing calls from any
    // thread during a global-mode capture; `Ok` means the device-wide wait
    // ran against an open capture.
    ensure!(
        matches!(sync.0, Err(Error::CaptureUnsafe { .. })),
        "Device::synchronize during another thread's global capture must be refused, typed: {:?}",
        sync.0
    );
    scope_next_to_another_threads_capture()
}

/// Review finding 1B on a device: while another thread holds a global-mode
/// capture of another stream open, a `Stream::scope` ends (its wait is made
/// in relaxed capture mode, so it is neither refused nor does it
/// invalidate that capture): the scope returns `Ok` with the data (the
/// host's values, bit for bit), and the other capture ends cleanly.
fn scope_next_to_another_threads_capture() -> R {
    let n = 1 << 20;
    let want = data(n, 63);
    let dev_buf = DeviceBuffer::from_host(&want)?;
    let mut host = cudnn::runtime::HostBuffer::<f32>::new(n)?;
    let s1 = Stream::non_blocking()?;
    let other = Stream::non_blocking()?;
    let begun = std::sync::Barrier::new(2);
    let done = std::sync::Barrier::new(2);
    let (scoped, captured) = std::thread::scope(|t| {
        let th = t.spawn(|| {
            other
                .capture(CaptureMode::Global, |_| -> cudnn::Result<()> {
                    begun.wait();
                    done.wait();
                    Ok(())
                })
                .map(drop)
        });
        begun.wait();
        let r = s1.scope(|a| a.download(&dev_buf, &mut host[..]));
        done.wait();
        (r, th.join())
    });
    eprintln!("  Stream::scope during another thread's capture: {scoped:?}");
    scoped?;
    match captured {
        Ok(Ok(())) => {}
        other => return Err(format!("the other thread's capture: {other:?}").into()),
    }
    same(
        "scope download during another thread's capture",
        &host[..],
        &want,
    )
}
