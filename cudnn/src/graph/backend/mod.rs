//! Owning backend descriptors with typed attributes: the only `unsafe` of the
//! graph module.
//!
//! Each descriptor kind is a marker type ([`kind`]); a [`Descriptor<K>`] owns
//! one backend descriptor of kind `K`. Attributes are constants of type
//! [`Attr<K, V>`] ([`attr`]): the kind they belong to and the value type are
//! part of the type, so setting a tensor attribute on a convolution, passing
//! an `f32` where cuDNN wants `INT64`, or handing a pointwise descriptor where a
//! tensor is expected does not compile. What the types cannot express is
//! checked before the call: setting after finalize, finalizing twice, reading
//! before finalize, and descriptors handed over that are not finalized.
//! That closes the inputs that crash the process instead of returning an
//! error (a descriptor of the wrong kind, unfinalized descriptors).
//!
//! ```no_run
//! use cudnn::graph::backend::{attr, kind, Descriptor};
//! use cudnn::sys::cudnn::cudnnDataType_t;
//! let mut t = Descriptor::<kind::Tensor>::new()?;
//! t.set(attr::TENSOR_DATA_TYPE, &[cudnnDataType_t::CUDNN_DATA_FLOAT])?;
//! t.set(attr::TENSOR_DIMENSIONS, &[1, 8, 4, 4])?;
//! t.set(attr::TENSOR_STRIDES, &[128, 16, 4, 1])?;
//! t.set(attr::TENSOR_UNIQUE_ID, &[1])?;
//! t.set(attr::TENSOR_BYTE_ALIGNMENT, &[16])?;
//! t.finalize()?;
//! let mut dims = [0i64; 8];
//! let n = t.get(attr::TENSOR_DIMENSIONS, &mut dims)?;
//! assert_eq!(&dims[..n], &[1, 8, 4, 4]);
//! # Ok::<(), cudnn::Error>(())
//! ```

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;

use crate::check::{cudnn, cudnn_call};
use crate::error::{Error, Result};
use crate::sys::cudnn as sys;
use sys::cudnnBackendDescriptorType_t as DescType;
use sys::{cudnnBackendAttributeName_t as AttrName, cudnnBackendAttributeType_t as AttrType};

mod sealed {
    pub trait Sealed {}
}

/// A backend descriptor kind (sealed).
pub trait Kind: sealed::Sealed + 'static {
    /// cuDNN's descriptor type.
    const TYPE: DescType;
    /// A short name for errors (`"tensor"`).
    const NAME: &'static str;
}

/// A kind that is an operation node (may go into an operation graph).
pub trait OperationKind: Kind {}

