//! The graph builder: tensors and ops in, shapes inferred and checked in Rust,
//! a finalized cuDNN operation graph out.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::backend::{AnyOperation, Descriptor, attr, kind};
use super::ops::{Built, OpNode};
use super::tensor::{BYTE_ALIGNMENT, DType, MAX_DIMS, TensorSpec, fmt_dims};
use crate::error::{Error, Result};

// The finalized graph and what plans bind live in `opgraph.rs`; they are
// named here too, where plans and the cache look for them.
pub use super::opgraph::{IoSignature, IoTensor, OpGraph};

static NEXT_GRAPH: AtomicU64 = AtomicU64::new(1);

/// A tensor of a [`Graph`] (a cheap handle; it belongs to the graph that made it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tensor {
    graph: u64,
    index: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Role {
    Input,
    Virtual,
    Output,
    /// A by-value scalar (passed through the variant pack from host memory).
    Scalar(f64),
    /// A real tensor no caller binds: the plan keeps it in its workspace
    /// (the composite attention backward's row sums and dQ accumulator).
    Scratch,
}

/// One op of a graph and the compute type it was added with.
#[derive(Clone, Debug)]
pub(crate) struct OpEntry {
    pub(crate) op: Arc<dyn OpNode>,
    /// The graph's compute type when the op was added.
    pub(crate) compute: DType,
}

#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub(crate) name: String,
    pub(crate) spec: TensorSpec,
    pub(crate) uid: i64,
    pub(crate) role: Role,
    /// The node holding this tensor's ragged offsets (packed THD batches).
    pub(crate) ragged: Option<usize>,
}

/// A graph under construction: add inputs, ops and outputs, then
/// [`build`](Graph::build) it into a finalized [`OpGraph`].
///
/// Every op's output starts as a virtual intermediate of the graph's compute
/// type (f32 unless set); [`output`](Graph::output) makes one a real output
/// with a given type. Each op keeps the compute type that was current when it
/// was added (see [`set_compute_type`](Graph::set_compute_type)). UIDs are
/// assigned by the builder (1, 2, ...).
///
/// ```no_run
/// use cudnn::graph::{ConvParams, DType, Graph, TensorSpec};
/// let mut g = Graph::new();
/// let x = g.input("x", TensorSpec::nhwc(DType::F16, &[8, 64, 56, 56])?)?;
/// let w = g.input("w", TensorSpec::nhwc(DType::F16, &[64, 64, 3, 3])?)?;
/// let b = g.input("bias", TensorSpec::nhwc(DType::F16, &[1, 64, 1, 1])?)?;
/// let y = g.conv_fprop(x, w, &ConvParams::new_2d([1, 1], [1, 1], [1, 1]))?;
/// let y = g.bias(y, b)?;
/// let y = g.relu(y)?;
/// g.output(y, DType::F16)?;
/// assert_eq!(g.dims(y)?, &[8, 64, 56, 56]);
/// # Ok::<(), cudnn::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Graph {
    id: u64,
    pub(crate) nodes: Vec<Node>,
    pub(crate) ops: Vec<OpEntry>,
    compute: DType,
    /// The inputs whose values the device uses as addresses or bounds (a
    /// paged KV cache's page tables, an attention's sequence lengths), by
    /// node index: plans bind them only through the call their guard names
    /// (never plain [`Bindings::input`](super::Bindings::input)).
    pub(crate) guarded: Vec<(usize, super::guard::InputGuard)>,
}

impl Default for Graph {
    fn default() -> Self {
        Self::new()
    }
}

impl Graph {
    /// An empty graph computing in f32.
    pub fn new() -> Self {
        Self {
            id: NEXT_GRAPH.fetch_add(1, Ordering::Relaxed),
            nodes: Vec::new(),
            ops: Vec::new(),
            compute: DType::F32,
            guarded: Vec::new(),
        }
    }

