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
#   tests     every module of the gpu test binary (one MANIFEST line
#             each, tests/gpu/<module>, run alone through
#             CUDNN_RS_TEST_MODULE), GPU and libraries required
#             (device_props compares the JSON with the H200 preset;
#             cuDNN 9.19 compiles its runtime-fusion kernels with NVRTC
#             as it plans: seconds per graph); then cudnn-candle/gpu,
#             after a check that the driver can load its PTX (CANDLE),
#             and cudnn-candle/example_block (the same binary's trial
#             of the candle_transformer_block example's check)          est  75  cap 150
#   torch     our CSV benchmarks (bench_attention 1k/4k/8k first, then
#             bench_gemm 0.1 s per case, bench_conv --quick --exhaustive
#             --legacy-tc (legacy and graph API, every accepted graph
#             candidate timed: ~30-40 s of plan building alone),
#             bench_ops), then compare_torch.py: the same cases through
#             PyTorch, attention first, on the same device; the items'
#             caps (40 + 10 + 65 + 5 + compare_torch 60) add up to the
#             phase cap                                                  est 115  cap 180
#   examples  the examples that run on a GPU, quick ones first (gemm,
#             conv2d, graph_conv, lenet, ddp_lenet as one rank), then
#             the ones that plan many graphs (attention, aot)            est  30  cap  75
#   bench     cudnn-candle/bench first (cudnn-candle's gpu binary with
#             --bench: its functions against candle's own ops, a
#             markdown table, its own budget of at most 40 s), then the
#             other benchmarks (bench_ops --quick, bench_host,
#             bench_graph, bench_nccl, bench_cudarc, bench_launch)        est  75  cap 110
#   memcheck  compute-sanitizer memcheck on the runtime module and gemm's
#             gemm_f32 tests; "not supported on this device's runtime"
#             is a skip with its reason                                   est  35  cap  60
# Estimates add up to 335 s (5.6 minutes). CHECK_BUDGET_S (default 345)
# caps the whole run: a phase gets what is left of it, and a binary that
# cannot start in time is reported as not run. PER_BINARY_TIMEOUT (default
# 100) caps each test binary; a binary that ignores the TERM at its limit is
# killed 10 s later, so the run may pass the budget by about that much: give
# whatever runs this script a time limit of the budget plus a minute or more
# (420 s for the default). PHASES (default: all of them) picks phases by
# name, comma-separated; an unknown name stops the script before it starts;
# binaries of phases left out are listed as skipped.
#
# Libraries: when Python's torch sits next to NVIDIA's wheels
# (nvidia/cudnn/lib, nvidia/cu13/lib, nvidia/nccl/lib), CUDNN_LIB_DIR,
# CUBLAS_LIB_DIR, CUBLASLT_LIB_DIR, CUDART_LIB_DIR, NVRTC_LIB_DIR and
# NCCL_LIB_DIR point at them (those the caller set are kept), so a toolkit
# named by CUDA_HOME or CUDA_PATH cannot stand in for them; the report lists
# every CUDA*/CUDNN*/CUBLAS*/NCCL*/NVRTC* variable the binaries saw.
#
# cudnn-candle/gpu links libcublas.so.13, libcudart.so.13 and libcurand.so.10
# (and the driver's libcuda.so.1): it runs with torch's nvidia/*/lib folders
# that hold them first on LD_LIBRARY_PATH (the same files the *_LIB_DIR
# variables name), after ldd finds every one. Its kernels are PTX made by the
# CUDA version CANDLE records (toolkit_cuda): a driver runs PTX of its own
# CUDA version or older, so where nvidia-smi's "CUDA Version" is older the
# binary is not run, a failure with the reason. Its MANIFEST lines name
# three runs of it: cudnn-candle/gpu (every trial but example_block),
# cudnn-candle/example_block (that trial alone: its own row) and
# cudnn-candle/bench (--bench, in the bench phase). NOT_PACKED lists what
# `cargo xtask device-check` could not build (no candle toolkit there), each
# a failure with its reason.
#
# Works in a temporary folder (the binaries are unpacked there from
# bin.tar.xz) and leaves at most three files in $OUT: report.md,
# device_properties.json and device-check-logs.tar.gz (logs, CSVs, the
# PyTorch comparison). Prints a summary (under 12,000 characters) last.
# Each binary runs in the background while the script waits: a TERM or INT
# is passed on to it at once, and the report is written within seconds.
# Exits non-zero if anything failed or did not run.
set -uo pipefail

