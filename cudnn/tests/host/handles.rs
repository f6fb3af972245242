//! Runtime and handles without a device (unit and host tiers).
//!
//! On a machine with no GPU: every call that needs a device returns a clear
//! error (and never panics); length-0 buffers need no device at all; length
//! and range checks fire before any library call. The no-device assertions
//! skip visibly (stderr) where a device is present.
//!
//! Run against cuDNN 8.9 too:
//! `CUDNN_RS_SEARCH_PATH=$PWD/.cuda-libs/cuda12 cargo test -p cudnn-rs --features dnn,blas,reference --test host handles::`.

use crate::support;

use cudnn::Error;
use cudnn::blas::{self, MathMode};
use cudnn::dnn;
use cudnn::runtime::{Device, DeviceBuffer, DeviceSlice, Event, HostBuffer, Stream};
use cudnn::sys::cublas::cublasMath_t;
use support::*;

pub fn main() {
    run(vec![
        unit("zero_length_buffers_need_no_device", zero_length_buffers),
        unit("length_mismatch_names_both_lengths", length_mismatch),
        unit("range_errors_name_range_and_length", range_errors),
        unit("byte_size_overflow_is_invalid_argument", size_overflow),
        unit("thread_traits", thread_traits),
        unit("math_mode_constants", math_mode_constants),
        unit("cudnn_older_than_8_9_is_unsupported", old_cudnn_refused),
        host(
            "device_count_without_gpu_is_clear_error",
            device_without_gpu,
        ),
        host(
            "dnn_handle_without_gpu_is_not_initialized",
            dnn_handle_without_gpu,
        ),
        host(
            "blas_handle_without_gpu_is_not_initialized",
            blas_handle_without_gpu,
        ),
        host("dnn_library_version_is_supported", dnn_version),
        host(
            "streams_events_memory_without_gpu_error_cleanly",
            runtime_without_gpu,
        ),
        unit(
            "pseudo_streams_name_their_thread_and_device",
            pseudo_stream_identity,
        ),
        unit(
            "empty_and_foreign_memory_have_no_device",
            empty_memory_has_no_device,
        ),
        host(
            "another_threads_per_thread_stream_is_refused",
            foreign_per_thread_stream_refused,
        ),
    ])
}

fn is_wrong_thread<T: std::fmt::Debug>(r: cudnn::Result<T>, what: &str) -> TestResult {
    match r {
        Err(Error::WrongThread { owner, current, .. }) if owner != current => Ok(()),
        other => Err(format!("{what}: want WrongThread, got {other:?}").into()),
    }
}

/// `Stream::per_thread()` made on two threads names two queues; the legacy
/// stream and the per-thread stream are different queues; clones are equal.
fn pseudo_stream_identity() -> TestResult {
    let here = Stream::per_thread();
    let there = std::thread::spawn(Stream::per_thread)
        .join()
        .map_err(|_| "thread panicked")?;
    ensure!(
        here.thread() == Some(std::thread::current().id()),
        "thread recorded: {here:?}"
    );
    ensure!(
        there.thread().is_some() && there.thread() != here.thread(),
        "the spawned thread's id: {there:?}"
    );
    ensure!(here != there, "per-thread streams of two threads are equal");
    ensure!(
        here == here.clone() && here == Stream::per_thread(),
        "same thread, same queue"
    );
    ensure!(
        here.as_raw() == there.as_raw(),
        "one raw handle, two queues"
    );
    let legacy = Stream::legacy();
    ensure!(legacy != here, "legacy == per-thread");
    ensure!(
        legacy.thread().is_none() && legacy.is_pseudo(),
        "{legacy:?}"
    );
    // Legacy streams made on two threads with the same device current name
    // the same queue (the device's legacy stream).
    let legacy_there = std::thread::spawn(Stream::legacy)
        .join()
        .map_err(|_| "thread panicked")?;
    if legacy.device() == legacy_there.device() {
        ensure!(
            legacy == legacy_there,
            "legacy streams of one device differ"
        );
    }
    if !has_gpu() {
        ensure!(
            here.device().is_none() && legacy.device().is_none(),
            "no device could be read: {here:?} {legacy:?}"
        );
    }
    Ok(())
}

