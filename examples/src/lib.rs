//! Examples for the `cudnn` crate live beside this file; see `Cargo.toml`.

pub mod lenet;
