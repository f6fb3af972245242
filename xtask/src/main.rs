//! Project tasks. Run `cargo xtask help`.

mod bench_build;
mod bindings;
mod conformance;
mod device_check;
mod features;
mod fetch;
mod fetch_toolkit;
mod import_cycles;
mod public_api;
mod srcmodel;
mod tasks;

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "\
usage: cargo xtask <task> [options]

tasks:
  run [lenet args]
      The project's run command: check the libraries as `doctor` does
      (fetching NVIDIA's wheels when they are missing), then train the
      `lenet` example (needs a GPU; without one it says so and fails).
  doctor
      Run the `doctor` example; when libraries are missing, fetch NVIDIA's
      wheels (cuda13) into the cache first and run it again.
  test --quick [cargo test args]
      The unit and host tiers against cuda13 only: a contributor's check
      after a change (minutes, warm).
  conformance [--only SUBSTR] [--targets h200,a100,b200] [--timing] [-v]
      The conformance tier alone (cuda13 and NVIDIA's frontend, fetched
      first); --only picks the patterns whose name contains SUBSTR.
  test [cargo test args]
      The project's test command: fetch the stacks, then run the whole test
      suite against cuda13 (cuDNN 9.28), the library tests against cuda12
      (cuDNN 8.9), the attention tests against cudnn910 (cuDNN 9.10, the
      composite attention), and the graph and raw host tests and planning
      examples against torch211 (what PyTorch 2.11.0 pins: cuDNN 9.19,
      NVRTC 13.0; the GPU machine's stack), with missing libraries counted
      as failures; and the conformance tier: every graph pattern built by
      NVIDIA's cuDNN frontend too, compared with the crate's (cuda13).
  fetch-libs [--stack cuda13|cuda12|cudnn910|torch211|all|candle]
      Download NVIDIA's pip wheels (pinned versions) and unpack the headers and
      shared libraries we use into the cache (.cuda-libs/<stack>, or
      $CUDNN_RS_CACHE/<stack>). With cuda13 (the default) and all, also
      NVIDIA's cuDNN frontend (Python, pinned) and the driver stub into
      <cache>/frontend for the conformance tier. `candle` (not in `all`):
      the CUDA toolkit candle-core's `cuda` feature builds with (nvcc, nvvm,
      headers, cudart, nvrtc, cuBLAS, cuRAND) and a link-time libcuda stub,
      for `cudnn-candle`; prints the environment to build with. A no-op
      when they are already there.
  bindgen [--check]
      Regenerate the committed bindings in cudart-sys, cudnn-sys, cublas-sys and nccl-sys
      from the cuda13 headers (fetching them first). With --check, write nothing
      and fail if the committed files differ.
  bench-planning [--reps N] [--rounds R] [--targets h200,a100,b200] [--only SUBSTR]...
      Planning host time, the crate against NVIDIA's cuDNN frontend (the
      conformance patterns, release build, same cuDNN): op-graph build,
      heuristics (mode A), first finalize and plan load per pattern, and
      their medians per family (conv, matmul, norms, SDPA) with the ratios
      crate / frontend. Each cheap stage is timed N times (default 5) on
      both sides, the whole run R times in turn (default 1; the sides run
      one after the other, so rounds even out a changing machine load); the
      target is h200 unless --targets says otherwise.
  bench-launch [--rounds N]
      The host cost of launching a cached graph plan (release build of
      `examples/bench_launch`): the crate's checks per launch by stage for
      plans with 3, 4 and 8 bindings, then of a legacy convolution, a
      cuBLASLt matmul (3 to 5 buffers) and an NCCL all-reduce, without a
      device; with one, each whole safe call (Plan::execute, the others)
      against the same call through the raw -sys crate.
  features
      Every feature combination of `cudnn` that matters builds
      warning-free: none, the defaults, each feature alone, all, and `link`
      (with the cuda13 stack, else NOT RUN): `cargo clippy -p cudnn-rs
      --no-default-features --features <set> --lib --examples -- -D warnings`
      per set; fails on the first that fails.
  bench-build [--rounds N] [--profiles debug,release] [--sets default,graph,...]
      The compile cost of `cudnn` against cudarc 0.19 (std, cudnn, cublas,
      cublaslt, driver, nccl, f16): clean debug and release builds of the
      five crates (dependencies prebuilt, in target/bench-build) with the
      default features and each feature alone (`all`, `none`, or `a+b` for
      a combination), paired with cudarc's in each round, N rounds (default
      3); a table of CPU seconds (user + system), wall, peak RSS and the
      CPU ratio to cudarc.
  device-check [--exclude NAME]... [--no-strip]
      Build the GPU test and example binaries, compress them (tar.xz) and
      pack them with a runner script into .device-check/ for a machine with
      an NVIDIA GPU; fails when what travels (the tree included) would not
      fit with room.
  public-api [--check]
      Write cudnn/public-api.txt: every public item of `cudnn` (features
      nccl and cudarc), one a line with its signature, sorted. With
      --check, write nothing and fail (showing the lines) when it differs.
  import-cycles
      Fail when files of cudnn/src import each other in a circle (a `use`
      or a path in the code, followed through re-exports to the file that
      defines the item; tests left out), naming the edges of each circle.
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("fetch-libs") => fetch::run(&args[1..]).map(|_| ()),
        Some("bindgen") => bindings::run(&args[1..]),
        Some("test") => tasks::test(&args[1..]),
        Some("conformance") => conformance::task(&args[1..]),
        Some("doctor") => tasks::doctor(&args[1..]),
        Some("run") => tasks::run(&args[1..]),
        Some("device-check") => device_check::run(&args[1..]),
        Some("import-cycles") => import_cycles::run(&args[1..]),
        Some("public-api") => public_api::run(&args[1..]),
        Some("bench-planning") => conformance::bench_planning(&args[1..]),
        Some("bench-launch") => conformance::bench_launch(&args[1..]),
        Some("features") => features::run(&args[1..]),
        Some("bench-build") => bench_build::run(&args[1..]),
        Some("help") | Some("--help") | Some("-h") | None => {
            print!("{USAGE}");
            Ok(())
        }
        Some(other) => Err(format!("unknown task `{other}`\n\n{USAGE}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root (the folder holding xtask/).
pub fn workspace_root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.parent().map(PathBuf::from).unwrap_or(here)
}

#[cfg(test)]
mod package_tests {
    //! Each published crate is self-contained: the -sys crates carry the same
    //! build script as a file of their own, and every crate its license
    //! files, copies that must not drift apart.

    use super::workspace_root;

    fn read(rel: &str) -> Vec<u8> {
        let p = workspace_root().join(rel);
        std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    #[test]
    fn sys_build_scripts_are_one_file() {
        let first = read("cudart-sys/build.rs");
        for c in ["cudnn-sys", "cublas-sys", "nccl-sys"] {
            let p = workspace_root().join(c).join("build.rs");
            let meta = std::fs::symlink_metadata(&p).expect("build.rs");
            assert!(meta.is_file(), "{c}/build.rs must be a file, not a link");
            assert!(
                read(&format!("{c}/build.rs")) == first,
                "{c}/build.rs differs from cudart-sys/build.rs: copy it over"
            );
        }
    }

    /// The run-path variables the docs name are the ones Cargo derives from
    /// each -sys crate's `links` key and its build script's metadata key
    /// (`cargo:<link>_lib_dir=`): `DEP_<LINKS>_<LINK>_LIB_DIR`, upper case.
    #[test]
    fn run_path_variables_in_the_docs_match_the_links_metadata() {
        let text = |rel: &str| String::from_utf8(read(rel)).expect("UTF-8");
        let build = text("cudart-sys/build.rs");
        assert!(
            build.contains(r#"println!("cargo:{}_lib_dir={}", l.link, dir.display());"#),
            "the build script's metadata key changed: update the docs and this test"
        );
        let root = text("README.md");
        for (krate, links) in [
            ("cudart-sys", &["cudart"][..]),
            ("cudnn-sys", &["cudnn"][..]),
            ("cublas-sys", &["cublas", "cublasLt"][..]),
            ("nccl-sys", &["nccl"][..]),
        ] {
            let manifest = text(&format!("{krate}/Cargo.toml"));
            let key = manifest
                .lines()
                .find_map(|l| l.strip_prefix("links = "))
                .map(|v| v.trim_matches('"').to_string())
                .unwrap_or_else(|| panic!("{krate}: no links key"));
            let readme = text(&format!("{krate}/README.md"));
            let docs = text(&format!("{krate}/src/lib.rs"));
            for link in links {
                assert!(
                    build.contains(&format!("link: \"{link}\"")),
                    "build.rs links no {link}"
                );
                let var = format!("DEP_{}_{}_LIB_DIR", key, link).to_uppercase();
                for (what, t) in [("README.md", &root), ("README", &readme), ("lib.rs", &docs)] {
                    assert!(t.contains(&var), "{krate}: {what} does not name {var}");
                }
            }
        }
    }

    #[test]
    fn every_published_crate_carries_the_licenses() {
        for l in ["LICENSE-MIT", "LICENSE-APACHE"] {
            let root = read(l);
            for c in ["cudart-sys", "cudnn-sys", "cublas-sys", "nccl-sys", "cudnn"] {
                assert!(
                    read(&format!("{c}/{l}")) == root,
                    "{c}/{l} differs from the root's"
                );
            }
        }
    }
}
