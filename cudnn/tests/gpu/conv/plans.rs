//! Plan reuse, determinism and workspaces of the legacy convolution on a
//! GPU (split from `conv.rs` by job; the harness and helpers are the
//! parent's).

use super::*;

// Cache, determinism, workspace, fixed algorithms

pub(super) fn cache_hit_on_second_plan() -> TestResult {
    let Gpu { mut h, .. } = gpu_ctx()?;
    let (xd, wd, conv) = cases()[0].descs::<f32>(TensorFormat::Nchw)?;
    let problem = ConvProblem::forward(&xd, &wd, &conv)?;
    let cache = AlgoCache::new(16);
    let opts = PlanOptions::default().with_cache(CachePolicy::Use(&cache));
    let first = problem.plan(&mut h, &opts)?;
    ensure!(!first.from_cache(), "first plan came from an empty cache");
    let before = cache.stats();
    let second = problem.plan(&mut h, &opts)?;
    let after = cache.stats();
    ensure!(
        second.from_cache() && after.hits == before.hits + 1,
        "second plan: from_cache {} stats {before:?} -> {after:?}",
        second.from_cache()
    );
    ensure!(
        second.algo() == first.algo() && second.workspace_size() == first.workspace_size(),
        "cached choice differs"
    );
    // The global cache too.
    let g = AlgoCache::global();
    let b = ConvProblem::backward_filter(&xd, &wd, &conv)?;
    b.plan(&mut h, &PlanOptions::default())?;
    let hits = g.stats().hits;
    let again = b.plan(&mut h, &PlanOptions::default())?;
    ensure!(
        again.from_cache() && g.stats().hits > hits,
        "global cache not hit"
    );
    // A fixed algorithm is never cached.
    let fixed = PlanOptions::default()
        .with_search(AlgoSearch::Fixed(ConvAlgo::IMPLICIT_PRECOMP_GEMM))
        .with_cache(CachePolicy::Use(&cache));
    let p = problem.plan(&mut h, &fixed)?;
    ensure!(
        p.algo() == ConvAlgo::IMPLICIT_PRECOMP_GEMM && !p.from_cache(),
        "fixed"
    );
    Ok(())
}

pub(super) fn deterministic_runs_are_bitwise_equal<T: Elem>(layout: TensorFormat) -> TestResult {
    let seed = fresh_seed("determinism");
    let mut rng = Lcg(seed);
    let Gpu { stream, mut h } = gpu_ctx()?;
    let case = &cases()[2];
    let (xd, wd, conv) = case.descs::<T>(layout)?;
    let opts = PlanOptions::default()
        .with_deterministic(true)
        .with_cache(CachePolicy::Off);
    let fwd = ConvProblem::forward(&xd, &wd, &conv)?;
    let ys = fwd.output_shape().to_vec();
    let (xh, _) = random::<T>(&mut rng, count(&case.x_dims()));
    let (wh, _) = random::<T>(&mut rng, count(&case.w_dims()));
    let (dyh, _) = random::<T>(&mut rng, count(&ys));
    let (x, w, dy) = (
        DeviceBuffer::from_host(&xh)?,
        DeviceBuffer::from_host(&wh)?,
        DeviceBuffer::from_host(&dyh)?,
    );
    let (one, zero) = (scale::<T>(1.0), scale::<T>(0.0));
    let bits = |b: &DeviceBuffer<T>| -> Result<Vec<u64>, Failed> {
        stream.synchronize()?;
        Ok(b.to_vec()?.into_iter().map(Elem::bits).collect())
    };
    let fp = fwd.plan(&mut h, &opts)?;
    let bd = ConvProblem::backward_data(&xd, &wd, &conv)?.plan(&mut h, &opts)?;
    let bf = ConvProblem::backward_filter(&xd, &wd, &conv)?.plan(&mut h, &opts)?;
    let mut runs = Vec::new();
    for _ in 0..2 {
        let mut y = poisoned::<T>(count(&ys))?;
        let mut dx = poisoned::<T>(count(&case.x_dims()))?;
        let mut dw = poisoned::<T>(count(&case.w_dims()))?;
        fp.run(&mut h, one, &x, &w, zero, &mut y)?;
        bd.run(&mut h, one, &w, &dy, zero, &mut dx)?;
        bf.run(&mut h, one, &x, &dy, zero, &mut dw)?;
        runs.push((bits(&y)?, bits(&dx)?, bits(&dw)?));
    }
    ensure!(
        runs[0].0 == runs[1].0,
        "forward ({}) not bitwise reproducible",
        fp.algo()
    );
    ensure!(
        runs[0].1 == runs[1].1,
        "backward data ({}) not bitwise reproducible",
        bd.algo()
    );
    ensure!(
        runs[0].2 == runs[1].2,
        "backward filter ({}) not bitwise reproducible",
        bf.algo()
    );
    Ok(())
}