/// Empty buffers hold no memory and foreign views name no device: both
/// agree with any device. No library call is made.
fn empty_memory_has_no_device() -> TestResult {
    let mut b = DeviceBuffer::<f32>::alloc(0)?;
    ensure!(b.device().is_none(), "empty buffer: {:?}", b.device());
    ensure!(
        b.as_slice().device().is_none() && b.as_slice_mut().device().is_none(),
        "views"
    );
    // SAFETY: null with length 0 is the empty view.
    let v = unsafe { DeviceSlice::<u8>::from_raw_parts(std::ptr::null(), 0) };
    ensure!(
        v.device().is_none() && v.slice(..)?.device().is_none(),
        "foreign view"
    );
    Ok(())
}

/// Another thread's per-thread stream is refused, with no CUDA call made
/// first, by everything that would queue on it or wait for it.
fn foreign_per_thread_stream_refused() -> TestResult {
    let theirs = std::thread::spawn(Stream::per_thread)
        .join()
        .map_err(|_| "thread panicked")?;
    is_wrong_thread(theirs.synchronize(), "synchronize")?;
    is_wrong_thread(theirs.query(), "query")?;
    is_wrong_thread(theirs.flags(), "flags")?;
    is_wrong_thread(Stream::legacy().wait_for(&theirs), "wait_for (other)")?;
    is_wrong_thread(theirs.wait_for(&theirs), "wait_for (self)")?;
    is_wrong_thread(dnn::Handle::new(&theirs), "dnn::Handle::new")?;
    is_wrong_thread(blas::Handle::new(&theirs), "blas::Handle::new")?;
    is_wrong_thread(blas::LtHandle::with_workspace(&theirs, 0), "LtHandle")?;
    // SAFETY: refused before anything is allocated.
    let r = unsafe { DeviceBuffer::<f32>::alloc_async(16, &theirs) };
    is_wrong_thread(r, "alloc_async")?;
    is_wrong_thread(theirs.alloc::<f32>(16), "Stream::alloc")?;
    // The scope is refused before its closure runs.
    let mut ran = false;
    is_wrong_thread(
        theirs.scope(|_| {
            ran = true;
            Ok(())
        }),
        "scope",
    )?;
    ensure!(!ran, "the scope's closure ran");
    // Empty work queues nothing, so it needs no stream.
    DeviceBuffer::<f32>::alloc(0)?.memset_async(0, &theirs)?;
    Ok(())
}

fn zero_length_buffers() -> TestResult {
    let mut b = DeviceBuffer::<f32>::alloc(0)?;
    ensure!(b.is_empty() && b.byte_len() == 0, "len 0 buffer: {b:?}");
    ensure!(b.as_ptr().is_null(), "an empty buffer holds no allocation");
    b.copy_from_host(&[])?;
    b.copy_to_host(&mut [])?;
    ensure!(b.to_vec()?.is_empty(), "to_vec of empty");
    b.memset(0)?;
    b.memset_async(0, &Stream::legacy())?;
    let other = DeviceBuffer::<f32>::zeroed(0)?;
    b.copy_from_device(&other)?;
    b.copy_from_device_async(&other, &Stream::legacy())?;
    // An empty buffer is freed without touching the runtime or the stream.
    DeviceBuffer::<f64>::alloc(0)?.destroy_after(&Stream::legacy())?;
    ensure!(
        b.slice(..)?.is_empty() && b.slice(0..0)?.is_empty(),
        "empty sub-ranges"
    );
    ensure!(b.slice_mut(..)?.is_empty(), "empty mutable sub-range");
    let c = b.try_clone()?;
    ensure!(c.is_empty(), "clone of empty");
    b.destroy()?;
    c.destroy()?;

    let d = DeviceBuffer::<half::f16>::from_host(&[])?;
    ensure!(d.is_empty(), "from_host(&[])");
    // SAFETY: empty buffers; no stream uses them.
    let e = unsafe { DeviceBuffer::<i8>::alloc_async(0, &Stream::legacy()) }?;
    ensure!(
        e.is_empty() && !e.is_stream_ordered(),
        "alloc_async(0) allocates nothing"
    );
    // SAFETY: as above.
    let f = unsafe { DeviceBuffer::<u8>::zeroed_async(0, &Stream::legacy()) }?;
    ensure!(f.is_empty(), "zeroed_async(0)");

    let h = HostBuffer::<f64>::new(0)?;
    ensure!(
        h.is_empty() && h.iter().next().is_none(),
        "empty pinned buffer derefs to an empty slice"
    );
    h.destroy()?;
    let h = HostBuffer::<i32>::from_slice(&[])?;
    ensure!(h.is_empty() && h[..].is_empty(), "empty pinned copy");

    // SAFETY: null with length 0 is the empty view.
    let v = unsafe { DeviceSlice::<u8>::from_raw_parts(std::ptr::null(), 0) };
    ensure!(v.to_vec()?.is_empty(), "empty raw view");
    let (l, r) = v.split_at(0)?;
    ensure!(l.is_empty() && r.is_empty(), "split of empty");
    Ok(())
}

