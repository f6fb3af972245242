//! Finalized execution plans: workspace size, JSON serialization (always
//! with a target), and execution with a checked variant pack.

use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use super::backend::{Descriptor, attr, kind};
use super::graph::{IoSignature, IoTensor, OpGraph};
use super::heuristics::{Candidate, Policy, candidates};
use super::target::{Target, read_json};
use super::tensor::{BYTE_ALIGNMENT, DType, TensorSpec, fmt_dims};
use crate::DataType;
use crate::check::{cudnn, cudnn_call};
use crate::error::{Error, Result};
use crate::runtime::{DeviceSlice, DeviceSliceMut};

/// A finalized execution plan for one graph on one target.
#[derive(Debug)]
pub struct Plan {
    /// Locked for every use: cuDNN documents no concurrent use of one
    /// descriptor, and plans are shared between threads (`PlanCache`).
    desc: Mutex<Descriptor<kind::ExecutionPlan>>,
    /// cuDNN's workspace, then the scratch tensors.
    workspace: usize,
    io: Arc<IoSignature>,
    target: String,
    engine: Option<i64>,
    /// Host copies of the by-value scalars, at stable addresses.
    scalars: Vec<(i64, Box<[u8; 8]>)>,
    /// `(uid, byte offset in the workspace)` of each scratch tensor.
    scratch: Vec<(i64, usize)>,
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
        target: String,
        engine: Option<i64>,
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
            target,
            engine,
            scalars,
            scratch,
        })
    }

    fn from_config(
        cfg: &Descriptor<kind::EngineConfig>,
        target: &Target,
    ) -> Result<Descriptor<kind::ExecutionPlan>> {
        let props = target.properties().descriptor()?;
        let mut p = Descriptor::<kind::ExecutionPlan>::new()?;
        p.set_descriptors(attr::EXECUTION_PLAN_ENGINE_CONFIG, &[cfg])?;
        p.set_descriptors(attr::EXECUTION_PLAN_DEVICEPROP, &[&props])?;
        p.finalize()?;
        Ok(p)
    }

    /// Build the first plan the policy accepts: heuristics in the policy's
    /// mode order, then finalize candidates in order until one succeeds.
    ///
    /// # Errors
    /// No candidate at all (typed `Unsupported` saying so, with the graph's
    /// op count), or every accepted candidate failed (each reason listed).
    pub fn build(graph: &OpGraph, target: &Target, policy: &Policy) -> Result<(Plan, BuildReport)> {
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
            match Self::from_config(&c.config, target) {
                Ok(desc) => {
                    report.finalize_s = t1.elapsed().as_secs_f64();
                    report.chosen = Some(c.engine);
                    let plan =
                        Plan::new(desc, graph.io.clone(), target.fingerprint(), Some(c.engine))?;
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
            match Self::from_config(&c.config, target) {
                Ok(desc) => plans.push(Plan::new(
                    desc,
                    graph.io.clone(),
                    target.fingerprint(),
                    Some(c.engine),
                )?),
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
    /// in heuristic order. Needs a GPU.
    ///
    /// # Errors
    /// As [`build_all`](Self::build_all); allocation or execution failures.
    pub fn autotune(
        graph: &OpGraph,
        target: &Target,
        policy: &Policy,
        handle: &mut crate::dnn::Handle,
        iterations: usize,
    ) -> Result<(Plan, Timings)> {
        use crate::runtime::{DeviceBuffer, Event};
        let (plans, _) = Self::build_all(graph, target, policy)?;
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
        let mut times = Vec::with_capacity(plans.len());
        for p in &plans {
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
            times.push((p.engine, samples[samples.len() / 2]));
        }
        handle.stream().synchronize()?;
        drop(buffers);
        drop(ws);
        let best = times
            .iter()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|t| t.0)
            .ok_or_else(|| Error::Unsupported {
                what: "autotune: no plan executed".to_string(),
                needs: None,
            })?;
        let plan = plans
            .into_iter()
            .find(|p| p.engine == best)
            .ok_or_else(|| {
                Error::invalid("autotune", "lost the chosen plan", format!("{best:?}"))
            })?;
        Ok((plan, times))
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

    /// What the plan binds.
    pub fn io(&self) -> &IoSignature {
        &self.io
    }

    /// The target fingerprint the plan was built for.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The finalized plan descriptor (for the backend layer), locked while
    /// the guard lives.
    pub fn descriptor(&self) -> MutexGuard<'_, Descriptor<kind::ExecutionPlan>> {
        self.lock()
    }

    fn lock(&self) -> MutexGuard<'_, Descriptor<kind::ExecutionPlan>> {
        // No code path can leave the descriptor half-changed (a finalized
        // descriptor is only read), so a poisoned lock is still usable.
        self.desc.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// cuDNN's JSON of the plan (engine, knobs, device properties and, for
    /// runtime-compiled engines, the compiled code).
    ///
    /// # Errors
    /// cuDNN's refusal.
    pub fn cudnn_json(&self) -> Result<String> {
        read_json(&self.lock())
    }

    /// Rebuild a plan from cuDNN's JSON for `target`, with the IO signature
    /// it binds (from the graph it was built from, or a plan file).
    ///
    /// # Errors
    /// The JSON is refused, or it was made for another architecture
    /// (cuDNN's `NOT_SUPPORTED_ARCH_MISMATCH`, as a typed `Unsupported`).
    pub fn from_cudnn_json(json: &str, target: &Target, io: Arc<IoSignature>) -> Result<Self> {
        super::require_graph_support()?;
        super::driver::ensure()?;
        if json.contains('\0') {
            return Err(Error::invalid(
                "plan JSON",
                "must not contain NUL",
                json.len(),
            ));
        }
        let props = target.properties().descriptor()?;
        let mut p = Descriptor::<kind::ExecutionPlan>::new()?;
        // Device properties first: a plan loaded without them crashes cuDNN.
        p.set_descriptors(attr::EXECUTION_PLAN_DEVICEPROP, &[&props])?;
        let mut bytes = json.as_bytes().to_vec();
        bytes.push(0);
        p.set(attr::EXECUTION_PLAN_JSON_REPRESENTATION, &bytes)?;
        p.finalize().map_err(|e| {
            if e.cudnn_status()
                == Some(crate::sys::cudnn::cudnnStatus_t::CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH)
            {
                Error::Unsupported {
                    what: format!(
                        "this plan was compiled for another GPU architecture, not {} ({e})",
                        target.fingerprint()
                    ),
                    needs: Some("a plan built for this target".to_string()),
                }
            } else {
                e.with_context("loading a plan from JSON")
            }
        })?;
        Plan::new(p, io, target.fingerprint(), None)
    }

    /// This crate's plan file: the target, the IO signature and cuDNN's JSON,
    /// in a versioned text form [`deserialize`](Self::deserialize) reads.
    ///
    /// # Errors
    /// cuDNN's refusal to serialize.
    pub fn serialize(&self) -> Result<String> {
        let json = self.cudnn_json()?;
        let mut s = String::from("cudnn-rs plan v1\n");
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

    /// Load a plan file for `target`. A file made for another target is
    /// refused before cuDNN sees it.
    ///
    /// # Errors
    /// Malformed file (what and where), another target, or cuDNN's refusal.
    pub fn deserialize(text: &str, target: &Target) -> Result<Self> {
        let mut r = Reader::new(text);
        r.expect_line("cudnn-rs plan v1")?;
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
        let mut plan = Self::from_cudnn_json(&json, target, Arc::new(io))?;
        plan.engine = engine;
        Ok(plan)
    }

    /// Check a set of bindings against the plan: every input and output bound
    /// exactly once, with the right dtype, at least the tensor's span, and
    /// [`BYTE_ALIGNMENT`]-aligned.
    fn check_bindings(&self, b: &Bindings<'_>) -> Result<()> {
        if !Arc::ptr_eq(&b.io, &self.io) {
            return Err(Error::invalid(
                "bindings",
                "must come from this plan's `bindings()` (they were checked against another plan's tensors)",
                "another plan's bindings",
            ));
        }
        for t in &self.io.tensors {
            if !b.slots.iter().any(|s| s.uid == t.uid) {
                return Err(Error::invalid(
                    format!("binding `{}`", t.name),
                    format!(
                        "every graph {} must be bound",
                        if t.is_output { "output" } else { "input" }
                    ),
                    "not bound",
                ));
            }
        }
        if b.workspace_bytes < self.workspace {
            return Err(Error::mismatch(
                "workspace bytes",
                self.workspace,
                b.workspace_bytes,
            ));
        }
        Ok(())
    }

    /// Start binding buffers for [`execute`](Self::execute).
    pub fn bindings(&self) -> Bindings<'_> {
        Bindings {
            io: self.io.clone(),
            slots: Vec::new(),
            workspace: std::ptr::null_mut(),
            workspace_bytes: 0,
            pack: None,
            packed_ptrs: Vec::new(),
            _plan: std::marker::PhantomData,
        }
    }

    /// Run the plan on the handle's stream with `bindings` (one cuDNN call
    /// when the pointers are those of the previous run). The workspace comes
    /// from the handle (grown if needed) unless the bindings carry one.
    ///
    /// # Errors
    /// A binding missing, cuDNN's refusal (no device: `NOT_INITIALIZED` at handle creation already).
    #[doc(alias = "cudnnBackendExecute")]
    pub fn execute(
        &self,
        handle: &mut crate::dnn::Handle,
        bindings: &mut Bindings<'_>,
    ) -> Result<()> {
        if bindings.workspace.is_null() && self.workspace > 0 {
            let raw = {
                let mut ws = handle.workspace(self.workspace)?;
                ws.as_raw_mut()
            };
            bindings.workspace = raw;
            bindings.workspace_bytes = self.workspace;
            bindings.pack = None;
        }
        self.check_bindings(bindings)?;
        let raw_handle = handle.as_raw();
        let pack = bindings.pack(self)?;
        let api = cudnn()?;
        // SAFETY: the plan is finalized; the variant pack holds a pointer for
        // every graph input and output, each checked for dtype, span and
        // alignment and borrowed by `bindings` for its lifetime; the
        // workspace holds at least `self.workspace` bytes and is the handle's
        // (used on the handle's stream) or the caller's (same contract as
        // their buffers); scalar pointers point into `self.scalars`.
        unsafe {
            cudnn_call!(
                api,
                cudnnBackendExecute(raw_handle, self.lock().as_raw(), pack)
            )
        }
        .map_err(|e| e.with_context("executing a graph plan"))
    }

    /// Run with raw device pointers owned by someone else: `(uid, pointer)`
    /// for every graph input and output, a workspace of
    /// [`workspace_size`](Self::workspace_size) bytes, and a raw cuDNN handle
    /// (whose stream the work is queued on).
    ///
    /// # Safety
    /// Each pointer must be device memory of at least its tensor's span and
    /// type, valid until the work completes; the workspace likewise.
    pub unsafe fn execute_raw(
        &self,
        handle: crate::sys::cudnn::cudnnHandle_t,
        ptrs: &[(i64, *mut c_void)],
        workspace: *mut c_void,
        workspace_bytes: usize,
    ) -> Result<()> {
        let mut b = self.bindings();
        for &(uid, p) in ptrs {
            let t = self
                .io
                .tensors
                .iter()
                .find(|t| t.uid == uid)
                .ok_or_else(|| {
                    Error::invalid("uid", "is not an input or output of the plan", uid)
                })?;
            b.push(
                t.uid,
                t.spec.span_bytes()?,
                t.spec.dtype(),
                p,
                &t.name.clone(),
            )?;
        }
        b.workspace = workspace;
        b.workspace_bytes = workspace_bytes;
        self.check_bindings(&b)?;
        let pack = b.pack(self)?;
        let api = cudnn()?;
        // SAFETY: the caller guarantees the pointers and the handle; every
        // graph tensor is bound (checked above).
        unsafe { cudnn_call!(api, cudnnBackendExecute(handle, self.lock().as_raw(), pack)) }
    }
}

/// `(engine, median milliseconds)` per plan timed by [`Plan::autotune`].
pub type Timings = Vec<(Option<i64>, f32)>;

struct Slot {
    uid: i64,
    ptr: *mut c_void,
}

/// Buffers bound to a plan's inputs and outputs, by tensor name. Reused
/// across executions, the variant pack is rebuilt only when a pointer changes.
pub struct Bindings<'a> {
    io: Arc<IoSignature>,
    slots: Vec<Slot>,
    workspace: *mut c_void,
    workspace_bytes: usize,
    pack: Option<Descriptor<kind::VariantPack>>,
    packed_ptrs: Vec<*mut c_void>,
    _plan: std::marker::PhantomData<&'a mut ()>,
}

impl std::fmt::Debug for Bindings<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bindings")
            .field("bound", &self.slots.len())
            .field("workspace_bytes", &self.workspace_bytes)
            .finish()
    }
}

