//! The E8M0 element type: an unsigned power of two, the block scale of
//! MXFP8 (OCP Microscaling). Code `c` in `0..=254` is `2^(c - 127)`;
//! `0xFF` is NaN. There is no zero, no sign and no infinity.

/// An E8M0 value (`CUDNN_DATA_FP8_E8M0`, `CUDA_R_8F_UE8M0`): `2^(bits - 127)`,
/// NaN for `0xFF`. `#[repr(transparent)]` over its byte, and every byte is
/// a valid value. Bind it where a graph tensor is
/// [`DType::Fp8E8M0`](crate::graph::DType::Fp8E8M0) (block scales).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct F8E8M0(u8);

impl F8E8M0 {
    /// `1.0` (code 127).
    pub const ONE: Self = Self(127);
    /// The smallest value, `2^-127` (code 0).
    pub const MIN: Self = Self(0);
    /// The largest value, `2^127` (code 254).
    pub const MAX: Self = Self(254);
    /// NaN (code 255).
    pub const NAN: Self = Self(0xFF);

    /// The value whose encoding is `bits`.
    pub const fn from_bits(bits: u8) -> Self {
        Self(bits)
    }

    /// The encoding.
    pub const fn to_bits(self) -> u8 {
        self.0
    }

    /// `2^e` for `e` in `-127..=127`; `None` outside.
    pub fn from_exponent(e: i32) -> Option<Self> {
        u8::try_from(e.checked_add(127)?)
            .ok()
            .filter(|&c| c != 0xFF)
            .map(Self)
    }

    /// The exponent (`bits - 127`); `None` for NaN.
    pub fn exponent(self) -> Option<i32> {
        (self.0 != 0xFF).then(|| i32::from(self.0) - 127)
    }

    /// The exact value (a power of two, or NaN).
    pub fn to_f64(self) -> f64 {
        match self.exponent() {
            Some(e) => 2f64.powi(e),
            None => f64::NAN,
        }
    }

    /// Whether this is the NaN code.
    pub fn is_nan(self) -> bool {
        self.0 == 0xFF
    }
}

impl std::fmt::Debug for F8E8M0 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.exponent() {
            Some(e) => write!(f, "F8E8M0(2^{e})"),
            None => write!(f, "F8E8M0(NaN)"),
        }
    }
}

impl From<F8E8M0> for f64 {
    fn from(v: F8E8M0) -> f64 {
        v.to_f64()
    }
}
