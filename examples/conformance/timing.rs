//! `--timing`: the host times of both sides per pattern, and their medians
//! per family (conv, matmul, norms, SDPA) with the ratios, crate / frontend.
//! What `cargo xtask bench-planning` prints. Nothing here is asserted.

use crate::Row;
use crate::patterns::Pattern;

/// The median of `v` (sorted in place); 0 for an empty list.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The family a pattern's frontend builder belongs to.
pub fn family(builder: &str) -> &'static str {
    if builder.starts_with("conv_") {
        "conv"
    } else if builder.contains("matmul") {
        "matmul"
    } else if builder.contains("norm") || builder.starts_with("bn_") {
        "norms"
    } else if builder.starts_with("sdpa") {
        "SDPA"
    } else {
        "other"
    }
}

/// The last round's rows, each time the median over the rounds (rows are
/// in the same order in every round), but the first finalize: the first
/// round's (the crate's later rounds run in the same process, where cuDNN
/// keeps the kernels it compiled; the frontend's run in a fresh one).
pub fn merge(mut rounds: Vec<Vec<Row>>) -> Vec<Row> {
    let Some(mut rows) = rounds.pop() else {
        return Vec::new();
    };
    if rounds.is_empty() {
        return rows;
    }
    for (i, row) in rows.iter_mut().enumerate() {
        let others: Vec<&Row> = rounds.iter().filter_map(|r| r.get(i)).collect();
        fn sides(ours: bool, row: &Row) -> &crate::Side {
            if ours { &row.ours } else { &row.theirs }
        }
        for ours in [true, false] {
            let pick = |f: &dyn Fn(&crate::Side) -> Option<f64>, row: &Row| {
                let mut v: Vec<f64> = others
                    .iter()
                    .map(|r| sides(ours, r))
                    .chain(std::iter::once(sides(ours, row)))
                    .filter_map(f)
                    .collect();
                (!v.is_empty()).then(|| median(&mut v))
            };
            let g = pick(&|s| Some(s.t_graph), row);
            let h = pick(&|s| Some(s.t_heur), row);
            let f = others.first().map(|r| sides(ours, r).t_finalize);
            let l = pick(&|s| s.t_load, row);
            let side = if ours { &mut row.ours } else { &mut row.theirs };
            side.t_graph = g.unwrap_or(side.t_graph);
            side.t_heur = h.unwrap_or(side.t_heur);
            side.t_finalize = f.unwrap_or(side.t_finalize);
            if side.t_load.is_some() {
                side.t_load = l;
            }
        }
    }
    rows
}

const STAGES: [&str; 4] = ["op graph", "heuristics A", "first finalize", "plan load"];

/// `(crate, frontend)` seconds of one row's stage `i`, where both sides
/// measured it.
fn stage(row: &Row, i: usize) -> Option<(f64, f64)> {
    let (o, t) = (&row.ours, &row.theirs);
    if o.error.is_some() || t.error.is_some() {
        return None;
    }
    match i {
        0 => Some((o.t_graph, t.t_graph)),
        1 => Some((o.t_heur, t.t_heur)),
        2 => Some((o.t_finalize, t.t_finalize)),
        _ => Some((o.t_load?, t.t_load?)),
    }
}

fn cell(a: f64, b: f64) -> String {
    format!("{:.3} / {:.3} ({:.2})", a * 1e3, b * 1e3, a / b.max(1e-12))
}

/// One family's cell: median crate ms / median frontend ms (median of the
/// per-pattern ratios) [patterns].
fn summary_cell(pairs: &[(f64, f64)]) -> String {
    if pairs.is_empty() {
        return "-".to_string();
    }
    let mut a: Vec<f64> = pairs.iter().map(|p| p.0).collect();
    let mut b: Vec<f64> = pairs.iter().map(|p| p.1).collect();
    let mut r: Vec<f64> = pairs.iter().map(|p| p.0 / p.1.max(1e-12)).collect();
    format!(
        "{:.3} / {:.3} ({:.2}) [{}]",
        median(&mut a) * 1e3,
        median(&mut b) * 1e3,
        median(&mut r),
        pairs.len()
    )
}

/// Print the per-pattern table, then the medians per family and overall.
pub fn report(pats: &[Pattern], rows: &[Row]) {
    println!("\nhost time, crate / frontend (ms; ratio):");
    println!("| pattern | target | op graph | heuristics A | first finalize | plan load |");
    println!("|---|---|---|---|---|---|");
    for row in rows {
        let cells: Vec<String> = (0..4)
            .map(|i| stage(row, i).map_or("-".into(), |(a, b)| cell(a, b)))
            .collect();
        if stage(row, 0).is_none() {
            continue;
        }
        println!(
            "| {} | {} | {} |",
            pats[row.pattern].name,
            row.target,
            cells.join(" | ")
        );
    }
    println!(
        "\nhost time per family, crate / frontend: median ms / median ms (median of the per-pattern ratios) [patterns x targets]:"
    );
    println!("| family | {} |", STAGES.join(" | "));
    println!("|---|---|---|---|---|");
    for fam in ["conv", "matmul", "norms", "SDPA", "other", "all"] {
        let in_fam: Vec<&Row> = rows
            .iter()
            .filter(|r| fam == "all" || family(pats[r.pattern].family) == fam)
            .collect();
        if in_fam.is_empty() {
            continue;
        }
        let cells: Vec<String> = (0..4)
            .map(|i| {
                let pairs: Vec<(f64, f64)> = in_fam.iter().filter_map(|r| stage(r, i)).collect();
                summary_cell(&pairs)
            })
            .collect();
        println!("| {fam} | {} |", cells.join(" | "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_by_hand() {
        assert_eq!(median(&mut []), 0.0);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    #[test]
    fn families_of_the_frontend_builders() {
        for (b, f) in [
            ("conv_fprop", "conv"),
            ("conv_wgrad", "conv"),
            ("matmul", "matmul"),
            ("fp8_matmul", "matmul"),
            ("layer_norm", "norms"),
            ("batch_norm_inference", "norms"),
            ("bn_inference_pointwise", "norms"),
            ("norm_backward", "norms"),
            ("sdpa_fwd", "SDPA"),
            ("sdpa_fp8_bwd", "SDPA"),
        ] {
            assert_eq!(family(b), f, "{b}");
        }
    }
}
