//! Finalized execution plans: workspace size, JSON serialization (always
//! with a target), and execution with a checked variant pack.

use std::cell::RefCell;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use super::backend::{Descriptor, attr, kind};
use super::graph::{IoSignature, OpGraph};
use super::guard::InputGuard;
use super::heuristics::{BehaviorNote, Candidate, Policy, candidates};
use super::plan_auth::{self, FileKind, PlanKey, Trust};
use super::plan_file::{
    FORMAT, Reader, fmt_cudnn_version, header_format, loaded_cudnn_version, plan_header, read_io,
    write_io,
};
use super::plan_json::Payload;
use super::target::{Target, read_json};
use super::tensor::DType;
use crate::error::{Error, Result};

mod exec;
mod load;
mod memo;
#[doc(hidden)]
pub use exec::LaunchStage;

/// A finalized execution plan for one graph on one target.
#[derive(Debug)]
pub struct Plan {
    /// Locked for every use: cuDNN documents no concurrent use of one
    /// descriptor, and plans are shared between threads (`PlanCache`).
    desc: Mutex<Descriptor<kind::ExecutionPlan>>,
    /// cuDNN's workspace, then the scratch tensors.
    pub(super) workspace: usize,
    pub(super) io: Arc<IoSignature>,
    target: String,
    /// The target's `deviceVer` (major*100 + minor*10).
    device_ver: i64,
    engine: Option<i64>,
    /// Whether its engine compiled its kernel at run time.
    runtime_compiled: bool,
    /// The engine's behaviour notes, when known (not for a plan from JSON).
    notes: Option<Vec<BehaviorNote>>,
    /// Host copies of the by-value scalars, at stable addresses.
    pub(super) scalars: Vec<(i64, Box<[u8; 8]>)>,
    /// `(uid, byte offset in the workspace)` of each scratch tensor.
    pub(super) scratch: Vec<(i64, usize)>,
    /// Unique in the process: what a cached variant pack is keyed on.
    pub(super) id: u64,
    /// The inputs the device uses as addresses or bounds (a paged KV
    /// cache's page tables, an attention's sequence lengths with their
    /// extent), by UID: bound only through the call their guard names
    /// ([`Bindings::input_page_table`], [`Bindings::seq_lengths`]).
    pub(super) guarded: Arc<[(i64, InputGuard)]>,
}

/// The next [`Plan::id`].
static NEXT_PLAN_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

thread_local! {
    /// The plans whose descriptor this thread holds (inside
    /// [`Plan::with_descriptor`]), by address: taking the same lock again on
    /// this thread would never return.
    static HELD: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// A plan JSON that passed [`Plan::check_json`] for the target and tensor
/// list it borrows, with what the check found: the only way into
/// [`Plan::from_checked_json`], so a JSON is never loaded unchecked or
/// checked twice.
pub(super) struct CheckedJson<'a> {
    json: &'a str,
    target: &'a Target,
    io: &'a Arc<IoSignature>,
    summary: super::plan_json::Summary,
}

impl CheckedJson<'_> {
    /// Whether the JSON carries compiled kernel code.
    pub(super) fn runtime_compiled(&self) -> bool {
        self.summary.runtime_compiled
    }
}

/// The descriptor lock of one plan, held by this thread.
struct Held<'p> {
    guard: MutexGuard<'p, Descriptor<kind::ExecutionPlan>>,
    key: usize,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let key = self.key;
        let _ = HELD.try_with(|h| {
            if let Ok(mut h) = h.try_borrow_mut()
                && let Some(i) = h.iter().rposition(|&k| k == key)
            {
                h.swap_remove(i);
            }
        });
    }
}

/// When no NVRTC was found and the loaded cuDNN is older than the 9.28 that
/// plans without it: say so (older releases offer no runtime-compiled engine
/// without NVRTC, silently).
fn nvrtc_hint() -> String {
    let old = crate::check::cudnn()
        .ok()
        .and_then(|api| api.info().version)
        .is_some_and(|v| (v.major, v.minor) < (9, 28));
    if old && super::nvrtc::loaded().is_empty() {
        format!(
            "; this cuDNN's runtime-compiled engines may need NVRTC ({}), and none was found: install NVIDIA's `{}` wheel beside cuDNN's or set {} to its folder",
            super::nvrtc::SPEC.sonames.join(" or "),
            super::nvrtc::SPEC.wheel,
            super::nvrtc::SPEC.override_var
        )
    } else {
        String::new()
    }
}