/// The descriptor kinds.
pub mod kind {
    use super::*;
    macro_rules! kinds {
        ($($(#[$m:meta])* $name:ident = $ty:ident, $label:literal $(, $op:ident)?;)*) => {$(
            $(#[$m])*
            #[derive(Debug)]
            pub enum $name {}
            impl sealed::Sealed for $name {}
            impl Kind for $name {
                const TYPE: DescType = DescType::$ty;
                const NAME: &'static str = $label;
            }
            $(impl $op for $name {})?
        )*};
    }
    kinds! {
        /// `CUDNN_BACKEND_TENSOR_DESCRIPTOR`.
        Tensor = CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor";
        /// `CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR`.
        Convolution = CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, "convolution";
        /// `CUDNN_BACKEND_POINTWISE_DESCRIPTOR`.
        Pointwise = CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise";
        /// `CUDNN_BACKEND_MATMUL_DESCRIPTOR`.
        Matmul = CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul";
        /// `CUDNN_BACKEND_REDUCTION_DESCRIPTOR`.
        Reduction = CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction";
        /// Convolution forward operation.
        ConvForwardOp = CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, "conv fprop op", OperationKind;
        /// Convolution backward-data operation.
        ConvDataOp = CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, "conv dgrad op", OperationKind;
        /// Convolution backward-filter operation.
        ConvFilterOp = CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, "conv wgrad op", OperationKind;
        /// Pointwise operation.
        PointwiseOp = CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise op", OperationKind;
        /// Matmul operation.
        MatmulOp = CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul op", OperationKind;
        /// Reduction operation.
        ReductionOp = CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction op", OperationKind;
        /// Normalization forward operation.
        NormForwardOp = CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR, "norm forward op", OperationKind;
        /// Normalization backward operation.
        NormBackwardOp = CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR, "norm backward op", OperationKind;
        /// SDPA forward operation.
        SdpaForwardOp = CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, "sdpa forward op", OperationKind;
        /// SDPA backward operation.
        SdpaBackwardOp = CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR, "sdpa backward op", OperationKind;
        /// Diagonal band mask operation (causal and sliding-window masks in SDPA score subgraphs).
        DiagonalBandMaskOp = CUDNN_BACKEND_OPERATION_DIAGONAL_BAND_MASK_DESCRIPTOR, "diagonal band mask op", OperationKind;
        /// Softmax operation (the SDPA operation's softmax sub-descriptor: statistics, row max, sum of exponentials, attention sinks; cuDNN >= 9.21).
        SoftmaxOp = CUDNN_BACKEND_OPERATION_SOFTMAX_DESCRIPTOR, "softmax op", OperationKind;
        /// Paged cache load operation (K or V gathered from a paged KV cache through a page table).
        PagedCacheLoadOp = CUDNN_BACKEND_OPERATION_PAGED_CACHE_LOAD_DESCRIPTOR, "paged cache load op", OperationKind;
        /// `CUDNN_BACKEND_RNG_DESCRIPTOR` (a distribution).
        Rng = CUDNN_BACKEND_RNG_DESCRIPTOR, "rng";
        /// Random-number operation (dropout masks of the composite attention).
        RngOp = CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR, "rng op", OperationKind;
        /// Reshape operation (a view with other dims and strides; the composite attention backward's transposes).
        ReshapeOp = CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "reshape op", OperationKind;
        /// Block-scale quantize operation (MXFP8: FP8 values and E8M0 block scales).
        BlockScaleQuantizeOp = CUDNN_BACKEND_OPERATION_BLOCK_SCALE_QUANTIZE_DESCRIPTOR, "block scale quantize op", OperationKind;
        /// Block-scale dequantize operation.
        BlockScaleDequantizeOp = CUDNN_BACKEND_OPERATION_BLOCK_SCALE_DEQUANTIZE_DESCRIPTOR, "block scale dequantize op", OperationKind;
        /// `CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR`.
        OperationGraph = CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph";
        /// `CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR`.
        EngineHeur = CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "engine heuristics";
        /// `CUDNN_BACKEND_ENGINE_DESCRIPTOR`.
        Engine = CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine";
        /// `CUDNN_BACKEND_ENGINECFG_DESCRIPTOR`.
        EngineConfig = CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config";
        /// `CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR`.
        KnobChoice = CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, "knob choice";
        /// `CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR`.
        ExecutionPlan = CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "execution plan";
        /// `CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR`.
        VariantPack = CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack";
        /// `CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR` (cuDNN >= 9.8).
        DeviceProp = CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, "device properties";
    }
}

/// An attribute value type (sealed): the Rust element type and cuDNN's type code.
pub trait Value: sealed::Sealed + 'static {
    /// The element passed to and read from cuDNN.
    type Elem: Copy + 'static;
    /// cuDNN's attribute type.
    const TYPE: AttrType;
    /// A placeholder value for read buffers.
    const ZERO: Self::Elem;
}

/// Value types of attributes.
pub mod value {
    use super::*;
    macro_rules! values {
        ($($(#[$m:meta])* $name:ident = $elem:ty, $ty:ident, $zero:expr;)*) => {$(
            $(#[$m])*
            #[derive(Debug)]
            pub enum $name {}
            impl sealed::Sealed for $name {}
            impl Value for $name {
                type Elem = $elem;
                const TYPE: AttrType = AttrType::$ty;
                const ZERO: $elem = $zero;
            }
        )*};
    }
    values! {
        /// `CUDNN_TYPE_INT64`.
        I64 = i64, CUDNN_TYPE_INT64, 0;
        /// `CUDNN_TYPE_INT32`.
        I32 = i32, CUDNN_TYPE_INT32, 0;
        /// `CUDNN_TYPE_FLOAT`.
        F32 = f32, CUDNN_TYPE_FLOAT, 0.0;
        /// `CUDNN_TYPE_DOUBLE`.
        F64 = f64, CUDNN_TYPE_DOUBLE, 0.0;
        /// `CUDNN_TYPE_BOOLEAN` (one byte: 0 or 1).
        Bool = bool, CUDNN_TYPE_BOOLEAN, false;
        /// `CUDNN_TYPE_CHAR`.
        Char = u8, CUDNN_TYPE_CHAR, 0;
        /// `CUDNN_TYPE_DATA_TYPE`.
        DataType = sys::cudnnDataType_t, CUDNN_TYPE_DATA_TYPE, sys::cudnnDataType_t(0);
        /// `CUDNN_TYPE_CONVOLUTION_MODE`.
        ConvMode = sys::cudnnConvolutionMode_t, CUDNN_TYPE_CONVOLUTION_MODE, sys::cudnnConvolutionMode_t(0);
        /// `CUDNN_TYPE_POINTWISE_MODE`.
        PointwiseMode = sys::cudnnPointwiseMode_t, CUDNN_TYPE_POINTWISE_MODE, sys::cudnnPointwiseMode_t(0);
        /// `CUDNN_TYPE_NAN_PROPOGATION`.
        NanPropagation = sys::cudnnNanPropagation_t, CUDNN_TYPE_NAN_PROPOGATION, sys::cudnnNanPropagation_t(0);
        /// `CUDNN_TYPE_REDUCTION_OPERATOR_TYPE`.
        ReduceOp = sys::cudnnReduceTensorOp_t, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, sys::cudnnReduceTensorOp_t(0);
        /// `CUDNN_TYPE_HEUR_MODE`.
        HeurMode = sys::cudnnBackendHeurMode_t, CUDNN_TYPE_HEUR_MODE, sys::cudnnBackendHeurMode_t(0);
        /// `CUDNN_TYPE_NUMERICAL_NOTE`.
        NumericalNote = sys::cudnnBackendNumericalNote_t, CUDNN_TYPE_NUMERICAL_NOTE, sys::cudnnBackendNumericalNote_t(0);
        /// `CUDNN_TYPE_BEHAVIOR_NOTE`.
        BehaviorNote = sys::cudnnBackendBehaviorNote_t, CUDNN_TYPE_BEHAVIOR_NOTE, sys::cudnnBackendBehaviorNote_t(0);
        /// `CUDNN_TYPE_KNOB_TYPE`.
        KnobType = sys::cudnnBackendKnobType_t, CUDNN_TYPE_KNOB_TYPE, sys::cudnnBackendKnobType_t(0);
        /// `CUDNN_TYPE_NORM_MODE`.
        NormMode = sys::cudnnBackendNormMode_t, CUDNN_TYPE_NORM_MODE, sys::cudnnBackendNormMode_t(0);
        /// `CUDNN_TYPE_NORM_FWD_PHASE`.
        NormPhase = sys::cudnnBackendNormFwdPhase_t, CUDNN_TYPE_NORM_FWD_PHASE, sys::cudnnBackendNormFwdPhase_t(0);
        /// `CUDNN_TYPE_RNG_DISTRIBUTION`.
        RngDistribution = sys::cudnnRngDistribution_t, CUDNN_TYPE_RNG_DISTRIBUTION, sys::cudnnRngDistribution_t(0);
    }

    /// `CUDNN_TYPE_BACKEND_DESCRIPTOR` holding descriptors of kind `K`.
    #[derive(Debug)]
    pub struct Desc<K>(PhantomData<K>, std::convert::Infallible);
    /// `CUDNN_TYPE_BACKEND_DESCRIPTOR` holding operation descriptors of any kind.
    #[derive(Debug)]
    pub enum AnyOp {}
    /// `CUDNN_TYPE_VOID_PTR`: device addresses (variant packs).
    #[derive(Debug)]
    pub enum DevicePtr {}
    /// `CUDNN_TYPE_HANDLE`.
    #[derive(Debug)]
    pub enum Handle {}
}

/// An attribute of descriptors of kind `K` whose values are of type `V`.
pub struct Attr<K, V: ?Sized> {
    name: AttrName,
    label: &'static str,
    _p: PhantomData<fn() -> (K, *const V)>,
}

impl<K, V: ?Sized> Clone for Attr<K, V> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K, V: ?Sized> Copy for Attr<K, V> {}
impl<K, V: ?Sized> fmt::Debug for Attr<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label)
    }
}

