//! Pinned host memory: [`HostBuffer`].

use std::ffi::c_void;
use std::fmt;
use std::mem;
use std::ops::{Deref, DerefMut};
use std::ptr::{self, NonNull};

use crate::check::{self, cuda_call};
use crate::dtype::DataType;
use crate::error::{Error, Result};

use super::copy::*;

// ---------------------------------------------------------------------------
// HostBuffer

/// Pinned (page-locked) host memory holding `len` elements of `T`; derefs to
/// `[T]`. Freed with `cudaFreeHost` on drop.
///
/// Pinned memory lets host↔device copies run asynchronously; use it with
/// [`Stream::scope`](crate::runtime::Stream::scope), which guarantees the buffer outlives the copies.
pub struct HostBuffer<T: DataType> {
    ptr: NonNull<T>,
    len: usize,
    /// Whether `ptr` came from `cudaMallocHost` (false: dangling, length 0).
    pinned: bool,
}

// SAFETY: the buffer uniquely owns ordinary (page-locked) host memory, like
// `Box<[T]>` with `T: Send`; `cudaFreeHost` may be called from any thread (the
// CUDA runtime API is thread-safe).
unsafe impl<T: DataType> Send for HostBuffer<T> {}
// SAFETY: `&HostBuffer` only gives `&[T]`, and `T: Sync`.
unsafe impl<T: DataType> Sync for HostBuffer<T> {}

impl<T: DataType> fmt::Debug for HostBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "HostBuffer<{}> {{ ptr: {:p}, len: {} }}",
            T::NAME,
            self.ptr,
            self.len
        )
    }
}

impl<T: DataType> HostBuffer<T> {
    /// Allocate `len` zeroed elements of pinned host memory.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the byte size overflows;
    /// [`Error::NoDevice`] without a usable device; [`Error::Cuda`] (out of
    /// pinned memory).
    #[doc(alias = "cudaMallocHost")]
    pub fn new(len: usize) -> Result<Self> {
        let bytes = byte_len::<T>(len)?;
        if bytes == 0 {
            return Ok(HostBuffer {
                ptr: NonNull::dangling(),
                len,
                pinned: false,
            });
        }
        let rt = check::cudart()?;
        let mut p: *mut c_void = ptr::null_mut();
        // SAFETY: `p` is a valid, writable out-pointer; `bytes` is non-zero.
        unsafe { cuda_call!(rt, cudaMallocHost(&mut p, bytes)) }.map_err(|e| {
            e.with_context(format!(
                "allocating {len} x {} of pinned host memory",
                T::NAME
            ))
        })?;
        let Some(nn) = NonNull::new(p.cast::<T>()) else {
            return Err(Error::invalid(
                "cudaMallocHost result",
                "must not be null",
                "null",
            ));
        };
        // SAFETY: `nn` points to `bytes` freshly allocated, writable host bytes,
        // suitably aligned (cudaMallocHost aligns to at least 256 bytes).
        // Zeroing initializes them: all-zero bytes are a valid value of every
        // `DataType`.
        unsafe { ptr::write_bytes(nn.as_ptr().cast::<u8>(), 0, bytes) };
        Ok(HostBuffer {
            ptr: nn,
            len,
            pinned: true,
        })
    }

    /// Pinned copy of a host slice.
    ///
    /// # Errors
    /// As [`HostBuffer::new`].
    pub fn from_slice(src: &[T]) -> Result<Self> {
        let mut b = Self::new(src.len())?;
        b.copy_from_slice(src);
        Ok(b)
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Free the memory now, reporting the runtime's status.
    ///
    /// # Errors
    /// [`Error::Cuda`] from `cudaFreeHost`.
    #[doc(alias = "cudaFreeHost")]
    pub fn destroy(self) -> Result<()> {
        let me = mem::ManuallyDrop::new(self);
        if !me.pinned {
            return Ok(());
        }
        let rt = check::cudart()?;
        // SAFETY: the pointer came from cudaMallocHost; `me` is never dropped,
        // so it is freed exactly once. No async copy can still use it: those
        // only exist inside `Stream::scope`, which has returned.
        unsafe { cuda_call!(rt, cudaFreeHost(me.ptr.as_ptr().cast())) }
    }
}

impl<T: DataType> Deref for HostBuffer<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` is valid (or dangling with len 0), aligned, initialized
        // for `len` elements (zeroed at allocation), and owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: DataType> DerefMut for HostBuffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and `&mut self` makes the borrow exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: DataType> Drop for HostBuffer<T> {
    fn drop(&mut self) {
        if self.pinned
            && let Ok(rt) = check::cudart()
        {
            // SAFETY: the pointer came from cudaMallocHost and is freed once.
            // The status is ignored: Drop must not fail.
            let _ = unsafe { rt.cudaFreeHost(self.ptr.as_ptr().cast()) };
        }
    }
}
