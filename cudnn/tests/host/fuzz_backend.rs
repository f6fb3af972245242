//! Fuzz target (host tier, in CI): random set / get / finalize sequences
//! through the typed backend API (`cudnn::graph::backend`) over every
//! descriptor kind and every attribute the crate names, with values at and
//! beyond the edges, each case in a child process (many per child; a child
//! that dies is restarted after the case that killed it, which is reported).
//!
//! Asserts: no crash, no panic, bounded time, every error typed (the crate's
//! refusal, or cuDNN's own status), and that enough sequences reach cuDNN.
//! `CUDNN_RS_FUZZ_NO_RULES=1` is not a mode: the rules live in the crate.
use crate::support;
use crate::support::fuzz_child;
use crate::support::graph_plans;

use std::any::{Any, TypeId};

use cudnn::Error;
use cudnn::graph::backend::{Attr, Descriptor, Kind, attr, kind, value};
use cudnn::graph::*;
use cudnn::sys::cudnn as sys;
use fuzz_child::{Outcome, run_cases};
use support::*;

const WORKER: &str = "CUDNN_RS_FUZZ_BACKEND_WORKER";
/// Cases per CI run.
const CASES: usize = 6000;

/// A small deterministic generator (xorshift), seeded per case.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn i64(&mut self) -> i64 {
        const EDGES: [i64; 10] = [0, 1, -1, 2, 3, 4, 16, 2147483648, i64::MAX, i64::MIN];
        if self.below(3) == 0 {
            self.next() as i64
        } else {
            EDGES[self.below(EDGES.len())]
        }
    }
    fn small(&mut self) -> u32 {
        if self.below(4) == 0 {
            self.next() as u32
        } else {
            self.below(40) as u32
        }
    }
    fn f64(&mut self) -> f64 {
        const EDGES: [f64; 8] = [0.0, 1.0, -1.0, 0.5, 1e300, f64::NAN, f64::INFINITY, -0.0];
        EDGES[self.below(EDGES.len())]
    }
}

/// Finalized descriptors of several kinds, for attributes that hold descriptors.
struct Pool {
    items: Vec<Box<dyn Any>>,
    /// A valid plan JSON (NUL-terminated), for the JSON attributes.
    plan_json: Vec<u8>,
}

impl Pool {
    fn get<K: Kind>(&self) -> Option<&Descriptor<K>> {
        self.items
            .iter()
            .find_map(|b| b.downcast_ref::<Descriptor<K>>())
    }
}

fn tensor(uid: i64, dims: &[i64]) -> cudnn::Result<Descriptor<kind::Tensor>> {
    let mut t = Descriptor::<kind::Tensor>::new()?;
    t.set(
        attr::TENSOR_DATA_TYPE,
        &[sys::cudnnDataType_t::CUDNN_DATA_FLOAT],
    )?;
    t.set(attr::TENSOR_DIMENSIONS, dims)?;
    let mut strides = vec![1i64; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * dims[i + 1];
    }
    t.set(attr::TENSOR_STRIDES, &strides)?;
    t.set(attr::TENSOR_UNIQUE_ID, &[uid])?;
    t.set(attr::TENSOR_BYTE_ALIGNMENT, &[16])?;
    t.finalize()?;
    Ok(t)
}