all_phases="props,tests,torch,examples,bench,memcheck"
# PHASES: names from all_phases, comma-separated, spaces ignored; checked
# before anything is touched.
phases_asked="${PHASES:-$all_phases}"
phases_asked="${phases_asked//[[:space:]]/}"
phases=","
IFS=',' read -r -a _asked <<< "$phases_asked"
for p in ${_asked[@]+"${_asked[@]}"}; do
    [ -n "$p" ] || continue
    case ",$all_phases," in
        *",$p,"*) phases+="$p," ;;
        *)
            echo "run.sh: unknown phase \`$p' in PHASES=${PHASES:-}; the phases are: ${all_phases//,/, }" >&2
            exit 2
            ;;
    esac
done
[ "$phases" != "," ] || phases=",$all_phases,"
phases+="props,"

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
check_start=$(date +%s)

work="$(mktemp -d "${TMPDIR:-/tmp}/cudnn-device-check.XXXXXX")" || { echo "mktemp failed" >&2; exit 2; }
mkdir -p "$work/logs" "$work/csv" "$work/run"
# A JSON left by an earlier run in a reused OUT would hide a missing GPU.
rm -f "$report" "$archive" "$props_json"

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
inner_skips=0
skipped_inside=()
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
# What the pack could not hold, with why: "<name>\t<reason>" lines.
declare -A not_packed_why=()
if [ -f "$here/NOT_PACKED" ]; then
    while IFS=$'\t' read -r name why; do
        [ -n "$name" ] && not_packed_why[$name]="${why:-no reason given}"
    done < "$here/NOT_PACKED"
