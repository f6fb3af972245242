//! A 3x3 convolution forward with cuDNN's legacy API: descriptors, a plan
//! that picks the algorithm and sizes the workspace once, then runs.
//! Needs a CUDA device (says so and exits 1 without one).
//!
//! `cargo run -p cudnn-rs --example legacy_conv`

use cudnn::dnn::{
    AlgoSearch, ConvDescriptor, ConvProblem, FilterDescriptor, Handle, PlanOptions,
    TensorDescriptor, TensorFormat,
};
use cudnn::runtime::{Device, DeviceBuffer, Stream};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if Device::count().map_or(true, |n| n == 0) {
        eprintln!("legacy_conv: needs a CUDA device (none found)");
        std::process::exit(1);
    }
    let (n, c, k, hw) = (2, 3, 8, 16);
    let x_desc = TensorDescriptor::<f32>::nchw(n, c, hw, hw)?;
    let w_desc = FilterDescriptor::<f32>::new(TensorFormat::Nchw, &[k, c, 3, 3])?;
    // Padding 1, stride 1, dilation 1: the output keeps 16x16.
    let conv = ConvDescriptor::new_2d([1, 1], [1, 1], [1, 1])?;
    let problem = ConvProblem::forward(&x_desc, &w_desc, &conv)?;
    println!("output shape {:?}", problem.output_shape());

    let stream = Stream::new()?;
    let mut handle = Handle::new(&stream)?;
    let x = DeviceBuffer::from_host(&vec![1.0f32; n * c * hw * hw])?;
    let w = DeviceBuffer::from_host(&vec![0.5f32; k * c * 9])?;
    let len: usize = problem.output_shape().iter().product();
    let mut y = DeviceBuffer::<f32>::zeroed(len)?;
    let plan = problem.plan_on(
        &mut handle,
        &PlanOptions::new(AlgoSearch::Heuristic),
        &x,
        &w,
        &mut y,
    )?;
    plan.run(&mut handle, 1.0, &x, &w, 0.0, &mut y)?;
    stream.synchronize()?;
    // Away from the border every output sums 3 x 3 x c products of 0.5.
    let out = y.to_vec()?;
    let centre = out[hw / 2 * hw + hw / 2];
    println!(
        "centre of the first map: {centre} (expected {})",
        0.5 * 9.0 * c as f32
    );
    Ok(())
}