fn pool() -> cudnn::Result<Pool> {
    let mut items: Vec<Box<dyn Any>> = Vec::new();
    let x = tensor(1, &[1, 8, 4, 4])?;
    let y = tensor(2, &[1, 8, 4, 4])?;
    let mut pw = Descriptor::<kind::Pointwise>::new()?;
    pw.set(
        attr::POINTWISE_MODE,
        &[sys::cudnnPointwiseMode_t::CUDNN_POINTWISE_RELU_FWD],
    )?;
    pw.set(
        attr::POINTWISE_MATH_PREC,
        &[sys::cudnnDataType_t::CUDNN_DATA_FLOAT],
    )?;
    pw.finalize()?;
    let mut op = Descriptor::<kind::PointwiseOp>::new()?;
    op.set_descriptors(attr::OPERATION_POINTWISE_PW_DESCRIPTOR, &[&pw])?;
    op.set_descriptors(attr::OPERATION_POINTWISE_XDESC, &[&x])?;
    op.set_descriptors(attr::OPERATION_POINTWISE_YDESC, &[&y])?;
    op.finalize()?;
    let mut props = Descriptor::<kind::DeviceProp>::new()?;
    let mut j = DeviceSpec::h200().to_json().into_bytes();
    j.push(0);
    props.set(attr::DEVICEPROP_JSON_REPRESENTATION, &j)?;
    props.finalize()?;
    let mut conv = Descriptor::<kind::Convolution>::new()?;
    conv.set(attr::CONVOLUTION_SPATIAL_DIMS, &[2])?;
    conv.set(
        attr::CONVOLUTION_COMP_TYPE,
        &[sys::cudnnDataType_t::CUDNN_DATA_FLOAT],
    )?;
    conv.set(
        attr::CONVOLUTION_CONV_MODE,
        &[sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION],
    )?;
    conv.set(attr::CONVOLUTION_DILATIONS, &[1, 1])?;
    conv.set(attr::CONVOLUTION_FILTER_STRIDES, &[1, 1])?;
    conv.set(attr::CONVOLUTION_PRE_PADDINGS, &[0, 0])?;
    conv.set(attr::CONVOLUTION_POST_PADDINGS, &[0, 0])?;
    conv.finalize()?;
    let mut mm = Descriptor::<kind::Matmul>::new()?;
    mm.set(
        attr::MATMUL_COMP_TYPE,
        &[sys::cudnnDataType_t::CUDNN_DATA_FLOAT],
    )?;
    mm.finalize()?;
    // An operation graph of the pointwise op, heuristics for it, an engine
    // config, its engine and knob choices.
    let mut g = Descriptor::<kind::OperationGraph>::new()?;
    g.set_operations(attr::OPERATIONGRAPH_OPS, &[&op])?;
    g.finalize()?;
    let mut h = Descriptor::<kind::EngineHeur>::new()?;
    h.set_descriptors(attr::ENGINEHEUR_OPERATION_GRAPH, &[&g])?;
    h.set(
        attr::ENGINEHEUR_MODE,
        &[sys::cudnnBackendHeurMode_t::CUDNN_HEUR_MODE_A],
    )?;
    h.set_descriptors(attr::ENGINEHEUR_DEVICEPROP, &[&props])?;
    h.finalize()?;
    // A valid plan JSON (a precompiled conv), through the graph API.
    let (conv_plan, _) = Plan::build(
        &graph_plans::conv_plain(2)?.build()?,
        &Target::preset("h200")?,
        &Policy::default(),
    )?;
    let mut plan_json = conv_plan.cudnn_json()?.into_bytes();
    plan_json.push(0);
    if let Some(cfg) = h
        .get_descriptors(attr::ENGINEHEUR_RESULTS, 1)?
        .into_iter()
        .next()
    {
        let mut plan = Descriptor::<kind::ExecutionPlan>::new()?;
        plan.set_descriptors(attr::EXECUTION_PLAN_ENGINE_CONFIG, &[&cfg])?;
        plan.set_descriptors(attr::EXECUTION_PLAN_DEVICEPROP, &[&props])?;
        let _ = plan.finalize();
        items.push(Box::new(plan));
        if let Some(e) = cfg
            .get_descriptors(attr::ENGINECFG_ENGINE, 1)?
            .into_iter()
            .next()
        {
            items.push(Box::new(e));
        }
        items.push(Box::new(cfg));
    }
    items.push(Box::new(h));
    items.push(Box::new(g));
    items.push(Box::new(op));
    items.push(Box::new(pw));
    items.push(Box::new(x));
    items.push(Box::new(y));
    items.push(Box::new(props));
    items.push(Box::new(conv));
    items.push(Box::new(mm));
    Ok(Pool { items, plan_json })
}

/// How to make random values of an attribute's type, and set and read them.
trait Gen: Sized {
    fn set<K: Kind>(
        d: &mut Descriptor<K>,
        a: Attr<K, Self>,
        r: &mut Rng,
        p: &Pool,
    ) -> cudnn::Result<()>;
    fn get<K: Kind>(d: &Descriptor<K>, a: Attr<K, Self>, r: &mut Rng) -> cudnn::Result<()>;
}