impl<K, V: ?Sized> Attr<K, V> {
    /// The cuDNN attribute name.
    pub const fn raw(&self) -> AttrName {
        self.name
    }
    /// The attribute's C name.
    pub const fn label(&self) -> &'static str {
        self.label
    }
}

/// The C attribute type of an attribute (for count queries).
pub trait AttrTypeOf {
    /// cuDNN's attribute type.
    fn attr_type(&self) -> AttrType;
}
impl<K, V: Value> AttrTypeOf for Attr<K, V> {
    fn attr_type(&self) -> AttrType {
        V::TYPE
    }
}
impl<K, K2> AttrTypeOf for Attr<K, value::Desc<K2>> {
    fn attr_type(&self) -> AttrType {
        AttrType::CUDNN_TYPE_BACKEND_DESCRIPTOR
    }
}

/// The attributes this crate sets and reads, typed (`CUDNN_ATTR_<name>`).
#[allow(missing_docs)]
pub mod attr;
pub(crate) mod clock;
mod rules;
mod transcript;
use transcript::Transcript;
pub(crate) use transcript::turn_on as keep_transcripts;

/// An owned backend descriptor of kind `K`.
///
/// Created with [`Descriptor::new`], filled with [`set`](Self::set) and its
/// siblings, then [`finalize`](Self::finalize)d; read with [`get`](Self::get)
/// once finalized. `Drop` destroys it (and never panics).
pub struct Descriptor<K: Kind> {
    raw: NonNull<c_void>,
    finalized: bool,
    /// The attributes set successfully (what finalize needs is checked against them).
    set_attrs: Vec<AttrName>,
    /// What cuDNN was given, while the finalize memo is on.
    transcript: Transcript,
    _k: PhantomData<K>,
}