fn length_mismatch() -> TestResult {
    let mut b = DeviceBuffer::<f32>::alloc(0)?;
    let e = b
        .copy_from_host(&[1.0, 2.0, 3.0])
        .err()
        .ok_or("copy of 3 into 0 must fail")?;
    let msg = e.to_string();
    ensure!(
        matches!(e, Error::Mismatch { .. }),
        "expected Error::Mismatch, got {e:?}"
    );
    ensure!(
        msg.contains("expected 0") && msg.contains("got 3"),
        "message must name both lengths: {msg}"
    );

    let e = b
        .copy_to_host(&mut [0.0; 5])
        .err()
        .ok_or("copy of 0 into 5 must fail")?;
    let msg = e.to_string();
    ensure!(
        msg.contains("expected 0") && msg.contains("got 5"),
        "message must name both lengths: {msg}"
    );

    let e = b.as_slice().to_vec().map(|v| v.len()).ok();
    ensure!(e == Some(0), "to_vec of empty view");
    Ok(())
}

fn range_errors() -> TestResult {
    let b = DeviceBuffer::<f64>::alloc(0)?;
    for (what, r) in [
        ("2..5", b.slice(2..5).map(|_| ())),
        ("..=0", b.slice(..=0).map(|_| ())),
        ("1..", b.slice(1..).map(|_| ())),
    ] {
        let e = r
            .err()
            .ok_or(format!("slice({what}) of an empty buffer must fail"))?;
        let msg = e.to_string();
        ensure!(
            matches!(e, Error::InvalidArgument { .. }),
            "slice({what}): {e:?}"
        );
        ensure!(
            msg.contains(what) && msg.contains("0..0"),
            "message must name the range and the length: {msg}"
        );
    }
    #[allow(clippy::reversed_empty_ranges)]
    let e = b.slice(3..1).err().ok_or("reversed range must fail")?;
    ensure!(e.to_string().contains("3..1"), "{e}");
    let e = b
        .slice(usize::MAX..=usize::MAX)
        .err()
        .ok_or("overflowing range must fail")?;
    ensure!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
    let e = b
        .as_slice()
        .split_at(1)
        .err()
        .ok_or("split past the end must fail")?;
    ensure!(e.to_string().contains("mid"), "{e}");
    Ok(())
}

fn size_overflow() -> TestResult {
    for r in [
        DeviceBuffer::<f64>::alloc(usize::MAX / 4).map(|_| ()),
        DeviceBuffer::<f32>::alloc(usize::MAX).map(|_| ()),
        // SAFETY: the allocation fails before anything is allocated.
        unsafe { DeviceBuffer::<i32>::alloc_async(usize::MAX / 2, &Stream::legacy()) }.map(|_| ()),
        HostBuffer::<half::bf16>::new(usize::MAX).map(|_| ()),
    ] {
        let e = r
            .err()
            .ok_or("an allocation whose byte size overflows must fail")?;
        let msg = e.to_string();
        ensure!(
            matches!(&e, Error::InvalidArgument { arg, .. } if arg == "len"),
            "expected InvalidArgument for `len`, got {e:?}"
        );
        ensure!(msg.contains("isize::MAX"), "{msg}");
    }
    Ok(())
}

