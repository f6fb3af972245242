// Handles are Send but not Sync: NVIDIA forbids (cuDNN) or advises against
// (cuBLAS) using one handle from several threads at once.
fn needs_sync<T: Sync>() {}

fn main() {
    needs_sync::<cudnn::dnn::Handle>();
    needs_sync::<cudnn::blas::Handle>();
}
