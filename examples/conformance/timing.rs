//! `--timing`: the host times of both sides per pattern, and their medians
//! per family (conv, matmul, norms, SDPA) with the ratios, crate / frontend.
//! What `cargo xtask bench-planning` prints. Nothing here is asserted.

use cudnn::graph::{set_backend_clock, take_backend_clock};

use crate::Row;
use crate::patterns::Pattern;

/// One step of the crate's side timed with the backend clock on: its wall
/// seconds, the seconds inside cuDNN's backend calls and their number.
/// What is inside the calls is what the crate's step can never go below
/// while it makes them; the rest is the crate's own code.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Split {
    pub total: f64,
    pub cudnn: f64,
    pub calls: u64,
}

/// cuDNN's own part of the crate's steps (`--timing` only): medians over
/// the reps made with the backend clock on (the headline times are taken
/// in reps of their own, with it off).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CudnnPart {
    pub graph: Option<Split>,
    pub heur: Option<Split>,
    pub load: Option<Split>,
}

/// The backend clock on while this lives (off again when dropped, an early
/// return included).
pub struct ClockOn(());

impl ClockOn {
    pub fn start() -> Self {
        set_backend_clock(true);
        ClockOn(())
    }
}

impl Drop for ClockOn {
    fn drop(&mut self) {
        set_backend_clock(false);
    }
}

/// Run `f` (the clock on: [`ClockOn`]) and split its time.
pub fn split<R>(f: impl FnOnce() -> R) -> (R, Split) {
    let _ = take_backend_clock();
    let t0 = std::time::Instant::now();
    let r = f();
    let total = t0.elapsed().as_secs_f64();
    let c = take_backend_clock();
    let s = Split {
        total,
        cudnn: c.spent.as_secs_f64(),
        calls: c.calls,
    };
    (r, s)
}

/// The medians of each part apart (`None` for no run).
pub fn median_part(v: Vec<Split>) -> Option<Split> {
    if v.is_empty() {
        return None;
    }
    let m = |f: fn(&Split) -> f64| median(&mut v.iter().map(f).collect::<Vec<_>>());
    Some(Split {
        total: m(|s| s.total),
        cudnn: m(|s| s.cudnn),
        calls: m(|s| s.calls as f64).round() as u64,
    })
}

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
            let of_rounds = |pick: &dyn Fn(&CudnnPart) -> Option<Split>| {
                let all = others.iter().map(|r| &r.ours.cudnn);
                median_part(all.chain([&row.ours.cudnn]).filter_map(pick).collect())
            };
            let c = CudnnPart {
                graph: of_rounds(&|c| c.graph),
                heur: of_rounds(&|c| c.heur),
                load: of_rounds(&|c| c.load),
            };
            let side = if ours { &mut row.ours } else { &mut row.theirs };
            side.t_graph = g.unwrap_or(side.t_graph);
            side.t_heur = h.unwrap_or(side.t_heur);
            side.t_finalize = f.unwrap_or(side.t_finalize);
            if side.t_load.is_some() {
                side.t_load = l;
            }
            if ours {
                side.cudnn = c;
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
    floors(pats, rows);
}

/// Stage `i`'s split on the crate's side and the frontend's step, where
/// both sides measured it.
fn part(row: &Row, i: usize) -> Option<(Split, f64)> {
    let (_, b) = stage(row, i)?;
    let c = &row.ours.cudnn;
    let s = match i {
        0 => c.graph,
        1 => c.heur,
        3 => c.load,
        _ => None,
    }?;
    Some((s, b))
}

/// The crate's step (timed again with the backend clock on) split in two,
/// each as a share of the frontend's step: the time inside cuDNN's backend
/// calls (the floor for the calls the crate makes: no change to its own
/// code removes it) and the rest (the crate's own code). Medians per
/// family of the per-pattern shares, from reps of their own with the
/// clock's reads in them (two per call), so the two need not add up to
/// the ratio in the table above.
fn floors(pats: &[Pattern], rows: &[Row]) {
    if !rows.iter().any(|r| part(r, 0).is_some()) {
        return;
    }
    println!(
        "\nthe crate's step = cuDNN's own calls + the crate's code, each / the frontend's step (median shares per family; calls per step) [patterns x targets]:"
    );
    println!("| family | op graph | heuristics A | plan load |");
    println!("|---|---|---|---|");
    for fam in ["conv", "matmul", "norms", "SDPA", "other", "all"] {
        let cells: Vec<String> = [0, 1, 3]
            .iter()
            .map(|&i| {
                let v: Vec<(Split, f64)> = rows
                    .iter()
                    .filter(|r| fam == "all" || family(pats[r.pattern].family) == fam)
                    .filter_map(|r| part(r, i))
                    .collect();
                if v.is_empty() {
                    return "-".to_string();
                }
                let share = |f: &dyn Fn(&(Split, f64)) -> f64| {
                    median(&mut v.iter().map(f).collect::<Vec<_>>())
                };
                let floor = share(&|(s, b)| s.cudnn / b.max(1e-12));
                let own = share(&|(s, b)| (s.total - s.cudnn) / b.max(1e-12));
                let calls = share(&|(s, _)| s.calls as f64);
                format!("{floor:.2} + {own:.2} ({calls:.0} calls) [{}]", v.len())
            })
            .collect();
        if cells.iter().all(|c| c == "-") {
            continue;
        }
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
    fn median_parts_by_hand() {
        let s = |total, cudnn, calls| Split {
            total,
            cudnn,
            calls,
        };
        assert_eq!(median_part(Vec::new()), None);
        assert_eq!(
            median_part(vec![s(5.0, 3.0, 10), s(9.0, 1.0, 30), s(7.0, 2.0, 20)]),
            Some(s(7.0, 2.0, 20))
        );
        // Each part is a median of its own: (6.5 s, 2.5 s, 25 calls).
        assert_eq!(
            median_part(vec![
                s(5.0, 4.0, 20),
                s(9.0, 1.0, 30),
                s(6.0, 3.0, 10),
                s(7.0, 2.0, 40)
            ]),
            Some(s(6.5, 2.5, 25))
        );
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
