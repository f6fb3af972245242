// A descriptor of one dtype cannot describe a buffer of another.
use cudnn::DataType;
use cudnn::dnn::TensorDescriptor;
use cudnn::runtime::DeviceBuffer;

fn describe<T: DataType>(_desc: &TensorDescriptor<T>, _buf: &DeviceBuffer<T>) {}

fn main() -> cudnn::Result<()> {
    let desc = TensorDescriptor::<f32>::nchw(1, 1, 2, 2)?;
    let buf = DeviceBuffer::<f64>::alloc(4)?;
    describe(&desc, &buf);
    Ok(())
}
