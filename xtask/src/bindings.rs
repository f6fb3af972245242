//! `cargo xtask bindgen`: regenerate the committed raw bindings.
//!
//! Each -sys crate gets two generated files:
//! - `src/generated/types.rs`: types, constants and layout checks;
//! - `src/generated/functions*.rs`: the library's functions *as data*, one
//!   `functions! { unsafe extern "C" { ... } }` list that the crate's
//!   macro turns into run-time loading (default) or link-time linking
//!   (feature `link`).
//!
//! Rules (see shared/STYLE.md): allowlist by prefix; C enums become
//! `#[repr(transparent)]` newtypes; no comments copied from the headers;
//! CUDA runtime types are generated once, in cudart-sys, and every other crate
//! blocklists the CUDA headers and imports them from there.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use bindgen::{EnumVariation, Formatter, RustEdition, RustTarget};

use quote::ToTokens;

use crate::fetch;

/// The cudart subset we bind: devices and attributes, memory (device, pinned
/// host, stream-ordered, memset), streams, events, errors, versions, pointer
/// attributes, stream capture and graph launch.
const CUDART_FUNCTIONS: &[&str] = &[
    // devices and attributes
    "cudaGetDeviceCount",
    "cudaGetDevice",
    "cudaSetDevice",
    "cudaSetDeviceFlags",
    "cudaGetDeviceFlags",
    "cudaGetDeviceProperties",
    "cudaDeviceGetAttribute",
    "cudaDeviceGetPCIBusId",
    "cudaDeviceSynchronize",
    "cudaDeviceReset",
    "cudaDeviceGetLimit",
    "cudaDeviceSetLimit",
    "cudaDeviceCanAccessPeer",
    "cudaDeviceGetStreamPriorityRange",
    "cudaDeviceGetDefaultMemPool",
    "cudaDeviceGetMemPool",
    "cudaMemGetInfo",
    // errors and versions
    "cudaGetLastError",
    "cudaPeekAtLastError",
    "cudaGetErrorName",
    "cudaGetErrorString",
    "cudaRuntimeGetVersion",
    "cudaDriverGetVersion",
    // memory
    "cudaMalloc",
    "cudaFree",
    "cudaMallocHost",
    "cudaHostAlloc",
    "cudaFreeHost",
    "cudaHostRegister",
    "cudaHostUnregister",
    "cudaHostGetDevicePointer",
    "cudaMallocManaged",
    "cudaMemcpy",
    "cudaMemcpyAsync",
    "cudaMemcpy2D",
    "cudaMemcpy2DAsync",
    "cudaMemcpyPeer",
    "cudaMemcpyPeerAsync",
    "cudaMemset",
    "cudaMemsetAsync",
    "cudaMemset2D",
    "cudaMemset2DAsync",
    "cudaPointerGetAttributes",
    // stream-ordered allocation
    "cudaMallocAsync",
    "cudaFreeAsync",
    "cudaMallocFromPoolAsync",
    "cudaMemPoolCreate",
    "cudaMemPoolDestroy",
    "cudaMemPoolSetAttribute",
    "cudaMemPoolGetAttribute",
    "cudaMemPoolTrimTo",
    // streams
    "cudaStreamCreate",
    "cudaStreamCreateWithFlags",
    "cudaStreamCreateWithPriority",
    "cudaStreamDestroy",
    "cudaStreamSynchronize",
    "cudaStreamQuery",
    "cudaStreamWaitEvent",
    "cudaStreamGetFlags",
    "cudaStreamGetPriority",
    "cudaLaunchHostFunc",
    // events
    "cudaEventCreate",
    "cudaEventCreateWithFlags",
    "cudaEventDestroy",
    "cudaEventRecord",
    "cudaEventRecordWithFlags",
    "cudaEventQuery",
    "cudaEventSynchronize",
    "cudaEventElapsedTime",
    // stream capture and graphs
    "cudaStreamBeginCapture",
    "cudaStreamEndCapture",
    "cudaStreamIsCapturing",
    "cudaThreadExchangeStreamCaptureMode",
    "cudaGraphCreate",
    "cudaGraphDestroy",
    "cudaGraphInstantiate",
    "cudaGraphInstantiateWithFlags",
    "cudaGraphLaunch",
    "cudaGraphUpload",
    "cudaGraphExecDestroy",
    "cudaGraphExecUpdate",
    "cudaGraphGetNodes",
    "cudaStreamGetCaptureInfo",
];

