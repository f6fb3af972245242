#!/usr/bin/env bash
# Packed by `cargo xtask device-check` (source: xtask/device/run.sh): the cudnn
# GPU check, for a machine with an NVIDIA GPU and no Rust toolchain.
#
#   bash run.sh            # or: OUT=/some/dir bash run.sh
#
# Phases, each with its estimate on one H200 and a hard cap (seconds):
#   1. tests      every test binary, GPU and libraries required       est  60  cap 150
#   2. examples   doctor, then the other non-benchmark examples
#                 (ddp_lenet runs as one rank on GPU 0)                est  30  cap  60
#   3. benches    ours, with --csv: bench_gemm (full shapes, 0.1 s
#                 per case), bench_conv --quick --exhaustive, bench_ops
#                 (32x64x128x128 and --quick 8x64x64x64), bench_host,
#                 bench_nccl (all-reduce busbw, 1 KiB..1 GiB),
#                 bench_attention (SDPA 1k/4k/8k, native and composite;
#                 layer norm)                                          est  80  cap 150
#   4. torch      compare_torch.py: the same cases through PyTorch,
#                 on the same device, right after ours                est  40  cap 100
#   5. memcheck   compute-sanitizer memcheck on gpu_runtime and
#                 gpu_gemm's gemm_f32 tests, when the tool is present est  50  cap  90
# Estimates add up to about 4.5 minutes. CHECK_BUDGET_S (default 330) caps
# the whole run: a phase gets what is left of it (less a few seconds for the
# report), and an item that cannot start in time is reported as skipped.
# PER_BINARY_TIMEOUT (default 120) caps each test binary.
#
# Writes into $OUT (default: the current directory): report.md (all of it,
# in one file), compare.md (the PyTorch table), csv/ (our benchmark
# rows) and logs/. Exits non-zero if a test, example, benchmark or the
# comparison failed or was skipped for time, or memcheck found errors.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${OUT:-.}"
mkdir -p "$out/logs" "$out/csv"
out="$(cd "$out" && pwd)"
report="$out/report.md"
per_binary_timeout="${PER_BINARY_TIMEOUT:-120}"
budget_total="${CHECK_BUDGET_S:-330}"
report_reserve=5
check_start=$(date +%s)

now() { date +%s; }
log_of() { printf '%s/logs/%s.log' "$out" "$(printf '%s' "$1" | tr '/ ' '__')"; }
budget_left() { echo $((budget_total - ($(now) - check_start) - report_reserve)); }
min() { if [ "$1" -lt "$2" ]; then echo "$1"; else echo "$2"; fi; }

# cuDNN, cuBLAS, NCCL and the CUDA runtime from the Python environment's NVIDIA
# wheels (next to PyTorch), unless the caller already said where they are.
site_packages=""
python_bin=""
for py in python3 python; do
    command -v "$py" >/dev/null 2>&1 || continue
    [ -n "$python_bin" ] || python_bin="$py"
    sp="$("$py" - <<'PY' 2>/dev/null
import site
dirs = []
try:
    dirs += site.getsitepackages()
except Exception:
    pass
try:
    dirs.append(site.getusersitepackages())
except Exception:
    pass
print(":".join(d for d in dirs if d))
PY
)" || sp=""
    if [ -n "$sp" ]; then
        site_packages="$sp"
        export CUDNN_RS_SEARCH_PATH="${CUDNN_RS_SEARCH_PATH:+$CUDNN_RS_SEARCH_PATH:}$sp"
        python_bin="$py"
        break
    fi
done
# The Python that has torch, if any does (one import each: it takes seconds).
torch_python=""
torch_desc="not importable by python3 or python"
for py in "$python_bin" python3 python; do
    [ -n "$py" ] && command -v "$py" >/dev/null 2>&1 || continue
    if v="$("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null)"; then
        torch_python="$py"
        torch_desc="$v ($py)"
        break
    fi
done

# Missing device or libraries are failures here, not skips.
export CUDNN_RS_REQUIRE_GPU=1 CUDNN_RS_REQUIRE_LIBS=1
export RUST_BACKTRACE=1

have_timeout=0
command -v timeout >/dev/null 2>&1 && have_timeout=1

