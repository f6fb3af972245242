//! Ahead-of-time planning: compile a set of plans for a named GPU on a
//! machine with no GPU, write them to a plan-cache file, and (on a GPU) load
//! that file with no planning at all.
//!
//!     cargo run --example aot -- [--target h200] [--out plans.txt] [--load plans.txt]
//!
//! The set: a ResNet-50 bottleneck block's convolutions in NHWC bf16
//! (1x1 reduce, 3x3, 1x1 expand, each + bias + ReLU, at batch 32, 56x56),
//! and a transformer MLP's matmul + bias + GELU in bf16.
//! `--load FILE` loads a file for the live device (or `--target`) and
//! reports the time; without `--load`, on a GPU the file just written is
//! loaded back for the device. The file is signed with the per-user key in
//! its folder (`cudnn-rs-plan.key`, created 0600 on first use), so its
//! runtime-compiled plans reload without `unsafe`.

use std::path::PathBuf;
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
    let c = g.gelu(c)?;
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

/// The folder of a cache file, where its key file lives.
fn key_folder(file: &std::path::Path) -> &std::path::Path {
    match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    }
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
        // The key file beside the cache file, as when it was written.
        let key = PlanKey::load_or_create(key_folder(&file))?;
        return load(&file, &target, &key, gpu);
    }
    let target = Target::preset(named.as_deref().unwrap_or("h200"))?;
    let out = arg(&args, "--out").map(PathBuf::from).unwrap_or_else(|| {
        std::env::temp_dir().join(format!("cudnn-rs-aot-{}.txt", std::process::id()))
    });
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
    // The per-user key beside the file (created 0600 on first use): the
    // saved file is signed with it, so a later load under the same key
    // restores the runtime-compiled plans too.
    // (A file in the shared temporary folder, removed at the end, takes a
    // key of its own for this run.)
    let key = if arg(&args, "--out").is_some() {
        PlanKey::load_or_create(key_folder(&out))?
    } else {
        PlanKey::generate()?
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
            load(&out, &device, &key, gpu)?;
        } else {
            println!(
                "this GPU ({}) is not the target; not loading",
                device.fingerprint()
            );
        }
    }
    if arg(&args, "--out").is_none() {
        let _ = std::fs::remove_file(&out);
    }
    Ok(())
}

fn load(file: &std::path::Path, target: &Target, key: &PlanKey, gpu: bool) -> cudnn::Result<()> {
    let t0 = Instant::now();
    let cache = PlanCache::new(64);
    // This program signed the file with its key a moment ago: its
    // runtime-compiled plans load with their compiled code (without a valid
    // tag they would be skipped: a plan file with compiled code is
    // executable code).
    let report = cache.load(file, target, Trust::SignedBy(key))?;
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
        println!("  {name:<40} {}", if hit { "cached" } else { "MISSING" });
        if !hit {
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
