//! [`RnnDataDescriptor`]: a padded batch of variable-length sequences
//! (`cudnnRNNDataDescriptor_t`), with its lengths checked.
//!
//! Rules (cuDNN's, found by asking `cudnnSetRNNDataDescriptor` of cuDNN
//! 8.9.7 and 9.28; the host tier compares them over random batches):
//! - `max_seq_len`, `batch`, `vector_size` in `1..=i32::MAX`;
//! - one length per sequence (`lengths.len() == batch`; cuDNN 8.9 crashes
//!   on a missing array), each in `0..=max_seq_len` for the unpacked
//!   layouts;
//! - [`RnnDataLayout::SeqMajorPacked`]: each length in `1..=max_seq_len`,
//!   non-increasing, the first equal to `max_seq_len` (cuDNN 9 refuses the
//!   rest; cuDNN 8.9 accepts unsorted lengths and gives wrong results, so
//!   this crate refuses them on both);
//! - the element type is `f32`, `f64`, `f16` or `bf16` (bf16 where the library has it: 9.19, not 8.9 or 9.10).
//!
//! Stricter than cuDNN: the padded element count `max_seq_len * batch *
//! vector_size` must be at most `i32::MAX` (cuDNN accepts some larger).

use std::fmt;
use std::marker::PhantomData;

use crate::check::{self, cudnn_call};
use crate::dnn::tensor::descriptor_owner;
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::sys::cudnn as dnn;

descriptor_owner!(
    /// Owns a `cudnnRNNDataDescriptor_t`.
    RawRnnData,
    cudnnRNNDataStruct,
    cudnnCreateRNNDataDescriptor,
    cudnnDestroyRNNDataDescriptor
);

/// How a batch of sequences lies in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RnnDataLayout {
    /// `[max_seq_len, batch, vector]`, padded
    /// (`CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED`).
    #[default]
    SeqMajorUnpacked,
    /// Time-major without padding, sequences sorted longest first
    /// (`CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED`).
    SeqMajorPacked,
    /// `[batch, max_seq_len, vector]`, padded
    /// (`CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED`).
    BatchMajorUnpacked,
}

impl RnnDataLayout {
    /// Every layout.
    pub const ALL: [RnnDataLayout; 3] = [
        RnnDataLayout::SeqMajorUnpacked,
        RnnDataLayout::SeqMajorPacked,
        RnnDataLayout::BatchMajorUnpacked,
    ];

    /// The cuDNN constant.
    pub fn to_raw(self) -> dnn::cudnnRNNDataLayout_t {
        use dnn::cudnnRNNDataLayout_t as L;
        match self {
            RnnDataLayout::SeqMajorUnpacked => L::CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED,
            RnnDataLayout::SeqMajorPacked => L::CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED,
            RnnDataLayout::BatchMajorUnpacked => L::CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED,
        }
    }

    /// From the cuDNN constant; unknown values are an error.
    pub fn from_raw(raw: dnn::cudnnRNNDataLayout_t) -> Result<Self> {
        RnnDataLayout::ALL
            .into_iter()
            .find(|m| m.to_raw() == raw)
            .ok_or_else(|| Error::invalid("layout", "unknown cudnnRNNDataLayout_t", raw.0))
    }

    /// The offset, in vectors, of step `t` of sequence `b` (padded layouts:
    /// `t < max_seq_len`; packed: `t < lengths[b]`), or `None` where the
    /// packed layout has no such step.
    pub fn vector_index(
        self,
        lengths: &[usize],
        max_seq_len: usize,
        t: usize,
        b: usize,
    ) -> Option<usize> {
        let batch = lengths.len();
        match self {
            RnnDataLayout::SeqMajorUnpacked => t.checked_mul(batch)?.checked_add(b),
            RnnDataLayout::BatchMajorUnpacked => b.checked_mul(max_seq_len)?.checked_add(t),
            RnnDataLayout::SeqMajorPacked => {
                if t >= *lengths.get(b)? {
                    return None;
                }
                // Steps before t hold every sequence at least that long:
                // sequence `i` appears in `min(lengths[i], t)` of them
                // (one pass over the batch, whatever `t` is).
                lengths
                    .iter()
                    .try_fold(0usize, |n, &l| n.checked_add(l.min(t)))?
                    .checked_add(b)
            }
        }
    }
}

