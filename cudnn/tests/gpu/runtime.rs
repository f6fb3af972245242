//! Runtime and handles on a real device (gpu tier; skipped visibly without
//! one, a failure under `CUDNN_RS_REQUIRE_GPU=1`).

use crate::support;

use std::time::Duration;

use cudnn::runtime::{
    Device, DeviceBuffer, DeviceSlice, DeviceSliceMut, Event, EventFlags, HostBuffer, Stream,
    StreamFlags,
};
use cudnn::sys::cudart::cudaDeviceAttr;
use cudnn::{DataType, Error, blas, dnn};
use half::{bf16, f16};
use support::*;

/// Deterministic, exactly representable test values per dtype.
trait Sample: DataType + PartialEq {
    fn at(i: usize) -> Self;
}
impl Sample for f32 {
    fn at(i: usize) -> Self {
        (i % 4093) as f32 - 2000.5
    }
}
impl Sample for f64 {
    fn at(i: usize) -> Self {
        i as f64 * 0.25 - 1e6
    }
}
impl Sample for f16 {
    fn at(i: usize) -> Self {
        f16::from_f32((i % 2048) as f32 - 1024.0)
    }
}
impl Sample for bf16 {
    fn at(i: usize) -> Self {
        bf16::from_f32((i % 256) as f32 - 128.0)
    }
}
impl Sample for i8 {
    fn at(i: usize) -> Self {
        (i % 256) as u8 as i8
    }
}
impl Sample for u8 {
    fn at(i: usize) -> Self {
        (i * 7 % 256) as u8
    }
}
impl Sample for i32 {
    fn at(i: usize) -> Self {
        (i as i32).wrapping_mul(-7919)
    }
}

const LENGTHS: [usize; 4] = [0, 1, 1023, 1 << 24];

fn first_difference<T: Sample>(got: &[T], want: &[T]) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!("length {} != {}", got.len(), want.len()));
    }
    got.iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .map(|i| format!("element {i}: got {:?}, want {:?}", got[i], want[i]))
}

fn round_trip<T: Sample>() -> TestResult {
    Device::new(0)?;
    for len in LENGTHS {
        let host: Vec<T> = (0..len).map(T::at).collect();
        let dev = DeviceBuffer::from_host(&host)?;
        ensure!(
            dev.len() == len && dev.byte_len() == len * T::SIZE,
            "{} len {len}: {dev:?}",
            T::NAME
        );
        if let Some(d) = first_difference(&dev.to_vec()?, &host) {
            return Err(format!("{} len {len}: to_vec: {d}", T::NAME).into());
        }
        let mut back = vec![T::default(); len];
        dev.copy_to_host(&mut back)?;
        if let Some(d) = first_difference(&back, &host) {
            return Err(format!("{} len {len}: copy_to_host: {d}", T::NAME).into());
        }
        // device -> device, synchronous and stream-ordered
        let clone = dev.try_clone()?;
        let mut other = DeviceBuffer::<T>::alloc(len)?;
        let stream = Stream::new()?;
        other.copy_from_device_async(&clone, &stream)?;
        stream.synchronize()?;
        if let Some(d) = first_difference(&other.to_vec()?, &host) {
            return Err(format!("{} len {len}: device to device: {d}", T::NAME).into());
        }
        // zeroing
        other.memset(0)?;
        ensure!(
            other.to_vec()?.iter().all(|v| *v == T::default()),
            "{} len {len}: memset(0)",
            T::NAME
        );
        let z = DeviceBuffer::<T>::zeroed(len)?;
        ensure!(
            z.to_vec()?.iter().all(|v| *v == T::default()),
            "{} len {len}: zeroed",
            T::NAME
        );
        other.copy_from_host(&host)?;
        if let Some(d) = first_difference(&other.to_vec()?, &host) {
            return Err(format!("{} len {len}: copy_from_host: {d}", T::NAME).into());
        }
        clone.destroy()?;
        other.destroy()?;
    }
    Ok(())
}

fn device_info() -> TestResult {
    let n = Device::count()?;
    ensure!(n >= 1, "count {n}");
    let dev = Device::new(0)?;
    ensure!(Device::current()? == dev, "Device::new makes it current");
    let name = dev.name()?;
    let (major, minor) = dev.compute_capability()?;
    let sms = dev.sm_count()?;
    let mem = dev.memory_info()?;
    eprintln!(
        "device 0: {name}, sm_{major}{minor}, {sms} SMs, {} / {} MiB free, pools: {}",
        mem.free >> 20,
        mem.total >> 20,
        dev.supports_memory_pools()?
    );
    ensure!(!name.is_empty(), "empty name");
    ensure!(major >= 5, "compute capability {major}.{minor}");
    ensure!(sms > 0, "SM count {sms}");
    ensure!(mem.total > 0 && mem.free <= mem.total, "{mem:?}");
    ensure!(
        dev.attribute(cudaDeviceAttr::cudaDevAttrWarpSize)? == 32,
        "warp size"
    );
    dev.synchronize()?;
    let e = Device::new(n)
        .err()
        .ok_or("an out-of-range ordinal must fail")?;
    let msg = e.to_string();
    ensure!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
    ensure!(
        msg.contains(&n.to_string()) && msg.contains("ordinal"),
        "must name the ordinal and count: {msg}"
    );
    Ok(())
}

