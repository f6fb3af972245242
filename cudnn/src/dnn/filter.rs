//! Filter (convolution weight) descriptors: [`FilterDescriptor<T>`].
//!
//! Validated in Rust before cuDNN sees them. Shared with cuDNN (8.9 and 9):
//! - between 3 and 8 dimensions `[k, c, spatial...]`, each in `1..=i32::MAX`
//!   (the order is logical; the [`TensorFormat`] says how they lie in memory);
//! - the element type must be one cuDNN filters hold: every
//!   [`DataType`] except `i32` and `i64`.
//!
//! Stricter than cuDNN (listed, and checked by the agreement test):
//! - **the element count `k * c * ...` must be at most `i32::MAX`.** cuDNN
//!   accepts a filter of any size (`[i32::MAX; 8]` included) and limits only
//!   tensors; a filter larger than any tensor cuDNN can hold is a mistake,
//!   and its byte size would overflow.

use std::fmt;
use std::marker::PhantomData;

use super::tensor::{
    Dims, INT_MAX, MAX_DIMS, MIN_DIMS, TensorFormat, check_each, check_len, descriptor_owner,
    from_int,
};
use crate::check::{self, cudnn_call};
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::sys::cudnn as dnn;

descriptor_owner!(
    /// Owns a `cudnnFilterDescriptor_t`.
    RawFilter,
    cudnnFilterStruct,
    cudnnCreateFilterDescriptor,
    cudnnDestroyFilterDescriptor
);

/// The element types cuDNN filters hold (all of ours but `i32` and `i64`).
fn check_filter_dtype<T: DataType>() -> Result<()> {
    if T::CUDNN == dnn::cudnnDataType_t::CUDNN_DATA_INT64
        || T::CUDNN == dnn::cudnnDataType_t::CUDNN_DATA_INT32
    {
        return Err(Error::invalid(
            "T",
            "cuDNN filters do not hold this element type",
            T::NAME,
        ));
    }
    Ok(())
}

/// Validate a filter shape (see the module docs); returns the element count.
pub(crate) fn validate_filter(dims: &[usize]) -> Result<usize> {
    check_len("dims.len()", dims.len(), MIN_DIMS, MAX_DIMS)?;
    check_each("dims", dims, 1)?;
    let count = dims
        .iter()
        .fold(1u128, |acc, &d| acc.saturating_mul(d as u128));
    if count > INT_MAX as u128 {
        return Err(Error::invalid(
            "dims",
            "the filter element count (product of dims) must be <= i32::MAX",
            format!("{dims:?}"),
        ));
    }
    Ok(count as usize)
}

/// A cuDNN filter descriptor for elements of type `T`: the weights of a
/// convolution, `[k, c, spatial...]` (output channels, input channels per
/// group, then the window).
///
/// `Send` (a cuDNN descriptor is a plain host structure, tied to no handle,
/// stream or thread), not `Sync` (changes go through `&mut self`).
///
/// ```no_run
/// # use cudnn::dnn::FilterDescriptor;
/// let w = FilterDescriptor::<f32>::nchw(64, 3, 7, 7)?;
/// assert_eq!(w.element_count(), 64 * 3 * 7 * 7);
/// # Ok::<(), cudnn::Error>(())
/// ```
pub struct FilterDescriptor<T: DataType> {
    raw: RawFilter,
    format: TensorFormat,
    dims: Dims,
    count: usize,
    _t: PhantomData<T>,
}

impl<T: DataType> FilterDescriptor<T> {
    /// A 4-d filter `k, c, h, w`, stored channels-first.
    ///
    /// # Errors
    /// A size that is 0 or over `i32::MAX`, more than `i32::MAX` elements, an
    /// element type cuDNN filters do not hold; all checked before cuDNN is called.
    #[doc(alias = "cudnnSetFilter4dDescriptor")]
    pub fn nchw(k: usize, c: usize, h: usize, w: usize) -> Result<Self> {
        Self::four_d(TensorFormat::Nchw, [k, c, h, w])
    }

    /// A 4-d filter `k, c, h, w`, stored channels-last (`k, h, w, c` in memory).
    ///
    /// # Errors
    /// As [`nchw`](Self::nchw).
    #[doc(alias = "cudnnSetFilter4dDescriptor")]
    pub fn nhwc(k: usize, c: usize, h: usize, w: usize) -> Result<Self> {
        Self::four_d(TensorFormat::Nhwc, [k, c, h, w])
    }

    fn four_d(format: TensorFormat, dims: [usize; 4]) -> Result<Self> {
        check_filter_dtype::<T>()?;
        let count = validate_filter(&dims)?;
        let dims = Dims::from_slice(&dims);
        let d = dims.to_c();
        let raw = RawFilter::create()?;
        // SAFETY: `raw` is a live descriptor we own; each size was checked to
        // be in 1..=i32::MAX.
        unsafe {
            cudnn_call!(
                check::cudnn()?,
                cudnnSetFilter4dDescriptor(
                    raw.as_ptr(),
                    T::CUDNN,
                    format.to_raw(),
                    d[0],
                    d[1],
                    d[2],
                    d[3]
                )
            )
        }?;
        Ok(Self {
            raw,
            format,
            dims,
            count,
            _t: PhantomData,
        })
    }

