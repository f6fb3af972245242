//! Raw copies and size arithmetic shared by the memory types: checked byte
//! sizes and ranges, synchronous and stream-ordered `cudaMemcpy`.

use std::ffi::c_void;
use std::ops::{Bound, RangeBounds};

use crate::check::{self, cuda_call};
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::sys::cudart::cudaMemcpyKind;

use super::{Device, DeviceGuard, Stream};

// ---------------------------------------------------------------------------
// Helpers

/// `len * size_of::<T>()`, checked: must fit in `isize` (Rust's limit for one
/// allocation, and far beyond any device).
pub(super) fn byte_len<T: DataType>(len: usize) -> Result<usize> {
    len.checked_mul(T::SIZE)
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| {
            Error::invalid(
                "len",
                format!(
                    "len * size_of::<{}>() ({} bytes each) must not exceed isize::MAX bytes",
                    T::NAME,
                    T::SIZE
                ),
                len,
            )
        })
}

pub(super) fn describe_range(range: &impl RangeBounds<usize>) -> String {
    let start = match range.start_bound() {
        Bound::Included(s) => s.to_string(),
        Bound::Excluded(s) => format!("(excluded {s})"),
        Bound::Unbounded => String::new(),
    };
    let end = match range.end_bound() {
        Bound::Included(e) => format!("..={e}"),
        Bound::Excluded(e) => format!("..{e}"),
        Bound::Unbounded => "..".to_string(),
    };
    format!("{start}{end}")
}

/// `range` resolved against `len` as `(start, end)`, or an error naming both.
pub(super) fn resolve_range(range: impl RangeBounds<usize>, len: usize) -> Result<(usize, usize)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => Some(s),
        Bound::Excluded(&s) => s.checked_add(1),
        Bound::Unbounded => Some(0),
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1),
        Bound::Excluded(&e) => Some(e),
        Bound::Unbounded => Some(len),
    };
    match (start, end) {
        (Some(s), Some(e)) if s <= e && e <= len => Ok((s, e)),
        _ => Err(Error::invalid(
            "range",
            format!("must lie within 0..{len} (the view's length) with start <= end"),
            describe_range(&range),
        )),
    }
}

pub(super) fn check_same_len(what: &str, expected: usize, got: usize) -> Result<()> {
    if expected == got {
        Ok(())
    } else {
        Err(Error::mismatch(what, expected, got))
    }
}

/// `ptr + offset` elements; null stays null (only for offset 0, by the callers' range checks).
pub(super) fn offset<T>(ptr: *const T, off: usize) -> *const T {
    ptr.wrapping_add(off)
}

/// A synchronous `cudaMemcpy` of `bytes` bytes with `device` (the device
/// buffer's) current; nothing is called for 0.
///
/// # Safety
/// `dst` and `src` must be valid for `bytes` bytes in the memory spaces `kind`
/// names, and must not overlap.
pub(super) unsafe fn memcpy(
    dst: *mut c_void,
    src: *const c_void,
    bytes: usize,
    kind: cudaMemcpyKind,
    device: Option<Device>,
    what: &str,
) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    super::capture::forbid_in_capture_scope(what, super::Hazard::HostSync)?;
    // On the buffer's device: its legacy default stream is the one the copy
    // runs on and the one waited for below.
    let _on = on_device(device)?;
    let rt = check::cudart()?;
    // SAFETY: the caller guarantees both ranges are valid for `bytes` bytes.
    unsafe { cuda_call!(rt, cudaMemcpy(dst, src, bytes, kind)) }
        .map_err(|e| e.with_context(what.to_string()))?;
    if kind != cudaMemcpyKind::cudaMemcpyDeviceToHost {
        // cudaMemcpy from pageable host memory, and device-to-device, may
        // return before the data has landed; wait, so that work queued next
        // on *any* stream (non-blocking ones included) sees it.
        wait_for_legacy_stream(rt).map_err(|e| e.with_context(what.to_string()))?;
    }
    Ok(())
}

/// Make `device` current until the guard drops (nothing for `None`).
pub(super) fn on_device(device: Option<Device>) -> Result<DeviceGuard> {
    match device {
        Some(d) => d.guard(),
        None => Ok(DeviceGuard::unchanged()),
    }
}

/// Block until the legacy default stream (where `cudaMemcpy` and
/// `cudaMemset` run) has finished its work.
pub(super) fn wait_for_legacy_stream(rt: &crate::sys::cudart::Cudart) -> Result<()> {
    // SAFETY: `cudaStreamLegacy` is the runtime's own always-valid stream handle.
    unsafe {
        cuda_call!(
            rt,
            cudaStreamSynchronize(crate::sys::cudart::cudaStreamLegacy)
        )
    }
}

/// A stream-ordered `cudaMemcpyAsync`; nothing is called for 0 bytes.
///
/// # Safety
/// As [`memcpy`], and both ranges must stay valid (and host ranges unused
/// by the host) until the copy completes on `stream`.
pub(super) unsafe fn memcpy_async(
    dst: *mut c_void,
    src: *const c_void,
    bytes: usize,
    kind: cudaMemcpyKind,
    stream: &Stream,
    what: &str,
) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    // Refuses another thread's per-thread stream; the stream's device is
    // current for the call.
    let _on = stream.enter(what)?;
    let rt = check::cudart()?;
    // SAFETY: the caller guarantees validity until completion on `stream`.
    unsafe { cuda_call!(rt, cudaMemcpyAsync(dst, src, bytes, kind, stream.as_raw())) }
        .map_err(|e| e.with_context(what.to_string()))
}

pub(super) fn copy_what<T: DataType>(dir: &str, len: usize) -> String {
    format!("copying {len} x {} {dir}", T::NAME)
}