fn thread_traits() -> TestResult {
    fn send<T: Send>() {}
    fn send_sync<T: Send + Sync>() {}
    send::<dnn::Handle>();
    send::<blas::Handle>();
    send_sync::<Stream>();
    send_sync::<Event>();
    send_sync::<Device>();
    send_sync::<DeviceBuffer<f32>>();
    send_sync::<HostBuffer<half::f16>>();
    send_sync::<DeviceSlice<'static, i8>>();
    // `dnn::Handle: !Sync` and `blas::Handle: !Sync` are proven in tests/compile_fail.
    Ok(())
}

fn math_mode_constants() -> TestResult {
    ensure!(
        MathMode::default() == MathMode::Default,
        "TF32 must never be the default"
    );
    ensure!(
        MathMode::Default.to_raw() == cublasMath_t::CUBLAS_DEFAULT_MATH,
        "Default"
    );
    ensure!(
        MathMode::Tf32.to_raw() == cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH,
        "Tf32"
    );
    ensure!(
        MathMode::Pedantic.to_raw() == cublasMath_t::CUBLAS_PEDANTIC_MATH,
        "Pedantic"
    );
    // Reduced-precision split-K reductions are disallowed unless allowed:
    // the flag is the header's, OR'd onto each mode.
    let flag = cublasMath_t::CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION.0;
    ensure!(flag != 0, "the header defines the flag");
    for m in [MathMode::Default, MathMode::Tf32, MathMode::Pedantic] {
        ensure!(
            m.to_raw_with(false).0 == m.to_raw().0 | flag,
            "{m:?}: disallowed by default"
        );
        ensure!(m.to_raw_with(true) == m.to_raw(), "{m:?}: allowed");
    }
    ensure!(
        blas::Handle::recommended_workspace_size(9) == 32 << 20,
        "Hopper: 32 MiB"
    );
    ensure!(
        blas::Handle::recommended_workspace_size(8) == 4 << 20,
        "pre-Hopper: 4 MiB"
    );
    Ok(())
}

fn is_no_device_error(e: &Error) -> bool {
    matches!(e, Error::NoDevice { .. }) && e.is_no_device()
}

fn device_without_gpu() -> TestResult {
    if skip_if_gpu("host::device_count_without_gpu_is_clear_error") {
        return Ok(());
    }
    let e = Device::count()
        .err()
        .ok_or("Device::count() must fail without a device")?;
    ensure!(is_no_device_error(&e), "expected NoDevice, got {e:?}");
    ensure!(
        e.to_string().contains("cudaGetDeviceCount"),
        "the error must name the call: {e}"
    );
    eprintln!("Device::count(): {e}");

    let e = Device::new(0)
        .err()
        .ok_or("Device::new(0) must fail without a device")?;
    ensure!(is_no_device_error(&e), "expected NoDevice, got {e:?}");
    let e = Device::new(7)
        .err()
        .ok_or("Device::new(7) must fail without a device")?;
    ensure!(is_no_device_error(&e), "expected NoDevice, got {e:?}");
    ensure!(
        Device::current().is_err(),
        "Device::current() must fail without a device"
    );
    // A guard cannot be had without a device (it reads the current one).
    ensure!(
        Device::new(0).is_err() && Stream::legacy().flags().is_err(),
        "flags without a device"
    );
    Ok(())
}

fn dnn_handle_without_gpu() -> TestResult {
    if skip_if_gpu("host::dnn_handle_without_gpu_is_not_initialized") {
        return Ok(());
    }
    let e = dnn::Handle::new(&Stream::legacy())
        .err()
        .ok_or("dnn::Handle::new must fail without a device")?;
    // Typed NoDevice (issue 33), cuDNN's own status kept in the detail.
    ensure!(
        matches!(e, Error::NoDevice { .. }) && e.is_no_device(),
        "expected NoDevice, got {e:?}"
    );
    let msg = e.to_string();
    ensure!(
        msg.contains("cudnnCreate") && msg.contains("CUDNN_STATUS_NOT_INITIALIZED"),
        "{msg}"
    );
    eprintln!("dnn::Handle::new: {msg}");
    Ok(())
}

