//! CUDA devices: how many there are, which one is current, what they can do.
//!
//! The CUDA runtime keeps a *current device per host thread*. Streams, memory
//! and library handles belong to the device that was current when they were
//! created. [`Device::new`] makes the device current on the calling thread;
//! methods that depend on the current device ([`Device::synchronize`],
//! [`Device::create_stream`](crate::runtime::Device::create_stream)) make it current first, [`Device::memory_info`]
//! only for the query, and [`Device::guard`] for a scope. Library handles
//! record the device they were created on, allocate there, and run every op
//! with it current (restoring the caller's device after); buffers and
//! streams record their device too, and a launch whose parts disagree is an
//! [`Error::DeviceMismatch`].
//! A thread that uses a device created elsewhere calls
//! [`Device::set_current`] once.

use std::ffi::c_int;
use std::marker::PhantomData;

use crate::check::{self, cuda_call};
use crate::error::{Error, Result};
use crate::sys::cudart::{self, cudaDeviceAttr};

/// A CUDA device, by ordinal. Cheap to copy; owns nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Device {
    ordinal: c_int,
}

/// Keeps a device current on this thread; see [`Device::guard`].
#[must_use = "the device stays current only while the guard lives"]
#[derive(Debug)]
pub struct DeviceGuard {
    /// The device to make current again on drop (`None`: nothing changed).
    restore: Option<Device>,
    /// The current device is per host thread: the guard must not move.
    _thread: PhantomData<*const ()>,
    /// The stream this guard queues on, counted as queueing until the
    /// guard drops (a capture of it waits for that).
    queue: Option<super::queue::QueueHold>,
}

impl DeviceGuard {
    /// A guard that changed nothing and restores nothing.
    pub(crate) fn unchanged() -> Self {
        DeviceGuard {
            restore: None,
            _thread: PhantomData,
            queue: None,
        }
    }

    /// This guard, also counting `hold`'s stream as queueing until dropped.
    pub(crate) fn holding(mut self, hold: super::queue::QueueHold) -> Self {
        self.queue = Some(hold);
        self
    }

    /// Whether creating the guard changed the current device.
    pub fn switched(&self) -> bool {
        self.restore.is_some()
    }
}

impl Drop for DeviceGuard {
    fn drop(&mut self) {
        if let Some(d) = self.restore {
            // Drop must not fail: a refusal leaves the guarded device current.
            let _ = d.set_current();
        }
    }
}

/// Free and total device memory, in bytes (`cudaMemGetInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryInfo {
    /// Bytes free now.
    pub free: usize,
    /// Bytes the device has.
    pub total: usize,
}

