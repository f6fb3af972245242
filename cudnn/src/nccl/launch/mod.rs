//! The launch convention: which rank this process is, where the ranks meet
//! to share the [`UniqueId`], and which GPU it drives.
//!
//! Read from the environment the way torchrun (and `torch.distributed`'s
//! `env://`), Open MPI's `mpirun` and SLURM's `srun` set it. Where several
//! launchers' variables are set, torchrun's win, then Open MPI's, then
//! SLURM's:
//!
//! | variable (torchrun / Open MPI / SLURM) | meaning | when absent |
//! |---|---|---|
//! | `RANK` / `OMPI_COMM_WORLD_RANK` / `SLURM_PROCID` | this process's rank, `0..size` | single process, if the size is absent too |
//! | `WORLD_SIZE` / `OMPI_COMM_WORLD_SIZE` / `SLURM_NTASKS` | number of processes | single process, if the rank is absent too |
//! | `LOCAL_RANK` / `OMPI_COMM_WORLD_LOCAL_RANK` / `SLURM_LOCALID` | rank on this machine: the GPU ordinal it uses | `0` for a single process, else an error |
//! | `LOCAL_WORLD_SIZE` / `OMPI_COMM_WORLD_LOCAL_SIZE` / - | processes on this machine (checked against the local rank) | not checked |
//! | `CUDNN_RS_RENDEZVOUS` | `file:///path`, a plain path, or `tcp://host:port` | `tcp://$MASTER_ADDR:$MASTER_PORT` |
//! | `MASTER_ADDR`, `MASTER_PORT` | host and port rank 0 listens on | an error with several processes |
//! | `CUDNN_RS_RENDEZVOUS_TIMEOUT` | seconds to wait for the others, 0.001 to 10^6 | 300 |
//! | `CUDNN_RS_RENDEZVOUS_TOKEN` | a shared secret rank 0's TCP server requires ([`Token`]) | none: see below |
//!
//! A variable set to the empty string is an error, not "unset". mpirun and
//! srun set no rendezvous: set `CUDNN_RS_RENDEZVOUS` (or `MASTER_ADDR` and
//! `MASTER_PORT`) for every rank. In a SLURM batch script outside `srun`,
//! SLURM's variables describe the script itself (one task, `SLURM_PROCID=0`
//! with the job's `SLURM_NTASKS`): this is not detected, so start the ranks
//! with `srun`.
//!
//! Rank 0 makes the id and publishes it; the others wait for it, all
//! within one deadline for the whole exchange. [`init`] then builds the
//! communicator with [`Communicator::init_rank_timeout`] under the same
//! timeout, so a launch ends within twice the timeout however the peers
//! behave.
//! - **file**: rank 0 draws a nonce for this job, creates a private folder
//!   beside the file (mode 0700, exclusively: nobody else can put a file in
//!   it) and then the file itself (exclusively, mode 0600; it refuses one
//!   that exists, left by a crashed run or another job, rather than touch
//!   it) holding the id and the nonce. Every other rank reads it, draws its
//!   own nonce, acknowledges both in the folder and takes the id only once
//!   rank 0 has answered that acknowledgement, so an id file left by an
//!   earlier run is never used, a second process claiming a rank already
//!   acknowledged is refused, and no process removes another's file. Files
//!   other users plant beside the path are never read nor touched. Reads
//!   are bounded in size, regular files only (a FIFO, a device or a
//!   symbolic link at the path is an error, not a hang), and files owned by
//!   another user are refused. When rank 0 gives up (a rank with another
//!   world size, the deadline), it leaves an abort note the waiting ranks
//!   read at once; the folder stays with that note while a rank may still
//!   read it. When all have their answer, rank 0 removes every file. The
//!   path must be on a file system all ranks see; the folder is polled, at
//!   most every 250 ms.
//! - **tcp**: rank 0 listens on `host` itself (one of its own addresses;
//!   never on every interface), every other rank connects (retrying, name
//!   resolution included, until rank 0 is up), says its rank and world
//!   size, proves the token (when there is one) and receives the id. Rank 0
//!   serves connections concurrently: each has about a second to prove
//!   itself and a few seconds in all, and when too many wait at once the
//!   oldest that has not proved itself is dropped for the newcomer; one
//!   that is not a rank of this job (another world size, rank 0 or out of
//!   range, a rank already served, a wrong token) is refused and dropped,
//!   and the rendezvous goes on; the refusals are listed if rank 0 times
//!   out. `MASTER_ADDR=$(hostname)` resolves to a loopback address on some
//!   systems (127.0.1.1): with `LOCAL_WORLD_SIZE` (or Open MPI's) below the
//!   world size, [`init`] and [`exchange_for`] refuse to listen there, and
//!   otherwise rank 0's timeout message says it listened on a loopback
//!   address.
//!
//! **Exposure.** Without a token, anyone who can reach rank 0's port while
//! it waits receives the unique id (enough to join the communicator or
//! disturb its bootstrap) or can take a rank's place, and a process that
//! binds the port before rank 0 can hand the ranks an id of its own. On a
//! machine or network others share, give every rank the same
//! `CUDNN_RS_RENDEZVOUS_TOKEN` of 128 random bits or more, written as 32
//! or more hex digits or as base64 of 16 or more bytes (for example
//! `CUDNN_RS_RENDEZVOUS_TOKEN=$(openssl rand -hex 16)`, or
//! [`Token::generate`], exported before the launcher; a shorter token, or
//! text not written as random bytes, is refused, though the form cannot
//! catch every phrase: see [`Token::new`]). With it, each rank proves it holds it first, then rank 0
//! (HMAC-SHA256 over fresh nonces of both; the token never travels), and
//! the id travels masked and tagged, so a squatter learns neither and a
//! relay that alters the id is caught. Rank 0 sends nothing keyed by the
//! token to a peer that has not proved it; a squatter on rank 0's port
//! gets one proof per connecting rank over a nonce it chose, which only a
//! token of 128 bits or more keeps out of reach of an offline search. The
//! file rendezvous relies on file permissions instead, and works only
//! through the descriptors of the folders it opened (a folder swapped for
//! a symbolic link cannot redirect it).
//!
//! Under torchrun itself, `MASTER_PORT` is taken by torchrun's own store:
//! set `CUDNN_RS_RENDEZVOUS=tcp://$MASTER_ADDR:<another port>`. When rank 0
//! finds the port in use, its [`Error::Rendezvous`] says so first and names
//! that variable (and that this is torchrun's store, when torchrun's
//! variables such as `TORCHELASTIC_RUN_ID` are set).