macro_rules! gen_values {
    ($($v:ident => |$r:ident| $make:expr;)*) => {$(
        impl Gen for value::$v {
            fn set<K: Kind>(d: &mut Descriptor<K>, a: Attr<K, Self>, $r: &mut Rng, _: &Pool) -> cudnn::Result<()> {
                let n = [0usize, 1, 1, 1, 2, 4, 8, 9][$r.below(8)];
                let vals: Vec<_> = (0..n).map(|_| $make).collect();
                d.set(a, &vals)
            }
            fn get<K: Kind>(d: &Descriptor<K>, a: Attr<K, Self>, r: &mut Rng) -> cudnn::Result<()> {
                let mut out = vec![<value::$v as cudnn::graph::backend::Value>::ZERO; r.below(10)];
                d.get(a, &mut out).map(|_| ())
            }
        }
    )*};
}

gen_values! {
    I64 => |r| r.i64();
    I32 => |r| r.i64() as i32;
    F32 => |r| r.f64() as f32;
    F64 => |r| r.f64();
    Bool => |r| r.below(2) == 1;
    DataType => |r| sys::cudnnDataType_t(r.small());
    ConvMode => |r| sys::cudnnConvolutionMode_t(r.small());
    PointwiseMode => |r| sys::cudnnPointwiseMode_t(r.small());
    NanPropagation => |r| sys::cudnnNanPropagation_t(r.small());
    ReduceOp => |r| sys::cudnnReduceTensorOp_t(r.small());
    HeurMode => |r| sys::cudnnBackendHeurMode_t(r.small());
    NumericalNote => |r| sys::cudnnBackendNumericalNote_t(r.small());
    BehaviorNote => |r| sys::cudnnBackendBehaviorNote_t(r.small());
    KnobType => |r| sys::cudnnBackendKnobType_t(r.small());
    NormMode => |r| sys::cudnnBackendNormMode_t(r.small());
    NormPhase => |r| sys::cudnnBackendNormFwdPhase_t(r.small());
    RngDistribution => |r| sys::cudnnRngDistribution_t(r.small());
}

impl Gen for value::Char {
    fn set<K: Kind>(
        d: &mut Descriptor<K>,
        a: Attr<K, Self>,
        r: &mut Rng,
        p: &Pool,
    ) -> cudnn::Result<()> {
        let mut bytes = if r.below(2) == 0 && !p.plan_json.is_empty() {
            // A valid plan JSON (its NUL dropped), sometimes with one byte changed.
            let mut b = p.plan_json.clone();
            b.retain(|&c| c != 0);
            if r.below(2) == 0 {
                let at = r.below(b.len());
                b[at] = b"0{}\":,-9"[r.below(8)];
            }
            b
        } else {
            (0..r.below(12))
                .map(|_| b"{}[]\"a:1,"[r.below(9)])
                .collect()
        };
        if r.below(4) != 0 {
            bytes.push(0);
        }
        d.set(a, &bytes)
    }
    fn get<K: Kind>(d: &Descriptor<K>, a: Attr<K, Self>, r: &mut Rng) -> cudnn::Result<()> {
        let mut out = vec![0u8; r.below(64)];
        d.get(a, &mut out).map(|_| ())
    }
}

impl<K2: Kind> Gen for value::Desc<K2> {
    fn set<K: Kind>(
        d: &mut Descriptor<K>,
        a: Attr<K, Self>,
        r: &mut Rng,
        p: &Pool,
    ) -> cudnn::Result<()> {
        match (r.below(4), p.get::<K2>()) {
            (0, _) | (_, None) => {
                let fresh = Descriptor::<K2>::new()?;
                d.set_descriptors(a, &[&fresh])
            }
            (1, Some(x)) => d.set_descriptors(a, &[x, x]),
            (_, Some(x)) => d.set_descriptors(a, &[x]),
        }
    }
    fn get<K: Kind>(d: &Descriptor<K>, a: Attr<K, Self>, r: &mut Rng) -> cudnn::Result<()> {
        d.get_descriptors(a, r.below(3)).map(|_| ())
    }
}

impl Gen for value::AnyOp {
    fn set<K: Kind>(
        d: &mut Descriptor<K>,
        a: Attr<K, Self>,
        r: &mut Rng,
        p: &Pool,
    ) -> cudnn::Result<()> {
        let fresh = Descriptor::<kind::PointwiseOp>::new()?;
        match (r.below(3), p.get::<kind::PointwiseOp>()) {
            (0, _) | (_, None) => d.set_operations(a, &[&fresh]),
            (1, _) => d.set_operations(a, &[]),
            (_, Some(op)) => d.set_operations(a, &[op]),
        }
    }
    fn get<K: Kind>(_: &Descriptor<K>, _: Attr<K, Self>, _: &mut Rng) -> cudnn::Result<()> {
        Ok(())
    }
}

