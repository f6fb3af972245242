//! Communicators: creation, queries, split, abort and destruction.

use std::ffi::c_int;
use std::fmt;
use std::ptr::{self, NonNull};

use super::{Ranks, UniqueId, api, nccl_call, sys, text};
use crate::error::{Error, Result};
use crate::runtime::Device;

/// One rank of an NCCL communicator, bound to one device (`ncclComm_t`).
///
/// Made from a shared [`UniqueId`] by every rank ([`init_rank`](Self::init_rank)),
/// for all local devices at once ([`init_all`](Self::init_all)), or from
/// another communicator ([`split`](Self::split)). Dropping it destroys it
/// (aborting instead when it holds an asynchronous error, so a failed job
/// cannot hang in `Drop`); [`destroy`](Self::destroy),
/// [`finalize`](Self::finalize) and [`abort`](Self::abort) report errors.
///
/// `Send`, not `Sync`: NCCL does not allow one communicator to be used from
/// several threads at the same time.
pub struct Communicator {
    raw: NonNull<sys::ncclComm>,
    ranks: Ranks,
    device: usize,
}

// SAFETY: a communicator may be used from any host thread, one at a time
// (NCCL's user guide, "Thread safety": concurrent use of the same
// communicator from several threads is not supported; handing it to another
// thread is). `Communicator` is not `Sync`, so use is never concurrent.
unsafe impl Send for Communicator {}

impl fmt::Debug for Communicator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Communicator")
            .field("raw", &self.raw)
            .field("rank", &self.ranks.rank())
            .field("size", &self.ranks.size())
            .field("device", &self.device)
            .finish()
    }
}

impl Communicator {
    /// Rank `rank` of a `size`-rank communicator named by `id`, on the
    /// current device (`ncclCommInitRank`). Every rank must call this with
    /// the same `id` and `size`; the call returns once all have joined.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `size` is 0 or `rank >= size` (before
    /// NCCL is called); [`Error::Nccl`] naming the rank when NCCL fails (no
    /// device, the other ranks never came).
    #[doc(alias = "ncclCommInitRank")]
    pub fn init_rank(id: &UniqueId, rank: usize, size: usize) -> Result<Self> {
        Ranks::new(rank, size)?;
        let api = api()?;
        let mut raw: sys::ncclComm_t = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; rank and size were checked
        // and fit c_int (Ranks::new); the id is passed by value.
        unsafe {
            nccl_call!(
                api,
                ncclCommInitRank(&mut raw, size as c_int, id.as_raw(), rank as c_int)
            )
        }
        .map_err(|e| with_rank(e, rank))?;
        // SAFETY: NCCL returned a live communicator that we now own.
        unsafe { Self::from_raw(raw) }
    }

    /// One communicator per device of `devices`, all in this process
    /// (`ncclCommInitAll`): rank `i` is `devices[i]`. Collectives on them
    /// from one thread must be issued inside one [`group`](super::group).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `devices` is empty or names a device
    /// twice; [`Error::Nccl`] when NCCL fails.
    #[doc(alias = "ncclCommInitAll")]
    pub fn init_all(devices: &[Device]) -> Result<Vec<Self>> {
        Ranks::new(0, devices.len())
            .map_err(|_| Error::invalid("devices", "must name at least one device", "[]"))?;
        let mut list: Vec<c_int> = Vec::with_capacity(devices.len());
        for (i, d) in devices.iter().enumerate() {
            let o = d.ordinal() as c_int;
            if list.contains(&o) {
                return Err(Error::invalid(
                    format!("devices[{i}]"),
                    "each device may appear once",
                    d.ordinal(),
                ));
            }
            list.push(o);
        }
        let api = api()?;
        let mut raws: Vec<sys::ncclComm_t> = vec![ptr::null_mut(); devices.len()];
        // SAFETY: `raws` has room for `len` communicators and `list` holds
        // `len` distinct device ordinals; len fits c_int (checked above).
        unsafe {
            nccl_call!(
                api,
                ncclCommInitAll(raws.as_mut_ptr(), list.len() as c_int, list.as_ptr())
            )
        }?;
        let mut out = Vec::with_capacity(raws.len());
        let mut rest = raws.into_iter();
        while let Some(raw) = rest.next() {
            // SAFETY: each is a live communicator NCCL made for us.
            match unsafe { Self::from_raw(raw) } {
                Ok(c) => out.push(c),
                Err(e) => {
                    // Those already wrapped are destroyed by their Drop; the
                    // others (this one included) here.
                    for r in std::iter::once(raw).chain(rest) {
                        if !r.is_null() {
                            // SAFETY: live communicators NCCL made that no
                            // wrapper owns; the status is ignored, the error
                            // that matters is `e`.
                            let _ = unsafe { api.ncclCommDestroy(r) };
                        }
                    }
                    return Err(e);
                }
            }
        }
        Ok(out)
    }

