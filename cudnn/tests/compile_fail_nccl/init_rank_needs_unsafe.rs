// Joining a communicator whose ranks may be in other processes is `unsafe`:
// NCCL compares no calls, and a peer with a larger count writes past this
// rank's buffer (a soundness audit's trigger: two processes broadcasting
// 8 Mi and 4 Mi elements). `Communicator::init_all` (every rank in this
// process, compared by the crate) stays safe.
use cudnn::nccl::{self, Communicator, UniqueId};
use std::time::Duration;

fn main() -> cudnn::Result<()> {
    let id = UniqueId::new()?;
    let _a = Communicator::init_rank(&id, 0, 2)?;
    let _b = Communicator::init_rank_timeout(&id, 1, 2, Duration::from_secs(1))?;
    let _job = nccl::launch::init_from_env()?;
    let _job = nccl::launch::init(nccl::launch::LaunchEnv::from_env()?)?;
    let _all = Communicator::init_all(&[])?;
    Ok(())
}