pub(super) fn caller_workspace_and_limits() -> TestResult {
    let Gpu { stream, mut h } = gpu_ctx()?;
    let case = &cases()[0];
    let (xd, wd, conv) = case.descs::<f32>(TensorFormat::Nchw)?;
    let problem = ConvProblem::forward(&xd, &wd, &conv)?;
    let mut rng = Lcg(fresh_seed("workspace"));
    let (xh, x64) = random::<f32>(&mut rng, count(&case.x_dims()));
    let (wh, w64) = random::<f32>(&mut rng, count(&case.w_dims()));
    let (x, w) = (DeviceBuffer::from_host(&xh)?, DeviceBuffer::from_host(&wh)?);
    let ys = problem.output_shape().to_vec();
    let (p, rl) = (case.params(), Layout::ChannelsFirst);
    let (want, _) = refc::forward(&x64, &case.x_dims(), &w64, &case.w_dims(), &p, rl)?;
    let (sc, _) = refc::forward(
        &abs(&x64),
        &case.x_dims(),
        &abs(&w64),
        &case.w_dims(),
        &p,
        rl,
    )?;

    // A zero workspace limit picks a zero-workspace algorithm.
    let opts0 = PlanOptions::default()
        .with_workspace_limit(Some(0))
        .with_cache(CachePolicy::Off);
    let p0 = problem.plan(&mut h, &opts0)?;
    ensure!(
        p0.workspace_size() == 0,
        "limit 0 gave {}",
        p0.workspace_size()
    );

    // The caller's workspace, for an algorithm that needs one.
    let opts = PlanOptions::default()
        .with_search(AlgoSearch::Exhaustive)
        .with_cache(CachePolicy::Off);
    let plan = problem.plan(&mut h, &opts)?;
    let need = plan.workspace_size();
    let mut ws = DeviceBuffer::<u8>::zeroed(need.max(1))?;
    let mut y = poisoned::<f32>(count(&ys))?;
    // SAFETY: `ws` is used by nothing else and outlives the call's work
    // (`read` below synchronizes the stream before `ws` is dropped).
    unsafe { plan.run_with_workspace(&h, 1.0, &x, &w, 0.0, &mut y, ws.slice_mut(..need)?) }?;
    compare("caller workspace", 0, &read(&stream, &y)?, &want, &sc, 2e-5)?;
    if need > 0 {
        // A workspace that does not start at WORKSPACE_ALIGNMENT is refused
        // before cuDNN (an offset slice of a larger buffer).
        let mut big = DeviceBuffer::<u8>::zeroed(need + WORKSPACE_ALIGNMENT)?;
        for off in [1, 8, 16, WORKSPACE_ALIGNMENT / 2] {
            // SAFETY: refused before anything is queued.
            let r = unsafe {
                plan.run_with_workspace(
                    &h,
                    1.0,
                    &x,
                    &w,
                    0.0,
                    &mut y,
                    big.slice_mut(off..off + need)?,
                )
            };
            ensure!(
                matches!(&r, Err(Error::InvalidArgument { arg, .. }) if arg == "workspace"),
                "workspace at offset {off}: {r:?}"
            );
        }
        // An aligned offset runs.
        y.copy_from_host(&vec![f32::NAN; count(&ys)])?;
        let off = WORKSPACE_ALIGNMENT;
        // SAFETY: as above; `read` synchronizes before `big` is dropped.
        unsafe {
            plan.run_with_workspace(
                &h,
                1.0,
                &x,
                &w,
                0.0,
                &mut y,
                big.slice_mut(off..off + need)?,
            )
        }
        .map_err(|e| format!("aligned offset: {e}"))?;
        compare(
            "aligned offset workspace",
            0,
            &read(&stream, &y)?,
            &want,
            &sc,
            2e-5,
        )?;
    }
    if need > 0 {
        // SAFETY: as above; this call is refused before anything is queued.
        let r = unsafe {
            plan.run_with_workspace(&h, 1.0, &x, &w, 0.0, &mut y, ws.slice_mut(..need - 1)?)
        };
        ensure!(
            matches!(r, Err(Error::Mismatch { .. })),
            "short workspace: {r:?}"
        );
        // A plan from a choice that claims too little workspace is refused
        // on its first run (cuDNN is asked), not overrun.
        let lie = problem.plan_with(AlgoChoice {
            algo: plan.algo().to_raw(),
            math_type: plan.math_type().to_raw().0,
            workspace_bytes: 0,
        })?;
        let r = lie.run(&mut h, 1.0, &x, &w, 0.0, &mut y);
        ensure!(
            matches!(r, Err(Error::Mismatch { .. })),
            "a choice with too little workspace ran: {r:?}"
        );
    }
    // A plan from the right choice runs and matches.
    let honest = problem.plan_with(AlgoChoice {
        algo: plan.algo().to_raw(),
        math_type: plan.math_type().to_raw().0,
        workspace_bytes: need,
    })?;
    y.copy_from_host(&vec![f32::NAN; count(&ys)])?;
    honest.run(&mut h, 1.0, &x, &w, 0.0, &mut y)?;
    compare(
        "plan from a choice",
        0,
        &read(&stream, &y)?,
        &want,
        &sc,
        2e-5,
    )?;
    // A wrong-direction fixed algorithm is refused before cuDNN.
    let bad = PlanOptions::default().with_search(AlgoSearch::Fixed(ConvAlgo::from_raw(
        ConvDirection::BackwardData,
        1,
    )?));
    ensure!(
        matches!(problem.plan(&mut h, &bad), Err(Error::Mismatch { .. })),
        "fixed backward-data algorithm accepted for a forward plan"
    );
    // Short buffers are refused before cuDNN.
    let short = DeviceBuffer::<f32>::zeroed(count(&case.x_dims()) - 1)?;
    let r = plan.run(&mut h, 1.0, &short, &w, 0.0, &mut y);
    ensure!(matches!(r, Err(Error::Mismatch { .. })), "short x: {r:?}");
    // The convenience constructor.
    let q = h.conv_forward_plan(&xd, &wd, &conv, AlgoSearch::Heuristic)?;
    ensure!(
        q.output().shape() == ys.as_slice(),
        "convenience output shape"
    );
    Ok(())
}

