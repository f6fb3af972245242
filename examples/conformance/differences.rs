//! The one list of differences between the crate's graphs and NVIDIA's
//! frontend (1.32) that are legitimate, each with its reason. A finding of
//! the conformance tier that none of these explains is a failure.

use crate::patterns::Pattern;

/// Something the two sides do not agree on.
#[derive(Clone, Debug)]
pub struct Finding {
    /// `count`, `first_engine`, `chosen_engine`, `workspace`, `tensor`,
    /// `unmatched`, `node`, `load_into_crate`, `load_into_frontend`, `frontend`, `crate`.
    pub kind: &'static str,
    /// Where: the role path of a tensor and its field, or a node path.
    pub path: String,
    /// The crate's value.
    pub ours: String,
    /// The frontend's value.
    pub theirs: String,
}

/// A legitimate difference.
pub struct Difference {
    /// Short id printed in the table.
    pub id: &'static str,
    /// What differs.
    pub what: &'static str,
    /// Why it is legitimate.
    pub why: &'static str,
    applies: fn(&Pattern, &Finding) -> bool,
}

impl Difference {
    /// Whether this difference explains `f` in pattern `p`.
    pub fn explains(&self, p: &Pattern, f: &Finding) -> bool {
        (self.applies)(p, f)
    }
}

fn all_ones(s: &str) -> bool {
    let inner = s.trim_matches(|c| c == '[' || c == ']');
    !inner.is_empty() && inner.split(',').all(|x| x.trim() == "1")
}

