// `CudarcScope::read` / `write` take cudarc's own memory only: cudarc's
// `DevicePtr` is a safe trait, so a type of the caller's could report any
// address and length, and the lend would hand the device that range.
use std::sync::Arc;

use cudnn::interop::CudarcStream;
use cudnn::interop::cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, SyncOnDrop};

struct Fake(Arc<CudaStream>);

impl DeviceSlice<f32> for Fake {
    fn len(&self) -> usize {
        1 << 28
    }
    fn stream(&self) -> &Arc<CudaStream> {
        &self.0
    }
}

impl DevicePtr<f32> for Fake {
    fn device_ptr<'a>(&'a self, _: &'a CudaStream) -> (u64, SyncOnDrop<'a>) {
        (0x1000, SyncOnDrop::Sync(None))
    }
}

impl DevicePtrMut<f32> for Fake {
    fn device_ptr_mut<'a>(&'a mut self, _: &'a CudaStream) -> (u64, SyncOnDrop<'a>) {
        (0x1000, SyncOnDrop::Sync(None))
    }
}

fn demo(s: &CudarcStream, fake: &mut Fake) -> cudnn::Result<()> {
    s.scope(|sc| {
        let _r = sc.read::<f32, _>(&*fake)?;
        Ok(())
    })?;
    s.scope(|sc| {
        let _w = sc.write::<f32, _>(fake)?;
        Ok(())
    })
}

fn main() {}
