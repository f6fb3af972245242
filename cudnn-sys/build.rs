//! Build script of the -sys crates: the same file in cudart-sys, cudnn-sys,
//! cublas-sys and nccl-sys (a copy in each, so each folder builds on its own;
//! a test of xtask keeps the copies identical). It picks its library by the
//! crate's `links` key. It does nothing unless feature `link` is on: then it
//! finds the library directory from the same variables the run-time loader
//! uses and tells rustc to link against it. It writes nothing but to OUT_DIR
//! (and writes nothing there today).

use std::env;
use std::path::{Path, PathBuf};

struct Lib {
    /// The `-l` name and the file names to look for, newest first.
    link: &'static str,
    files: &'static [&'static str],
    override_var: &'static str,
}

fn libs(links: &str) -> &'static [Lib] {
    match links {
        "cudnn_rs_cudnn" => &[Lib {
            link: "cudnn",
            files: &["libcudnn.so", "libcudnn.so.9", "libcudnn.so.8"],
            override_var: "CUDNN_LIB_DIR",
        }],
        "cudnn_rs_cublas" => &[
            Lib {
                link: "cublas",
                files: &["libcublas.so", "libcublas.so.13", "libcublas.so.12"],
                override_var: "CUBLAS_LIB_DIR",
            },
            Lib {
                link: "cublasLt",
                files: &["libcublasLt.so", "libcublasLt.so.13", "libcublasLt.so.12"],
                override_var: "CUBLASLT_LIB_DIR",
            },
        ],
        "cudnn_rs_nccl" => &[Lib {
            link: "nccl",
            files: &["libnccl.so", "libnccl.so.2"],
            override_var: "NCCL_LIB_DIR",
        }],
        _ => &[Lib {
            link: "cudart",
            files: &["libcudart.so", "libcudart.so.13", "libcudart.so.12"],
            override_var: "CUDART_LIB_DIR",
        }],
    }
}

const ROOT_VARS: &[&str] = &["CUDNN_PATH", "NCCL_HOME", "CUDA_PATH", "CUDA_HOME"];
const LIST_VARS: &[&str] = &["CUDNN_RS_SEARCH_PATH", "VIRTUAL_ENV", "CONDA_PREFIX"];
const PY_DIRS: &[&str] = &[
    "nvidia/cudnn/lib",
    "nvidia/cu13/lib",
    "nvidia/cublas/lib",
    "nvidia/cuda_runtime/lib",
    "nvidia/nccl/lib",
];
const STANDARD: &[&str] = &[
    "/usr/local/cuda/lib64",
    "/usr/local/cuda/targets/x86_64-linux/lib",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let links = env::var("CARGO_MANIFEST_LINKS").unwrap_or_default();
    let libs = libs(&links);
    println!("cargo:rerun-if-env-changed=DOCS_RS");
    if env::var_os("DOCS_RS").is_some() || env::var_os("CARGO_FEATURE_LINK").is_none() {
        // Nothing is searched, so no search variable is declared: a build
        // that loads the libraries at run time is not rebuilt when they
        // change (the test stages switch CUDNN_RS_SEARCH_PATH per stack).
        return;
    }
    for l in libs {
        println!("cargo:rerun-if-env-changed={}", l.override_var);
    }
    for v in ROOT_VARS.iter().chain(LIST_VARS) {
        println!("cargo:rerun-if-env-changed={v}");
    }
    let mut failures = Vec::new();
    for l in libs {
        match find(l) {
            Ok((dir, file)) => {
                println!("cargo:rustc-link-search=native={}", dir.display());
                if file == format!("lib{}.so", l.link) {
                    println!("cargo:rustc-link-lib=dylib={}", l.link);
                } else {
                    // Only a versioned file (as in NVIDIA's wheels): link it by name.
                    println!("cargo:rustc-link-lib=dylib:+verbatim={file}");
                }
                println!("cargo:{}_lib_dir={}", l.link, dir.display());
            }
            Err(searched) => failures.push((l, searched)),
        }
    }
    if !failures.is_empty() {
        let mut msg = String::from("feature `link` is on, but a library was not found.\n");
        for (l, searched) in failures {
            msg.push_str(&format!("lib{}: searched\n", l.link));
            for s in searched {
                msg.push_str(&format!("    {}\n", s.display()));
            }
            msg.push_str(&format!(
                "set {} to the directory holding one of {:?}\n",
                l.override_var, l.files
            ));
        }
        msg.push_str("(or build without feature `link` to load the libraries at run time)");
        // A build script reports failure by panicking; this is the message cargo shows.
        eprintln!("{msg}");
        std::process::exit(1);
    }
}

fn find(l: &Lib) -> Result<(PathBuf, String), Vec<PathBuf>> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(v) = env::var_os(l.override_var).filter(|v| !v.is_empty()) {
        let p = PathBuf::from(v);
        dirs.push(if p.is_file() {
            p.parent().map(Path::to_path_buf).unwrap_or(p)
        } else {
            p
        });
    } else {
        for var in ROOT_VARS {
            if let Some(root) = env::var_os(var).filter(|v| !v.is_empty()) {
                for sub in ["lib64", "lib", "targets/x86_64-linux/lib"] {
                    dirs.push(Path::new(&root).join(sub));
                }
            }
        }
        if let Some(list) = env::var_os("CUDNN_RS_SEARCH_PATH") {
            // An empty entry is skipped, as at run time: it would be the
            // current folder (the build script's is the crate's).
            for d in env::split_paths(&list).filter(|d| !d.as_os_str().is_empty()) {
                dirs.push(d.clone());
                dirs.extend(PY_DIRS.iter().map(|p| d.join(p)));
            }
        }
        dirs.extend(STANDARD.iter().map(PathBuf::from));
        for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
            if let Some(prefix) = env::var_os(var).filter(|v| !v.is_empty()) {
                let lib = Path::new(&prefix).join("lib");
                if let Ok(rd) = std::fs::read_dir(&lib) {
                    for e in rd.flatten() {
                        if e.file_name().to_string_lossy().starts_with("python3") {
                            let site = e.path().join("site-packages");
                            dirs.extend(PY_DIRS.iter().map(|p| site.join(p)));
                        }
                    }
                }
            }
        }
    }
    for d in &dirs {
        for f in l.files {
            if d.join(f).is_file() {
                return Ok((d.clone(), f.to_string()));
            }
        }
    }
    Err(dirs)
}
