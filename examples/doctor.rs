//! `cargo run --example doctor`: where each library was found and its version,
//! or every place tried and the one variable to set; then the devices.
//!
//! Exit status: 0 when cuDNN, cuBLAS, cuBLASLt and the CUDA runtime all load
//! (a machine without a GPU is reported, not an error); 1 otherwise.

use std::process::ExitCode;

use cudnn::runtime::Device;
use cudnn::sys::{cublas, cudart, cudnn as dnn};

fn report<T>(
    name: &str,
    header: cudart::Version,
    r: Result<&T, cudart::LoadError>,
    info: impl Fn(&T) -> &cudart::LibraryInfo,
) -> bool {
    match r {
        Ok(t) => {
            let i = info(t);
            let version = i.version.map_or("unknown".to_string(), |v| v.to_string());
            let path = i
                .path
                .as_ref()
                .map_or("(linked at build time)".to_string(), |p| {
                    p.display().to_string()
                });
            let how = i
                .source
                .as_ref()
                .map_or(String::new(), |s| format!(" via {s}"));
            println!("{name:<13} {version:<10} {path}{how}  (bindings from {header})");
            true
        }
        Err(e) => {
            println!("{name:<13} NOT FOUND");
            for line in e.to_string().lines() {
                println!("    {line}");
            }
            false
        }
    }
}

/// One device's properties.
fn describe(ordinal: usize) -> cudnn::Result<()> {
    let d = Device::new(ordinal)?;
    let (major, minor) = d.compute_capability()?;
    let mem = d.memory_info()?;
    println!(
        "  device {ordinal}: {}, compute capability {major}.{minor}, {} SMs, {:.1} GiB free of {:.1} GiB, memory pools: {}",
        d.name()?,
        d.sm_count()?,
        mem.free as f64 / (1u64 << 30) as f64,
        mem.total as f64 / (1u64 << 30) as f64,
        d.supports_memory_pools().unwrap_or(false),
    );
    Ok(())
}

fn main() -> ExitCode {
    println!("libraries:");
    let mut ok = true;
    ok &= report(
        "CUDA runtime",
        cudart::HEADER_VERSION,
        cudart::load(),
        |t| t.info(),
    );
    ok &= report("cuDNN", dnn::HEADER_VERSION, dnn::load(), |t| t.info());
    ok &= report("cuBLAS", cublas::HEADER_VERSION, cublas::load(), |t| {
        t.info()
    });
    ok &= report("cuBLASLt", cublas::HEADER_VERSION, cublas::load_lt(), |t| {
        t.info()
    });

    println!("devices:");
    match Device::count() {
        Ok(0) => println!("  no CUDA device"),
        Ok(n) => {
            for i in 0..n {
                if let Err(e) = describe(i) {
                    println!("  device {i}: {e}");
                }
            }
        }
        Err(e) => println!("  no usable CUDA device: {e}"),
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        println!(
            "\nsome libraries are missing (see above). In a checkout of this project, `cargo xtask fetch-libs` downloads NVIDIA's wheels."
        );
        ExitCode::FAILURE
    }
}
