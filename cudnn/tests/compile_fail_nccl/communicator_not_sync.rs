// NCCL forbids using one communicator from several threads at once.
fn need_sync<T: Sync>() {}

fn main() {
    need_sync::<cudnn::nccl::Communicator>();
}