/// Where scratch tensors start and how they are spaced in a plan's workspace.
const SCRATCH_ALIGN: usize = 256;

fn align_up(n: usize, what: &str) -> Result<usize> {
    n.checked_next_multiple_of(SCRATCH_ALIGN)
        .ok_or_else(|| Error::invalid(what, "overflows usize when aligned", n))
}

/// The scratch layout after `cudnn_ws` bytes: `(total bytes, offsets)`.
fn scratch_layout(cudnn_ws: usize, io: &IoSignature) -> Result<(usize, Vec<(i64, usize)>)> {
    if io.scratch.is_empty() {
        return Ok((cudnn_ws, Vec::new()));
    }
    let mut at = align_up(cudnn_ws, "plan workspace")?;
    let mut offsets = Vec::with_capacity(io.scratch.len());
    for &(uid, bytes) in &io.scratch {
        offsets.push((uid, at));
        at = at
            .checked_add(align_up(bytes, "plan scratch tensor")?)
            .ok_or_else(|| Error::invalid("plan workspace", "overflows usize", bytes))?;
    }
    Ok((at, offsets))
}

/// What happened while building a plan.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct BuildReport {
    /// Every configuration offered, in the order tried, with its rejection reason if any.
    pub candidates: Vec<String>,
    /// `(engine, cuDNN's reason)` for accepted configurations that failed to finalize.
    pub failures: Vec<(i64, String)>,
    /// The engine of the plan built.
    pub chosen: Option<i64>,
    /// Seconds spent in heuristics.
    pub heuristics_s: f64,
    /// Seconds spent finalizing (all attempts).
    pub finalize_s: f64,
}

fn scalar_bytes(dtype: DType, v: f64) -> Result<[u8; 8]> {
    let mut b = [0u8; 8];
    match dtype {
        DType::F32 => b[..4].copy_from_slice(&(v as f32).to_ne_bytes()),
        DType::F64 => b.copy_from_slice(&v.to_ne_bytes()),
        DType::F16 => b[..2].copy_from_slice(&half::f16::from_f64(v).to_ne_bytes()),
        DType::BF16 => b[..2].copy_from_slice(&half::bf16::from_f64(v).to_ne_bytes()),
        DType::I32 => b[..4].copy_from_slice(&(v as i32).to_ne_bytes()),
        DType::I64 => b.copy_from_slice(&(v as i64).to_ne_bytes()),
        other => {
            return Err(Error::Unsupported {
                what: format!("a by-value scalar of type {other}"),
                needs: Some("f32, f64, f16, bf16, i32 or i64".to_string()),
            });
        }
    }
    Ok(b)
}

impl Plan {
    fn new(
        desc: Descriptor<kind::ExecutionPlan>,
        io: Arc<IoSignature>,
        target: &Target,
        engine: Option<i64>,
        runtime_compiled: bool,
        guarded: &[(i64, InputGuard)],
    ) -> Result<Self> {
        let ws = desc.get_one(attr::EXECUTION_PLAN_WORKSPACE_SIZE)?;
        let cudnn_ws = usize::try_from(ws)
            .map_err(|_| Error::invalid("plan workspace", "cuDNN returned a negative size", ws))?;
        let (workspace, scratch) = scratch_layout(cudnn_ws, &io)?;
        let scalars = io
            .scalars
            .iter()
            .map(|&(uid, dtype, v)| Ok((uid, Box::new(scalar_bytes(dtype, v)?))))
            .collect::<Result<_>>()?;
        Ok(Self {
            desc: Mutex::new(desc),
            workspace,
            io,
            target: target.fingerprint(),
            device_ver: target.properties().device_ver(),
            engine,
            runtime_compiled,
            notes: None,
            scalars,
            scratch,
            id: NEXT_PLAN_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            guarded: guarded.into(),
        })
    }

