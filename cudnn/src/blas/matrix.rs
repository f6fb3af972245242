//! Matrix layouts and device matrix views.
//!
//! A [`Layout`] describes how a matrix lies in memory: its stored rows and
//! columns, the leading dimension, row- or column-major order, whether it is
//! used transposed, and (for batches) how many matrices follow each other at
//! which stride. GEMM calls take layouts, never raw `transa`/`lda`
//! arguments, so a row-major user writes `C = A·B` with row-major layouts
//! and never swaps operands by hand: the library call is worked out here.

use std::fmt;

use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::runtime::{DeviceSlice, DeviceSliceMut};

/// How the elements of a stored matrix follow each other in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Order {
    /// Row after row (C, NumPy, PyTorch): element `(r, c)` at `r * ld + c`.
    RowMajor,
    /// Column after column (Fortran, BLAS): element `(r, c)` at `r + c * ld`.
    ColMajor,
}

impl fmt::Display for Order {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Order::RowMajor => "row-major",
            Order::ColMajor => "column-major",
        })
    }
}

/// The shape and memory layout of a matrix (or a strided batch of them).
///
/// The *stored* matrix has [`stored_rows`](Layout::stored_rows) x
/// [`stored_cols`](Layout::stored_cols) elements in [`order`](Layout::order)
/// with leading dimension [`ld`](Layout::ld) (the distance between rows for
/// row-major, between columns for column-major). [`t`](Layout::t) marks it
/// as used transposed; [`rows`](Layout::rows) and [`cols`](Layout::cols) are
/// the *logical* shape, after that transpose, which is what GEMM shapes are
/// checked against.
///
/// Constructors do no checking (they are `const`); every operation that uses
/// a layout checks it first and names the argument in its error
/// ([`validate`](Layout::validate)).
///
/// ```
/// use cudnn::blas::{Layout, Order};
/// // A 3x4 row-major matrix, packed (ld = 4) ...
/// let w = Layout::row_major(3, 4);
/// assert_eq!((w.rows(), w.cols(), w.ld()), (3, 4, 4));
/// // ... used transposed, as a 4x3 operand.
/// let wt = w.t();
/// assert_eq!((wt.rows(), wt.cols(), wt.order()), (4, 3, Order::RowMajor));
/// // Element (i, j) of the logical matrix:
/// assert_eq!(wt.offset(0, 2, 1), Some(1 * 4 + 2));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layout {
    rows: usize,
    cols: usize,
    ld: usize,
    order: Order,
    transposed: bool,
    batch: usize,
    stride: usize,
}

impl Layout {
    /// A packed matrix of `rows` x `cols` in `order` (`ld` = the inner
    /// extent, at least 1).
    pub const fn new(order: Order, rows: usize, cols: usize) -> Self {
        let mut l = Layout {
            rows,
            cols,
            ld: 1,
            order,
            transposed: false,
            batch: 1,
            stride: 0,
        };
        l.ld = l.min_ld();
        l
    }

    /// A packed row-major `rows` x `cols` matrix (`ld = cols`, at least 1).
    pub const fn row_major(rows: usize, cols: usize) -> Self {
        Self::new(Order::RowMajor, rows, cols)
    }

    /// A packed column-major `rows` x `cols` matrix (`ld = rows`, at least 1).
    pub const fn col_major(rows: usize, cols: usize) -> Self {
        Self::new(Order::ColMajor, rows, cols)
    }

    /// The same matrix with leading dimension `ld` (elements between the
    /// starts of consecutive rows for row-major, columns for column-major).
    pub const fn with_ld(mut self, ld: usize) -> Self {
        self.ld = ld;
        self
    }

    /// The same memory used transposed: the logical shape swaps. Applying it
    /// twice gives the original layout.
    pub const fn t(mut self) -> Self {
        self.transposed = !self.transposed;
        self
    }

    /// A strided batch: `count` matrices of this layout, matrix `i` starting
    /// `i * stride` elements after the first. Stride 0 repeats one matrix
    /// (allowed for inputs; an output's matrices must not overlap).
    pub const fn batched(mut self, count: usize, stride: usize) -> Self {
        self.batch = count;
        self.stride = stride;
        self
    }

    /// Logical rows (after the transpose, if any).
    pub const fn rows(&self) -> usize {
        if self.transposed {
            self.cols
        } else {
            self.rows
        }
    }