// SAFETY: a backend descriptor is host memory owned by this value. NVIDIA's
// rule is that cuDNN may be called from several threads as long as they do
// not use the same handle at once; nothing ties a descriptor to the thread
// that made it, so moving one to another thread is sound. Not `Sync`: no
// concurrent use of one descriptor is documented, so shared use goes through
// a lock (as `Plan` does).
unsafe impl<K: Kind> Send for Descriptor<K> {}

impl<K: Kind> fmt::Debug for Descriptor<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Descriptor")
            .field("kind", &K::NAME)
            .field("finalized", &self.finalized)
            .field("raw", &self.raw)
            .finish()
    }
}

/// A descriptor of any operation kind, type-erased for [`attr::OPERATIONGRAPH_OPS`].
pub trait AnyOperation {
    /// The raw descriptor.
    fn raw_op(&self) -> sys::cudnnBackendDescriptor_t;
    /// Whether it is finalized.
    fn op_finalized(&self) -> bool;
    /// Its kind's name.
    fn op_kind(&self) -> &'static str;
    /// The digest of what cuDNN was given for it (the finalize memo's test
    /// aid); `None` unless it is one of this crate's descriptors made while
    /// the memo is on. Another implementation keeps the default: only plans
    /// of an `OpGraph` (made by `Graph::build`, from this crate's
    /// descriptors) reach the memo.
    #[doc(hidden)]
    fn op_digest(&self) -> Option<[u8; 32]> {
        None
    }
}

impl<K: OperationKind> AnyOperation for Descriptor<K> {
    fn raw_op(&self) -> sys::cudnnBackendDescriptor_t {
        self.raw.as_ptr()
    }
    fn op_finalized(&self) -> bool {
        self.finalized
    }
    fn op_kind(&self) -> &'static str {
        K::NAME
    }
    fn op_digest(&self) -> Option<[u8; 32]> {
        self.transcript.digest()
    }
}

impl<K: Kind> Descriptor<K> {
    /// Create an empty descriptor of kind `K`.
    ///
    /// # Errors
    /// Library missing, or cuDNN refused (`DeviceProp` needs cuDNN >= 9.8).
    #[doc(alias = "cudnnBackendCreateDescriptor")]
    pub fn new() -> Result<Self> {
        Ok(Self {
            raw: untyped::create(K::TYPE, K::NAME)?,
            finalized: false,
            set_attrs: Vec::new(),
            transcript: Transcript::start(K::TYPE),
            _k: PhantomData,
        })
    }

    /// The raw descriptor (still owned by `self`).
    pub fn as_raw(&self) -> sys::cudnnBackendDescriptor_t {
        self.raw.as_ptr()
    }

    /// Whether [`finalize`](Self::finalize) has succeeded.
    pub fn is_finalized(&self) -> bool {
        self.finalized
    }

    /// The digest of everything cuDNN was given for this descriptor (the
    /// finalize memo's key), when it keeps one.
    pub(crate) fn digest(&self) -> Option<[u8; 32]> {
        self.transcript.digest()
    }

    /// Set an attribute. The transcript ends here: a caller that can say
    /// what it set records it after a success (`set`, `set_operations`).
    ///
    /// # Safety
    /// `data` points to `count` elements of the C type `ty` names.
    pub(in crate::graph) unsafe fn set_raw(
        &mut self,
        name: AttrName,
        label: &'static str,
        ty: AttrType,
        count: usize,
        data: *const c_void,
    ) -> Result<()> {
        let at = untyped::At {
            raw: self.raw,
            finalized: self.finalized,
            kind: K::NAME,
        };
        self.transcript.end();
        // SAFETY: the caller's contract.
        unsafe { untyped::set(at, &mut self.set_attrs, name, label, ty, count, data) }
    }