impl<'a> Bindings<'a> {
    fn find(&self, name: &str) -> Result<IoTensor> {
        self.io
            .tensors
            .iter()
            .find(|t| t.name == name)
            .cloned()
            .ok_or_else(|| {
                let names: Vec<&str> = self.io.tensors.iter().map(|t| t.name.as_str()).collect();
                Error::invalid("binding name", format!("must be one of {names:?}"), name)
            })
    }

    fn push(
        &mut self,
        uid: i64,
        bytes: usize,
        dtype: DType,
        ptr: *mut c_void,
        name: &str,
    ) -> Result<()> {
        let t = self
            .io
            .tensors
            .iter()
            .find(|t| t.uid == uid)
            .ok_or_else(|| Error::invalid("binding", "unknown tensor", name))?;
        if self.slots.iter().any(|s| s.uid == uid) {
            return Err(Error::invalid(
                format!("binding `{name}`"),
                "must be bound exactly once",
                "bound twice",
            ));
        }
        if dtype != t.spec.dtype() {
            return Err(Error::mismatch(
                format!("binding `{name}` element type"),
                t.spec.dtype(),
                dtype,
            ));
        }
        let need = t.spec.span_bytes()?;
        if bytes < need {
            return Err(Error::mismatch(
                format!(
                    "binding `{name}` bytes (the span of {} {})",
                    t.spec.dtype(),
                    fmt_dims(t.spec.dims())
                ),
                format!("at least {need}"),
                bytes,
            ));
        }
        if ptr.is_null() || !(ptr as usize).is_multiple_of(BYTE_ALIGNMENT) {
            return Err(Error::invalid(
                format!("binding `{name}` pointer"),
                format!("must be non-null and {BYTE_ALIGNMENT}-byte aligned"),
                format!("{ptr:p}"),
            ));
        }
        self.slots.push(Slot { uid, ptr });
        self.pack = None;
        Ok(())
    }

