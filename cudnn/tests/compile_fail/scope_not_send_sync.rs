// AsyncScope is neither Send nor Sync (see scope_not_send.rs for why).
fn needs_send<T: Send>() {}
fn needs_sync<T: Sync>() {}

fn main() {
    needs_send::<cudnn::runtime::AsyncScope<'static, 'static>>();
    needs_sync::<cudnn::runtime::AsyncScope<'static, 'static>>();
}
