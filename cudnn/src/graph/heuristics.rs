//! Heuristics: which engine configurations cuDNN offers for a graph on a
//! target, filtered by a [`Policy`], each with its engine's index and notes
//! (its knobs and workspace read on demand).

use std::cell::OnceCell;

use super::backend::{Descriptor, attr, kind};
use super::graph::OpGraph;
use super::target::Target;
use crate::error::{Error, Result};
use crate::sys::cudnn as sys;

/// cuDNN's heuristic modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HeurMode {
    /// `CUDNN_HEUR_MODE_A`: the default, fast heuristic.
    A,
    /// `CUDNN_HEUR_MODE_B`: slower, sometimes better.
    B,
    /// `CUDNN_HEUR_MODE_INSTANT`.
    Instant,
    /// `CUDNN_HEUR_MODE_FALLBACK`: engines that support most graphs.
    Fallback,
}

impl HeurMode {
    fn raw(self) -> sys::cudnnBackendHeurMode_t {
        use sys::cudnnBackendHeurMode_t as H;
        match self {
            HeurMode::A => H::CUDNN_HEUR_MODE_A,
            HeurMode::B => H::CUDNN_HEUR_MODE_B,
            HeurMode::Instant => H::CUDNN_HEUR_MODE_INSTANT,
            HeurMode::Fallback => H::CUDNN_HEUR_MODE_FALLBACK,
        }
    }
}

/// Numerical properties an engine declares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NumericalNote {
    /// Uses tensor cores (for f32 data: TF32).
    TensorCore,
    /// Converts inputs to a narrower type.
    DownConvertInputs,
    /// Reduces in a narrower type than the compute type.
    ReducedPrecisionReduction,
    /// FFT-based.
    Fft,
    /// Results may differ run to run.
    Nondeterministic,
    /// Winograd-based.
    Winograd,
    /// Propagates NaN strictly.
    StrictNanProp,
    /// A note this crate does not know (the raw value).
    Other(u32),
}

impl NumericalNote {
    fn from_raw(n: sys::cudnnBackendNumericalNote_t) -> Self {
        use sys::cudnnBackendNumericalNote_t as N;
        match n {
            N::CUDNN_NUMERICAL_NOTE_TENSOR_CORE => Self::TensorCore,
            N::CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS => Self::DownConvertInputs,
            N::CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION => Self::ReducedPrecisionReduction,
            N::CUDNN_NUMERICAL_NOTE_FFT => Self::Fft,
            N::CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC => Self::Nondeterministic,
            N::CUDNN_NUMERICAL_NOTE_WINOGRAD => Self::Winograd,
            N::CUDNN_NUMERICAL_NOTE_STRICT_NAN_PROP => Self::StrictNanProp,
            other => Self::Other(other.0),
        }
    }
}

/// Behaviour an engine declares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BehaviorNote {
    /// Compiles its kernel at run time (plans take ~0.3-1 s to finalize; the plan JSON carries the code).
    RuntimeCompilation,
    /// Supports cuDNN's native CUDA-graph API.
    SupportsCudaGraphNativeApi,
    /// A note this crate does not know (the raw value).
    Other(u32),
}

impl BehaviorNote {
    fn from_raw(n: sys::cudnnBackendBehaviorNote_t) -> Self {
        use sys::cudnnBackendBehaviorNote_t as B;
        match n {
            B::CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION => Self::RuntimeCompilation,
            B::CUDNN_BEHAVIOR_NOTE_SUPPORTS_CUDA_GRAPH_NATIVE_API => {
                Self::SupportsCudaGraphNativeApi
            }
            other => Self::Other(other.0),
        }
    }
}

