//! Making communicators: `init_rank`, `init_rank_timeout` (non-blocking,
//! with a deadline) and `init_all`, and the `NCCL_COMM_BLOCKING` rule.

use std::ffi::c_int;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::time::Duration;

use super::super::clique::{self, Clique, Member};
use super::super::depth::{self, WHY_LIFECYCLE};
use super::super::progress::{self, DEFAULT_COMM_TIMEOUT, Deadline, Settled};
use super::super::{Ranks, UniqueId, api, nccl_call, sys};
use super::{Communicator, Mode, abort_raw, config, nccl_error, with_rank};
use crate::error::{Error, Result};
use crate::runtime::Device;

/// `NCCL_COMM_BLOCKING`'s value as NCCL reads it (`strtoll` with base 0:
/// decimal, `0x` hex, leading-zero octal; the digits that parse), `None`
/// when none parse.
pub(crate) fn parse_nccl_int(text: &str) -> Option<i64> {
    let t = text.trim_start();
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let (radix, digits) = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        (16, h)
    } else if t.len() > 1 && t.starts_with('0') {
        (8, &t[1..])
    } else {
        (10, t)
    };
    let end = digits
        .char_indices()
        .find(|(_, c)| !c.is_digit(radix))
        .map_or(digits.len(), |(i, _)| i);
    let v = match i64::from_str_radix(digits.get(..end)?, radix) {
        Ok(v) => v,
        // "0" alone, or "0" followed by no octal digit.
        Err(_) if radix == 8 || t.starts_with('0') => 0,
        Err(_) => return None,
    };
    Some(if neg { v.saturating_neg() } else { v })
}

/// `init_rank_timeout` cannot bound a communicator that the environment
/// forces blocking (`NCCL_COMM_BLOCKING=1`): its initialisation, calls and
/// finalize would all wait without a deadline. NCCL reads the value as an
/// `int64_t` (`ncclParamCommBlocking`, `strtoll`; out of range: its
/// default) and stores it in an `int` (`int blockingEnv` in
/// `parseCommConfig`), so only its low 32 bits count: `4294967297` forces
/// blocking as `1` does.
///
/// # Errors
/// [`Error::InvalidArgument`] naming `NCCL_COMM_BLOCKING` and its value.
pub(crate) fn refuse_forced_blocking(value: Option<&str>) -> Result<()> {
    if let Some(v) = value
        && parse_nccl_int(v).is_some_and(|n| n.rem_euclid(1 << 32) == 1)
    {
        return Err(Error::invalid(
            "NCCL_COMM_BLOCKING",
            "must not force blocking communicators for Communicator::init_rank_timeout \
             (its deadline bounds only non-blocking ones); unset it, or use init_rank",
            v,
        ));
    }
    Ok(())
}

impl Communicator {
    /// Rank `rank` of a `size`-rank communicator named by `id`, on the
    /// current device (`ncclCommInitRank`). Every rank must call this with
    /// the same `id` and `size`; the call returns once all have joined (it
    /// waits for them without a deadline: see
    /// [`init_rank_timeout`](Self::init_rank_timeout)).
    ///
    /// # Errors
    /// [`Error::InGroup`] inside a [`group`](crate::nccl::group);
    /// [`Error::InvalidArgument`] when `size` is 0 or `rank >= size` (before
    /// NCCL is called); [`Error::NoDevice`] without a usable device (before
    /// NCCL is called); [`Error::Nccl`] naming the rank when NCCL fails
    /// (the other ranks never came).
    ///
    /// # Safety
    /// Every rank of the communicator in another process is a program
    /// trusted as this one is, and makes the same calls as this rank's
    /// peers in this process would: the same collectives in the same order,
    /// each with the same kind, element type, count, reduction and root,
    /// and every send paired with a recv of the same size (see *Counts agree
    /// across ranks* on [`Communicator`]). NCCL compares nothing, and a
    /// peer whose count is larger writes past this rank's buffer. The crate
    /// compares the ranks in this process (one `id` used from several
    /// threads); [`init_all`](Self::init_all) makes a communicator with
    /// every rank in this process, safely. Whoever can reach the way the
    /// `id` is shared can join as a rank: share it only with the job's
    /// ranks (`nccl::launch`'s rendezvous token).
    #[doc(alias = "ncclCommInitRank")]
    pub unsafe fn init_rank(id: &UniqueId, rank: usize, size: usize) -> Result<Self> {
        depth::refuse("Communicator::init_rank", WHY_LIFECYCLE)?;
        Ranks::new(rank, size)?;
        let api = api()?;
        // Without a device NCCL answers only ncclUnhandledCudaError (and
        // may leave its internal group open, see `init_rank_timeout`): the
        // runtime is asked first, for a typed `NoDevice`.
        if Device::count()? == 0 {
            return Err(crate::no_device::zero_devices());
        }
        Device::current()?;
        // A member before NCCL is called: see `clique::join`.
        let member = clique::join(&id.to_bytes(), rank, size);
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
        match unsafe { Self::from_raw(raw) } {
            Ok(mut c) => {
                c.known_blocking();
                c.join(member);
                Ok(c)
            }
            Err(e) => {
                if !raw.is_null() {
                    // SAFETY: NCCL made it and no wrapper owns it (from_raw
                    // leaves ownership with the caller on error).
                    unsafe { abort_raw(raw) };
                }
                Err(with_rank(e, rank))
            }
        }
    }