    /// Logical columns (after the transpose, if any).
    pub const fn cols(&self) -> usize {
        if self.transposed {
            self.rows
        } else {
            self.cols
        }
    }

    /// Rows of the stored matrix.
    pub const fn stored_rows(&self) -> usize {
        self.rows
    }

    /// Columns of the stored matrix.
    pub const fn stored_cols(&self) -> usize {
        self.cols
    }

    /// The leading dimension, in elements.
    pub const fn ld(&self) -> usize {
        self.ld
    }

    /// The stored matrix's order.
    pub const fn order(&self) -> Order {
        self.order
    }

    /// Whether the stored matrix is used transposed.
    pub const fn is_transposed(&self) -> bool {
        self.transposed
    }

    /// Matrices in the batch (1 for a single matrix).
    pub const fn batch_count(&self) -> usize {
        self.batch
    }

    /// Elements between the starts of consecutive matrices of the batch.
    pub const fn batch_stride(&self) -> usize {
        self.stride
    }

    /// Whether consecutive elements of a logical *column* are adjacent in
    /// memory (column-major not transposed, or row-major transposed): the
    /// layout cuBLAS calls "no transpose".
    pub const fn is_column_contiguous(&self) -> bool {
        matches!(
            (self.order, self.transposed),
            (Order::ColMajor, false) | (Order::RowMajor, true)
        )
    }

    /// The logical matrix's `(row stride, column stride)` in elements:
    /// element `(i, j)` is at `i * row_stride + j * col_stride`.
    pub const fn strides(&self) -> (usize, usize) {
        if self.is_column_contiguous() {
            (1, self.ld)
        } else {
            (self.ld, 1)
        }
    }

    /// The smallest valid leading dimension for this stored shape and order
    /// (the inner extent, at least 1).
    pub const fn min_ld(&self) -> usize {
        let inner = match self.order {
            Order::RowMajor => self.cols,
            Order::ColMajor => self.rows,
        };
        if inner == 0 { 1 } else { inner }
    }

    /// Elements one matrix covers, from its first element to its last
    /// (0 for an empty matrix); `None` when it overflows `usize`.
    pub fn span(&self) -> Option<usize> {
        if self.rows == 0 || self.cols == 0 {
            return Some(0);
        }
        let (rs, cs) = self.strides();
        let last_row = self.rows().checked_sub(1)?.checked_mul(rs)?;
        let last_col = self.cols().checked_sub(1)?.checked_mul(cs)?;
        last_row.checked_add(last_col)?.checked_add(1)
    }

    /// Elements a buffer must hold for the whole batch; `None` on overflow.
    pub fn required_len(&self) -> Option<usize> {
        let span = self.span()?;
        if span == 0 || self.batch == 0 {
            return Some(0);
        }
        (self.batch - 1).checked_mul(self.stride)?.checked_add(span)
    }

    /// The offset of logical element `(i, j)` of matrix `batch`, or `None`
    /// when an index is out of range (or the offset overflows).
    pub fn offset(&self, batch: usize, i: usize, j: usize) -> Option<usize> {
        if batch >= self.batch || i >= self.rows() || j >= self.cols() {
            return None;
        }
        let (rs, cs) = self.strides();
        batch
            .checked_mul(self.stride)?
            .checked_add(i.checked_mul(rs)?)?
            .checked_add(j.checked_mul(cs)?)
    }

    /// Check the layout on its own: `ld` at least [`min_ld`](Layout::min_ld),
    /// a batch of at least one matrix, and sizes that fit in `usize`.
    /// Errors name `name` (`"a"`, `"c"`, ...) and the field.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`].
    pub fn validate(&self, name: &str) -> Result<()> {
        let min = self.min_ld();
        if self.ld < min {
            let inner = match self.order {
                Order::RowMajor => "columns",
                Order::ColMajor => "rows",
            };
            return Err(Error::invalid(
                format!("{name}.ld"),
                format!(
                    "must be >= {min} (the {inner} of the stored {}x{} {} matrix, and >= 1)",
                    self.rows, self.cols, self.order
                ),
                self.ld,
            ));
        }
        if self.batch == 0 {
            return Err(Error::invalid(
                format!("{name}.batch_count"),
                "must be >= 1",
                0,
            ));
        }
        if self.span().is_none() {
            return Err(Error::invalid(
                name,
                "rows, cols and ld overflow usize",
                self.describe(),
            ));
        }
        if self.required_len().is_none() {
            return Err(Error::invalid(
                format!("{name}.batch_stride"),
                format!(
                    "batch_count ({}) x batch_stride overflows usize",
                    self.batch
                ),
                self.stride,
            ));
        }
        Ok(())
    }

