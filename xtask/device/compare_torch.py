#!/usr/bin/env python3
"""Run our benchmark cases through PyTorch and write one comparison table.

Part of the GPU check (`cargo xtask device-check` packs this file; run.sh
runs it right after our benchmarks, on the same device). It reads the CSV
files our `bench_gemm`, `bench_conv` and `bench_ops` examples wrote with
`--csv` (format: examples/bench_csv.rs), runs every case again with
PyTorch, and writes a markdown report: one table of op, shape, dtype, ours,
PyTorch and ours / PyTorch, then host time per call for the small cases.

PyTorch side, like for like with ours:
- GEMM: torch.matmul / torch.bmm into a preallocated output, row-major,
  inputs filled with the same 0x3C bytes ours uses; f32 without TF32, tf32
  with it; f16/bf16 with f32 accumulation (reduced-precision reductions off).
- Convolution: F.conv1d/2d/3d forward, torch.ops.aten.convolution_backward
  for backward data and backward filter; channels_last for NHWC;
  torch.backends.cudnn.benchmark = True (autotuned, like `--exhaustive`);
  TF32 for rows whose dtype is `tf32` (ours: f32 data with TF32 allowed),
  not for `f32` rows (ours: f32 math). Ours comes twice per case: the
  legacy API (op `fwd`, `bwd_data`, `bwd_filter`) and the graph API (the
  same op with `_graph` after it); both pair with one PyTorch measurement,
  and a second table sets them side by side.
- Attention: F.scaled_dot_product_attention on BSHD-strided q, k, v with
  is_causal as ours (whichever backend PyTorch picks), backward through
  autograd; layer norm: F.layer_norm over the last dim, backward through
  autograd.
- Memory-bound ops: the nearest PyTorch call for each op key (relu,
  sigmoid, softmax, log-softmax, max_pool2d, add with broadcast, batch_norm,
  dropout, ...), backward through torch.ops.aten or autograd.
Each case: 3 warm-up calls (the cuDNN autotune runs there), then a timed
loop with CUDA events around it (device time) and perf_counter around the
queueing (host time), as ours does.

Rows that repeat a case (same suite, case, op, dtype, layout and shape)
are dropped. For attention, the table says which SDPA backend PyTorch
picked (read from its profiler: the aten operation that ran), and each
attention case gets a second PyTorch row with the cuDNN backend forced
(`sdpa_kernel(SDPBackend.CUDNN_ATTENTION)`).

Attention rows run first (the newest cases, the ones a time limit must
not cut). Stopped by SIGTERM or SIGINT (a time limit), it still writes both
reports with what it measured, the rest marked as not run; the reports are
also rewritten after every row.

Standard library and torch only. Exit status: 0 when PyTorch ran; 2 when
torch cannot be imported or sees no CUDA device (the report says so and
still lists our numbers); 3 when stopped by a signal; 1 on bad arguments.

usage: compare_torch.py --out compare.md [--summary compare.txt]
                        [--budget-s S] CSV [CSV ...]
"""

import argparse
import csv
import math
import os
import signal
import sys
import time

# Rows whose device time (ours or PyTorch's) is under this many µs go into
# the host-time table: there the time to queue a call is what a user feels.
SMALL_DEVICE_US = 200.0
# Aim for about this much device time in each timed loop.
TARGET_LOOP_S = 0.05
MIN_ITERS, MAX_ITERS = 5, 500


# ---------------------------------------------------------------------------
# Reading our CSVs


ROW_KEY = ("suite", "case", "op", "dtype", "layout", "shape")
# bench_conv's graph-API rows: the legacy op key with this after it.
GRAPH_SUFFIX = "_graph"


def conv_impl(row):
    """'graph' or 'legacy' for a conv row (which of cuDNN's APIs ours ran); ''
    for the other suites."""
    if row.get("suite") != "conv":
        return ""
    return "graph" if row.get("op", "").endswith(GRAPH_SUFFIX) else "legacy"


def base_op(row):
    """The op PyTorch runs: a conv graph row's op without its suffix."""
    op = row.get("op", "")
    if conv_impl(row) == "graph":
        return op[: -len(GRAPH_SUFFIX)]
    return op


def torch_key(row):
    """Rows with one key are one PyTorch case (measured once): a conv
    case's legacy and graph rows share it."""
    return (row.get("suite", ""), row.get("case", ""), base_op(row), row.get("dtype", ""),
            row.get("layout", ""), row.get("shape", ""), row.get("force", ""))


def ratio_group(row):
    """Where a row's ratio goes in the geometric means: the suite, and for
    conv also the API."""
    impl = conv_impl(row)
    return f"{row['suite']} ({impl})" if impl else row["suite"]


def conv_pairs(rows):
    """[(legacy row or None, graph row or None)] for every conv case, in the
    order of first appearance."""
    pairs, index = [], {}
    for row in rows:
        impl = conv_impl(row)
        if not impl:
            continue
        key = torch_key(row)
        if key not in index:
            index[key] = len(pairs)
            pairs.append([None, None])
        pairs[index[key]][0 if impl == "legacy" else 1] = row
    return [tuple(p) for p in pairs]