fn memset_patterns() -> TestResult {
    Device::new(0)?;
    let mut b = DeviceBuffer::<u8>::alloc(1001)?;
    b.memset(0xAB)?;
    ensure!(b.to_vec()?.iter().all(|&v| v == 0xAB), "u8 memset");
    let mut i = DeviceBuffer::<i32>::alloc(77)?;
    i.memset(0xFF)?;
    ensure!(
        i.to_vec()?.iter().all(|&v| v == -1),
        "i32 memset 0xFF is -1"
    );
    let stream = Stream::non_blocking()?;
    i.memset_async(0, &stream)?;
    stream.synchronize()?;
    ensure!(i.to_vec()?.iter().all(|&v| v == 0), "memset_async");
    let mut part = i.slice_mut(10..20)?;
    part.memset(0x01)?;
    let v = i.to_vec()?;
    ensure!(
        v[..10].iter().all(|&x| x == 0) && v[20..].iter().all(|&x| x == 0),
        "memset of a sub-range stays inside it"
    );
    ensure!(
        v[10..20].iter().all(|&x| x == 0x0101_0101),
        "sub-range memset"
    );
    Ok(())
}

fn views_and_subranges() -> TestResult {
    Device::new(0)?;
    let mut b = DeviceBuffer::<f32>::zeroed(10)?;
    b.slice_mut(2..5)?.copy_from_host(&[1.0, 2.0, 3.0])?;
    ensure!(
        b.slice(2..5)?.to_vec()? == [1.0, 2.0, 3.0],
        "sub-range round trip"
    );
    ensure!(
        b.to_vec()? == [0.0, 0.0, 1.0, 2.0, 3.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        "whole buffer"
    );
    ensure!(
        b.slice(..)?.len() == 10 && b.slice(7..)?.len() == 3 && b.slice(..=3)?.len() == 4,
        "range forms"
    );

    // copy between disjoint halves of one buffer
    let (mut lo, hi) = b.as_slice_mut().split_at_mut(5)?;
    let mut hi = hi;
    hi.slice_mut(0..3)?.copy_from_device(lo.slice(2..5)?)?;
    lo.memset(0)?;
    ensure!(
        b.to_vec()? == [0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 0.0, 0.0],
        "copy between split halves"
    );

    // errors, not panics
    let e = b.slice(8..11).err().ok_or("out of range")?;
    ensure!(
        e.to_string().contains("8..11") && e.to_string().contains("0..10"),
        "{e}"
    );
    let e = b
        .slice_mut(2..5)?
        .copy_from_host(&[1.0])
        .err()
        .ok_or("length mismatch")?;
    ensure!(
        e.to_string().contains("expected 3") && e.to_string().contains("got 1"),
        "{e}"
    );
    let src = DeviceBuffer::<f32>::zeroed(4)?;
    let e = b
        .copy_from_device(&src)
        .err()
        .ok_or("device length mismatch")?;
    ensure!(
        e.to_string().contains("expected 10") && e.to_string().contains("got 4"),
        "{e}"
    );

    // views over memory someone else owns
    let mut owner = DeviceBuffer::<i32>::from_host(&[5, 6, 7, 8])?;
    let raw = owner.as_mut_ptr();
    // SAFETY: `raw` points to 4 i32 of live device memory owned by `owner`, which
    // is not used otherwise while the views exist.
    let view = unsafe { DeviceSlice::from_raw_parts(raw.cast_const(), 4) };
    ensure!(view.slice(1..3)?.to_vec()? == [6, 7], "raw view");
    // SAFETY: as above; the read-only view is no longer used.
    let mut view_mut = unsafe { DeviceSliceMut::from_raw_parts_mut(raw, 4) };
    view_mut.copy_from_host(&[1, 2, 3, 4])?;
    ensure!(owner.to_vec()? == [1, 2, 3, 4], "raw mutable view");

    // ownership hand-over
    let (p, n) = owner.into_raw();
    // SAFETY: `p`/`n` came from `into_raw` of a cudaMalloc'd buffer.
    let owner = unsafe { DeviceBuffer::from_raw(p, n) };
    ensure!(owner.to_vec()? == [1, 2, 3, 4], "from_raw(into_raw)");
    Ok(())
}

fn pinned_async_copies() -> TestResult {
    Device::new(0)?;
    let stream = Stream::non_blocking()?;
    for len in [0usize, 1, 1023, 1 << 22] {
        let input = HostBuffer::from_slice(&(0..len).map(f32::at).collect::<Vec<_>>())?;
        let mut output = HostBuffer::<f32>::new(len)?;
        let mut dev = DeviceBuffer::<f32>::alloc(len)?;
        let mut dev2 = DeviceBuffer::<f32>::alloc(len)?;
        stream.scope(|s| {
            s.upload(&input, &mut dev)?;
            dev2.copy_from_device_async(&dev, s.stream())?;
            s.download(&dev2, &mut output)
        })?;
        if let Some(d) = first_difference(&output, &input) {
            return Err(format!("len {len}: pinned round trip: {d}").into());
        }
    }
    // sub-ranges of pinned buffers and pageable slices
    let input = HostBuffer::from_slice(&[1i32, 2, 3, 4, 5, 6])?;
    let mut dev = DeviceBuffer::<i32>::zeroed(3)?;
    let mut pageable = vec![0i32; 3];
    stream.scope(|s| {
        s.upload(&input[3..], &mut dev)?;
        s.download(&dev, &mut pageable)
    })?;
    ensure!(pageable == [4, 5, 6], "{pageable:?}");
    // a failing scope still synchronizes and reports the first error
    let mut out = HostBuffer::<i32>::new(2)?;
    let e = stream
        .scope(|s| {
            s.upload(&input[..3], &mut dev)?;
            s.download(&dev, &mut out)
        })
        .err()
        .ok_or("length mismatch inside a scope")?;
    ensure!(
        e.to_string().contains("expected 3") && e.to_string().contains("got 2"),
        "{e}"
    );
    ensure!(stream.query()?, "the stream is idle after scope returns");
    Ok(())
}

fn stream_ordered_allocation() -> TestResult {
    let dev = Device::new(0)?;
    let stream = dev.create_non_blocking_stream()?;
    if !dev.supports_memory_pools()? {
        // SAFETY: fails without memory pools; nothing is allocated.
        let e = unsafe { DeviceBuffer::<f32>::alloc_async(16, &stream) }
            .err()
            .ok_or("alloc_async without pools")?;
        ensure!(matches!(e, Error::Unsupported { .. }), "{e:?}");
        eprintln!("note: device has no memory pools; checked the Unsupported error only");
        return Ok(());
    }
    let host: Vec<f64> = (0..4097).map(f64::at).collect();
    // SAFETY: `a` is only used on `stream` (the copy below) and by
    // synchronous calls after `stream.synchronize()`.
    let mut a = unsafe { DeviceBuffer::<f64>::zeroed_async(host.len(), &stream) }?;
    ensure!(a.is_stream_ordered(), "{a:?}");
    let src = DeviceBuffer::from_host(&host)?;
    a.copy_from_device_async(&src, &stream)?;
    stream.synchronize()?;
    ensure!(a.to_vec()? == host, "stream-ordered buffer contents");
    a.destroy()?;
    let z = stream.alloc_zeroed::<i32>(1000)?;
    stream.synchronize()?;
    ensure!(z.to_vec()?.iter().all(|&v| v == 0), "Stream::alloc_zeroed");
    drop(z);
    drop(stream);
    Ok(())
}

fn events_and_streams() -> TestResult {
    Device::new(0)?;
    let stream = Stream::with_flags(StreamFlags::NON_BLOCKING)?;
    let (start, end) = (Event::new()?, Event::new()?);
    let mut big = DeviceBuffer::<u8>::alloc(256 << 20)?;
    start.record(&stream)?;
    for i in 0..8u8 {
        big.memset_async(i, &stream)?;
    }
    end.record(&stream)?;
    end.synchronize()?;
    ensure!(
        end.query()? && start.query()?,
        "events complete after synchronize"
    );
    let ms = Event::elapsed_ms(&start, &end)?;
    eprintln!("8 x memset of 256 MiB: {ms:.3} ms");
    ensure!(ms >= 0.0 && ms.is_finite(), "elapsed {ms}");

    let untimed = Event::with_flags(EventFlags::DISABLE_TIMING | EventFlags::BLOCKING_SYNC)?;
    untimed.record(&stream)?;
    untimed.synchronize()?;
    let e = Event::elapsed_ms(&start, &untimed)
        .err()
        .ok_or("untimed events cannot be timed")?;
    ensure!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");

    // cross-stream ordering
    let other = Stream::new()?;
    other.wait_event(&end)?;
    other.wait_for(&stream)?;
    other.synchronize()?;
    ensure!(other.query()?, "idle");

    // special and borrowed streams
    Stream::legacy().synchronize()?;
    Stream::per_thread().synchronize()?;
    let owned = Stream::new()?;
    {
        // SAFETY: `owned` outlives the borrowed wrapper and its clones.
        let borrowed = unsafe { Stream::from_raw(owned.as_raw()) };
        ensure!(
            !borrowed.is_owned() && borrowed == owned,
            "from_raw wraps the same stream"
        );
        borrowed.synchronize()?;
    }
    owned.synchronize()?; // still alive: the borrowed wrapper did not destroy it
    let clone = owned.clone();
    owned.destroy()?; // not the last clone: nothing destroyed yet
    clone.synchronize()?;
    clone.destroy()?;
    end.destroy()?;
    Ok(())
}

fn dnn_handle() -> TestResult {
    Device::new(0)?;
    let stream = Stream::non_blocking()?;
    let mut h = dnn::Handle::new(&stream)?;
    ensure!(*h.stream() == stream, "bound to its stream");
    ensure!(!h.as_raw().is_null(), "raw handle");
    h.reserve_workspace(0)?;
    ensure!(h.workspace_size() == 0, "nothing allocated for 0 bytes");
    h.reserve_workspace(1 << 20)?;
    ensure!(h.workspace_size() == 1 << 20, "grown to 1 MiB");
    h.reserve_workspace(1000)?;
    ensure!(h.workspace_size() == 1 << 20, "no shrink");
    h.reserve_workspace(16 << 20)?;
    ensure!(h.workspace_size() == 16 << 20, "grown");
    let other = Stream::new()?;
    h.set_stream(&other)?;
    ensure!(*h.stream() == other, "switched");
    h.reserve_workspace(32 << 20)?;
    ensure!(h.workspace_size() == 32 << 20, "grown after the switch");
    other.synchronize()?;
    h.release_workspace()?;
    ensure!(h.workspace_size() == 0, "released");
    // a handle moves to another thread (Send)
    let h = std::thread::spawn(move || -> Result<dnn::Handle, Error> {
        Device::new(0)?;
        let mut h = h;
        h.reserve_workspace(4096)?;
        Ok(h)
    })
    .join()
    .map_err(|_| "thread panicked")??;
    h.destroy()?;
    drop(stream); // the handle's clone kept it alive; now gone
    Ok(())
}

fn blas_handle() -> TestResult {
    let dev = Device::new(0)?;
    let stream = Stream::non_blocking()?;
    let mut h = blas::Handle::new(&stream)?;
    ensure!(h.math_mode() == blas::MathMode::Default, "default math");
    h.set_math_mode(blas::MathMode::Tf32)?;
    h.set_math_mode(blas::MathMode::Pedantic)?;
    h.set_math_mode(blas::MathMode::Default)?;
    let (major, _) = dev.compute_capability()?;
    let bytes = blas::Handle::recommended_workspace_size(major);
    h.set_workspace(bytes)?;
    ensure!(h.workspace_size() == bytes, "workspace set");
    h.set_workspace(2 * bytes)?;
    ensure!(h.workspace_size() == 2 * bytes, "workspace grown");
    let other = Stream::new()?;
    h.set_stream(&other)?;
    ensure!(*h.stream() == other, "switched");
    h.set_workspace(0)?;
    ensure!(h.workspace_size() == 0, "back to the default pool");
    ensure!(h.device() == dev, "the handle records its device");
    // What cuBLAS itself holds: the math mode with reduced-precision
    // reductions disallowed by default, and the stream after the workspace
    // was dropped (cublasSetStream is what puts the default pool back).
    let api = cudnn::sys::cublas::load().map_err(|e| format!("{e}"))?;
    let raw_math = |h: &blas::Handle| -> Result<u32, String> {
        let mut m = cudnn::sys::cublas::cublasMath_t(0);
        // SAFETY: the handle is live; `m` is a valid out-pointer.
        let st = unsafe { api.cublasGetMathMode(h.as_raw(), &mut m) }.map_err(|e| e.to_string())?;
        ensure!(
            st == cudnn::sys::cublas::cublasStatus_t::CUBLAS_STATUS_SUCCESS,
            "{st:?}"
        );
        Ok(m.0)
    };
    let flag = cudnn::sys::cublas::cublasMath_t::CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION.0;
    ensure!(
        raw_math(&h)? & flag != 0,
        "disallowed by default: {:#x}",
        raw_math(&h)?
    );
    h.set_reduced_precision_reduction(true)?;
    ensure!(raw_math(&h)? & flag == 0, "allowed on request");
    h.set_math_mode(blas::MathMode::Pedantic)?;
    ensure!(
        h.reduced_precision_reduction(),
        "the setting survives a mode change"
    );
    h.set_reduced_precision_reduction(false)?;
    h.set_math_mode(blas::MathMode::Default)?;
    ensure!(raw_math(&h)? & flag != 0, "disallowed again");
    let mut s_raw = std::ptr::null_mut();
    // SAFETY: the handle is live; `s_raw` is a valid out-pointer.
    let st =
        unsafe { api.cublasGetStream_v2(h.as_raw(), &mut s_raw) }.map_err(|e| e.to_string())?;
    ensure!(
        st == cudnn::sys::cublas::cublasStatus_t::CUBLAS_STATUS_SUCCESS,
        "{st:?}"
    );
    ensure!(
        s_raw == other.as_raw(),
        "still on the stream after set_workspace(0)"
    );
    // A GEMM runs, and is right, on the default pool after set_workspace(0),
    // and after a workspace was dropped through into_raw.
    gemm_check(&h, "after set_workspace(0)")?;
    h.set_workspace(bytes)?;
    gemm_check(&h, "with a user workspace")?;
    // The handle was moved to `other` by set_stream above (the first GPU
    // run compared with the creation stream, a mistake of the test): into_raw
    // returns `other`, and cuBLAS itself (cublasGetStream) says the same.
    let (raw, bound) = h.into_raw();
    ensure!(
        bound == other && bound != stream,
        "into_raw returns the stream the handle is bound to (set_stream's)"
    );
    let mut s_raw = std::ptr::null_mut();
    // SAFETY: `raw` is a live handle we own; `s_raw` is a valid out-pointer.
    let st = unsafe { api.cublasGetStream_v2(raw, &mut s_raw) }.map_err(|e| e.to_string())?;
    ensure!(
        st == cudnn::sys::cublas::cublasStatus_t::CUBLAS_STATUS_SUCCESS,
        "{st:?}"
    );
    ensure!(
        s_raw == other.as_raw(),
        "cuBLAS holds the stream into_raw returned"
    );
    // SAFETY: `raw` came from `into_raw`, so we own it and nobody else uses it.
    let h = unsafe { blas::Handle::from_raw(raw, &stream) }?;
    gemm_check(&h, "after into_raw / from_raw")?;
    let h2 = blas::Handle::new(&Stream::legacy())?;
    let (raw, bound) = h2.into_raw();
    ensure!(
        bound == Stream::legacy(),
        "h2 was bound to the legacy stream"
    );
    // SAFETY: `raw` came from `into_raw`, so we own it and nobody else uses it.
    let h2 = unsafe { blas::Handle::from_raw(raw, &stream) }?;
    h2.destroy()?;
    h.destroy()?;
    Ok(())
}

/// A 64 x 64 x 4096 f32 GEMM of small integers (exact in f32) against the
/// host product.
fn gemm_check(h: &blas::Handle, when: &str) -> TestResult {
    use cudnn::blas::{ComputeType, Layout, Matrix, MatrixMut};
    let (m, n, k) = (64usize, 64usize, 4096usize);
    let a: Vec<f32> = (0..m * k).map(|i| ((i * 7) % 5) as f32 - 2.0).collect();
    let b: Vec<f32> = (0..k * n).map(|i| ((i * 3) % 7) as f32 - 3.0).collect();
    let mut want = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            want[i * n + j] = (0..k)
                .map(|p| f64::from(a[i * k + p]) * f64::from(b[p * n + j]))
                .sum();
        }
    }
    let (da, db) = (DeviceBuffer::from_host(&a)?, DeviceBuffer::from_host(&b)?);
    let mut dc = DeviceBuffer::<f32>::zeroed(m * n)?;
    h.gemm(
        1.0,
        Matrix::new(&da, Layout::row_major(m, k)),
        Matrix::new(&db, Layout::row_major(k, n)),
        0.0,
        MatrixMut::new(&mut dc, Layout::row_major(m, n)),
        ComputeType::Default,
    )?;
    h.stream().synchronize()?;
    let got = dc.to_vec()?;
    ensure!(
        got.iter().zip(&want).all(|(g, w)| f64::from(*g) == *w),
        "{when}: GEMM differs from the host product"
    );
    Ok(())
}