/// Every legitimate difference.
pub const DIFFERENCES: &[Difference] = &[
    Difference {
        id: "D1",
        what: "a by-value scalar (the SDPA attention scale, an epilogue's scale, batch norm inference's epsilon): all-1 dims of the rank of the tensors it meets here, [1] in the frontend",
        why: "both are one f32 passed by value (the same value, compared); cuDNN broadcasts any all-1 shape",
        applies: |_, f| {
            f.kind == "tensor"
                && (f.path.ends_with(" dim") || f.path.ends_with(" stride"))
                && all_ones(&f.ours)
                && all_ones(&f.theirs)
        },
    },
    Difference {
        id: "D2",
        what: "SDPA forward statistics: set directly on the SDPA operation here, through a SOFTMAX sub-descriptor (with two virtual score tensors) in the frontend",
        why: "cuDNN >= 9.21 accepts both forms for the same engines; the crate sets the documented statistics attribute, which also works on 9.13 to 9.20",
        applies: |p, f| {
            p.family == "sdpa_fwd"
                && !p.composite
                && f.kind == "node"
                && (f.path.contains("softmax") || f.path.contains("stats"))
        },
    },
    Difference {
        id: "D3",
        what: "ReLU (forward and backward): the upper clip is left at cuDNN's default here (DBL_MAX in the plan) and set to FLT_MAX in the frontend",
        why: "no f32, f16 or bf16 value lies between FLT_MAX and DBL_MAX: the same function, one attribute written explicitly",
        applies: |_, f| {
            f.kind == "node"
                && f.path.to_ascii_lowercase().contains("upper")
                && (f.ours == "(absent)" || f.ours.starts_with("1.79769"))
                && f.theirs.starts_with("3.40282")
        },
    },
    Difference {
        id: "D5",
        what: "composite SDPA backward workspace: up to 255 bytes more here",
        why: "both sides keep the two f32 scratch tensors (row sums of dO*O, the dQ accumulator) in the plan's workspace; the crate puts them after cuDNN's workspace rounded up to 256 bytes, the frontend packs them at offsets of its own; cuDNN's part is the same (each side's workspace for the other's plan is its own layout's)",
        applies: |p, f| {
            let gap = f.ours.parse::<u64>().ok().zip(f.theirs.parse::<u64>().ok());
            p.family == "sdpa_bwd"
                && matches!(
                    f.kind,
                    "workspace" | "load_into_crate" | "load_into_frontend"
                )
                && f.path.starts_with("workspace")
                && gap.is_some_and(|(a, b)| a >= b && a - b < 256)
        },
    },
    Difference {
        id: "D4",
        what: "SDPA composites: the padding mask, dropout and the backward's recomputed softmax are decomposed differently, so nodes, virtual tensors and the scalars they use differ; from cuDNN 9.21 both sides build the forward's softmax as cuDNN's SOFTMAX operation and every band (causal, bottom-right, window) as its DIAGONAL_BAND_MASK operation (a composite forward with neither padding nor dropout, the FP8 forward included, then agrees node for node; the FP8 backward too); before 9.21 these are decomposed differently too (the causal mask: INT32 GEN_INDEX, CMP_GE and BINARY_SELECT here); the softcap-with-causal patterns compare against a frontend score_mod that writes its causal mask itself (GEN_INDEX compares), so from 9.21 their mask differs too",
        why: "cuDNN's fused attention engines recognise both decompositions; what must agree (engines offered, the engine chosen, workspace, the tensors a caller binds) is compared",
        applies: |p, f| {
            p.composite && matches!(f.kind, "node" | "unmatched" | "tensor") && !is_bound_tensor(f)
        },
    },
    Difference {
        id: "D6",
        what: "FP8 graphs on a GPU without FP8 support (an FP8 matmul below sm_89, FP8 attention below sm_90): the crate refuses with a typed Unsupported before asking cuDNN, the frontend by its own check or because cuDNN offered no engine",
        why: "both sides refuse the same graph for the same target; cuDNN's own reason for the matmul is that its FP8 (QMMA) kernels do not run on sm_80",
        applies: |p, f| {
            p.family.contains("fp8")
                && f.kind == "crate"
                && f.ours.contains("unsupported")
                && f.ours.contains("FP8")
                && f.theirs.contains("cudnnGraphNotSupportedError")
        },
    },
    Difference {
        id: "D7",
        what: "FP8 attention backward on Blackwell: the frontend pins cuDNN's engine 5 with its knob STAGES = 2 (what it calls routing to the deterministic algorithm, a 16 KB workspace); the crate takes the same engine with the knobs cuDNN's heuristics give (STAGES left to cuDNN, about 1 MB of workspace)",
        why: "the same engine for the same graph, and each side's plan loads in the other; the crate does not override cuDNN's heuristics with a pinned knob (see the sdpa_fp8_bwd module docs)",
        applies: |p, f| {
            let w = f.ours.parse::<u64>().ok().zip(f.theirs.parse::<u64>().ok());
            p.family == "sdpa_fp8_bwd"
                && f.kind == "workspace"
                && w.is_some_and(|(ours, theirs)| ours > theirs)
        },
    },
    // issue 24 (h5): the softcap's composite backward below sm_90.
    Difference {
        id: "DSC",
        what: "the logit softcap's attention backward (the composite) on sm_8x or sm_12x: the crate refuses with a typed Unsupported naming the softcap before asking cuDNN, the frontend because cuDNN offers no engine",
        why: "both sides refuse the same graph for the same target; cuDNN's own reason is that its fused backward takes no backward activation (the softcap's TANH_BWD) on Ampere and sm_12x",
        applies: |p, f| {
            p.family == "sdpa_bwd"
                && p.params.get("softcap").is_some_and(|c| !c.is_null())
                && f.kind == "crate"
                && f.ours.contains("unsupported")
                && f.ours.contains("softcap")
                && f.theirs.contains("cudnnGraphNotSupportedError")
        },
    },
    // issue 24 (h4): ALiBi's slopes.
    Difference {
        id: "D8",
        what: "ALiBi: the slopes are an f32 [1, H, 1, 1] graph input the caller binds here; the frontend computes them and keeps them in its own workspace (16-byte aligned: 4 H bytes rounded up to 16 more workspace), so its slope tensor has another uid and is not among the crate's inputs",
        why: "the same ALiBi ops on the same scores (GEN_INDEX, SUB, MUL by the slopes, ADD); where the slopes live is the crate's documented choice (see the sdpa_bias module docs), and `graph::alibi_slopes` gives the frontend's values",
        applies: |p, f| {
            let alibi = p.params.get("alibi").and_then(|v| v.as_bool()) == Some(true);
            let heads = p.params.get("heads").and_then(|v| v.as_u64());
            let slope_bytes = heads.map(|h| (4 * h).div_ceil(16) * 16);
            let gap = f
                .ours
                .parse::<u64>()
                .ok()
                .zip(f.theirs.parse::<u64>().ok())
                .map(|(a, b)| b.checked_sub(a));
            alibi
                && match f.kind {
                    "workspace" | "load_into_frontend" => {
                        f.path.starts_with("workspace")
                            && slope_bytes.is_some()
                            && gap == Some(slope_bytes)
                    }
                    "load_into_crate" => f.ours.contains("`alibi_slopes`"),
                    // The slope tensor of the MUL: the crate's input, or
                    // the frontend's f32 [1, H, 1, 1] workspace tensor.
                    "unmatched" => {
                        f.ours == "-"
                            && f.path.contains(":POINTWISE/B")
                            && (f.path.starts_with("crate tensor")
                                || heads.is_some_and(|h| {
                                    f.path.contains(&format!("(FLOAT [1, {h}, 1, 1])"))
                                }))
                    }
                    // The MUL's slope operand in the SDPA operation's
                    // score subgraph: a bound tensor on both sides
                    // (never a virtual one), each its own.
                    "node" => {
                        f.path.contains("subgraph/nodes[")
                            && f.path.ends_with("/B")
                            && f.ours.starts_with("\"T")
                            && f.theirs.starts_with("\"T")
                            && f.ours != f.theirs
                    }
                    _ => false,
                }
        },
    },
    // issue 24 (h5): the softcap with masks, which only the frontend refuses.
    Difference {
        id: "DSM",
        what: "the logit softcap with a causal mask, a sliding window or padding (Gemma 2's attention): the crate builds and plans it, the frontend refuses it before asking cuDNN (its rule for any score_mod: \"Attention score mod enabled and hence other subgraphs are disabled\"); the top-left causal composites are compared instead against a frontend score_mod that writes the causal mask itself (GEN_INDEX compares); from cuDNN 9.21 the crate's causal mask is cuDNN's diagonal band mask operation, whose -inf fill is a by-value scalar the score_mod's graph lacks where its other scalars do not stand in for it (the backward), so the crate's loader refuses that plan of another graph and it cross-loads one way",
        why: "a rule of the frontend's support surface for its generic score_mod callback, not of cuDNN: cuDNN 9.28 plans these graphs (softcap ops, then the masks) on the H200, H100 and B200, forward and backward, composite and SDPA operation (host/sdpa_softcap's masks_plan, its plan JSON round-tripped and tampered forms refused there); no frontend plan exists to compare or cross-load",
        applies: |p, f| {
            let masked = p.params.get("causal").is_some_and(|c| c == true)
                || p.params.get("padding").is_some_and(|c| c == true)
                || p.params.get("window").is_some_and(|w| !w.is_null());
            let softcap = matches!(p.family, "sdpa_fwd" | "sdpa_bwd")
                && p.params.get("softcap").is_some_and(|c| !c.is_null());
            let refused = softcap
                && masked
                && f.kind == "frontend"
                && f.ours == "planned"
                && f.theirs
                    .contains("score mod enabled and hence other subgraphs are disabled");
            // The stand-in's plan, loaded into the crate: refused for the
            // crate's fill scalar it lacks, and for nothing else.
            let stand_in = softcap
                && p.composite
                && p.params.get("causal").is_some_and(|c| c == true)
                && f.kind == "load_into_crate"
                && f.ours.contains("presence")
                && f.ours
                    .ends_with("expected a by-value scalar, got no such tensor");
            refused || stand_in
        },
    },
];