fn blas_handle_without_gpu() -> TestResult {
    if skip_if_gpu("host::blas_handle_without_gpu_is_not_initialized") {
        return Ok(());
    }
    let e = blas::Handle::new(&Stream::legacy())
        .err()
        .ok_or("blas::Handle::new must fail without a device")?;
    // Typed NoDevice (issue 33), cuBLAS's own status kept in the detail.
    match &e {
        Error::NoDevice {
            detail: Some(d), ..
        } => {
            ensure!(
                d.contains("cublasCreate"),
                "the error must name cublasCreate: {e}"
            );
            ensure!(
                d.contains("CUBLAS_STATUS_NOT_INITIALIZED"),
                "expected CUBLAS_STATUS_NOT_INITIALIZED: {e}"
            );
        }
        other => return Err(format!("expected Error::NoDevice, got {other:?}").into()),
    }
    eprintln!("blas::Handle::new: {e}");
    Ok(())
}

fn dnn_version() -> TestResult {
    let v = dnn::Handle::library_version()?;
    ensure!(
        v >= dnn::Handle::MIN_VERSION,
        "the loaded cuDNN {v} is older than {}",
        dnn::Handle::MIN_VERSION
    );
    eprintln!("cuDNN {v}");
    Ok(())
}

fn old_cudnn_refused() -> TestResult {
    use cudnn::sys::cudart::Version;
    for old in [
        Version::new(7, 6, 5),
        Version::new(8, 6, 0),
        Version::new(8, 8, 1),
    ] {
        let e = dnn::Handle::check_supported(old)
            .err()
            .ok_or(format!("cuDNN {old} must be refused"))?;
        let msg = e.to_string();
        ensure!(matches!(e, Error::Unsupported { .. }), "{e:?}");
        ensure!(
            msg.contains(&old.to_string()) && msg.contains("8.9"),
            "must name both versions: {msg}"
        );
    }
    dnn::Handle::check_supported(Version::new(8, 9, 0))?;
    dnn::Handle::check_supported(Version::new(9, 28, 1))?;
    Ok(())
}

fn runtime_without_gpu() -> TestResult {
    if skip_if_gpu("host::streams_events_memory_without_gpu_error_cleanly") {
        return Ok(());
    }
    let e = Stream::new()
        .err()
        .ok_or("Stream::new must fail without a device")?;
    ensure!(e.to_string().contains("cudaStreamCreateWithFlags"), "{e}");
    ensure!(
        Stream::non_blocking().is_err(),
        "non-blocking stream without a device"
    );
    ensure!(
        Stream::legacy().synchronize().is_err(),
        "synchronize without a device"
    );
    ensure!(Event::new().is_err(), "event without a device");

    let e = DeviceBuffer::<f32>::alloc(16)
        .err()
        .ok_or("cudaMalloc must fail without a device")?;
    let msg = e.to_string();
    ensure!(
        msg.contains("cudaMalloc") && msg.contains("16 x f32"),
        "the error must name the call and the size: {msg}"
    );
    ensure!(
        DeviceBuffer::<u8>::from_host(&[1, 2, 3]).is_err(),
        "from_host without a device"
    );
    ensure!(
        HostBuffer::<f32>::new(4).is_err(),
        "cudaMallocHost without a device"
    );
    // SAFETY: fails without a device; nothing is allocated.
    let e = unsafe { DeviceBuffer::<f32>::alloc_async(16, &Stream::legacy()) }
        .err()
        .ok_or("alloc_async without a device")?;
    ensure!(
        !matches!(e, Error::Unsupported { .. }) || e.to_string().contains("cudaMallocAsync"),
        "{e}"
    );
    Ok(())
}
