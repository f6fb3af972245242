//! Binding graph tensors by their `Tensor` handle (issue 33 item 5): the
//! same slot as binding by name, a handle of another graph or one the plan
//! does not bind refused with a typed error, a reloaded plan and a plan
//! built from an identical graph (a cache hit) bound through the handles of
//! the graph at hand.
//! Host tier: plans for an H200 without a device; the buffers are dangling
//! aligned pointers that are only checked, never used.

use crate::support;

use cudnn::Error;
use cudnn::graph::{DType, Graph, Plan, PlanKey, Policy, Target, TensorSpec, Trust};
use cudnn::runtime::{DeviceSlice, DeviceSliceMut};
use half::f16;
use support::*;

pub fn main() {
    run(vec![
        host_planning("bind_by_tensor_matches_bind_by_name", matches_name),
        host_planning("bind_by_tensor_refuses_foreign_and_unbound", refusals),
        host_planning("bind_by_tensor_on_a_reloaded_plan", reloaded),
        host_planning("bind_by_tensor_after_a_cache_hit", cache_hit),
        host_planning("fuzz_bind_by_tensor_handles", fuzz_handles),
    ]);
}

const DIMS: [i64; 4] = [8, 64, 32, 32];
const LEN: usize = 8 * 64 * 32 * 32;

/// x -> relu -> mid -> relu -> y (mid is virtual: nothing to bind).
fn graph() -> cudnn::Result<(Graph, [cudnn::graph::Tensor; 3])> {
    let mut g = Graph::new();
    let x = g.input("x", TensorSpec::nhwc(DType::F16, &DIMS)?)?;
    let mid = g.relu(x)?;
    let y = g.relu(mid)?;
    g.output(y, DType::F16)?;
    g.rename(y, "y")?;
    Ok((g, [x, mid, y]))
}

fn plan(g: &Graph) -> cudnn::Result<Plan> {
    let (plan, _) = Plan::build(&g.build()?, &Target::preset("h200")?, &Policy::default())?;
    Ok(plan)
}

// Dangling, 256-byte aligned pointers that the bindings only check (length,
// alignment); nothing here executes a plan.
fn fake_in() -> DeviceSlice<'static, f16> {
    // SAFETY: never dereferenced (see above).
    unsafe { DeviceSlice::from_raw_parts(0x1000_0000 as *const f16, LEN) }
}
fn fake_out() -> DeviceSliceMut<'static, f16> {
    // SAFETY: never dereferenced (see above).
    unsafe { DeviceSliceMut::from_raw_parts_mut(0x2000_0000 as *mut f16, LEN) }
}

fn refused(r: cudnn::Result<()>, want: &str) -> TestResult {
    match r {
        Err(e @ Error::InvalidArgument { .. }) => {
            let s = e.to_string();
            ensure!(s.contains(want), "error without `{want}`: {s}");
            Ok(())
        }
        Err(e) => {
            Err(format!("wrong error kind (want InvalidArgument with `{want}`): {e:?}").into())
        }
        Ok(()) => Err(format!("accepted; want a refusal with `{want}`").into()),
    }
}

fn matches_name() -> TestResult {
    let (g, [x, _, y]) = graph()?;
    let p = plan(&g)?;
    let mut b = p.bindings();
    b.input_tensor(&g, x, fake_in())?;
    b.output_tensor(&g, y, fake_out())?;
    // The handle bound the slot the name names: binding the name again is
    // "bound twice", the documented refusal.
    refused(b.input("x", fake_in()).map(|_| ()), "bound twice")?;
    refused(b.output("y", fake_out()).map(|_| ()), "bound twice")?;
    // And the other way round.
    let mut b = p.bindings();
    b.input("x", fake_in())?;
    refused(b.input_tensor(&g, x, fake_in()).map(|_| ()), "bound twice")?;
    Ok(())
}