    fn from_config(
        cfg: &Descriptor<kind::EngineConfig>,
        target: &Target,
        io: &Arc<IoSignature>,
    ) -> Result<Descriptor<kind::ExecutionPlan>> {
        let props = target.properties().descriptor()?;
        let mut p = Descriptor::<kind::ExecutionPlan>::new()?;
        p.set_descriptors(attr::EXECUTION_PLAN_ENGINE_CONFIG, &[cfg])?;
        p.set_descriptors(attr::EXECUTION_PLAN_DEVICEPROP, &[&*props])?;
        // cuDNN's finalize, or, with the finalize memo on (a test aid), what
        // it made from the same input before.
        memo::finalize(p, target, io)
    }

    /// Build the first plan the policy accepts: heuristics in the policy's
    /// mode order, then finalize candidates in order until one succeeds.
    ///
    /// # Errors
    /// No candidate at all (typed `Unsupported` saying so, with the graph's
    /// op count), or every accepted candidate failed (each reason listed);
    /// [`Error::CaptureUnsafe`](crate::Error::CaptureUnsafe) inside a
    /// [`Stream::capture`](crate::runtime::Stream::capture) closure (build
    /// before the capture).
    pub fn build(graph: &OpGraph, target: &Target, policy: &Policy) -> Result<(Plan, BuildReport)> {
        // Finalizing may compile and load kernels and allocate: not inside
        // a capture closure (a typed refusal, not a failed candidate each).
        let hazard = crate::runtime::Hazard::AlgorithmSearch;
        crate::runtime::forbid_in_capture_scope("Plan::build", hazard)?;
        let t0 = Instant::now();
        let cands = candidates(graph, target, policy)?;
        let mut report = BuildReport {
            heuristics_s: t0.elapsed().as_secs_f64(),
            candidates: cands.iter().map(Candidate::describe).collect(),
            ..BuildReport::default()
        };
        let t1 = Instant::now();
        for c in cands
            .iter()
            .filter(|c| c.rejected.is_none())
            .take(policy.max_attempts.max(1))
        {
            match Self::from_config(&c.config, target, &graph.io) {
                Ok(desc) => {
                    report.finalize_s = t1.elapsed().as_secs_f64();
                    report.chosen = Some(c.engine);
                    let plan = Plan::new(
                        desc,
                        graph.io.clone(),
                        target,
                        Some(c.engine),
                        c.behavior_notes.contains(&BehaviorNote::RuntimeCompilation),
                        &graph.guarded,
                    )?
                    .with_notes(&c.behavior_notes);
                    return Ok((plan, report));
                }
                Err(e) => report.failures.push((c.engine, e.to_string())),
            }
        }
        report.finalize_s = t1.elapsed().as_secs_f64();
        let accepted = cands.iter().filter(|c| c.rejected.is_none()).count();
        Err(Error::Unsupported {
            what: if cands.is_empty() {
                format!(
                    "no engine for this graph on {} (cuDNN's heuristics offered none){}",
                    target.fingerprint(),
                    nvrtc_hint()
                )
            } else if accepted == 0 {
                format!(
                    "every engine offered for {} is ruled out by the policy: {}",
                    target.fingerprint(),
                    report.candidates.join("; ")
                )
            } else {
                format!(
                    "no engine finalized for {}: {}",
                    target.fingerprint(),
                    report
                        .failures
                        .iter()
                        .map(|(e, r)| format!("engine {e}: {r}"))
                        .collect::<Vec<_>>()
                        .join("; ")
                )
            },
            needs: None,
        })
    }

    /// Build a plan from every accepted candidate (up to the policy's
    /// `max_attempts`), for autotuning; failures are in the report.
    ///
    /// # Errors
    /// As [`build`](Self::build) when none finalizes.
    pub fn build_all(
        graph: &OpGraph,
        target: &Target,
        policy: &Policy,
    ) -> Result<(Vec<Plan>, BuildReport)> {
        let hazard = crate::runtime::Hazard::AlgorithmSearch;
        crate::runtime::forbid_in_capture_scope("Plan::build_all", hazard)?;
        let cands = candidates(graph, target, policy)?;
        let mut report = BuildReport {
            candidates: cands.iter().map(Candidate::describe).collect(),
            ..BuildReport::default()
        };
        let mut plans = Vec::new();
        for c in cands
            .iter()
            .filter(|c| c.rejected.is_none())
            .take(policy.max_attempts.max(1))
        {
            match Self::from_config(&c.config, target, &graph.io) {
                Ok(desc) => plans.push(
                    Plan::new(
                        desc,
                        graph.io.clone(),
                        target,
                        Some(c.engine),
                        c.behavior_notes.contains(&BehaviorNote::RuntimeCompilation),
                        &graph.guarded,
                    )?
                    .with_notes(&c.behavior_notes),
                ),
                Err(e) => report.failures.push((c.engine, e.to_string())),
            }
        }
        if plans.is_empty() {
            return Self::build(graph, target, policy).map(|(p, r)| (vec![p], r));
        }
        report.chosen = plans[0].engine;
        Ok((plans, report))
    }