    /// An N-d filter (3 to 8 dimensions, `[k, c, spatial...]`) in `format`.
    ///
    /// # Errors
    /// As [`nchw`](Self::nchw), and a dimension count outside 3..=8.
    #[doc(alias = "cudnnSetFilterNdDescriptor")]
    pub fn new(format: TensorFormat, dims: &[usize]) -> Result<Self> {
        check_filter_dtype::<T>()?;
        let count = validate_filter(dims)?;
        let dims = Dims::from_slice(dims);
        let d = dims.to_c();
        let raw = RawFilter::create()?;
        // SAFETY: `raw` is a live descriptor we own; `d` holds `dims.len()`
        // (checked 3..=8) C ints, each checked to be in 1..=i32::MAX.
        unsafe {
            cudnn_call!(
                check::cudnn()?,
                cudnnSetFilterNdDescriptor(
                    raw.as_ptr(),
                    T::CUDNN,
                    format.to_raw(),
                    dims.len() as i32,
                    d.as_ptr()
                )
            )
        }?;
        Ok(Self {
            raw,
            format,
            dims,
            count,
            _t: PhantomData,
        })
    }

    /// The sizes `[k, c, spatial...]`, in this logical order whatever the format.
    pub fn shape(&self) -> &[usize] {
        &self.dims
    }

    /// How many dimensions (spatial dimensions + 2).
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// The memory layout.
    pub fn format(&self) -> TensorFormat {
        self.format
    }

    /// Output channels (`k`).
    pub fn output_channels(&self) -> usize {
        self.dims[0]
    }

    /// Input channels per group (`c`).
    pub fn input_channels(&self) -> usize {
        self.dims[1]
    }

    /// The window sizes (the spatial dimensions).
    pub fn window(&self) -> &[usize] {
        &self.dims[2..]
    }

    /// The number of elements (product of the shape); filters are packed.
    pub fn element_count(&self) -> usize {
        self.count
    }

    /// The size in bytes (what `cudnnGetFilterSizeInBytes` reports).
    #[doc(alias = "cudnnGetFilterSizeInBytes")]
    pub fn bytes(&self) -> usize {
        // count <= i32::MAX and SIZE <= 8: no overflow on 64-bit targets.
        self.count.saturating_mul(T::SIZE)
    }

    /// The raw descriptor, still owned by `self`. Do not set it through this
    /// pointer: the shape kept on the Rust side would no longer match.
    pub fn as_raw(&self) -> dnn::cudnnFilterDescriptor_t {
        self.raw.as_ptr()
    }

    /// Give up ownership of the raw descriptor (the caller destroys it).
    pub fn into_raw(self) -> dnn::cudnnFilterDescriptor_t {
        self.raw.into_raw()
    }

    /// Take ownership of a descriptor made elsewhere, reading its format,
    /// shape and element type back from cuDNN.
    ///
    /// # Errors
    /// A null pointer, an unset descriptor, an element type other than `T`,
    /// a format other than NCHW/NHWC, or a shape this type rejects. On error
    /// the descriptor is left alone (not destroyed).
    ///
    /// # Safety
    /// `raw` was made by `cudnnCreateFilterDescriptor`, is not destroyed, and
    /// nothing else destroys or modifies it from now on.
    #[doc(alias = "cudnnGetFilterNdDescriptor")]
    pub unsafe fn from_raw(raw: dnn::cudnnFilterDescriptor_t) -> Result<Self> {
        if raw.is_null() {
            return Err(Error::invalid("raw", "must not be null", "null"));
        }
        let api = check::cudnn()?;
        let mut dtype = dnn::cudnnDataType_t(u32::MAX);
        let mut format = dnn::cudnnTensorFormat_t(u32::MAX);
        let mut nb = 0i32;
        let mut d = [0i32; MAX_DIMS];
        // SAFETY: the caller promises `raw` is a live filter descriptor; `d`
        // holds the MAX_DIMS entries we ask for.
        unsafe {
            cudnn_call!(
                api,
                cudnnGetFilterNdDescriptor(
                    raw,
                    MAX_DIMS as i32,
                    &mut dtype,
                    &mut format,
                    &mut nb,
                    d.as_mut_ptr()
                )
            )
        }?;
        if dtype != T::CUDNN {
            return Err(Error::mismatch(
                "filter descriptor element type",
                T::NAME,
                format!("cuDNN type {}", dtype.0),
            ));
        }
        check_filter_dtype::<T>()?;
        let format = TensorFormat::from_raw(format)?;
        let n = from_int(|| "nbDims".into(), nb)?;
        check_len("nbDims", n, MIN_DIMS, MAX_DIMS)?;
        let mut dims = [0usize; MAX_DIMS];
        for i in 0..n {
            dims[i] = from_int(|| format!("dims[{i}]"), d[i])?;
        }
        let count = validate_filter(&dims[..n])?;
        // SAFETY: the caller hands us ownership of a live descriptor.
        let raw = unsafe { RawFilter::adopt(raw) }?;
        Ok(Self {
            raw,
            format,
            dims: Dims::from_slice(&dims[..n]),
            count,
            _t: PhantomData,
        })
    }

    /// Destroy the descriptor now and report cuDNN's status (dropping it
    /// ignores the status).
    #[doc(alias = "cudnnDestroyFilterDescriptor")]
    pub fn destroy(self) -> Result<()> {
        self.raw.destroy()
    }
}

impl<T: DataType> fmt::Debug for FilterDescriptor<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FilterDescriptor")
            .field("dtype", &T::NAME)
            .field("format", &self.format)
            .field("shape", &self.dims)
            .field("raw", &self.raw)
            .finish()
    }
}