    /// [`init_rank`](Self::init_rank) with a deadline: a *non-blocking*
    /// communicator (`ncclCommInitRankConfig` with `blocking = 0`) whose
    /// initialisation is polled until it is ready. When `timeout` passes
    /// first (a peer never came, or died), it is aborted and
    /// [`Error::Timeout`] returned. The communicator keeps `timeout` as its
    /// own [`timeout`](Self::timeout) (see the type's docs on non-blocking
    /// communicators and `Drop`).
    ///
    /// # Errors
    /// As [`init_rank`](Self::init_rank); [`Error::NoDevice`] without a
    /// usable device (or [`Error::Cuda`] when no device can be made
    /// current), before NCCL is called;
    /// [`Error::Timeout`] at the deadline; [`Error::MissingSymbol`] with an
    /// NCCL older than 2.14.
    ///
    /// # Safety
    /// As [`init_rank`](Self::init_rank): every rank in another process is
    /// trusted and makes the same calls.
    #[doc(alias = "ncclCommInitRankConfig")]
    pub unsafe fn init_rank_timeout(
        id: &UniqueId,
        rank: usize,
        size: usize,
        timeout: Duration,
    ) -> Result<Self> {
        depth::refuse("Communicator::init_rank_timeout", WHY_LIFECYCLE)?;
        Ranks::new(rank, size)?;
        refuse_forced_blocking(std::env::var("NCCL_COMM_BLOCKING").ok().as_deref())?;
        let api = api()?;
        // NCCL opens a group inside ncclCommInitRankConfig and, when
        // cudaGetDevice fails there, returns without closing it (NCCL
        // 2.32.3), leaving later calls on this thread deferred. So the
        // device is checked here first.
        if Device::count()? == 0 {
            return Err(crate::no_device::zero_devices());
        }
        Device::current()?;
        // A member before NCCL is called: see `clique::join`.
        let member = clique::join(&id.to_bytes(), rank, size);
        let deadline = Deadline::after(timeout);
        let mut cfg = config(false);
        let mut raw: sys::ncclComm_t = ptr::null_mut();
        // SAFETY: `raw` and `cfg` are valid for the call (NCCL copies the
        // config before returning and writes `raw` before returning); rank
        // and size were checked and fit c_int; the id is passed by value.
        let r = unsafe {
            api.ncclCommInitRankConfig(
                &mut raw,
                size as c_int,
                id.as_raw(),
                rank as c_int,
                &mut cfg,
            )
        }?;
        let call = "ncclCommInitRankConfig";
        if r != sys::ncclResult_t::ncclSuccess && r != sys::ncclResult_t::ncclInProgress {
            if !raw.is_null() {
                // SAFETY: NCCL made it and nothing else owns it.
                unsafe { abort_raw(raw) };
            } else if r == sys::ncclResult_t::ncclUnhandledCudaError {
                // The early return above, should the device have gone away
                // since the check: close the group NCCL left open (no group
                // of this crate is open on this thread: refused above; with
                // none open NCCL answers ncclInvalidUsage and does nothing).
                // SAFETY: takes no arguments.
                let _ = unsafe { api.ncclGroupEnd() };
            }
            return Err(with_rank(nccl_error(call, r), rank));
        }
        let Some(nn) = NonNull::new(raw) else {
            return Err(with_rank(
                nccl_error(call, sys::ncclResult_t::ncclInternalError),
                rank,
            ));
        };
        // SAFETY: `raw` is live and ours.
        let settled = unsafe { progress::settle(raw, &deadline) };
        let fail = match settled {
            Ok(Settled::Ready) => None,
            Ok(Settled::Failed(code)) => Some(nccl_error(call, code).with_context(
                "asynchronous error while initialising; the communicator was aborted",
            )),
            Ok(Settled::TimedOut) => Some(Error::Timeout {
                what: format!(
                    "{call} (rank {rank} of {size}; every rank must join with the same id); \
                     the communicator was aborted"
                ),
                waited: deadline.waited(),
                rank: u32::try_from(rank).ok(),
            }),
            Err(e) => Some(e),
        };
        if let Some(e) = fail {
            // SAFETY: NCCL made it and nothing else owns it; abort joins
            // NCCL's initialisation thread.
            unsafe { abort_raw(raw) };
            return Err(with_rank(e, rank));
        }
        // SAFETY: a live, ready communicator that we now own.
        let mut c = match unsafe { Self::wrap(nn) } {
            Ok(c) => c,
            Err(e) => {
                // SAFETY: as above.
                unsafe { abort_raw(raw) };
                return Err(with_rank(e, rank));
            }
        };
        // NCCL answers a non-blocking initialisation ncclInProgress; a
        // plain success means something forced the communicator blocking
        // (NCCL's configuration file): then Drop must not finalize it.
        c.mode.set(if r == sys::ncclResult_t::ncclSuccess {
            Mode::Blocking
        } else {
            Mode::NonBlocking
        });
        c.timeout = timeout;
        c.join(member);
        Ok(c)
    }

