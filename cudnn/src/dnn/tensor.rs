//! Tensor descriptors: [`TensorDescriptor<T>`].
//!
//! A descriptor is validated in Rust before cuDNN sees it; the errors name the
//! argument and the value. The rules are cuDNN's own (found by asking
//! cuDNN 8.9 and 9 with every kind of value, see
//! `cudnn/tests/host/descriptors.rs`), and the validation is a little
//! stricter than cuDNN in these listed ways:
//!
//! - **at least 3 dimensions.** cuDNN 9 also accepts 2 (cuDNN 8.9 does not);
//!   no cuDNN operation this crate wraps takes a 2-d tensor. Write 2-d data
//!   `[n, c]` as the 4-d `[n, c, 1, 1]` (unit spatial dimensions), not as
//!   `[n, c, 1]`: batch normalization and pooling accept only 4-d and 5-d
//!   tensors, softmax and activation are documented for 4-d and 5-d, and 4-d
//!   is the rank every op takes.
//! - **the element count (product of the dimensions) must fit in `usize`.**
//!   cuDNN only limits the memory span (below), so with overlapping strides
//!   it accepts shapes whose element count no integer holds.
//! - **4-d packed tensors ([`nchw`](TensorDescriptor::nchw),
//!   [`nhwc`](TensorDescriptor::nhwc)): `n*c*h*w` must be at most
//!   `i32::MAX`.** `cudnnSetTensor4dDescriptor` computes the packed strides in
//!   32 bits; when they wrap it sometimes accepts, storing a negative stride
//!   (`[10, 2^30, 3, 6]` is stored with an N stride of `-2^31`).
//!
//! Shared with cuDNN (so both reject):
//! - between 3 and 8 (`CUDNN_DIM_MAX`) dimensions, each in `1..=i32::MAX`;
//! - strides in `0..=i32::MAX`; a dimension larger than 1 needs a stride of at
//!   least 1 (a dimension of size 1 may have any stride, it is never stepped);
//! - the memory span `1 + sum((dims[i] - 1) * strides[i])` must be at most
//!   `i32::MAX` elements (cuDNN: `CUDNN_STATUS_NOT_SUPPORTED`);
//! - the element type must be one cuDNN tensors hold: every [`DataType`]
//!   except `i64`.
//!
//! Negative strides are not expressible (`usize`), though cuDNN accepts some.

use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;

use crate::check::{self, cudnn_call};
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::sys::cudnn as dnn;

/// The most dimensions a cuDNN tensor or filter has (`CUDNN_DIM_MAX`).
pub const MAX_DIMS: usize = dnn::CUDNN_DIM_MAX as usize;

/// The fewest dimensions a [`TensorDescriptor`] or [`FilterDescriptor`](super::FilterDescriptor) has.
pub const MIN_DIMS: usize = 3;

/// `i32::MAX` as a `usize`: cuDNN takes every size as a C `int`.
pub(crate) const INT_MAX: usize = i32::MAX as usize;

/// Memory layout of a 4-d tensor or a filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TensorFormat {
    /// Channels first: `N, C, H, W` from slowest to fastest (`CUDNN_TENSOR_NCHW`).
    #[default]
    Nchw,
    /// Channels last: `N, H, W, C` from slowest to fastest (`CUDNN_TENSOR_NHWC`).
    Nhwc,
}

impl TensorFormat {
    /// The cuDNN constant.
    pub fn to_raw(self) -> dnn::cudnnTensorFormat_t {
        match self {
            TensorFormat::Nchw => dnn::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
            TensorFormat::Nhwc => dnn::cudnnTensorFormat_t::CUDNN_TENSOR_NHWC,
        }
    }

    /// From the cuDNN constant; other formats (`NCHW_VECT_C`) are an error.
    pub fn from_raw(raw: dnn::cudnnTensorFormat_t) -> Result<Self> {
        match raw {
            dnn::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW => Ok(TensorFormat::Nchw),
            dnn::cudnnTensorFormat_t::CUDNN_TENSOR_NHWC => Ok(TensorFormat::Nhwc),
            other => Err(Error::invalid(
                "format",
                "must be CUDNN_TENSOR_NCHW or CUDNN_TENSOR_NHWC",
                other.0,
            )),
        }
    }
}