    /// Bind a graph input.
    ///
    /// # Errors
    /// Unknown name, an output, bound twice, wrong dtype, too short, misaligned.
    pub fn input<T: DataType>(
        &mut self,
        name: &str,
        buf: impl Into<DeviceSlice<'a, T>>,
    ) -> Result<&mut Self> {
        let t = self.find(name)?;
        if t.is_output {
            return Err(Error::invalid(
                format!("binding `{name}`"),
                "is an output: bind it with `output`",
                name,
            ));
        }
        let s: DeviceSlice<'a, T> = buf.into();
        let dtype = DType::of::<T>().ok_or_else(|| {
            Error::invalid(
                format!("binding `{name}`"),
                "element type has no graph dtype",
                T::NAME,
            )
        })?;
        self.push(t.uid, s.byte_len(), dtype, s.as_raw() as *mut c_void, name)?;
        Ok(self)
    }

    /// Bind a graph output.
    ///
    /// # Errors
    /// Unknown name, an input, bound twice, wrong dtype, too short, misaligned.
    pub fn output<T: DataType>(
        &mut self,
        name: &str,
        buf: impl Into<DeviceSliceMut<'a, T>>,
    ) -> Result<&mut Self> {
        let t = self.find(name)?;
        if !t.is_output {
            return Err(Error::invalid(
                format!("binding `{name}`"),
                "is an input: bind it with `input`",
                name,
            ));
        }
        let mut s: DeviceSliceMut<'a, T> = buf.into();
        let dtype = DType::of::<T>().ok_or_else(|| {
            Error::invalid(
                format!("binding `{name}`"),
                "element type has no graph dtype",
                T::NAME,
            )
        })?;
        self.push(t.uid, s.byte_len(), dtype, s.as_raw_mut(), name)?;
        Ok(self)
    }