type SetFn = fn(&mut dyn Any, &mut Rng, &Pool) -> Option<cudnn::Result<()>>;
type GetFn = fn(&dyn Any, &mut Rng) -> Option<cudnn::Result<()>>;

struct Entry {
    name: &'static str,
    kind: TypeId,
    set: SetFn,
    get: GetFn,
}

fn kind_of<K: Kind, V>(_: Attr<K, V>) -> TypeId {
    TypeId::of::<Descriptor<K>>()
}
fn set_any<K: Kind, V: Gen>(
    d: &mut dyn Any,
    a: Attr<K, V>,
    r: &mut Rng,
    p: &Pool,
) -> Option<cudnn::Result<()>> {
    Some(V::set(d.downcast_mut::<Descriptor<K>>()?, a, r, p))
}
fn get_any<K: Kind, V: Gen>(d: &dyn Any, a: Attr<K, V>, r: &mut Rng) -> Option<cudnn::Result<()>> {
    Some(V::get(d.downcast_ref::<Descriptor<K>>()?, a, r))
}

macro_rules! entries {
    ($($a:ident),* $(,)?) => {
        vec![$(Entry {
            name: stringify!($a),
            kind: kind_of(attr::$a),
            set: |d, r, p| set_any(d, attr::$a, r, p),
            get: |d, r| get_any(d, attr::$a, r),
        }),*]
    };
}