/// CUDA types the other crates use, defined here once.
const CUDART_TYPES: &[&str] = &[
    "cudaDataType.*",
    "libraryPropertyType.*",
    "cudaStream_t",
    "cudaEvent_t",
    "cudaGraph_t",
    "cudaGraphExec_t",
    "cudaGraphNode_t",
    "cudaGraphExecUpdateResult",
    "cudaGraphExecUpdateResultInfo",
    "cudaError.*",
    "cudaDeviceAttr",
    "cudaDeviceProp",
    "cudaMemcpyKind",
    "cudaMemoryType",
    "cudaPointerAttributes",
    "cudaStreamCaptureMode",
    "cudaStreamCaptureStatus",
    "cudaMemPoolAttr",
    "cudaLimit",
    "cuComplex",
    "cuFloatComplex",
    "cuDoubleComplex",
    "__half",
    "__nv_bfloat16",
    "cudaEmulation.*",
];

const CUDART_VARS: &[&str] = &[
    "CUDART_VERSION",
    "cudaStream(Default|NonBlocking)",
    "cudaEvent(Default|BlockingSync|DisableTiming|Interprocess|RecordDefault|RecordExternal)",
    "cudaHost(Alloc|Register)[A-Za-z]*",
    "cudaMemAttach[A-Za-z]*",
    "cudaDevice(Schedule[A-Za-z]*|MapHost|LmemResizeToMax)",
    "cudaCpuDeviceId",
    "cudaInvalidDeviceId",
];

/// The CUDA runtime's own headers: cudnn-sys and cublas-sys take these
/// types from cudart-sys instead of generating them again.
const CUDA_HEADERS: &str = r".*/include/(crt/.*|cuda[^/]*|driver_[^/]*|library_types|vector_types|cuComplex|builtin_types|surface_types|texture_types|channel_descriptor|host_[^/]*|device_[^/]*)\.(h|hpp)";

/// (file stem, which functions go in it).
type FunctionList = (&'static str, fn(&str) -> bool);
/// Name -> token text.
type Index = BTreeMap<String, String>;

struct Target {
    krate: &'static str,
    /// Include dirs (relative to a stack folder) for the cuda13 and cuda12 stacks.
    includes13: &'static [&'static str],
    includes12: &'static [&'static str],
    /// The name of the compat list, and the older library it is about.
    compat: (&'static str, &'static str),
    wrapper: &'static str,
    configure: fn(bindgen::Builder) -> bindgen::Builder,
    /// (file stem, predicate on a function name) for each function list.
    function_lists: &'static [FunctionList],
    imports_cudart: bool,
    /// This library's own wheels (cuda13, cuda12) when they are a stack's
    /// `extras` rather than part of its base set; the stamp names them.
    own_wheels: Option<(&'static str, &'static str)>,
}