/// Check a batch's sizes and lengths against cuDNN's rules (found by
/// asking `cudnnSetRNNDataDescriptor` of cuDNN 8.9.7 and 9.28; the host
/// tier compares them over random batches):
///
/// - `max_seq_len`, `vector_size` and the batch (`lengths.len()`) in
///   `1..=i32::MAX` (cuDNN 8.9 crashes on a missing length array);
/// - each length in `0..=max_seq_len` for the padded layouts (the
///   descriptor takes 0; [`RnnPlan::new`](super::RnnPlan::new) refuses it,
///   as cuDNN's forward gave such a sequence `hy = 0`);
/// - [`RnnDataLayout::SeqMajorPacked`]: each length in `1..=max_seq_len`,
///   non-increasing, the first equal to `max_seq_len` (cuDNN 9 refuses the
///   rest; cuDNN 8.9 accepts unsorted lengths, so this crate refuses them
///   on both);
/// - the element type is `f32`, `f64`, `f16` or `bf16` (bf16 where the library has it: 9.19, not 8.9 or 9.10).
///
/// Stricter than cuDNN: the padded element count `max_seq_len * batch *
/// vector_size` must be at most `i32::MAX` (cuDNN accepts some larger).
///
/// # Errors
/// [`Error::InvalidArgument`] naming the argument (`lengths[3]`) and value.
pub fn check_rnn_data<T: DataType>(
    layout: RnnDataLayout,
    max_seq_len: usize,
    vector_size: usize,
    lengths: &[usize],
) -> Result<()> {
    use dnn::cudnnDataType_t as D;
    if !matches!(
        T::CUDNN,
        D::CUDNN_DATA_FLOAT | D::CUDNN_DATA_DOUBLE | D::CUDNN_DATA_HALF | D::CUDNN_DATA_BFLOAT16
    ) {
        return Err(Error::invalid(
            "element type",
            "RNN data must be f32, f64, f16 or bf16",
            T::NAME,
        ));
    }
    let pos = |arg: &str, v: usize| -> Result<()> {
        if v == 0 {
            return Err(Error::invalid(arg, "must be >= 1", v));
        }
        if v > i32::MAX as usize {
            return Err(Error::invalid(arg, "must be at most i32::MAX", v));
        }
        Ok(())
    };
    pos("max_seq_len", max_seq_len)?;
    pos("vector_size", vector_size)?;
    pos("batch (lengths.len())", lengths.len())?;
    let count = max_seq_len
        .checked_mul(lengths.len())
        .and_then(|n| n.checked_mul(vector_size));
    if count.is_none_or(|n| n > i32::MAX as usize) {
        return Err(Error::invalid(
            "max_seq_len * batch * vector_size",
            "must be at most i32::MAX",
            format!("{max_seq_len} * {} * {vector_size}", lengths.len()),
        ));
    }
    let packed = layout == RnnDataLayout::SeqMajorPacked;
    let mut prev = max_seq_len;
    for (i, &l) in lengths.iter().enumerate() {
        if l > max_seq_len {
            return Err(Error::invalid(
                format!("lengths[{i}]"),
                format!("must be at most max_seq_len ({max_seq_len})"),
                l,
            ));
        }
        if packed {
            if l == 0 {
                return Err(Error::invalid(
                    format!("lengths[{i}]"),
                    "must be >= 1 in the packed layout",
                    l,
                ));
            }
            if l > prev {
                return Err(Error::invalid(
                    format!("lengths[{i}]"),
                    format!(
                        "the packed layout needs non-increasing lengths (lengths[{}] = {prev})",
                        i.saturating_sub(1)
                    ),
                    l,
                ));
            }
            prev = l;
        }
    }
    if packed && lengths.first() != Some(&max_seq_len) {
        return Err(Error::invalid(
            "lengths[0]",
            format!("must equal max_seq_len ({max_seq_len}) in the packed layout"),
            lengths.first().copied().unwrap_or(0),
        ));
    }
    Ok(())
}

/// A batch of sequences of `vector_size`-element vectors, of type `T`:
/// a checked `cudnnRNNDataDescriptor_t` with the lengths it was made with.
/// Host only (no handle, no device).
pub struct RnnDataDescriptor<T: DataType> {
    raw: RawRnnData,
    layout: RnnDataLayout,
    max_seq_len: usize,
    vector_size: usize,
    lengths: Vec<usize>,
    _t: PhantomData<T>,
}