/// A finding about a tensor a caller binds (named by its role), which a
/// decomposition never excuses.
fn is_bound_tensor(f: &Finding) -> bool {
    f.kind == "tensor" && f.path.starts_with('`')
}

/// The ids of the differences explaining every finding, the findings they
/// explain (with the id), and the findings none explains.
#[allow(clippy::type_complexity)]
pub fn classify<'f>(
    p: &Pattern,
    findings: &'f [Finding],
) -> (
    Vec<&'static str>,
    Vec<(&'static str, &'f Finding)>,
    Vec<&'f Finding>,
) {
    let mut ids = Vec::new();
    let mut explained = Vec::new();
    let mut open = Vec::new();
    for f in findings {
        match DIFFERENCES.iter().find(|d| d.explains(p, f)) {
            Some(d) => {
                if !ids.contains(&d.id) {
                    ids.push(d.id);
                }
                explained.push((d.id, f));
            }
            None => open.push(f),
        }
    }
    (ids, explained, open)
}

#[cfg(test)]
mod unit {
    use super::*;

    fn pattern(family: &'static str, composite: bool) -> Pattern {
        let mut p = crate::patterns::all()
            .into_iter()
            .find(|p| p.family == family)
            .unwrap_or_else(|| unreachable!("no {family} pattern"));
        p.composite = composite;
        p
    }