/// Every attribute the crate names (device pointers and handles excepted:
/// the first is an `unsafe` API, the second needs a GPU).
fn all_entries() -> Vec<Entry> {
    entries![
        TENSOR_DATA_TYPE,
        TENSOR_DIMENSIONS,
        TENSOR_STRIDES,
        TENSOR_UNIQUE_ID,
        TENSOR_BYTE_ALIGNMENT,
        TENSOR_IS_VIRTUAL,
        TENSOR_IS_BY_VALUE,
        CONVOLUTION_COMP_TYPE,
        CONVOLUTION_CONV_MODE,
        CONVOLUTION_DILATIONS,
        CONVOLUTION_FILTER_STRIDES,
        CONVOLUTION_POST_PADDINGS,
        CONVOLUTION_PRE_PADDINGS,
        CONVOLUTION_SPATIAL_DIMS,
        OPERATION_CONVOLUTION_FORWARD_ALPHA,
        OPERATION_CONVOLUTION_FORWARD_BETA,
        OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
        OPERATION_CONVOLUTION_FORWARD_W,
        OPERATION_CONVOLUTION_FORWARD_X,
        OPERATION_CONVOLUTION_FORWARD_Y,
        OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
        OPERATION_CONVOLUTION_BWD_DATA_BETA,
        OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
        OPERATION_CONVOLUTION_BWD_DATA_W,
        OPERATION_CONVOLUTION_BWD_DATA_DX,
        OPERATION_CONVOLUTION_BWD_DATA_DY,
        OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
        OPERATION_CONVOLUTION_BWD_FILTER_BETA,
        OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
        OPERATION_CONVOLUTION_BWD_FILTER_DW,
        OPERATION_CONVOLUTION_BWD_FILTER_X,
        OPERATION_CONVOLUTION_BWD_FILTER_DY,
        POINTWISE_MODE,
        POINTWISE_MATH_PREC,
        POINTWISE_NAN_PROPAGATION,
        POINTWISE_RELU_LOWER_CLIP,
        POINTWISE_RELU_UPPER_CLIP,
        POINTWISE_RELU_LOWER_CLIP_SLOPE,
        POINTWISE_ELU_ALPHA,
        POINTWISE_SOFTPLUS_BETA,
        POINTWISE_SWISH_BETA,
        POINTWISE_AXIS,
        OPERATION_POINTWISE_PW_DESCRIPTOR,
        OPERATION_POINTWISE_XDESC,
        OPERATION_POINTWISE_BDESC,
        OPERATION_POINTWISE_TDESC,
        OPERATION_POINTWISE_YDESC,
        OPERATION_POINTWISE_DXDESC,
        OPERATION_POINTWISE_DYDESC,
        OPERATION_POINTWISE_ALPHA1,
        OPERATION_POINTWISE_ALPHA2,
        MATMUL_COMP_TYPE,
        OPERATION_MATMUL_ADESC,
        OPERATION_MATMUL_BDESC,
        OPERATION_MATMUL_CDESC,
        OPERATION_MATMUL_DESC,
        REDUCTION_OPERATOR,
        REDUCTION_COMP_TYPE,
        OPERATION_REDUCTION_XDESC,
        OPERATION_REDUCTION_YDESC,
        OPERATION_REDUCTION_DESC,
        OPERATION_NORM_FWD_MODE,
        OPERATION_NORM_FWD_PHASE,
        OPERATION_NORM_FWD_XDESC,
        OPERATION_NORM_FWD_MEAN_DESC,
        OPERATION_NORM_FWD_INV_VARIANCE_DESC,
        OPERATION_NORM_FWD_SCALE_DESC,
        OPERATION_NORM_FWD_BIAS_DESC,
        OPERATION_NORM_FWD_EPSILON_DESC,
        OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC,
        OPERATION_NORM_FWD_INPUT_RUNNING_MEAN_DESC,
        OPERATION_NORM_FWD_INPUT_RUNNING_VAR_DESC,
        OPERATION_NORM_FWD_OUTPUT_RUNNING_MEAN_DESC,
        OPERATION_NORM_FWD_OUTPUT_RUNNING_VAR_DESC,
        OPERATION_NORM_FWD_YDESC,
        OPERATION_NORM_BWD_MODE,
        OPERATION_NORM_BWD_XDESC,
        OPERATION_NORM_BWD_MEAN_DESC,
        OPERATION_NORM_BWD_INV_VARIANCE_DESC,
        OPERATION_NORM_BWD_DYDESC,
        OPERATION_NORM_BWD_SCALE_DESC,
        OPERATION_NORM_BWD_EPSILON_DESC,
        OPERATION_NORM_BWD_DSCALE_DESC,
        OPERATION_NORM_BWD_DBIAS_DESC,
        OPERATION_NORM_BWD_DXDESC,
        OPERATIONGRAPH_OPS,
        OPERATIONGRAPH_ENGINE_GLOBAL_COUNT,
        ENGINEHEUR_MODE,
        ENGINEHEUR_OPERATION_GRAPH,
        ENGINEHEUR_RESULTS,
        ENGINEHEUR_DEVICEPROP,
        ENGINE_OPERATION_GRAPH,
        ENGINE_GLOBAL_INDEX,
        ENGINE_NUMERICAL_NOTE,
        ENGINE_BEHAVIOR_NOTE,
        ENGINE_DEVICEPROP,
        ENGINECFG_ENGINE,
        ENGINECFG_KNOB_CHOICES,
        ENGINECFG_WORKSPACE_SIZE,
        KNOB_CHOICE_KNOB_TYPE,
        KNOB_CHOICE_KNOB_VALUE,
        EXECUTION_PLAN_ENGINE_CONFIG,
        EXECUTION_PLAN_WORKSPACE_SIZE,
        EXECUTION_PLAN_JSON_REPRESENTATION,
        EXECUTION_PLAN_DEVICEPROP,
        VARIANT_PACK_UNIQUE_IDS,
        DEVICEPROP_DEVICE_ID,
        DEVICEPROP_JSON_REPRESENTATION,
        OPERATION_SDPA_FWD_QDESC,
        OPERATION_SDPA_FWD_KDESC,
        OPERATION_SDPA_FWD_VDESC,
        OPERATION_SDPA_FWD_ODESC,
        OPERATION_SDPA_FWD_STATSDESC,
        OPERATION_SDPA_FWD_SCALEDESC,
        OPERATION_SDPA_FWD_SEQ_LEN_QDESC,
        OPERATION_SDPA_FWD_SEQ_LEN_KVDESC,
        OPERATION_SDPA_FWD_SUBGRAPH,
        OPERATION_SDPA_FWD_SUBGRAPH_INPUT_UID,
        OPERATION_SDPA_FWD_SUBGRAPH_OUTPUT_UID,
        OPERATION_SDPA_FWD_DROPOUT_SEED_DESC,
        OPERATION_SDPA_FWD_DROPOUT_OFFSET_DESC,
        OPERATION_SDPA_FWD_DROPOUT_PROBABILITY,
        OPERATION_SDPA_BWD_QDESC,
        OPERATION_SDPA_BWD_KDESC,
        OPERATION_SDPA_BWD_VDESC,
        OPERATION_SDPA_BWD_ODESC,
        OPERATION_SDPA_BWD_STATSDESC,
        OPERATION_SDPA_BWD_SCALEDESC,
        OPERATION_SDPA_BWD_SEQ_LEN_QDESC,
        OPERATION_SDPA_BWD_SEQ_LEN_KVDESC,
        OPERATION_SDPA_BWD_DQDESC,
        OPERATION_SDPA_BWD_DKDESC,
        OPERATION_SDPA_BWD_DVDESC,
        OPERATION_SDPA_BWD_DODDESC,
        OPERATION_SDPA_BWD_SUBGRAPH,
        OPERATION_SDPA_BWD_SUBGRAPH_INPUT_UID,
        OPERATION_SDPA_BWD_SUBGRAPH_OUTPUT_UID,
        OPERATION_SDPA_BWD_DROPOUT_SEED_DESC,
        OPERATION_SDPA_BWD_DROPOUT_OFFSET_DESC,
        OPERATION_SDPA_BWD_DROPOUT_PROBABILITY,
        OPERATION_DIAGONAL_BAND_MASK_XDESC,
        OPERATION_DIAGONAL_BAND_MASK_YDESC,
        OPERATION_DIAGONAL_BAND_MASK_BDESC,
        OPERATION_DIAGONAL_BAND_MASK_SEQ_LEN_QDESC,
        OPERATION_DIAGONAL_BAND_MASK_SEQ_LEN_KVDESC,
        OPERATION_DIAGONAL_BAND_MASK_LEFT_BOUND_DESC,
        OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC,
        OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC,
        OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC,
        MATMUL_PADDING_VALUE,
        RNG_DISTRIBUTION,
        RNG_BERNOULLI_DIST_PROBABILITY,
        OPERATION_RNG_YDESC,
        OPERATION_RNG_SEED,
        OPERATION_RNG_OFFSET_DESC,
        OPERATION_RESHAPE_XDESC,
        OPERATION_RESHAPE_YDESC,
        OPERATION_RNG_DESC
    ]
}