/// Which engine configurations are acceptable, and how to look for them.
///
/// Made from [`Policy::default`] and the chainable `with_*` methods, one
/// per field (the struct is `#[non_exhaustive]`: fields will be added; they
/// stay readable and assignable):
///
/// ```
/// use cudnn::graph::{HeurMode, Policy};
/// let p = Policy::default()
///     .with_modes(vec![HeurMode::A])
///     .with_max_workspace(Some(64 << 20))
///     .with_deterministic_only(true);
/// assert_eq!(p.max_workspace, Some(64 << 20));
/// assert!(!p.allow_tf32, "TF32 stays off unless asked for");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Policy {
    /// Heuristic modes to query, in order; their lists are concatenated
    /// (duplicates dropped).
    pub modes: Vec<HeurMode>,
    /// The largest workspace accepted, in bytes.
    pub max_workspace: Option<u64>,
    /// Only deterministic engines.
    pub deterministic_only: bool,
    /// Accept TF32 (tensor cores on f32 data). Off by default: f32 means f32.
    pub allow_tf32: bool,
    /// Accept engines that down-convert inputs or reduce in reduced precision.
    pub allow_reduced_precision: bool,
    /// Accept engines that compile kernels at run time.
    pub allow_runtime_compilation: bool,
    /// How many candidates to finalize at most before giving up.
    pub max_attempts: usize,
    /// Only engines that declare
    /// [`BehaviorNote::SupportsCudaGraphNativeApi`], for plans meant for
    /// [`Plan::cuda_graph`](super::Plan::cuda_graph) (the frontend's
    /// `select_behavior_notes`). Off by default.
    pub require_native_cuda_graph: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            modes: vec![HeurMode::A, HeurMode::Fallback],
            max_workspace: None,
            deterministic_only: false,
            allow_tf32: false,
            allow_reduced_precision: false,
            allow_runtime_compilation: true,
            max_attempts: 64,
            require_native_cuda_graph: false,
        }
    }
}

impl Policy {
    /// With [`modes`](Self::modes).
    pub fn with_modes(mut self, modes: Vec<HeurMode>) -> Self {
        self.modes = modes;
        self
    }

    /// With [`max_workspace`](Self::max_workspace) (`None`: no limit).
    pub fn with_max_workspace(mut self, bytes: Option<u64>) -> Self {
        self.max_workspace = bytes;
        self
    }

    /// With [`deterministic_only`](Self::deterministic_only).
    pub fn with_deterministic_only(mut self, on: bool) -> Self {
        self.deterministic_only = on;
        self
    }

    /// With [`allow_tf32`](Self::allow_tf32).
    pub fn with_allow_tf32(mut self, on: bool) -> Self {
        self.allow_tf32 = on;
        self
    }

    /// With [`allow_reduced_precision`](Self::allow_reduced_precision).
    pub fn with_allow_reduced_precision(mut self, on: bool) -> Self {
        self.allow_reduced_precision = on;
        self
    }

    /// With [`allow_runtime_compilation`](Self::allow_runtime_compilation).
    pub fn with_allow_runtime_compilation(mut self, on: bool) -> Self {
        self.allow_runtime_compilation = on;
        self
    }

    /// With [`max_attempts`](Self::max_attempts).
    pub fn with_max_attempts(mut self, n: usize) -> Self {
        self.max_attempts = n;
        self
    }

    /// With [`require_native_cuda_graph`](Self::require_native_cuda_graph).
    pub fn with_require_native_cuda_graph(mut self, on: bool) -> Self {
        self.require_native_cuda_graph = on;
        self
    }

    /// A compact text for cache keys.
    pub fn signature(&self) -> String {
        let s = format!(
            "modes={:?};ws={:?};det={};tf32={};rp={};rtc={}",
            self.modes,
            self.max_workspace,
            self.deterministic_only,
            self.allow_tf32,
            self.allow_reduced_precision,
            self.allow_runtime_compilation
        );
        // Appended only when set, so existing cache keys stay the same.
        if self.require_native_cuda_graph {
            s + ";cg=1"
        } else {
            s
        }
    }
}

/// A knob and its value in an engine configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Knob {
    /// `cudnnBackendKnobType_t` value.
    pub kind: u32,
    /// Its chosen value.
    pub value: i64,
}

/// One engine configuration cuDNN offered.
///
/// The engine's index and notes are read when heuristics return (the
/// policy judges by them, as NVIDIA's frontend reads them); the knob choices
/// and the workspace are read from cuDNN on first use
/// ([`knobs`](Self::knobs), [`workspace`](Self::workspace)) and kept, so a
/// plan built from the first accepted configuration never pays for reading
/// every other one's.
/// A candidate borrows the [`OpGraph`] it was offered for: its
/// configuration refers to that graph inside cuDNN, and the lazy reads
/// query it (the graph must outlive them, as the frontend keeps its graph
/// beside each engine).
#[derive(Debug)]
pub struct Candidate<'g> {
    /// The engine's global index.
    pub engine: i64,
    /// Which heuristic mode offered it.
    pub mode: HeurMode,
    /// Numerical notes.
    pub numerical_notes: Vec<NumericalNote>,
    /// Behaviour notes.
    pub behavior_notes: Vec<BehaviorNote>,
    /// Why the policy rejects it (`None`: accepted).
    pub rejected: Option<String>,
    knobs: OnceCell<Vec<Knob>>,
    workspace: OnceCell<u64>,
    pub(crate) config: Descriptor<kind::EngineConfig>,
    pub(crate) _graph: std::marker::PhantomData<&'g OpGraph>,
}

