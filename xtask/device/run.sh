#!/usr/bin/env bash
# Packed by `cargo xtask device-check` (source: xtask/device/run.sh): the cudnn
# GPU check, for a machine with an NVIDIA GPU and no Rust toolchain.
#
#   bash run.sh                         # everything; results in $OUT (or .)
#   PHASES=tests,torch bash run.sh      # a quick rerun of some phases
#
# Phases, in order of value, each with its estimate on one H200 and a cap
# (seconds). Unit and host tests are not here: CI runs them.
#   props     device_props: cuDNN's device-properties JSON for device 0,
#             raw, into $OUT/device_properties.json, and the loaded
#             libraries' versions; doctor. Always runs. No device: the
#             check stops here and reports every other binary as not run. est   5  cap  30
#   tests     every gpu_* test binary, GPU and libraries required
#             (gpu_device_props compares the JSON with the H200 preset;
#             cuDNN 9.19 compiles its runtime-fusion kernels with NVRTC
#             as it plans: seconds per graph)                          est  60  cap 150
#   examples  the examples that run on a GPU (ddp_lenet as one rank)      est  30  cap  60
#   torch     our CSV benchmarks (bench_gemm 0.1 s per case, bench_conv
#             --quick --exhaustive, bench_ops, bench_attention 1k/4k/8k)
#             then compare_torch.py: the same cases through PyTorch,
#             on the same device, right after ours                       est 105  cap 150
#   bench     the other benchmarks (bench_ops --quick, bench_host,
#             bench_graph, bench_nccl)                                    est  35  cap  60
#   memcheck  compute-sanitizer memcheck on gpu_runtime and gpu_gemm's
#             gemm_f32 tests; "not supported on this device's runtime"
#             is a skip with its reason                                   est  35  cap  60
# Estimates add up to 270 s (4.5 minutes). CHECK_BUDGET_S (default 345)
# caps the whole run: a phase gets what is left of it, and a binary that
# cannot start in time is reported as not run. PER_BINARY_TIMEOUT (default
# 100) caps each test binary. PHASES (default: all of them) picks phases by
# name, comma-separated; binaries of phases left out are listed as skipped.
#
# Works in a temporary folder (the binaries are unpacked there from
# bin.tar.xz) and leaves at most three files in $OUT: report.md,
# device_properties.json and device-check-logs.tar.gz (logs, CSVs, the
# PyTorch comparison). Prints a summary (under 12,000 characters) last.
# Exits non-zero if anything failed or did not run.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${OUT:-.}"
mkdir -p "$out" || { echo "cannot create OUT=$out" >&2; exit 2; }
out="$(cd "$out" && pwd)"
# The binaries get no OUT: nothing of theirs lands there.
unset OUT
report="$out/report.md"
props_json="$out/device_properties.json"
archive="$out/device-check-logs.tar.gz"
per_binary_timeout="${PER_BINARY_TIMEOUT:-100}"
budget_total="${CHECK_BUDGET_S:-345}"
report_reserve=8
all_phases="props,tests,examples,torch,bench,memcheck"
phases=",${PHASES:-$all_phases},props,"
check_start=$(date +%s)

work="$(mktemp -d "${TMPDIR:-/tmp}/cudnn-device-check.XXXXXX")" || { echo "mktemp failed" >&2; exit 2; }
mkdir -p "$work/logs" "$work/csv" "$work/run"
rm -f "$report" "$archive"

now() { date +%s; }
log_of() { printf '%s/logs/%s.log' "$work" "$(printf '%s' "$1" | tr '/ ' '__')"; }
budget_left() { echo $((budget_total - ($(now) - check_start) - report_reserve)); }
min() { if [ "$1" -lt "$2" ]; then echo "$1"; else echo "$2"; fi; }
selected() { case "$phases" in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
oneline() { tr '\n|' '  ' | tr -s ' ' | cut -c1-"${1:-110}"; }

# Bookkeeping: one verdict per binary (and per extra item), in run order.
declare -A verdict_of=() why_of=() secs_of=() phase_of=()
order=()
failed=()
skipped=()
passed=0
details=""
phase_rows=""
phase_name=""; phase_est=0; phase_cap=0; phase_t0=0; phase_deadline=0
finished=0
current_item=""; current_start=0

record() { # NAME PHASE VERDICT SECONDS WHY
    local name="$1"
    [ -n "${verdict_of[$name]+x}" ] || order+=("$name")
    phase_of[$name]="$2"; verdict_of[$name]="$3"; secs_of[$name]="$4"; why_of[$name]="$5"
    case "$3" in
        PASS) passed=$((passed + 1)) ;;
        SKIP*) skipped+=("$name") ;;
        *) failed+=("$name") ;;
    esac
}

