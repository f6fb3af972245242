//! A group's calls, recorded in Rust and issued all or none: the engine
//! behind [`group`](super::group). The issuing goes through [`Exec`], so
//! the rules are tested without NCCL or a device.

use std::ptr;
use std::sync::Arc;

use super::clique::{self, Member};
use super::comm::{Communicator, FamilyUse, Mode};
use super::op::{Call, Op};
use super::{api, nccl_call, sys};
use crate::error::{Error, Result};
use crate::runtime::{QueueHold, Stream};

/// One recorded call, with the communicator and stream it runs on, all
/// borrowed for the whole group.
#[derive(Debug)]
pub(crate) struct Recorded<'env> {
    pub(crate) comm: &'env Communicator,
    pub(crate) stream: &'env Stream,
    pub(crate) call: Call,
}

/// What issues a group: NCCL ([`Nccl`]), or a test double.
pub(crate) trait Exec {
    /// Check that every call can be issued (live communicators) before
    /// anything is.
    fn ready(&mut self, calls: &[&Recorded<'_>]) -> Result<()>;
    /// `ncclGroupStart`.
    fn start(&mut self) -> Result<()>;
    /// Issue one call between `start` and `end`.
    fn issue(&mut self, rec: &Recorded<'_>) -> Result<()>;
    /// Make the open group fail at `end`, so NCCL launches none of it (after
    /// a failure NCCL did not see).
    fn poison(&mut self);
    /// `ncclGroupEnd`; `Ok(true)` when NCCL answered `ncclInProgress`
    /// (non-blocking communicators).
    fn end(&mut self) -> Result<bool>;
    /// Poll the communicators of a group that ended in progress until it
    /// has launched.
    fn settle(&mut self, calls: &[&Recorded<'_>]) -> Result<()>;
}

/// Issue `calls` as one NCCL group: every call between one
/// `ncclGroupStart` and its `ncclGroupEnd`. Calls of zero elements were
/// checked when recorded and are not issued; with nothing left, NCCL is not
/// called. When a call fails the group is still ended, and NCCL launches
/// nothing it deferred to the group's end (it launches nothing after an
/// error of a call inside a group; a failure it did not see poisons the
/// group first); that call's error is returned. Not deferred: a collective
/// on a communicator of one rank, which NCCL (2.21 on, 2.28.9 included:
/// `taskAppend` in `src/enqueue.cc` calls `ncclLaunchOneRank`) issues as a
/// copy when it is called; the error names such calls issued before the
/// refused one as launched ([`launched_at_call`]). When `ncclGroupEnd` itself fails (or a non-blocking
/// group fails while launching), NCCL may have launched part of the group
/// (it launches communicator by communicator), and the error says so.
pub(crate) fn issue_all(exec: &mut dyn Exec, calls: &[Recorded<'_>]) -> Result<()> {
    let live: Vec<&Recorded<'_>> = calls.iter().filter(|r| r.call.count() > 0).collect();
    check_self_pairs(&live)?;
    check_modes(&live)?;
    // Compared with the calls of the ranks in this process (every call,
    // 0 elements too, so positions stay in step), before NCCL sees any.
    let posted: Vec<(&Member, &Call)> = calls
        .iter()
        .filter_map(|r| r.comm.member().map(|m| (m, &r.call)))
        .collect();
    if live.is_empty() {
        clique::post(&posted)?;
        return Ok(());
    }
    // Held until the group (and its settle) returned: no capture of a
    // stream of the group begins between this check and the launch (the
    // check at recording time may be long past), and no other thread uses
    // a member of one of the groups' split families meanwhile.
    // The families first: taking one may wait for another thread, and the
    // streams are then checked as they are when the launch follows.
    let _families = take_families(&live)?;
    let _holds = hold_streams(&live)?;
    exec.ready(&live)?;
    clique::post(&posted)?;
    // From here on a failure leaves this rank's calls posted but (perhaps)
    // not launched: its clique is out of step.
    let out_of_step = |e: Error| {
        for r in calls {
            r.comm.out_of_step(&r.call);
            r.comm.poison_if_non_blocking();
        }
        e
    };
    exec.start().map_err(out_of_step)?;
    let mut failed = None;
    for (i, rec) in live.iter().enumerate() {
        if let Err(e) = exec.issue(rec) {
            exec.poison();
            let early: Vec<String> = live
                .iter()
                .take(i)
                .enumerate()
                .filter(|(_, r)| launched_at_call(r))
                .map(|(k, _)| (k + 1).to_string())
                .collect();
            let launched = if early.is_empty() {
                "NCCL launched none of the group".to_string()
            } else {
                format!(
                    "NCCL launched none of the rest of the group, but call(s) {} (collectives on a \
                     communicator of one rank, which NCCL issues as copies when called, not at \
                     the group's end) were launched",
                    early.join(", ")
                )
            };
            failed = Some(add_note(
                e,
                &format!(
                    "call {} of {} in the group ({}); {launched}",
                    i + 1,
                    live.len(),
                    rec.call.describe()
                ),
            ));
            break;
        }
    }
    let end = exec.end();
    if let Some(e) = failed {
        return Err(out_of_step(e));
    }
    let partial = |e: Error| {
        add_note(
            e,
            &format!(
                "the group of {} call(s) failed after NCCL had accepted every call; NCCL launches \
             a group communicator by communicator, kernel by kernel, so part of it may have \
             been launched: wait for (or abort) its communicators before reusing its buffers",
                live.len()
            ),
        )
    };
    if end.map_err(partial).map_err(out_of_step)? {
        exec.settle(&live).map_err(partial).map_err(out_of_step)?;
    }
    Ok(())
}

/// Whether NCCL runs `rec` when it is called inside a group instead of at
/// the group's end: a collective (not a send or receive) on a communicator
/// of one rank (NCCL 2.21 and later, `taskAppend` in `src/enqueue.cc`:
/// `ncclLaunchOneRank`, a copy on the call's stream).
pub(crate) fn launched_at_call(rec: &Recorded<'_>) -> bool {
    rec.comm.size() == 1 && !matches!(rec.call.op, Op::Send { .. } | Op::Recv { .. })
}

/// Check every stream of the group again, at issue time, and count the
/// group as queueing on each until the holds are dropped.
///
/// # Errors
/// As [`Communicator::check_stream`] (a capture of a stream begun by
/// another thread since the call was recorded:
/// [`Error::CaptureUnsafe`]).
pub(crate) fn hold_streams(calls: &[&Recorded<'_>]) -> Result<Vec<QueueHold>> {
    calls
        .iter()
        .map(|r| r.comm.check_stream(r.stream))
        .collect()
}

/// Take the split family of every communicator of the group, each once,
/// in one fixed order (by address), so two threads' groups over members
/// of the same families never wait on each other in a cycle.
///
/// # Errors
/// As [`Communicator::enter_family`].
pub(crate) fn take_families(calls: &[&Recorded<'_>]) -> Result<Vec<FamilyUse>> {
    let mut comms: Vec<&Communicator> = calls.iter().map(|r| r.comm).collect();
    comms.sort_by_key(|c| Arc::as_ptr(c.family()) as usize);
    comms.dedup_by(|a, b| Arc::ptr_eq(a.family(), b.family()));
    comms.iter().map(|c| c.enter_family()).collect()
}

/// Append `note` to an error's context (or, for a timeout, to what was
/// waited for), keeping what it said already; other kinds are returned as
/// they are.
pub(crate) fn add_note(mut e: Error, note: &str) -> Error {
    match &mut e {
        Error::Nccl { context, .. }
        | Error::Cuda { context, .. }
        | Error::NoDevice {
            detail: context, ..
        } => {
            *context = Some(match context.take() {
                Some(c) => format!("{c}; {note}"),
                None => note.to_string(),
            });
        }
        Error::Timeout { what, .. } => {
            what.push_str("; ");
            what.push_str(note);
        }
        _ => {}
    }
    e
}

/// A group may not mix blocking and non-blocking communicators: NCCL
/// refuses that only for communicator creation and destruction; for
/// collectives it runs the whole group in the mode of the last
/// communicator joined, and a blocking one launched by a non-blocking group
/// is left `ncclInProgress` for good. Communicators whose mode is not known
/// (from `from_raw`, not seen in progress) pass.
///
/// # Errors
/// [`Error::InvalidArgument`] naming the two calls.
pub(crate) fn check_modes(calls: &[&Recorded<'_>]) -> Result<()> {
    let first = |m: Mode| calls.iter().position(|r| r.comm.mode() == m);
    if let (Some(b), Some(n)) = (first(Mode::Blocking), first(Mode::NonBlocking)) {
        return Err(Error::invalid(
            "group",
            "must not mix blocking and non-blocking communicators (NCCL would run the \
             group in one mode and leave the other communicators unusable); use one group \
             per kind",
            format!(
                "call {} on a blocking communicator, call {} on a non-blocking one",
                b + 1,
                n + 1
            ),
        ));
    }
    Ok(())
}

/// Sends to oneself and receives from oneself of one communicator are
/// matched by NCCL in order, byte for byte: each must have its partner of
/// the same size (NCCL does not check the sizes of a self copy, and refuses
/// or hangs on one without a partner).
///
/// # Errors
/// [`Error::Mismatch`] naming the pair and both sizes.
pub(crate) fn check_self_pairs(calls: &[&Recorded<'_>]) -> Result<()> {
    // (communicator, sends in order, receives in order), bytes each.
    let mut per_comm: Vec<(*const Communicator, Vec<usize>, Vec<usize>)> = Vec::new();
    for rec in calls {
        let me = i32::try_from(rec.comm.rank()).ok();
        let (is_send, peer) = match rec.call.op {
            Op::Send { peer, .. } => (true, peer),
            Op::Recv { peer, .. } => (false, peer),
            _ => continue,
        };
        if Some(peer) != me {
            continue;
        }
        let key: *const Communicator = rec.comm;
        let i = match per_comm.iter().position(|(k, _, _)| *k == key) {
            Some(i) => i,
            None => {
                per_comm.push((key, Vec::new(), Vec::new()));
                per_comm.len() - 1
            }
        };
        if let Some((_, sends, recvs)) = per_comm.get_mut(i) {
            if is_send {
                sends.push(rec.call.bytes());
            } else {
                recvs.push(rec.call.bytes());
            }
        }
    }
    for (_, sends, recvs) in &per_comm {
        if sends.len() != recvs.len() {
            return Err(Error::mismatch(
                "sends to oneself in the group (each needs a recv from oneself in the same group)",
                format!("{} recv(s) from oneself", sends.len()),
                format!("{} recv(s)", recvs.len()),
            ));
        }
        for (k, (s, r)) in sends.iter().zip(recvs).enumerate() {
            if s != r {
                return Err(Error::mismatch(
                    format!(
                        "recv from oneself #{} of the group: bytes (its send #{})",
                        k + 1,
                        k + 1
                    ),
                    s,
                    r,
                ));
            }
        }
    }
    Ok(())
}

/// Issues groups through NCCL.
#[derive(Debug, Default)]
pub(crate) struct Nccl;

impl Exec for Nccl {
    fn ready(&mut self, calls: &[&Recorded<'_>]) -> Result<()> {
        for rec in calls {
            rec.comm.live()?;
        }
        Ok(())
    }

    fn start(&mut self) -> Result<()> {
        let api = api()?;
        // SAFETY: takes no arguments; `issue_all` ends the group on every
        // path and runs no user code while it is open.
        unsafe { nccl_call!(api, ncclGroupStart()) }
    }

    fn issue(&mut self, rec: &Recorded<'_>) -> Result<()> {
        let raw = rec.comm.live()?;
        // SAFETY: the call's pointers come from views borrowed for the
        // group's 'env, which outlives the group end where NCCL reads them
        // (then the work is ordered on the stream, and device memory is
        // freed only after queued work); the communicator and stream are
        // borrowed for 'env too.
        let r = unsafe { rec.call.launch(raw, rec.stream.as_raw()) }?;
        if r == sys::ncclResult_t::ncclInProgress {
            rec.comm.mark_non_blocking();
            return Ok(());
        }
        super::check_result(rec.call.op.nccl_name(), r).map_err(|e| rec.comm.annotate(e))
    }

    fn poison(&mut self) {
        if let Ok(api) = api() {
            // SAFETY: a send of 0 elements on a null communicator: NCCL
            // checks the communicator first, touches nothing, and records
            // the failure in the open group, so ncclGroupEnd launches none
            // of it. The status is the expected error.
            let _ = unsafe {
                api.ncclSend(
                    ptr::null(),
                    0,
                    sys::ncclDataType_t::ncclFloat32,
                    0,
                    ptr::null_mut(),
                    ptr::null_mut(),
                )
            };
        }
    }

    fn end(&mut self) -> Result<bool> {
        let api = api()?;
        // SAFETY: closes the group `start` opened; every pointer queued in
        // it is borrowed for the group's 'env.
        let r = unsafe { api.ncclGroupEnd() }?;
        if r == sys::ncclResult_t::ncclInProgress {
            return Ok(true);
        }
        super::check_result("ncclGroupEnd", r)?;
        Ok(false)
    }

    fn settle(&mut self, calls: &[&Recorded<'_>]) -> Result<()> {
        settle_group(&super::progress::Nccl, calls)
    }
}

/// Poll every communicator of a group that ended `ncclInProgress` through
/// `a` (NCCL, or a test double), each once and within its own timeout,
/// even after one failed; the first error is returned. Each is settled on
/// this thread (see [`Communicator::poll`]).
pub(crate) fn settle_group<A: super::progress::JobCalls>(
    a: &A,
    calls: &[&Recorded<'_>],
) -> Result<()> {
    let mut seen: Vec<sys::ncclComm_t> = Vec::new();
    let mut first = Ok(());
    for rec in calls {
        let raw = rec.comm.as_raw();
        if seen.contains(&raw) {
            continue;
        }
        seen.push(raw);
        rec.comm.mark_non_blocking();
        let r = rec.comm.poll_with(a, "ncclGroupEnd");
        if first.is_ok() {
            first = r;
        }
    }
    first
}