impl Candidate<'_> {
    /// A one-line description: index, notes, knobs, workspace (the knobs
    /// and workspace as far as they were read: `?` where not yet, so
    /// [`BuildReport::candidates`](super::BuildReport::candidates) shows `?`
    /// for configurations the build never needed to inspect).
    pub fn describe(&self) -> String {
        let ws = self
            .workspace
            .get()
            .map_or_else(|| "?".to_string(), u64::to_string);
        let knobs = self
            .knobs
            .get()
            .map_or_else(|| "?".to_string(), |k| k.len().to_string());
        format!(
            "engine {} ({:?}) ws {ws} B notes {:?} {:?} knobs {knobs}{}",
            self.engine,
            self.mode,
            self.numerical_notes,
            self.behavior_notes,
            self.rejected
                .as_ref()
                .map(|r| format!(" [rejected: {r}]"))
                .unwrap_or_default()
        )
    }

    /// The knob choices of this configuration (read from cuDNN on first
    /// use, then kept).
    ///
    /// # Errors
    /// cuDNN's refusal to hand them out.
    pub fn knobs(&self) -> Result<&[Knob]> {
        if let Some(k) = self.knobs.get() {
            return Ok(k);
        }
        let k = read_knobs(&self.config)?;
        Ok(self.knobs.get_or_init(|| k))
    }

    /// The workspace this configuration needs, in bytes (read from cuDNN on
    /// first use, then kept).
    ///
    /// # Errors
    /// cuDNN's refusal, or a negative size.
    pub fn workspace(&self) -> Result<u64> {
        if let Some(&w) = self.workspace.get() {
            return Ok(w);
        }
        let raw = self.config.get_one(attr::ENGINECFG_WORKSPACE_SIZE)?;
        let w = u64::try_from(raw).map_err(|_| {
            Error::invalid(
                "CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE",
                "cuDNN returned a negative size",
                raw,
            )
        })?;
        Ok(*self.workspace.get_or_init(|| w))
    }

    /// The engine's index and notes (what a policy judges by).
    fn read(config: Descriptor<kind::EngineConfig>, mode: HeurMode) -> Result<Self> {
        let mut engines = config.get_descriptors(attr::ENGINECFG_ENGINE, 1)?;
        let engine = engines.pop().ok_or_else(|| {
            Error::invalid("CUDNN_ATTR_ENGINECFG_ENGINE", "cuDNN returned no engine", 0)
        })?;
        let index = engine.get_one(attr::ENGINE_GLOBAL_INDEX)?;
        let mut notes = [sys::cudnnBackendNumericalNote_t(0); NOTES];
        let n = engine.get(attr::ENGINE_NUMERICAL_NOTE, &mut notes)?;
        let numerical_notes = notes[..n.min(NOTES)]
            .iter()
            .map(|&n| NumericalNote::from_raw(n))
            .collect();
        let mut notes = [sys::cudnnBackendBehaviorNote_t(0); NOTES];
        let n = engine.get(attr::ENGINE_BEHAVIOR_NOTE, &mut notes)?;
        let behavior_notes = notes[..n.min(NOTES)]
            .iter()
            .map(|&n| BehaviorNote::from_raw(n))
            .collect();
        Ok(Self {
            engine: index,
            mode,
            numerical_notes,
            behavior_notes,
            rejected: None,
            knobs: OnceCell::new(),
            workspace: OnceCell::new(),
            config,
            _graph: std::marker::PhantomData,
        })
    }

    /// Whether `self` and `other` are one configuration (same engine, same
    /// knob choices; the knobs are read only when the engines agree).
    fn same_config(&self, other: &Candidate<'_>) -> Result<bool> {
        Ok(self.engine == other.engine && self.knobs()? == other.knobs()?)
    }

    /// Why `policy` rejects this configuration. The workspace is read only
    /// when the policy limits it.
    fn judge(&self, policy: &Policy, has_f32: bool) -> Result<Option<String>> {
        if let Some(max) = policy.max_workspace {
            let ws = self.workspace()?;
            if ws > max {
                return Ok(Some(format!("workspace {ws} B over the limit {max} B")));
            }
        }
        Ok(self.judge_notes(policy, has_f32))
    }

    fn judge_notes(&self, policy: &Policy, has_f32: bool) -> Option<String> {
        let n = &self.numerical_notes;
        if policy.deterministic_only && n.contains(&NumericalNote::Nondeterministic) {
            return Some("nondeterministic".to_string());
        }
        if has_f32 && !policy.allow_tf32 && n.contains(&NumericalNote::TensorCore) {
            return Some("TF32 (tensor cores on f32 data) not allowed".to_string());
        }
        if !policy.allow_reduced_precision {
            if n.contains(&NumericalNote::DownConvertInputs) {
                return Some("down-converts inputs".to_string());
            }
            if n.contains(&NumericalNote::ReducedPrecisionReduction) {
                return Some("reduced-precision reduction".to_string());
            }
        }
        if !policy.allow_runtime_compilation
            && self
                .behavior_notes
                .contains(&BehaviorNote::RuntimeCompilation)
        {
            return Some("compiles at run time".to_string());
        }
        if policy.require_native_cuda_graph
            && !self
                .behavior_notes
                .contains(&BehaviorNote::SupportsCudaGraphNativeApi)
        {
            return Some("no native CUDA-graph support".to_string());
        }
        None
    }
}