fn refusals() -> TestResult {
    let (g, [x, mid, y]) = graph()?;
    let (_other, [ox, _, _]) = graph()?;
    let p = plan(&g)?;
    let mut b = p.bindings();
    // A handle of another graph (the same position, so the same UID, which
    // a name-free lookup would have taken) with this graph: refused.
    refused(
        b.input_tensor(&g, ox, fake_in()).map(|_| ()),
        "belongs to another graph",
    )?;
    refused(
        b.input_tensor(&g, mid, fake_in()).map(|_| ()),
        "must be one of",
    )?;
    refused(b.input_tensor(&g, y, fake_in()).map(|_| ()), "is an output")?;
    refused(
        b.output_tensor(&g, x, fake_out()).map(|_| ()),
        "is an input",
    )?;
    // Nothing was bound by the refusals.
    b.input_tensor(&g, x, fake_in())?;
    b.output_tensor(&g, y, fake_out())?;
    Ok(())
}

fn reloaded() -> TestResult {
    let (g, [x, mid, y]) = graph()?;
    let p = plan(&g)?;
    let key = PlanKey::generate()?;
    let text = p.serialize_signed(&key)?;
    let q = Plan::deserialize(&text, &Target::preset("h200")?, Trust::SignedBy(&key))?;
    ensure!(q.io() == p.io(), "the reloaded plan binds other tensors");
    let mut b = q.bindings();
    // A loaded plan: the handles of the graph it was built from bind their
    // own tensors (by the names the graph gives them).
    b.input_tensor(&g, x, fake_in())?;
    b.output_tensor(&g, y, fake_out())?;
    refused(b.input("x", fake_in()).map(|_| ()), "bound twice")?;
    refused(
        b.input_tensor(&g, mid, fake_in()).map(|_| ()),
        "must be one of",
    )?;
    Ok(())
}

/// The plan of one graph bound through an identical graph built again (what
/// a plan cache hands back for a rebuilt graph): its handles bind.
fn cache_hit() -> TestResult {
    let (g, _) = graph()?;
    let p = plan(&g)?;
    let (g2, [x2, _, y2]) = graph()?;
    let mut b = p.bindings();
    b.input_tensor(&g2, x2, fake_in())?;
    b.output_tensor(&g2, y2, fake_out())?;
    refused(b.input("x", fake_in()).map(|_| ()), "bound twice")?;
    Ok(())
}

/// Property: over handles of the plan's graph (a chain of relus) and of
/// other graphs (chains of random length) passed with the plan's graph,
/// `input_tensor` succeeds exactly for the plan's input and `output_tensor`
/// exactly for its output; everything else is a typed `InvalidArgument`,
/// never a panic.
fn fuzz_handles() -> TestResult {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let chain = |n: usize| -> cudnn::Result<(Graph, Vec<cudnn::graph::Tensor>)> {
        let mut g = Graph::new();
        let mut ts = vec![g.input("x", TensorSpec::nhwc(DType::F16, &DIMS)?)?];
        for _ in 0..n {
            let last = ts[ts.len() - 1];
            ts.push(g.relu(last)?);
        }
        let y = ts[ts.len() - 1];
        g.output(y, DType::F16)?;
        g.rename(y, "y")?;
        Ok((g, ts))
    };
    let (g, own) = chain(3)?;
    let p = plan(&g)?;
    let mut runner = TestRunner::new(Config {
        cases: 64,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(
            &(0usize..5, 1usize..6, any::<bool>()),
            |(i, other_len, foreign)| {
                let (_o, other) =
                    chain(other_len).map_err(|e| TestCaseError::fail(e.to_string()))?;
                let (t, is_x, is_y) = if foreign {
                    (other[i % other.len()], false, false)
                } else {
                    let j = i % own.len();
                    (own[j], j == 0, j == own.len() - 1)
                };
                let mut b = p.bindings();
                let r_in = b.input_tensor(&g, t, fake_in()).map(|_| ());
                let mut b = p.bindings();
                let r_out = b.output_tensor(&g, t, fake_out()).map(|_| ());
                for (r, want) in [(r_in, is_x), (r_out, is_y)] {
                    match r {
                        Ok(()) if want => {}
                        Err(Error::InvalidArgument { .. }) if !want => {}
                        other => {
                            return Err(TestCaseError::fail(format!(
                                "handle {t:?} (foreign {foreign}, x {is_x}, y {is_y}): {other:?}"
                            )));
                        }
                    }
                }
                Ok(())
            },
        )
        .map_err(|e| e.to_string())?;
    Ok(())
}