fi
record_not_packed() {
    local m
    for m in ${not_packed_why[@]+"${!not_packed_why[@]}"}; do
        [ -z "${verdict_of[$m]+x}" ] || continue
        record "$m" "$(phase_for "$m")" "FAIL (NOT PACKED)" 0 "not packed: ${not_packed_why[$m]}"
    done
}
phase_for() {
    case "$1" in
        device_props | doctor) echo props ;;
        cudnn-candle/bench) echo bench ;;
        tests/* | cudnn-candle/*) echo tests ;;
        bench_gemm | bench_conv | bench_ops | bench_attention) echo torch ;;
        bench_*) echo bench ;;
        *) echo examples ;;
    esac
}
in_manifest() { local m; for m in ${manifest[@]+"${manifest[@]}"}; do [ "$m" = "$1" ] && return 0; done; return 1; }
# A manifest entry tests/gpu/<module> runs the gpu binary with that module
# alone; any other entry is a binary of its own name.
run_entry() { # ENTRY TIMEOUT
    case "$1" in
        # One test at a time: a capture in global mode on one test's
        # thread makes another thread's cudaMalloc fail (first device run,
        # 2026-12-05: cuda_graphs and cudarc_interop failed that way).
        tests/gpu/*) CUDNN_RS_TEST_MODULE="${1#tests/gpu/}" run_one "$1" "$2" "$bin/tests/gpu" --test-threads 1 ;;
        cudnn-candle/gpu) run_candle "$1" "$2" --skip example_block ;;
        cudnn-candle/example_block) run_candle "$1" "$2" example_block ;;
        *) run_one "$1" "$2" "$bin/$1" ;;
    esac
}

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
# said where they are. No torch import here: that waits for its phase
# (importlib's find_spec locates the package without importing it).
python_bin=""
torch_site=""
for py in python3 python; do
    command -v "$py" >/dev/null 2>&1 || continue
    ts="$("$py" -c 'import importlib.util, os
s = importlib.util.find_spec("torch")
print(os.path.dirname(os.path.dirname(s.origin)) if s and s.origin else "")' 2>/dev/null)" || ts=""
    if [ -n "$ts" ] && [ -d "$ts" ]; then python_bin="$py"; torch_site="$ts"; break; fi
done
if [ -z "$python_bin" ]; then
    for py in python3 python; do command -v "$py" >/dev/null 2>&1 && { python_bin="$py"; break; }; done
fi
if [ -n "$python_bin" ]; then
    sp="$("$python_bin" -c 'import site
d = []
try: d += site.getsitepackages()
except Exception: pass
try: d.append(site.getusersitepackages())
except Exception: pass
print(":".join(x for x in d if x))' 2>/dev/null)" || sp=""
    sp="${torch_site:+$torch_site${sp:+:}}$sp"
    [ -z "$sp" ] || export CUDNN_RS_SEARCH_PATH="${CUDNN_RS_SEARCH_PATH:+$CUDNN_RS_SEARCH_PATH:}$sp"
fi
# torch's own wheels by name: the loaders try CUDA_PATH / CUDA_HOME before
# the search path, so without these a toolkit the image names there would
# give cuBLAS and the runtime. Only where both cuDNN's and CUDA 13's wheel
# folders are there, each variable only if the caller left it unset and its
# library is in the folder.
lib_source="the loaders' search (no torch wheels found)"
nv="$torch_site/nvidia"
if [ -n "$torch_site" ] && [ -d "$nv/cudnn/lib" ] && [ -d "$nv/cu13/lib" ]; then
    lib_source="torch's wheels in $nv"
    pin() { # VAR DIR FILE
        [ -z "${!1:-}" ] || return 0
        [ -e "$2/$3" ] && export "$1=$2"
    }
    pin CUDNN_LIB_DIR "$nv/cudnn/lib" libcudnn.so.9
    pin CUBLAS_LIB_DIR "$nv/cu13/lib" libcublas.so.13
    pin CUBLASLT_LIB_DIR "$nv/cu13/lib" libcublasLt.so.13
    pin CUDART_LIB_DIR "$nv/cu13/lib" libcudart.so.13
    pin NVRTC_LIB_DIR "$nv/cu13/lib" libnvrtc.so.13
    pin NCCL_LIB_DIR "$nv/nccl/lib" libnccl.so.2
fi
lib_env() { env | grep -E '^(CUDA|CUDNN|CUBLAS|CUDART|NCCL|NVRTC)[A-Za-z0-9_]*=' | sort; }

# Missing device or libraries are failures here, not skips.
export CUDNN_RS_REQUIRE_GPU=1 CUDNN_RS_REQUIRE_LIBS=1 RUST_BACKTRACE=1
export CUDNN_RS_DEVICE_PROPS_JSON="$props_json"

have_timeout=0
command -v timeout >/dev/null 2>&1 && have_timeout=1
kill_after=10
current_pid=""
# spawn SECONDS LOG CMD...: CMD in the scratch folder under a time limit
# (TERM at the limit, KILL kill_after seconds later), output to LOG. It runs
# in the background and the script waits for it, so a TERM or INT sent to
# the script runs its handler at once (which passes the signal on); the
# exit status lands in $rc.
spawn() {
    local secs="$1" log="$2"; shift 2
    if [ "$have_timeout" -eq 1 ]; then
        ( cd "$work/run" && exec timeout --kill-after="$kill_after" "$secs" "$@" ) > "$log" 2>&1 &
    else
        ( cd "$work/run" && exec "$@" ) > "$log" 2>&1 &
    fi
    current_pid=$!
    wait "$current_pid"
    rc=$?
    current_pid=""
}
# The item running when a signal came: TERM (timeout passes it on to its
# process group), then KILL to whatever is left after kill_after + 2 s.
stop_current() {
    local pid="$current_pid" i=0
    [ -n "$pid" ] || return 0
    kill -TERM "$pid" 2>/dev/null
    while kill -0 "$pid" 2>/dev/null && [ "$i" -lt $((2 * kill_after + 4)) ]; do
        sleep 0.5
        i=$((i + 1))
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL -- "-$pid" 2>/dev/null
        kill -KILL "$pid" 2>/dev/null
    fi
    wait "$pid" 2>/dev/null
    current_pid=""
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
    local log limit start summary v
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
    spawn "$limit" "$log" "$@"
    current_item=""
    summary="$(grep -E '^test result:' "$log" | tail -n 1)"
    if [ -z "$summary" ] && [ $rc -ne 0 ]; then
        summary="$(grep -m1 -iE "panicked|error|failed|gave no|not found" "$log")"
    fi
    [ -n "$summary" ] || summary="$(grep -v '^[[:space:]]*$' "$log" | tail -n 1)"
    summary="$(printf '%s' "$summary" | oneline 110)"
    if [ $rc -eq 0 ]; then
        v="PASS"
        # A trial that could check nothing says so on stderr ("SKIPPED"
        # first on its line: libtest-mimic cannot mark a started trial
        # ignored); the binary passes, but those trials are no passes.
        local inner
        inner=$(grep -cE '^SKIPPED' "$log")
        if [ "$inner" -gt 0 ]; then
            inner_skips=$((inner_skips + inner))
            skipped_inside+=("$name: $inner")
            summary="$(printf '%s' "$inner trial(s) said SKIPPED, nothing checked in them; $summary" | oneline 150)"
        fi
    else
        if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then v="FAIL (timeout ${limit}s)"; else v="FAIL (exit $rc)"; fi
        details+=$'\n'"### $name ($v)"$'\n\n```text\n'"$(tail -n 120 "$log" | cut -c1-400)"$'\n```\n'
    fi
    record "$name" "$phase_name" "$v" $(($(now) - start)) "$summary"
    echo "$v  $name  ($(($(now) - start)) s)  $summary"
}

# --- candle version check (begin): pure, tested by xtask's unit tests.
# version_ge A B: whether version A (major.minor[.patch]) >= B.
version_ge() {
    local a b i x y
    IFS=. read -r -a a <<< "$1"
    IFS=. read -r -a b <<< "$2"
    for i in 0 1 2; do
        x="${a[$i]:-0}"; y="${b[$i]:-0}"
        [[ "$x" =~ ^[0-9]+$ && "$y" =~ ^[0-9]+$ ]] || return 2
        x=$((10#$x)); y=$((10#$y))
        [ "$x" -gt "$y" ] && return 0
        [ "$x" -lt "$y" ] && return 1
    done
    return 0
}
# driver_cuda_of: the "CUDA Version: X.Y" of nvidia-smi's header on stdin.
driver_cuda_of() { grep -oE 'CUDA Version: *[0-9]+(\.[0-9]+)+' | head -n 1 | grep -oE '[0-9]+(\.[0-9]+)+'; }
# candle_blocker TOOLKIT_CUDA DRIVER_CUDA DRIVER_CAP PACKED_CAP: why the
# candle binary cannot run here (empty: it can).
candle_blocker() {
    local tk="$1" drv="$2" cap="$3" want="$4"
    if [ -z "$tk" ]; then
        echo "the pack has no CANDLE record (toolkit_cuda): rebuild it with cargo xtask device-check"
    elif [ -n "$drv" ] && ! version_ge "$drv" "$tk"; then
        echo "the driver supports CUDA $drv, older than the CUDA $tk candle's PTX was made by: pin the candle toolkit's wheels (fetch-libs --stack candle) to CUDA $drv or older, or update the driver"
    elif [ -n "$cap" ] && [ -n "$want" ] && ! version_ge "$cap" "${want:0:${#want}-1}.${want: -1}"; then
        echo "the GPU's compute capability $cap is below the $((want / 10)).$((want % 10)) candle's kernels were built for"
    fi
}
# --- candle version check (end)

candle_key() { # KEY: its value in the pack's CANDLE record
    [ -f "$here/CANDLE" ] && grep -E "^$1=" "$here/CANDLE" | head -n 1 | cut -d= -f2-
}
candle_line=""
# run_candle NAME CAP [ARGS...]: cudnn-candle's gpu binary with ARGS, if the
# driver can load its PTX and ldd finds its libraries there; with torch's
# CUDA wheels first.
run_candle() {
    local name="$1" cap="$2" exe="$bin/cudnn-candle/gpu" tk ptx want drv gcap why d so ldp="" miss loaded
    shift 2
    tk="$(candle_key toolkit_cuda)"; ptx="$(candle_key ptx_isa)"; want="$(candle_key compute_cap)"
    drv="$(nvidia-smi 2>/dev/null | driver_cuda_of)"
    gcap="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' ')"
    candle_line="cudnn-candle: PTX by CUDA ${tk:-?} (ISA ${ptx:-?}, $(candle_key nvcc_wheel)), sm ${want:-?}; driver's CUDA ${drv:-unknown (nvidia-smi gave none: not checked)}, GPU compute capability ${gcap:-unknown}"
    why="$(candle_blocker "$tk" "$drv" "$gcap" "$want")"
    if [ -n "$why" ]; then
        record "$name" "$phase_name" "FAIL (cannot run)" 0 "not run: $why"
        echo "FAIL (cannot run)  $name: $why"
        return
    fi
    if [ -n "$torch_site" ]; then
        for so in libcublas.so.13 libcublasLt.so.13 libcudart.so.13 libcurand.so.10; do
            for d in "$torch_site"/nvidia/*/lib; do
                [ -e "$d/$so" ] || continue
                case ":$ldp:" in *":$d:"*) ;; *) ldp="${ldp:+$ldp:}$d" ;; esac
                break
            done
        done
    fi
    ldp="${ldp}${LD_LIBRARY_PATH:+${ldp:+:}$LD_LIBRARY_PATH}"
    if [ -x "$exe" ] && command -v ldd >/dev/null 2>&1; then
        miss="$(LD_LIBRARY_PATH="$ldp" ldd "$exe" 2>&1 | grep 'not found' | awk '{print $1}' | tr '\n' ' ')"
        loaded="$(LD_LIBRARY_PATH="$ldp" ldd "$exe" 2>/dev/null | grep -E 'lib(cuda|cublas|cudart|curand)' | awk '{print $1 " -> " $3}' | tr '\n' ' ')"
        candle_line+="; loads: ${loaded:-?}"
        if [ -n "$miss" ]; then
            record "$name" "$phase_name" "FAIL (cannot run)" 0 "not run: ldd finds no ${miss% } (LD_LIBRARY_PATH=${ldp:-unset})"
            echo "FAIL (cannot run)  $name: libraries not found: $miss"
            return
        fi
    fi
    LD_LIBRARY_PATH="$ldp" run_one "$name" "$cap" "$exe" "$@"
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
    # Writing the report takes a second or two: let nothing cut it short.
    trap '' INT TERM
    [ "$finished" -eq 1 ] && return
    finished=1
    stop_current
    local total m
    total=$(($(now) - check_start))
    if [ -n "$current_item" ] && [ -z "${verdict_of[$current_item]+x}" ]; then
        record "$current_item" "$phase_name" "FAIL (stopped)" $(($(now) - current_start)) \
            "${stop_reason:-stopped} while it ran; its log: $(tail -n 1 "$(log_of "$current_item")" 2>/dev/null | oneline 80)"
    fi
    # What the pack could not hold, and what it holds that nothing ran:
    # failures with their reasons.
    record_not_packed
    local p
    for m in ${manifest[@]+"${manifest[@]}"}; do
        [ -z "${verdict_of[$m]+x}" ] || continue
        p="$(phase_for "$m")"
        if selected "$p" || { [ "$p" = torch ] && selected bench; }; then
            record "$m" "$p" "FAIL (not run)" 0 "not run: ${stop_reason:-the check stopped before its phase}"
        else
            record "$m" "$p" "SKIP (PHASES)" 0 "phase $p not selected"
        fi
    done
    if [ -d "$bin" ]; then
        while IFS= read -r f; do
            m="${f#"$bin"/}"
            [ "$m" = tests/gpu ] && [[ " ${manifest[*]-} " == *" tests/gpu/"* ]] && continue
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
        if [ "$inner_skips" -gt 0 ]; then
            echo
            echo "**${inner_skips} trial(s) inside passing binaries said SKIPPED** (checked nothing; not counted as passes): $(IFS=';'; echo "${skipped_inside[*]}")"
        fi
        echo
        echo "- GPU (nvidia-smi): ${gpu_line:-not available}"
        echo "- host: $(uname -srm); $(ldd --version 2>/dev/null | head -n 1)"
        echo "- date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); phases: ${phases_asked:-$all_phases}"
        echo "- libraries: $lib_source; the binaries' CUDA, cuDNN, cuBLAS, NCCL and NVRTC variables:"
        lib_env | sed 's/^\(.*\)$/  - `\1`/'
        [ -z "$unpack_note" ] || echo "- pack: **$unpack_note**"
        for m in ${not_packed_why[@]+"${!not_packed_why[@]}"}; do echo "- **NOT PACKED** $m: ${not_packed_why[$m]}"; done
        [ -z "$candle_line" ] || echo "- $candle_line"
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
        grep -E 'preset|differ|field' "$(log_of tests/gpu/device_props)" 2>/dev/null | head -n 60 || true
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
        echo "${passed} passed, ${#failed[@]} failed, ${#skipped[@]} skipped; ${total} s of ${budget_total}${stop_reason:+; stopped: $stop_reason}${skipped_inside[0]+; trials that said SKIPPED inside passing binaries: $inner_skips}"
        [ -z "$unpack_note" ] || echo "pack: $unpack_note"
        for m in ${not_packed_why[@]+"${!not_packed_why[@]}"}; do echo "NOT PACKED $m: ${not_packed_why[$m]}" | cut -c1-300; done
        [ -z "$candle_line" ] || echo "$candle_line" | cut -c1-400
        echo "libraries: $lib_source; $(lib_env | grep -E '_LIB_DIR=|^CUDA_(HOME|PATH)=' | sed -E "s|=$nv/|=.../|" | tr '\n' ' ')"
        echo "device_properties.json: $( [ -s "$props_json" ] && cat "$props_json" || echo "not written")"
        grep -E 'differ' "$(log_of tests/gpu/device_props)" 2>/dev/null | head -n 20 | cut -c1-160
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
on_signal() {
    trap '' INT TERM
    stop_reason="stopped by a signal"
    echo "run.sh: stopped by a signal${current_item:+ while $current_item ran}; writing the report" >&2
    stop_current
    finish
    exit 130
}
trap on_signal INT TERM
trap finish EXIT