/// Ask cuDNN for engine configurations of `graph` on `target`, in the
/// policy's mode order, judged by the policy (rejected ones are kept, with
/// the reason, so callers can see them).
///
/// # Errors
/// No mode given; an op the target cannot run ([`OpGraph::check_target`]);
/// cuDNN's refusal.
pub fn candidates<'g>(
    graph: &'g OpGraph,
    target: &Target,
    policy: &Policy,
) -> Result<Vec<Candidate<'g>>> {
    if policy.modes.is_empty() {
        return Err(Error::invalid(
            "policy.modes",
            "must name at least one heuristic mode",
            "[]",
        ));
    }
    super::driver::ready()?;
    // Limits the crate knows per architecture (cuDNN's heuristics would only
    // come back empty).
    graph.check_target(target)?;
    let props = target.properties().descriptor()?;
    let has_f32 = graph.tf32_data;
    let mut out: Vec<Candidate<'_>> = Vec::new();
    for &mode in &policy.modes {
        let mut h = Descriptor::<kind::EngineHeur>::new()?;
        h.set_descriptors(attr::ENGINEHEUR_OPERATION_GRAPH, &[&graph.desc])?;
        h.set(attr::ENGINEHEUR_MODE, &[mode.raw()])?;
        h.set_descriptors(attr::ENGINEHEUR_DEVICEPROP, &[&*props])?;
        h.finalize().map_err(|e| {
            e.with_context(format!(
                "heuristics mode {mode:?} for {}",
                target.fingerprint()
            ))
        })?;
        // cuDNN reports how many results it has when asked with no room.
        let count = h.count(attr::ENGINEHEUR_RESULTS)?.min(1024);
        // Where this mode's list starts: a mode lists each configuration
        // once, so a duplicate can only be in an earlier mode's list.
        let earlier = out.len();
        for cfg in h.get_descriptors(attr::ENGINEHEUR_RESULTS, count)? {
            // A configuration cuDNN cannot describe is skipped, as before.
            let Ok(mut c) = Candidate::read(cfg, mode) else {
                continue;
            };
            let mut duplicate = false;
            for o in out.get(..earlier).unwrap_or_default() {
                match o.same_config(&c) {
                    Ok(false) => {}
                    Ok(true) => {
                        duplicate = true;
                        break;
                    }
                    // A read failed: only a candidate whose own knobs
                    // cannot be read is dropped (as before, when every
                    // candidate was read up front); an earlier one's
                    // failure says nothing about this one.
                    Err(_) => {
                        if c.knobs().is_err() {
                            duplicate = true;
                            break;
                        }
                    }
                }
            }
            if duplicate {
                continue;
            }
            c.rejected = match c.judge(policy, has_f32) {
                Ok(r) => r,
                Err(_) => continue,
            };
            out.push(c);
        }
    }
    Ok(out)
}

/// Notes an engine declares, at most (cuDNN has 7 numerical and 2 behaviour
/// notes today; unknown ones are kept as `Other`).
const NOTES: usize = 16;

/// The knob choices of an engine configuration.
fn read_knobs(config: &Descriptor<kind::EngineConfig>) -> Result<Vec<Knob>> {
    // cuDNN answers a count query on knob choices with 0: ask with room for
    // every knob type there is.
    let max_knobs = sys::cudnnBackendKnobType_t::CUDNN_KNOB_TYPE_COUNTS.0 as usize;
    let mut knobs = Vec::new();
    for k in config.get_descriptors(attr::ENGINECFG_KNOB_CHOICES, max_knobs)? {
        let kind = k.get_one(attr::KNOB_CHOICE_KNOB_TYPE)?;
        let value = k.get_one(attr::KNOB_CHOICE_KNOB_VALUE)?;
        knobs.push(Knob {
            kind: kind.0,
            value,
        });
    }
    Ok(knobs)
}
