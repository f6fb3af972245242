//! The other side of `host_no_device` (issue 33 item 3), on a device: the
//! constructors succeed, an ordinary failure is not "no device", and
//! `Target::device` names a missing ordinal as an invalid argument (cuDNN
//! alone answers NOT_INITIALIZED for it). Not run on a GPU yet.
//!
//! `cargo test -p cudnn-rs --test gpu_no_device` (skipped without a device).

use crate::support;

use cudnn::Error;
use cudnn::graph::Target;
use cudnn::runtime::{Device, DeviceBuffer, Event};
use support::*;

pub fn main() {
    run(vec![
        gpu("constructors_succeed_with_a_device", constructors),
        gpu("out_of_memory_is_not_no_device", out_of_memory),
        gpu("target_device_names_a_missing_ordinal", missing_ordinal),
    ]);
}

fn constructors() -> TestResult {
    let d = Device::new(0)?;
    let s = d.create_stream()?;
    let _e = Event::new()?;
    let _b = s.alloc::<f32>(16)?;
    let _h = cudnn::dnn::Handle::new(&s)?;
    let _b = cudnn::blas::Handle::new(&s)?;
    let _l = cudnn::blas::LtHandle::new(&s)?;
    if cudnn::graph::require_graph_support().is_ok() {
        let t = Target::device(0)?;
        ensure!(t.properties().device_ver() > 0, "{t:?}");
    }
    Ok(())
}

fn out_of_memory() -> TestResult {
    Device::new(0)?;
    // More than any device holds: the runtime says out of memory (code 2),
    // which is not "no device".
    let e = DeviceBuffer::<u8>::alloc(1 << 50)
        .err()
        .ok_or("a 1 PiB allocation succeeded")?;
    ensure!(!e.is_no_device(), "{e:?}");
    ensure!(matches!(e, Error::Cuda { code: 2, .. }), "{e:?}");
    Ok(())
}

fn missing_ordinal() -> TestResult {
    if cudnn::graph::require_graph_support().is_err() {
        eprintln!("note: needs cuDNN >= 9.8; not checked");
        return Ok(());
    }
    let n = Device::count()?;
    for ordinal in [-1, i32::try_from(n).unwrap_or(i32::MAX), i32::MAX] {
        match Target::device(ordinal) {
            Err(Error::InvalidArgument { arg, value, .. }) => {
                ensure!(
                    arg == "ordinal" && value == ordinal.to_string(),
                    "{arg} {value}"
                );
            }
            other => return Err(format!("ordinal {ordinal}: {other:?}").into()),
        }
    }
    Ok(())
}