    /// Wrap a communicator made elsewhere, taking ownership (it is
    /// destroyed on drop). Its rank, size and device are read from NCCL.
    ///
    /// # Safety
    /// `raw` must be a live communicator that nothing else destroys or uses
    /// concurrently.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a null pointer, [`Error::Nccl`] when
    /// NCCL cannot say its rank, size or device.
    pub unsafe fn from_raw(raw: sys::ncclComm_t) -> Result<Self> {
        let raw =
            NonNull::new(raw).ok_or_else(|| Error::invalid("raw", "must not be null", "null"))?;
        let api = api()?;
        let (mut rank, mut size, mut dev): (c_int, c_int, c_int) = (0, 0, 0);
        // SAFETY: `raw` is live (caller); the out-pointers are valid.
        unsafe { nccl_call!(api, ncclCommUserRank(raw.as_ptr(), &mut rank)) }?;
        // SAFETY: as above.
        unsafe { nccl_call!(api, ncclCommCount(raw.as_ptr(), &mut size)) }?;
        // SAFETY: as above.
        unsafe { nccl_call!(api, ncclCommCuDevice(raw.as_ptr(), &mut dev)) }?;
        let ranks = Ranks::new(rank.max(0) as usize, size.max(0) as usize)?;
        Ok(Communicator {
            raw,
            ranks,
            device: dev.max(0) as usize,
        })
    }

    /// The raw `ncclComm_t`, for calls this crate does not wrap. It stays
    /// owned by `self`.
    pub fn as_raw(&self) -> sys::ncclComm_t {
        self.raw.as_ptr()
    }

    /// Give up ownership: the caller must destroy the communicator.
    pub fn into_raw(self) -> sys::ncclComm_t {
        let raw = self.raw.as_ptr();
        std::mem::forget(self);
        raw
    }

    /// This process's rank.
    #[doc(alias = "ncclCommUserRank")]
    pub fn rank(&self) -> usize {
        self.ranks.rank()
    }

    /// The number of ranks.
    #[doc(alias = "ncclCommCount")]
    pub fn size(&self) -> usize {
        self.ranks.size()
    }

    /// Rank and size, with the argument rules of every collective.
    pub fn ranks(&self) -> Ranks {
        self.ranks
    }

    /// The device this rank runs on, made current on the calling thread
    /// (work for this communicator must be queued with it current).
    ///
    /// # Errors
    /// As [`Device::new`].
    #[doc(alias = "ncclCommCuDevice")]
    pub fn device(&self) -> Result<Device> {
        Device::new(self.device)
    }

    /// The CUDA ordinal of this rank's device (no call made).
    pub fn device_ordinal(&self) -> usize {
        self.device
    }

    /// An error NCCL met while running work queued earlier (a peer died, a
    /// network failed), or `None` (`ncclCommGetAsyncError`). After an
    /// error, the communicator can only be [aborted](Self::abort).
    ///
    /// # Errors
    /// [`Error::Nccl`] when the query itself fails.
    #[doc(alias = "ncclCommGetAsyncError")]
    pub fn async_error(&self) -> Result<Option<Error>> {
        let api = api()?;
        let mut state = sys::ncclResult_t::ncclSuccess;
        // SAFETY: the communicator is live; `state` is a valid out-pointer.
        unsafe { nccl_call!(api, ncclCommGetAsyncError(self.as_raw(), &mut state)) }
            .map_err(|e| self.annotate(e))?;
        Ok(super::check_result("ncclCommGetAsyncError", state)
            .err()
            .map(|e| {
                self.annotate(e)
                    .with_context("asynchronous error of queued work")
            }))
    }