impl<T: DataType> fmt::Debug for RnnDataDescriptor<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RnnDataDescriptor")
            .field("dtype", &T::NAME)
            .field("layout", &self.layout)
            .field("max_seq_len", &self.max_seq_len)
            .field("vector_size", &self.vector_size)
            .field("lengths", &self.lengths)
            .finish()
    }
}

impl<T: DataType> RnnDataDescriptor<T> {
    /// Check ([`check_rnn_data`]) and set a batch of `lengths.len()`
    /// sequences, with a padding fill of 0 (`T::default()`): in an
    /// unpacked layout, cuDNN writes the fill at the padded positions of an
    /// output (`y`, `dx`) described by this descriptor. (0 is the value a
    /// PyTorch user sees at padded steps, but PyTorch does not get it from
    /// cuDNN's fill: it sends variable lengths to cuDNN packed,
    /// `CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED`, which has no padding, and
    /// its zeros come from `pad_packed_sequence`.)
    /// [`with_padding_fill`](Self::with_padding_fill) sets another value.
    ///
    /// # Errors
    /// The check's errors, then what cuDNN reports.
    #[doc(alias = "cudnnSetRNNDataDescriptor")]
    pub fn new(
        layout: RnnDataLayout,
        max_seq_len: usize,
        vector_size: usize,
        lengths: &[usize],
    ) -> Result<Self> {
        Self::with_padding_fill(layout, max_seq_len, vector_size, lengths, T::default())
    }

    /// As [`new`](Self::new), with `fill` written at the padded positions
    /// of an output in an unpacked layout (cuDNN's `paddingFill`, read in
    /// `T`'s own encoding: 2 bytes for f16 / bf16, 4 for f32, 8 for f64, as
    /// the host tier reads it back). A packed layout has no padding; the
    /// fill is stored and unused.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    #[doc(alias = "cudnnSetRNNDataDescriptor")]
    pub fn with_padding_fill(
        layout: RnnDataLayout,
        max_seq_len: usize,
        vector_size: usize,
        lengths: &[usize],
        fill: T,
    ) -> Result<Self> {
        check_rnn_data::<T>(layout, max_seq_len, vector_size, lengths)?;
        let mut fill_bytes = fill_buffer(fill)?;
        let version = crate::dnn::Handle::library_version()?;
        let bf16 = T::CUDNN == dnn::cudnnDataType_t::CUDNN_DATA_BFLOAT16;
        if bf16 && version.major < 9 {
            return Err(super::config::bf16_unsupported("RNN data", version));
        }
        let c_lengths: Vec<i32> = lengths
            .iter()
            .map(|&l| i32::try_from(l).unwrap_or(i32::MAX))
            .collect();
        let raw = RawRnnData::create()?;
        let as_i32 = |v: usize| i32::try_from(v).unwrap_or(i32::MAX);
        // SAFETY: live descriptor; `c_lengths` holds exactly `batch` ints and
        // outlives the call (cuDNN copies it); `fill_bytes` is 8 bytes (the
        // widest element type; cuDNN reads T::SIZE of them, measured) and
        // outlives the call (cuDNN copies the value).
        unsafe {
            cudnn_call!(
                check::cudnn()?,
                cudnnSetRNNDataDescriptor(
                    raw.as_ptr(),
                    T::CUDNN,
                    layout.to_raw(),
                    as_i32(max_seq_len),
                    as_i32(lengths.len()),
                    as_i32(vector_size),
                    c_lengths.as_ptr(),
                    fill_bytes.as_mut_ptr().cast()
                )
            )
        }
        .map_err(|e| {
            if bf16 && super::config::is_not_supported(&e) {
                super::config::bf16_unsupported("RNN data", version)
            } else {
                e
            }
        })?;
        Ok(RnnDataDescriptor {
            raw,
            layout,
            max_seq_len,
            vector_size,
            lengths: lengths.to_vec(),
            _t: PhantomData,
        })
    }

    /// The layout.
    pub fn layout(&self) -> RnnDataLayout {
        self.layout
    }

    /// The longest sequence allowed (the padded length).
    pub fn max_seq_len(&self) -> usize {
        self.max_seq_len
    }

    /// Sequences in the batch.
    pub fn batch(&self) -> usize {
        self.lengths.len()
    }

    /// Elements per step.
    pub fn vector_size(&self) -> usize {
        self.vector_size
    }

    /// Each sequence's length.
    pub fn lengths(&self) -> &[usize] {
        &self.lengths
    }