type NewFn = fn() -> cudnn::Result<Box<dyn Any>>;
type FinFn = fn(&mut dyn Any) -> Option<cudnn::Result<()>>;

struct KindOps {
    name: &'static str,
    id: TypeId,
    new: NewFn,
    finalize: FinFn,
}

macro_rules! kinds {
    ($($k:ident),* $(,)?) => {
        vec![$(KindOps {
            name: stringify!($k),
            id: TypeId::of::<Descriptor<kind::$k>>(),
            new: || Ok(Box::new(Descriptor::<kind::$k>::new()?)),
            finalize: |d| d.downcast_mut::<Descriptor<kind::$k>>().map(|d| d.finalize()),
        }),*]
    };
}

fn all_kinds() -> Vec<KindOps> {
    kinds![
        Tensor,
        Convolution,
        Pointwise,
        Matmul,
        Reduction,
        ConvForwardOp,
        ConvDataOp,
        ConvFilterOp,
        PointwiseOp,
        MatmulOp,
        ReductionOp,
        NormForwardOp,
        NormBackwardOp,
        SdpaForwardOp,
        SdpaBackwardOp,
        DiagonalBandMaskOp,
        Rng,
        RngOp,
        ReshapeOp,
        OperationGraph,
        EngineHeur,
        Engine,
        EngineConfig,
        KnobChoice,
        ExecutionPlan,
        VariantPack,
        DeviceProp
    ]
}