    fn f(kind: &'static str, path: &str, ours: &str, theirs: &str) -> Finding {
        Finding {
            kind,
            path: path.to_string(),
            ours: ours.to_string(),
            theirs: theirs.to_string(),
        }
    }

    fn ids(p: &Pattern, x: Finding) -> Vec<&'static str> {
        let v = [x];
        let (ids, _, open) = classify(p, &v);
        if open.is_empty() { ids } else { Vec::new() }
    }

    #[test]
    fn unit_documented_differences_are_narrow() {
        let conv = pattern("conv_fprop", false);
        let sdpa = pattern("sdpa_fwd", false);
        let bwd = pattern("sdpa_bwd", true);
        // D1: all-ones shapes only.
        assert_eq!(
            ids(
                &sdpa,
                f("tensor", "[0]:SDPA_FWD/scale dim", "[1,1,1,1]", "[1]")
            ),
            ["D1"]
        );
        assert!(ids(&conv, f("tensor", "`y` dim", "[2,3]", "[1]")).is_empty());
        // D3: DBL_MAX against FLT_MAX only.
        assert_eq!(
            ids(
                &conv,
                f(
                    "node",
                    "nodes[1]/upperClip",
                    "1.7976931348623157e+308",
                    "3.402823466385289e+38"
                )
            ),
            ["D3"]
        );
        assert!(
            ids(
                &conv,
                f("node", "nodes[1]/upperClip", "6.0", "3.402823466385289e+38")
            )
            .is_empty()
        );
        // D5: under 256 bytes more here, backward only.
        assert_eq!(
            ids(&bwd, f("workspace", "workspace", "2113792", "2113664")),
            ["D5"]
        );
        assert!(ids(&bwd, f("workspace", "workspace", "2113920", "2113664")).is_empty());
        assert!(ids(&bwd, f("workspace", "workspace", "2113664", "2113792")).is_empty());
        assert!(ids(&conv, f("workspace", "workspace", "131", "0")).is_empty());
        // D4: never a bound tensor, an engine or a workspace.
        assert!(ids(&bwd, f("tensor", "`dq` stride", "[1]", "[2]")).is_empty());
        assert!(ids(&bwd, f("first_engine", "first_engine", "6", "7")).is_empty());
        assert_eq!(ids(&bwd, f("node", "nodes[3]/operation", "a", "b")), ["D4"]);
        // D6: FP8 only, and only when both sides refuse.
        let fp8 = pattern("fp8_matmul", false);
        let refused = "unsupported: an FP8 matmul on a GPU of compute capability 8.0";
        let none = "cudnnGraphNotSupportedError: No valid engine configs for x";
        assert_eq!(ids(&fp8, f("crate", "plan", refused, none)), ["D6"]);
        let other = "cudnnGraphNotSupportedError: only supported on Hopper";
        assert_eq!(ids(&fp8, f("crate", "plan", refused, other)), ["D6"]);
        assert!(ids(&fp8, f("crate", "plan", refused, "cudnnBadParamError: x")).is_empty());
        assert!(ids(&fp8, f("crate", "plan", refused, "planned")).is_empty());
        assert!(ids(&conv, f("crate", "plan", refused, none)).is_empty());
        // D7: the FP8 backward's workspace only, and only larger here.
        let fbwd = pattern("sdpa_fp8_bwd", true);
        assert_eq!(
            ids(&fbwd, f("workspace", "workspace", "1056896", "16512")),
            ["D7"]
        );
        assert!(ids(&fbwd, f("workspace", "workspace", "16512", "1056896")).is_empty());
        assert!(ids(&fbwd, f("first_engine", "first_engine", "5", "6")).is_empty());
        assert!(ids(&fp8, f("workspace", "workspace", "1056896", "16512")).is_empty());
        // DSC: the softcap backward only, and only when both sides refuse.
        let mut sc = pattern("sdpa_bwd", true);
        sc.params = serde_json::json!({"softcap": 50.0});
        let refused = "unsupported: the attention backward with head_dim 64, softcap on a GPU of compute capability 8.0";
        assert_eq!(ids(&sc, f("crate", "plan", refused, none)), ["DSC"]);
        assert!(ids(&sc, f("crate", "plan", refused, "planned")).is_empty());
        assert!(ids(&bwd, f("crate", "plan", refused, none)).is_empty());
        let unnamed = "unsupported: the attention backward on a GPU of compute capability 8.0";
        assert!(ids(&sc, f("crate", "plan", unnamed, none)).is_empty());
        // D8: ALiBi patterns only: the slopes' workspace (4 H rounded to
        // 16 bytes more there), the slope input's absence there.
        let mut alibi = pattern("sdpa_fwd", false);
        alibi.params = serde_json::json!({"alibi": true, "heads": 8});
        assert_eq!(
            ids(&alibi, f("workspace", "workspace", "256", "288")),
            ["D8"]
        );
        assert!(ids(&alibi, f("workspace", "workspace", "256", "320")).is_empty());
        assert!(ids(&alibi, f("workspace", "workspace", "288", "256")).is_empty());
        assert!(ids(&sdpa, f("workspace", "workspace", "256", "288")).is_empty());
        let missing =
            "crate plan JSON tensor uid 6 presence: expected `alibi_slopes`, got no such tensor";
        assert_eq!(
            ids(&alibi, f("load_into_crate", "plan", missing, "-")),
            ["D8"]
        );
        assert!(ids(&sdpa, f("load_into_crate", "plan", missing, "-")).is_empty());
        let other = "crate plan JSON tensor uid 6 presence: expected `bias`, got no such tensor";
        assert!(ids(&alibi, f("load_into_crate", "plan", other, "-")).is_empty());
        let path = "crate tensor uid 8 ([0]:SDPA_FWD/subgraph/nodes[3]:POINTWISE/B)";
        assert_eq!(ids(&alibi, f("unmatched", path, "-", "-")), ["D8"]);
        let theirs = "frontend tensor uid 10 (FLOAT [1, 8, 1, 1]) has no crate tensor in the same role (slots [\"[0]:SDPA_FWD/subgraph/nodes[3]:POINTWISE/B\"])";
        assert_eq!(ids(&alibi, f("unmatched", theirs, "-", "-")), ["D8"]);
        let wider = theirs.replace("[1, 8, 1, 1]", "[2, 8, 256, 256]");
        assert!(ids(&alibi, f("unmatched", &wider, "-", "-")).is_empty());
        assert!(ids(&sdpa, f("unmatched", theirs, "-", "-")).is_empty());
        assert!(ids(&alibi, f("tensor", "`bias` dim", "[1]", "[2]")).is_empty());
        // The slope operand of the subgraph's MUL, and nothing wider.
        let node = "nodes[0]/subgraph/nodes[3]/B";
        assert_eq!(ids(&alibi, f("node", node, "\"T8\"", "\"T10\"")), ["D8"]);
        assert!(ids(&sdpa, f("node", node, "\"T8\"", "\"T10\"")).is_empty());
        let virt = "\"V[0]:SDPA_FWD/subgraph/nodes[2]:POINTWISE/Y\"";
        assert!(ids(&alibi, f("node", node, "\"T8\"", virt)).is_empty());
        assert!(ids(&alibi, f("node", "nodes[3]/B", "\"T8\"", "\"T10\"")).is_empty());
        assert!(ids(&alibi, f("node", node, "\"T8\"", "\"T8\"")).is_empty());
        // DSM: the softcap with a mask, the frontend's score-mod refusal only.
        let rule = "cudnnGraphNotSupportedError: Attention score mod enabled and hence other subgraphs are disabled.";
        let mut scm = pattern("sdpa_fwd", false);
        scm.params =
            serde_json::json!({"softcap": 50.0, "causal": true, "window": null, "padding": false});
        assert_eq!(ids(&scm, f("frontend", "plan", "planned", rule)), ["DSM"]);
        let mut scw = pattern("sdpa_bwd", true);
        scw.params =
            serde_json::json!({"softcap": 50.0, "causal": false, "window": 64, "padding": false});
        assert_eq!(ids(&scw, f("frontend", "plan", "planned", rule)), ["DSM"]);
        // Not another frontend refusal, not the crate refusing, not without
        // a mask or without a softcap, not a planned row's other findings.
        let other = "cudnnGraphNotSupportedError: hidden_dim should be multiple of 8";
        assert!(ids(&scm, f("frontend", "plan", "planned", other)).is_empty());
        assert!(ids(&scm, f("crate", "plan", "unsupported: softcap", rule)).is_empty());
        let mut unmasked = pattern("sdpa_fwd", false);
        unmasked.params =
            serde_json::json!({"softcap": 50.0, "causal": false, "window": null, "padding": false});
        assert!(ids(&unmasked, f("frontend", "plan", "planned", rule)).is_empty());
        let mut nocap = pattern("sdpa_fwd", false);
        nocap.params =
            serde_json::json!({"softcap": null, "causal": true, "window": null, "padding": false});
        assert!(ids(&nocap, f("frontend", "plan", "planned", rule)).is_empty());
        assert!(ids(&scm, f("first_engine", "first_engine", "9", "8")).is_empty());
        // DSM: the causal stand-in's plan, refused by the crate's loader for
        // the by-value fill it lacks; a causal softcap composite only, and
        // that refusal only.
        let lacks = "plan JSON tensor uid 8 presence (the tensor list says, the JSON has): expected a by-value scalar, got no such tensor";
        let mut scc = pattern("sdpa_bwd", true);
        scc.params =
            serde_json::json!({"softcap": 50.0, "causal": true, "window": null, "padding": false});
        let load = |ours: &str| f("load_into_crate", "Plan::from_cudnn_json", ours, "-");
        assert_eq!(ids(&scc, load(lacks)), ["DSM"]);
        let mut plain = pattern("sdpa_bwd", true);
        plain.params =
            serde_json::json!({"softcap": null, "causal": true, "window": null, "padding": false});
        assert!(ids(&plain, load(lacks)).is_empty());
        let mut native = pattern("sdpa_bwd", false);
        native.params =
            serde_json::json!({"softcap": 50.0, "causal": true, "window": null, "padding": false});
        assert!(ids(&native, load(lacks)).is_empty());
        assert!(
            ids(&scw, load(lacks)).is_empty(),
            "a window without the causal mask"
        );
        let bound = lacks.replace("a by-value scalar", "`q`");
        assert!(ids(&scc, load(&bound)).is_empty());
        let shape = "plan JSON tensor uid 8 dims: expected [1, 1, 1, 1], got [2]";
        assert!(ids(&scc, load(shape)).is_empty());
        // Nothing explains an engine count.
        assert!(ids(&sdpa, f("count", "count", "4", "3")).is_empty());
    }
}
