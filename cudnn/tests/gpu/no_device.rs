//! The other side of `host_no_device` (issue 33 item 3), on a device: the
//! constructors succeed, an ordinary failure is not "no device", and
//! `Target::device` names a missing ordinal as an invalid argument (cuDNN
//! alone answers NOT_INITIALIZED for it), and a child `fork()`ed after CUDA
//! was initialised is told why its calls fail, not "no device".
//!
//! `cargo test -p cudnn-rs --features dnn,blas,reference --test gpu no_device::` (skipped without a device).

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
        // Alone in its process: a fork() while other test threads hold
        // the runtime's locks could hang the child.
        isolated(gpu("fork_child_is_told_why", fork_child)),
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

/// CUDA answers every call of a child `fork()`ed after the parent
/// initialised it with `cudaErrorInitializationError` (3) (the CUDA
/// programming guide: CUDA is not fork-safe). The parent has a device, so
/// that is not "no device": the child's error is `Error::Cuda` with code 3,
/// `is_no_device()` false and a context naming fork() and spawn/exec.
#[cfg(unix)]
fn fork_child() -> TestResult {
    use std::time::{Duration, Instant};
    let d = Device::new(0)?;
    let _s = d.create_stream()?;
    // SAFETY: the child only calls the crate (which makes one runtime
    // call, and formats the error) and then `_exit`s; this test runs alone
    // in its own process (`isolated`), so no other thread holds a lock.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err("fork failed".into());
    }
    if pid == 0 {
        let code = match cudnn::runtime::Stream::new() {
            Err(e) => {
                eprintln!("child: {e}");
                let shown = e.to_string();
                if matches!(e, Error::Cuda { code: 3, .. })
                    && !e.is_no_device()
                    && shown.contains("fork()")
                    && shown.contains("spawn/exec")
                {
                    0
                } else {
                    eprintln!("child: unexpected {e:?}");
                    1
                }
            }
            Ok(_) => {
                eprintln!("child: Stream::new succeeded after fork");
                2
            }
        };
        // SAFETY: ends the child without running the parent's atexit
        // handlers or destructors.
        unsafe { libc::_exit(code) };
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut status = 0;
    loop {
        // SAFETY: `pid` is our child; `status` is a valid out-pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            break;
        }
        if r < 0 || Instant::now() > deadline {
            // SAFETY: our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return Err("the forked child hung or could not be waited for".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    ensure!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the forked child failed (wait status {status:#x}; its stderr above)"
    );
    Ok(())
}

#[cfg(not(unix))]
fn fork_child() -> TestResult {
    eprintln!("note: fork() is Unix only; not checked");
    Ok(())
}