    /// Build every accepted candidate, time each on the handle's device with
    /// scratch buffers (zeros) for every input and output, and keep the
    /// fastest. Returns it with `(engine, median ms)` for every plan timed,
    /// in heuristic order. Needs a GPU. One engine can be timed several
    /// times with other knobs: [`autotune_timed`](Self::autotune_timed) also
    /// says which plan each timing belongs to.
    ///
    /// `target` must have the architecture of the handle's device (checked,
    /// as [`execute`](Self::execute) does). A target of the same architecture
    /// but another SM count (an H100 PCIe target timed on an H100 SXM) is not
    /// refused: the plans run, but engines and timings were chosen for the
    /// target's SM count, so the fastest there may not be the fastest here;
    /// tune with [`Target::device`](super::Target::device) for this device.
    ///
    /// # Errors
    /// As [`build_all`](Self::build_all); the handle's device of another
    /// architecture than `target` (typed `Unsupported`, before anything
    /// runs); allocation or execution failures; [`Error::CaptureUnsafe`]
    /// while the handle's stream is capturing (tune before the capture).
    pub fn autotune(
        graph: &OpGraph,
        target: &Target,
        policy: &Policy,
        handle: &mut crate::dnn::Handle,
        iterations: usize,
    ) -> Result<(Plan, Timings)> {
        let (plan, timed) = Self::autotune_timed(graph, target, policy, handle, iterations)?;
        Ok((
            plan,
            timed.iter().map(|t| (t.engine, t.median_ms)).collect(),
        ))
    }

    /// [`autotune`](Self::autotune), with each timing's plan named by its
    /// position in the list [`build_all`](Self::build_all) returns for the
    /// same graph, target and policy (heuristic order; the same list on
    /// every build). A plan whose first run fails is not timed, so positions
    /// can skip; the returned plan is the one at the fastest timing's
    /// position (the first of equal times).
    ///
    /// # Errors
    /// As [`autotune`](Self::autotune).
    pub fn autotune_timed(
        graph: &OpGraph,
        target: &Target,
        policy: &Policy,
        handle: &mut crate::dnn::Handle,
        iterations: usize,
    ) -> Result<(Plan, Vec<PlanTiming>)> {
        use crate::runtime::{DeviceBuffer, Event, Hazard};
        crate::runtime::forbid_during_capture(
            "Plan::autotune",
            handle.stream(),
            Hazard::AlgorithmSearch,
        )?;
        let (plans, _) = Self::build_all(graph, target, policy)?;
        // The target's architecture must be the handle's device's, as for
        // `execute` (every plan of `build_all` has the same target).
        let device = handle.device();
        for p in &plans {
            p.check_device(device)?;
        }
        // Scratch buffers, events and the runs on the handle's device.
        let _on = handle.enter()?;
        let mut buffers = Vec::new();
        let mut ptrs = Vec::new();
        for t in &graph.io.tensors {
            // Sequence lengths at their full values (zeros would time empty work).
            let mut b = match graph.timing_input(t)? {
                Some(bytes) => DeviceBuffer::<u8>::from_host(&bytes)?,
                None => DeviceBuffer::<u8>::zeroed(t.spec.span_bytes()?.max(1))?,
            };
            ptrs.push((t.uid, b.as_raw_mut()));
            buffers.push(b);
        }
        let ws_bytes = plans.iter().map(|p| p.workspace).max().unwrap_or(0);
        let mut ws = DeviceBuffer::<u8>::zeroed(ws_bytes.max(1))?;
        let ws_ptr = ws.as_raw_mut();
        let (start, end) = (Event::new()?, Event::new()?);
        let iterations = iterations.clamp(1, 1000);
        // Each timing names its index into `plans`: one engine can come
        // several times with other knobs (tile sizes), so the engine alone
        // does not name the plan that was fastest.
        let mut timed = Vec::with_capacity(plans.len());
        for (i, p) in plans.iter().enumerate() {
            // SAFETY: every pointer is a live device buffer of its tensor's
            // span (allocated above, freed after the stream is synchronized);
            // the workspace holds the largest plan's bytes.
            let run = || unsafe { p.execute_raw(handle.as_raw(), &ptrs, ws_ptr, ws_bytes) };
            if run().is_err() {
                continue;
            }
            let mut samples = Vec::with_capacity(iterations);
            for _ in 0..iterations {
                start.record(handle.stream())?;
                run()?;
                end.record(handle.stream())?;
                end.synchronize()?;
                samples.push(Event::elapsed_ms(&start, &end)?);
            }
            samples.sort_by(f32::total_cmp);
            let median_ms = samples[samples.len() / 2];
            timed.push(PlanTiming {
                position: i,
                engine: p.engine,
                median_ms,
            });
        }
        handle.stream().synchronize()?;
        drop(buffers);
        drop(ws);
        let best = fastest_position(&timed).ok_or_else(|| Error::Unsupported {
            what: "autotune: no plan executed".to_string(),
            needs: None,
        })?;
        let plan = plans.into_iter().nth(best).ok_or_else(|| {
            Error::invalid("autotune", "lost the chosen plan", format!("index {best}"))
        })?;
        Ok((plan, timed))
    }