    /// The compute (and intermediate) type for ops added after this call;
    /// ops added before keep theirs (each op records its own and is built
    /// with it).
    ///
    /// Honoured by the ops whose cuDNN descriptor has a compute type:
    /// convolutions (fprop, dgrad, wgrad), matmul, every pointwise op (its
    /// math precision) and reduction; for those it is part of
    /// [`signature`](Self::signature). Norm ops (layer, RMS, batch norm and
    /// their backwards) and attention (`sdpa_forward`, `sdpa_backward`) have
    /// no such attribute in cuDNN: the compute type only sets the element
    /// type of their virtual results (a norm's `y` / `dx` until
    /// [`output`](Self::output) gives it another), which the signature
    /// records with the tensors; attention computes in f32 whatever is set.
    pub fn set_compute_type(&mut self, dtype: DType) -> &mut Self {
        self.compute = dtype;
        self
    }

    /// The compute type the next op will be added with.
    pub fn compute_type(&self) -> DType {
        self.compute
    }

    pub(crate) fn node(&self, t: Tensor) -> Result<&Node> {
        if t.graph != self.id {
            return Err(Error::invalid(
                "tensor",
                "belongs to another graph",
                format!("{t:?}"),
            ));
        }
        self.nodes
            .get(t.index)
            .ok_or_else(|| Error::invalid("tensor", "unknown", format!("{t:?}")))
    }

    pub(crate) fn index(&self, t: Tensor) -> Result<usize> {
        self.node(t).map(|_| t.index)
    }

    pub(crate) fn handle(&self, index: usize) -> Tensor {
        Tensor {
            graph: self.id,
            index,
        }
    }

    fn push(&mut self, name: String, spec: TensorSpec, role: Role) -> Result<Tensor> {
        if self.nodes.iter().any(|n| n.name == name) {
            return Err(Error::invalid(
                "tensor name",
                "must be unique in the graph",
                name,
            ));
        }
        let uid = i64::try_from(self.nodes.len() + 1)
            .map_err(|_| Error::invalid("graph", "too many tensors", self.nodes.len()))?;
        self.nodes.push(Node {
            name,
            spec,
            uid,
            role,
            ragged: None,
        });
        Ok(self.handle(self.nodes.len() - 1))
    }

    /// A graph input (bound to a device buffer at execution).
    ///
    /// # Errors
    /// The name is taken.
    pub fn input(&mut self, name: &str, spec: TensorSpec) -> Result<Tensor> {
        self.push(name.to_string(), spec, Role::Input)
    }

    /// A by-value scalar of `rank` dims (all 1), passed from host memory at
    /// execution (no buffer to bind).
    ///
    /// # Errors
    /// Rank out of 1..=8.
    pub fn scalar(&mut self, value: f64, dtype: DType, rank: usize) -> Result<Tensor> {
        if rank == 0 || rank > MAX_DIMS {
            return Err(Error::invalid(
                "scalar rank",
                format!("must be 1 to {MAX_DIMS}"),
                rank,
            ));
        }
        let dims = vec![1i64; rank];
        let spec = TensorSpec::new(dtype, &dims, &dims)?;
        let name = format!("scalar{}", self.nodes.len() + 1);
        self.push(name, spec, Role::Scalar(value))
    }

    pub(crate) fn intermediate(&mut self, op: &str, spec: TensorSpec) -> Result<Tensor> {
        let name = format!("{op}#{}.out{}", self.ops.len(), self.nodes.len() + 1);
        self.push(name, spec, Role::Virtual)
    }

    /// A real tensor of the plan's own (in its workspace, nothing to bind).
    pub(crate) fn scratch(&mut self, op: &str, spec: TensorSpec) -> Result<Tensor> {
        // Its size is what the plan reserves: it must be representable.
        spec.span_bytes()?;
        let name = format!("{op}#{}.scratch{}", self.ops.len(), self.nodes.len() + 1);
        self.push(name, spec, Role::Scratch)
    }