# Bookkeeping. Results are written into $report at the end, in this order.
results=""          # the per-item table rows
details=""          # logs of failures
failed=()
passed=0
phase_rows=""       # the per-phase timing table rows
phase_name=""; phase_est=0; phase_cap=0; phase_t0=0; phase_deadline=0

phase_begin() {
    phase_name="$1"; phase_est="$2"; phase_cap="$3"; phase_t0=$(now)
    local left; left=$(budget_left)
    phase_deadline=$((phase_t0 + $(min "$phase_cap" "$left")))
    echo
    echo "=== phase $phase_name (estimate ${phase_est} s, cap ${phase_cap} s, budget left ${left} s)"
}
phase_end() {
    local took=$(($(now) - phase_t0))
    phase_rows+="| $phase_name | $phase_est | $phase_cap | $took | ${1:-} |"$'\n'
}
# Seconds an item may run now: its own cap, clipped to the phase and the budget.
item_limit() {
    local cap="$1" left_phase left_total
    left_phase=$((phase_deadline - $(now)))
    left_total=$(budget_left)
    min "$cap" "$(min "$left_phase" "$left_total")"
}

run_with_timeout() {
    local secs="$1"; shift
    if [ "$have_timeout" -eq 1 ]; then
        timeout --kill-after=10 "$secs" "$@"
    else
        "$@"
    fi
}

# run_one NAME CAP CMD...: run CMD in $here with a time limit, log it, and
# record PASS / FAIL / SKIP.
run_one() {
    local name="$1" cap="$2"; shift 2
    local log; log="$(log_of "$name")"
    local limit start end rc summary verdict
    limit=$(item_limit "$cap")
    if [ "$limit" -lt 3 ]; then
        verdict="SKIP (time budget)"
        failed+=("$name")
        results+="| $name | $verdict | 0 | not started: the check's time budget was spent |"$'\n'
        echo "$verdict  $name"
        return
    fi
    start=$(now)
    ( cd "$here" && run_with_timeout "$limit" "$@" ) > "$log" 2>&1
    rc=$?
    end=$(now)
    summary="$(grep -E '^test result:' "$log" | tail -n 1)"
    [ -n "$summary" ] || summary="$(grep -v '^[[:space:]]*$' "$log" | tail -n 1 | cut -c1-120)"
    if [ $rc -eq 0 ]; then
        verdict="PASS"; passed=$((passed + 1))
    else
        if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then verdict="FAIL (timeout ${limit}s)"; else verdict="FAIL (exit $rc)"; fi
        failed+=("$name")
        details+=$'\n'"### $name ($verdict)"$'\n\n```text\n'"$(tail -n 150 "$log")"$'\n```\n'
    fi
    summary="${summary//|/\\|}"
    results+="| $name | $verdict | $((end - start)) | $summary |"$'\n'
    echo "$verdict  $name  ($((end - start)) s)  $summary"
}

gpu="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 4 | tr '\n' ';')"
echo "cudnn device check: budget ${budget_total} s; report: $report"

