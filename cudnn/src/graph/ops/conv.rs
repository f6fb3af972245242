//! Convolution parameters and output-shape inference.

use crate::error::{Error, Result};
use crate::graph::tensor::fmt_dims;

/// Convolution geometry, per spatial dim (N-d: give as many as the tensors
/// have spatial dims). Cross-correlation (what frameworks call convolution)
/// unless `flip` is set.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ConvParams {
    /// Padding before each spatial dim.
    pub pre_padding: Vec<i64>,
    /// Padding after each spatial dim.
    pub post_padding: Vec<i64>,
    /// Stride per spatial dim.
    pub stride: Vec<i64>,
    /// Dilation per spatial dim.
    pub dilation: Vec<i64>,
    /// True convolution (flipped filter) instead of cross-correlation.
    pub flip: bool,
}

impl ConvParams {
    /// 2-d with symmetric padding.
    pub fn new_2d(pad: [i64; 2], stride: [i64; 2], dilation: [i64; 2]) -> Self {
        Self {
            pre_padding: pad.to_vec(),
            post_padding: pad.to_vec(),
            stride: stride.to_vec(),
            dilation: dilation.to_vec(),
            flip: false,
        }
    }

    /// N-d with symmetric padding.
    pub fn new(pad: &[i64], stride: &[i64], dilation: &[i64]) -> Self {
        Self {
            pre_padding: pad.to_vec(),
            post_padding: pad.to_vec(),
            stride: stride.to_vec(),
            dilation: dilation.to_vec(),
            flip: false,
        }
    }

    /// Number of spatial dims.
    pub fn spatial_dims(&self) -> usize {
        self.stride.len()
    }

    pub(crate) fn check(&self, op: &str) -> Result<()> {
        let n = self.stride.len();
        if n == 0 || n > 6 {
            return Err(Error::invalid(
                format!("{op}: stride"),
                "must have 1 to 6 spatial dims",
                n,
            ));
        }
        for (name, v, min) in [
            ("pre_padding", &self.pre_padding, 0),
            ("post_padding", &self.post_padding, 0),
            ("stride", &self.stride, 1),
            ("dilation", &self.dilation, 1),
        ] {
            if v.len() != n {
                return Err(Error::mismatch(
                    format!("{op}: {name} length (one per spatial dim, as stride)"),
                    n,
                    v.len(),
                ));
            }
            if let Some((i, &x)) = v.iter().enumerate().find(|(_, x)| **x < min) {
                return Err(Error::invalid(
                    format!("{op}: {name}[{i}]"),
                    format!("must be >= {min}"),
                    x,
                ));
            }
            if let Some((i, &x)) = v.iter().enumerate().find(|(_, x)| **x > 1 << 24) {
                return Err(Error::invalid(
                    format!("{op}: {name}[{i}]"),
                    "must be <= 2^24",
                    x,
                ));
            }
        }
        Ok(())
    }

    /// The forward output dims for input `x` `[N, C, spatial...]` and filter
    /// `w` `[K, C/groups, spatial...]`.
    ///
    /// # Errors
    /// Ranks disagree, C not a multiple of the filter's channels, K not a
    /// multiple of the groups, or an output extent below 1.
    pub fn output_dims(&self, op: &str, x: &[i64], w: &[i64]) -> Result<Vec<i64>> {
        self.check(op)?;
        let s = self.spatial_dims();
        if x.len() != s + 2 || w.len() != s + 2 {
            return Err(Error::mismatch(
                format!("{op}: x and w ranks (2 + spatial dims of the params)"),
                format!("{} and {}", s + 2, s + 2),
                format!("x {} and w {}", fmt_dims(x), fmt_dims(w)),
            ));
        }
        let (c, wc) = (x[1], w[1]);
        if c % wc != 0 {
            return Err(Error::mismatch(
                format!("{op}: x channels must be a multiple of w's input channels (groups)"),
                format!("a multiple of {wc}"),
                c,
            ));
        }
        let groups = c / wc;
        if w[0] % groups != 0 {
            return Err(Error::mismatch(
                format!("{op}: w output channels must be a multiple of the groups ({groups})"),
                format!("a multiple of {groups}"),
                w[0],
            ));
        }
        let mut y = vec![x[0], w[0]];
        for i in 0..s {
            let eff = self.dilation[i] * (w[i + 2] - 1) + 1;
            let padded = x[i + 2] + self.pre_padding[i] + self.post_padding[i];
            if padded < eff {
                return Err(Error::invalid(
                    format!("{op}: spatial dim {i}"),
                    format!(
                        "padded input ({padded}) must be at least the dilated filter ({eff}); x {}, w {}",
                        fmt_dims(x),
                        fmt_dims(w)
                    ),
                    padded,
                ));
            }
            y.push((padded - eff) / self.stride[i] + 1);
        }
        Ok(y)
    }
}