fn targets() -> Vec<Target> {
    vec![
        Target {
            krate: "cudart-sys",
            includes13: &["nvidia/cu13/include"],
            includes12: &["nvidia/cuda_runtime/include"],
            compat: ("ABI_DIFFERS_IN_CUDA12", "CUDA 12 runtime"),
            wrapper: "#include <cuda_runtime_api.h>\n#include <library_types.h>\n#include <cuComplex.h>\n#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n",
            configure: |b| {
                let mut b = b;
                for f in CUDART_FUNCTIONS {
                    b = b.allowlist_function(format!("^{f}$"));
                }
                for t in CUDART_TYPES {
                    b = b.allowlist_type(format!("^{t}$"));
                }
                for v in CUDART_VARS {
                    b = b.allowlist_var(format!("^{v}$"));
                }
                b
            },
            function_lists: &[("functions", |_| true)],
            imports_cudart: false,
            own_wheels: None,
        },
        Target {
            krate: "cudnn-sys",
            includes13: &["nvidia/cudnn/include", "nvidia/cu13/include"],
            includes12: &["nvidia/cudnn/include", "nvidia/cuda_runtime/include"],
            compat: ("ABI_DIFFERS_IN_CUDNN8", "cuDNN 8.9"),
            wrapper: "#include <cudnn.h>\n",
            configure: |b| {
                b.allowlist_function("^cudnn.*")
                    .allowlist_type("^cudnn.*")
                    .allowlist_var("^CUDNN_.*")
                    .blocklist_file(CUDA_HEADERS)
            },
            function_lists: &[("functions", |_| true)],
            imports_cudart: true,
            own_wheels: None,
        },
        Target {
            krate: "cublas-sys",
            includes13: &["nvidia/cu13/include"],
            includes12: &["nvidia/cublas/include", "nvidia/cuda_runtime/include"],
            compat: ("ABI_DIFFERS_IN_CUBLAS12", "cuBLAS 12"),
            wrapper: "#include <cublas_v2.h>\n#include <cublasLt.h>\n",
            configure: |b| {
                b.allowlist_function("^cublas.*")
                    .allowlist_type("^cublas.*")
                    .allowlist_var("^CUBLAS.*")
                    .blocklist_file(CUDA_HEADERS)
                    // FILE* appears only in cublasLtLoggerSetFile; keep it opaque.
                    .blocklist_type("FILE")
                    .blocklist_type("_IO_.*")
                    .raw_line("pub type FILE = ::core::ffi::c_void;")
            },
            function_lists: &[
                ("functions", |n| !n.starts_with("cublasLt")),
                ("functions_lt", |n| n.starts_with("cublasLt")),
            ],
            imports_cudart: true,
            own_wheels: None,
        },
        Target {
            krate: "nccl-sys",
            includes13: &["nvidia/nccl/include", "nvidia/cu13/include"],
            includes12: &["nvidia/nccl/include", "nvidia/cuda_runtime/include"],
            compat: ("ABI_DIFFERS_IN_NCCL_CU12", "NCCL build for CUDA 12"),
            wrapper: "#include <nccl.h>\n",
            configure: |b| {
                b.allowlist_function("^nccl.*")
                    .allowlist_type("^nccl.*")
                    .allowlist_var("^NCCL_.*")
                    .blocklist_file(CUDA_HEADERS)
            },
            function_lists: &[("functions", |_| true)],
            imports_cudart: true,
            own_wheels: Some((fetch::NCCL13, fetch::NCCL12)),
        },
    ]
}

pub fn run(args: &[String]) -> Result<(), String> {
    let check = match args {
        [] => false,
        [a] if a == "--check" => true,
        _ => return Err(format!("bindgen: unknown options {args:?} (only --check)")),
    };
    let headers13 = fetch::fetch(&fetch::CUDA13)?;
    let headers12 = fetch::fetch(&fetch::CUDA12)?;
    let root = crate::workspace_root();
    let mut stale = Vec::new();
    for t in targets() {
        let wheels13 = match t.own_wheels {
            Some((own, _)) => format!("{own}, {}", fetch::CUDA13.wheels.join(", ")),
            None => fetch::CUDA13.wheels.join(", "),
        };
        let stamp = format!(
            "// Generated by `cargo xtask bindgen` (bindgen 0.72.1) from the headers of\n// {wheels13}.\n// Do not edit: regenerate.\n"
        );
        let inc13: Vec<PathBuf> = t.includes13.iter().map(|d| headers13.join(d)).collect();
        let mut inc12: Vec<PathBuf> = t.includes12.iter().map(|d| headers12.join(d)).collect();
        // The CUDA 12 runtime wheel lacks `crt/host_defines.h` (only
        // attribute macros); take it from the CUDA 13 headers, searched last.
        inc12.push(headers13.join("nvidia/cu13/include/crt/.."));
        let code13 = generate(&t, &inc13)?;
        let code12 = generate(&t, &inc12)?;
        let mut files = split(&t, &code13, &stamp)?;
        files.push(compat(&t, &code13, &code12, &stamp)?);
        for (rel, text) in files {
            let path = root.join(t.krate).join(&rel);
            let old = fs::read_to_string(&path).unwrap_or_default();
            if old == text {
                continue;
            }
            if check {
                stale.push(path);
            } else {
                if let Some(dir) = path.parent() {
                    fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
                }
                fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
                println!("wrote {}", path.display());
            }
        }
    }
    if !stale.is_empty() {
        let list: Vec<String> = stale.iter().map(|p| format!("  {}", p.display())).collect();
        return Err(format!(
            "the committed bindings differ from what the headers give:\n{}\nrun `cargo xtask bindgen` and commit the result",
            list.join("\n")
        ));
    }
    if check {
        println!("bindings are up to date");
    }
    Ok(())
}