# ---------------------------------------------------------------------------
phase_begin "1. tests" 60 150
for t in "$here"/bin/tests/*; do
    [ -x "$t" ] || continue
    run_one "tests/$(basename "$t")" "$per_binary_timeout" "$t"
done
phase_end

# ---------------------------------------------------------------------------
phase_begin "2. examples" 30 60
run_one "doctor" 30 "$here/bin/doctor"
for e in "$here"/bin/*; do
    [ -f "$e" ] && [ -x "$e" ] || continue
    case "$(basename "$e")" in doctor | bench_*) continue ;; esac
    run_one "examples/$(basename "$e")" 40 "$e"
done
phase_end

# ---------------------------------------------------------------------------
phase_begin "3. benches" 80 150
# bench LABEL CAP BINARY ARGS...; the labels name the tables in the report.
bench_labels=()
bench() {
    local label="$1" cap="$2" bin="$3"; shift 3
    if [ ! -x "$here/bin/$bin" ]; then
        echo "(no bin/$bin in the pack)"
        return
    fi
    bench_labels+=("$label")
    run_one "bench/$label" "$cap" "$here/bin/$bin" "$@"
}
csvs=("$out/csv/gemm.csv" "$out/csv/conv.csv" "$out/csv/ops.csv" "$out/csv/ops_small.csv" "$out/csv/attention.csv")
rm -f "${csvs[@]}"
bench "bench_gemm" 30 bench_gemm --seconds 0.1 --csv "$out/csv/gemm.csv"
bench "bench_conv --quick --exhaustive" 50 bench_conv --quick --exhaustive --csv "$out/csv/conv.csv"
bench "bench_ops" 20 bench_ops --csv "$out/csv/ops.csv"
bench "bench_ops --quick" 20 bench_ops --quick --csv "$out/csv/ops_small.csv"
bench "bench_host" 20 bench_host
bench "bench_graph" 20 bench_graph --iters 30
bench "bench_nccl" 40 bench_nccl
bench "bench_attention" 60 bench_attention --iters 5 --csv "$out/csv/attention.csv"
phase_end

# ---------------------------------------------------------------------------
phase_begin "4. torch" 40 100
compare="$out/compare.md"
rm -f "$compare"
echo "PyTorch: $torch_desc"
py="${torch_python:-${python_bin:-python3}}"
torch_limit=$(item_limit 100)
run_one "compare_torch" 100 "$py" "$here/compare_torch.py" --out "$compare" \
    --budget-s "$((torch_limit > 15 ? torch_limit - 10 : 5))" "${csvs[@]}"
phase_end

# ---------------------------------------------------------------------------
phase_begin "5. memcheck" 50 90
sanitizer=""
if command -v compute-sanitizer >/dev/null 2>&1; then
    sanitizer="$(command -v compute-sanitizer)"
else
    for f in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer \
        /usr/local/cuda*/compute-sanitizer/compute-sanitizer \
        /opt/cuda/bin/compute-sanitizer /opt/nvidia/*/bin/compute-sanitizer; do
        [ -x "$f" ] && { sanitizer="$f"; break; }
    done
    # NVIDIA's pip wheel (nvidia-cuda-sanitizer-api) in the Python environment.
    if [ -z "$sanitizer" ] && [ -n "$site_packages" ]; then
        IFS=':' read -r -a sps <<< "$site_packages"
        for sp in "${sps[@]}"; do
            for f in "$sp"/nvidia/*/compute-sanitizer/compute-sanitizer "$sp"/nvidia/*/bin/compute-sanitizer; do
                [ -x "$f" ] && { sanitizer="$f"; break 2; }
            done
        done
    fi
fi
memcheck_lines=""
memcheck_errors=0
memcheck_runs=0
memcheck_note=""
if [ -z "$sanitizer" ]; then
    memcheck_line="compute-sanitizer: not present, skipped (looked in PATH, /usr/local/cuda*/bin, /opt, and the Python environment's nvidia/ wheels)"
    echo "$memcheck_line"
    phase_end "not present"