    /// The lengths as the C ints cuDNN reads on the device.
    pub fn lengths_i32(&self) -> Vec<i32> {
        self.lengths
            .iter()
            .map(|&l| i32::try_from(l).unwrap_or(i32::MAX))
            .collect()
    }

    /// Elements a buffer for this batch holds: `max_seq_len * batch *
    /// vector_size` for the padded layouts, `sum(lengths) * vector_size`
    /// for the packed one (both checked at construction to fit).
    pub fn len_required(&self) -> usize {
        let steps = match self.layout {
            RnnDataLayout::SeqMajorPacked => self.lengths.iter().sum(),
            _ => self.max_seq_len.saturating_mul(self.lengths.len()),
        };
        steps.saturating_mul(self.vector_size)
    }

    /// The raw descriptor, still owned by `self`.
    pub fn as_raw(&self) -> dnn::cudnnRNNDataDescriptor_t {
        self.raw.as_ptr()
    }

    /// Give up ownership of the raw descriptor (the caller destroys it).
    pub fn into_raw(self) -> dnn::cudnnRNNDataDescriptor_t {
        self.raw.into_raw()
    }

    /// Destroy now, reporting cuDNN's status (dropping ignores it).
    ///
    /// # Errors
    /// What `cudnnDestroyRNNDataDescriptor` reports.
    pub fn destroy(self) -> Result<()> {
        self.raw.destroy()
    }

    /// Take ownership of a data descriptor made elsewhere, for a batch of
    /// `batch` sequences; its values are read back and checked as
    /// [`new`](Self::new) checks them.
    ///
    /// # Errors
    /// Another element type or batch size, or values [`check_rnn_data`]
    /// refuses; then `raw` is destroyed.
    ///
    /// # Safety
    /// `raw` was made by `cudnnCreateRNNDataDescriptor`, is set, not
    /// destroyed, and nothing else destroys it.
    pub unsafe fn from_raw(raw: dnn::cudnnRNNDataDescriptor_t, batch: usize) -> Result<Self> {
        // SAFETY: the caller's contract.
        let raw = unsafe { RawRnnData::adopt(raw) }?;
        // The batch first (no lengths asked for), then exactly its lengths.
        let (_, _, _, b, _, _) = read_values(&raw, 0)?;
        if usize::try_from(b).ok() != Some(batch) {
            return Err(Error::mismatch("RNN data descriptor batch", batch, b));
        }
        let (dt, layout, t, b, v, lens) = read_values(&raw, batch)?;
        let mut d = RnnDataDescriptor {
            raw,
            layout: RnnDataLayout::SeqMajorUnpacked,
            max_seq_len: 0,
            vector_size: 0,
            lengths: Vec::new(),
            _t: PhantomData,
        };
        if dt != T::CUDNN.0 {
            return Err(Error::mismatch(
                "RNN data descriptor data type",
                T::NAME,
                dt,
            ));
        }
        if usize::try_from(b).ok() != Some(batch) {
            return Err(Error::mismatch("RNN data descriptor batch", batch, b));
        }
        let size = |arg: &str, x: i32| {
            usize::try_from(x).map_err(|_| Error::invalid(arg, "must be >= 0", x))
        };
        d.layout = RnnDataLayout::from_raw(dnn::cudnnRNNDataLayout_t(layout))?;
        d.max_seq_len = size("max_seq_len", t)?;
        d.vector_size = size("vector_size", v)?;
        d.lengths = lens
            .iter()
            .enumerate()
            .map(|(i, &l)| size(&format!("lengths[{i}]"), l))
            .collect::<Result<_>>()?;
        check_rnn_data::<T>(d.layout, d.max_seq_len, d.vector_size, &d.lengths)?;
        Ok(d)
    }

    /// The padding fill cuDNN stored (read back with
    /// `cudnnGetRNNDataDescriptor`, in `T`'s encoding).
    ///
    /// # Errors
    /// What cuDNN reports.
    #[doc(alias = "cudnnGetRNNDataDescriptor")]
    pub fn padding_fill(&self) -> Result<T> {
        let (_, fill) = read_all(&self.raw, 0)?;
        Ok(from_fill_buffer(&fill))
    }

    /// Read back what cuDNN stored: `(data type, layout, max_seq_len,
    /// batch, vector_size, lengths)`.
    ///
    /// # Errors
    /// What cuDNN reports.
    #[doc(alias = "cudnnGetRNNDataDescriptor")]
    pub fn values(&self) -> Result<(u32, u32, i32, i32, i32, Vec<i32>)> {
        read_values(&self.raw, self.lengths.len())
    }
}