impl Device {
    /// How many CUDA devices this process can use.
    ///
    /// # Errors
    /// [`Error::NoDevice`] when there is no driver or no device (the crate's
    /// reason, the runtime's code and words in its detail), [`Error::Load`]
    /// when the CUDA runtime cannot be found, [`Error::Cuda`] for other
    /// failures.
    #[doc(alias = "cudaGetDeviceCount")]
    pub fn count() -> Result<usize> {
        let rt = check::cudart()?;
        let mut n: c_int = 0;
        // The checked path maps the no-device codes to `Error::NoDevice`.
        // SAFETY: `n` is a valid, writable out-pointer for the duration of the call.
        unsafe { cuda_call!(rt, cudaGetDeviceCount(&mut n)) }?;
        crate::no_device::note_device_count(n);
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// Device `ordinal`, checked against [`Device::count`] and made current on
    /// the calling thread.
    ///
    /// # Errors
    /// [`Error::NoDevice`] when there are no devices; [`Error::InvalidArgument`]
    /// naming the ordinal and the device count when it is out of range;
    /// [`Error::Cuda`] when this device cannot be used while others may
    /// (see [`set_current`](Device::set_current)).
    #[doc(alias = "cudaSetDevice")]
    pub fn new(ordinal: usize) -> Result<Self> {
        let count = Self::count()?;
        if count == 0 {
            return Err(crate::no_device::zero_devices());
        }
        if ordinal >= count {
            return Err(Error::invalid(
                "ordinal",
                format!(
                    "must be less than the number of CUDA devices ({count}), i.e. 0..={}",
                    count - 1
                ),
                ordinal,
            ));
        }
        let dev = Device {
            ordinal: c_int::try_from(ordinal)
                .map_err(|_| Error::invalid("ordinal", "must fit in a C int", ordinal))?,
        };
        dev.set_current()?;
        Ok(dev)
    }

    /// The device current on the calling thread.
    ///
    /// # Errors
    /// [`Error::NoDevice`] when there is no usable device; [`Error::Cuda`]
    /// when the runtime refuses otherwise.
    #[doc(alias = "cudaGetDevice")]
    pub fn current() -> Result<Self> {
        #[cfg(test)]
        if let Some(ordinal) = super::hold_check::pretended_current() {
            return Ok(Device { ordinal });
        }
        let rt = check::cudart()?;
        let mut ordinal: c_int = 0;
        // SAFETY: `ordinal` is a valid, writable out-pointer.
        unsafe { cuda_call!(rt, cudaGetDevice(&mut ordinal)) }?;
        Ok(Device { ordinal })
    }

    /// A device value for `ordinal` as the runtime or a library reported it
    /// (`cudaGetDevice`, `ncclCommCuDevice`), not checked against the device
    /// count; negative ordinals read as device 0 in [`ordinal`](Device::ordinal).
    #[allow(dead_code)] // used by the collectives and by unit tests
    pub(crate) const fn from_runtime(ordinal: c_int) -> Self {
        Device { ordinal }
    }

    /// The ordinal (0-based index).
    pub fn ordinal(&self) -> usize {
        usize::try_from(self.ordinal).unwrap_or(0)
    }

    /// Make this device current on the calling thread.
    ///
    /// # Errors
    /// [`Error::NoDevice`] when there is no usable driver or device;
    /// [`Error::Cuda`] when the runtime refuses this device, for example
    /// code 46 (`cudaErrorDevicesUnavailable`: it is busy in
    /// exclusive-process or prohibited compute mode, or out of resources),
    /// for which [`Error::is_no_device`] is false as other devices may be
    /// free.
    #[doc(alias = "cudaSetDevice")]
    pub fn set_current(&self) -> Result<()> {
        let rt = check::cudart()?;
        // SAFETY: `cudaSetDevice` takes a plain integer; the ordinal was checked
        // (or came from the runtime) and the runtime validates it again.
        unsafe { cuda_call!(rt, cudaSetDevice(self.ordinal)) }
            .map_err(|e| e.with_context(format!("device {}", self.ordinal)))
    }

    /// Make this device current until the returned guard is dropped, which
    /// puts the previously current device back. When this device is already
    /// current the guard does nothing (one `cudaGetDevice`, no
    /// `cudaSetDevice`). Handles use it to allocate their workspaces on the
    /// device they belong to whatever device the caller has made current.
    ///
    /// The guard is not `Send`: the current device is per host thread.
    ///
    /// # Errors
    /// [`Error::NoDevice`] without a usable device; [`Error::Cuda`] when the
    /// current device cannot be read or this one cannot be made current.
    pub fn guard(&self) -> Result<DeviceGuard> {
        let previous = Device::current()?;
        if previous == *self {
            return Ok(DeviceGuard {
                restore: None,
                _thread: PhantomData,
                queue: None,
            });
        }
        self.set_current()?;
        Ok(DeviceGuard {
            restore: Some(previous),
            _thread: PhantomData,
            queue: None,
        })
    }

    /// One integer attribute of the device (`cudaDevAttr*`).
    ///
    /// # Errors
    /// [`Error::Cuda`] for an attribute the runtime does not know.
    #[doc(alias = "cudaDeviceGetAttribute")]
    pub fn attribute(&self, attr: cudaDeviceAttr) -> Result<i32> {
        let rt = check::cudart()?;
        let mut v: c_int = 0;
        // SAFETY: `v` is a valid, writable out-pointer; attribute and ordinal are
        // plain values the runtime validates.
        unsafe { cuda_call!(rt, cudaDeviceGetAttribute(&mut v, attr, self.ordinal)) }.map_err(
            |e| e.with_context(format!("attribute {} of device {}", attr.0, self.ordinal)),
        )?;
        Ok(v)
    }

    /// The device's name (`"NVIDIA H200"`), or `"unknown"` when the loaded
    /// runtime does not offer `cudaGetDeviceProperties` with the ABI of these
    /// bindings (CUDA 12; see `cudart_sys::ABI_DIFFERS_IN_CUDA12`).
    ///
    /// # Errors
    /// [`Error::Cuda`] when the runtime cannot describe the device.
    #[doc(alias = "cudaGetDeviceProperties")]
    pub fn name(&self) -> Result<String> {
        /// Much larger than any `cudaDeviceProp` layout (1008 bytes in CUDA 13),
        /// so a runtime with a bigger struct still writes inside the buffer.
        #[repr(C, align(8))]
        struct PropBuf([u8; 8192]);

        let rt = check::cudart()?;
        if !rt.has_symbol("cudaGetDeviceProperties") {
            return Ok("unknown".to_string());
        }
        let mut buf = Box::new(PropBuf([0; 8192]));
        let prop = buf.0.as_mut_ptr().cast::<cudart::cudaDeviceProp>();
        // SAFETY: `prop` points to 8 KiB of writable, 8-aligned, zeroed memory,
        // more than the runtime's `cudaDeviceProp` in every CUDA version this
        // crate loads; `name` (a `char[256]`) sits at offset 0 in all of them.
        let r = unsafe { cuda_call!(rt, cudaGetDeviceProperties(prop, self.ordinal)) };
        match r {
            Ok(()) => {}
            Err(Error::MissingSymbol(_)) => return Ok("unknown".to_string()),
            Err(e) => return Err(e.with_context(format!("device {}", self.ordinal))),
        }
        let name = &buf.0[..256];
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        Ok(String::from_utf8_lossy(&name[..end]).into_owned())
    }

    /// The compute capability, `(major, minor)` (`(9, 0)` for Hopper).
    ///
    /// # Errors
    /// [`Error::Cuda`] when the runtime cannot tell.
    pub fn compute_capability(&self) -> Result<(u32, u32)> {
        let major = self.attribute(cudaDeviceAttr::cudaDevAttrComputeCapabilityMajor)?;
        let minor = self.attribute(cudaDeviceAttr::cudaDevAttrComputeCapabilityMinor)?;
        Ok((major.max(0) as u32, minor.max(0) as u32))
    }

    /// The number of streaming multiprocessors.
    ///
    /// # Errors
    /// [`Error::Cuda`] when the runtime cannot tell.
    pub fn sm_count(&self) -> Result<u32> {
        Ok(self
            .attribute(cudaDeviceAttr::cudaDevAttrMultiProcessorCount)?
            .max(0) as u32)
    }

    /// Whether the device and driver support stream-ordered allocation
    /// (`cudaMallocAsync`, used by [`DeviceBuffer::alloc_async`](super::DeviceBuffer::alloc_async)).
    ///
    /// # Errors
    /// [`Error::Cuda`] when the runtime cannot tell.
    pub fn supports_memory_pools(&self) -> Result<bool> {
        Ok(self.attribute(cudaDeviceAttr::cudaDevAttrMemoryPoolsSupported)? != 0)
    }

    /// Free and total memory. The device is current during the query only
    /// (the previously current device is current again after it).
    ///
    /// # Errors
    /// [`Error::Cuda`] when the runtime cannot tell.
    #[doc(alias = "cudaMemGetInfo")]
    pub fn memory_info(&self) -> Result<MemoryInfo> {
        let _on = self.guard()?;
        let rt = check::cudart()?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: both are valid, writable out-pointers.
        unsafe { cuda_call!(rt, cudaMemGetInfo(&mut free, &mut total)) }?;
        Ok(MemoryInfo { free, total })
    }

    /// Wait for all work on the device, every stream included. Makes the
    /// device current first.
    ///
    /// Refused inside a [`Stream::capture`](super::Stream::capture)
    /// closure on this thread (before any runtime call), and typed when the
    /// runtime refuses it because a stream of the device is being captured
    /// (by any thread, or by another library such as cudarc).
    ///
    /// # Errors
    /// [`Error::Cuda`] with the first error of earlier asynchronous work;
    /// [`Error::CaptureUnsafe`] inside a capture closure, or when the
    /// runtime refuses because of an open capture.
    #[doc(alias = "cudaDeviceSynchronize")]
    pub fn synchronize(&self) -> Result<()> {
        let hazard = super::Hazard::HostSync;
        super::capture::forbid_in_capture_scope("Device::synchronize", hazard.clone())?;
        self.set_current()?;
        let rt = check::cudart()?;
        // SAFETY: takes no arguments; blocks until the current device is idle.
        let r = unsafe { cuda_call!(rt, cudaDeviceSynchronize()) };
        super::capture::typed_capture_refusal("Device::synchronize", &hazard, r)
    }
}
