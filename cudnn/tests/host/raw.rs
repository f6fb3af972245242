//! The raw layer (issue: "Raw layer"): loading, discovery, versions, error
//! strings and descriptor round trips against the real libraries, no GPU.
//!
//! Unit tests need nothing; host tests need the libraries (skipped visibly
//! without them, failed under `CUDNN_RS_REQUIRE_LIBS=1`). Set
//! `CUDNN_RS_EXPECT_STACK=cuda13|cuda12|torch211` to also pin the versions loaded.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::ffi::{CStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;

use cudnn::sys::cudart::loader::{self, Candidate, Environment, Source};
use cudnn::sys::cudart::{self, Version};
use cudnn::sys::{cublas, cudnn as dnn};
use support::*;

/// A fake environment: variables and directory listings from maps.
struct FakeEnv {
    vars: Vec<(&'static str, String)>,
    dirs: Vec<(PathBuf, Vec<&'static str>)>,
}

impl Environment for FakeEnv {
    fn var(&self, name: &str) -> Option<OsString> {
        self.vars
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| OsString::from(v))
    }
    fn list_dir(&self, dir: &Path) -> Vec<String> {
        self.dirs
            .iter()
            .find(|(d, _)| d == dir)
            .map(|(_, names)| names.iter().map(|s| s.to_string()).collect())
            .unwrap_or_default()
    }
}

fn env(vars: &[(&'static str, &str)]) -> FakeEnv {
    FakeEnv {
        vars: vars.iter().map(|(k, v)| (*k, v.to_string())).collect(),
        dirs: vec![],
    }
}

fn position(list: &[Candidate], path: &str) -> Option<usize> {
    list.iter().position(|c| c.path == Path::new(path))
}

// ---------- unit ----------

fn unit_version_decoding() -> TestResult {
    ensure!(dnn::decode_version(8907) == Version::new(8, 9, 7), "8907");
    ensure!(dnn::decode_version(8100) == Version::new(8, 1, 0), "8100");
    ensure!(
        dnn::decode_version(92801) == Version::new(9, 28, 1),
        "92801"
    );
    ensure!(dnn::decode_version(90000) == Version::new(9, 0, 0), "90000");
    ensure!(
        cudart::decode_runtime_version(13050) == Version::new(13, 5, 0),
        "13050"
    );
    ensure!(
        cudart::decode_runtime_version(12090) == Version::new(12, 9, 0),
        "12090"
    );
    ensure!(
        cublas::decode_version(131000) == Version::new(13, 10, 0),
        "131000"
    );
    ensure!(
        cublas::decode_version(120903) == Version::new(12, 9, 3),
        "120903"
    );
    ensure!(
        dnn::HEADER_VERSION.major == 9,
        "bindings come from cuDNN 9 headers"
    );
    ensure!(
        cudart::HEADER_VERSION.major == 13,
        "bindings come from CUDA 13 headers"
    );
    Ok(())
}

fn unit_discovery_order() -> TestResult {
    let mut e = env(&[
        ("CUDNN_PATH", "/opt/cudnn"),
        ("CUDA_PATH", "/opt/cuda"),
        ("CUDNN_RS_SEARCH_PATH", "/s1:/s2"),
        ("VIRTUAL_ENV", "/venv"),
        ("CONDA_PREFIX", "/conda"),
        ("HOME", "/home/u"),
        ("CUDNN_RS_FALLBACK_PATH", "/fb"),
    ]);
    e.dirs = vec![
        (PathBuf::from("/venv/lib"), vec!["python3.12", "site.py"]),
        (PathBuf::from("/conda/lib"), vec!["python3.11"]),
        (PathBuf::from("/home/u/.local/lib"), vec!["python3.10"]),
    ];
    let list = loader::candidates(&dnn::SPEC, &e);
    let order = [
        "/opt/cudnn/lib64/libcudnn.so.9",
        "/opt/cudnn/lib64/libcudnn.so.8",
        "/opt/cudnn/targets/x86_64-linux/lib/libcudnn.so.9",
        "/opt/cuda/lib64/libcudnn.so.9",
        "/s1/libcudnn.so.9",
        "/s1/nvidia/cudnn/lib/libcudnn.so.9",
        "/s2/nvidia/cudnn/lib/libcudnn.so.9",
        "libcudnn.so.9",
        "libcudnn.so.8",
        "libcudnn.so",
        "/usr/local/cuda/lib64/libcudnn.so.9",
        "/usr/lib/x86_64-linux-gnu/libcudnn.so.9",
        "/venv/lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn.so.9",
        "/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcudnn.so.9",
        "/conda/lib/python3.11/site-packages/nvidia/cudnn/lib/libcudnn.so.9",
        "/home/u/.local/lib/python3.10/site-packages/nvidia/cudnn/lib/libcudnn.so.9",
        "/usr/lib/python3/dist-packages/nvidia/cudnn/lib/libcudnn.so.9",
        "/fb/nvidia/cudnn/lib/libcudnn.so.9",
    ];
    let mut last = None;
    for p in order {
        let i = position(&list, p).ok_or_else(|| format!("{p} is not a candidate"))?;
        if let Some((lp, li)) = last {
            ensure!(i > li, "{p} (#{i}) should come after {lp} (#{li})");
        }
        last = Some((p, i));
    }
    ensure!(
        position(
            &list,
            "/venv/lib/site.py/site-packages/nvidia/cudnn/lib/libcudnn.so.9"
        )
        .is_none(),
        "non-python dirs are not sites"
    );
    let src = |p: &str| {
        list.iter()
            .find(|c| c.path == Path::new(p))
            .map(|c| c.source.clone())
    };
    ensure!(
        src("/venv/lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn.so.9")
            == Some(Source::Python("VIRTUAL_ENV")),
        "source of venv"
    );
    ensure!(
        src("libcudnn.so.9") == Some(Source::SystemLoader),
        "source of soname"
    );
    // no duplicates
    let mut paths: Vec<_> = list.iter().map(|c| c.path.clone()).collect();
    paths.sort();
    paths.dedup();
    ensure!(
        paths.len() == list.len(),
        "duplicates in the candidate list"
    );
    // cuBLAS does not look under CUDNN_PATH
    let blas = loader::candidates(&cublas::SPEC, &e);
    ensure!(
        position(&blas, "/opt/cudnn/lib64/libcublas.so.13").is_none(),
        "cuBLAS searched CUDNN_PATH"
    );
    ensure!(
        position(&blas, "/opt/cuda/lib64/libcublas.so.13").is_some(),
        "cuBLAS did not search CUDA_PATH"
    );
    Ok(())
}

fn unit_override_is_exclusive() -> TestResult {
    let e = env(&[("CUDNN_LIB_DIR", "/my/dir"), ("CUDA_PATH", "/opt/cuda")]);
    let list = loader::candidates(&dnn::SPEC, &e);
    ensure!(
        list.iter()
            .all(|c| c.source == Source::Override("CUDNN_LIB_DIR")),
        "override mixed with others: {list:?}"
    );
    ensure!(
        list.first().map(|c| c.path.clone()) == Some(PathBuf::from("/my/dir/libcudnn.so.9")),
        "{list:?}"
    );
    let e = env(&[("CUDNN_LIB_DIR", "/my/dir/libcudnn.so.9.1.0")]);
    let list = loader::candidates(&dnn::SPEC, &e);
    ensure!(
        list.len() == 1 && list[0].path == Path::new("/my/dir/libcudnn.so.9.1.0"),
        "a file override is used as is: {list:?}"
    );
    Ok(())
}

fn unit_error_texts() -> TestResult {
    let e = env(&[("CUDNN_LIB_DIR", "/nowhere/at/all")]);
    let err = loader::open_first(&dnn::SPEC, loader::candidates(&dnn::SPEC, &e))
        .err()
        .ok_or("loaded from /nowhere")?;
    // `{:#}`: every path, in order.
    let text = format!("{err:#}");
    ensure!(
        text.contains("/nowhere/at/all/libcudnn.so.9: not found"),
        "{text}"
    );
    ensure!(
        text.contains("/nowhere/at/all/libcudnn.so.8: not found"),
        "{text}"
    );
    ensure!(text.contains("set CUDNN_LIB_DIR"), "{text}");
    ensure!(text.contains("nvidia-cudnn-cu13"), "{text}");
    ensure!(err.attempts.len() == 3, "{} attempts", err.attempts.len());
    // `{}`: one line per place, the file names once, the counts.
    let text = err.to_string();
    ensure!(
        text.contains("libcudnn.so.9, libcudnn.so.8, libcudnn.so")
            && text.contains("1 places tried (3 paths)")
            && text.contains("[$CUDNN_LIB_DIR] /nowhere/at/all: not found (3 paths)")
            && !text.contains("/nowhere/at/all/libcudnn.so.9"),
        "{text}"
    );
    ensure!(text.lines().count() == 3, "header, one place, fix:\n{text}");

    // Python wheel folders count as their site; the system loader's
    // "no such file" is "not found"; places keep their first-tried order.
    let e = env(&[
        ("VIRTUAL_ENV", "/venv"),
        ("CUDNN_RS_SEARCH_PATH", "/wheels"),
    ]);
    // (Built by hand: this process may have cuDNN loaded already, which the
    // system loader would then find by name.)
    let err = loader::LoadError {
        library: dnn::SPEC.name,
        override_var: dnn::SPEC.override_var,
        file_names: dnn::SPEC.sonames,
        wheel: dnn::SPEC.wheel,
        attempts: loader::candidates(&dnn::SPEC, &e)
            .into_iter()
            .map(|c| loader::Attempt {
                error: if c.path.is_absolute() {
                    loader::AttemptError::NotFound
                } else {
                    loader::AttemptError::Dlopen(format!(
                        "{}: cannot open shared object file: No such file or directory",
                        c.path.display()
                    ))
                },
                candidate: c,
            })
            .collect(),
    };
    let places = err.places();
    ensure!(
        places.iter().all(|p| p.failures.is_empty()),
        "nothing was there: {places:?}"
    );
    let total: usize = places.iter().map(|p| p.tried).sum();
    ensure!(
        total == err.attempts.len(),
        "{total} vs {}",
        err.attempts.len()
    );
    ensure!(
        places[0].dir.as_deref() == Some(std::path::Path::new("/wheels")),
        "{places:?}"
    );
    ensure!(
        places.iter().filter(|p| p.dir.is_none()).count() == 1,
        "the system loader is one place: {places:?}"
    );
    ensure!(
        places.len() < err.attempts.len() / 2,
        "{} places for {} paths",
        places.len(),
        err.attempts.len()
    );

    // cuBLASLt beside cuBLAS: that directory first, unless overridden.
    let lib = std::path::Path::new("/w/nvidia/cu13/lib/libcublas.so.13");
    let none = env(&[]);
    let list = loader::candidates_beside(&cublas::SPEC_LT, &none, "cuBLAS", Some(lib));
    ensure!(
        list[0].path == std::path::Path::new("/w/nvidia/cu13/lib/libcublasLt.so.13")
            && list[0].source == loader::Source::Beside("cuBLAS")
            && list[0].source.to_string() == "cuBLAS's folder",
        "{:?}",
        &list[..2]
    );
    ensure!(
        list.len() == loader::candidates(&cublas::SPEC_LT, &none).len() + 3,
        "three names added"
    );
    let over = env(&[("CUBLASLT_LIB_DIR", "/mine")]);
    ensure!(
        loader::candidates_beside(&cublas::SPEC_LT, &over, "cuBLAS", Some(lib))
            == loader::candidates(&cublas::SPEC_LT, &over),
        "the override stays exclusive"
    );
    let m = cudart::MissingSymbol {
        symbol: "cudnnGetLastErrorString",
        library: "cuDNN",
        version: Some(Version::new(8, 9, 7)),
        path: Some(PathBuf::from("/x/libcudnn.so.8")),
    };
    let t = m.to_string();
    ensure!(
        t.contains("cuDNN 8.9.7")
            && t.contains("`cudnnGetLastErrorString`")
            && t.contains("/x/libcudnn.so.8"),
        "{t}"
    );
    Ok(())
}

// ---------- host ----------

fn expect_stack() -> Option<String> {
    std::env::var("CUDNN_RS_EXPECT_STACK")
        .ok()
        .filter(|s| !s.is_empty())
}

fn host_load_and_versions() -> TestResult {
    let rt = cudart::load()?;
    let d = dnn::load()?;
    let b = cublas::load()?;
    let lt = cublas::load_lt()?;
    let (vr, vd, vb, vl) = (
        rt.info().version,
        d.info().version,
        b.info().version,
        lt.info().version,
    );
    eprintln!("loaded: cudart {vr:?} cuDNN {vd:?} cuBLAS {vb:?} cuBLASLt {vl:?}");
    for (name, i) in [
        ("cudart", rt.info()),
        ("cudnn", d.info()),
        ("cublas", b.info()),
        ("cublasLt", lt.info()),
    ] {
        let p = i.path.as_ref().ok_or(format!("{name}: no path"))?;
        ensure!(
            p.is_absolute() && p.is_file(),
            "{name}: loaded path {p:?} is not an absolute file"
        );
    }
    let (vd, vb, vr, vl) = (
        vd.ok_or("cuDNN version")?,
        vb.ok_or("cuBLAS version")?,
        vr.ok_or("cudart version")?,
        vl.ok_or("Lt version")?,
    );
    ensure!(vb == vl, "cuBLAS {vb} and cuBLASLt {vl} differ");
    match expect_stack().as_deref() {
        Some("cuda13") => {
            ensure!(
                vd == dnn::HEADER_VERSION,
                "cuDNN {vd} != header {}",
                dnn::HEADER_VERSION
            );
            ensure!(
                vb == cublas::HEADER_VERSION,
                "cuBLAS {vb} != header {}",
                cublas::HEADER_VERSION
            );
            ensure!(
                (vr.major, vr.minor)
                    == (cudart::HEADER_VERSION.major, cudart::HEADER_VERSION.minor),
                "cudart {vr}"
            );
        }
        Some("cuda12") => {
            ensure!(vd == Version::new(8, 9, 7), "cuDNN {vd}, expected 8.9.7");
            ensure!(vb.major == 12 && vr.major == 12, "cuBLAS {vb}, cudart {vr}");
        }
        Some("torch211") => {
            // What PyTorch 2.11.0 (CUDA 13.0) pins: the GPU machine's stack.
            ensure!(vd == Version::new(9, 19, 0), "cuDNN {vd}, expected 9.19.0");
            ensure!(
                (vb.major, vb.minor) == (13, 1) && (vr.major, vr.minor) == (13, 0),
                "cuBLAS {vb} (expected 13.1), cudart {vr} (expected 13.0)"
            );
        }
        Some(other) => return Err(format!("unknown CUDNN_RS_EXPECT_STACK {other}").into()),
        None => ensure!(vd.major >= 8, "cuDNN {vd}"),
    }
    Ok(())
}

fn c_text(p: *const std::ffi::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: the library returns static NUL-terminated strings.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// `cudnnGetErrorString` of every status the loaded library knows, compared
/// with our name for the mapped status: proves the 8 -> 9 mapping against the
/// library's own words.
fn host_error_strings() -> TestResult {
    let d = dnn::load()?;
    let v = d.info().version.ok_or("version")?;
    let raws: Vec<u32> = if v.major < 9 {
        (0..=14).collect()
    } else {
        let mut r = vec![0];
        r.extend(1001..=1008);
        r.extend([2000, 2001]);
        r.extend(2002..=2012);
        r.extend(3000..=3014);
        r.extend(4000..=4006);
        r.extend(5000..=5004);
        r
    };
    let mut checked = 0;
    for raw in raws {
        let st = dnn::cudnnStatus_t(raw);
        // SAFETY: accepts any code, returns a static string.
        let text = c_text(unsafe { d.cudnnGetErrorString(st) }?);
        ensure!(!text.is_empty(), "empty text for {raw}");
        let ours = cudnn::cudnn_status_name(d.normalize_status(st));
        if ours.chars().last().is_some_and(|c| c.is_ascii_digit()) {
            continue; // a code we have no name for: nothing to compare
        }
        // cuDNN 8 uses the names cuDNN 9 keeps as deprecated aliases.
        let legacy = [
            (
                "CUDNN_STATUS_ALLOC_FAILED",
                "CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED",
            ),
            (
                "CUDNN_STATUS_ARCH_MISMATCH",
                "CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH",
            ),
            (
                "CUDNN_STATUS_MAPPING_ERROR",
                "CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED",
            ),
            (
                "CUDNN_STATUS_RUNTIME_PREREQUISITE_MISSING",
                "CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING",
            ),
            (
                "CUDNN_STATUS_VERSION_MISMATCH",
                "CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH",
            ),
        ];
        let same = text == ours
            || (v.major < 9 && legacy.iter().any(|(old, new)| text == *old && ours == *new));
        ensure!(same, "cuDNN {v} says {raw} is {text:?}, we say {ours:?}");
        checked += 1;
    }
    ensure!(checked >= 15, "only {checked} statuses compared");
    // cudart and cuBLAS texts
    let rt = cudart::load()?;
    // SAFETY: accepts any code.
    let t =
        c_text(unsafe { rt.cudaGetErrorString(cudart::cudaError::cudaErrorInsufficientDriver) }?);
    ensure!(t.contains("driver"), "{t}");
    let b = cublas::load()?;
    // SAFETY: accepts any code.
    let t = c_text(unsafe {
        b.cublasGetStatusName(cublas::cublasStatus_t::CUBLAS_STATUS_NOT_INITIALIZED)
    }?);
    ensure!(t == "CUBLAS_STATUS_NOT_INITIALIZED", "{t}");
    Ok(())
}

macro_rules! ok {
    ($d:expr, $call:ident($($a:expr),*)) => {{
        // SAFETY: the test passes live descriptors and valid out-pointers.
        let st = unsafe { $d.$call($($a),*) }?;
        let st = $d.normalize_status(st);
        ensure!(st == dnn::cudnnStatus_t::CUDNN_STATUS_SUCCESS, "{} returned {}", stringify!($call), st.0);
    }};
}

/// create/set/get/destroy for tensor (4d, Nd), filter, conv, pooling, activation.
fn host_descriptor_round_trips() -> TestResult {
    use dnn::*;
    let d = dnn::load()?;
    let mut t: cudnnTensorDescriptor_t = std::ptr::null_mut();
    ok!(d, cudnnCreateTensorDescriptor(&mut t));
    ok!(
        d,
        cudnnSetTensor4dDescriptor(
            t,
            cudnnTensorFormat_t::CUDNN_TENSOR_NHWC,
            cudnnDataType_t::CUDNN_DATA_HALF,
            2,
            3,
            5,
            7
        )
    );
    let (mut dt, mut n, mut c, mut h, mut w, mut ns, mut cs, mut hs, mut ws) =
        (cudnnDataType_t(99), 0, 0, 0, 0, 0, 0, 0, 0);
    ok!(
        d,
        cudnnGetTensor4dDescriptor(
            t, &mut dt, &mut n, &mut c, &mut h, &mut w, &mut ns, &mut cs, &mut hs, &mut ws
        )
    );
    ensure!(
        dt == cudnnDataType_t::CUDNN_DATA_HALF && (n, c, h, w) == (2, 3, 5, 7),
        "4d get: {n} {c} {h} {w}"
    );
    ensure!(
        (ns, cs, hs, ws) == (105, 1, 21, 3),
        "NHWC strides {ns} {cs} {hs} {ws}"
    );
    let dims = [2, 3, 4, 5, 6];
    let strides = [360, 120, 30, 6, 1];
    ok!(
        d,
        cudnnSetTensorNdDescriptor(
            t,
            cudnnDataType_t::CUDNN_DATA_FLOAT,
            5,
            dims.as_ptr(),
            strides.as_ptr()
        )
    );
    let (mut nb, mut gd, mut gs) = (0, [0i32; 8], [0i32; 8]);
    ok!(
        d,
        cudnnGetTensorNdDescriptor(t, 8, &mut dt, &mut nb, gd.as_mut_ptr(), gs.as_mut_ptr())
    );
    ensure!(
        nb == 5 && gd[..5] == dims && gs[..5] == strides,
        "Nd get: {nb} {gd:?} {gs:?}"
    );
    let mut bytes = 0usize;
    ok!(d, cudnnGetTensorSizeInBytes(t, &mut bytes));
    ensure!(bytes == 720 * 4, "size {bytes}");
    ok!(d, cudnnDestroyTensorDescriptor(t));

    let mut f: cudnnFilterDescriptor_t = std::ptr::null_mut();
    ok!(d, cudnnCreateFilterDescriptor(&mut f));
    ok!(
        d,
        cudnnSetFilter4dDescriptor(
            f,
            cudnnDataType_t::CUDNN_DATA_FLOAT,
            cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
            64,
            3,
            7,
            7
        )
    );
    let (mut fmt, mut k) = (cudnnTensorFormat_t(99), 0);
    ok!(
        d,
        cudnnGetFilter4dDescriptor(f, &mut dt, &mut fmt, &mut k, &mut c, &mut h, &mut w)
    );
    ensure!(
        (k, c, h, w) == (64, 3, 7, 7) && fmt == cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
        "filter get"
    );

    let mut cv: cudnnConvolutionDescriptor_t = std::ptr::null_mut();
    ok!(d, cudnnCreateConvolutionDescriptor(&mut cv));
    ok!(
        d,
        cudnnSetConvolution2dDescriptor(
            cv,
            3,
            3,
            2,
            2,
            1,
            1,
            cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
            cudnnDataType_t::CUDNN_DATA_FLOAT
        )
    );
    let (mut ph, mut pw, mut sh, mut sw, mut dh, mut dw, mut mode) =
        (0, 0, 0, 0, 0, 0, cudnnConvolutionMode_t(9));
    ok!(
        d,
        cudnnGetConvolution2dDescriptor(
            cv, &mut ph, &mut pw, &mut sh, &mut sw, &mut dh, &mut dw, &mut mode, &mut dt
        )
    );
    ensure!(
        (ph, pw, sh, sw, dh, dw) == (3, 3, 2, 2, 1, 1)
            && mode == cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
        "conv get"
    );
    ok!(d, cudnnCreateTensorDescriptor(&mut t));
    ok!(
        d,
        cudnnSetTensor4dDescriptor(
            t,
            cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
            cudnnDataType_t::CUDNN_DATA_FLOAT,
            8,
            3,
            224,
            224
        )
    );
    let mut out = [0i32; 4];
    ok!(
        d,
        cudnnGetConvolutionNdForwardOutputDim(cv, t, f, 4, out.as_mut_ptr())
    );
    ensure!(out == [8, 64, 112, 112], "ResNet stem output {out:?}");
    ok!(d, cudnnDestroyConvolutionDescriptor(cv));
    ok!(d, cudnnDestroyFilterDescriptor(f));

    let mut p: cudnnPoolingDescriptor_t = std::ptr::null_mut();
    ok!(d, cudnnCreatePoolingDescriptor(&mut p));
    ok!(
        d,
        cudnnSetPooling2dDescriptor(
            p,
            cudnnPoolingMode_t::CUDNN_POOLING_MAX,
            cudnnNanPropagation_t::CUDNN_PROPAGATE_NAN,
            3,
            3,
            1,
            1,
            2,
            2
        )
    );
    let (mut pm, mut nan, mut wh, mut ww) = (cudnnPoolingMode_t(9), cudnnNanPropagation_t(9), 0, 0);
    ok!(
        d,
        cudnnGetPooling2dDescriptor(
            p, &mut pm, &mut nan, &mut wh, &mut ww, &mut ph, &mut pw, &mut sh, &mut sw
        )
    );
    ensure!(
        pm == cudnnPoolingMode_t::CUDNN_POOLING_MAX
            && (wh, ww, ph, pw, sh, sw) == (3, 3, 1, 1, 2, 2),
        "pool get"
    );
    ok!(
        d,
        cudnnGetPooling2dForwardOutputDim(p, t, &mut n, &mut c, &mut h, &mut w)
    );
    ensure!((n, c, h, w) == (8, 3, 112, 112), "pool out {n} {c} {h} {w}");
    ok!(d, cudnnDestroyPoolingDescriptor(p));
    ok!(d, cudnnDestroyTensorDescriptor(t));

    let mut a: cudnnActivationDescriptor_t = std::ptr::null_mut();
    ok!(d, cudnnCreateActivationDescriptor(&mut a));
    ok!(
        d,
        cudnnSetActivationDescriptor(
            a,
            cudnnActivationMode_t::CUDNN_ACTIVATION_CLIPPED_RELU,
            cudnnNanPropagation_t::CUDNN_NOT_PROPAGATE_NAN,
            6.0
        )
    );
    let (mut am, mut coef) = (cudnnActivationMode_t(9), 0.0);
    ok!(
        d,
        cudnnGetActivationDescriptor(a, &mut am, &mut nan, &mut coef)
    );
    ensure!(
        am == cudnnActivationMode_t::CUDNN_ACTIVATION_CLIPPED_RELU && coef == 6.0,
        "activation get"
    );
    ok!(d, cudnnDestroyActivationDescriptor(a));
    Ok(())
}

/// Convolution output dims for a table of cases against the arithmetic formula.
fn host_conv_output_dims() -> TestResult {
    use dnn::*;
    let d = dnn::load()?;
    // (input hw, kernel, pad, stride, dilation)
    let cases: &[(i32, i32, i32, i32, i32)] = &[
        (224, 7, 3, 2, 1),
        (56, 3, 1, 1, 1),
        (56, 1, 0, 1, 1),
        (28, 3, 1, 2, 1),
        (14, 3, 2, 1, 2),
        (13, 3, 0, 2, 1),
        (7, 7, 0, 1, 1),
        (10, 3, 4, 3, 3),
        (1, 1, 0, 1, 1),
        (9, 2, 0, 4, 1),
    ];
    for &(i, k, p, s, dil) in cases {
        let formula = (i + 2 * p - dil * (k - 1) - 1) / s + 1;
        let (mut t, mut f, mut cv) = (
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        ok!(d, cudnnCreateTensorDescriptor(&mut t));
        ok!(d, cudnnCreateFilterDescriptor(&mut f));
        ok!(d, cudnnCreateConvolutionDescriptor(&mut cv));
        ok!(
            d,
            cudnnSetTensor4dDescriptor(
                t,
                cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
                cudnnDataType_t::CUDNN_DATA_FLOAT,
                2,
                4,
                i,
                i + 1
            )
        );
        ok!(
            d,
            cudnnSetFilter4dDescriptor(
                f,
                cudnnDataType_t::CUDNN_DATA_FLOAT,
                cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
                6,
                4,
                k,
                k
            )
        );
        ok!(
            d,
            cudnnSetConvolution2dDescriptor(
                cv,
                p,
                p,
                s,
                s,
                dil,
                dil,
                cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                cudnnDataType_t::CUDNN_DATA_FLOAT
            )
        );
        let mut out = [0i32; 4];
        ok!(
            d,
            cudnnGetConvolutionNdForwardOutputDim(cv, t, f, 4, out.as_mut_ptr())
        );
        let formula_w = (i + 1 + 2 * p - dil * (k - 1) - 1) / s + 1;
        ensure!(
            out == [2, 6, formula, formula_w],
            "case {:?}: cuDNN {out:?}, formula {formula}x{formula_w}",
            (i, k, p, s, dil)
        );
        ok!(d, cudnnDestroyConvolutionDescriptor(cv));
        ok!(d, cudnnDestroyFilterDescriptor(f));
        ok!(d, cudnnDestroyTensorDescriptor(t));
    }
    Ok(())
}

/// Without a device: cudnnCreate and cublasCreate report NOT_INITIALIZED (on
/// cuDNN 8 and 9 alike, after status mapping) and cudaGetDeviceCount errors.
fn host_no_device_behaviour() -> TestResult {
    if has_gpu() {
        eprintln!("skipped: a device is present; the no-device assertions do not apply");
        return Ok(());
    }
    let d = dnn::load()?;
    let mut h: dnn::cudnnHandle_t = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    let raw = unsafe { d.cudnnCreate(&mut h) }?;
    let st = d.normalize_status(raw);
    ensure!(
        st == dnn::cudnnStatus_t::CUDNN_STATUS_NOT_INITIALIZED,
        "cudnnCreate: raw {} -> {}",
        raw.0,
        st.0
    );
    let b = cublas::load()?;
    let mut bh: cublas::cublasHandle_t = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    let st = unsafe { b.cublasCreate_v2(&mut bh) }?;
    ensure!(
        st == cublas::cublasStatus_t::CUBLAS_STATUS_NOT_INITIALIZED,
        "cublasCreate: {}",
        st.0
    );
    let rt = cudart::load()?;
    let mut n = -1;
    // SAFETY: valid out-pointer.
    let st = unsafe { rt.cudaGetDeviceCount(&mut n) }?;
    ensure!(
        st != cudart::cudaError::cudaSuccess,
        "cudaGetDeviceCount succeeded with {n} devices"
    );
    Ok(())
}

/// The functions new in cuDNN 9 are absent on 8, as an error value naming the
/// symbol and the version; present on 9.
fn host_missing_symbol() -> TestResult {
    let d = dnn::load()?;
    let v = d.info().version.ok_or("version")?;
    let mut buf = [0 as std::ffi::c_char; 64];
    // SAFETY: buffer and length match.
    let r = unsafe { d.cudnnGetLastErrorString(buf.as_mut_ptr(), buf.len()) };
    if v.major < 9 {
        let e = r
            .err()
            .ok_or("cudnnGetLastErrorString present on cuDNN 8")?;
        let t = e.to_string();
        ensure!(
            t.contains("cudnnGetLastErrorString") && t.contains(&v.to_string()),
            "{t}"
        );
        ensure!(
            d.missing_symbols().len() >= dnn::ABI_DIFFERS_IN_CUDNN8.len(),
            "missing {:?}",
            d.missing_symbols().len()
        );
    } else {
        ensure!(r.is_ok(), "cudnnGetLastErrorString absent on {v}");
        let missing = d.missing_symbols();
        let bindings = dnn::HEADER_VERSION;
        if (v.major, v.minor) >= (bindings.major, bindings.minor) {
            // The release the bindings were made from (or newer): all there.
            ensure!(missing.is_empty(), "cuDNN {v} lacks {missing:?}");
        } else {
            // An older cuDNN 9 lacks what came after it, by design. Each
            // symbol reported missing must truly be absent: not exported
            // by the library file, and (where the release's own headers
            // lie beside it, as in NVIDIA's wheels) not declared there.
            let lib = d.info().path.clone().ok_or("cuDNN's path")?;
            let exported = elf_dynamic_symbols(&lib)?;
            ensure!(
                exported.contains("cudnnGetLastErrorString")
                    && exported.iter().filter(|s| s.starts_with("cudnn")).count() > 100,
                "{}: too few cudnn symbols read ({})",
                lib.display(),
                exported.len()
            );
            for m in &missing {
                ensure!(
                    !exported.contains(*m),
                    "{m} is reported missing but {} exports it",
                    lib.display()
                );
            }
            let include = lib
                .parent()
                .and_then(Path::parent)
                .map(|p| p.join("include"));
            let headers: Vec<PathBuf> = include
                .as_ref()
                .and_then(|d| std::fs::read_dir(d).ok())
                .map(|it| {
                    it.filter_map(|e| e.ok().map(|e| e.path()))
                        .filter(|p| {
                            p.file_name()
                                .and_then(|n| n.to_str())
                                .is_some_and(|n| n.starts_with("cudnn") && n.ends_with(".h"))
                        })
                        .collect()
                })
                .unwrap_or_default();
            if headers.is_empty() {
                eprintln!(
                    "  no cuDNN headers beside {}: checked against its symbol table only",
                    lib.display()
                );
            } else {
                let text: String = headers
                    .iter()
                    .filter_map(|h| std::fs::read_to_string(h).ok())
                    .collect();
                ensure!(
                    text.contains("cudnnGetLastErrorString"),
                    "the headers beside {} do not declare cudnnGetLastErrorString",
                    lib.display()
                );
                for m in &missing {
                    ensure!(
                        !text.contains(&format!("{m}(")) && !text.contains(&format!("{m} (")),
                        "{m} is declared by cuDNN {v}'s own headers but reported missing"
                    );
                }
            }
            eprintln!(
                "  cuDNN {v} (bindings from {bindings}): {} symbols newer than it, absent as expected",
                missing.len()
            );
        }
    }
    let rt = cudart::load()?;
    if rt.info().version.is_some_and(|v| v.major == 12) {
        ensure!(
            !rt.has_symbol("cudaGetDeviceProperties"),
            "CUDA 12's legacy cudaGetDeviceProperties must be hidden"
        );
    }
    Ok(())
}

/// The names a shared library exports (defined dynamic symbols), read from
/// its ELF file: 64-bit little-endian only (x86-64 and aarch64 Linux).
fn elf_dynamic_symbols(path: &Path) -> Result<std::collections::HashSet<String>, String> {
    let b = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let bad = |what: &str| format!("{}: {what}", path.display());
    let u16_at = |o: usize| -> Option<u64> {
        Some(u64::from(u16::from_le_bytes(
            b.get(o..o + 2)?.try_into().ok()?,
        )))
    };
    let u32_at = |o: usize| -> Option<u64> {
        Some(u64::from(u32::from_le_bytes(
            b.get(o..o + 4)?.try_into().ok()?,
        )))
    };
    let u64_at =
        |o: usize| -> Option<u64> { Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?)) };
    let us = |v: u64| usize::try_from(v).ok();
    if b.get(0..6) != Some(&[0x7f, b'E', b'L', b'F', 2, 1][..]) {
        return Err(bad("not a 64-bit little-endian ELF file"));
    }
    let shoff = u64_at(0x28).and_then(us).ok_or_else(|| bad("e_shoff"))?;
    let shentsize = u16_at(0x3a)
        .and_then(us)
        .ok_or_else(|| bad("e_shentsize"))?;
    let shnum = u16_at(0x3c).and_then(us).ok_or_else(|| bad("e_shnum"))?;
    // (type, offset, size, link, entsize) of section i.
    let section = |i: usize| -> Option<(u64, usize, usize, usize, usize)> {
        let o = shoff.checked_add(i.checked_mul(shentsize)?)?;
        Some((
            u32_at(o + 4)?,
            us(u64_at(o + 0x18)?)?,
            us(u64_at(o + 0x20)?)?,
            us(u32_at(o + 0x28)?)?,
            us(u64_at(o + 0x38)?)?,
        ))
    };
    const SHT_DYNSYM: u64 = 11;
    let mut names = std::collections::HashSet::new();
    for i in 0..shnum {
        let Some((ty, off, size, link, entsize)) = section(i) else {
            return Err(bad("section header out of the file"));
        };
        if ty != SHT_DYNSYM || entsize < 24 {
            continue;
        }
        let (_, stroff, strsize, _, _) = section(link).ok_or_else(|| bad("dynstr"))?;
        let strtab = b
            .get(stroff..stroff.saturating_add(strsize))
            .ok_or_else(|| bad("dynstr out of the file"))?;
        for k in 0..size / entsize {
            let o = off + k * entsize;
            let (Some(name), Some(shndx)) = (u32_at(o).and_then(us), u16_at(o + 6)) else {
                return Err(bad("dynsym out of the file"));
            };
            if shndx == 0 {
                continue; // undefined here: imported, not exported
            }
            let Some(rest) = strtab.get(name..) else {
                return Err(bad("symbol name out of dynstr"));
            };
            let end = rest.iter().position(|&c| c == 0).unwrap_or(rest.len());
            names.insert(String::from_utf8_lossy(&rest[..end]).into_owned());
        }
    }
    Ok(names)
}

fn dir_of_loaded_cudnn() -> Result<PathBuf, String> {
    let d = dnn::load().map_err(|e| e.to_string())?;
    d.info()
        .path
        .as_ref()
        .and_then(|p| p.parent())
        .map(Path::to_path_buf)
        .ok_or("no path".into())
}

/// An override at an empty directory, and a garbage file named
/// libcudnn.so.9, each give a LoadError naming that path.
fn host_bad_overrides() -> TestResult {
    let tmp = std::env::temp_dir().join(format!("cudnn-rs-test-{}", std::process::id()));
    let empty = tmp.join("empty");
    std::fs::create_dir_all(&empty)?;
    let e = FakeEnv {
        vars: vec![("CUDNN_LIB_DIR", empty.display().to_string())],
        dirs: vec![],
    };
    let err = loader::open_first(&dnn::SPEC, loader::candidates(&dnn::SPEC, &e))
        .err()
        .ok_or("loaded from an empty dir")?;
    ensure!(
        format!("{err:#}").contains(&empty.join("libcudnn.so.9").display().to_string())
            && err.to_string().contains(&empty.display().to_string()),
        "{err:#}"
    );

    let bad = tmp.join("bad");
    std::fs::create_dir_all(&bad)?;
    std::fs::write(bad.join("libcudnn.so.9"), b"this is not an ELF file")?;
    let e = FakeEnv {
        vars: vec![("CUDNN_LIB_DIR", bad.display().to_string())],
        dirs: vec![],
    };
    let err = loader::open_first(&dnn::SPEC, loader::candidates(&dnn::SPEC, &e))
        .err()
        .ok_or("loaded garbage")?;
    let t = err.to_string();
    ensure!(
        t.contains(&bad.join("libcudnn.so.9").display().to_string()),
        "{t}"
    );
    ensure!(
        err.found_but_failed(),
        "garbage file should be a dlopen failure: {t}"
    );
    ensure!(
        t.to_lowercase().contains("elf") || t.contains("invalid") || t.contains("too short"),
        "dlopen text missing: {t}"
    );
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(())
}

/// Run this test binary again as a child with a clean environment, so the
/// process-wide `load()` sees exactly the variables given.
fn child(vars: &[(&str, &str)]) -> Result<(bool, String), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(exe);
    cmd.env_clear().env("CUDNN_RS_CHILD", "1");
    if let Some(p) = std::env::var_os("PATH") {
        cmd.env("PATH", p);
    }
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = cmd.output().map_err(|e| e.to_string())?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    Ok((out.status.success(), text))
}

/// The child's work: load everything, use the cuDNN sub-libraries, report.
fn child_main() -> ! {
    let mut ok = true;
    for (name, r) in [
        ("cudart", cudart::load().map(|t| t.info().clone())),
        ("cudnn", dnn::load().map(|t| t.info().clone())),
        ("cublas", cublas::load().map(|t| t.info().clone())),
        ("cublasLt", cublas::load_lt().map(|t| t.info().clone())),
    ] {
        match r {
            Ok(i) => println!("{name}: {:?} {:?} {:?}", i.version, i.path, i.source),
            Err(e) => {
                println!("{name}: LOAD ERROR\n{e}");
                ok = false;
            }
        }
    }
    if let Ok(d) = dnn::load() {
        // Descriptors live in the sub-libraries (graph, ops, cnn): these
        // calls prove they loaded from beside libcudnn.
        let mut c: dnn::cudnnConvolutionDescriptor_t = std::ptr::null_mut();
        let mut p: dnn::cudnnPoolingDescriptor_t = std::ptr::null_mut();
        // SAFETY: valid out-pointers.
        let sc =
            unsafe { d.cudnnCreateConvolutionDescriptor(&mut c) }.map(|s| d.normalize_status(s));
        // SAFETY: valid out-pointers.
        let sp = unsafe { d.cudnnCreatePoolingDescriptor(&mut p) }.map(|s| d.normalize_status(s));
        let good = Ok(dnn::cudnnStatus_t::CUDNN_STATUS_SUCCESS);
        println!(
            "sub-libraries: conv {:?} pooling {:?}",
            sc.as_ref().map(|s| s.0),
            sp.as_ref().map(|s| s.0)
        );
        ok &= sc == good && sp == good;
    }
    std::process::exit(if ok { 0 } else { 1 })
}

/// cuDNN 9 loaded by absolute path (override) still loads its sub-libraries.
fn host_absolute_path_sublibraries() -> TestResult {
    let dir = dir_of_loaded_cudnn()?;
    let file = dir.join(
        if dnn::load()?.info().version.is_some_and(|v| v.major >= 9) {
            "libcudnn.so.9"
        } else {
            "libcudnn.so.8"
        },
    );
    let site = dir
        .parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .ok_or("no site dir")?
        .display()
        .to_string();
    let (ok, text) = child(&[
        ("CUDNN_LIB_DIR", &file.display().to_string()),
        ("CUDNN_RS_SEARCH_PATH", &site),
    ])?;
    ensure!(ok, "child failed:\n{text}");
    ensure!(
        text.contains(&format!("{:?}", Some(&file))) || text.contains(&file.display().to_string()),
        "{text}"
    );
    ensure!(text.contains("Override(\"CUDNN_LIB_DIR\")"), "{text}");
    Ok(())
}

/// A plain virtualenv holding NVIDIA's wheels is found by VIRTUAL_ENV alone.
fn host_virtual_env_alone() -> TestResult {
    let dir = dir_of_loaded_cudnn()?;
    let nvidia = dir
        .parent()
        .and_then(Path::parent)
        .ok_or("no nvidia dir")?
        .to_path_buf();
    let venv = std::env::temp_dir().join(format!("cudnn-rs-venv-{}", std::process::id()));
    let site = venv.join("lib/python3.12/site-packages");
    std::fs::create_dir_all(&site)?;
    let link = site.join("nvidia");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&nvidia, &link)?;
    let (ok, text) = child(&[
        ("VIRTUAL_ENV", &venv.display().to_string()),
        ("HOME", &venv.display().to_string()),
    ])?;
    let _ = std::fs::remove_dir_all(&venv);
    ensure!(ok, "child failed:\n{text}");
    ensure!(
        text.matches("Python(\"VIRTUAL_ENV\")").count() >= 3 || text.contains("SystemLoader"),
        "not found through VIRTUAL_ENV:\n{text}"
    );
    Ok(())
}

/// With nothing set and nothing installed, loading fails cleanly, listing places.
fn host_nothing_found() -> TestResult {
    let home = std::env::temp_dir().join("cudnn-rs-empty-home");
    let (ok, text) = child(&[("HOME", &home.display().to_string())])?;
    if ok {
        eprintln!("skipped: this machine has CUDA libraries in a system location:\n{text}");
        return Ok(());
    }
    ensure!(
        text.contains("LOAD ERROR")
            && text.contains("places tried")
            && text.contains("set CUDNN_LIB_DIR"),
        "{text}"
    );
    Ok(())
}

pub fn main() {
    if std::env::var_os("CUDNN_RS_CHILD").is_some() {
        child_main();
    }
    run(vec![
        unit("raw::version_decoding", unit_version_decoding),
        unit("raw::discovery_order", unit_discovery_order),
        unit("raw::override_is_exclusive", unit_override_is_exclusive),
        unit("raw::error_texts", unit_error_texts),
        host("raw::load_and_versions", host_load_and_versions),
        host("raw::error_strings", host_error_strings),
        host("raw::descriptor_round_trips", host_descriptor_round_trips),
        host("raw::conv_output_dims", host_conv_output_dims),
        host("raw::no_device_behaviour", host_no_device_behaviour),
        host("raw::missing_symbol", host_missing_symbol),
        host("raw::bad_overrides", host_bad_overrides),
        host(
            "raw::absolute_path_sublibraries",
            host_absolute_path_sublibraries,
        ),
        host("raw::virtual_env_alone", host_virtual_env_alone),
        host("raw::nothing_found", host_nothing_found),
    ])
}
