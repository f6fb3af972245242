//! Ahead-of-time planning: compile a set of plans for a named GPU on a
//! machine with no GPU, write them to a plan-cache file, and (on a GPU) load
//! that file with no planning at all.
//!
//!     cargo run --example aot -- [--target h200] [--out plans.txt] [--load plans.txt] [--key-dir DIR]
//!
//! The set: a ResNet-50 bottleneck block's convolutions in NHWC bf16
//! (1x1 reduce, 3x3, 1x1 expand, each + bias + ReLU, at batch 32, 56x56),
//! and a transformer MLP's matmul + bias + GELU in bf16.
//! `--load FILE` loads a file for the live device (or `--target`) and
//! reports the time; without `--load`, on a GPU the file just written is
//! loaded back for the device.
//!
//! The file is signed with the user's plan key, so its runtime-compiled
//! plans reload through the safe loader (reading the key is the one
//! `unsafe` call: the program vouches that only the crate writes its key
//! file). The key file (`cudnn-rs-plan-<uid>.key`,
//! created 0600 on first use) lives in `--key-dir`, by default
//! `$HOME/.cudnn-rs` (made 0700, and refused unless private): never in a
//! folder other users can write, such as the temporary folder. `--load`
//! only reads the key (`PlanKey::load`, which creates nothing, so a
//! read-only folder works); without one it loads the plans that carry no
//! compiled code (`Trust::NoCompiledCode`) and says how many it skipped.
//! Without `--out`, the file goes to a fresh private temporary folder,
//! signed with a key made for this run, and is removed at the end.

use std::path::{Path, PathBuf};
use std::time::Instant;

use cudnn::graph::{
    ConvParams, DType, Graph, PlanCache, PlanKey, Policy, Target, TensorSpec, Trust,
};

fn conv_bias_relu(c: i64, k: i64, hw: i64, r: i64) -> cudnn::Result<Graph> {
    let mut g = Graph::new();
    let x = g.input("x", TensorSpec::nhwc(DType::BF16, &[32, c, hw, hw])?)?;
    let w = g.input("w", TensorSpec::nhwc(DType::BF16, &[k, c, r, r])?)?;
    let b = g.input("bias", TensorSpec::nhwc(DType::BF16, &[1, k, 1, 1])?)?;
    let pad = r / 2;
    let y = g.conv_fprop(x, w, &ConvParams::new_2d([pad, pad], [1, 1], [1, 1]))?;
    let y = g.bias(y, b)?;
    let y = g.relu(y)?;
    g.output(y, DType::BF16)?;
    g.rename(y, "y")?;
    Ok(g)
}

fn mlp() -> cudnn::Result<Graph> {
    let mut g = Graph::new();
    let a = g.input("a", TensorSpec::row_major(DType::BF16, &[1, 4096, 1024])?)?;
    let w = g.input("w", TensorSpec::row_major(DType::BF16, &[1, 1024, 4096])?)?;
    let b = g.input("bias", TensorSpec::row_major(DType::BF16, &[1, 1, 4096])?)?;
    let c = g.matmul(a, w)?;
    let c = g.bias(c, b)?;
    let c = g.gelu_erf(c)?;
    g.output(c, DType::BF16)?;
    g.rename(c, "c")?;
    Ok(g)
}

fn graphs() -> cudnn::Result<Vec<(&'static str, Graph)>> {
    Ok(vec![
        ("resnet50 conv1x1 256->64", conv_bias_relu(256, 64, 56, 1)?),
        ("resnet50 conv3x3 64->64", conv_bias_relu(64, 64, 56, 3)?),
        ("resnet50 conv1x1 64->256", conv_bias_relu(64, 256, 56, 1)?),
        ("mlp matmul+bias+gelu 4096x1024x4096", mlp()?),
    ])
}

fn main() {
    if let Err(e) = run() {
        eprintln!("aot: {e}");
        std::process::exit(1);
    }
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn io_err(op: &str, path: &Path, e: std::io::Error) -> cudnn::Error {
    cudnn::Error::invalid(op, e.to_string(), path.display())
}

/// A folder only this user can use: made with mode 0700 if missing
/// (`create` true), refused if it is a link, not a folder, or open to the
/// group or others. `None` if missing and not to be created.
#[cfg(unix)]
fn private_folder(d: &Path, create: bool) -> cudnn::Result<Option<PathBuf>> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    match std::fs::symlink_metadata(d) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if !create {
                return Ok(None);
            }
            match std::fs::DirBuilder::new().mode(0o700).create(d) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io_err("creating the key folder", d, e)),
            }
        }
        Err(e) => return Err(io_err("reading the key folder", d, e)),
        Ok(_) => {}
    }
    let m = std::fs::symlink_metadata(d).map_err(|e| io_err("reading the key folder", d, e))?;
    if !m.file_type().is_dir() || m.mode() & 0o077 != 0 {
        return Err(cudnn::Error::invalid(
            format!("key folder {}", d.display()),
            "must be a folder (not a link) only its owner can use (mode 0700)",
            format!("mode {:04o}", m.mode() & 0o7777),
        ));
    }
    Ok(Some(d.to_path_buf()))
}

#[cfg(not(unix))]
fn private_folder(d: &Path, _create: bool) -> cudnn::Result<Option<PathBuf>> {
    Err(cudnn::Error::invalid(
        "key folder",
        "needs Unix permissions to be kept private",
        d.display(),
    ))
}

/// The folder of the user's key file: `--key-dir`, else `$HOME/.cudnn-rs`.
fn key_folder(args: &[String]) -> Option<PathBuf> {
    arg(args, "--key-dir")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cudnn-rs")))
}