    /// One communicator per device of `devices`, all in this process
    /// (`ncclCommInitAll`): rank `i` is `devices[i]`. Collectives on them
    /// from one thread must be issued inside one [`group`](crate::nccl::group).
    ///
    /// # Errors
    /// [`Error::InGroup`] inside a [`group`](crate::nccl::group);
    /// [`Error::InvalidArgument`] when `devices` is empty or names a device
    /// twice; [`Error::NoDevice`] when NCCL fails and the runtime sees no
    /// usable device; [`Error::Nccl`] when NCCL fails otherwise.
    #[doc(alias = "ncclCommInitAll")]
    pub fn init_all(devices: &[Device]) -> Result<Vec<Self>> {
        depth::refuse("Communicator::init_all", WHY_LIFECYCLE)?;
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
        let n = list.len();
        // On the heap, read atomically, and leaked unless NCCL is known to
        // be done with it: with `NCCL_COMM_BLOCKING=0` in the environment
        // ncclCommInitAll answers ncclInProgress and NCCL's threads finish
        // the communicators later, with a pointer to these slots (2.17).
        let slots: Box<[AtomicPtr<sys::ncclComm>]> =
            (0..n).map(|_| AtomicPtr::new(ptr::null_mut())).collect();
        // SAFETY: `slots` has room for `n` communicators (AtomicPtr has the
        // layout of a pointer) and stays valid while NCCL may write it (it
        // is leaked on every path where that is not known); `list` holds
        // `n` distinct device ordinals; n fits c_int (checked above).
        let r = unsafe {
            api.ncclCommInitAll(
                slots.as_ptr() as *mut sys::ncclComm_t,
                n as c_int,
                list.as_ptr(),
            )
        }?;
        let in_progress = r == sys::ncclResult_t::ncclInProgress;
        if !in_progress {
            // A failure NCCL reported at once: nothing of it runs on.
            super::super::check_result("ncclCommInitAll", r).map_err(crate::no_device::explain)?;
        }
        // Every slot is written before ncclCommInitAll returns (each
        // rank's communicator is allocated before its job starts).
        let raws: Vec<sys::ncclComm_t> = slots.iter().map(|p| p.load(Ordering::Acquire)).collect();
        if in_progress {
            let deadline = Deadline::after(DEFAULT_COMM_TIMEOUT);
            let mut failed = None;
            for (i, &raw) in raws.iter().enumerate() {
                let e = if raw.is_null() {
                    Some(nccl_error(
                        "ncclCommInitAll",
                        sys::ncclResult_t::ncclInternalError,
                    ))
                } else {
                    // SAFETY: a live communicator NCCL made for us; no NCCL
                    // group is open on this thread.
                    match unsafe { progress::settle(raw, &deadline) } {
                        Ok(Settled::Ready) => None,
                        Ok(Settled::Failed(code)) => Some(nccl_error("ncclCommInitAll", code)),
                        Ok(Settled::TimedOut) => Some(Error::Timeout {
                            what: format!(
                                "ncclCommInitAll of {n} devices (non-blocking: NCCL_COMM_BLOCKING=0 \
                                 in the environment); the communicators were aborted"
                            ),
                            waited: deadline.waited(),
                            rank: u32::try_from(i).ok(),
                        }),
                        Err(e) => Some(e),
                    }
                };
                if let Some(e) = e {
                    failed = Some(with_rank(e, i));
                    break;
                }
            }
            if let Some(e) = failed {
                for &raw in &raws {
                    if !raw.is_null() {
                        // SAFETY: live communicators NCCL made that no
                        // wrapper owns; abort joins NCCL's threads.
                        unsafe { abort_raw(raw) };
                    }
                }
                // NCCL's threads were told to stop, but whether they still
                // hold the slots is not known: never freed.
                std::mem::forget(slots);
                return Err(e);
            }
        }
        drop(slots);
        let mut members: Vec<Option<Member>> = Clique::all_local(n).into_iter().map(Some).collect();
        let mut out = Vec::with_capacity(raws.len());
        let mut rest = raws.into_iter();
        while let Some(raw) = rest.next() {
            // SAFETY: each is a live, ready communicator NCCL made for us.
            match unsafe { Self::from_raw(raw) } {
                Ok(mut c) => {
                    if in_progress {
                        c.mark_non_blocking();
                    } else {
                        c.known_blocking();
                    }
                    if let Some(m) = members.get_mut(c.rank()).and_then(Option::take) {
                        c.join(m);
                    }
                    out.push(c);
                }
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
}