    /// Use a caller's workspace instead of the handle's.
    ///
    /// # Errors
    /// Misaligned.
    pub fn workspace(&mut self, ws: impl Into<DeviceSliceMut<'a, u8>>) -> Result<&mut Self> {
        let mut s: DeviceSliceMut<'a, u8> = ws.into();
        let p = s.as_raw_mut();
        if !p.is_null() && !(p as usize).is_multiple_of(BYTE_ALIGNMENT) {
            return Err(Error::invalid(
                "workspace pointer",
                format!("must be {BYTE_ALIGNMENT}-byte aligned"),
                format!("{p:p}"),
            ));
        }
        self.workspace = p;
        self.workspace_bytes = s.byte_len();
        self.pack = None;
        Ok(self)
    }

    /// The variant pack for the current pointers (cached).
    fn pack(&mut self, plan: &Plan) -> Result<crate::sys::cudnn::cudnnBackendDescriptor_t> {
        // Hot path: the same pointers as last time, compared without allocating.
        if let Some(p) = &self.pack {
            let current = self
                .slots
                .iter()
                .map(|s| s.ptr)
                .chain(plan.scalars.iter().map(|(_, b)| b.as_ptr() as *mut c_void))
                .chain(std::iter::once(self.workspace));
            if current.eq(self.packed_ptrs.iter().copied()) {
                return Ok(p.as_raw());
            }
        }
        let mut uids: Vec<i64> = Vec::with_capacity(self.slots.len() + plan.scalars.len());
        let mut ptrs: Vec<*mut c_void> = Vec::with_capacity(uids.capacity());
        for s in &self.slots {
            uids.push(s.uid);
            ptrs.push(s.ptr);
        }
        for (uid, bytes) in &plan.scalars {
            uids.push(*uid);
            ptrs.push(bytes.as_ptr() as *mut c_void);
        }
        let workspace = self.workspace;
        let bound = ptrs.len();
        for &(uid, offset) in &plan.scratch {
            // The workspace holds at least `plan.workspace` bytes (checked by
            // `check_bindings`), and every offset lies below that.
            uids.push(uid);
            ptrs.push(workspace.cast::<u8>().wrapping_add(offset).cast::<c_void>());
        }
        let mut pack = Descriptor::<kind::VariantPack>::new()?;
        pack.set(attr::VARIANT_PACK_UNIQUE_IDS, &uids)?;
        // SAFETY: the pointers are borrowed by `self` ('a), point into the
        // plan's scalars, or into the workspace at the plan's scratch offsets;
        // they are used only by `execute` while all of them live.
        unsafe {
            pack.set_device_ptrs(attr::VARIANT_PACK_DATA_POINTERS, &ptrs)?;
            pack.set_device_ptrs(attr::VARIANT_PACK_WORKSPACE, &[workspace])?;
        }
        pack.finalize()?;
        // The cache key: the bound and scalar pointers and the workspace (the
        // scratch pointers follow from the workspace).
        ptrs.truncate(bound);
        ptrs.push(workspace);
        self.packed_ptrs = ptrs;
        let raw = pack.as_raw();
        self.pack = Some(pack);
        Ok(raw)
    }
}

