//! Host planning helpers shared by the SDPA tests: the forward and backward
//! graphs of a config, the per-target counts of one planned graph, the
//! loaded cuDNN's version, and the "typed refusal naming an option" check.
use cudnn::Error;
use cudnn::graph::*;

/// A planned graph: engines cuDNN has, configs the heuristics offer, plans
/// built (1: the first candidate that finalizes, of at most `max` tried;
/// none is an error), that plan's engine and workspace.
#[derive(Clone, Debug)]
pub struct Counts {
    pub engines: i64,
    pub configs: usize,
    pub plans: usize,
    pub engine: Option<i64>,
    pub workspace: Option<usize>,
}

/// Builds `g` for `target`: engines cuDNN has, configs the heuristics offer
/// and the first plan that finalizes (candidates tried in order, at most
/// `max`), with the seconds `Plan::build` took. Every caller asserts that a
/// graph plans (or how it is refused), never how many plans it has, so the
/// search stops at the first plan: finalizing (cuDNN compiling the
/// runtime-fused kernels of attention and norms on the host) is most of
/// the host tier's time, and later candidates proved nothing more.
pub fn plan_all(
    g: &Graph,
    target: &str,
    max: usize,
) -> Result<(i64, usize, Vec<Plan>, f64), Error> {
    let og = g.build()?;
    let t = Target::preset(target)?;
    let policy = Policy::default().with_max_attempts(max);
    let c = heuristics::candidates(&og, &t, &policy)?;
    let t0 = std::time::Instant::now();
    let (plan, _) = Plan::build(&og, &t, &policy)?;
    Ok((
        og.engine_count()?,
        c.len(),
        vec![plan],
        t0.elapsed().as_secs_f64(),
    ))
}

/// [`plan_all`] as [`Counts`], once per process for each graph: a graph
/// planned again for the same target (the same [`Graph::signature`], the
/// plan cache's own graph key, as when `SdpaImpl::Auto` resolves to the
/// construction a loop planned just before, or two modules plan the same
/// case) gets the counts cuDNN gave the first time, and says so on stderr.
/// Refusals are not remembered (each is asked again: they are cheap).
pub fn counts(g: &Graph, target: &str, max: usize) -> Result<Counts, Error> {
    type Memo = std::sync::Mutex<std::collections::HashMap<(String, String, usize), Counts>>;
    static MEMO: std::sync::OnceLock<Memo> = std::sync::OnceLock::new();
    let memo = MEMO.get_or_init(Default::default);
    let key = (g.signature(), target.to_string(), max);
    let known = memo
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&key)
        .cloned();
    if let Some(c) = known {
        eprintln!("  (this graph was planned for {target} before in this process: its counts)");
        return Ok(c);
    }
    let (engines, configs, plans, _) = plan_all(g, target, max)?;
    let c = Counts {
        engines,
        configs,
        plans: plans.len(),
        engine: plans.first().and_then(|p| p.engine()),
        workspace: plans.first().map(|p| p.workspace_size()),
    };
    memo.lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, c.clone());
    Ok(c)
}

/// The forward of `cfg` in the config's mode: `Graph::sdpa_forward_training`
/// when `is_training` is set (the statistics `Some`), `Graph::sdpa_forward`
/// otherwise (`None`).
pub fn fwd_any(
    g: &mut Graph,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cfg: &SdpaConfig,
) -> Result<SdpaForward<Option<Tensor>>, Error> {
    Ok(if cfg.is_training {
        g.sdpa_forward_training(q, k, v, cfg)?.map_stats(Some)
    } else {
        g.sdpa_forward(q, k, v, cfg)?.map_stats(|()| None)
    })
}

/// The forward graph of `cfg` (inputs `q`, `k`, `v`; output `o`) and its
/// handles.
pub fn fwd_parts(cfg: &SdpaConfig) -> Result<(Graph, SdpaForward<Option<Tensor>>), Error> {
    let mut g = Graph::new();
    let q = g.input("q", cfg.q_spec()?)?;
    let k = g.input("k", cfg.k_spec()?)?;
    let v = g.input("v", cfg.v_spec()?)?;
    let f = fwd_any(&mut g, q, k, v, cfg)?;
    g.rename(f.o, "o")?;
    Ok((g, f))
}

/// The backward graph of `cfg` (inputs `q`, `k`, `v`, `o`, `do`, `stats`;
/// output `dq` renamed) and its handles.
pub fn bwd_parts(cfg: &SdpaConfig) -> Result<(Graph, SdpaBackward), Error> {
    let mut g = Graph::new();
    let q = g.input("q", cfg.q_spec()?)?;
    let k = g.input("k", cfg.k_spec()?)?;
    let v = g.input("v", cfg.v_spec()?)?;
    let o = g.input("o", cfg.o_spec()?)?;
    let d_o = g.input("do", cfg.o_spec()?)?;
    let st = g.input("stats", cfg.stats_spec()?)?;
    let b = g.sdpa_backward(q, k, v, o, d_o, st, cfg)?;
    g.rename(b.dq, "dq")?;
    Ok((g, b))
}

/// [`fwd_parts`]' graph alone.
pub fn fwd_graph(cfg: &SdpaConfig) -> Result<Graph, Error> {
    Ok(fwd_parts(cfg)?.0)
}

/// [`bwd_parts`]' graph alone.
pub fn bwd_graph(cfg: &SdpaConfig) -> Result<Graph, Error> {
    Ok(bwd_parts(cfg)?.0)
}

/// The loaded cuDNN's version, `(0, 0, 0)` where none loads.
pub fn loaded() -> (u32, u32, u32) {
    cudnn::sys::cudnn::load()
        .ok()
        .and_then(|a| a.info().version)
        .map(|v| (v.major, v.minor, v.patch))
        .unwrap_or((0, 0, 0))
}

/// A typed refusal that names an option of the config or a version.
pub fn names_option(e: &Error) -> bool {
    let s = e.to_string();
    matches!(e, Error::Unsupported { .. } | Error::InvalidArgument { .. })
        && (s.contains("SdpaConfig") || s.contains("cuDNN") || s.contains("attention"))
}

/// The forward (or backward) graph of `cfg` with Q stored as `q` says, no
/// tensor renamed.
pub fn graph_with_q(cfg: &SdpaConfig, backward: bool, q: TensorSpec) -> Result<Graph, Error> {
    let mut g = Graph::new();
    let q = g.input("q", q)?;
    let k = g.input("k", cfg.k_spec()?)?;
    let v = g.input("v", cfg.v_spec()?)?;
    if backward {
        let o = g.input("o", cfg.o_spec()?)?;
        let d_o = g.input("do", cfg.o_spec()?)?;
        let st = g.input("stats", cfg.stats_spec()?)?;
        g.sdpa_backward(q, k, v, o, d_o, st, cfg)?;
    } else {
        fwd_any(&mut g, q, k, v, cfg)?;
    }
    Ok(g)
}

/// Makes every tensor named `uid` in a plan JSON `[1, 1, 1, 1]` (dims and
/// strides): a hostile edit shrinking it.
pub fn shrink_tensor(v: &mut serde_json::Value, uid: &str) {
    match v {
        serde_json::Value::Object(m) => {
            if m.get("name").and_then(|n| n.as_str()) == Some(uid) {
                m.insert("dim".into(), serde_json::json!([1, 1, 1, 1]));
                m.insert("stride".into(), serde_json::json!([1, 1, 1, 1]));
            }
            m.values_mut().for_each(|x| shrink_tensor(x, uid));
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(|x| shrink_tensor(x, uid)),
        _ => {}
    }
}
