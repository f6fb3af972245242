//! Conversions into the borrowed views ([`DeviceSlice`], [`DeviceSliceMut`])
//! from buffers and other views, so that every op takes
//! `impl Into<DeviceSlice>` / `impl Into<DeviceSliceMut>`. (One file, in one
//! order, also keeps the compiler's list of these impls stable.)

use crate::dtype::DataType;

use super::buffer::DeviceBuffer;
use super::views::{DeviceSlice, DeviceSliceMut};

impl<'a, T: DataType> From<&'a DeviceSliceMut<'_, T>> for DeviceSlice<'a, T> {
    fn from(v: &'a DeviceSliceMut<'_, T>) -> Self {
        v.as_slice()
    }
}

impl<'a, T: DataType> From<&'a mut DeviceSliceMut<'_, T>> for DeviceSliceMut<'a, T> {
    fn from(v: &'a mut DeviceSliceMut<'_, T>) -> Self {
        v.reborrow()
    }
}

impl<'a, T: DataType> From<&'a DeviceBuffer<T>> for DeviceSlice<'a, T> {
    fn from(b: &'a DeviceBuffer<T>) -> Self {
        b.as_slice()
    }
}

impl<'a, T: DataType> From<&'a mut DeviceBuffer<T>> for DeviceSliceMut<'a, T> {
    fn from(b: &'a mut DeviceBuffer<T>) -> Self {
        b.as_slice_mut()
    }
}

impl<'a, T: DataType> From<&'a mut DeviceBuffer<T>> for DeviceSlice<'a, T> {
    fn from(b: &'a mut DeviceBuffer<T>) -> Self {
        b.as_slice()
    }
}