    /// Set a plain-valued attribute.
    ///
    /// A plan's JSON (`CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION`) is
    /// refused here: cuDNN's parser is not a validator (a plan JSON whose
    /// graph was edited crashes cuDNN at finalize, and one whose compiled
    /// kernels came from another graph runs them past the bound buffers).
    /// Load plans with [`Plan::from_cudnn_json`](crate::graph::Plan::from_cudnn_json),
    /// which checks the JSON against the plan's tensor list, or set it with
    /// the `unsafe`
    /// [`set_plan_json_unchecked`](Descriptor::set_plan_json_unchecked).
    ///
    /// # Errors
    /// Already finalized (before the call), a plan JSON, or cuDNN's refusal.
    #[doc(alias = "cudnnBackendSetAttribute")]
    pub fn set<V: Value>(&mut self, a: Attr<K, V>, values: &[V::Elem]) -> Result<()> {
        if a.name == AttrName::CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION {
            return Err(Error::invalid(
                a.label,
                "is set only through Plan::from_cudnn_json (checked against the plan's tensors) \
                 or the unsafe Descriptor::set_plan_json_unchecked: cuDNN does not validate a plan JSON",
                format!("{} bytes through the safe Descriptor::set", values.len()),
            ));
        }
        let mut kept = self.transcript;
        // SAFETY: `V::Elem` is the C type of `V::TYPE` (bool is one byte, as
        // CUDNN_TYPE_BOOLEAN); `values` holds `values.len()` of them.
        unsafe {
            self.set_raw(
                a.name,
                a.label,
                V::TYPE,
                values.len(),
                values.as_ptr().cast(),
            )
        }?;
        if kept.is_kept() {
            // SAFETY: `V::Elem` is one of the sealed value types' C scalars
            // (i64, i32, f32, f64, bool, u8, or a bindgen enum newtype over a
            // u32): no padding, every byte initialized; `values` holds
            // `values.len()` of them, `size_of_val(values)` bytes.
            let bytes = unsafe {
                std::slice::from_raw_parts(
                    values.as_ptr().cast::<u8>(),
                    std::mem::size_of_val(values),
                )
            };
            kept.values(a.name, V::TYPE, values.len(), bytes);
        }
        self.transcript = kept;
        Ok(())
    }

    /// Set an attribute that holds descriptors of kind `K2`; each must be finalized.
    ///
    /// # Errors
    /// A descriptor not finalized, or cuDNN's refusal.
    pub fn set_descriptors<K2: Kind>(
        &mut self,
        a: Attr<K, value::Desc<K2>>,
        descs: &[&Descriptor<K2>],
    ) -> Result<()> {
        let mut listed = Vec::with_capacity(descs.len());
        for d in descs {
            listed.push((d.raw, d.finalized));
        }
        let at = untyped::At {
            raw: self.raw,
            finalized: self.finalized,
            kind: K::NAME,
        };
        let mut kept = self.transcript;
        self.transcript.end();
        untyped::set_descriptors(at, &mut self.set_attrs, a.name, a.label, K2::NAME, &listed)?;
        // Nothing to fold (and no allocation) while the memo is off.
        if kept.is_kept() {
            let children: Vec<Transcript> = descs.iter().map(|d| d.transcript).collect();
            kept.descriptors(a.name, &children);
        }
        self.transcript = kept;
        Ok(())
    }

    /// Set an attribute that holds operation descriptors of any kind; each must be finalized.
    ///
    /// # Errors
    /// An operation not finalized, none given, or cuDNN's refusal.
    pub fn set_operations(
        &mut self,
        a: Attr<K, value::AnyOp>,
        ops: &[&dyn AnyOperation],
    ) -> Result<()> {
        if ops.is_empty() {
            return Err(Error::invalid(a.label, "needs at least one operation", 0));
        }
        for (i, op) in ops.iter().enumerate() {
            if !op.op_finalized() {
                return Err(Error::invalid(
                    format!("{}[{i}]", a.label),
                    format!("the {} must be finalized first", op.op_kind()),
                    "an unfinalized operation",
                ));
            }
        }
        let raws: Vec<sys::cudnnBackendDescriptor_t> = ops.iter().map(|o| o.raw_op()).collect();
        let mut kept = self.transcript;
        // SAFETY: live, finalized operation descriptors, as the attribute takes.
        unsafe {
            self.set_raw(
                a.name,
                a.label,
                AttrType::CUDNN_TYPE_BACKEND_DESCRIPTOR,
                raws.len(),
                raws.as_ptr().cast(),
            )
        }?;
        if kept.is_kept() {
            let children: Vec<Transcript> = ops
                .iter()
                .map(|o| Transcript::from_digest(o.op_digest()))
                .collect();
            kept.descriptors(a.name, &children);
        }
        self.transcript = kept;
        Ok(())
    }

