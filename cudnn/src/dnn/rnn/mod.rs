//! Recurrent networks through cuDNN's v8 RNN API: RNN (ReLU, tanh), LSTM
//! (with projection) and GRU, uni- or bidirectional, stacked, on padded
//! batches of variable-length sequences.
//!
//! - [`RnnConfig`]: the cell, sizes, modes and precision, checked in Rust
//!   against cuDNN's rules, and the weight shapes it implies;
//! - [`RnnDescriptor`]: the configuration set on cuDNN (host only), with
//!   the [`Dropout`](crate::dnn::Dropout) it borrows;
//! - [`RnnDataDescriptor`]: a batch of sequences with checked lengths;
//! - [`RnnPlan`]: descriptor + batch on a handle: the weight-space,
//!   workspace and reserve sizes, per-layer and per-gate weight views
//!   ([`RnnWeightViews`]), and the forward, backward-data and
//!   backward-weights launches.
//!
//! Buffers are the crate's [`DeviceSlice`](crate::runtime::DeviceSlice) and
//! [`DeviceSliceMut`](crate::runtime::DeviceSliceMut) views (what the
//! cudarc interop lends, too).
//!
//! # Gate order and PyTorch
//! cuDNN numbers the matrices of one layer and direction by `linLayerID`:
//! LSTM `0..4` input-side gates input, forget, cell (new memory), output and
//! `4..8` the recurrent side in the same order, `8` the projection; GRU
//! `0..3` input-side reset, update, new, `3..6` recurrent. PyTorch stacks
//! `weight_ih_l{k}` as `i, f, g, o` (LSTM) and `r, z, n` (GRU): the same
//! order, so PyTorch's `weight_ih` rows `g*hidden..(g+1)*hidden` are cuDNN's
//! matrix `g`, `weight_hh`'s are matrix `gates + g`, `b_ih`/`b_hh` the
//! input/recurrent biases ([`RnnBiasMode::Double`]), `weight_hr` the
//! projection. Matrices are row-major `rows x cols` as PyTorch's.

mod config;
mod data;
mod descriptor;
mod plan;
mod weights;

pub use config::*;
pub use data::*;
pub use descriptor::*;
pub use plan::*;
pub use weights::*;
