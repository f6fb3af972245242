//! cuDNN's device-properties JSON for one device, captured raw.
//!
//! The first thing the GPU check runs: it asks cuDNN for the JSON of device
//! `--device N` (default 0) through a device-properties descriptor, writes
//! the bytes exactly as cuDNN returned them to `--out FILE` (when given) and
//! prints them, before anything parses them or builds a plan. Then it prints
//! one line per library it loaded (version and file) and the device's name,
//! so a report can start with them.
//!
//! Without a GPU (or with cuDNN older than 9.8) cuDNN refuses the descriptor:
//! the program prints the library lines, says why, and exits 1.
//!
//! ```text
//! cargo run --example device_props -- --out device_properties.json
//! ```

use std::io::Write;
use std::path::PathBuf;

use cudnn::graph::backend::{Descriptor, attr, kind};

struct Args {
    device: i32,
    out: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        device: 0,
        out: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--device" => {
                let v = it.next().ok_or("--device needs a CUDA ordinal")?;
                args.device = v
                    .parse()
                    .map_err(|_| format!("--device must be an integer, got {v:?}"))?;
            }
            "--out" => args.out = Some(it.next().ok_or("--out needs a file name")?.into()),
            "-h" | "--help" => {
                println!("usage: device_props [--device N] [--out FILE]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(args)
}

/// The JSON bytes cuDNN holds for `device`, up to (not including) the NUL.
fn capture(device: i32) -> cudnn::Result<Vec<u8>> {
    let mut d = Descriptor::<kind::DeviceProp>::new()?;
    d.set(attr::DEVICEPROP_DEVICE_ID, &[device])?;
    d.finalize()?;
    // A read with no room gives the length, NUL included.
    let n = d.count(attr::DEVICEPROP_JSON_REPRESENTATION)?;
    let mut buf = vec![0u8; n.clamp(1, 64 << 20)];
    let got = d.get(attr::DEVICEPROP_JSON_REPRESENTATION, &mut buf)?;
    buf.truncate(got.min(buf.len()));
    if let Some(end) = buf.iter().position(|&c| c == 0) {
        buf.truncate(end);
    }
    Ok(buf)
}

/// One line per library: name, version, file (or why it is not there).
fn library_lines() -> Vec<String> {
    use cudnn::sys;
    fn line(name: &str, r: Result<&sys::cudart::loader::LibraryInfo, String>) -> String {
        match r {
            Ok(i) => format!(
                "{name:<13} {:<9} {}",
                i.version.map_or("?".to_string(), |v| v.to_string()),
                i.path
                    .as_ref()
                    .map_or("(system loader)".to_string(), |p| p.display().to_string())
            ),
            Err(e) => format!(
                "{name:<13} not loaded: {}",
                e.lines().next().unwrap_or_default()
            ),
        }
    }
    let mut lines = vec![
        line(
            "cuDNN",
            sys::cudnn::load()
                .map(|a| a.info())
                .map_err(|e| e.to_string()),
        ),
        line(
            "cuBLAS",
            sys::cublas::load()
                .map(|a| a.info())
                .map_err(|e| e.to_string()),
        ),
        line(
            "CUDA runtime",
            sys::cudart::load()
                .map(|a| a.info())
                .map_err(|e| e.to_string()),
        ),
    ];
    let nvrtc = cudnn::graph::nvrtc::loaded();
    if nvrtc.is_empty() {
        lines.push(format!(
            "{:<13} none found (cuDNN's runtime-compiled engines need one before 9.2x)",
            "NVRTC"
        ));
    }
    for n in nvrtc {
        lines.push(format!(
            "{:<13} {:<9} {}",
            "NVRTC",
            n.version
                .map_or("?".to_string(), |(a, b)| format!("{a}.{b}")),
            n.path.display()
        ));
    }
    lines.push(line(
        "NCCL",
        sys::nccl::load()
            .map(|a| a.info())
            .map_err(|e| e.to_string()),
    ));
    lines
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("device_props: {e}");
            std::process::exit(2);
        }
    };
    // The capture first: nothing before it may fail or plan.
    let captured = capture(args.device);
    let mut failed = false;
    match &captured {
        Ok(bytes) => {
            if let Some(path) = &args.out {
                match std::fs::write(path, bytes) {
                    Ok(()) => eprintln!(
                        "device_props: {} bytes written to {}",
                        bytes.len(),
                        path.display()
                    ),
                    Err(e) => {
                        eprintln!("device_props: writing {}: {e}", path.display());
                        failed = true;
                    }
                }
            }
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(bytes);
            let _ = out.write_all(b"\n");
        }
        Err(e) => {
            eprintln!(
                "device_props: cuDNN gave no device-properties JSON for device {}: {e}",
                args.device
            );
            failed = true;
        }
    }
    for l in library_lines() {
        println!("{l}");
    }
    let name = cudnn::runtime::Device::count()
        .map_err(|e| e.to_string())
        .and_then(|n| match usize::try_from(args.device) {
            Ok(i) if i < n => cudnn::runtime::Device::new(i)
                .and_then(|d| d.name())
                .map_err(|e| e.to_string()),
            _ => Err(format!("no device {} ({n} found)", args.device)),
        });
    match name {
        Ok(n) => println!("{:<13} {n}", "device"),
        Err(e) => println!("{:<13} none: {e}", "device"),
    }
    if failed {
        std::process::exit(1);
    }
}