    /// Set device addresses (variant pack pointers and workspace).
    ///
    /// # Safety
    /// The pointers must stay valid device memory of the sizes the plan needs
    /// for as long as the descriptor is executed.
    pub unsafe fn set_device_ptrs(
        &mut self,
        a: Attr<K, value::DevicePtr>,
        ptrs: &[*mut c_void],
    ) -> Result<()> {
        // SAFETY: `ptrs` holds `ptrs.len()` pointers, as CUDNN_TYPE_VOID_PTR takes.
        unsafe {
            self.set_raw(
                a.name,
                a.label,
                AttrType::CUDNN_TYPE_VOID_PTR,
                ptrs.len(),
                ptrs.as_ptr().cast(),
            )
        }
    }

    /// Set a cuDNN handle.
    ///
    /// # Errors
    /// Already finalized, or cuDNN's refusal.
    pub fn set_handle(
        &mut self,
        a: Attr<K, value::Handle>,
        handle: &crate::dnn::Handle,
    ) -> Result<()> {
        let raw = handle.as_raw();
        // SAFETY: one live cudnnHandle_t, which outlives this call; cuDNN copies it.
        unsafe {
            self.set_raw(
                a.name,
                a.label,
                AttrType::CUDNN_TYPE_HANDLE,
                1,
                (&raw as *const sys::cudnnHandle_t).cast(),
            )
        }
    }

    /// Finalize. Twice is an error (before the call), and so is a finalize
    /// that lacks an attribute cuDNN needs and would crash without (an
    /// engine config's engine; an execution plan's engine config or JSON,
    /// and its device properties or handle; the operation graph of an
    /// engine or heuristics, and the heuristics' mode).
    ///
    /// # Errors
    /// Already finalized, an attribute missing (named), or cuDNN's refusal
    /// with its reason text.
    #[doc(alias = "cudnnBackendFinalize")]
    pub fn finalize(&mut self) -> Result<()> {
        let at = untyped::At {
            raw: self.raw,
            finalized: self.finalized,
            kind: K::NAME,
        };
        untyped::finalize(at, K::TYPE, &self.set_attrs)?;
        self.finalized = true;
        self.transcript.finalized();
        Ok(())
    }

    /// # Safety
    /// `out` points to `capacity` writable elements of the C type `ty` names.
    unsafe fn get_raw(
        &self,
        name: AttrName,
        label: &'static str,
        ty: AttrType,
        capacity: usize,
        out: *mut c_void,
    ) -> Result<usize> {
        let at = untyped::At {
            raw: self.raw,
            finalized: self.finalized,
            kind: K::NAME,
        };
        // SAFETY: the caller's contract.
        unsafe { untyped::get(at, name, label, ty, capacity, out) }
    }

    /// Read a plain-valued attribute into `out`; returns how many values cuDNN
    /// has (which may exceed `out.len()`: then only `out.len()` were written).
    ///
    /// # Errors
    /// Not finalized (before the call), or cuDNN's refusal.
    #[doc(alias = "cudnnBackendGetAttribute")]
    pub fn get<V: Value>(&self, a: Attr<K, V>, out: &mut [V::Elem]) -> Result<usize> {
        // SAFETY: `out` holds `out.len()` writable `V::Elem`, the C type of `V::TYPE`.
        unsafe { self.get_raw(a.name, a.label, V::TYPE, out.len(), out.as_mut_ptr().cast()) }
    }

    /// Read one value.
    ///
    /// # Errors
    /// As [`get`](Self::get); also when cuDNN holds no value.
    pub fn get_one<V: Value>(&self, a: Attr<K, V>) -> Result<V::Elem> {
        let mut v = [V::ZERO];
        let n = self.get(a, &mut v)?;
        if n == 0 {
            return Err(Error::invalid(a.label, "cuDNN holds no value", 0));
        }
        Ok(v[0])
    }

    /// Read all values (asks the count first).
    ///
    /// # Errors
    /// As [`get`](Self::get).
    pub fn get_all<V: Value>(&self, a: Attr<K, V>, max: usize) -> Result<Vec<V::Elem>> {
        let mut v = vec![V::ZERO; max];
        let n = self.get(a, &mut v)?;
        v.truncate(n.min(max));
        Ok(v)
    }