    /// Workspace bytes an execution needs (cuDNN's, and after them, at
    /// 256-byte boundaries, the tensors the plan keeps there itself, such as
    /// the composite attention backward's row sums and dQ accumulator).
    pub fn workspace_size(&self) -> usize {
        self.workspace
    }

    /// The engine's global index, when known (plans loaded from JSON: not known).
    pub fn engine(&self) -> Option<i64> {
        self.engine
    }

    /// Whether the plan's engine compiled its kernel at run time (such a
    /// plan is slow to build, and cuDNN keeps ~0.4 MB of host memory for
    /// every one it builds: keep these cached rather than rebuild them).
    pub fn is_runtime_compiled(&self) -> bool {
        self.runtime_compiled
    }

    fn with_notes(mut self, notes: &[BehaviorNote]) -> Self {
        self.notes = Some(notes.to_vec());
        self
    }

    /// The engine's behaviour notes; `None` for a plan loaded from JSON.
    pub fn notes(&self) -> Option<&[BehaviorNote]> {
        self.notes.as_deref()
    }

    /// What the plan binds.
    pub fn io(&self) -> &IoSignature {
        &self.io
    }

    /// The inputs the GPU uses as addresses or bounds, by name, with their
    /// [`InputGuard`]: what each must be bound with, and for sequence lengths the
    /// extent they may not pass (recorded from the graph, or read from the
    /// plan JSON of a loaded plan). In UID order.
    pub fn guarded_inputs(&self) -> Vec<(&str, InputGuard)> {
        let mut by_uid: Vec<(i64, &str, InputGuard)> = self
            .guarded
            .iter()
            .filter_map(|&(uid, g)| {
                let t = self.io.tensors.iter().find(|t| t.uid == uid)?;
                Some((uid, t.name.as_str(), g))
            })
            .collect();
        by_uid.sort_unstable_by_key(|&(uid, _, _)| uid);
        by_uid.into_iter().map(|(_, n, g)| (n, g)).collect()
    }

    /// The target fingerprint the plan was built for.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// Run `f` with the finalized plan descriptor (for the backend layer),
    /// locked for the call. Inside `f`, using any plan on the same thread
    /// ([`serialize`](Self::serialize), [`cudnn_json`](Self::cudnn_json),
    /// [`execute`](Self::execute), or a nested `with_descriptor`, of this
    /// plan or another) returns a typed error instead of waiting forever: for
    /// the lock `f` holds, or, with two plans nested in opposite orders on
    /// two threads, for each other.
    ///
    /// # Errors
    /// Called from inside a `with_descriptor` of any plan on this thread.
    pub fn with_descriptor<R>(
        &self,
        f: impl FnOnce(&Descriptor<kind::ExecutionPlan>) -> R,
    ) -> Result<R> {
        let held = self.lock()?;
        Ok(f(&held.guard))
    }

