//! `cargo run --example doctor [-- --verbose]`: where each library was found
//! and its version, or the places tried (one line per place; `--verbose`:
//! every path) and the one variable to set; then the devices. When
//! something is missing, the first thing printed is what to do.
//!
//! Exit status: 0 when cuDNN, cuBLAS, cuBLASLt and the CUDA runtime all load
//! (a machine without a GPU is reported, not an error); 1 otherwise. NCCL
//! is reported too, as optional.

use std::io::Write;
use std::process::ExitCode;

/// `println!` that ignores a closed stdout (`doctor | head`) instead of panicking.
macro_rules! out {
    ($($t:tt)*) => {{
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

use cudnn::runtime::Device;
use cudnn::sys::{cublas, cudart, cudnn as dnn, nccl};

/// How a library's load went, for the report.
struct Outcome {
    name: &'static str,
    /// The found line, or the load error.
    result: Result<String, cudart::LoadError>,
}

fn outcome<T>(
    name: &'static str,
    header: cudart::Version,
    r: Result<&T, cudart::LoadError>,
    info: impl Fn(&T) -> &cudart::LibraryInfo,
) -> Outcome {
    let result = match r {
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
            Ok(format!(
                "{name:<13} {version:<10} {path}{how}  (bindings from {header})"
            ))
        }
        Err(e) => Err(e),
    };
    Outcome { name, result }
}

/// The one thing to do first.
fn action(missing: &[&cudart::LoadError]) -> String {
    match missing {
        [one] => one.fix(),
        _ => "in a checkout of this project run `cargo xtask doctor` (it fetches NVIDIA's \
              wheels and checks again); or install NVIDIA's pip wheels and set \
              CUDNN_RS_SEARCH_PATH to the environment's site-packages folder; or set each \
              library's variable (below)"
            .to_string(),
    }
}

/// One device's properties.
fn describe(ordinal: usize) -> cudnn::Result<()> {
    let d = Device::new(ordinal)?;
    let (major, minor) = d.compute_capability()?;
    let mem = d.memory_info()?;
    out!(
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
    let verbose = std::env::args()
        .skip(1)
        .any(|a| a == "--verbose" || a == "-v");
    let all = [
        outcome(
            "CUDA runtime",
            cudart::HEADER_VERSION,
            cudart::load(),
            |t| t.info(),
        ),
        outcome("cuDNN", dnn::HEADER_VERSION, dnn::load(), |t| t.info()),
        outcome("cuBLAS", cublas::HEADER_VERSION, cublas::load(), |t| {
            t.info()
        }),
        outcome("cuBLASLt", cublas::HEADER_VERSION, cublas::load_lt(), |t| {
            t.info()
        }),
    ];
    let missing: Vec<&cudart::LoadError> =
        all.iter().filter_map(|o| o.result.as_ref().err()).collect();
    if !missing.is_empty() {
        out!("to do first: {}\n", action(&missing));
    }
    out!("libraries:");
    // Places already listed, so a second library searched in the same
    // places says so in one line.
    let mut listed: Vec<(&str, Vec<cudart::loader::Place>)> = Vec::new();
    for o in &all {
        match &o.result {
            Ok(line) => out!("{line}"),
            Err(e) => {
                out!("{:<13} NOT FOUND", o.name);
                let places = e.places();
                let same = listed.iter().find(|(_, p)| {
                    p.len() == places.len()
                        && p.iter()
                            .zip(&places)
                            .all(|(a, b)| a.dir == b.dir && a.source == b.source)
                        && places.iter().all(|b| b.failures.is_empty())
                });
                let text = if verbose {
                    format!("{e:#}")
                } else if let Some((first, _)) = same {
                    format!(
                        "looked for {} in the same {} places tried as {first}: not found\nfix: {}",
                        e.file_names.join(", "),
                        places.len(),
                        e.fix()
                    )
                } else {
                    e.to_string()
                };
                for line in text.lines() {
                    out!("    {line}");
                }
                listed.push((o.name, places));
            }
        }
    }
    if !verbose && !missing.is_empty() {
        out!("    (`--verbose` lists every path tried)");
    }
    // NCCL is optional (feature `nccl`): reported, never a failure.
    match outcome("NCCL", nccl::HEADER_VERSION, nccl::load(), |t| t.info()).result {
        Ok(line) => out!("{line}"),
        Err(e) => out!(
            "{:<13} not found (optional: only `cudnn::nccl` needs it); {}",
            "NCCL",
            e.fix()
        ),
    }

    out!("devices:");
    if all[0].result.is_err() {
        out!("  not checked: the CUDA runtime did not load (see above)");
    } else {
        match Device::count() {
            Ok(0) => out!("  no CUDA device"),
            Ok(n) => {
                for i in 0..n {
                    if let Err(e) = describe(i) {
                        out!("  device {i}: {e}");
                    }
                }
            }
            Err(e) => out!("  no usable CUDA device: {e}"),
        }
    }
    if missing.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