    /// Read descriptors of kind `K2` held by an attribute (at most `max`);
    /// cuDNN fills descriptors this creates, which come back finalized.
    ///
    /// # Errors
    /// Not finalized, or cuDNN's refusal.
    pub fn get_descriptors<K2: Kind>(
        &self,
        a: Attr<K, value::Desc<K2>>,
        max: usize,
    ) -> Result<Vec<Descriptor<K2>>> {
        let mut descs = Vec::with_capacity(max);
        for _ in 0..max {
            descs.push(Descriptor::<K2>::new()?);
        }
        let mut raws: Vec<sys::cudnnBackendDescriptor_t> =
            descs.iter().map(|d| d.as_raw()).collect();
        // SAFETY: `raws` holds `max` live descriptors of the kind the attribute
        // holds, for cuDNN to fill.
        let n = unsafe {
            self.get_raw(
                a.name,
                a.label,
                AttrType::CUDNN_TYPE_BACKEND_DESCRIPTOR,
                raws.len(),
                raws.as_mut_ptr().cast(),
            )
        }?;
        descs.truncate(n.min(max));
        for (i, d) in descs.iter_mut().enumerate() {
            d.finalized = true;
            // What cuDNN filled it with follows from what it was given.
            d.transcript = self.transcript.child(a.name, i);
        }
        Ok(descs)
    }

    /// How many values an attribute holds (a read with no room; cuDNN
    /// answers with the count for most attributes, 0 for knob choices).
    ///
    /// # Errors
    /// Not finalized, or cuDNN's refusal.
    pub fn count<V: ?Sized>(&self, a: Attr<K, V>) -> Result<usize>
    where
        Attr<K, V>: AttrTypeOf,
    {
        // SAFETY: capacity 0: cuDNN writes no element, only the count.
        unsafe { self.get_raw(a.name, a.label, a.attr_type(), 0, std::ptr::null_mut()) }
    }

    /// Destroy now, reporting cuDNN's status.
    ///
    /// # Errors
    /// cuDNN's refusal.
    pub fn destroy(self) -> Result<()> {
        let raw = self.raw.as_ptr();
        std::mem::forget(self);
        let api = cudnn()?;
        let t = clock::start();
        // SAFETY: `raw` was created by cudnnBackendCreateDescriptor and is
        // destroyed once (self is forgotten).
        let r = unsafe { cudnn_call!(api, cudnnBackendDestroyDescriptor(raw)) };
        clock::stop(t);
        r
    }
}

impl<K: Kind> Drop for Descriptor<K> {
    fn drop(&mut self) {
        untyped::destroy(self.raw);
    }
}

/// The bodies of [`Descriptor`]'s methods, compiled once instead of once
/// per kind (issue 34: what the crate costs to build); the kind is passed
/// as its cuDNN type and name.
mod untyped {
    use std::ffi::c_void;
    use std::ptr::NonNull;

    use super::{AttrName, AttrType, DescType, clock, rules};
    use crate::check::{cudnn, cudnn_call};
    use crate::error::{Error, Result};
    use crate::sys::cudnn as sys;

    /// A descriptor's raw pointer, state and kind name.
    #[derive(Clone, Copy)]
    pub(super) struct At {
        pub(super) raw: NonNull<c_void>,
        pub(super) finalized: bool,
        pub(super) kind: &'static str,
    }

    pub(super) fn create(ty: DescType, kind: &'static str) -> Result<NonNull<c_void>> {
        let api = cudnn()?;
        // cuDNN's engine libraries need a `libcuda.so.1` before the first
        // finalize; without one (and no stub) cuDNN reports it itself.
        let _ = super::super::driver::ready();
        let mut raw: sys::cudnnBackendDescriptor_t = std::ptr::null_mut();
        let t = clock::start();
        // SAFETY: `raw` is a valid out-pointer; the type is a constant of the bindings.
        let r = unsafe { cudnn_call!(api, cudnnBackendCreateDescriptor(ty, &mut raw)) };
        clock::stop(t);
        r.map_err(|e| e.with_context(format!("creating a {kind} descriptor")))?;
        NonNull::new(raw).ok_or_else(|| Error::Unsupported {
            what: format!("cuDNN returned a null {kind} descriptor"),
            needs: None,
        })
    }