    fn lock(&self) -> Result<Held<'_>> {
        let key = std::ptr::from_ref(self) as usize;
        // Any plan's lock held by this thread refuses the next one: the same
        // plan would wait for itself, and two plans nested in opposite orders
        // on two threads (A then B here, B then A there) would wait for each
        // other forever.
        let held = HELD
            .try_with(|h| h.try_borrow().map(|h| h.len()).unwrap_or(1))
            .unwrap_or(0);
        if held > 0 {
            return Err(Error::invalid(
                "plan descriptor",
                "cannot be locked while this thread holds a plan's descriptor (inside \
                 `Plan::with_descriptor` of this or another plan): use the descriptor given \
                 to the closure, or use the plan after it returns",
                "a nested lock on one thread",
            ));
        }
        // No code path can leave the descriptor half-changed (a finalized
        // descriptor is only read), so a poisoned lock is still usable.
        let guard = self.desc.lock().unwrap_or_else(|p| p.into_inner());
        let _ = HELD.try_with(|h| {
            if let Ok(mut h) = h.try_borrow_mut() {
                h.push(key);
            }
        });
        Ok(Held { guard, key })
    }

    /// cuDNN's JSON of the plan (engine, knobs, device properties and, for
    /// runtime-compiled engines, the compiled code).
    ///
    /// # Errors
    /// cuDNN's refusal.
    pub fn cudnn_json(&self) -> Result<String> {
        read_json(&self.lock()?.guard)
    }

    /// This crate's plan file: the format version, the cuDNN that made the
    /// plan, the target, the IO signature and cuDNN's JSON, in a text form
    /// [`deserialize`](Self::deserialize) reads. Unsigned: a runtime-compiled
    /// plan in it loads only through
    /// [`deserialize_unverified`](Self::deserialize_unverified); sign it with
    /// [`serialize_signed`](Self::serialize_signed) to reload it safely.
    ///
    /// # Errors
    /// cuDNN's refusal to serialize; the plan's descriptor held by this
    /// thread (inside [`with_descriptor`](Self::with_descriptor)).
    pub fn serialize(&self) -> Result<String> {
        let json = self.cudnn_json()?;
        let mut s = plan_header(FORMAT);
        s.push('\n');
        s.push_str(&format!("cudnn {}\n", loaded_cudnn_version()?));
        s.push_str(&format!("target {}\n", self.target));
        s.push_str(&format!(
            "engine {}\n",
            self.engine
                .map(|e| e.to_string())
                .unwrap_or_else(|| "-".into())
        ));
        write_io(&mut s, &self.io);
        s.push_str(&format!("json {}\n{json}\n", json.len()));
        Ok(s)
    }

    /// [`serialize`](Self::serialize) with a last line that authenticates
    /// the file: an HMAC-SHA256 under `key` over everything before it (see
    /// [`PlanKey`]). [`deserialize`](Self::deserialize) with
    /// [`Trust::SignedBy`] the same key loads it whole, compiled code
    /// included.
    ///
    /// # Errors
    /// As [`serialize`](Self::serialize).
    pub fn serialize_signed(&self, key: &PlanKey) -> Result<String> {
        plan_auth::sign(key, FileKind::Plan, self.serialize()?)
    }

    /// Load a plan file for `target`. A file made for another target, or by
    /// another cuDNN than the one loaded, is refused before cuDNN sees it, as
    /// is a plan JSON that disagrees with the file's tensor list (see
    /// [`from_cudnn_json`](Self::from_cudnn_json)). Files of format 1 (no
    /// recorded cuDNN version) are read; their plan JSON's own
    /// `cudnnVersion` is checked instead.
    ///
    /// A runtime-compiled plan (its JSON carries compiled kernel code) loads
    /// only under [`Trust::SignedBy`] a key its file's tag verifies under (a
    /// file [`serialize_signed`](Self::serialize_signed) wrote with that
    /// key); otherwise it is refused (`Unsupported`, saying why). Under
    /// [`Trust::SignedBy`], a file whose tag is present but does not verify
    /// (another key's, or the file changed since it was signed) is refused
    /// whole, whatever it holds. A file from elsewhere:
    /// [`deserialize_unverified`](Self::deserialize_unverified).
    ///
    /// # Errors
    /// Malformed file (what and where), another target or cuDNN (both
    /// named), a disagreement between the JSON and the tensor list, compiled
    /// code without a valid tag, a tag that does not verify
    /// (`InvalidArgument`), or cuDNN's refusal.
    pub fn deserialize(text: &str, target: &Target, trust: Trust<'_>) -> Result<Self> {
        let key = match trust {
            Trust::NoCompiledCode => None,
            Trust::SignedBy(k) => Some(k),
        };
        let (body, auth) = plan_auth::check(text, FileKind::Plan, key);
        if auth == plan_auth::Authentication::Invalid {
            return Err(plan_auth::tag_refused("plan file"));
        }
        let payload = if auth.allows_compiled_code() {
            Payload::Keep
        } else {
            Payload::Refuse
        };
        Self::deserialize_with(body, target, payload).map_err(|e| match (e, auth) {
            (Error::Unsupported { what, needs }, a) if what.contains("compiled kernel code") => {
                Error::Unsupported {
                    what: format!("{what}; the file is not authenticated: {a}"),
                    needs,
                }
            }
            (e, _) => e,
        })
    }

    /// [`deserialize`](Self::deserialize) that also loads compiled code from
    /// an unsigned file (a tag, if any, is ignored); every other check runs.
    ///
    /// # Safety
    /// As [`from_cudnn_json_unverified`](Self::from_cudnn_json_unverified):
    /// if the file carries compiled code, its plan JSON must be cuDNN's JSON,
    /// unchanged, of a plan built with the loaded cuDNN for a graph whose
    /// IoSignature is exactly the file's tensor list (names aside). A file
    /// [`serialize`](Self::serialize) wrote with the loaded cuDNN, not
    /// changed since, is one.
    ///
    /// # Errors
    /// As [`deserialize`](Self::deserialize), but for compiled code.
    pub unsafe fn deserialize_unverified(text: &str, target: &Target) -> Result<Self> {
        let (body, _) = plan_auth::split(text);
        Self::deserialize_with(body, target, Payload::Keep)
    }

    fn deserialize_with(text: &str, target: &Target, payload: Payload) -> Result<Self> {
        let mut r = Reader::new(text);
        let format = header_format(r.line()?, "cudnn-rs plan")
            .ok_or_else(|| r.bad("`cudnn-rs plan v2` (or v1)"))?;
        let made_by = if format >= 2 {
            let v = r.field("cudnn")?;
            Some(r.parse::<u64>("cudnn version", &v)?)
        } else {
            None
        };
        let loaded = loaded_cudnn_version()?;
        if let Some(v) = made_by
            && v != loaded
        {
            return Err(Error::Unsupported {
                what: format!(
                    "the plan was made by cuDNN {}, and cuDNN {} is loaded",
                    fmt_cudnn_version(v),
                    fmt_cudnn_version(loaded)
                ),
                needs: Some("a plan made by the loaded cuDNN (rebuild it)".to_string()),
            });
        }
        let t = r.field("target")?;
        if !target.properties().compatible(&t) {
            return Err(Error::Unsupported {
                what: format!(
                    "the plan was built for `{t}`, not `{}`",
                    target.fingerprint()
                ),
                needs: Some("a plan built for this target".to_string()),
            });
        }
        let engine = r.field("engine")?;
        let engine = if engine == "-" {
            None
        } else {
            Some(r.parse::<i64>("engine", &engine)?)
        };
        let io = read_io(&mut r)?;
        let json = r.blob("json")?;
        if !r.at_end() {
            return Err(r.bad("the end of the file"));
        }
        let mut plan = Self::from_json(&json, target, Arc::new(io), payload)?;
        plan.engine = engine;
        Ok(plan)
    }
}