# ---------------------------------------------------------------------------
# The manifest: every binary the pack holds, each to be run or reported.
manifest=()
if [ -f "$here/MANIFEST" ]; then
    while IFS= read -r line; do
        line="${line%%#*}"; line="${line//[[:space:]]/}"
        [ -n "$line" ] && manifest+=("$line")
    done < "$here/MANIFEST"
fi
phase_for() {
    case "$1" in
        device_props | doctor) echo props ;;
        tests/gpu_*) echo tests ;;
        tests/*) echo tests ;;
        bench_gemm | bench_conv | bench_ops | bench_attention) echo torch ;;
        bench_*) echo bench ;;
        *) echo examples ;;
    esac
}
in_manifest() { local m; for m in ${manifest[@]+"${manifest[@]}"}; do [ "$m" = "$1" ] && return 0; done; return 1; }

# Unpack into the temporary folder; set the run bits at once.
unpack_note=""
bin="$work/bin"
if [ ! -f "$here/bin.tar.xz" ]; then
    unpack_note="bin.tar.xz is not in the pack ($here)"
elif command -v xz >/dev/null 2>&1 && tar -xJf "$here/bin.tar.xz" -C "$work" 2>"$work/logs/unpack.log"; then
    :
else
    py=""
    for p in python3 python; do command -v "$p" >/dev/null 2>&1 && { py="$p"; break; }; done
    if [ -n "$py" ] && "$py" -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2])' \
        "$here/bin.tar.xz" "$work" 2>>"$work/logs/unpack.log"; then
        :
    else
        unpack_note="could not unpack bin.tar.xz (no xz, and no Python with lzma): $(oneline 200 < "$work/logs/unpack.log")"
    fi
fi
[ -d "$bin" ] && find "$bin" -type f -exec chmod +x {} + 2>/dev/null
if [ ${#manifest[@]} -eq 0 ]; then
    unpack_note="${unpack_note:+$unpack_note; }MANIFEST missing or empty"
fi

# cuDNN, cuBLAS, NCCL, NVRTC and the CUDA runtime from the Python
# environment's NVIDIA wheels (next to PyTorch), unless the caller already
# said where they are. No torch import here: that waits for its phase.
python_bin=""
for py in python3 python; do
    command -v "$py" >/dev/null 2>&1 || continue
    sp="$("$py" -c 'import site
d = []
try: d += site.getsitepackages()
except Exception: pass
try: d.append(site.getusersitepackages())
except Exception: pass
print(":".join(x for x in d if x))' 2>/dev/null)" || sp=""
    python_bin="$py"
    if [ -n "$sp" ]; then
        export CUDNN_RS_SEARCH_PATH="${CUDNN_RS_SEARCH_PATH:+$CUDNN_RS_SEARCH_PATH:}$sp"
        break
    fi
done

# Missing device or libraries are failures here, not skips.
export CUDNN_RS_REQUIRE_GPU=1 CUDNN_RS_REQUIRE_LIBS=1 RUST_BACKTRACE=1
export CUDNN_RS_DEVICE_PROPS_JSON="$props_json"

have_timeout=0
command -v timeout >/dev/null 2>&1 && have_timeout=1
run_with_timeout() {
    local secs="$1"; shift
    if [ "$have_timeout" -eq 1 ]; then timeout --kill-after=10 "$secs" "$@"; else "$@"; fi
}

phase_begin() { # NAME EST CAP
    phase_name="$1"; phase_est="$2"; phase_cap="$3"; phase_t0=$(now)
    local left; left=$(budget_left)
    phase_deadline=$((phase_t0 + $(min "$phase_cap" "$left")))
    echo "=== $phase_name (estimate ${phase_est} s, cap ${phase_cap} s, budget left ${left} s)"
}
phase_end() { phase_rows+="| $phase_name | $phase_est | $phase_cap | $(($(now) - phase_t0)) | ${1:-} |"$'\n'; }
phase_skip() { phase_rows+="| $1 | $2 | $3 | 0 | not selected (PHASES) |"$'\n'; }
item_limit() {
    local cap="$1"
    min "$cap" "$(min $((phase_deadline - $(now))) "$(budget_left)")"
}

# run_one NAME CAP CMD...: run in the scratch folder with a time limit, log,
# record PASS / FAIL. A binary missing from the pack is a failure.
run_one() {
    local name="$1" cap="$2"; shift 2
    local log limit start rc summary v
    log="$(log_of "$name")"
    if [ ! -x "$1" ] && ! command -v "$1" >/dev/null 2>&1; then
        record "$name" "$phase_name" "FAIL (missing)" 0 "not run: $1 is not in the unpacked pack${unpack_note:+ ($unpack_note)}"
        echo "FAIL (missing)  $name"
        return
    fi
    limit=$(item_limit "$cap")
    if [ "$limit" -lt 3 ]; then
        record "$name" "$phase_name" "FAIL (no time)" 0 "not run: the check's time budget was spent"
        echo "FAIL (no time)  $name"
        return
    fi
    start=$(now)
    current_item="$name"; current_start=$start
    ( cd "$work/run" && run_with_timeout "$limit" "$@" ) > "$log" 2>&1
    rc=$?
    current_item=""
    summary="$(grep -E '^test result:' "$log" | tail -n 1)"
    if [ -z "$summary" ] && [ $rc -ne 0 ]; then
        summary="$(grep -m1 -iE "panicked|error|failed|gave no|not found" "$log")"
    fi
    [ -n "$summary" ] || summary="$(grep -v '^[[:space:]]*$' "$log" | tail -n 1)"
    summary="$(printf '%s' "$summary" | oneline 110)"
    if [ $rc -eq 0 ]; then
        v="PASS"
    else
        if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then v="FAIL (timeout ${limit}s)"; else v="FAIL (exit $rc)"; fi
        details+=$'\n'"### $name ($v)"$'\n\n```text\n'"$(tail -n 120 "$log" | cut -c1-400)"$'\n```\n'
    fi
    record "$name" "$phase_name" "$v" $(($(now) - start)) "$summary"
    echo "$v  $name  ($(($(now) - start)) s)  $summary"
}

# Every manifest binary of PHASE that has no verdict yet: not run, for WHY.
not_run() { # PHASE VERDICT WHY
    local m
    for m in ${manifest[@]+"${manifest[@]}"}; do
        [ "$(phase_for "$m")" = "$1" ] || continue
        [ -n "${verdict_of[$m]+x}" ] && continue
        record "$m" "$1" "$2" 0 "$3"
    done
}

gpu_line=""

# ---------------------------------------------------------------------------
# The report, the archive and the summary: written once, also when stopped.
finish() {
    [ "$finished" -eq 1 ] && return
    finished=1
    trap - INT TERM
    local total m
    total=$(($(now) - check_start))
    if [ -n "$current_item" ] && [ -z "${verdict_of[$current_item]+x}" ]; then
        record "$current_item" "$phase_name" "FAIL (stopped)" $(($(now) - current_start)) \
            "${stop_reason:-stopped} while it ran; its log: $(tail -n 1 "$(log_of "$current_item")" 2>/dev/null | oneline 80)"
    fi
    # What the manifest holds and nothing ran: a failure with its reason.
    for m in ${manifest[@]+"${manifest[@]}"}; do
        [ -n "${verdict_of[$m]+x}" ] || record "$m" "$(phase_for "$m")" "FAIL (not run)" 0 "not run: ${stop_reason:-the check stopped before its phase}"
    done
    if [ -d "$bin" ]; then
        while IFS= read -r f; do
            m="${f#"$bin"/}"
            in_manifest "$m" || record "$m" "-" "FAIL (not in MANIFEST)" 0 "in bin.tar.xz but not in MANIFEST: not run"
        done < <(find "$bin" -type f | sort)
    fi
    local versions
    versions="$(grep -E '^(cuDNN|cuBLAS|CUDA runtime|NVRTC|NCCL|device) ' "$(log_of device_props)" 2>/dev/null)"
    [ -n "$versions" ] || versions="(device_props printed no library lines; see its log)"
    {
        echo "# cudnn device check"
        echo
        echo '```text'
        printf '%s\n' "$versions"
        echo '```'
        echo
        echo "**${passed} passed, ${#failed[@]} failed, ${#skipped[@]} skipped** in ${total} s (budget ${budget_total} s)${stop_reason:+ — stopped: $stop_reason}"
        echo
        echo "- GPU (nvidia-smi): ${gpu_line:-not available}"
        echo "- host: $(uname -srm); $(ldd --version 2>/dev/null | head -n 1)"
        echo "- date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); phases: ${PHASES:-$all_phases}"
        echo "- CUDNN_RS_SEARCH_PATH: ${CUDNN_RS_SEARCH_PATH:-(unset)}"
        [ -z "$unpack_note" ] || echo "- pack: **$unpack_note**"
        echo "- device_properties.json: $( [ -s "$props_json" ] && echo "$(wc -c < "$props_json") bytes, written first" || echo "not written (no JSON from cuDNN: see device_props below)")"
        echo "- ${memcheck_line:-memcheck: not run}"
        echo
        echo "## Results"
        echo
        echo "| binary | phase | result | s | summary or reason |"
        echo "|---|---|---|---:|---|"
        for m in ${order[@]+"${order[@]}"}; do
            echo "| $m | ${phase_of[$m]} | ${verdict_of[$m]} | ${secs_of[$m]} | ${why_of[$m]//|/\\|} |"
        done
        echo
        echo "## Time"
        echo
        echo "| phase | estimate s | cap s | took s | note |"
        echo "|---|---:|---:|---:|---|"
        printf '%s' "$phase_rows"
        echo
        echo "## Device properties and the H200 preset"
        echo
        echo '```json'
        if [ -s "$props_json" ]; then cat "$props_json"; echo; else echo "(none)"; fi
        echo '```'
        echo
        echo '```text'
        grep -E 'preset|differ|field' "$(log_of tests/gpu_device_props)" 2>/dev/null | head -n 60 || true
        echo '```'
        echo
        echo "## Memory checker"
        echo
        echo "${memcheck_line:-not run}"
        echo
        printf '%s' "${memcheck_lines:-}"
        echo
        if [ -f "$work/compare.md" ]; then
            sed 's/^# /## /; s/^## Host/### Host/' "$work/compare.md"
        else
            echo "## Ours against PyTorch"
            echo
            echo "not run (see the torch phase above)."
        fi
        echo
        echo "## Our benchmark tables"
        local b
        for b in ${bench_names[@]+"${bench_names[@]}"}; do
            [ -f "$(log_of "$b")" ] || continue
            echo
            echo "### $b"
            echo
            sed 's/^# /#### /' "$(log_of "$b")" | head -n 300
        done
        echo
        echo "## device_props and doctor"
        echo
        echo '```text'
        cat "$(log_of device_props)" 2>/dev/null | head -n 80
        echo
        cat "$(log_of doctor)" 2>/dev/null | head -n 80
        echo '```'
        if [ -n "$details" ]; then
            echo
            echo "## Failures"
            printf '%s\n' "$details"
        fi
    } > "$report"

    # One archive of logs, CSVs and the comparison; under 16 MiB.
    cp "$report" "$work/report.md" 2>/dev/null
    ( cd "$work" && tar -czf "$archive" logs csv report.md $( [ -f compare.md ] && echo compare.md ) $( [ -f compare.txt ] && echo compare.txt ) ) 2>/dev/null
    if [ -f "$archive" ] && [ "$(wc -c < "$archive")" -gt $((15 << 20)) ]; then
        for f in "$work"/logs/*.log; do tail -n 3000 "$f" > "$f.t" && mv "$f.t" "$f"; done
        ( cd "$work" && tar -czf "$archive" logs csv report.md ) 2>/dev/null
    fi

    # The summary, last and compact (the caller may keep only the end).
    local s="$work/summary.txt"
    {
        echo
        echo "==================== cudnn device check: summary ===================="
        printf '%s\n' "$versions"
        echo "${passed} passed, ${#failed[@]} failed, ${#skipped[@]} skipped; ${total} s of ${budget_total}${stop_reason:+; stopped: $stop_reason}"
        [ -z "$unpack_note" ] || echo "pack: $unpack_note"
        echo "device_properties.json: $( [ -s "$props_json" ] && cat "$props_json" || echo "not written")"
        grep -E 'differ' "$(log_of tests/gpu_device_props)" 2>/dev/null | head -n 20 | cut -c1-160
        echo "${memcheck_line:-memcheck: not run}"
        echo "--- per binary"
        for m in ${order[@]+"${order[@]}"}; do
            printf '%-18s %-30s %4ss %s\n' "${verdict_of[$m]}" "$m" "${secs_of[$m]}" "$(printf '%s' "${why_of[$m]}" | cut -c1-90)"
        done
    } > "$s.head"
    {
        echo "files in $out: $(cd "$out" && ls -1 report.md device_properties.json device-check-logs.tar.gz 2>/dev/null | tr '\n' ' ')"
        echo "exit: $( [ ${#failed[@]} -eq 0 ] && echo 0 || echo 1 )"
    } > "$s.tail"
    local room=$((11500 - $(wc -c < "$s.head") - $(wc -c < "$s.tail")))
    : > "$s.torch"
    if [ -f "$work/compare.txt" ] && [ "$room" -gt 400 ]; then
        echo "--- ours against PyTorch (full table in report.md)" > "$s.torch"
        if [ "$(wc -c < "$work/compare.txt")" -le $((room - 100)) ]; then
            cat "$work/compare.txt" >> "$s.torch"
        else
            head -c $((room - 200)) "$work/compare.txt" | sed '$d' >> "$s.torch"
            echo "... (cut to fit; see report.md)" >> "$s.torch"
        fi
    fi
    cat "$s.head" "$s.torch" "$s.tail"
    rm -rf "$work"
}
stop_reason=""
on_signal() { stop_reason="stopped by a signal"; finish; exit 130; }
trap on_signal INT TERM
trap finish EXIT

# ---------------------------------------------------------------------------
# props: the device-properties JSON first, before anything parses or plans.
phase_begin props 5 30
echo "libraries searched in: ${CUDNN_RS_SEARCH_PATH:-(unset: the loader defaults)}"
run_one device_props 20 "$bin/device_props" --out "$props_json"
cat "$(log_of device_props)"
# nvidia-smi only after the capture: nothing touches the device before it.
gpu_line="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 4 | tr '\n' ';')"
run_one doctor 20 "$bin/doctor"
phase_end
no_gpu=""
if [ ! -s "$props_json" ]; then
    why="$(grep -m1 -E '^device +none: ' "$(log_of device_props)" 2>/dev/null | sed -E 's/^device +none: //' | oneline 120)"
    # device_props says there is none; or it could not tell and nvidia-smi sees none.
    if [ -n "$why" ] || { ! grep -qE '^device +' "$(log_of device_props)" 2>/dev/null && ! nvidia-smi -L >/dev/null 2>&1; }; then
        no_gpu="no GPU (${why:-device_props gave no JSON}; nvidia-smi: ${gpu_line:-not available})"
    fi
fi
if [ -n "$no_gpu" ]; then
    stop_reason="$no_gpu"
    echo "no GPU: $no_gpu; every other binary is reported as not run"
    for p in tests examples torch bench; do not_run "$p" "FAIL (no GPU)" "not run: $no_gpu"; done
    memcheck_line="memcheck: not run (no GPU)"
    exit 1
fi

# ---------------------------------------------------------------------------
if selected tests; then
    phase_begin tests 60 150
    for m in ${manifest[@]+"${manifest[@]}"}; do
        [ "$(phase_for "$m")" = tests ] || continue
        run_one "$m" "$per_binary_timeout" "$bin/$m"
    done
    phase_end
else
    phase_skip tests 60 150
    not_run tests "SKIP (PHASES)" "phase tests not selected"
fi

# ---------------------------------------------------------------------------
if selected examples; then
    phase_begin examples 30 60
    for m in ${manifest[@]+"${manifest[@]}"}; do
        [ "$(phase_for "$m")" = examples ] || continue
        run_one "$m" 40 "$bin/$m"
    done
    phase_end
else
    phase_skip examples 30 60
    not_run examples "SKIP (PHASES)" "phase examples not selected"
fi

# ---------------------------------------------------------------------------
# Benchmarks: a name per run (the report's table titles; a binary's first
# run goes by its manifest name), args per binary.
bench_names=()
bench() { # NAME CAP BINARY ARGS...
    local name="$1" cap="$2" b="$3"; shift 3
    bench_names+=("$name")
    run_one "$name" "$cap" "$bin/$b" "$@"
}
csvs=("$work/csv/gemm.csv" "$work/csv/conv.csv" "$work/csv/ops.csv" "$work/csv/attention.csv")
csv_benches() {
    bench bench_gemm 30 bench_gemm --seconds 0.1 --csv "$work/csv/gemm.csv"
    bench bench_conv 40 bench_conv --quick --exhaustive --csv "$work/csv/conv.csv"
    bench bench_ops 20 bench_ops --csv "$work/csv/ops.csv"
    bench bench_attention 45 bench_attention --iters 5 --csv "$work/csv/attention.csv"
}
if selected torch; then
    phase_begin torch 105 150
    csv_benches
    # compare_torch.py imports torch itself (the first import of the run).
    py="${python_bin:-python3}"
    tl=$(item_limit 60)
    run_one compare_torch 60 "$py" "$here/compare_torch.py" --out "$work/compare.md" \
        --summary "$work/compare.txt" --budget-s "$((tl > 15 ? tl - 10 : 5))" "${csvs[@]}"
    phase_end
else
    phase_skip torch 105 150
fi

# ---------------------------------------------------------------------------
if selected bench; then
    phase_begin bench 35 60
    selected torch || csv_benches
    bench "bench_ops --quick" 15 bench_ops --quick
    bench bench_host 15 bench_host
    bench bench_graph 15 bench_graph --iters 30
    bench bench_nccl 25 bench_nccl
    phase_end
else
    phase_skip bench 35 60
fi
selected torch || selected bench || not_run torch "SKIP (PHASES)" "phases torch and bench not selected"
not_run bench "SKIP (PHASES)" "phase bench not selected"

# ---------------------------------------------------------------------------
memcheck_lines=""
if selected memcheck; then
    phase_begin memcheck 35 60
    sanitizer="$(command -v compute-sanitizer 2>/dev/null)"
    if [ -z "$sanitizer" ]; then
        for f in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer \
            /opt/cuda/bin/compute-sanitizer /opt/nvidia/*/bin/compute-sanitizer; do
            [ -x "$f" ] && { sanitizer="$f"; break; }
        done
    fi
    if [ -z "$sanitizer" ]; then
        memcheck_line="memcheck: SKIP — compute-sanitizer not present (looked in PATH, /usr/local/cuda*/bin, /opt)"
        record memcheck memcheck "SKIP (not present)" 0 "compute-sanitizer not found"
    else
        errors=0; unsupported=""
        for spec in "gpu_runtime||30" "gpu_gemm|gemm_f32|30"; do
            IFS='|' read -r b filter cap <<< "$spec"
            label="memcheck/$b${filter:+ $filter}"
            limit=$(item_limit "$cap")
            if [ "$limit" -lt 5 ]; then
                record "$label" memcheck "FAIL (no time)" 0 "not run: the check's time budget was spent"
                continue
            fi
            log="$(log_of "$label")"
            start=$(now)
            ( cd "$work/run" && run_with_timeout "$limit" "$sanitizer" --tool memcheck --report-api-errors no \
                --print-limit 100 "$bin/tests/$b" ${filter:+"$filter"} ) > "$log" 2>&1
            rc=$?
            took=$(($(now) - start))
            n="$(grep -Eo 'ERROR SUMMARY: [0-9]+ error' "$log" | tail -n 1 | grep -Eo '[0-9]+')"
            if grep -qiE 'Device not supported|not supported on this (device|platform)|unsupported device' "$log"; then
                unsupported="$(grep -m1 -iE 'not supported|unsupported' "$log" | sed -E 's/^=+ *//' | oneline 120)"
                record "$label" memcheck "SKIP (unsupported)" "$took" "compute-sanitizer: not supported on this device's runtime ($unsupported)"
                memcheck_lines+="- $label: not supported on this device's runtime: $unsupported"$'\n'
                break
            elif [ -n "$n" ] && [ "$n" -eq 0 ] && [ $rc -eq 0 ]; then
                record "$label" memcheck PASS "$took" "0 errors; $(grep -E '^test result:' "$log" | tail -n 1)"
            elif [ -n "$n" ]; then
                errors=$((errors + n))
                record "$label" memcheck "FAIL ($n errors, exit $rc)" "$took" "$(grep -m1 -E '^========= (Invalid|Out-of|Program hit|Error)' "$log" | oneline 100)"
                details+=$'\n'"### $label ($n errors, exit $rc)"$'\n\n```text\n'"$(grep -E '^=========' "$log" | head -n 120)"$'\n```\n'
            else
                record "$label" memcheck "FAIL (exit $rc, no summary)" "$took" "$(tail -n 1 "$log" | oneline 100)"
                details+=$'\n'"### $label (no summary, exit $rc)"$'\n\n```text\n'"$(tail -n 60 "$log")"$'\n```\n'
            fi
            memcheck_lines+="- $label: ${verdict_of[$label]} (${took} s)"$'\n'
        done
        if [ -n "$unsupported" ]; then
            memcheck_line="memcheck: SKIP — not supported on this device's runtime ($unsupported) — $sanitizer"
        else
            memcheck_line="memcheck: ${errors} errors — $sanitizer"
        fi
    fi
    echo "$memcheck_line"
    phase_end
else
    phase_skip memcheck 35 60
    memcheck_line="memcheck: not selected (PHASES)"
fi

[ ${#failed[@]} -eq 0 ]
exit $?