else
    echo "compute-sanitizer: $sanitizer"
    # Test binary, libtest filter ("" = all), cap in seconds.
    for spec in "gpu_runtime||40" "gpu_gemm|gemm_f32|50"; do
        IFS='|' read -r bin filter cap <<< "$spec"
        [ -x "$here/bin/tests/$bin" ] || { memcheck_lines+="- $bin: not in the pack"$'\n'; continue; }
        label="memcheck/$bin${filter:+ $filter}"
        limit=$(item_limit "$cap")
        log="$(log_of "$label")"
        if [ "$limit" -lt 5 ]; then
            memcheck_lines+="- $bin${filter:+ ($filter)}: skipped, the time budget was spent"$'\n'
            memcheck_note="partly skipped for time"
            continue
        fi
        memcheck_runs=$((memcheck_runs + 1))
        start=$(now)
        ( cd "$here" && run_with_timeout "$limit" "$sanitizer" --tool memcheck --report-api-errors no \
            --print-limit 100 "$here/bin/tests/$bin" ${filter:+"$filter"} ) > "$log" 2>&1
        rc=$?
        took=$(($(now) - start))
        n="$(grep -Eo 'ERROR SUMMARY: [0-9]+ error' "$log" | tail -n 1 | grep -Eo '[0-9]+')"
        tests="$(grep -E '^test result:' "$log" | tail -n 1)"
        if [ -n "$n" ]; then
            memcheck_errors=$((memcheck_errors + n))
            memcheck_lines+="- $bin${filter:+ ($filter)}: $n errors; tests exit $rc; ${took} s; ${tests:-no test summary}"$'\n'
            if [ "$n" -gt 0 ]; then
                failed+=("$label")
                details+=$'\n'"### $label ($n errors)"$'\n\n```text\n'"$(grep -E '^=========' "$log" | head -n 150)"$'\n```\n'
            elif [ $rc -ne 0 ]; then
                failed+=("$label")
                details+=$'\n'"### $label (exit $rc under memcheck)"$'\n\n```text\n'"$(tail -n 80 "$log")"$'\n```\n'
            else
                passed=$((passed + 1))
            fi
        elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
            partial="$(grep -cE '^========= (Invalid|Out-of-range|Misaligned|Address|Malformed|Barrier|Warp|Program hit|Error)' "$log")"
            memcheck_errors=$((memcheck_errors + partial))
            memcheck_lines+="- $bin${filter:+ ($filter)}: timed out after ${limit} s, no summary; $partial errors reported before that"$'\n'
            memcheck_note="partly timed out"
            if [ "$partial" -gt 0 ]; then failed+=("$label"); fi
        else
            memcheck_lines+="- $bin${filter:+ ($filter)}: no ERROR SUMMARY line (exit $rc); see logs/$(basename "$log")"$'\n'
            failed+=("$label")
            details+=$'\n'"### $label (no summary, exit $rc)"$'\n\n```text\n'"$(tail -n 80 "$log")"$'\n```\n'
        fi
        echo "memcheck $bin${filter:+ $filter}: ${n:-?} errors (exit $rc, ${took} s)"
    done
    if [ "$memcheck_runs" -eq 0 ]; then
        memcheck_line="compute-sanitizer memcheck: not run, the time budget was spent — $sanitizer"
        phase_end "not run (time budget)"
    else
        memcheck_line="compute-sanitizer memcheck: **${memcheck_errors} errors found**${memcheck_note:+ ($memcheck_note)} — $sanitizer"
        phase_end "${memcheck_errors} errors"
    fi
fi

# ---------------------------------------------------------------------------
# The report: one file.
total=$(($(now) - check_start))
{
    echo "# cudnn device check"
    echo
    echo "- date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "- host: $(uname -srm); $(ldd --version 2>/dev/null | head -n 1)"
    echo "- GPU: ${gpu:-nvidia-smi not available}"
    echo "- CUDNN_RS_SEARCH_PATH: ${CUDNN_RS_SEARCH_PATH:-(unset)}"
    echo "- PyTorch: $torch_desc"
    echo "- $memcheck_line"
    echo
    echo "**${passed} passed, ${#failed[@]} failed**${failed[*]:+: ${failed[*]}}"
    echo
    echo "## Time"
    echo
    echo "${total} s in all (budget ${budget_total} s)."
    echo
    echo "| phase | estimate s | cap s | took s | note |"
    echo "|---|---:|---:|---:|---|"
    printf '%s' "$phase_rows"
    echo
    echo "## Results"
    echo
    echo "| binary | result | seconds | summary |"
    echo "|---|---|---|---|"
    printf '%s' "$results"
    echo
    echo "## Memory checker"
    echo
    echo "$memcheck_line"
    echo
    printf '%s' "$memcheck_lines"
    echo
    if [ -f "$compare" ]; then
        sed 's/^# /## /; s/^## Host/### Host/' "$compare"
    else
        echo "## Ours against PyTorch"
        echo
        echo "compare_torch.py wrote no report; see logs/compare_torch.log."
    fi
    echo
    echo "## Our benchmark tables"
    for b in ${bench_labels[@]+"${bench_labels[@]}"}; do
        log="$(log_of "bench/$b")"
        [ -f "$log" ] || continue
        echo
        echo "### $b"
        echo
        sed 's/^# /#### /' "$log"
    done
    echo
    echo "## doctor"
    echo
    echo '```text'
    cat "$out/logs/doctor.log" 2>/dev/null
    echo '```'
    if [ -n "$details" ]; then
        echo
        echo "## Failures"
        printf '%s\n' "$details"
    fi
} > "$report"

echo
echo "${passed} passed, ${#failed[@]} failed; ${total} s; report: $report"
[ ${#failed[@]} -eq 0 ]