def read_rows(paths):
    """Every row of every CSV, in order, each case once; a missing file is a
    note. Attention rows get a twin with PyTorch's cuDNN backend forced."""
    rows, notes, seen, dropped = [], [], set(), 0
    for path in paths:
        if not os.path.exists(path):
            notes.append(f"{os.path.basename(path)}: missing (the benchmark did not run or failed early)")
            continue
        with open(path, newline="", encoding="utf-8") as f:
            got = list(csv.DictReader(f))
        if not got:
            notes.append(f"{os.path.basename(path)}: no rows (the benchmark failed before its first case)")
        for row in got:
            key = tuple(row.get(k, "") for k in ROW_KEY)
            if key in seen:
                dropped += 1
                continue
            seen.add(key)
            row["force"] = ""
            rows.append(row)
            if row.get("suite") == "attention":
                twin = dict(row)
                twin["force"] = "cudnn"
                rows.append(twin)
    if dropped:
        notes.append(f"{dropped} duplicate row(s) dropped (same suite, case, op, dtype, layout, shape)")
    return rows, notes


def parse_shape(text):
    """'m=1;n=2' -> {'m': '1', 'n': '2'}."""
    out = {}
    for part in text.split(";"):
        if "=" in part:
            key, value = part.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def dims(text):
    """'3x3' -> [3, 3]."""
    return [int(v) for v in text.split("x") if v]


