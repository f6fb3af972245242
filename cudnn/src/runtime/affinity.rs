//! Device affinity: which device a buffer, stream, handle or communicator
//! belongs to, and the check that the parts of one launch agree.
//!
//! Every [`DeviceBuffer`](super::DeviceBuffer) records the device it was
//! allocated on, its views carry it, and every [`Stream`](super::Stream)
//! records its device (a pseudo-stream the device it names). A launch
//! compares each part against the device of whatever runs it (a cuDNN or
//! cuBLAS handle, a communicator) with [`check_device`], and refuses a
//! disagreement with [`Error::DeviceMismatch`] before anything is queued.
//! A part whose device is unknown (`None`: an empty buffer, which holds no
//! memory, or a view of foreign memory made without naming its device)
//! agrees with every device.

use super::Device;
use crate::error::{Error, Result};

/// `Ok` when `got` is `expected` or unknown; otherwise
/// [`Error::DeviceMismatch`] naming `what` (built only on failure) and both
/// ordinals.
///
/// # Errors
/// [`Error::DeviceMismatch`].
#[allow(dead_code)] // used by the launches (dnn, blas, nccl)
pub(crate) fn check_device(
    what: impl FnOnce() -> String,
    expected: Device,
    got: Option<Device>,
) -> Result<()> {
    match got {
        Some(g) if g != expected => Err(Error::device_mismatch(
            what(),
            expected.ordinal(),
            g.ordinal(),
        )),
        _ => Ok(()),
    }
}

/// Check every `(name, device)` of a launch against `expected`, naming the
/// argument and the operation in the error.
///
/// # Errors
/// [`Error::DeviceMismatch`] for the first argument on another device.
#[allow(dead_code)] // used by the launches (dnn, blas, nccl)
pub(crate) fn check_args(
    op: &str,
    expected: Device,
    args: &[(&str, Option<Device>)],
) -> Result<()> {
    for &(name, got) in args {
        check_device(|| format!("`{name}` of {op}"), expected, got)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_same_or_unknown_device_agrees() {
        let d0 = Device::from_runtime(0);
        let d1 = Device::from_runtime(1);
        assert!(check_device(|| "x".into(), d0, Some(d0)).is_ok());
        assert!(check_device(|| "x".into(), d1, None).is_ok());
        assert!(check_args("op", d1, &[("a", Some(d1)), ("b", None)]).is_ok());
        assert!(check_args("op", d1, &[]).is_ok());
    }

    #[test]
    fn unit_other_device_is_a_typed_mismatch_naming_both() {
        let d0 = Device::from_runtime(0);
        let d3 = Device::from_runtime(3);
        let e = check_args("conv_forward", d0, &[("x", Some(d0)), ("w", Some(d3))])
            .expect_err("w is on device 3");
        match &e {
            Error::DeviceMismatch {
                what,
                expected,
                got,
            } => {
                assert_eq!(what, "`w` of conv_forward");
                assert_eq!((*expected, *got), (0, 3));
            }
            other => panic!("wrong error kind: {other:?}"),
        }
        assert_eq!(
            e.to_string(),
            "device mismatch: `w` of conv_forward is on device 3, expected device 0"
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(20_000))]

        /// Against a model: a launch agrees exactly when every known device
        /// is the expected one, and the error names the first that is not.
        #[test]
        fn unit_property_check_args_matches_the_model(
            expected in 0i32..4,
            args in proptest::collection::vec(proptest::option::of(0i32..4), 0..8),
        ) {
            let names: Vec<String> = (0..args.len()).map(|i| format!("arg{i}")).collect();
            let list: Vec<(&str, Option<Device>)> = names
                .iter()
                .zip(&args)
                .map(|(n, d)| (n.as_str(), d.map(Device::from_runtime)))
                .collect();
            let first_bad = args.iter().position(|d| d.is_some_and(|d| d != expected));
            match (check_args("op", Device::from_runtime(expected), &list), first_bad) {
                (Ok(()), None) => {}
                (Err(Error::DeviceMismatch { what, expected: e, got }), Some(i)) => {
                    proptest::prop_assert_eq!(what, format!("`arg{i}` of op"));
                    proptest::prop_assert_eq!(e, expected as usize);
                    proptest::prop_assert_eq!(Some(got as i32), args[i]);
                }
                (r, want) => proptest::prop_assert!(false, "{r:?} for first bad {want:?}"),
            }
        }
    }
}