/// Up to [`MAX_DIMS`] sizes, inline (descriptors are made in hot loops).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(crate) struct Dims {
    len: u8,
    v: [usize; MAX_DIMS],
}

impl Dims {
    /// Copy `s`, which the caller has checked holds at most [`MAX_DIMS`] values.
    pub(crate) fn from_slice(s: &[usize]) -> Self {
        let mut d = Dims::default();
        let n = s.len().min(MAX_DIMS);
        d.v[..n].copy_from_slice(&s[..n]);
        d.len = n as u8;
        d
    }

    /// The values as C ints; the caller has checked each is at most `i32::MAX`.
    pub(crate) fn to_c(self) -> [i32; MAX_DIMS] {
        let mut out = [0i32; MAX_DIMS];
        for (o, &v) in out.iter_mut().zip(self.iter()) {
            *o = i32::try_from(v).unwrap_or(i32::MAX);
        }
        out
    }
}

impl Deref for Dims {
    type Target = [usize];
    fn deref(&self) -> &[usize] {
        &self.v[..self.len as usize]
    }
}

impl fmt::Debug for Dims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// `value` as a C int, or an error naming `arg`.
pub(crate) fn to_int(arg: impl FnOnce() -> String, value: usize) -> Result<i32> {
    i32::try_from(value)
        .map_err(|_| Error::invalid(arg(), "must be <= i32::MAX (2147483647)", value))
}

/// Check a list length is in `min..=max`.
pub(crate) fn check_len(arg: &str, len: usize, min: usize, max: usize) -> Result<()> {
    if len < min || len > max {
        return Err(Error::invalid(
            arg,
            format!("must be between {min} and {max}"),
            len,
        ));
    }
    Ok(())
}

/// Check every value is in `min..=i32::MAX`, naming `arg[i]` in the error.
pub(crate) fn check_each(arg: &str, values: &[usize], min: usize) -> Result<()> {
    for (i, &v) in values.iter().enumerate() {
        if v < min {
            return Err(Error::invalid(
                format!("{arg}[{i}]"),
                format!("must be >= {min}"),
                v,
            ));
        }
        to_int(|| format!("{arg}[{i}]"), v)?;
    }
    Ok(())
}

/// Read a C int cuDNN returned as a size, rejecting negatives.
pub(crate) fn from_int(arg: impl FnOnce() -> String, v: i32) -> Result<usize> {
    usize::try_from(v).map_err(|_| Error::invalid(arg(), "cuDNN returned a negative value", v))
}

/// The element types cuDNN tensors hold (all of ours but `i64`).
fn check_tensor_dtype<T: DataType>() -> Result<()> {
    if T::CUDNN == dnn::cudnnDataType_t::CUDNN_DATA_INT64 {
        return Err(Error::invalid(
            "T",
            "cuDNN tensors do not hold this element type",
            T::NAME,
        ));
    }
    Ok(())
}

/// Row-major (fully packed) strides for `dims`, or an error when they overflow.
pub(crate) fn packed_strides(dims: &[usize]) -> Result<Dims> {
    check_len("dims.len()", dims.len(), 1, MAX_DIMS)?;
    let mut strides = [0usize; MAX_DIMS];
    let mut acc: usize = 1;
    for (i, &d) in dims.iter().enumerate().rev() {
        strides[i] = acc;
        acc = acc.checked_mul(d).ok_or_else(|| {
            Error::invalid(
                "dims",
                "the packed size overflows usize",
                format!("{dims:?}"),
            )
        })?;
    }
    Ok(Dims::from_slice(&strides[..dims.len()]))
}