/// `fill`'s bytes at the start of an 8-byte buffer (the widest element
/// type), the rest 0: what `paddingFill` points at.
fn fill_buffer<T: DataType>(fill: T) -> Result<[u8; 8]> {
    let mut out = [0u8; 8];
    let n = std::mem::size_of::<T>();
    if n > out.len() {
        return Err(Error::invalid("fill", "must be at most 8 bytes", T::NAME));
    }
    // SAFETY: `fill` is a live `T` of `n <= 8` bytes; DataType types are
    // plain numbers without padding bytes, so every byte is initialized;
    // the destination has room for `n` bytes and does not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping((&fill as *const T).cast::<u8>(), out.as_mut_ptr(), n);
    }
    Ok(out)
}

/// The `T` in the first `size_of::<T>()` bytes of `buf` (0 if T were wider
/// than 8 bytes, which no DataType is).
fn from_fill_buffer<T: DataType>(buf: &[u8; 8]) -> T {
    if std::mem::size_of::<T>() > buf.len() {
        return T::default();
    }
    // SAFETY: `buf` holds at least size_of::<T>() bytes (checked); any bit
    // pattern is a valid DataType value (the trait's documented rule);
    // read_unaligned needs no alignment.
    unsafe { std::ptr::read_unaligned(buf.as_ptr().cast::<T>()) }
}

/// `cudnnGetRNNDataDescriptor`, asking for `n` lengths (0: none).
fn read_values(raw: &RawRnnData, n: usize) -> Result<(u32, u32, i32, i32, i32, Vec<i32>)> {
    read_all(raw, n).map(|(v, _)| v)
}

/// [`read_values`] and the padding fill's 8-byte buffer.
#[allow(clippy::type_complexity)]
fn read_all(raw: &RawRnnData, n: usize) -> Result<((u32, u32, i32, i32, i32, Vec<i32>), [u8; 8])> {
    let mut dt = dnn::cudnnDataType_t(0);
    let mut layout = dnn::cudnnRNNDataLayout_t(0);
    let (mut t, mut b, mut v) = (0i32, 0i32, 0i32);
    let mut lens = vec![0i32; n];
    let mut fill = [0u8; 8];
    let ptr = if n == 0 {
        std::ptr::null_mut()
    } else {
        lens.as_mut_ptr()
    };
    // SAFETY: live descriptor; `lens` holds `n` ints (the length asked
    // for; none and a null pointer for 0), `fill` 8 bytes (the widest
    // element type).
    unsafe {
        cudnn_call!(
            check::cudnn()?,
            cudnnGetRNNDataDescriptor(
                raw.as_ptr(),
                &mut dt,
                &mut layout,
                &mut t,
                &mut b,
                &mut v,
                i32::try_from(n).unwrap_or(i32::MAX),
                ptr,
                fill.as_mut_ptr().cast()
            )
        )
    }?;
    Ok(((dt.0, layout.0, t, b, v, lens), fill))
}

