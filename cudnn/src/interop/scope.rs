//! The safe way to lend cudarc memory: a scope that owns cudarc's
//! record-on-drop guards and synchronizes the device at both ends.

use std::cell::RefCell;
use std::fmt;
use std::marker::PhantomData;

use ::cudarc::driver::{DevicePtr, DevicePtrMut, DeviceRepr, SyncOnDrop};

use super::driver::guarded;
use super::memory::{CudarcRead, CudarcWrite};
use super::stream::CudarcStream;
use crate::dtype::DataType;
use crate::error::Result;
use crate::runtime::{DeviceSlice, DeviceSliceMut};

/// cudarc memory lent inside [`CudarcStream::scope`]: [`read`](Self::read)
/// and [`write`](Self::write) give this crate's views, valid until the
/// closure returns.
///
/// The scope, not the caller, owns cudarc's guards, so none can be leaked;
/// each lend waits (host) until cudarc's pending work on the memory is done,
/// and the scope's end waits until all work of the device's context is
/// done before cudarc's read/write events are recorded. So the views may be
/// used on any stream of that device, at the cost of those two host waits.
pub struct CudarcScope<'scope, 'env> {
    lent: &'scope Lent<'env>,
    /// Invariant in `'scope`, as `std::thread::Scope`: views cannot be
    /// stretched past the closure.
    _scope: PhantomData<&'scope mut &'scope ()>,
}

/// What a scope lent: cudarc's record-on-drop guards, dropped only after the
/// device is idle (also when the closure panics).
struct Lent<'env> {
    stream: &'env CudarcStream,
    syncs: RefCell<Vec<SyncOnDrop<'env>>>,
}

impl Lent<'_> {
    /// `cuCtxSynchronize` of the stream's context, then cudarc's events.
    fn finish(&self) -> Result<()> {
        let ctx = self.stream.cudarc().context();
        let synced = guarded("cudarc CudaContext::synchronize", || ctx.synchronize());
        // The guards record cudarc's events now, after the device is idle.
        drop(std::mem::take(&mut *self.syncs.borrow_mut()));
        synced
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        // Reached with guards only when the closure panicked: the device
        // still finishes the work that used the views before cudarc's
        // events are recorded. Nothing panics here.
        if !self.syncs.get_mut().is_empty() {
            let _ = self.finish();
        }
    }
}

impl fmt::Debug for CudarcScope<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudarcScope")
            .field("stream", self.lent.stream)
            .field("lent", &self.lent.syncs.borrow().len())
            .finish()
    }
}

impl<'scope, 'env> CudarcScope<'scope, 'env> {
    /// Host wait until cudarc's stream has passed everything queued so far
    /// (the waits `device_ptr` just queued for cudarc's pending work on
    /// other streams included).
    fn settle(&self) -> Result<()> {
        let cs = self.lent.stream.cudarc();
        guarded("cudarc CudaStream::synchronize", || cs.synchronize())
    }

    /// Lend `src` for reading: cudarc's pending writes of it finish first
    /// (host wait); the view is valid until the scope's closure returns.
    ///
    /// # Errors
    /// As [`CudarcStream::read`]; [`Error::Driver`](crate::Error::Driver)
    /// from the wait.
    pub fn read<T, S>(&'scope self, src: &'env S) -> Result<DeviceSlice<'scope, T>>
    where
        T: DataType + DeviceRepr,
        S: DevicePtr<T>,
    {
        // SAFETY: the guard's record-on-drop is kept by this scope, which
        // drops it only after `CudarcStream::scope` synchronized the whole
        // context (all streams of the device): every use of the view,
        // on whatever stream, is complete when cudarc's event is recorded.
        let g = unsafe { CudarcRead::new(src, self.lent.stream.cudarc()) }?;
        let (addr, len, device, sync) = g.into_parts();
        self.lent.syncs.borrow_mut().push(sync);
        self.settle()?;
        // SAFETY: `addr`/`len` come from cudarc's `device_ptr` of `src`,
        // borrowed for `'env` (checked: aligned, fits); the view lives for
        // `'scope`, inside `'env`; cudarc's pending writes of it are done
        // (host wait above), so any stream may read it.
        Ok(unsafe { DeviceSlice::from_raw_parts_on(addr as *const T, len, device) })
    }

    /// Lend `dst` for writing: cudarc's pending reads and writes of it
    /// finish first (host wait); the view is valid until the scope's
    /// closure returns.
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub fn write<T, S>(&'scope self, dst: &'env mut S) -> Result<DeviceSliceMut<'scope, T>>
    where
        T: DataType + DeviceRepr,
        S: DevicePtrMut<T>,
    {
        // SAFETY: as in `read`.
        let g = unsafe { CudarcWrite::new(dst, self.lent.stream.cudarc()) }?;
        let (addr, len, device, sync) = g.into_parts();
        self.lent.syncs.borrow_mut().push(sync);
        self.settle()?;
        // SAFETY: as in `read`, and `dst` is borrowed exclusively for
        // `'env`, so this is the only view of it.
        Ok(unsafe { DeviceSliceMut::from_raw_parts_mut_on(addr as *mut T, len, device) })
    }
}

impl CudarcStream {
    /// Lend cudarc memory safely: `f` gets a [`CudarcScope`] whose
    /// [`read`](CudarcScope::read) / [`write`](CudarcScope::write) give
    /// views valid until `f` returns, usable on any stream of the device.
    /// Each lend waits for cudarc's pending work on that memory, and the end
    /// of the scope waits for the whole device (`cuCtxSynchronize`) before
    /// cudarc records its events, so neither a view used on another stream
    /// nor a leaked value can let cudarc free or rewrite the memory under
    /// this crate's work. For hot loops without host waits, see the
    /// `unsafe` [`read`](Self::read) / [`write`](Self::write).
    ///
    /// # Errors
    /// `f`'s error, or [`Error::Driver`](crate::Error::Driver) when the
    /// final synchronization fails.
    pub fn scope<'env, R>(
        &'env self,
        f: impl for<'scope> FnOnce(&'scope CudarcScope<'scope, 'env>) -> Result<R>,
    ) -> Result<R> {
        let lent = Lent {
            stream: self,
            syncs: RefCell::new(Vec::new()),
        };
        let r = f(&CudarcScope {
            lent: &lent,
            _scope: PhantomData,
        });
        let synced = lent.finish();
        let r = r?;
        synced.map(|()| r)
    }
}