/// Validate an N-d tensor shape and strides against cuDNN's rules (see the
/// module docs). Returns `(element_count, span)`.
pub(crate) fn validate_tensor(dims: &[usize], strides: &[usize]) -> Result<(usize, usize)> {
    check_len("dims.len()", dims.len(), MIN_DIMS, MAX_DIMS)?;
    if strides.len() != dims.len() {
        return Err(Error::invalid(
            "strides.len()",
            format!("must equal dims.len() ({})", dims.len()),
            strides.len(),
        ));
    }
    check_each("dims", dims, 1)?;
    for (i, (&d, &s)) in dims.iter().zip(strides).enumerate() {
        to_int(|| format!("strides[{i}]"), s)?;
        if d > 1 && s == 0 {
            return Err(Error::invalid(
                format!("strides[{i}]"),
                format!("must be >= 1 where dims[{i}] > 1 (dims[{i}] = {d})"),
                s,
            ));
        }
    }
    let span = span_of(dims, strides);
    if span > INT_MAX as u128 {
        return Err(Error::invalid(
            "strides",
            "the memory span 1 + sum((dims[i] - 1) * strides[i]) must be <= i32::MAX elements",
            span,
        ));
    }
    let count = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| {
            Error::invalid(
                "dims",
                "the element count (product of dims) must fit in usize",
                format!("{dims:?}"),
            )
        })?;
    Ok((count, span as usize))
}

/// `1 + sum((dims[i] - 1) * strides[i])`, exactly (each term is below 2^62).
fn span_of(dims: &[usize], strides: &[usize]) -> u128 {
    1 + dims
        .iter()
        .zip(strides)
        .map(|(&d, &s)| (d.saturating_sub(1) as u128) * s as u128)
        .sum::<u128>()
}

/// Generates the crate-private owner of one kind of cuDNN descriptor: a
/// `NonNull` whose `Drop` calls the destroy function. The public descriptor
/// types wrap one of these next to their Rust-side copy of the settings.
macro_rules! descriptor_owner {
    ($(#[$meta:meta])* $name:ident, $st:ident, $create:ident, $destroy:ident) => {
        $(#[$meta])*
        pub(crate) struct $name(::std::ptr::NonNull<$crate::sys::cudnn::$st>);

        // SAFETY: a cuDNN descriptor is a plain host structure that cuDNN
        // allocates and fills; it is not tied to a handle, stream, device or
        // thread (NVIDIA's threading rule is only about sharing a handle), so
        // moving ownership to another thread is sound. Not `Sync`: mutation
        // goes through `&mut self` and NVIDIA does not document concurrent use.
        unsafe impl Send for $name {}

        impl $name {
            /// Create an unset descriptor.
            pub(crate) fn create() -> $crate::error::Result<Self> {
                let api = $crate::check::cudnn()?;
                let mut raw = ::std::ptr::null_mut();
                // SAFETY: `raw` is a valid, writable out-pointer for the new descriptor.
                unsafe { $crate::check::cudnn_call!(api, $create(&mut raw)) }?;
                ::std::ptr::NonNull::new(raw).map(Self).ok_or_else(|| {
                    $crate::error::Error::invalid(
                        concat!(stringify!($create), " output"),
                        "must not be null",
                        "null",
                    )
                })
            }

            /// Take ownership of `raw`; an error when it is null.
            ///
            /// # Safety
            /// `raw` was made by the matching create function, is not destroyed,
            /// and nothing else destroys it.
            pub(crate) unsafe fn adopt(raw: *mut $crate::sys::cudnn::$st) -> $crate::error::Result<Self> {
                ::std::ptr::NonNull::new(raw)
                    .map(Self)
                    .ok_or_else(|| $crate::error::Error::invalid("raw", "must not be null", "null"))
            }

            /// The raw pointer, still owned by `self`.
            pub(crate) fn as_ptr(&self) -> *mut $crate::sys::cudnn::$st {
                self.0.as_ptr()
            }

            /// Give up ownership without destroying.
            pub(crate) fn into_raw(self) -> *mut $crate::sys::cudnn::$st {
                let p = self.0.as_ptr();
                ::std::mem::forget(self);
                p
            }

            /// Destroy now, reporting the status.
            pub(crate) fn destroy(self) -> $crate::error::Result<()> {
                let api = $crate::check::cudnn()?;
                let p = self.into_raw();
                // SAFETY: `p` was created by the matching create function and is
                // owned by us; `into_raw` made sure `Drop` will not destroy it again.
                unsafe { $crate::check::cudnn_call!(api, $destroy(p)) }
            }
        }

        impl Drop for $name {
            fn drop(&mut self) {
                // The library is loaded: this descriptor came from it.
                if let Ok(api) = $crate::check::cudnn() {
                    // SAFETY: we own the descriptor and destroy it exactly once.
                    // The status is ignored: destroying a valid descriptor does
                    // not fail, and `Drop` must not panic (use `destroy()` to see it).
                    let _ = unsafe { api.$destroy(self.0.as_ptr()) };
                }
            }
        }

        impl ::std::fmt::Debug for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                write!(f, "{:p}", self.0)
            }
        }
    };
}
pub(crate) use descriptor_owner;