pub(crate) fn write_io(s: &mut String, io: &IoSignature) {
    s.push_str(&format!("tensors {}\n", io.tensors.len()));
    for t in &io.tensors {
        s.push_str(&format!(
            "{} {} {} {} {} {}\n",
            t.uid,
            if t.is_output { "out" } else { "in" },
            t.spec.dtype(),
            join(t.spec.dims()),
            join(t.spec.strides()),
            t.name.len()
        ));
        s.push_str(&t.name);
        s.push('\n');
    }
    s.push_str(&format!("scalars {}\n", io.scalars.len()));
    for (uid, dtype, v) in &io.scalars {
        s.push_str(&format!("{uid} {dtype} {}\n", v.to_bits()));
    }
    // Written only when there are some, so files without scratch read as before.
    if !io.scratch.is_empty() {
        s.push_str(&format!("scratch {}\n", io.scratch.len()));
        for (uid, bytes) in &io.scratch {
            s.push_str(&format!("{uid} {bytes}\n"));
        }
    }
}

fn join(v: &[i64]) -> String {
    v.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

pub(crate) fn read_io(r: &mut Reader<'_>) -> Result<IoSignature> {
    let n = r.field("tensors")?;
    let n: usize = r.parse("tensors", &n)?;
    if n > 4096 {
        return Err(r.bad("at most 4096 tensors"));
    }
    let mut tensors = Vec::with_capacity(n);
    for _ in 0..n {
        let line = r.line()?;
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() != 6 {
            return Err(r.bad("a tensor line: uid in|out dtype dims strides name_len"));
        }
        let uid: i64 = r.parse("uid", f[0])?;
        let is_output = match f[1] {
            "in" => false,
            "out" => true,
            _ => return Err(r.bad("in or out")),
        };
        let dtype = DType::from_name(f[2]).ok_or_else(|| r.bad("a dtype name"))?;
        let dims = r.list(f[3])?;
        let strides = r.list(f[4])?;
        let name_len: usize = r.parse("name length", f[5])?;
        let name = r.line()?.to_string();
        if name.len() != name_len {
            return Err(r.bad("the tensor name of the stated length"));
        }
        let spec = TensorSpec::new(dtype, &dims, &strides)
            .map_err(|e| r.bad(&format!("a valid tensor ({e})")))?;
        tensors.push(IoTensor {
            name,
            uid,
            spec,
            is_output,
        });
    }
    let n = r.field("scalars")?;
    let n: usize = r.parse("scalars", &n)?;
    if n > 4096 {
        return Err(r.bad("at most 4096 scalars"));
    }
    let mut scalars = Vec::with_capacity(n);
    for _ in 0..n {
        let line = r.line()?;
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() != 3 {
            return Err(r.bad("a scalar line: uid dtype bits"));
        }
        let uid: i64 = r.parse("uid", f[0])?;
        let dtype = DType::from_name(f[1]).ok_or_else(|| r.bad("a dtype name"))?;
        let bits: u64 = r.parse("bits", f[2])?;
        scalars.push((uid, dtype, f64::from_bits(bits)));
    }
    let mut scratch = Vec::new();
    if r.next_starts_with("scratch ") {
        let n = r.field("scratch")?;
        let n: usize = r.parse("scratch", &n)?;
        if n > 64 {
            return Err(r.bad("at most 64 scratch tensors"));
        }
        for _ in 0..n {
            let line = r.line()?;
            let f: Vec<&str> = line.split(' ').collect();
            if f.len() != 2 {
                return Err(r.bad("a scratch line: uid bytes"));
            }
            let uid: i64 = r.parse("uid", f[0])?;
            let bytes: usize = r.parse("bytes", f[1])?;
            if bytes > 1 << 40 {
                return Err(r.bad("a scratch size of at most 1 TiB"));
            }
            scratch.push((uid, bytes));
        }
    }
    Ok(IoSignature {
        tensors,
        scalars,
        scratch,
    })
}

/// A line reader for the crate's text formats, with errors that say where.
pub(crate) struct Reader<'t> {
    rest: &'t str,
    line_no: usize,
    what: &'static str,
}

