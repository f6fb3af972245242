//! What each descriptor kind needs before cuDNN may finalize it.
//!
//! cuDNN does not check everything itself: finalizing an engine config with
//! no engine, or an execution plan with neither an engine config nor a JSON
//! representation, or with no device properties and no handle, crashes the
//! process (SIGSEGV, cuDNN 9.28.1; found by the backend fuzz target). So the
//! typed API refuses those finalizes with a typed error before the call.

use super::{AttrName, DescType};

/// An attribute and its C name.
pub(super) type Named = (AttrName, &'static str);

macro_rules! a {
    ($n:ident) => {
        (AttrName::$n, stringify!($n))
    };
}

/// `(kind, groups)`: finalize needs, of every group, at least one attribute set.
const RULES: &[(DescType, &[&[Named]])] = &[
    (
        DescType::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR,
        &[&[a!(CUDNN_ATTR_ENGINECFG_ENGINE)]],
    ),
    (
        DescType::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR,
        &[
            &[
                a!(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG),
                a!(CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION),
            ],
            &[
                a!(CUDNN_ATTR_EXECUTION_PLAN_HANDLE),
                a!(CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP),
            ],
        ],
    ),
    (
        DescType::CUDNN_BACKEND_ENGINE_DESCRIPTOR,
        &[&[a!(CUDNN_ATTR_ENGINE_OPERATION_GRAPH)]],
    ),
    (
        DescType::CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR,
        &[
            &[a!(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH)],
            &[a!(CUDNN_ATTR_ENGINEHEUR_MODE)],
        ],
    ),
];

/// The attribute groups of which none is set, for a finalize of kind `ty`
/// with `set` attributes: empty when cuDNN may be called.
pub(super) fn missing(ty: DescType, set: &[AttrName]) -> Vec<&'static [Named]> {
    RULES
        .iter()
        .filter(|(k, _)| *k == ty)
        .flat_map(|(_, groups)| groups.iter())
        .filter(|g| !g.iter().any(|(a, _)| set.contains(a)))
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_execution_plan_needs_a_source_and_a_device() {
        let t = DescType::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR;
        assert_eq!(missing(t, &[]).len(), 2);
        let json = AttrName::CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION;
        let props = AttrName::CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP;
        // The crash of issue 19: JSON, no device properties, no handle.
        assert_eq!(missing(t, &[json]).len(), 1);
        assert!(missing(t, &[json, props]).is_empty());
        assert!(missing(DescType::CUDNN_BACKEND_TENSOR_DESCRIPTOR, &[]).is_empty());
    }
}