/// Set raw values on a fresh data descriptor with no Rust check first
/// (`lengths` must hold `batch` values; the host tier's way to ask cuDNN
/// what it accepts). `Ok` when cuDNN accepts.
///
/// # Errors
/// [`Error::InvalidArgument`] when `lengths.len() != batch` (cuDNN would
/// read past it), else what cuDNN reports.
#[doc(hidden)]
pub fn cudnn_accepts_rnn_data_raw(
    data_type: dnn::cudnnDataType_t,
    layout: RnnDataLayout,
    max_seq_len: i32,
    batch: i32,
    vector_size: i32,
    lengths: &[i32],
) -> Result<()> {
    if usize::try_from(batch).ok() != Some(lengths.len()) {
        return Err(Error::invalid(
            "lengths",
            "must hold batch values",
            lengths.len(),
        ));
    }
    let raw = RawRnnData::create()?;
    // SAFETY: live descriptor; `lengths` holds `batch` ints (checked).
    unsafe {
        cudnn_call!(
            check::cudnn()?,
            cudnnSetRNNDataDescriptor(
                raw.as_ptr(),
                data_type,
                layout.to_raw(),
                max_seq_len,
                batch,
                vector_size,
                lengths.as_ptr(),
                std::ptr::null_mut()
            )
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_packed_index_by_hand() {
        // lengths 3, 2, 1: step 0 holds b0 b1 b2, step 1 b0 b1, step 2 b0.
        let l = [3, 2, 1];
        let p = RnnDataLayout::SeqMajorPacked;
        assert_eq!(p.vector_index(&l, 3, 0, 2), Some(2));
        assert_eq!(p.vector_index(&l, 3, 1, 1), Some(4));
        assert_eq!(p.vector_index(&l, 3, 2, 0), Some(5));
        assert_eq!(p.vector_index(&l, 3, 2, 1), None);
        assert_eq!(
            RnnDataLayout::BatchMajorUnpacked.vector_index(&l, 3, 2, 1),
            Some(5)
        );
        assert_eq!(
            RnnDataLayout::SeqMajorUnpacked.vector_index(&l, 3, 2, 1),
            Some(7)
        );
    }

    /// Time linear in the batch, not in `t`: huge steps answer at once
    /// (the step-by-step sum took `t * batch` iterations), and overflow
    /// is `None`, not a panic.
    #[test]
    fn unit_packed_index_huge_steps() {
        let p = RnnDataLayout::SeqMajorPacked;
        let big = usize::MAX / 2;
        let start = std::time::Instant::now();
        assert_eq!(
            p.vector_index(&[big, big - 1], big, big - 2, 1),
            Some(2 * (big - 2) + 1)
        );
        assert_eq!(
            p.vector_index(&[usize::MAX, usize::MAX], 1, usize::MAX - 1, 1),
            None
        );
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn unit_length_rules_name_the_index() {
        let e = check_rnn_data::<f32>(RnnDataLayout::SeqMajorUnpacked, 4, 2, &[4, 5]).unwrap_err();
        assert!(e.to_string().contains("lengths[1]"), "{e}");
        let e = check_rnn_data::<f32>(RnnDataLayout::SeqMajorPacked, 4, 2, &[4, 1, 2]).unwrap_err();
        assert!(e.to_string().contains("lengths[2]"), "{e}");
        let e = check_rnn_data::<f32>(RnnDataLayout::SeqMajorPacked, 4, 2, &[3, 1]).unwrap_err();
        assert!(e.to_string().contains("lengths[0]"), "{e}");
        assert!(check_rnn_data::<f32>(RnnDataLayout::BatchMajorUnpacked, 4, 2, &[0, 4]).is_ok());
        assert!(check_rnn_data::<f32>(RnnDataLayout::BatchMajorUnpacked, 4, 2, &[]).is_err());
        assert!(check_rnn_data::<i32>(RnnDataLayout::BatchMajorUnpacked, 4, 2, &[1]).is_err());
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(2000))]

        /// For lengths the check accepts, `vector_index` maps the valid
        /// steps of every layout one-to-one into the buffer
        /// `len_required / vector_size` vectors long.
        #[test]
        fn unit_property_vector_index_is_a_bijection(
            layout in 0usize..3,
            max_len in 1usize..7,
            mut lengths in proptest::collection::vec(0usize..7, 1..6),
        ) {
            let layout = RnnDataLayout::ALL[layout];
            for l in &mut lengths {
                *l = (*l).min(max_len);
            }
            if layout == RnnDataLayout::SeqMajorPacked {
                lengths.sort_unstable_by(|a, b| b.cmp(a));
                lengths[0] = max_len;
                for l in &mut lengths {
                    *l = (*l).max(1);
                }
            }
            proptest::prop_assert!(check_rnn_data::<f32>(layout, max_len, 1, &lengths).is_ok());
            let slots = match layout {
                RnnDataLayout::SeqMajorPacked => lengths.iter().sum(),
                _ => max_len * lengths.len(),
            };
            let mut seen = vec![false; slots];
            for (b, &len) in lengths.iter().enumerate() {
                for t in 0..max_len {
                    match layout.vector_index(&lengths, max_len, t, b) {
                        Some(i) => {
                            proptest::prop_assert!(t < len || layout != RnnDataLayout::SeqMajorPacked);
                            proptest::prop_assert!(i < slots && !seen[i], "t {} b {} -> {}", t, b, i);
                            seen[i] = true;
                        }
                        None => proptest::prop_assert!(layout == RnnDataLayout::SeqMajorPacked && t >= len),
                    }
                }
            }
            proptest::prop_assert!(seen.iter().all(|&v| v));
        }
    }
}