    /// Add an op with the current compute type.
    pub(crate) fn push_op(&mut self, op: impl OpNode + 'static) {
        self.ops.push(OpEntry {
            op: Arc::new(op),
            compute: self.compute,
        });
    }

    /// Make an op's result a graph output of type `dtype` (bound to a device
    /// buffer at execution); it keeps its layout.
    ///
    /// # Errors
    /// `t` is an input or scalar, or already an output.
    pub fn output(&mut self, t: Tensor, dtype: DType) -> Result<()> {
        let i = self.index(t)?;
        let n = &mut self.nodes[i];
        match n.role {
            Role::Virtual => {
                n.role = Role::Output;
                n.spec = n.spec.with_dtype(dtype);
                Ok(())
            }
            _ => Err(Error::invalid(
                format!("output `{}`", n.name),
                "must be an op's result that is not yet an output",
                format!("{:?}", n.role),
            )),
        }
    }

    /// Rename a tensor (names are how plans bind buffers).
    ///
    /// # Errors
    /// The name is taken.
    pub fn rename(&mut self, t: Tensor, name: &str) -> Result<()> {
        let i = self.index(t)?;
        if self
            .nodes
            .iter()
            .enumerate()
            .any(|(j, n)| j != i && n.name == name)
        {
            return Err(Error::invalid(
                "tensor name",
                "must be unique in the graph",
                name,
            ));
        }
        self.nodes[i].name = name.to_string();
        Ok(())
    }

    /// A tensor's dims.
    ///
    /// # Errors
    /// Not a tensor of this graph.
    pub fn dims(&self, t: Tensor) -> Result<&[i64]> {
        Ok(self.node(t)?.spec.dims())
    }

    /// A tensor's spec (type and layout).
    ///
    /// # Errors
    /// Not a tensor of this graph.
    pub fn spec(&self, t: Tensor) -> Result<&TensorSpec> {
        Ok(&self.node(t)?.spec)
    }

    /// A tensor's name.
    ///
    /// # Errors
    /// Not a tensor of this graph.
    pub fn name(&self, t: Tensor) -> Result<&str> {
        Ok(&self.node(t)?.name)
    }

    pub(crate) fn label(&self) -> String {
        format!("op #{}", self.ops.len())
    }

    // ---- build ----

    /// A canonical text of the graph (tensors with types and layouts, ops
    /// with params and, where they honour one, compute types), the cache
    /// key's graph part. Names are included, since plans bind buffers by
    /// name, each prefixed with its length in bytes (`5:x;y z`), so a name
    /// holding spaces or `;` cannot make two different graphs read alike.
    pub fn signature(&self) -> String {
        use std::fmt::Write as _;
        // One buffer, written in place (no text per node or dim): the
        // signature is made on every build, so its cost is part of
        // planning's. Writing to a String cannot fail.
        fn dims(s: &mut String, d: &[i64]) {
            s.push('[');
            for (k, x) in d.iter().enumerate() {
                if k > 0 {
                    s.push_str(", ");
                }
                let _ = write!(s, "{x}");
            }
            s.push(']');
        }
        let mut s = String::with_capacity(64 * (self.nodes.len() + self.ops.len()));
        for n in &self.nodes {
            let _ = write!(s, "t{} {}:{} ", n.uid, n.name.len(), n.name);
            match &n.role {
                Role::Input => s.push_str("in"),
                Role::Virtual => s.push_str("virt"),
                Role::Output => s.push_str("out"),
                Role::Scalar(v) => {
                    let _ = write!(s, "scalar={v:e}");
                }
                Role::Scratch => s.push_str("scratch"),
            }
            let _ = write!(s, " {} ", n.spec.dtype());
            dims(&mut s, n.spec.dims());
            s.push(' ');
            dims(&mut s, n.spec.strides());
            s.push(';');
        }
        for e in &self.ops {
            let _ = write!(s, "{} ", e.op.name());
            for (k, (r, i, _)) in e.op.tensors().iter().enumerate() {
                if k > 0 {
                    s.push(',');
                }
                let _ = write!(s, "{r}=t{}", i + 1);
            }
            if e.op.honours_compute_type() {
                let _ = write!(s, " compute={}", e.compute);
            }
            let _ = write!(s, " {};", e.op.signature());
        }
        s
    }