fn device_guard_and_ordered_frees() -> TestResult {
    let dev = Device::new(0)?;
    {
        let g = dev.guard()?;
        ensure!(!g.switched(), "already current: nothing to switch");
    }
    ensure!(Device::current()? == dev, "still current");
    if Device::count()? >= 2 {
        let d1 = Device::new(1)?;
        dev.set_current()?;
        {
            let g = d1.guard()?;
            ensure!(g.switched() && Device::current()? == d1, "switched to 1");
        }
        ensure!(Device::current()? == dev, "restored to 0");
        // A handle made on device 0 grows its workspace there with 1 current.
        let stream = Stream::new()?;
        let mut h = dnn::Handle::new(&stream)?;
        d1.set_current()?;
        h.reserve_workspace(1 << 20)?;
        ensure!(
            Device::current()? == d1,
            "the guard restored the caller's device"
        );
        dev.set_current()?;
        ensure!(h.device() == dev, "handle device");
        h.destroy()?;
    } else {
        eprintln!("note: one device; the cross-device guard and workspace checks need two");
    }
    // A stream-ordered buffer on a non-blocking stream, written with a
    // synchronous copy at once: the buffer waits for its allocation first.
    let stream = dev.create_non_blocking_stream()?;
    if dev.supports_memory_pools()? {
        let host: Vec<f32> = (0..1 << 16).map(|i| i as f32).collect();
        for _ in 0..8 {
            // SAFETY: used by this thread's synchronous calls (which wait for
            // the allocation) and freed on its own stream.
            let mut a = unsafe { DeviceBuffer::<f32>::alloc_async(host.len(), &stream) }?;
            a.copy_from_host(&host)?;
            ensure!(
                a.to_vec()? == host,
                "stream-ordered buffer written synchronously"
            );
            a.destroy_after(&stream)?;
        }
    }
    // destroy_after on a cudaMalloc buffer used by queued work.
    let mut b = DeviceBuffer::<u8>::alloc(1 << 20)?;
    b.memset_async(7, &stream)?;
    b.destroy_after(&stream)?;
    stream.synchronize()?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Device affinity and pseudo-streams (issue 20, items 6 and 7)

/// A gpu-tier test that needs two devices: skipped (with the reason on
/// stderr, counted as ignored) where there is one, unless
/// `CUDNN_RS_REQUIRE_TWO_GPUS=1`.
fn two_gpus(name: &str, f: fn() -> TestResult) -> libtest_mimic::Trial {
    if gpu_missing().is_some() {
        return gpu(name, f); // skipped (or failed) by the usual gpu rule
    }
    match Device::count() {
        Ok(n) if n >= 2 => gpu(name, f),
        other => {
            let why = format!("needs two CUDA devices, found {other:?}");
            if std::env::var("CUDNN_RS_REQUIRE_TWO_GPUS").is_ok_and(|v| v == "1") {
                return gpu(name, move || Err(why.into()));
            }
            eprintln!("skipped: gpu::{name}: {why}");
            gpu(name, f).with_ignored_flag(true)
        }
    }
}

fn relu_on(
    h: &mut dnn::Handle,
    x: &DeviceBuffer<f32>,
    y: &mut DeviceBuffer<f32>,
) -> cudnn::Result<()> {
    let desc = dnn::TensorDescriptor::<f32>::packed(&[1, 1, 2, 2])?;
    let relu = dnn::ActivationDescriptor::relu()?;
    h.activation_forward(
        &relu,
        1.0,
        dnn::DeviceTensor::new(&desc, x)?,
        0.0,
        dnn::DeviceTensorMut::new(&desc, y)?,
    )
}

fn expect_device_mismatch(r: cudnn::Result<()>, what: &str, want: (usize, usize)) -> TestResult {
    match r {
        Err(Error::DeviceMismatch { expected, got, .. }) if (expected, got) == want => Ok(()),
        other => Err(format!(
            "{what}: want DeviceMismatch expected {} got {}, got {other:?}",
            want.0, want.1
        )
        .into()),
    }
}

/// Handles, buffers and streams record their device; ops run on the
/// handle's device whatever is current, and a buffer or stream of another
/// device is a typed error before anything is queued.
fn two_device_affinity() -> TestResult {
    let d1 = Device::new(1)?;
    let s1 = d1.create_stream()?;
    ensure!(s1.device() == Some(d1), "stream device {:?}", s1.device());
    let mut h1 = dnn::Handle::new(&s1)?;
    let x1 = DeviceBuffer::from_host(&[1f32, -2.0, 3.0, -4.0])?;
    ensure!(x1.device() == Some(d1), "buffer device {:?}", x1.device());
    ensure!(
        x1.slice(1..)?.device() == Some(d1),
        "views carry the device"
    );

    // Device 0 current from here on (as after `Device::new(0)` or on a new thread).
    let d0 = Device::new(0)?;
    let mut y1 = s1.alloc_zeroed::<f32>(4)?;
    ensure!(
        y1.device() == Some(d1),
        "Stream::alloc lands on the stream's device"
    );
    ensure!(Device::current()? == d0, "Stream::alloc put device 0 back");
    relu_on(&mut h1, &x1, &mut y1)?;
    ensure!(Device::current()? == d0, "the op put device 0 back");
    s1.synchronize()?;
    ensure!(
        y1.to_vec()? == [1.0, 0.0, 3.0, 0.0],
        "relu on device 1: {:?}",
        y1.to_vec()?
    );
    let c = x1.try_clone()?;
    ensure!(
        c.device() == Some(d1),
        "try_clone stays on the buffer's device"
    );
    ensure!(c.to_vec()? == x1.to_vec()?, "clone contents");

    // Mismatches: a device-0 buffer on a device-1 handle; streams of the
    // other device for a handle.
    let x0 = DeviceBuffer::from_host(&[5f32, 6.0, 7.0, 8.0])?;
    ensure!(x0.device() == Some(d0), "buffer on device 0");
    expect_device_mismatch(relu_on(&mut h1, &x0, &mut y1), "x on device 0", (1, 0))?;
    let s0 = d0.create_stream()?;
    expect_device_mismatch(
        x1.try_clone()?.memset_async(0, &s0),
        "memset_async of a device-1 buffer on a device-0 stream",
        (0, 1),
    )?;
    expect_device_mismatch(
        s0.scope(|sc| sc.upload(&[0f32; 4], &mut y1)),
        "upload into a device-1 buffer on a device-0 stream",
        (0, 1),
    )?;
    expect_device_mismatch(h1.set_stream(&s0), "set_stream to device 0", (1, 0))?;
    expect_device_mismatch(
        dnn::Handle::new(&s1).map(|_| ()),
        "a device-0 handle on a device-1 stream",
        (0, 1),
    )?;
    expect_device_mismatch(
        blas::Handle::new(&s1).map(|_| ()),
        "a device-0 cuBLAS handle on a device-1 stream",
        (0, 1),
    )?;
    {
        use cudnn::blas::{ComputeType, Layout, Matrix, MatrixMut};
        let b1 = blas::Handle::new(&Stream::legacy()).and(Ok(()));
        ensure!(
            b1.is_ok(),
            "a device-0 cuBLAS handle on device 0's legacy stream"
        );
        let _on = d1.guard()?;
        let hb = blas::Handle::new(&s1)?;
        let mut out = DeviceBuffer::<f32>::zeroed(4)?;
        drop(_on);
        let r = hb.gemm(
            1.0,
            Matrix::new(&x0, Layout::row_major(2, 2)),
            Matrix::new(&x1, Layout::row_major(2, 2)),
            0.0,
            MatrixMut::new(&mut out, Layout::row_major(2, 2)),
            ComputeType::Default,
        );
        expect_device_mismatch(r, "gemm with a on device 0", (1, 0))?;
        hb.gemm(
            1.0,
            Matrix::new(&x1, Layout::row_major(2, 2)),
            Matrix::new(&x1, Layout::row_major(2, 2)),
            0.0,
            MatrixMut::new(&mut out, Layout::row_major(2, 2)),
            ComputeType::Default,
        )?;
        ensure!(Device::current()? == d0, "gemm put device 0 back");
        s1.synchronize()?;
        // [[1,-2],[3,-4]]^2 = [[-5,6],[-9,10]]
        ensure!(out.to_vec()? == [-5.0, 6.0, -9.0, 10.0], "gemm on device 1");
    }

    // Legacy streams of two devices are two queues; waits across devices work.
    let l0 = Stream::legacy();
    let l1 = {
        let _on = d1.guard()?;
        Stream::legacy()
    };
    ensure!(
        l0 != l1,
        "legacy streams of devices 0 and 1 compare unequal"
    );
    ensure!(l1.device() == Some(d1), "legacy device");
    expect_device_mismatch(
        dnn::Handle::new(&l1).map(|_| ()),
        "a device-0 handle on device 1's legacy stream",
        (0, 1),
    )?;
    // A reduction planned on device 1 and run on a device-0 handle asks for
    // its sizes again there, and is right.
    {
        use cudnn::dnn::{NanPropagation, ReduceOp, ReducePlan, ReduceTensorDescriptor};
        let a = dnn::TensorDescriptor::<f32>::packed(&[1, 1, 2, 2])?;
        let c = dnn::TensorDescriptor::<f32>::packed(&[1, 1, 1, 1])?;
        let desc =
            ReduceTensorDescriptor::<f32>::new(ReduceOp::Add, NanPropagation::Propagate, false)?;
        let plan = ReducePlan::new(&h1, desc, a, c)?;
        let mut h0 = dnn::Handle::new(&s0)?;
        let mut sum = DeviceBuffer::<f32>::zeroed(1)?;
        plan.run(&mut h0, 1.0, &x0, 0.0, &mut sum, None)?;
        s0.synchronize()?;
        ensure!(
            sum.to_vec()? == [26.0],
            "sum on device 0: {:?}",
            sum.to_vec()?
        );
        expect_device_mismatch(
            plan.run(&mut h1, 1.0, &x0, 0.0, &mut sum, None),
            "a device-0 buffer reduced on the device-1 handle",
            (1, 0),
        )?;
    }
    s0.wait_for(&s1)?;
    s1.wait_for(&l0)?;
    l1.synchronize()?;
    ensure!(Device::current()? == d0, "synchronize put device 0 back");
    h1.destroy()?;
    Ok(())
}

/// A per-thread stream value names its thread's queue: a handle bound to
/// one is refused on another thread, and the pseudo-streams compare by
/// thread and device.
fn pseudo_stream_identity() -> TestResult {
    let d0 = Device::new(0)?;
    let pt = Stream::per_thread();
    ensure!(
        pt.thread() == Some(std::thread::current().id()),
        "thread recorded"
    );
    ensure!(pt.device() == Some(d0), "device recorded");
    let mut h = dnn::Handle::new(&pt)?;
    let x = DeviceBuffer::from_host(&[1f32, -1.0, 2.0, -2.0])?;
    let mut y = DeviceBuffer::<f32>::zeroed(4)?;
    relu_on(&mut h, &x, &mut y)?;
    pt.synchronize()?;
    ensure!(
        y.to_vec()? == [1.0, 0.0, 2.0, 0.0],
        "relu on the per-thread stream"
    );
    let other = std::thread::spawn(Stream::per_thread)
        .join()
        .map_err(|_| "thread panicked")?;
    ensure!(other != pt, "per-thread streams of two threads differ");
    let (h, x, mut y) = std::thread::spawn(move || {
        let r = relu_on(&mut h, &x, &mut y);
        (h, x, y, r)
    })
    .join()
    .map_err(|_| "thread panicked".to_string())
    .and_then(|(h, x, y, r)| match r {
        Err(Error::WrongThread { .. }) => Ok((h, x, y)),
        other => Err(format!("want WrongThread on another thread, got {other:?}")),
    })?;
    relu_on(&mut { h }, &x, &mut y)?;
    // scope on another thread's per-thread stream: refused before the closure runs.
    let ran = std::sync::atomic::AtomicBool::new(false);
    let r = std::thread::scope(|t| {
        t.spawn(|| {
            pt.scope(|_| {
                ran.store(true, std::sync::atomic::Ordering::SeqCst);
                Ok(())
            })
        })
        .join()
    })
    .map_err(|_| "thread panicked")?;
    ensure!(
        matches!(r, Err(Error::WrongThread { .. }))
            && !ran.load(std::sync::atomic::Ordering::SeqCst),
        "scope on another thread's per-thread stream: {r:?}"
    );
    // into_raw hands back the stream the raw handle stays bound to.
    let h2 = dnn::Handle::new(&pt)?;
    let (raw, bound) = h2.into_raw();
    ensure!(bound == pt, "into_raw returns the bound stream");
    // SAFETY: `raw` came from `into_raw`: ours, used by nobody else.
    unsafe { dnn::Handle::from_raw(raw, &bound) }?.destroy()?;
    Ok(())
}

pub fn main() {
    run(vec![
        gpu("device_info", device_info),
        gpu("round_trip_f32", round_trip::<f32>),
        gpu("round_trip_f64", round_trip::<f64>),
        gpu("round_trip_f16", round_trip::<f16>),
        gpu("round_trip_bf16", round_trip::<bf16>),
        gpu("round_trip_i8", round_trip::<i8>),
        gpu("round_trip_u8", round_trip::<u8>),
        gpu("round_trip_i32", round_trip::<i32>),
        gpu("memset_patterns", memset_patterns),
        gpu("views_and_subranges", views_and_subranges),
        gpu("pinned_async_copies", pinned_async_copies),
        gpu("stream_ordered_allocation", stream_ordered_allocation),
        gpu("events_and_streams", events_and_streams),
        gpu("dnn_handle", dnn_handle),
        gpu("blas_handle", blas_handle),
        gpu(
            "device_guard_and_ordered_frees",
            device_guard_and_ordered_frees,
        ),
        two_gpus("two_device_affinity", two_device_affinity),
        gpu("pseudo_stream_identity", pseudo_stream_identity),
        unit("sample_values_are_exact", || {
            // The samples must survive a round trip through their own type.
            ensure!(f16::at(5).to_f32() == -1019.0, "f16 sample");
            ensure!(bf16::at(3).to_f32() == -125.0, "bf16 sample");
            let _ = Duration::ZERO;
            Ok(())
        }),
    ])
}