fn generate(t: &Target, include_dirs: &[PathBuf]) -> Result<String, String> {
    let mut b = bindgen::Builder::default()
        .header_contents("wrapper.h", t.wrapper)
        .clang_arg("--target=x86_64-unknown-linux-gnu")
        .rust_target(RustTarget::stable(85, 0).map_err(|e| e.to_string())?)
        .rust_edition(RustEdition::Edition2024)
        .formatter(Formatter::Prettyplease)
        .generate_comments(false)
        .layout_tests(true)
        .default_enum_style(EnumVariation::NewType {
            is_bitfield: false,
            is_global: false,
        })
        .derive_default(true)
        .derive_eq(true)
        .derive_hash(true)
        .size_t_is_usize(true)
        .use_core();
    for dir in include_dirs {
        b = b.clang_arg(format!("-I{}", dir.display()));
    }
    b = (t.configure)(b);
    Ok(b.generate()
        .map_err(|e| format!("{}: bindgen failed: {e}", t.krate))?
        .to_string())
}

/// Functions and struct/union definitions by name, as token text.
fn index(code: &str) -> Result<(Index, Index), String> {
    let file: syn::File =
        syn::parse_str(code).map_err(|e| format!("parsing bindgen output: {e}"))?;
    let mut fns = BTreeMap::new();
    let mut defs = BTreeMap::new();
    for item in file.items {
        match item {
            syn::Item::ForeignMod(m) => {
                for fi in m.items {
                    if let syn::ForeignItem::Fn(f) = fi {
                        let name = f.sig.ident.to_string();
                        // Parameter types and return type only: names do not matter.
                        let tys: Vec<String> = f
                            .sig
                            .inputs
                            .iter()
                            .map(|a| match a {
                                syn::FnArg::Typed(p) => p.ty.to_token_stream().to_string(),
                                syn::FnArg::Receiver(_) => String::new(),
                            })
                            .collect();
                        let ret = f.sig.output.to_token_stream().to_string();
                        fns.insert(name, format!("({}) {ret}", tys.join(", ")));
                    }
                }
            }
            syn::Item::Struct(s) => {
                defs.insert(s.ident.to_string(), s.fields.to_token_stream().to_string());
            }
            syn::Item::Union(u) => {
                defs.insert(u.ident.to_string(), u.fields.to_token_stream().to_string());
            }
            syn::Item::Type(t) => {
                defs.insert(t.ident.to_string(), t.ty.to_token_stream().to_string());
            }
            _ => {}
        }
    }
    Ok((fns, defs))
}

/// Type names a signature mentions, followed through typedefs.
fn mentioned(sig: &str, defs: &BTreeMap<String, String>, seen: &mut BTreeSet<String>) {
    for word in sig.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
        if let Some(d) = defs.get(word)
            && seen.insert(word.to_string())
        {
            mentioned(d, defs, seen);
        }
    }
}

/// The functions our (newer) bindings declare whose ABI the older headers
/// declare differently, or do not declare: absent, another signature, or a
/// parameter type (followed through pointers and typedefs) laid out otherwise.
fn compat(t: &Target, new: &str, old: &str, stamp: &str) -> Result<(PathBuf, String), String> {
    let (new_fns, new_defs) = index(new)?;
    let (old_fns, old_defs) = index(old)?;
    let mut differ = Vec::new();
    for (name, sig) in &new_fns {
        let why = match old_fns.get(name) {
            None => Some("not declared".to_string()),
            Some(o) if o != sig => Some(format!("signature {o}")),
            Some(_) => {
                let mut types = BTreeSet::new();
                mentioned(sig, &new_defs, &mut types);
                types
                    .iter()
                    // cuBLASLt's `*Opaque_t` structs are allocated by the library
                    // and reached only through handles, except by the
                    // `*Init_internal` functions, where the caller allocates them.
                    .filter(|ty| !ty.ends_with("Opaque_t") || name.ends_with("Init_internal"))
                    .find(|ty| {
                        old_defs
                            .get(*ty)
                            .is_some_and(|o| Some(o) != new_defs.get(*ty))
                    })
                    .map(|ty| format!("type `{ty}` differs"))
            }
        };
        if let Some(why) = why {
            differ.push((name.clone(), why));
        }
    }
    let (list, lib) = t.compat;
    let mut s = String::from(stamp);
    let wheels12 = match t.own_wheels {
        Some((_, own)) => format!("{own}, {}", fetch::CUDA12.wheels.join(", ")),
        None => fetch::CUDA12.wheels.join(", "),
    };
    s.push_str(&format!("// Compared with the headers of {wheels12}.\n"));
    s.push_str(&format!(
        "\n/// Functions these bindings declare that the {lib} headers declare\n/// differently or not at all. When that library is loaded, these are\n/// treated as absent, so calling one is an error value, never a call with\n/// the wrong ABI. ({} of {}.)\npub const {list}: &[&str] = &[\n",
        differ.len(),
        new_fns.len()
    ));
    for (name, why) in &differ {
        s.push_str(&format!("    \"{name}\", // {}\n", why.replace('\n', " ")));
    }
    s.push_str("];\n");
    Ok((PathBuf::from("src/generated/compat.rs"), s))
}