# ---------------------------------------------------------------------------
# props: the device-properties JSON first, before anything parses or plans.
phase_begin props 5 30
echo "libraries: $lib_source; search path: ${CUDNN_RS_SEARCH_PATH:-(unset: the loader defaults)}"
lib_env | sed 's/^/  /'
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
    for p in tests torch examples bench; do not_run "$p" "FAIL (no GPU)" "not run: $no_gpu"; done
    memcheck_line="memcheck: not run (no GPU)"
    exit 1
fi

# ---------------------------------------------------------------------------
if selected tests; then
    phase_begin tests 75 150
    for m in ${manifest[@]+"${manifest[@]}"}; do
        [ "$(phase_for "$m")" = tests ] || continue
        run_entry "$m" "$per_binary_timeout"
    done
    record_not_packed
    phase_end
else
    phase_skip tests 75 150
    not_run tests "SKIP (PHASES)" "phase tests not selected"
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
csvs=("$work/csv/attention.csv" "$work/csv/gemm.csv" "$work/csv/conv.csv" "$work/csv/ops.csv")
csv_benches() {
    # Attention first: the newest cases, and compare_torch.py runs them first.
    # Caps: 40 + 10 + 65 + 5, and compare_torch's 60, are the phase's 180.
    # The last device run (H100): bench_gemm 4 s, bench_ops 0 s, bench_conv
    # 6 s before the graph rows (which build every accepted candidate:
    # --plan-only --quick took 38 s on a shared 2-core host, 8.6 s for the
    # first 16), compare_torch 32 s; bench_attention had failed at its start.
    bench bench_attention 40 bench_attention --iters 5 --csv "$work/csv/attention.csv"
    bench bench_gemm 10 bench_gemm --seconds 0.1 --csv "$work/csv/gemm.csv"
    bench bench_conv 65 bench_conv --quick --exhaustive --legacy-tc --csv "$work/csv/conv.csv"
    bench bench_ops 5 bench_ops --csv "$work/csv/ops.csv"
}
if selected torch; then
    phase_begin torch 115 180
    csv_benches
    # compare_torch.py imports torch itself (the first import of the run).
    py="${python_bin:-python3}"
    tl=$(item_limit 60)
    run_one compare_torch 60 "$py" "$here/compare_torch.py" --out "$work/compare.md" \
        --summary "$work/compare.txt" --budget-s "$((tl > 15 ? tl - 10 : 5))" "${csvs[@]}"
    phase_end