descriptor_owner!(
    /// Owns a `cudnnTensorDescriptor_t`.
    RawTensor,
    cudnnTensorStruct,
    cudnnCreateTensorDescriptor,
    cudnnDestroyTensorDescriptor
);

/// A cuDNN tensor descriptor for elements of type `T`: shape and strides.
///
/// The shape and strides are kept on the Rust side too, so the accessors make
/// no library calls. The type parameter means a descriptor of one element type
/// cannot describe a buffer of another.
///
/// `Send` (a cuDNN descriptor is a plain host structure, tied to no handle,
/// stream or thread), not `Sync` (changes go through `&mut self`).
///
/// ```no_run
/// # use cudnn::dnn::TensorDescriptor;
/// let x = TensorDescriptor::<f32>::nchw(8, 3, 224, 224)?;
/// assert_eq!(x.shape(), &[8, 3, 224, 224]);
/// assert_eq!(x.len_required(), 8 * 3 * 224 * 224);
/// # Ok::<(), cudnn::Error>(())
/// ```
pub struct TensorDescriptor<T: DataType> {
    raw: RawTensor,
    dims: Dims,
    strides: Dims,
    count: usize,
    span: usize,
    _t: PhantomData<T>,
}

impl<T: DataType> TensorDescriptor<T> {
    /// A packed 4-d tensor in channels-first layout (`N, C, H, W`).
    ///
    /// # Errors
    /// A size that is 0 or over `i32::MAX`, a span over `i32::MAX` elements,
    /// an element type cuDNN tensors do not hold (`i64`); all checked before
    /// cuDNN is called.
    #[doc(alias = "cudnnSetTensor4dDescriptor")]
    pub fn nchw(n: usize, c: usize, h: usize, w: usize) -> Result<Self> {
        Self::four_d(TensorFormat::Nchw, n, c, h, w)
    }

    /// A packed 4-d tensor in channels-last layout (`N, H, W, C` in memory).
    ///
    /// [`shape`](Self::shape) is still `[n, c, h, w]`, as cuDNN reports it;
    /// the [`strides`](Self::strides) are `[h*w*c, 1, w*c, c]`.
    ///
    /// # Errors
    /// As [`nchw`](Self::nchw).
    #[doc(alias = "cudnnSetTensor4dDescriptor")]
    pub fn nhwc(n: usize, c: usize, h: usize, w: usize) -> Result<Self> {
        Self::four_d(TensorFormat::Nhwc, n, c, h, w)
    }

    /// A 4-d packed tensor in the given layout.
    ///
    /// # Errors
    /// As [`nchw`](Self::nchw).
    #[doc(alias = "cudnnSetTensor4dDescriptor")]
    pub fn with_format(
        format: TensorFormat,
        n: usize,
        c: usize,
        h: usize,
        w: usize,
    ) -> Result<Self> {
        Self::four_d(format, n, c, h, w)
    }

