//! A small pre-norm transformer block in candle (RMS norm, attention with
//! grouped-query heads, a GELU MLP) whose attention is
//! `cudnn_candle::flash_attn_with`: one training step (the loss and the
//! gradient of every weight) and a short decode loop against a paged KV
//! cache (vLLM's block-table layout, `cudnn_candle::flash_attn_paged`),
//! in bf16 and in f32 (attention in f16), each checked against the same
//! block on candle's CPU in f32 with a plain softmax attention (an
//! independent reference). Exits non-zero on a mismatch past the stated
//! tolerances (`block::TOLERANCES`).
//!
//! Without a GPU it says what it would run and plans the block's attention
//! graphs (training forward, backward, paged decode step) for an H200.
//!
//! `cargo run -p cudnn-candle --example candle_transformer_block`
//!
//! The block lives in `block.rs`; cudnn-candle's GPU test binary runs the
//! same check (trial `example_block`, a row of the device check).

mod block;

use block::{B, BLOCK, CAP, DM, H, HD, HKV, S, STEPS, TOLERANCES};
use candle_core::Device;

fn plan_only() -> cudnn::Result<()> {
    println!(
        "no GPU here: a {B}x{S} block (d_model {DM}, {H} heads, {HKV} KV heads, head dim {HD}) would run"
    );
    println!(
        "  one training step (loss, gradients of the input and of every weight) and {STEPS} decode steps"
    );
    println!(
        "  against a paged cache ({} blocks of {BLOCK} tokens, out of order), in bf16 and in f32",
        B * CAP / BLOCK
    );
    println!("  (attention in f16), each checked against the same block on the CPU in f32:");
    for (p, [out, loss, grad, dec]) in TOLERANCES {
        println!(
            "  {p}: output within {out:.1e}, loss {loss:.1e}, gradients {grad:.1e}, decode steps {dec:.1e} (relative to the largest reference value; the loss to the loss)"
        );
    }
    println!("planning its attention graphs (bf16) for an H200:");
    for p in block::plan_for_h200()? {
        println!(
            "  {}: {} candidates, engine {}, workspace {} bytes",
            p.what, p.candidates, p.engine, p.workspace
        );
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dev = match Device::new_cuda(0) {
        Ok(d) => d,
        Err(e) => {
            println!("({})", e.to_string().lines().next().unwrap_or(""));
            return Ok(plan_only()?);
        }
    };
    let rows = block::check(&dev)?;
    println!("all {} comparisons within their tolerances", rows.len());
    Ok(())
}