else
    phase_skip torch 115 180
fi

# ---------------------------------------------------------------------------
# Examples: the quick ones first, so that the two that plan many graphs
# (NVRTC compiles on cuDNN 9.19) cannot starve them; then any other example
# of the manifest in its order.
examples_first=(gemm conv2d graph_conv lenet ddp_lenet attention aot)
if selected examples; then
    phase_begin examples 30 75
    ordered=()
    for m in "${examples_first[@]}"; do in_manifest "$m" && ordered+=("$m"); done
    for m in ${manifest[@]+"${manifest[@]}"}; do
        [ "$(phase_for "$m")" = examples ] || continue
        case " ${examples_first[*]} " in *" $m "*) continue ;; esac
        ordered+=("$m")
    done
    for m in ${ordered[@]+"${ordered[@]}"}; do
        [ "$(phase_for "$m")" = examples ] || continue
        run_one "$m" 40 "$bin/$m"
    done
    # Issue 23: LeNet with one training step captured and replayed.
    in_manifest lenet && run_one "lenet --graph" 40 "$bin/lenet" --graph
    phase_end
else
    phase_skip examples 30 75
    not_run examples "SKIP (PHASES)" "phase examples not selected"
fi

# ---------------------------------------------------------------------------
if selected bench; then
    phase_begin bench 75 110
    # cudnn-candle against candle's own ops: its own budget, counted from
    # its start as the item's limit is, 10 s under that limit (half of it
    # when short); the bench starts a case only if the longest so far fits.
    if in_manifest cudnn-candle/bench; then
        bench_names+=("cudnn-candle/bench")
        tl=$(item_limit 50)
        run_candle cudnn-candle/bench 50 --bench --budget-s "$((tl > 20 ? tl - 10 : (tl > 1 ? tl / 2 : 1)))"
    fi
    selected torch || csv_benches
    bench "bench_ops --quick" 15 bench_ops --quick
    bench bench_host 15 bench_host
    bench bench_graph 15 bench_graph --iters 30
    bench bench_cuda_graphs 15 bench_cuda_graphs --iters 100
    bench bench_nccl 25 bench_nccl
    bench bench_cudarc 10 bench_cudarc --rounds 9
    bench bench_launch 15 bench_launch --rounds 7
    phase_end
else
    phase_skip bench 75 110
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
        for spec in "runtime||30" "gemm|gemm_f32|30"; do
            IFS='|' read -r b filter cap <<< "$spec"
            label="memcheck/gpu/$b${filter:+ $filter}"
            limit=$(item_limit "$cap")
            if [ "$limit" -lt 5 ]; then
                record "$label" memcheck "FAIL (no time)" 0 "not run: the check's time budget was spent"
                continue
            fi
            log="$(log_of "$label")"
            start=$(now)
            current_item="$label"; current_start=$start
            CUDNN_RS_TEST_MODULE="$b" spawn "$limit" "$log" "$sanitizer" --tool memcheck \
                --report-api-errors no --print-limit 100 "$bin/tests/gpu" ${filter:+"$filter"}
            current_item=""
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