    /// Check that the matrices of an *output* batch do not overlap: with
    /// more than one matrix, the stride must be at least one matrix's span.
    /// (This refuses some interleaved layouts that would not overlap; it
    /// keeps the rule simple and certain.)
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming `{name}.batch_stride`.
    pub fn validate_output(&self, name: &str) -> Result<()> {
        self.validate(name)?;
        let span = self.span().unwrap_or(usize::MAX);
        if self.batch > 1 && span > 0 && self.stride < span {
            return Err(Error::invalid(
                format!("{name}.batch_stride"),
                format!(
                    "must be >= {span} (the span of one {}x{} output matrix with ld {}) so the {} outputs do not overlap",
                    self.rows(),
                    self.cols(),
                    self.ld,
                    self.batch
                ),
                self.stride,
            ));
        }
        Ok(())
    }

    /// Check a buffer of `len` elements holds the whole layout.
    ///
    /// # Errors
    /// [`Error::Mismatch`] naming `{name}` and both lengths.
    pub fn check_len(&self, name: &str, len: usize) -> Result<()> {
        let need = self.required_len().ok_or_else(|| {
            Error::invalid(
                name,
                "rows, cols, ld and batch overflow usize",
                self.describe(),
            )
        })?;
        if len < need {
            return Err(Error::mismatch(
                format!("{name} buffer length (elements, for {})", self.describe()),
                format!(">= {need}"),
                len,
            ));
        }
        Ok(())
    }

    /// A short description for errors: `"3x4 row-major (ld 4), transposed, batch 2 stride 12"`.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{}x{} {} (ld {})",
            self.rows, self.cols, self.order, self.ld
        );
        if self.transposed {
            s.push_str(", transposed");
        }
        if self.batch != 1 {
            s.push_str(&format!(", batch {} stride {}", self.batch, self.stride));
        }
        s
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// A read-only matrix in device memory: a buffer and its [`Layout`].
///
/// Nothing is checked here; the operation that takes the matrix checks the
/// layout and that the buffer is long enough, and names the argument.
#[derive(Debug, Clone, Copy)]
pub struct Matrix<'a, T: DataType> {
    data: DeviceSlice<'a, T>,
    layout: Layout,
}

impl<'a, T: DataType> Matrix<'a, T> {
    /// A matrix over `data` laid out as `layout`.
    pub fn new(data: impl Into<DeviceSlice<'a, T>>, layout: Layout) -> Self {
        Matrix {
            data: data.into(),
            layout,
        }
    }

    /// The memory.
    pub fn data(&self) -> DeviceSlice<'a, T> {
        self.data
    }

    /// The layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The same memory used transposed.
    pub fn t(self) -> Self {
        Matrix {
            data: self.data,
            layout: self.layout.t(),
        }
    }
}

/// A writable matrix in device memory: a buffer and its [`Layout`].
#[derive(Debug)]
pub struct MatrixMut<'a, T: DataType> {
    data: DeviceSliceMut<'a, T>,
    layout: Layout,
}

impl<'a, T: DataType> MatrixMut<'a, T> {
    /// A writable matrix over `data` laid out as `layout`.
    pub fn new(data: impl Into<DeviceSliceMut<'a, T>>, layout: Layout) -> Self {
        MatrixMut {
            data: data.into(),
            layout,
        }
    }

    /// The layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// A read-only view of the same matrix.
    pub fn as_matrix(&self) -> Matrix<'_, T> {
        Matrix {
            data: self.data.as_slice(),
            layout: self.layout,
        }
    }

    /// A shorter-lived writable view of the same matrix.
    pub fn reborrow(&mut self) -> MatrixMut<'_, T> {
        MatrixMut {
            data: self.data.reborrow(),
            layout: self.layout,
        }
    }

    /// The memory, read-only.
    pub fn data(&self) -> DeviceSlice<'_, T> {
        self.data.as_slice()
    }

    /// The memory, writable, for a shorter lifetime.
    pub fn data_mut(&mut self) -> DeviceSliceMut<'_, T> {
        self.data.reborrow()
    }

    /// The memory, writable.
    pub fn into_data(self) -> DeviceSliceMut<'a, T> {
        self.data
    }
}
