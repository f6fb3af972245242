//! Builds the driver stub (`stub/libcuda_stub.c`) that lets the graph module
//! plan for a named GPU on a machine with no NVIDIA driver. The stub is
//! embedded in the crate and loaded only when no real `libcuda.so.1` opens.
//!
//! Only the graph module embeds it: without the `graph` feature nothing is
//! compiled (and `cc`, an optional build dependency that `graph` turns on,
//! is not built either).
//!
//! Writes only to `OUT_DIR`. Without a C compiler the crate still builds; the
//! graph module then reports that deviceless planning is unavailable.

#[cfg(feature = "graph")]
use std::env;
#[cfg(feature = "graph")]
use std::path::PathBuf;

fn main() {
    println!("cargo:rustc-check-cfg=cfg(cudnn_rs_driver_stub)");
    #[cfg(feature = "graph")]
    build_stub();
}

/// Compiles the stub into `OUT_DIR` and sets `cudnn_rs_driver_stub` when it
/// built.
#[cfg(feature = "graph")]
fn build_stub() {
    println!("cargo:rerun-if-changed=stub/libcuda_stub.c");
    println!("cargo:rerun-if-env-changed=CUDNN_RS_NO_STUB_BUILD");
    if env::var_os("DOCS_RS").is_some() || env::var_os("CUDNN_RS_NO_STUB_BUILD").is_some() {
        return;
    }
    let target_os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os != "linux" {
        return;
    }
    let Some(out) = env::var_os("OUT_DIR").map(PathBuf::from) else {
        return;
    };
    let lib = out.join("libcuda_stub.so");
    let compiler = cc::Build::new()
        .cargo_metadata(false)
        .warnings(true)
        .opt_level(2)
        .try_get_compiler();
    let compiler = match compiler {
        Ok(c) => c,
        Err(e) => {
            println!(
                "cargo:warning=no C compiler for the driver stub ({e}); deviceless graph planning disabled"
            );
            return;
        }
    };
    let mut cmd = compiler.to_command();
    cmd.args(["-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o"])
        .arg(&lib)
        .arg("stub/libcuda_stub.c");
    match cmd.status() {
        Ok(st) if st.success() => {
            println!("cargo:rustc-cfg=cudnn_rs_driver_stub");
        }
        other => {
            println!(
                "cargo:warning=building the driver stub failed ({other:?}); deviceless graph planning disabled"
            );
        }
    }
}