impl<'t> Reader<'t> {
    pub(crate) fn new(text: &'t str) -> Self {
        Self::named(text, "plan file")
    }
    pub(crate) fn named(text: &'t str, what: &'static str) -> Self {
        Self {
            rest: text,
            line_no: 0,
            what,
        }
    }
    pub(crate) fn bad(&self, expected: &str) -> Error {
        Error::invalid(
            self.what,
            format!("line {}: expected {expected}", self.line_no),
            "malformed",
        )
    }
    /// Whether the next line starts with `prefix` (nothing consumed).
    pub(crate) fn next_starts_with(&self, prefix: &str) -> bool {
        self.rest.starts_with(prefix)
    }

    pub(crate) fn at_end(&self) -> bool {
        self.rest.is_empty()
    }
    pub(crate) fn line(&mut self) -> Result<&'t str> {
        if self.rest.is_empty() {
            self.line_no += 1;
            return Err(self.bad("more lines (the file is truncated)"));
        }
        self.line_no += 1;
        let (l, rest) = self.rest.split_once('\n').unwrap_or((self.rest, ""));
        self.rest = rest;
        Ok(l)
    }
    pub(crate) fn expect_line(&mut self, want: &str) -> Result<()> {
        let l = self.line()?;
        if l != want {
            return Err(self.bad(&format!("`{want}`")));
        }
        Ok(())
    }
    pub(crate) fn field(&mut self, key: &str) -> Result<String> {
        let l = self.line()?;
        match l.split_once(' ') {
            Some((k, v)) if k == key => Ok(v.to_string()),
            _ => Err(self.bad(&format!("`{key} <value>`"))),
        }
    }
    pub(crate) fn parse<T: std::str::FromStr>(&self, what: &str, s: &str) -> Result<T> {
        s.parse()
            .map_err(|_| self.bad(&format!("a number for {what}")))
    }
    pub(crate) fn list(&self, s: &str) -> Result<Vec<i64>> {
        s.split(',')
            .map(|x| self.parse("a list entry", x))
            .collect()
    }
    /// `key <len>\n<len bytes>\n`.
    pub(crate) fn blob(&mut self, key: &str) -> Result<String> {
        let n = self.field(key)?;
        let n: usize = self.parse(key, &n)?;
        if n > self.rest.len() || !self.rest.is_char_boundary(n) {
            return Err(self.bad(&format!("{n} bytes of {key} (the file is truncated)")));
        }
        let (blob, rest) = self.rest.split_at(n);
        let rest = rest
            .strip_prefix('\n')
            .ok_or_else(|| self.bad("a newline after the blob"))?;
        self.line_no += blob.matches('\n').count() + 1;
        self.rest = rest;
        Ok(blob.to_string())
    }
}

// Plans and the cache are shared between threads (the descriptor behind a lock).
const _: () = {
    fn shared<T: Send + Sync>() {}
    let _ = shared::<Plan>;
    let _ = shared::<super::PlanCache>;
};