mod address;
mod deadline;
#[cfg(unix)]
mod dirfd;
mod env;
#[cfg(unix)]
mod file;
#[cfg(not(unix))]
mod file {
    //! The file rendezvous needs `openat` and friends: Unix only.
    use super::deadline::Deadline;
    use crate::nccl::{Ranks, UniqueId};
    use std::path::Path;

    const WHY: &str = "the file rendezvous needs a Unix system; use a TCP rendezvous";

    pub(crate) fn publish(_: &Path, _: Ranks, _: &UniqueId, _: Deadline) -> Result<(), String> {
        Err(WHY.into())
    }

    pub(crate) fn receive(_: &Path, _: Ranks, _: Deadline) -> Result<UniqueId, String> {
        Err(WHY.into())
    }
}
mod in_use;
mod tcp;

use std::time::Duration;

pub use address::{RENDEZVOUS_VAR, Rendezvous};
pub use env::{
    DEFAULT_TIMEOUT, LOCAL_RANK_VARS, LOCAL_SIZE_VARS, LaunchEnv, MAX_TIMEOUT, MAX_TOKEN_BYTES,
    MIN_TIMEOUT, MIN_TOKEN_BYTES, MIN_TOKEN_DECODED_BYTES, MIN_TOKEN_HEX_DIGITS, RANK_VARS,
    TIMEOUT_VAR, TOKEN_VAR, Token, VARIABLES,
};

use super::{Communicator, Ranks, UniqueId};
use crate::error::{Error, Result};
use crate::runtime::Device;
use deadline::Deadline;

/// This process's part of the job: what the launcher said, its device
/// (current on the calling thread) and its communicator.
#[derive(Debug)]
#[non_exhaustive]
pub struct Launch {
    /// What the launcher said.
    pub env: LaunchEnv,
    /// The GPU this rank drives (the local rank).
    pub device: Device,
    /// This rank's communicator over all `WORLD_SIZE` ranks.
    pub comm: Communicator,
}

/// Read the convention, bind to the GPU the local rank names, share the
/// unique id (within the rendezvous timeout) and join the communicator
/// ([`Communicator::init_rank_timeout`], within the same timeout again;
/// with an NCCL older than 2.14, which cannot bound it, a blocking
/// initialisation). With no variables set this is a one-rank job on GPU 0.
///
/// # Errors
/// As [`LaunchEnv::from_env`]; [`Error::NoDevice`] or
/// [`Error::InvalidArgument`] when the local rank names no GPU (naming the
/// variable it came from, such as `SLURM_LOCALID`); [`Error::Rendezvous`]
/// when the ranks cannot meet; [`Error::Timeout`] when the communicator is
/// not ready in time; [`Error::Nccl`] when NCCL cannot build it.
///
/// # Safety
/// As [`Communicator::init_rank`]: every other rank of the job is a program
/// trusted as this one is and makes the same calls in the same order with
/// the same counts, element types, reductions and roots. Only the job's
/// ranks can reach the rendezvous, or it has a token
/// (`CUDNN_RS_RENDEZVOUS_TOKEN`): whoever joins it becomes a rank.
pub unsafe fn init_from_env() -> Result<Launch> {
    let env = LaunchEnv::from_env()?;
    // SAFETY: this function's contract.
    unsafe { init(env) }
}