/// `(engine, median milliseconds)` per plan timed by [`Plan::autotune`].
pub type Timings = Vec<(Option<i64>, f32)>;

/// One plan timed by [`Plan::autotune_timed`].
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct PlanTiming {
    /// The plan's position in [`Plan::build_all`]'s list.
    pub position: usize,
    /// The plan's engine (one engine can come at several positions, with
    /// other knobs).
    pub engine: Option<i64>,
    /// The median of the timed runs, milliseconds.
    pub median_ms: f32,
}

// Plans are shared between threads (the descriptor behind a lock; the
// cache's own assertion is in its file).
const _: () = {
    fn shared<T: Send + Sync>() {}
    let _ = shared::<Plan>;
};

/// The position in `times` of the fastest timing (the first of equals), or
/// `None` when there is none. By position, not by engine: an engine timed
/// with several knob choices appears more than once.
fn fastest(times: &[(Option<i64>, f32)]) -> Option<usize> {
    times
        .iter()
        .enumerate()
        .min_by(|a, b| a.1.1.total_cmp(&b.1.1))
        .map(|(i, _)| i)
}

/// The `build_all` position of the fastest timing (the first of equals).
fn fastest_position(timed: &[PlanTiming]) -> Option<usize> {
    let times: Vec<(Option<i64>, f32)> = timed.iter().map(|t| (t.engine, t.median_ms)).collect();
    fastest(&times)
        .and_then(|i| timed.get(i))
        .map(|t| t.position)
}