/// Issue 13, item 4: an exhaustive search measures in a temporary
/// workspace; the handle's ends as it would after reserving just the chosen
/// algorithm's size (compared with a second fresh handle, so the handle's
/// own growth rule does not matter), not at the largest candidate's.
pub(super) fn exhaustive_search_sizes_workspace_to_choice() -> TestResult {
    // Large enough that FFT and Winograd variants ask for real workspace.
    let x = TensorDescriptor::<f32>::nchw(8, 64, 32, 32)?;
    let w = FilterDescriptor::<f32>::nchw(64, 64, 5, 5)?;
    let conv = ConvDescriptor::new_2d([2, 2], [1, 1], [1, 1])?;
    let opts = PlanOptions::default()
        .with_search(AlgoSearch::Exhaustive)
        .with_cache(CachePolicy::Off);
    let same_as_reserving = |what: &str, h: &Handle, algo: ConvAlgo, need: usize| -> TestResult {
        let Gpu { h: mut fresh, .. } = gpu_ctx()?;
        fresh.reserve_workspace(need)?;
        eprintln!(
            "exhaustive {what}: {algo}, {need} bytes; handle holds {}",
            h.workspace_size()
        );
        ensure!(
            h.workspace_size() == fresh.workspace_size(),
            "{what} ({algo}): the handle holds {} bytes after the search, reserving the choice's {need} gives {}",
            h.workspace_size(),
            fresh.workspace_size()
        );
        Ok(())
    };
    let Gpu { mut h, .. } = gpu_ctx()?;
    let p = ConvProblem::forward(&x, &w, &conv)?.plan(&mut h, &opts)?;
    same_as_reserving("forward", &h, p.algo(), p.workspace_size())?;
    let Gpu { mut h, .. } = gpu_ctx()?;
    let p = ConvProblem::backward_data(&x, &w, &conv)?.plan(&mut h, &opts)?;
    same_as_reserving("backward data", &h, p.algo(), p.workspace_size())?;
    let Gpu { mut h, .. } = gpu_ctx()?;
    let p = ConvProblem::backward_filter(&x, &w, &conv)?.plan(&mut h, &opts)?;
    same_as_reserving("backward filter", &h, p.algo(), p.workspace_size())?;
    Ok(())
}