    /// # Safety
    /// `data` points to `count` elements of the C type `ty` names; `at.raw`
    /// is a live descriptor whose set attributes are `set_attrs`.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn set(
        at: At,
        set_attrs: &mut Vec<AttrName>,
        name: AttrName,
        label: &'static str,
        ty: AttrType,
        count: usize,
        data: *const c_void,
    ) -> Result<()> {
        if at.finalized {
            return Err(Error::invalid(
                label,
                format!(
                    "cannot be set: the {} descriptor is already finalized",
                    at.kind
                ),
                "a set after finalize",
            ));
        }
        let api = cudnn()?;
        let count =
            i64::try_from(count).map_err(|_| Error::invalid(label, "too many values", count))?;
        let t = clock::start();
        // SAFETY: the descriptor is live and not finalized; the caller
        // guarantees `data` holds `count` elements of type `ty`.
        let r = unsafe {
            cudnn_call!(
                api,
                cudnnBackendSetAttribute(at.raw.as_ptr(), name, ty, count, data)
            )
        };
        clock::stop(t);
        r.map_err(|e| e.with_context(format!("setting {label} on a {} descriptor", at.kind)))?;
        // Only a value counts as set: an attribute set with no values (an
        // empty slice) is as good as missing to the finalize that needs it.
        if count >= 1 {
            if !set_attrs.contains(&name) {
                set_attrs.push(name);
            }
        } else {
            set_attrs.retain(|&a| a != name);
        }
        Ok(())
    }

    /// Set an attribute to the descriptors `listed` (raw, finalized), of kind `kind2`.
    pub(super) fn set_descriptors(
        at: At,
        set_attrs: &mut Vec<AttrName>,
        name: AttrName,
        label: &'static str,
        kind2: &'static str,
        listed: &[(NonNull<c_void>, bool)],
    ) -> Result<()> {
        for (i, &(_, finalized)) in listed.iter().enumerate() {
            if !finalized {
                return Err(Error::invalid(
                    format!("{label}[{i}]"),
                    format!("the {kind2} descriptor must be finalized first"),
                    "an unfinalized descriptor",
                ));
            }
        }
        let raws: Vec<sys::cudnnBackendDescriptor_t> =
            listed.iter().map(|(r, _)| r.as_ptr()).collect();
        // SAFETY: `raws` holds live, finalized descriptors of the kind the
        // attribute takes (the caller's `Attr` types them).
        unsafe {
            set(
                at,
                set_attrs,
                name,
                label,
                AttrType::CUDNN_TYPE_BACKEND_DESCRIPTOR,
                raws.len(),
                raws.as_ptr().cast(),
            )
        }
    }

    pub(super) fn finalize(at: At, ty: DescType, set_attrs: &[AttrName]) -> Result<()> {
        if at.finalized {
            return Err(Error::invalid(
                at.kind,
                "is already finalized",
                "a second finalize",
            ));
        }
        let missing = rules::missing(ty, set_attrs);
        if let Some(group) = missing.first() {
            let names: Vec<&str> = group.iter().map(|(_, n)| *n).collect();
            return Err(Error::invalid(
                format!("finalizing a {} descriptor", at.kind),
                format!("needs {} set first", names.join(" or ")),
                "not set",
            ));
        }
        let api = cudnn()?;
        let t = clock::start();
        // SAFETY: a live descriptor, not finalized yet.
        let r = unsafe { cudnn_call!(api, cudnnBackendFinalize(at.raw.as_ptr())) };
        clock::stop(t);
        r.map_err(|e| e.with_context(format!("finalizing a {} descriptor", at.kind)))
    }

    /// # Safety
    /// `out` points to `capacity` writable elements of the C type `ty`
    /// names; `at.raw` is a live descriptor.
    pub(super) unsafe fn get(
        at: At,
        name: AttrName,
        label: &'static str,
        ty: AttrType,
        capacity: usize,
        out: *mut c_void,
    ) -> Result<usize> {
        if !at.finalized {
            return Err(Error::invalid(
                label,
                format!(
                    "cannot be read: the {} descriptor is not finalized",
                    at.kind
                ),
                "a read before finalize",
            ));
        }
        let api = cudnn()?;
        let cap = i64::try_from(capacity)
            .map_err(|_| Error::invalid(label, "capacity too large", capacity))?;
        let mut count: i64 = 0;
        let t = clock::start();
        // SAFETY: finalized live descriptor; the caller guarantees `out`.
        let r = unsafe {
            cudnn_call!(
                api,
                cudnnBackendGetAttribute(at.raw.as_ptr(), name, ty, cap, &mut count, out)
            )
        };
        clock::stop(t);
        r.map_err(|e| e.with_context(format!("reading {label} from a {} descriptor", at.kind)))?;
        usize::try_from(count)
            .map_err(|_| Error::invalid(label, "cuDNN returned a negative count", count))
    }

    pub(super) fn destroy(raw: NonNull<c_void>) {
        if let Ok(api) = cudnn() {
            let t = clock::start();
            // SAFETY: created by cudnnBackendCreateDescriptor, destroyed once here.
            let _ = unsafe { api.cudnnBackendDestroyDescriptor(raw.as_ptr()) };
            clock::stop(t);
        }
    }
}