/// One case: a kind, then 1 to 10 random steps.
fn case(i: usize, kinds: &[KindOps], entries: &[Entry], pool: &Pool, trace: bool) -> Outcome {
    let mut r = Rng(0x9E37_79B9_7F4A_7C15 ^ (i as u64).wrapping_mul(0x2545_F491_4F6C_DD1D) | 1);
    let k = &kinds[i % kinds.len()];
    let mut d = match (k.new)() {
        Ok(d) => d,
        // A kind the loaded cuDNN lacks: its own status.
        Err(Error::Cudnn { .. }) => return Outcome::RefusedByLibrary,
        Err(e) => return Outcome::Untyped(format!("creating a {}: {e}", k.name)),
    };
    let mine: Vec<&Entry> = entries.iter().filter(|e| e.kind == k.id).collect();
    let (mut reached, mut finalized) = (false, false);
    let steps = 1 + r.below(10);
    for _ in 0..steps {
        let step = r.below(10);
        let res = if step < 5 && !mine.is_empty() {
            let e = mine[r.below(mine.len())];
            if trace {
                eprintln!("    set {}", e.name);
            }
            (e.set)(d.as_mut(), &mut r, pool).map(|x| (e.name, x))
        } else if step < 8 && !mine.is_empty() {
            let e = mine[r.below(mine.len())];
            if trace {
                eprintln!("    get {}", e.name);
            }
            (e.get)(d.as_ref(), &mut r).map(|x| (e.name, x))
        } else {
            if trace {
                eprintln!("    finalize");
            }
            (k.finalize)(d.as_mut()).map(|x| ("finalize", x))
        };
        if trace {
            eprintln!(
                "    {} step {step}: {:?}",
                k.name,
                res.as_ref()
                    .map(|(w, r)| (w, r.as_ref().err().map(|e| e.to_string())))
            );
        }
        match res {
            None => return Outcome::Untyped(format!("{}: attribute of another kind", k.name)),
            Some((what, Ok(()))) => {
                reached = true;
                finalized |= what == "finalize";
            }
            Some((_, Err(Error::Cudnn { .. }))) => reached = true,
            Some((
                _,
                Err(
                    Error::InvalidArgument { .. }
                    | Error::Mismatch { .. }
                    | Error::Unsupported { .. },
                ),
            )) => {}
            Some((what, Err(e))) => return Outcome::Untyped(format!("{} {what}: {e:?}", k.name)),
        }
    }
    match (finalized, reached) {
        (true, _) => Outcome::Accepted,
        (false, true) => Outcome::RefusedByLibrary,
        (false, false) => Outcome::Typed(String::new()),
    }
}

fn describe(i: usize) -> String {
    let kinds = all_kinds();
    format!(
        "case {i}: a {} descriptor, seed {i}",
        kinds[i % kinds.len()].name
    )
}

pub fn main() {
    if let Ok(i) = std::env::var("CUDNN_RS_FUZZ_TRACE") {
        // Replay one case, each step on stderr (to see what a crash did).
        let (Ok(i), Ok(pool)) = (i.parse::<usize>(), pool()) else {
            std::process::exit(2);
        };
        let o = case(i, &all_kinds(), &all_entries(), &pool, true);
        eprintln!("{o:?}");
        std::process::exit(0);
    }
    if let Ok(args) = std::env::var(WORKER) {
        let a: Vec<&str> = args.split('\u{1}').collect();
        let code = (|| -> Result<(), String> {
            let [_, start, end] = a.as_slice() else {
                return Err("worker arguments".into());
            };
            let pool = pool().map_err(|e| e.to_string())?;
            let (kinds, entries) = (all_kinds(), all_entries());
            let (start, end): (usize, usize) = (
                start.parse().map_err(|_| "start")?,
                end.parse().map_err(|_| "end")?,
            );
            fuzz_child::worker(start, end, |i| case(i, &kinds, &entries, &pool, false));
            Ok(())
        })();
        std::process::exit(i32::from(code.is_err()));
    }
    let t = vec![host9("fuzz_backend_set_get_finalize", || {
        let (kinds, entries) = (all_kinds(), all_entries());
        for k in &kinds {
            let n = entries.iter().filter(|e| e.kind == k.id).count();
            ensure!(
                n > 0 || k.name == "VariantPack",
                "no attribute of kind {}",
                k.name
            );
        }
        let json_len = pool()?.plan_json.len();
        eprintln!(
            "  {} kinds, {} attributes, {CASES} sequences; a {json_len}-byte plan JSON for the JSON attributes",
            kinds.len(),
            entries.len()
        );
        ensure!(
            json_len > 0,
            "no valid plan JSON for the fuzz to start from"
        );
        let report = run_cases(WORKER, "-", CASES, 2, describe)?;
        Ok(report.print_and_check(CASES / 10, std::time::Duration::from_secs(20))?)
    })];
    run(t)
}

use graph_plans::host9;
