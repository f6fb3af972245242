//! `cargo run --example doctor`: where each library was found and its version,
//! or every place tried and the one variable to set; then the devices.
//!
//! Exit status: 0 when cuDNN, cuBLAS, cuBLASLt and the CUDA runtime all load
//! (a machine without a GPU is reported, not an error); 1 otherwise.

use std::process::ExitCode;

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
    match cudart::load() {
        Ok(rt) => {
            let mut n = 0;
            // SAFETY: `n` is a valid out-pointer.
            match unsafe { rt.cudaGetDeviceCount(&mut n) } {
                Ok(st) if st == cudart::cudaError::cudaSuccess => println!("  {n} CUDA device(s)"),
                Ok(st) => {
                    // SAFETY: cudaGetErrorString returns a static string for any code.
                    let text = unsafe { rt.cudaGetErrorString(st) }
                        .ok()
                        .filter(|p| !p.is_null())
                        // SAFETY: non-null, NUL-terminated, static.
                        .map(|p| {
                            unsafe { std::ffi::CStr::from_ptr(p) }
                                .to_string_lossy()
                                .into_owned()
                        })
                        .unwrap_or_default();
                    println!(
                        "  no usable CUDA device: cudaGetDeviceCount returned {} ({text})",
                        st.0
                    );
                }
                Err(e) => println!("  cannot ask: {e}"),
            }
        }
        Err(_) => println!("  cannot ask: the CUDA runtime is not loaded"),
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
