//! Capture hazards where the runtime meets other calls (issue 31 item 3):
//! device-wide synchronization, handle creation, dropout, and another
//! thread's work on a capturing stream.

use super::*;

/// Issue 31 item 3 on a device: inside a capture, a device-wide
/// synchronization, creating cuDNN / cuBLAS handles, a dropout on the
/// capturing stream, and another thread's synchronization or GEMM on the
/// capturing stream are refused (typed) and queue nothing: the capture
/// stays active. Afterwards the same dropout runs eagerly, and a device
/// synchronization while another thread captures is typed (or succeeds),
/// never an untyped runtime error.
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
    let g = stream.capture(CaptureMode::Global, |s| -> cudnn::Result<()> {
        expect_capture_unsafe("Device::synchronize", dev.synchronize()).map_err(bad)?;
        expect_capture_unsafe("dnn::Handle::new", Handle::new(s).map(|_| ())).map_err(bad)?;
        expect_capture_unsafe("blas::Handle::new", blas::Handle::new(s).map(|_| ()))
            .map_err(bad)?;
        expect_capture_unsafe(
            "dropout_forward",
            h.dropout_forward(
                &mut dropout,
                DeviceTensor::new(&d, &x)?,
                DeviceTensorMut::new(&d, &mut y)?,
                reserve.as_slice_mut(),
            ),
        )
        .map_err(bad)?;
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
    drop(g);
    ensure!(
        out.to_vec()?.iter().all(|v| v.is_nan()),
        "the refused GEMM ran"
    );
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
    ensure!(
        matches!(sync.0, Ok(()) | Err(Error::CaptureUnsafe { .. })),
        "untyped: {:?}",
        sync.0
    );
    Ok(())
}