    fn four_d(format: TensorFormat, n: usize, c: usize, h: usize, w: usize) -> Result<Self> {
        check_tensor_dtype::<T>()?;
        let dims = [n, c, h, w];
        check_each("dims", &dims, 1)?;
        // Products of values <= i32::MAX fit in u128; the span check below
        // rejects anything that does not fit in i32.
        let [n128, c128, h128, w128] = dims.map(|d| d as u128);
        let strides128 = match format {
            TensorFormat::Nchw => [c128 * h128 * w128, h128 * w128, w128, 1],
            TensorFormat::Nhwc => [h128 * w128 * c128, 1, w128 * c128, c128],
        };
        let total = n128 * c128 * h128 * w128;
        if total > INT_MAX as u128 {
            return Err(Error::invalid(
                "dims",
                "the element count n*c*h*w must be <= i32::MAX",
                format!("{n}*{c}*{h}*{w} = {total}"),
            ));
        }
        let strides = strides128.map(|s| s as usize);
        let (count, span) = validate_tensor(&dims, &strides)?;
        let raw = RawTensor::create()?;
        let c_int = Dims::from_slice(&dims).to_c();
        // SAFETY: `raw` is a live descriptor we own; every size was checked to
        // fit in a C int and to be >= 1 above.
        unsafe {
            cudnn_call!(
                check::cudnn()?,
                cudnnSetTensor4dDescriptor(
                    raw.as_ptr(),
                    format.to_raw(),
                    T::CUDNN,
                    c_int[0],
                    c_int[1],
                    c_int[2],
                    c_int[3]
                )
            )
        }?;
        Ok(Self {
            raw,
            dims: Dims::from_slice(&dims),
            strides: Dims::from_slice(&strides),
            count,
            span,
            _t: PhantomData,
        })
    }

    /// An N-d tensor (3 to 8 dimensions) with explicit strides, in elements.
    ///
    /// Strides may overlap (cuDNN allows it; only read such a tensor).
    ///
    /// # Errors
    /// Anything the module docs list, checked before cuDNN is called, with
    /// the offending argument named (`strides[2]`).
    #[doc(alias = "cudnnSetTensorNdDescriptor")]
    pub fn new(dims: &[usize], strides: &[usize]) -> Result<Self> {
        check_tensor_dtype::<T>()?;
        let (count, span) = validate_tensor(dims, strides)?;
        let dims = Dims::from_slice(dims);
        let strides = Dims::from_slice(strides);
        let raw = RawTensor::create()?;
        let (d, s) = (dims.to_c(), strides.to_c());
        // SAFETY: `raw` is a live descriptor we own; `d` and `s` hold at least
        // `dims.len()` C ints (checked <= 8), each checked against cuDNN's rules.
        unsafe {
            cudnn_call!(
                check::cudnn()?,
                cudnnSetTensorNdDescriptor(
                    raw.as_ptr(),
                    T::CUDNN,
                    dims.len() as i32,
                    d.as_ptr(),
                    s.as_ptr()
                )
            )
        }?;
        Ok(Self {
            raw,
            dims,
            strides,
            count,
            span,
            _t: PhantomData,
        })
    }

    /// An N-d fully packed (row-major) tensor: the last dimension is contiguous.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    #[doc(alias = "cudnnSetTensorNdDescriptor")]
    pub fn packed(dims: &[usize]) -> Result<Self> {
        check_len("dims.len()", dims.len(), MIN_DIMS, MAX_DIMS)?;
        check_each("dims", dims, 1)?;
        // A packed tensor spans exactly its element count: say so about
        // `dims` (the caller passed no strides to blame).
        let total = dims.iter().map(|&d| d as u128).product::<u128>();
        if total > INT_MAX as u128 {
            let expr = dims
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join("*");
            return Err(Error::invalid(
                "dims",
                "the element count (product of dims) of a packed tensor must be <= i32::MAX",
                format!("{expr} = {total}"),
            ));
        }
        let strides = packed_strides(dims)?;
        Self::new(dims, &strides)
    }

    /// The sizes, slowest-varying first in the logical `N, C, ...` order.
    pub fn shape(&self) -> &[usize] {
        &self.dims
    }