    /// Split into sub-communicators (`ncclCommSplit`). Every rank calls it;
    /// ranks passing the same `color` end up together, ordered by `key`
    /// (then by their old rank). `color: None` takes no part and gets
    /// `None` back.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `color` does not fit a non-negative
    /// C int; [`Error::Nccl`] when NCCL fails.
    #[doc(alias = "ncclCommSplit")]
    pub fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Self>> {
        let color = match color {
            None => sys::NCCL_SPLIT_NOCOLOR,
            Some(c) => c_int::try_from(c)
                .map_err(|_| Error::invalid("color", "must be at most i32::MAX", c))?,
        };
        let api = api()?;
        let mut new: sys::ncclComm_t = ptr::null_mut();
        // SAFETY: the communicator is live; `new` is a valid out-pointer;
        // a null config asks for the parent's configuration.
        unsafe {
            nccl_call!(
                api,
                ncclCommSplit(self.as_raw(), color, key, &mut new, ptr::null_mut())
            )
        }
        .map_err(|e| self.annotate(e))?;
        if new.is_null() {
            return Ok(None);
        }
        // SAFETY: NCCL made a live communicator for us.
        unsafe { Self::from_raw(new) }.map(Some)
    }

    /// Flush outstanding work and release the communicator's resources,
    /// waiting for the peers (`ncclCommFinalize`); then destroy it.
    ///
    /// # Errors
    /// [`Error::Nccl`]; the communicator is destroyed (or aborted) either way.
    #[doc(alias = "ncclCommFinalize")]
    pub fn finalize(self) -> Result<()> {
        let api = api()?;
        // SAFETY: the communicator is live and owned by `self`.
        let r = unsafe { nccl_call!(api, ncclCommFinalize(self.as_raw())) }
            .map_err(|e| self.annotate(e));
        match r {
            Ok(()) => self.destroy(),
            Err(e) => {
                let _ = self.abort();
                Err(e)
            }
        }
    }

    /// Destroy the communicator, reporting failure (`ncclCommDestroy`).
    ///
    /// # Errors
    /// [`Error::Nccl`].
    #[doc(alias = "ncclCommDestroy")]
    pub fn destroy(self) -> Result<()> {
        let rank = self.rank();
        let raw = self.into_raw();
        let api = api()?;
        // SAFETY: `raw` is live and owned; ownership ends here.
        unsafe { nccl_call!(api, ncclCommDestroy(raw)) }.map_err(|e| with_rank(e, rank))
    }

    /// Stop all work and free the communicator at once, without waiting
    /// for the peers (`ncclCommAbort`): the way out after an error.
    ///
    /// # Errors
    /// [`Error::Nccl`].
    #[doc(alias = "ncclCommAbort")]
    pub fn abort(self) -> Result<()> {
        let rank = self.rank();
        let raw = self.into_raw();
        let api = api()?;
        // SAFETY: `raw` is live and owned; ownership ends here.
        unsafe { nccl_call!(api, ncclCommAbort(raw)) }.map_err(|e| with_rank(e, rank))
    }

    /// Add this rank and `ncclGetLastError` to an NCCL error.
    pub(crate) fn annotate(&self, e: Error) -> Error {
        let e = with_rank(e, self.rank());
        match e {
            Error::Nccl {
                call,
                code,
                name,
                text: t,
                last_error: None,
                rank,
                context,
            } => {
                let last = api().ok().and_then(|api| {
                    // SAFETY: the communicator is live; the returned string
                    // is NCCL's and is copied at once.
                    unsafe { api.ncclGetLastError(self.as_raw()) }
                        .ok()
                        .map(text)
                        .filter(|s| !s.trim().is_empty())
                });
                Error::Nccl {
                    call,
                    code,
                    name,
                    text: t,
                    last_error: last.map(|s| s.trim().into()),
                    rank,
                    context,
                }
            }
            other => other,
        }
    }
}

pub(crate) fn with_rank(e: Error, r: usize) -> Error {
    match e {
        Error::Nccl {
            call,
            code,
            name,
            text,
            last_error,
            rank: _,
            context,
        } => Error::Nccl {
            call,
            code,
            name,
            text,
            last_error,
            rank: u32::try_from(r).ok(),
            context,
        },
        other => other,
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        let Ok(api) = api() else { return };
        let raw = self.raw.as_ptr();
        let mut state = sys::ncclResult_t::ncclSuccess;
        // SAFETY: the communicator is live and owned; `state` is a valid
        // out-pointer.
        let failed = unsafe { api.ncclCommGetAsyncError(raw, &mut state) }
            .map(|r| r != sys::ncclResult_t::ncclSuccess || state != sys::ncclResult_t::ncclSuccess)
            .unwrap_or(true);
        // Destroy waits for the peers; after an error it could wait forever,
        // so a failed communicator is aborted. Statuses are ignored: Drop
        // must not fail.
        if failed {
            // SAFETY: live and owned; ownership ends here.
            let _ = unsafe { api.ncclCommAbort(raw) };
        } else {
            // SAFETY: as above.
            let _ = unsafe { api.ncclCommDestroy(raw) };
        }
    }
}