/// A fresh private temporary folder: mode 0700, a name no folder had
/// (`create` fails on anything already there, so one another user made
/// first is never used; another name is tried).
#[cfg(unix)]
fn fresh_temp_folder() -> cudnn::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let base = std::env::temp_dir();
    for attempt in 0..64u32 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let d = base.join(format!(
            "cudnn-rs-aot-{}-{nanos:x}-{attempt}",
            std::process::id()
        ));
        match std::fs::DirBuilder::new().mode(0o700).create(&d) {
            Ok(()) => return Ok(d),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_err("creating a temporary folder", &d, e)),
        }
    }
    Err(cudnn::Error::invalid(
        "temporary folder",
        "a fresh name",
        base.display(),
    ))
}

#[cfg(not(unix))]
fn fresh_temp_folder() -> cudnn::Result<PathBuf> {
    Err(cudnn::Error::invalid(
        "temporary folder",
        "needs Unix permissions to be kept private",
        std::env::temp_dir().display(),
    ))
}

fn run() -> cudnn::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let gpu = cudnn::runtime::Device::count().is_ok_and(|n| n > 0);
    let named = arg(&args, "--target");
    if let Some(file) = arg(&args, "--load") {
        let target = match &named {
            Some(n) => Target::preset(n)?,
            None => Target::device(0)?,
        };
        let file = PathBuf::from(file);
        // The user's key, read, never created: the file was signed with it
        // when it was written. Without one, only plans without compiled code.
        let key = match key_folder(&args) {
            Some(d) => match private_folder(&d, false)? {
                // SAFETY: the user's own private key folder (`private_folder`);
                // only `load_or_create` writes its key file.
                Some(d) => unsafe { PlanKey::load(&d) }?,
                None => None,
            },
            None => None,
        };
        if key.is_none() {
            println!("no plan key: loading the plans without compiled code");
        }
        return load(&file, &target, key.as_ref(), gpu);
    }
    let target = Target::preset(named.as_deref().unwrap_or("h200"))?;
    // Without --out: a fresh private folder, removed at the end.
    let (out, scratch) = match arg(&args, "--out") {
        Some(o) => (PathBuf::from(o), None),
        None => {
            let d = fresh_temp_folder()?;
            (d.join("plans.txt"), Some(d))
        }
    };
    println!("planning for {} (no GPU needed)", target.fingerprint());
    let cache = PlanCache::new(64);
    let policy = Policy::default();
    for (name, g) in graphs()? {
        let t0 = Instant::now();
        let plan = cache.get_or_build(&g, &target, &policy)?;
        println!(
            "  {name:<40} engine {:>4} workspace {:>10} B  planned in {:>8.1} ms",
            plan.engine().map(|e| e.to_string()).unwrap_or_default(),
            plan.workspace_size(),
            t0.elapsed().as_secs_f64() * 1e3
        );
    }
    // The user's key in a private folder (created 0600 on first use): the
    // saved file is signed with it, so a later load under the same key
    // restores the runtime-compiled plans too. A file removed at the end
    // takes a key of its own for this run.
    let key = match (&scratch, key_folder(&args)) {
        (None, Some(d)) => match private_folder(&d, true)? {
            // SAFETY: the user's own private key folder (`private_folder`);
            // only `load_or_create` writes its key file.
            Some(d) => unsafe { PlanKey::load_or_create(&d) }?,
            None => PlanKey::generate()?,
        },
        _ => PlanKey::generate()?,
    };
    cache.save(&out, &key)?;
    let bytes = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
    println!(
        "wrote {} plans ({bytes} bytes) to {}",
        cache.len(),
        out.display()
    );
    if gpu {
        let device = Target::device(0)?;
        if device.properties().compatible(&target.fingerprint()) {
            load(&out, &device, Some(&key), gpu)?;
        } else {
            println!(
                "this GPU ({}) is not the target; not loading",
                device.fingerprint()
            );
        }
    }
    if let Some(d) = scratch {
        std::fs::remove_dir_all(&d).map_err(|e| io_err("removing the temporary folder", &d, e))?;
    }
    Ok(())
}

fn load(file: &Path, target: &Target, key: Option<&PlanKey>, gpu: bool) -> cudnn::Result<()> {
    let t0 = Instant::now();
    let cache = PlanCache::new(64);
    // Signed with the user's key: its runtime-compiled plans load with their
    // compiled code. Without the key (or a file without a valid tag) they are
    // skipped and reported: a plan file with compiled code is executable code.
    let trust = match key {
        Some(k) => Trust::SignedBy(k),
        None => Trust::NoCompiledCode,
    };
    let report = cache.load(file, target, trust)?;
    println!("  {report}");
    for s in &report.skipped {
        println!("  skipped entry {}: {}", s.index, s.reason);
    }
    let n = report.loaded;
    println!(
        "loaded {n} plans for {} in {:.1} ms, with no planning",
        target.fingerprint(),
        t0.elapsed().as_secs_f64() * 1e3
    );
    for (name, g) in graphs()? {
        let hit = cache.get(&g, target, &Policy::default()).is_some();
        let state = match (hit, report.is_complete()) {
            (true, _) => "cached",
            (false, false) => "skipped (built on first use)",
            (false, true) => "MISSING",
        };
        println!("  {name:<40} {state}");
        // A skipped plan (reported above) is rebuilt on first use; a plan
        // missing from a complete load is an error.
        if !hit && report.is_complete() {
            return Err(cudnn::Error::invalid(
                "plan cache",
                "must hold every plan of the set",
                name,
            ));
        }
    }
    if !gpu {
        println!("(no GPU: plans loaded, not executed)");
    }
    Ok(())
}