    fn check_structure(&self) -> Result<()> {
        if self.ops.is_empty() {
            return Err(Error::invalid("graph", "has no operations", 0));
        }
        let mut produced = vec![0usize; self.nodes.len()];
        let mut consumed = vec![0usize; self.nodes.len()];
        for e in &self.ops {
            for (_, i, is_out) in e.op.tensors() {
                if is_out {
                    produced[i] += 1;
                } else {
                    consumed[i] += 1;
                }
            }
        }
        // Ragged offsets are read through the tensors they address.
        for n in &self.nodes {
            if let Some(c) = n.ragged.and_then(|j| consumed.get_mut(j)) {
                *c += 1;
            }
        }
        for (i, n) in self.nodes.iter().enumerate() {
            match n.role {
                Role::Virtual if consumed[i] == 0 => {
                    return Err(Error::invalid(
                        format!("tensor `{}`", n.name),
                        "is computed but neither used nor marked an output (call Graph::output)",
                        fmt_dims(n.spec.dims()),
                    ));
                }
                Role::Input if consumed[i] == 0 => {
                    return Err(Error::invalid(
                        format!("input `{}`", n.name),
                        "is not used by any op",
                        fmt_dims(n.spec.dims()),
                    ));
                }
                _ => {}
            }
            if produced[i] > 1 {
                return Err(Error::invalid(
                    format!("tensor `{}`", n.name),
                    "is written by more than one op",
                    produced[i],
                ));
            }
        }
        // Connected: union of ops through shared tensors.
        let mut group: Vec<usize> = (0..self.ops.len()).collect();
        fn find(g: &mut [usize], mut i: usize) -> usize {
            while g[i] != i {
                g[i] = g[g[i]];
                i = g[i];
            }
            i
        }
        let mut owner: Vec<Option<usize>> = vec![None; self.nodes.len()];
        for (k, e) in self.ops.iter().enumerate() {
            for (_, i, _) in e.op.tensors() {
                if matches!(self.nodes[i].role, Role::Scalar(_)) {
                    continue;
                }
                match owner[i] {
                    None => owner[i] = Some(k),
                    Some(o) => {
                        let (a, b) = (find(&mut group, o), find(&mut group, k));
                        group[a] = b;
                    }
                }
            }
        }
        let root = find(&mut group, 0);
        for k in 1..self.ops.len() {
            if find(&mut group, k) != root {
                return Err(Error::invalid(
                    "graph",
                    "must be connected (cuDNN offers no engine for disjoint ops); build separate graphs",
                    format!(
                        "op #{k} ({}) shares no tensor with op #0",
                        self.ops[k].op.name()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Check the graph and finalize it in cuDNN: every tensor, every op, then
    /// the operation graph. Needs cuDNN >= 9.8; no device.
    ///
    /// # Errors
    /// Structure errors (unused intermediates, disconnected ops) before any
    /// call; cuDNN's refusal of an op, with the op, its tensors and their
    /// shapes, and cuDNN's reason.
    pub fn build(&self) -> Result<OpGraph> {
        super::require_graph_support()?;
        super::driver::ready()?;
        self.check_structure()?;
        // Tensors with ragged offsets after the rest: their descriptors
        // name their offsets' (which have none themselves).
        let mut slots: Vec<Option<Descriptor<kind::Tensor>>> =
            (0..self.nodes.len()).map(|_| None).collect();
        for pass_ragged in [false, true] {
            for (i, n) in self.nodes.iter().enumerate() {
                if n.ragged.is_some() != pass_ragged {
                    continue;
                }
                let offsets = match n.ragged {
                    Some(j) => Some(slots.get(j).and_then(Option::as_ref).ok_or_else(|| {
                        Error::invalid(
                            format!("tensor `{}`", n.name),
                            "must have ragged offsets that have none themselves",
                            j,
                        )
                    })?),
                    None => None,
                };
                let d = tensor_descriptor(n, offsets)
                    .map_err(|e| e.with_context(format!("tensor `{}`", n.name)))?;
                if let Some(s) = slots.get_mut(i) {
                    *s = Some(d);
                }
            }
        }
        let tensors: Vec<Descriptor<kind::Tensor>> = slots
            .into_iter()
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| Error::invalid("graph", "has a tensor left without a descriptor", ""))?;
        let mut built = Built::default();
        for (k, entry) in self.ops.iter().enumerate() {
            let op = &entry.op;
            let describe = || {
                let ts: Vec<String> = op
                    .tensors()
                    .iter()
                    .map(|(r, i, _)| {
                        let n = &self.nodes[*i];
                        format!(
                            "{r} `{}` {} {}",
                            n.name,
                            n.spec.dtype(),
                            fmt_dims(n.spec.dims())
                        )
                    })
                    .collect();
                format!(
                    "op #{k} {}: {} (shapes inferred by cudnn-rs)",
                    op.name(),
                    ts.join(", ")
                )
            };
            op.build(&tensors, entry.compute, &mut built)
                .map_err(|e| e.with_context(describe()))?;
        }
        let mut graph = Descriptor::<kind::OperationGraph>::new()?;
        let ops: Vec<&dyn AnyOperation> = built
            .ops
            .iter()
            .map(|o| o.as_ref() as &dyn AnyOperation)
            .collect();
        graph.set_operations(attr::OPERATIONGRAPH_OPS, &ops)?;
        graph.finalize().map_err(|e| {
            e.with_context(format!("the operation graph of {} ops", self.ops.len()))
        })?;
        let io = self.io_signature();
        // TF32 is a question only where f32 data feeds a matmul or convolution
        // (tensor-core notes on norm, attention or pointwise engines are not TF32).
        let tf32_data = self.ops.iter().any(|e| {
            e.op.tf32_inputs()
                .iter()
                .any(|&i| self.nodes[i].spec.dtype() == DType::F32)
        });
        let mut timing_fills = Vec::new();
        for e in &self.ops {
            for (i, v) in e.op.timing_fills() {
                timing_fills.push((self.nodes[i].uid, v));
            }
        }
        let targets = self.ops.iter().map(|e| Arc::clone(&e.op)).collect();
        let guarded = self
            .guarded
            .iter()
            .filter_map(|&(i, g)| self.nodes.get(i).map(|n| (n.uid, g)))
            .collect();
        Ok(OpGraph {
            guarded,
            tf32_data,
            desc: graph,
            _tensors: tensors,
            _built: built,
            io: Arc::new(io),
            signature: self.signature(),
            timing_fills,
            ops: targets,
        })
    }

    /// What plans of this graph bind: inputs and outputs in UID order, the
    /// by-value scalars, and the plan's own scratch tensors.
    pub(crate) fn io_signature(&self) -> IoSignature {
        let mut tensors = Vec::new();
        let mut scalars = Vec::new();
        let mut scratch = Vec::new();
        for n in &self.nodes {
            match n.role {
                Role::Input | Role::Output => tensors.push(IoTensor {
                    name: n.name.clone(),
                    uid: n.uid,
                    spec: n.spec.clone(),
                    is_output: n.role == Role::Output,
                }),
                Role::Scalar(v) => scalars.push((n.uid, n.spec.dtype(), v)),
                // `Graph::scratch` checked that the size is representable.
                Role::Scratch => scratch.push((n.uid, n.spec.span_bytes().unwrap_or(usize::MAX))),
                Role::Virtual => {}
            }
        }
        let ragged_offsets = self
            .nodes
            .iter()
            .filter_map(|n| n.ragged)
            .filter_map(|j| self.nodes.get(j).map(|o| o.uid))
            .collect::<std::collections::BTreeSet<i64>>()
            .into_iter()
            .collect();
        IoSignature {
            tensors,
            scalars,
            scratch,
            ragged_offsets,
        }
    }
}

fn tensor_descriptor(
    n: &Node,
    ragged_offsets: Option<&Descriptor<kind::Tensor>>,
) -> Result<Descriptor<kind::Tensor>> {
    let mut d = Descriptor::<kind::Tensor>::new()?;
    if let Some(o) = ragged_offsets {
        d.set_descriptors(attr::TENSOR_RAGGED_OFFSET_DESC, &[o])?;
    }
    d.set(attr::TENSOR_DATA_TYPE, &[n.spec.dtype().raw()])?;
    d.set(attr::TENSOR_DIMENSIONS, n.spec.dims())?;
    d.set(attr::TENSOR_STRIDES, n.spec.strides())?;
    d.set(attr::TENSOR_UNIQUE_ID, &[n.uid])?;
    d.set(attr::TENSOR_BYTE_ALIGNMENT, &[BYTE_ALIGNMENT as i64])?;
    match n.role {
        Role::Virtual => d.set(attr::TENSOR_IS_VIRTUAL, &[true])?,
        Role::Scalar(_) => d.set(attr::TENSOR_IS_BY_VALUE, &[true])?,
        _ => {}
    }
    d.finalize()?;
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{ConvParams, SdpaConfig, SdpaImpl};

    /// The signature as it was written before it was made in one buffer:
    /// cache keys on disk depend on every byte of it.
    fn reference_signature(g: &Graph) -> String {
        let mut s = String::new();
        for n in &g.nodes {
            let role = match &n.role {
                Role::Input => "in".to_string(),
                Role::Virtual => "virt".to_string(),
                Role::Output => "out".to_string(),
                Role::Scalar(v) => format!("scalar={v:e}"),
                Role::Scratch => "scratch".to_string(),
            };
            s.push_str(&format!(
                "t{} {}:{} {} {} {} {};",
                n.uid,
                n.name.len(),
                n.name,
                role,
                n.spec.dtype(),
                fmt_dims(n.spec.dims()),
                fmt_dims(n.spec.strides())
            ));
        }
        for e in &g.ops {
            let ts: Vec<String> =
                e.op.tensors()
                    .iter()
                    .map(|(r, i, _)| format!("{r}=t{}", i + 1))
                    .collect();
            let compute = if e.op.honours_compute_type() {
                format!(" compute={}", e.compute)
            } else {
                String::new()
            };
            s.push_str(&format!(
                "{} {}{} {};",
                e.op.name(),
                ts.join(","),
                compute,
                e.op.signature()
            ));
        }
        s
    }

    #[test]
    fn unit_signature_of_a_small_graph_by_hand() {
        let mut g = Graph::new();
        let x = g
            .input("x", TensorSpec::new(DType::F16, &[2, 3], &[3, 1]).unwrap())
            .unwrap();
        let y = g.relu(x).unwrap();
        g.output(y, DType::F16).unwrap();
        let s = g.signature();
        assert!(s.starts_with("t1 1:x in f16 [2, 3] [3, 1];t2 "), "{s}");
        assert!(s.contains(" out f16 [2, 3] [3, 1];"), "{s}");
        assert!(s.contains("=t1,") || s.contains("=t1 "), "{s}");
        assert!(s.ends_with(';'), "{s}");
        assert_eq!(s, reference_signature(&g));
    }

    proptest::proptest! {
        /// The one-buffer signature is the old text, byte for byte, over
        /// graphs with scalars, compute types, convolutions and attention:
        /// the composite forward (`which` 2, 3) and the composite backward
        /// (`which` 4, 5), whose scratch tensors are the only `scratch`
        /// roles a graph can hold. Each graph must build: a refused op
        /// would leave only its inputs to sign.
        #[test]
        fn unit_property_signature_unchanged(
            n in 1i64..5, c in 1i64..9, scale in -4.0f64..4.0, f32c in proptest::bool::ANY,
            which in 0u8..6,
        ) {
            let mut g = Graph::new();
            if f32c {
                g.set_compute_type(DType::F32);
            } else {
                g.set_compute_type(DType::F16);
            }
            match which {
                0 => {
                    let x = g.input("x", TensorSpec::nhwc(DType::F16, &[n, c, 4, 4]).unwrap()).unwrap();
                    let y = g.scale(x, scale).unwrap();
                    g.output(y, DType::F16).unwrap();
                }
                1 => {
                    let x = g.input("x", TensorSpec::nhwc(DType::F16, &[n, c, 8, 8]).unwrap()).unwrap();
                    let w = g.input("w", TensorSpec::nhwc(DType::F16, &[c, c, 3, 3]).unwrap()).unwrap();
                    let y = g.conv_fprop(x, w, &ConvParams::new_2d([1, 1], [1, 1], [1, 1])).unwrap();
                    let y = g.relu(y).unwrap();
                    g.output(y, DType::F16).unwrap();
                }
                _ => {
                    // seq 128: the composite backward takes it on every
                    // cuDNN that has one (shorter keys need a padding mask
                    // up to 9.15.0).
                    let cfg = SdpaConfig::new(n, 2, 128, 64, DType::F16)
                        .implementation(SdpaImpl::Composite)
                        .causal(which % 2 == 1);
                    // Attention is built only for a loaded cuDNN that has
                    // it: without one these cases are not compared, said on
                    // stderr (a failure under CUDNN_RS_REQUIRE_LIBS=1).
                    if let Err(e) = cfg.resolve(which >= 4) {
                        proptest::prop_assert!(
                            std::env::var_os("CUDNN_RS_REQUIRE_LIBS").is_none_or(|v| v != "1"),
                            "CUDNN_RS_REQUIRE_LIBS=1 but: {}", e
                        );
                        static SAID: std::sync::Once = std::sync::Once::new();
                        SAID.call_once(|| {
                            use std::io::Write as _;
                            let _ = writeln!(
                                std::io::stderr(),
                                "SKIPPED (attention cases of unit_property_signature_unchanged): {e}"
                            );
                        });
                        return Ok(());
                    }
                    let q = g.input("q", cfg.q_spec().unwrap()).unwrap();
                    let k = g.input("k", cfg.k_spec().unwrap()).unwrap();
                    let v = g.input("v", cfg.v_spec().unwrap()).unwrap();
                    if which < 4 {
                        let f = g.sdpa_forward(q, k, v, &cfg);
                        proptest::prop_assert!(f.is_ok(), "sdpa_forward: {:?}", f.err());
                    } else {
                        let o = g.input("o", cfg.o_spec().unwrap()).unwrap();
                        let d_o = g.input("do", cfg.o_spec().unwrap()).unwrap();
                        let st = g.input("stats", cfg.stats_spec().unwrap()).unwrap();
                        let b = g.sdpa_backward(q, k, v, o, d_o, st, &cfg);
                        proptest::prop_assert!(b.is_ok(), "sdpa_backward: {:?}", b.err());
                        proptest::prop_assert!(
                            g.nodes.iter().any(|n| n.role == Role::Scratch),
                            "the composite backward made no scratch tensor"
                        );
                    }
                }
            }
            proptest::prop_assert_eq!(g.signature(), reference_signature(&g));
        }
    }
}