    /// The strides, in elements, in the same order as [`shape`](Self::shape).
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }

    /// How many dimensions.
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// The number of logical elements (product of the shape).
    pub fn element_count(&self) -> usize {
        self.count
    }

    /// The shortest buffer, in elements, that holds every element this
    /// descriptor addresses: `1 + sum((shape[i] - 1) * strides[i])`.
    pub fn len_required(&self) -> usize {
        self.span
    }

    /// [`len_required`](Self::len_required) in bytes (what
    /// `cudnnGetTensorSizeInBytes` reports).
    #[doc(alias = "cudnnGetTensorSizeInBytes")]
    pub fn bytes(&self) -> usize {
        // span <= i32::MAX and SIZE <= 8: no overflow on 64-bit targets.
        self.span.saturating_mul(T::SIZE)
    }

    /// Whether the tensor is packed row-major (no gaps, no overlap, last
    /// dimension contiguous).
    pub fn is_packed(&self) -> bool {
        packed_strides(&self.dims).is_ok_and(|p| *p == *self.strides)
    }

    /// The raw descriptor, still owned by `self`. Do not set it through this
    /// pointer: the shape kept on the Rust side would no longer match.
    pub fn as_raw(&self) -> dnn::cudnnTensorDescriptor_t {
        self.raw.as_ptr()
    }

    /// Give up ownership of the raw descriptor (the caller destroys it).
    pub fn into_raw(self) -> dnn::cudnnTensorDescriptor_t {
        self.raw.into_raw()
    }

    /// Take ownership of a descriptor made elsewhere, reading its shape,
    /// strides and element type back from cuDNN.
    ///
    /// # Errors
    /// A null pointer, a descriptor that is not set, an element type other
    /// than `T`, or a shape this type rejects. On error the descriptor is
    /// left alone (not destroyed): it still belongs to the caller.
    ///
    /// # Safety
    /// `raw` was made by `cudnnCreateTensorDescriptor`, is not destroyed, and
    /// nothing else destroys or modifies it from now on.
    #[doc(alias = "cudnnGetTensorNdDescriptor")]
    pub unsafe fn from_raw(raw: dnn::cudnnTensorDescriptor_t) -> Result<Self> {
        if raw.is_null() {
            return Err(Error::invalid("raw", "must not be null", "null"));
        }
        let api = check::cudnn()?;
        let mut dtype = dnn::cudnnDataType_t(u32::MAX);
        let mut nb = 0i32;
        let mut d = [0i32; MAX_DIMS];
        let mut s = [0i32; MAX_DIMS];
        // SAFETY: the caller promises `raw` is a live tensor descriptor; the
        // arrays hold the MAX_DIMS entries we ask for.
        unsafe {
            cudnn_call!(
                api,
                cudnnGetTensorNdDescriptor(
                    raw,
                    MAX_DIMS as i32,
                    &mut dtype,
                    &mut nb,
                    d.as_mut_ptr(),
                    s.as_mut_ptr()
                )
            )
        }?;
        if dtype != T::CUDNN {
            return Err(Error::mismatch(
                "tensor descriptor element type",
                T::NAME,
                format!("cuDNN type {}", dtype.0),
            ));
        }
        let n = from_int(|| "nbDims".into(), nb)?;
        check_len("nbDims", n, MIN_DIMS, MAX_DIMS)?;
        let mut dims = [0usize; MAX_DIMS];
        let mut strides = [0usize; MAX_DIMS];
        for i in 0..n {
            dims[i] = from_int(|| format!("dims[{i}]"), d[i])?;
            strides[i] = from_int(|| format!("strides[{i}]"), s[i])?;
        }
        let (count, span) = validate_tensor(&dims[..n], &strides[..n])?;
        check_tensor_dtype::<T>()?;
        // SAFETY: the caller hands us ownership of a live descriptor.
        let raw = unsafe { RawTensor::adopt(raw) }?;
        Ok(Self {
            raw,
            dims: Dims::from_slice(&dims[..n]),
            strides: Dims::from_slice(&strides[..n]),
            count,
            span,
            _t: PhantomData,
        })
    }

    /// Destroy the descriptor now and report cuDNN's status (dropping it
    /// ignores the status).
    #[doc(alias = "cudnnDestroyTensorDescriptor")]
    pub fn destroy(self) -> Result<()> {
        self.raw.destroy()
    }
}

impl<T: DataType> fmt::Debug for TensorDescriptor<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TensorDescriptor")
            .field("dtype", &T::NAME)
            .field("shape", &self.dims)
            .field("strides", &self.strides)
            .field("raw", &self.raw)
            .finish()
    }
}