/// [`init_from_env`] with a [`LaunchEnv`] already read.
///
/// # Errors
/// As [`init_from_env`].
///
/// # Safety
/// As [`init_from_env`].
pub unsafe fn init(env: LaunchEnv) -> Result<Launch> {
    let (lr, var) = (env.local_rank, env.local_rank_var);
    let device = Device::new(lr).map_err(|e| match e {
        Error::InvalidArgument { rule, value, .. } => Error::InvalidArgument {
            arg: var.into(),
            rule: format!("names this process's GPU, so it {rule}"),
            value,
        },
        Error::NoDevice { reason, detail } => Error::NoDevice {
            reason: format!("{reason} ({var}={lr})"),
            detail,
        },
        other => other.with_context(format!("{var}={lr}")),
    })?;
    let id = exchange_for(&env, UniqueId::new)?;
    let (rank, size) = (env.ranks.rank(), env.ranks.size());
    // SAFETY: this function's contract is `init_rank_timeout`'s.
    let made = unsafe { Communicator::init_rank_timeout(&id, rank, size, env.timeout) };
    let comm = match made {
        // NCCL before 2.14 has no non-blocking initialisation.
        // SAFETY: this function's contract is `init_rank`'s.
        Err(Error::MissingSymbol(_)) => unsafe { Communicator::init_rank(&id, rank, size) }?,
        other => other?,
    };
    Ok(Launch { env, device, comm })
}

/// Share the unique id the way `env` says: its rendezvous, ranks, timeout
/// and token. Rank 0 calls `make`. With a TCP rendezvous and a local world
/// size below the world size (some ranks run on other machines), rank 0
/// refuses to listen on a loopback address (`MASTER_ADDR=$(hostname)`
/// resolves to 127.0.1.1 on some systems) rather than wait for ranks that
/// cannot reach it. Needs no GPU.
///
/// # Errors
/// As [`exchange_with_token`]; [`Error::Rendezvous`] naming the loopback
/// address above.
pub fn exchange_for(env: &LaunchEnv, make: impl FnOnce() -> Result<UniqueId>) -> Result<UniqueId> {
    let remote = env.local_world_size.is_some_and(|l| l < env.ranks.size());
    match &env.rendezvous {
        None => make(),
        Some(r) => run(r, env.ranks, env.timeout, env.token.as_ref(), remote, make),
    }
}

/// Share a unique id among `ranks.size()` processes over `rendezvous`: rank
/// 0 calls `make` and publishes the id, every other rank waits for it.
/// Returns the id on every rank. Needs no GPU. With no token; see
/// [`exchange_with_token`].
///
/// # Errors
/// As [`exchange_with_token`].
pub fn exchange(
    rendezvous: &Rendezvous,
    ranks: Ranks,
    timeout: Duration,
    make: impl FnOnce() -> Result<UniqueId>,
) -> Result<UniqueId> {
    exchange_with_token(rendezvous, ranks, timeout, None, make)
}

/// [`exchange`] with a shared secret: over TCP, rank 0 hands the id only
/// to peers that send the same `token` (all ranks must pass the same, or
/// all `None`). The whole exchange ends within `timeout` (at most
/// [`MAX_TIMEOUT`]), however the peers behave.
///
/// # Errors
/// [`Error::Rendezvous`] naming the rendezvous, this rank and what went
/// wrong (I/O, timeout, a hostile or malformed file, a refusal by rank 0);
/// `make`'s error on rank 0.
pub fn exchange_with_token(
    rendezvous: &Rendezvous,
    ranks: Ranks,
    timeout: Duration,
    token: Option<&Token>,
    make: impl FnOnce() -> Result<UniqueId>,
) -> Result<UniqueId> {
    run(rendezvous, ranks, timeout, token, false, make)
}

fn run(
    rendezvous: &Rendezvous,
    ranks: Ranks,
    timeout: Duration,
    token: Option<&Token>,
    remote_ranks: bool,
    make: impl FnOnce() -> Result<UniqueId>,
) -> Result<UniqueId> {
    let deadline = Deadline::after(timeout);
    let fail = |detail: String| Error::Rendezvous {
        rendezvous: rendezvous.to_string(),
        detail: format!("rank {} of {}: {detail}", ranks.rank(), ranks.size()),
    };
    if ranks.size() == 1 {
        return make();
    }
    match rendezvous {
        Rendezvous::File(path) => {
            if ranks.rank() == 0 {
                let id = make()?;
                file::publish(path, ranks, &id, deadline).map_err(fail)?;
                Ok(id)
            } else {
                file::receive(path, ranks, deadline).map_err(fail)
            }
        }
        Rendezvous::Tcp { host, port } => {
            if ranks.rank() == 0 {
                let id = make()?;
                tcp::serve(host, *port, ranks, &id, token, remote_ranks, deadline).map_err(fail)?;
                Ok(id)
            } else {
                tcp::receive(host, *port, ranks, token, deadline).map_err(fail)
            }
        }
    }
}
