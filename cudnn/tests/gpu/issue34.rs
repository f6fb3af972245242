//! Issue 34 (review O3): `MatmulPlan::heuristic_result`, the algorithm a
//! plan's run uses (the benchmark's raw cuBLASLt call runs it), against
//! cuBLASLt itself: the heuristic asked directly through the raw crate on
//! the plan's descriptors gives the same algorithm and workspace bytes,
//! and an empty D has none (a run computes nothing).

use crate::support;

use cudnn::blas::{Layout, LtHandle, MatmulPlan, MatmulSpec};
use cudnn::runtime::{Device, Stream};
use support::*;

pub fn main() {
    run(vec![gpu(
        "matmul_heuristic_result_is_cublaslts_first_answer",
        heuristic_result,
    )]);
}

fn heuristic_result() -> TestResult {
    use cudnn::sys::cublas as raw;
    Device::new(0)?;
    let stream = Stream::new()?;
    let lt = LtHandle::new(&stream)?;
    let api = raw::load_lt()?;
    // Property over small shapes, rows and columns 0 included: an
    // algorithm exactly when D has elements, and then cuBLASLt's own.
    for (m, n, k) in [(64, 48, 32), (1, 1, 1), (0, 16, 8), (16, 0, 8), (33, 17, 5)] {
        let spec = MatmulSpec::new(
            Layout::row_major(m, k),
            Layout::row_major(k, n),
            Layout::row_major(m, n),
        );
        let mut plan = MatmulPlan::<f32, f32>::new(&lt, &spec)?;
        let ours = plan.heuristic_result();
        if m == 0 || n == 0 {
            ensure!(ours.is_none(), "{m}x{n}x{k}: an empty D has no algorithm");
            ensure!(plan.workspace_size() == 0, "{m}x{n}x{k}: no workspace");
            continue;
        }
        let ours = ours.ok_or(format!("{m}x{n}x{k}: no algorithm"))?;
        let d = plan.descriptors();
        // SAFETY: an all-zero result is a valid value of this plain-data struct.
        let mut want: raw::cublasLtMatmulHeuristicResult_t = unsafe { std::mem::zeroed() };
        let mut count = 0;
        // SAFETY: live handle and descriptors (the plan's, borrowed
        // exclusively); room for one result.
        let st = unsafe {
            api.cublasLtMatmulAlgoGetHeuristic(
                lt.as_raw(),
                d.matmul_desc().as_raw(),
                d.first_layout().as_raw(),
                d.second_layout().as_raw(),
                d.output_layout().as_raw(),
                d.output_layout().as_raw(),
                d.preference().as_raw(),
                1,
                &mut want,
                &mut count,
            )
        }?;
        ensure!(
            st == raw::cublasStatus_t::CUBLAS_STATUS_SUCCESS && count == 1,
            "{m}x{n}x{k}: cuBLASLt's heuristic: status {}, {count} results",
            st.0
        );
        ensure!(
            ours.algo.data == want.algo.data && ours.workspaceSize == want.workspaceSize,
            "{m}x{n}x{k}: the plan's algorithm differs from cuBLASLt's first answer"
        );
        ensure!(
            plan.workspace_size() == want.workspaceSize,
            "{m}x{n}x{k}: workspace {} against cuBLASLt's {}",
            plan.workspace_size(),
            want.workspaceSize
        );
    }
    Ok(())
}