/// `self::A as B` -> (A, B).
fn alias_of(tree: &syn::UseTree) -> Option<(syn::Ident, syn::Ident)> {
    match tree {
        syn::UseTree::Path(p) if p.ident == "self" => match &*p.tree {
            syn::UseTree::Rename(r) => Some((r.ident.clone(), r.rename.clone())),
            _ => None,
        },
        _ => None,
    }
}

/// Split bindgen's output into the types file and the function lists.
fn split(t: &Target, code: &str, stamp: &str) -> Result<Vec<(PathBuf, String)>, String> {
    let file: syn::File =
        syn::parse_str(code).map_err(|e| format!("{}: parsing bindgen output: {e}", t.krate))?;
    let mut items = Vec::new();
    let mut fns: Vec<syn::ForeignItemFn> = Vec::new();
    for item in file.items {
        match item {
            syn::Item::ForeignMod(m) => {
                for fi in m.items {
                    match fi {
                        syn::ForeignItem::Fn(f) => fns.push(f),
                        other => {
                            return Err(format!(
                                "{}: unexpected foreign item {}",
                                t.krate,
                                quote::quote!(#other)
                            ));
                        }
                    }
                }
            }
            // bindgen re-exports enum typedefs (`pub use self::cudaDataType as
            // cublasDataType_t`); a private glob import cannot be re-exported,
            // and a type alias serves the same purpose (consts included).
            syn::Item::Use(u) if t.imports_cudart => match alias_of(&u.tree) {
                Some((from, to)) => items.push(syn::parse_quote! { pub type #to = #from; }),
                None => items.push(syn::Item::Use(u)),
            },
            other => items.push(other),
        }
    }
    fns.sort_by_key(|f| f.sig.ident.to_string());

    let mut out = Vec::new();
    let mut types = String::from(stamp);
    types.push_str("#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals, dead_code, missing_debug_implementations)]\n#![allow(clippy::all, clippy::undocumented_unsafe_blocks)]\n");
    if t.imports_cudart {
        types.push_str("#[allow(unused_imports)]\nuse cudart_sys::*;\n");
    }
    types.push('\n');
    types.push_str(&prettyplease::unparse(&syn::File {
        shebang: None,
        attrs: vec![],
        items,
    }));
    out.push((PathBuf::from("src/generated/types.rs"), types));

    for (stem, pick) in t.function_lists {
        let chosen: Vec<syn::ForeignItem> = fns
            .iter()
            .filter(|f| pick(&f.sig.ident.to_string()))
            .map(|f| syn::ForeignItem::Fn(f.clone()))
            .collect();
        let block: syn::ItemForeignMod = syn::parse_quote! {
            unsafe extern "C" { #(#chosen)* }
        };
        let text = prettyplease::unparse(&syn::File {
            shebang: None,
            attrs: vec![],
            items: vec![syn::Item::ForeignMod(block)],
        });
        let mut s = String::from(stamp);
        s.push_str(&format!("// {} functions.\n", chosen.len()));
        s.push_str("functions! {\n");
        for line in text.lines() {
            if line.is_empty() {
                s.push('\n');
            } else {
                s.push_str("    ");
                s.push_str(line);
                s.push('\n');
            }
        }
        s.push_str("}\n");
        out.push((Path::new("src/generated").join(format!("{stem}.rs")), s));
    }
    Ok(out)
}