#[cfg(test)]
mod tests {
    use super::{PlanTiming, fastest, fastest_position};

    #[test]
    fn fastest_position_names_the_plan_not_the_timing_index() {
        // Plans 0..4 built, plan 1 failed its first run (not timed): the
        // fastest timing is the third (index 2), which is plan 3.
        let t = |position, engine, median_ms| PlanTiming {
            position,
            engine: Some(engine),
            median_ms,
        };
        let timed = [t(0, 62, 3.0), t(2, 62, 2.0), t(3, 62, 1.0)];
        assert_eq!(fastest_position(&timed), Some(3));
        assert_eq!(fastest_position(&[]), None);
    }

    #[test]
    fn fastest_is_by_position_not_by_engine() {
        // Engine 62 twice (other knobs): its second configuration is the
        // fastest; picking "the plan of engine 62" would return the first.
        let times = [(Some(62), 3.0), (Some(62), 1.0), (Some(1), 2.0)];
        assert_eq!(fastest(&times), Some(1));
        // The first of equal times, as `Iterator::min_by`.
        assert_eq!(fastest(&[(Some(5), 2.0), (Some(6), 2.0)]), Some(0));
        assert_eq!(fastest(&[(None, 0.5)]), Some(0));
        assert_eq!(fastest(&[]), None);
    }

    proptest::proptest! {
        /// Against a plain scan as the truth: the position of the smallest
        /// time, the first of equals, whatever the engines (few distinct
        /// engines and times, so repeats of both are common).
        #[test]
        fn unit_property_fastest_is_the_first_smallest_time(
            times in proptest::collection::vec((proptest::option::of(0i64..4), 0u8..6), 0..12),
        ) {
            let times: Vec<(Option<i64>, f32)> =
                times.into_iter().map(|(e, t)| (e, f32::from(t) * 0.5)).collect();
            let mut want = None;
            for (i, t) in times.iter().enumerate() {
                if want.is_none_or(|w: usize| t.1 < times[w].1) {
                    want = Some(i);
                }
            }
            proptest::prop_assert_eq!(fastest(&times), want);
        }

        /// Positions with gaps (plans whose first run failed): the answer is
        /// the position of the first smallest time, by a plain scan.
        #[test]
        fn unit_property_fastest_position_skips_untimed_plans(
            entries in proptest::collection::vec((0usize..3, 0u8..6), 0..12),
        ) {
            let mut position = 0;
            let mut timed = Vec::new();
            for (gap, ms) in entries {
                position += gap;
                timed.push(PlanTiming { position, engine: Some(62), median_ms: f32::from(ms) });
                position += 1;
            }
            let mut want: Option<(usize, f32)> = None;
            for x in &timed {
                if want.is_none_or(|w| x.median_ms < w.1) {
                    want = Some((x.position, x.median_ms));
                }
            }
            proptest::prop_assert_eq!(fastest_position(&timed), want.map(|w| w.0));
        }
    }
}