def number(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


# ---------------------------------------------------------------------------
# Display


def op_label(row):
    suite, op = row["suite"], row["op"]
    if suite == "gemm":
        return "GEMM batched" if op == "gemm_batched" else "GEMM"
    if suite == "conv":
        return f"conv {base_op(row).replace('_', ' ')} ({conv_impl(row)})"
    if suite == "attention":
        backend = row.get("torch_backend") or "?"
        if row.get("force") == "cudnn":
            return f"{row['case']} [PyTorch: cuDNN forced, ran {backend}]"
        return f"{row['case']} [PyTorch: {backend}]"
    return row["case"]


def shape_label(row):
    s = parse_shape(row["shape"])
    suite = row["suite"]
    if suite == "gemm":
        # Square cases as m x n x k; the others' names already hold their sizes.
        if row["case"].startswith("square"):
            return f"{s.get('m')}x{s.get('n')}x{s.get('k')}"
        return row["case"]
    if suite == "conv":
        spatial, window = s.get("spatial", ""), s.get("window", "")
        c, groups = int(s.get("c", "0")), max(1, int(s.get("groups", "1")))
        parts = [f"x {s.get('n')}x{c}x{spatial}, w {s.get('k')}x{c // groups}x{window}"]
        for key, default in (("stride", "1"), ("pad", "0"), ("dilation", "1")):
            values = set(s.get(key, default).split("x"))
            if values != {default}:
                parts.append(f"{key} {s.get(key)}")
        if s.get("groups", "1") != "1":
            parts.append(f"groups {s.get('groups')}")
        return f"{row['case']}: " + ", ".join(parts)
    if suite == "attention":
        causal = ", causal" if s.get("causal") == "1" else ""
        # Issue 24's options.
        skv = f", s_kv {s['skv']}" if "skv" in s else ""
        causal += " bottom-right" if causal and s.get("align") == "br" else ""
        causal += f", window {s['window']}" if "window" in s else ""
        causal += f", h_kv {s['hkv']}" if "hkv" in s else ""
        causal += f", paged (pages of {s['paged']}; PyTorch contiguous)" if "paged" in s else ""
        causal += ", ragged (PyTorch dense: full lengths)" if "ragged" in s else ""
        causal += f", softcap {s['softcap']} (PyTorch: eager, no SDPA softcap)" if "softcap" in s else ""
        return f"b {s.get('b')}, h {s.get('h')}, s {s.get('s')}{skv}, d {s.get('d')}{causal}"
    if suite == "norm":
        return f"{s.get('n')}x{s.get('d')}"
    return f"{s.get('n')}x{s.get('c')}x{s.get('h')}x{s.get('w')}"


def dtype_label(row):
    if row["suite"] == "gemm":
        return {
            "tf32": "f32 (TF32)",
            "f32": "f32 (no TF32)",
            "fp8": "fp8 e4m3 -> bf16 (_scaled_mm)",
        }.get(row["dtype"], row["dtype"])
    return f"{row['dtype']} {row['layout']}"


def fmt_value(v, metric):
    if v is None:
        return "—"
    return f"{v:.1f}" if metric == "TFLOP/s" else f"{v:.0f}"


def fmt_us(v):
    return "—" if v is None else f"{v:.1f}"


def md_cell(text):
    return str(text).replace("|", "/").replace("\n", " ")


# ---------------------------------------------------------------------------
# PyTorch cases. Each builder returns a zero-argument function to time.


class Skip(Exception):
    """A case PyTorch cannot express; the row says why."""


class Stopped(BaseException):
    """SIGTERM or SIGINT: write what was measured, then stop. A
    BaseException, so that no `except Exception` on the way (the profiler's,
    a case's) can swallow it."""


def on_signal(signum, _frame):
    # One stop is enough: the reports are written next, uninterrupted.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise Stopped(signal.Signals(signum).name)


def torch_dtype(torch, name):
    table = {"f32": torch.float32, "tf32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
    if name not in table:
        raise Skip(f"unknown dtype {name}")
    return table[name]


def new_tf32_api(torch):
    """PyTorch 2.9 and later: fp32_precision settings (mixing them with the
    legacy allow_tf32 flags is an error there, so use one family only)."""
    return hasattr(torch.backends.cuda.matmul, "fp32_precision")


def set_matmul_tf32(torch, enabled):
    if new_tf32_api(torch):
        torch.backends.cuda.matmul.fp32_precision = "tf32" if enabled else "ieee"
    else:
        torch.backends.cuda.matmul.allow_tf32 = enabled


def set_conv_tf32(torch, enabled):
    if new_tf32_api(torch) and hasattr(torch.backends.cudnn, "conv"):
        torch.backends.cudnn.conv.fp32_precision = "tf32" if enabled else "ieee"
    else:
        torch.backends.cudnn.allow_tf32 = enabled


def gemm_case(torch, row, device):
    s = parse_shape(row["shape"])
    m, n, k, batch = (int(s[key]) for key in ("m", "n", "k", "batch"))
    if row["dtype"] == "fp8":
        return scaled_mm_case(torch, m, n, k, batch, device)
    dtype = torch_dtype(torch, row["dtype"])
    set_matmul_tf32(torch, row["dtype"] == "tf32")
    itemsize = torch.empty((), dtype=dtype).element_size()

    def filled(*shape):
        # The same bytes as ours: every byte 0x3C.
        count = math.prod(shape)
        raw = torch.full((count * itemsize,), 0x3C, dtype=torch.uint8, device=device)
        return raw.view(dtype).view(*shape)

    if batch > 1:
        a, b = filled(batch, m, k), filled(batch, k, n)
        c = torch.empty(batch, m, n, dtype=dtype, device=device)
        return lambda: torch.bmm(a, b, out=c)
    a, b = filled(m, k), filled(k, n)
    c = torch.empty(m, n, dtype=dtype, device=device)
    return lambda: torch.matmul(a, b, out=c)


def scaled_mm_case(torch, m, n, k, batch, device):
    """torch._scaled_mm, E4M3 x E4M3 -> bf16 with per-tensor scales of 1:
    A row-major (m, k), B stored (n, k) and passed transposed (the "TN"
    layout both libraries need); every byte 0x3C (1.5), as ours."""
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        raise Skip("this PyTorch has no torch._scaled_mm / float8_e4m3fn")
    if batch > 1:
        raise Skip("torch._scaled_mm is not batched")
    fp8 = torch.float8_e4m3fn
    a = torch.full((m * k,), 0x3C, dtype=torch.uint8, device=device).view(fp8).view(m, k)
    b = torch.full((n * k,), 0x3C, dtype=torch.uint8, device=device).view(fp8).view(n, k)
    one = torch.ones((), dtype=torch.float32, device=device)
    bt = b.t()
    return lambda: torch._scaled_mm(a, bt, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def conv_case(torch, row, device):
    F = torch.nn.functional
    set_conv_tf32(torch, row["dtype"] == "tf32")
    s = parse_shape(row["shape"])
    n, c, k, groups = (int(s[key]) for key in ("n", "c", "k", "groups"))
    spatial, window = dims(s["spatial"]), dims(s["window"])
    pad, stride, dilation = dims(s["pad"]), dims(s["stride"]), dims(s["dilation"])
    nd = len(spatial)
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}.get(nd)
    if conv is None:
        raise Skip(f"{nd}-d convolution")
    dtype = torch_dtype(torch, row["dtype"])
    channels_last = row["layout"] == "NHWC"
    fmt = None
    if channels_last:
        fmt = {2: torch.channels_last, 3: torch.channels_last_3d}.get(nd)
        if fmt is None:
            raise Skip(f"channels-last {nd}-d")

    def rand(*shape):
        t = torch.rand(*shape, dtype=dtype, device=device) - 0.5
        return t.contiguous(memory_format=fmt) if fmt is not None else t

    x = rand(n, c, *spatial)
    w = rand(k, c // groups, *window)
    op = base_op(row)
    if op == "fwd":
        return lambda: conv(x, w, None, stride, pad, dilation, groups)
    y = conv(x, w, None, stride, pad, dilation, groups)
    dy = torch.rand_like(y) - 0.5
    if fmt is not None:
        dy = dy.contiguous(memory_format=fmt)
    masks = {"bwd_data": [True, False, False], "bwd_filter": [False, True, False]}
    if op not in masks:
        raise Skip(f"unknown conv op {row['op']}")
    mask = masks[op]
    backward = torch.ops.aten.convolution_backward
    return lambda: backward(dy, x, w, None, stride, pad, dilation, False, [0] * nd, groups, mask)


def ops_case(torch, row, device):
    F = torch.nn.functional
    aten = torch.ops.aten
    s = parse_shape(row["shape"])
    n, c, h, w = (int(s[key]) for key in ("n", "c", "h", "w"))
    dtype = torch_dtype(torch, row["dtype"])
    x = torch.full((n, c, h, w), 0.5, dtype=dtype, device=device)
    dy = x.clone()
    y = torch.empty_like(x)
    op = row["op"]

    if op == "copy":
        return lambda: y.copy_(x)
    if op == "relu_fwd":
        return lambda: F.relu(x)
    if op == "relu_bwd":
        out = F.relu(x)
        return lambda: aten.threshold_backward(dy, out, 0)
    if op == "sigmoid_fwd":
        return lambda: torch.sigmoid(x)
    if op == "sigmoid_bwd":
        out = torch.sigmoid(x)
        return lambda: aten.sigmoid_backward(dy, out)
    if op == "softmax_fwd":
        return lambda: torch.softmax(x, dim=1)
    if op == "softmax_bwd":
        out = torch.softmax(x, dim=1)
        return lambda: aten._softmax_backward_data(dy, out, 1, dtype)
    if op == "log_softmax_fwd":
        return lambda: torch.log_softmax(x, dim=1)
    if op == "log_softmax_bwd":
        out = torch.log_softmax(x, dim=1)
        return lambda: aten._log_softmax_backward_data(dy, out, 1, dtype)
    if op == "maxpool_fwd":
        return lambda: F.max_pool2d(x, 2, 2)
    if op == "maxpool_bwd":
        out, idx = F.max_pool2d(x, 2, 2, return_indices=True)
        gy = torch.zeros_like(out)
        return lambda: aten.max_pool2d_with_indices_backward(gy, x, [2, 2], [2, 2], [0, 0], [1, 1], False, idx)
    if op == "add_bias":
        bias = torch.zeros(1, c, 1, 1, dtype=dtype, device=device)
        return lambda: y.add_(bias)
    if op == "add":
        return lambda: torch.add(x, dy, out=y)
    if op == "scale":
        return lambda: y.mul_(1.0)
    if op == "set":
        return lambda: y.fill_(1.0)
    if op == "nchw_to_nhwc":
        y_cl = torch.empty_like(x, memory_format=torch.channels_last)
        return lambda: y_cl.copy_(x)
    if op == "reduce_sum":
        return lambda: torch.sum(x, dim=(0, 2, 3), keepdim=True)
    if op in ("bn_infer", "bn_train_fwd", "bn_bwd"):
        weight = torch.ones(c, dtype=torch.float32, device=device)
        bias = torch.zeros(c, dtype=torch.float32, device=device)
        mean = torch.zeros(c, dtype=torch.float32, device=device)
        var = torch.ones(c, dtype=torch.float32, device=device)
        if op == "bn_infer":
            return lambda: F.batch_norm(x, mean, var, weight, bias, training=False, eps=1e-5)
        if op == "bn_train_fwd":
            return lambda: F.batch_norm(x, mean, var, weight, bias, training=True, momentum=0.1, eps=1e-5)
        xg = x.detach().requires_grad_(True)
        wg = weight.detach().requires_grad_(True)
        bg = bias.detach().requires_grad_(True)
        out = F.batch_norm(xg, mean, var, wg, bg, training=True, momentum=0.1, eps=1e-5)
        return lambda: torch.autograd.grad(out, (xg, wg, bg), dy, retain_graph=True)
    if op == "dropout_fwd":
        return lambda: aten.native_dropout(x, 0.5, True)
    if op == "dropout_bwd":
        _, mask = aten.native_dropout(x, 0.5, True)
        return lambda: aten.native_dropout_backward(dy, mask, 2.0)
    raise Skip(f"no PyTorch counterpart for op `{op}`")


def attention_case(torch, row, device):
    """F.scaled_dot_product_attention on the same shape: BSHD storage (q, k, v
    of [b, s, h, d] viewed as [b, h, s, d]), causal, forward, or its autograd
    backward."""
    F = torch.nn.functional
    s = parse_shape(row["shape"])
    b, h, seq, d = (int(s[key]) for key in ("b", "h", "s", "d"))
    causal = s.get("causal", "0") == "1"
    if row["dtype"] == "fp8e4m3":
        # PyTorch's FP8 attention where this PyTorch has one (BHSD, E4M3):
        # tried once here, the row skipped with the reason otherwise.
        fp8 = getattr(torch, "float8_e4m3fn", None)
        if fp8 is None or row["op"] != "sdpa_fwd":
            raise Skip("this PyTorch has no float8_e4m3fn (or no FP8 counterpart for the op)")
        q8, k8, v8 = ((torch.randn(b, h, seq, d, device=device) * 0.5).to(fp8) for _ in range(3))
        try:
            F.scaled_dot_product_attention(q8, k8, v8, is_causal=causal)
        except Exception as e:  # noqa: BLE001 - any refusal means "not offered"
            raise Skip(f"this PyTorch has no FP8 scaled_dot_product_attention ({type(e).__name__}: {e})")
        return lambda: F.scaled_dot_product_attention(q8, k8, v8, is_causal=causal)
    dtype = torch_dtype(torch, row["dtype"])
    # Issue 24 (h6): sinks and the max / sum_exp outputs have no SDPA form in PyTorch.
    if "sink" in s or "maxsum" in s:
        raise Skip("PyTorch's scaled_dot_product_attention has no attention sinks or max / sum_exp outputs")

    # Issue 24's options: keys other than queries (skv), a bottom-right
    # causal mask (align=br: PyTorch's causal_lower_right) and a sliding
    # window (a boolean attn_mask, PyTorch's only SDPA form of one).
    skv = int(s.get("skv", seq))
    bottom_right = s.get("align") == "br"
    window = int(s["window"]) if "window" in s else None

    def bshd(n=seq):
        return (torch.randn(b, n, h, d, dtype=dtype, device=device) * 0.5).transpose(1, 2)

    # A paged cache (paged=PAGE): PyTorch has no paged SDPA, so its row runs
    # over the same keys stored contiguously (GQA via enable_gqa).
    hkv = int(s.get("hkv", h))

    def bshd_kv(n):
        return (torch.randn(b, n, hkv, d, dtype=dtype, device=device) * 0.5).transpose(1, 2)

    q, k, v = bshd(), bshd_kv(skv), bshd_kv(skv)
    # ---- issue 24 (h5): a logit softcap; PyTorch's SDPA has none, so its
    # row is the eager attention with softcap * tanh(scores / softcap) ----
    if "softcap" in s:
        cap = float(s["softcap"])

        def eager(q, k, v):
            sc = (q @ k.transpose(-2, -1)).float() * (d ** -0.5)
            p = torch.softmax(cap * torch.tanh(sc / cap), dim=-1).to(q.dtype)
            return p @ v

        if row["op"] == "sdpa_fwd":
            return lambda: eager(q, k, v)
        qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
        out = eager(qg, kg, vg)
        do = torch.randn_like(out)
        return lambda: torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True)
    # ---- end issue 24 (h5) ----
    kw = dict(is_causal=causal)
    if hkv != h:
        kw["enable_gqa"] = True
    if window is not None:
        i = torch.arange(seq, device=device).unsqueeze(1) + (skv - seq if bottom_right else 0)
        j = torch.arange(skv, device=device).unsqueeze(0)
        keep = j > i - window
        if causal:
            keep = keep & (j <= i)
        kw = dict(attn_mask=keep, enable_gqa=hkv != h)
    elif causal and bottom_right and seq == 1:
        # One query aligned bottom-right sees every key.
        kw = dict(enable_gqa=hkv != h)
    elif causal and bottom_right:
        from torch.nn.attention.bias import causal_lower_right

        kw = dict(attn_mask=causal_lower_right(seq, skv), enable_gqa=hkv != h)
    # ---- issue 24 (h4): an additive bias (bias=1h: a float attn_mask
    # [1, h, s, s_kv]) and ALiBi (alibi=1: slope[h] * (j - i), -inf above
    # the diagonal when causal, as a float attn_mask) ----
    if s.get("bias") == "1h":
        kw = dict(attn_mask=torch.randn(1, h, seq, skv, dtype=dtype, device=device), enable_gqa=hkv != h)
    if s.get("alibi") == "1":
        n = 1 << (h.bit_length() - 1)
        slopes = [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]
        slopes += [2.0 ** (-8.0 * (2 * i + 1) / (2 * n)) for i in range(h - n)]
        sl = torch.tensor(slopes, dtype=torch.float32, device=device).view(1, h, 1, 1)
        i = torch.arange(seq, device=device).view(1, 1, seq, 1)
        j = torch.arange(skv, device=device).view(1, 1, 1, skv)
        m = sl * (j - i).float()
        if causal:
            m = m.masked_fill(j > i, float("-inf"))
        kw = dict(attn_mask=m.to(dtype), enable_gqa=hkv != h)
    # ---- end of issue 24 (h4) ----
    if row["op"] == "sdpa_fwd":
        return lambda: F.scaled_dot_product_attention(q, k, v, **kw)
    if row["op"] == "sdpa_bwd":
        qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
        out = F.scaled_dot_product_attention(qg, kg, vg, **kw)
        do = torch.randn_like(out)
        return lambda: torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True)
    raise Skip(f"no PyTorch counterpart for op `{row['op']}`")


def norm_case(torch, row, device):
    """F.layer_norm over the last dim of [n, d] (weight and bias in x's dtype),
    forward, or its autograd backward (dx, dweight, dbias)."""
    F = torch.nn.functional
    s = parse_shape(row["shape"])
    n, d = int(s["n"]), int(s["d"])
    dtype = torch_dtype(torch, row["dtype"])
    x = torch.randn(n, d, dtype=dtype, device=device)
    weight = torch.ones(d, dtype=dtype, device=device)
    bias = torch.zeros(d, dtype=dtype, device=device)
    if row["op"] == "layer_norm_fwd":
        return lambda: F.layer_norm(x, (d,), weight, bias, 1e-5)
    if row["op"] == "layer_norm_bwd":
        xg, wg, bg = (t.detach().requires_grad_(True) for t in (x, weight, bias))
        out = F.layer_norm(xg, (d,), wg, bg, 1e-5)
        dy = torch.randn_like(out)
        return lambda: torch.autograd.grad(out, (xg, wg, bg), dy, retain_graph=True)
    raise Skip(f"no PyTorch counterpart for op `{row['op']}`")


BUILDERS = {
    "gemm": gemm_case,
    "conv": conv_case,
    "ops": ops_case,
    "attention": attention_case,
    "norm": norm_case,
}


def time_case(torch, fn, ours_us):
    """(device µs, host µs) per call: warm-up, then a timed loop."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    if ours_us and ours_us > 0:
        per_s = ours_us * 1e-6
    else:
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        per_s = max(time.perf_counter() - t, 1e-6)
    iters = int(min(MAX_ITERS, max(MIN_ITERS, TARGET_LOOP_S / per_s)))
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    host_s = time.perf_counter() - t0
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / iters, host_s * 1e6 / iters


# aten operations that name the SDPA backend that ran, in the order looked for.
SDPA_BACKENDS = (
    ("cudnn_attention", "cuDNN"),
    ("flash_attention", "flash"),
    ("efficient_attention", "mem-efficient"),
    ("attention_math", "math"),
    ("overrideable", "overrideable"),
)


def sdpa_backend(torch, fn):
    """Which SDPA backend one call of `fn` ran, from the profiler's aten
    operation names; 'unknown' when none of them shows."""
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn()
        names = [e.name for e in prof.events()]
    except Exception as e:  # the profiler is a nicety, not a requirement
        return f"unknown ({type(e).__name__})"
    for needle, label in SDPA_BACKENDS:
        if any(needle in n for n in names):
            return label
    return "unknown"


class Forced:
    """`sdpa_kernel(SDPBackend.CUDNN_ATTENTION)` for rows that force it; a
    no-op context otherwise."""

    def __init__(self, torch, row):
        self.ctx = None
        if row.get("force") == "cudnn":
            from torch.nn.attention import SDPBackend, sdpa_kernel

            self.ctx = sdpa_kernel(SDPBackend.CUDNN_ATTENTION)

    def __enter__(self):
        if self.ctx is not None:
            self.ctx.__enter__()
        return self

    def __exit__(self, *exc):
        if self.ctx is not None:
            return self.ctx.__exit__(*exc)
        return False


def run_torch(torch, rows, budget_s, started, spent, progress=None):
    """Fill row['torch_us'], row['torch_host_us'], row['torch_note'] (and
    row['torch_backend'] for attention), and `spent` (seconds per suite, kept
    when stopped). Calls `progress()` after every row, so that the reports
    on disk always hold what was measured."""
    device = torch.device("cuda", 0)
    for row in rows:
        row["torch_us"] = row["torch_host_us"] = None
        row["torch_note"] = "not run (stopped)"
    measured = {}  # torch_key -> the row that holds PyTorch's numbers
    for i, row in enumerate(rows):
        row["torch_note"] = ""
        twin = measured.get(torch_key(row))
        if twin is not None:
            # The same PyTorch case (a conv case's other API): measured once.
            for k in ("torch_us", "torch_host_us", "torch_note"):
                row[k] = twin.get(k)
            print(f"[{i + 1}/{len(rows)}] {row['suite']} {row['case']} {row['op']} {row['dtype']}: "
                  f"ours {row.get('device_us') or '-'} µs, PyTorch as for {twin['op']}", flush=True)
            if progress is not None:
                progress()
            continue
        if budget_s is not None and time.monotonic() - started > budget_s:
            row["torch_note"] = "skipped (time budget)"
            continue
        t = time.monotonic()
        try:
            with Forced(torch, row):
                fn = BUILDERS[row["suite"]](torch, row, device)
                row["torch_us"], row["torch_host_us"] = time_case(torch, fn, number(row.get("device_us")))
                if row["suite"] == "attention":
                    row["torch_backend"] = sdpa_backend(torch, fn)
        except Skip as e:
            row["torch_note"] = f"skipped: {e}"
        except Stopped:
            row["torch_note"] = "not run (stopped)"
            raise
        except Exception as e:  # a case PyTorch refuses is a row, not a stop
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            row["torch_note"] = f"error: {type(e).__name__}: {first[:120]}"
            torch.cuda.empty_cache()
        fn = None
        measured[torch_key(row)] = row
        spent[row["suite"]] = spent.get(row["suite"], 0.0) + time.monotonic() - t
        theirs = f"{row['torch_us']:.1f} µs" if row["torch_us"] else row["torch_note"]
        extra = ""
        if row["suite"] == "attention":
            extra = f" [{'cuDNN forced, ' if row.get('force') else ''}ran {row.get('torch_backend', '?')}]"
        print(
            f"[{i + 1}/{len(rows)}] {row['suite']} {row['case']} {row['op']} {row['dtype']}{extra}: "
            f"ours {row.get('device_us') or '-'} µs, PyTorch {theirs}",
            flush=True,
        )
        if progress is not None:
            progress()
    return spent


# ---------------------------------------------------------------------------
# The report


def torch_rate(row):
    us, work = row.get("torch_us"), number(row.get("work"))
    if not us or not work:
        return None
    per_s = work / (us * 1e-6)
    return per_s / 1e12 if row["metric"] == "TFLOP/s" else per_s / 1e9


def write_report(out, rows, notes, header_lines, spent, torch_ran):
    lines = ["# Ours against PyTorch", ""]
    lines += header_lines
    if notes:
        lines += [""] + [f"- note: {n}" for n in notes]
    lines += [
        "",
        "Rates use the same work per call on both sides (the FLOP or bytes in our CSV), so "
        "**ours / PyTorch** is PyTorch's device time over ours: above 1, ours is faster.",
        "",
        "| op | shape | dtype | unit | ours | PyTorch | ours / PyTorch |",
        "|---|---|---|---|---:|---:|---:|",
    ]
    ratios = {}
    for row in rows:
        ours = number(row.get("ours_value"))
        theirs = torch_rate(row) if torch_ran else None
        ratio = ours / theirs if ours and theirs else None
        if ratio and not row.get("force"):
            ratios.setdefault(ratio_group(row), []).append(ratio)
        ours_cell = fmt_value(ours, row["metric"]) if ours else (row.get("detail") or "—")
        if theirs:
            theirs_cell = fmt_value(theirs, row["metric"])
        elif torch_ran:
            theirs_cell = row.get("torch_note") or "—"
        else:
            theirs_cell = "not run"
        lines.append(
            "| "
            + " | ".join(
                md_cell(v)
                for v in (
                    op_label(row),
                    shape_label(row),
                    dtype_label(row),
                    row["metric"],
                    ours_cell,
                    theirs_cell,
                    f"{ratio:.2f}" if ratio else "—",
                )
            )
            + " |"
        )
    if ratios:
        lines += ["", "Geometric mean of ours / PyTorch, over the rows where both ran "
                  "(PyTorch's own choice of SDPA backend, not the forced rows):"]
        for suite, values in ratios.items():
            g = math.exp(sum(math.log(v) for v in values) / len(values))
            lines.append(f"- {suite}: {g:.2f} ({len(values)} row{'s' if len(values) != 1 else ''})")

    lines += conv_table(rows, torch_ran)

    lines += [
        "",
        f"## Host time per call, small cases (device time under {SMALL_DEVICE_US:.0f} µs)",
        "",
        "The time to queue one call (ours: checks plus the library call; PyTorch: Python, "
        "dispatcher and the library call), where it is not hidden behind device time.",
        "",
        "| op | shape | dtype | ours host µs | PyTorch host µs | ours device µs | PyTorch device µs |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    small = 0
    for row in rows:
        ours_dev = number(row.get("device_us"))
        theirs_dev = row.get("torch_us")
        devs = [v for v in (ours_dev, theirs_dev) if v]
        if not devs or min(devs) >= SMALL_DEVICE_US:
            continue
        small += 1
        lines.append(
            "| "
            + " | ".join(
                md_cell(v)
                for v in (
                    op_label(row),
                    shape_label(row),
                    dtype_label(row),
                    fmt_us(number(row.get("host_us"))),
                    fmt_us(row.get("torch_host_us")),
                    fmt_us(ours_dev),
                    fmt_us(theirs_dev),
                )
            )
            + " |"
        )
    if small == 0:
        lines.append("| (none) | | | | | | |")
    if spent:
        lines += ["", "PyTorch side, seconds per suite (build, warm-up incl. autotune, timing): "
                  + ", ".join(f"{k} {v:.1f}" for k, v in spent.items())]
    write_file(out, "\n".join(lines) + "\n")


def conv_table(rows, torch_ran):
    """Markdown lines: each conv case's legacy and graph rows side by side
    against the one PyTorch measurement they share; [] without conv rows."""
    pairs = conv_pairs(rows)
    if not pairs:
        return []
    lines = [
        "",
        "## Convolution: legacy API and graph API against PyTorch",
        "",
        "Ours through cuDNN's legacy API (`cudnnConvolution*`, algorithm from the search) and "
        "through its graph API (engine configurations autotuned, as PyTorch's benchmark mode "
        "does); both against the same PyTorch run.",
        "",
        "The graph API's candidates are not quite PyTorch's: ours also leave out engines with the "
        "numerical note REDUCED_PRECISION_REDUCTION, which PyTorch's filterEngineConfigs keeps "
        "(both leave out DOWN_CONVERT_INPUTS ones); the detail column says how many were timed.",
        "",
        "| op | shape | dtype | legacy | graph | PyTorch | legacy / PyTorch | graph / PyTorch "
        "| legacy algorithm | graph engine |",
        "|---|---|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for legacy, graph in pairs:
        first = legacy or graph
        metric, theirs = first["metric"], torch_rate(first) if torch_ran else None
        ours = [number(r.get("ours_value")) if r else None for r in (legacy, graph)]
        values = [fmt_value(v, metric) if v else ((r.get("detail") or "—") if r else "not run")
                  for v, r in zip(ours, (legacy, graph))]
        ratios = [f"{v / theirs:.2f}" if v and theirs else "—" for v in ours]
        details = [(r.get("detail") or "—") if r and v else "—" for v, r in zip(ours, (legacy, graph))]
        theirs_cell = fmt_value(theirs, metric) if theirs else (first.get("torch_note") or "not run")
        cells = [f"conv {base_op(first).replace('_', ' ')}", shape_label(first), dtype_label(first),
                 *values, theirs_cell, *ratios, *details]
        lines.append("| " + " | ".join(md_cell(v) for v in cells) + " |")
    return lines


def write_file(path, text):
    """Write whole or not at all (a stop mid-write leaves the last version)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def write_summary(path, rows, header, torch_ran):
    """The compact text table for a terminal (run.sh prints it last)."""
    def cut(text, n):
        text = str(text)
        return text if len(text) <= n else text[: n - 1] + "~"

    lines = [header, "ours / PyTorch above 1: ours faster", ""]
    lines.append(f"{'op':<34} {'shape':<30} {'dtype':<11} {'unit':<7} {'ours':>8} {'torch':>8} {'ratio':>6}")
    ratios = {}
    for row in rows:
        ours = number(row.get("ours_value"))
        theirs = torch_rate(row) if torch_ran else None
        ratio = ours / theirs if ours and theirs else None
        if ratio and not row.get("force"):
            ratios.setdefault(ratio_group(row), []).append(ratio)
        note = row.get("torch_note") or "-"
        short = ("stopped" if note.startswith("not run") else "no time" if "budget" in note
                 else "n/a" if note.startswith("skipped") else "error" if note.startswith("error") else note)
        theirs_cell = fmt_value(theirs, row["metric"]) if theirs else cut(short, 8)
        lines.append(
            f"{cut(op_label(row), 34):<34} {cut(shape_label(row), 30):<30} {cut(dtype_label(row), 11):<11} "
            f"{cut(row['metric'], 7):<7} {fmt_value(ours, row['metric']) if ours else '-':>8} "
            f"{theirs_cell:>8} {f'{ratio:.2f}' if ratio else '-':>6}"
        )
    if ratios:
        lines.append("")
        lines.append(
            "geometric mean ours / PyTorch: "
            + ", ".join(
                f"{k} {math.exp(sum(math.log(v) for v in vs) / len(vs)):.2f} ({len(vs)})"
                for k, vs in ratios.items()
            )
        )
    write_file(path, "\n".join(lines) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the markdown report to write")
    parser.add_argument("--summary", default=None,
                        help="also write a compact text table here")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="stop starting new cases after this many seconds")
    parser.add_argument("csv", nargs="+", help="CSV files from the bench_* examples (--csv)")
    args = parser.parse_args()
    started = time.monotonic()
    rows, notes = read_rows(args.csv)
    # Attention first: the newest cases, the ones a time limit must not cut.
    rows.sort(key=lambda r: r.get("suite") != "attention")

    def both(header, spent, torch_ran, short):
        write_report(args.out, rows, notes, header, spent, torch_ran)
        if args.summary:
            write_summary(args.summary, rows, short, torch_ran)

    # What a stop writes: compare() fills it in as it gets further.
    state = {"header": [], "spent": {}, "ran": False, "who": "PyTorch", "where": "while importing torch"}
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        return compare(args, rows, both, started, state)
    except Stopped as e:
        both(state["header"] + [f"- **stopped by {e}** {state['where']}: the rows not measured say so"],
             state["spent"], state["ran"], f"{state['who']}; stopped by {e} {state['where']}")
        print(f"compare_torch: stopped by {e} {state['where']}; wrote what was measured to {args.out}")
        return 3


def compare(args, rows, both, started, state):
    """Import torch, then time every row; the reports are written all along."""
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install
        header = [
            f"**PyTorch: not available** — `import torch` failed in {sys.executable}: "
            f"{type(e).__name__}: {e}. No comparison was run; our numbers alone follow."
        ]
        both(header, {}, False, f"PyTorch not available: import torch failed: {type(e).__name__}: {e}")
        print(f"compare_torch: import torch failed ({e}); wrote our numbers only to {args.out}")
        return 2
    import_s = time.monotonic() - started
    state["where"] = "while PyTorch started CUDA"
    state["who"] = f"PyTorch {torch.__version__}"

    if not torch.cuda.is_available():
        header = [
            f"**PyTorch {torch.__version__}: no CUDA device visible** "
            f"(torch.cuda.is_available() is False). No comparison was run; our numbers alone follow."
        ]
        both(header, {}, False, f"PyTorch {torch.__version__}: no CUDA device visible")
        print(f"compare_torch: torch sees no CUDA device; wrote our numbers only to {args.out}")
        return 2

    torch.backends.cudnn.benchmark = True
    # TF32 for convolutions is set per row (conv_case): on for ours' `tf32`
    # rows, off for `f32` ones.
    for flag in ("allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction"):
        if hasattr(torch.backends.cuda.matmul, flag):
            setattr(torch.backends.cuda.matmul, flag, False)

    who = (
        f"PyTorch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}) "
        f"on {torch.cuda.get_device_name(0)}"
    )
    header = [
        f"- {who}; import torch took {import_s:.1f} s",
        "- PyTorch settings: cudnn.benchmark = True; TF32 for convolutions of our `tf32` rows, not "
        "for `f32` ones (as ours); GEMM f32 "
        "without TF32 and tf32 with it; f16/bf16 GEMM with reduced-precision reductions off; "
        "SDPA: the backend PyTorch picks (named in the op column), and again with cuDNN forced",
        "- ours: the bench_* examples, run just before on the same device (their own tables are "
        "further down the report)",
    ]
    spent = {"import torch": import_s}
    state.update(header=header, spent=spent, ran=True, who=who, where="while running the cases")

    def progress():
        both(header + ["- (partial: written while running)"], spent, True, who)

    run_torch(torch, rows, args.budget_s, started, spent, progress)
    both(header, spent, True, who)
    print(f"compare_torch: wrote {args.out} ({len(rows)} cases, {time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
