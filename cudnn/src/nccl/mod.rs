//! Collective communication across GPUs and machines through NVIDIA NCCL
//! (feature `nccl`).
//!
//! - [`UniqueId`]: the token every rank of a communicator must share; made
//!   by one process, passed to the others as bytes or text.
//! - [`Communicator`]: one rank of a communicator, bound to one device;
//!   collectives ([`all_reduce`](Communicator::all_reduce),
//!   [`broadcast`](Communicator::broadcast), [`reduce`](Communicator::reduce),
//!   [`all_gather`](Communicator::all_gather),
//!   [`reduce_scatter`](Communicator::reduce_scatter), point-to-point
//!   [`send`](Group::send)/[`recv`](Group::recv)) enqueue on a
//!   [`Stream`](crate::runtime::Stream) over the crate's device buffers.
//! - [`group`]: several calls fused into one launch; a closure whose calls
//!   are recorded and launched all or none, so a group can neither be left
//!   open nor launched in part.
//! - Deadlines: [`Communicator::wait`] waits for a stream's work while
//!   watching NCCL's asynchronous errors, and aborts the communicator on an
//!   error or at its deadline (a typed [`crate::Error::Timeout`]
//!   instead of a hang when a peer dies);
//!   [`Communicator::init_rank_timeout`] makes a non-blocking communicator
//!   whose initialisation, calls and `Drop` are all bounded (from NCCL
//!   2.27; before, the abort that follows a call that did not finish runs
//!   unbounded on the calling thread: see [`Communicator`]).
//! - [`launch`]: the torchrun-style convention (`RANK`, `WORLD_SIZE`,
//!   `LOCAL_RANK`, or Open MPI's and SLURM's equivalents; a rendezvous over
//!   a file or TCP, with an optional shared token) that gives each process
//!   its device and communicator, within the rendezvous timeout.
//!
//! Element types are checked at compile time ([`NcclType`]: f32, f64, f16,
//! bf16, i8, u8, i32, i64), lengths are checked against the rank count
//! before NCCL is called, and every failure is a [`crate::Error`]
//! naming the call, the rank and NCCL's own text.
//!
//! NCCL does not compare the calls of different ranks, and a sender writes
//! up to its own count into the receiver's buffer. The calls of ranks in
//! this process are compared before NCCL sees them (see [`Communicator`]);
//! across processes, agreeing counts, types, reductions and roots are the
//! caller's contract: the constructors that can join ranks of other
//! processes ([`Communicator::init_rank`], [`Communicator::init_rank_timeout`],
//! [`launch::init_from_env`], [`launch::init`]) are `unsafe` for it, and
//! [`Communicator::set_check_agreement`] checks it at run time for debugging.
//!
//! ```no_run
//! use cudnn::nccl::{self, ReduceOp};
//! // One process per GPU, started by torchrun or any launcher that sets
//! // RANK, WORLD_SIZE, LOCAL_RANK and MASTER_ADDR/MASTER_PORT.
//! // SAFETY: every rank runs this program: the same calls in the same order.
//! let job = unsafe { nccl::launch::init_from_env() }?;
//! let stream = job.device.create_stream()?;
//! let mut grads = cudnn::runtime::DeviceBuffer::<f32>::zeroed(1 << 20)?;
//! job.comm.all_reduce_in_place(&mut grads, ReduceOp::Avg, &stream)?;
//! stream.synchronize()?;
//! # Ok::<(), cudnn::Error>(())
//! ```
//!
//! Multi-node runs use NCCL's own transports; this module only provides the
//! bootstrap (the unique-id exchange) and the checked calls.

mod agree;
mod clique;
mod collectives;
mod comm;
mod depth;
mod group;
mod id;
pub mod launch;
mod op;
mod progress;
mod record;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_clique;
#[cfg(test)]
mod tests_family;
#[cfg(test)]
mod tests_progress;
mod validate;
mod watch;

#[doc(hidden)]
pub use collectives::LaunchChecks;
pub use comm::Communicator;
pub use group::{Group, group};
pub use id::{UNIQUE_ID_BYTES, UniqueId};
pub use op::{NcclType, ReduceOp};
pub use progress::DEFAULT_COMM_TIMEOUT;
pub use validate::Ranks;

use std::ffi::{CStr, c_char};

use crate::error::{Error, Result};
use crate::sys::cudart::loader::Version;
use crate::sys::nccl as sys;

/// NCCL's function table, or the load error.
pub(crate) fn api() -> Result<&'static sys::Nccl> {
    Ok(sys::load()?)
}

/// The loaded NCCL's version (`ncclGetVersion`; needs no device).
///
/// # Errors
/// [`Error::Load`] when NCCL cannot be found, [`Error::Nccl`] when the call fails.
#[doc(alias = "ncclGetVersion")]
pub fn version() -> Result<Version> {
    let api = api()?;
    let mut v = 0;
    // SAFETY: `v` is a valid, writable out-pointer; no device is needed.
    let r = unsafe { api.ncclGetVersion(&mut v) }?;
    check_result("ncclGetVersion", r)?;
    Ok(sys::decode_version(v))
}

pub(crate) fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: NCCL returns NUL-terminated strings that stay valid at least
    // until the next NCCL call on this thread; we copy at once.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// The name of an NCCL result (`"ncclInvalidUsage"`), or `ncclResult_<n>`
/// for a code these bindings do not know.
pub fn result_name(r: sys::ncclResult_t) -> String {
    sys::result_name(r)
        .map(str::to_string)
        .unwrap_or_else(|| format!("ncclResult_{}", r.0))
}

/// The checked path every call of this module goes through, public for
/// callers of the raw layer who want the same errors: `Ok` for
/// `ncclSuccess`, otherwise [`Error::Nccl`] with the result's name and
/// `ncclGetErrorString`'s text.
///
/// # Errors
/// As described; [`Error::Load`] when NCCL cannot be loaded to ask its text.
pub fn check_result(call: &'static str, r: sys::ncclResult_t) -> Result<()> {
    if r == sys::ncclResult_t::ncclSuccess {
        return Ok(());
    }
    let api = api()?;
    // SAFETY: ncclGetErrorString accepts any code and returns a static string.
    let text = unsafe { api.ncclGetErrorString(r) }
        .map(text)
        .unwrap_or_default();
    Err(Error::Nccl {
        call,
        code: r.0,
        name: sys::result_name(r).unwrap_or("unknown"),
        text,
        last_error: None,
        rank: None,
        context: None,
    })
}

/// Call an NCCL function through the checked path:
/// `nccl_call!(api, ncclGetUniqueId(&mut id))`.
macro_rules! nccl_call {
    ($api:expr, $f:ident ( $($arg:expr),* $(,)? )) => {{
        let api = $api;
        // The caller's `unsafe` block states why the arguments are valid.
        let r = api.$f($($arg),*)?;
        $crate::nccl::check_result(stringify!($f), r)
    }};
}
pub(crate) use nccl_call;
