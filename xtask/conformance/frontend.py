#!/usr/bin/env python3
"""The conformance tier's frontend side: build each pattern the crate built
with NVIDIA's cuDNN frontend (its compiled `backend_graph`, the C++ graph
PyTorch builds on), for the same target, with no GPU; and load the crate's
plans through the frontend's deserialize.

    frontend.py build REQUEST.json RESULT.json
    frontend.py load  REQUEST.json RESULT.json

Run by `examples/conformance` (which writes REQUEST and reads RESULT). The
frontend must be importable (`--site`), and before it is imported the
driver stub is loaded as `libcuda.so.1` (`--stub`) and cuDNN's folder put
first on the frontend's search (`--cudnn-lib`). Standard library only.
"""

import base64
import ctypes
import json
import os
import struct
import sys
import time
import traceback


# ---- UBJSON (the frontend's serialized form) -------------------------------


def ubj_loads(data):
    b = bytes(data)
    pos = [0]

    def take(n):
        s = b[pos[0] : pos[0] + n]
        if len(s) != n:
            raise ValueError("UBJSON: truncated")
        pos[0] += n
        return s

    def marker():
        return chr(take(1)[0])

    def peek():
        return chr(b[pos[0]])

    ints = {"i": ">b", "U": ">B", "I": ">h", "l": ">i", "L": ">q"}

    def integer(m):
        f = ints[m]
        return struct.unpack(f, take(struct.calcsize(f)))[0]

    def value(m):
        if m in ints:
            return integer(m)
        if m == "d":
            return struct.unpack(">f", take(4))[0]
        if m == "D":
            return struct.unpack(">d", take(8))[0]
        if m == "Z":
            return None
        if m == "T":
            return True
        if m == "F":
            return False
        if m == "S":
            return take(integer(marker())).decode()
        if m == "C":
            return take(1).decode()
        if m == "[":
            return container(False)
        if m == "{":
            return container(True)
        raise ValueError("UBJSON: unknown marker %r" % m)

    def container(is_obj):
        typ = count = None
        if peek() == "$":
            pos[0] += 1
            typ = marker()
        if peek() == "#":
            pos[0] += 1
            count = integer(marker())
        out = {} if is_obj else []
        end = "}" if is_obj else "]"
        i = 0
        while True:
            if count is None:
                if peek() == end:
                    pos[0] += 1
                    return out
            elif i == count:
                return out
            if is_obj:
                key = take(integer(marker())).decode()
            v = value(typ if typ else marker())
            if is_obj:
                out[key] = v
            else:
                out.append(v)
            i += 1

    return value(marker())


def ubj_dumps(v):
    out = bytearray()

    def integer(n):
        for m, f, lo, hi in (
            ("i", ">b", -128, 127),
            ("U", ">B", 0, 255),
            ("I", ">h", -(2**15), 2**15 - 1),
            ("l", ">i", -(2**31), 2**31 - 1),
            ("L", ">q", -(2**63), 2**63 - 1),
        ):
            if lo <= n <= hi:
                out.extend(m.encode())
                out.extend(struct.pack(f, n))
                return
        raise ValueError("UBJSON: integer out of range")

    def string(s):
        e = s.encode()
        integer(len(e))
        out.extend(e)

    def walk(x):
        if x is None:
            out.extend(b"Z")
        elif x is True:
            out.extend(b"T")
        elif x is False:
            out.extend(b"F")
        elif isinstance(x, int):
            integer(x)
        elif isinstance(x, float):
            out.extend(b"D")
            out.extend(struct.pack(">d", x))
        elif isinstance(x, str):
            out.extend(b"S")
            string(x)
        elif isinstance(x, list):
            out.extend(b"[")
            for e in x:
                walk(e)
            out.extend(b"]")
        elif isinstance(x, dict):
            out.extend(b"{")
            for k, e in x.items():
                string(k)
                walk(e)
            out.extend(b"}")
        else:
            raise ValueError("UBJSON: cannot encode %r" % type(x))

    walk(v)
    return bytes(out)


# ---- loading the frontend --------------------------------------------------


def load_frontend(env):
    """Import the frontend with the stub as libcuda.so.1 and the given cuDNN."""
    sys.path.insert(0, env["site"])
    ctypes.CDLL(env["stub"], mode=ctypes.RTLD_GLOBAL)
    os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(
        env["cudnn_lib"] + [os.environ.get("LD_LIBRARY_PATH", "")]
    )
    import cudnn  # noqa: E402

    return cudnn


# ---- graphs ------------------------------------------------------------------

# The factor of the `scale` epilogue step (the crate's patterns use the same).
EPILOGUE_SCALE = 0.5


class Builder:
    """One pattern's graph with the frontend: the crate's inputs (by name,
    with the crate's uids), the op calls a frontend user would make, and the
    outputs named and typed as the crate's, their uids the crate's."""

    def __init__(self, cudnn, spec, target, props):
        self.cudnn = cudnn
        self.spec = spec
        self.p = spec["params"]
        self.dt = {
            "f32": cudnn.data_type.FLOAT,
            "f16": cudnn.data_type.HALF,
            "bf16": cudnn.data_type.BFLOAT16,
            "i32": cudnn.data_type.INT32,
            "i64": cudnn.data_type.INT64,
            "fp8e4m3": cudnn.data_type.FP8_E4M3,
            "fp8e5m2": cudnn.data_type.FP8_E5M2,
        }
        self.props = props
        self.g = cudnn._pybind_module.backend_graph(
            io_data_type=self.dt[self.p.get("io", "f32")],
            intermediate_data_type=cudnn.data_type.FLOAT,
            compute_data_type=cudnn.data_type.FLOAT,
            sm_version=target["sm_version"],
            device_property=self.props,
        )
        self.by_name = {t["name"]: t for t in spec["tensors"]}
        self.t = {}
        for t in spec["tensors"]:
            if not t["output"]:
                self.t[t["name"]] = self.g._make_tensor(
                    dim=t["dims"],
                    stride=t["strides"],
                    data_type=self.dt[t["dtype"]],
                    name=t["name"],
                    uid=t["uid"],
                )

    def by_value(self, rank):
        """A by-value f32 scalar input, as frontend samples make one (the
        value is passed at execution)."""
        one = [1] * rank
        return self.g._make_tensor(
            dim=one, stride=one, data_type=self.cudnn.data_type.FLOAT, is_pass_by_value=True
        )

    def scalar(self, value):
        """A by-value f32 scalar whose value the plan carries."""
        return self.g.tensor_scalar(float(value), self.cudnn.scalar_type.RUNTIME_PARAM)

    def out(self, name, t):
        want = self.by_name[name]
        t.set_output(True).set_name(name).set_uid(want["uid"])
        t.set_data_type(self.dt[want["dtype"]])
        if self.p.get("set_out_layout"):
            t.set_dim(want["dims"]).set_stride(want["strides"])
        return t

    def build(self):
        f = getattr(self, "fam_" + self.spec["family"])
        f()
        return self.g

    # ---- families ----

    def conv_kwargs(self):
        p = self.p
        return dict(
            pre_padding=p["pad"],
            post_padding=p["pad"],
            stride=p["stride"],
            dilation=p["dilation"],
            compute_data_type=self.cudnn.data_type.FLOAT,
        )

    def fam_conv_fprop(self):
        y = self.g.conv_fprop(self.t["x"], self.t["w"], **self.conv_kwargs())
        self.epilogue(y)

    def fam_conv_dgrad(self):
        dx = self.g.conv_dgrad(self.t["dy"], self.t["w"], **self.conv_kwargs())
        dx.set_dim(self.by_name["dx"]["dims"])
        if "drelu" in self.p.get("epilogue", []):
            dx = self.g.relu_backward(dx, self.t["x"])
        self.out("dx", dx)

    def fam_conv_wgrad(self):
        dw = self.g.conv_wgrad(self.t["x"], self.t["dy"], **self.conv_kwargs())
        dw.set_dim(self.by_name["dw"]["dims"])
        self.out("dw", dw)

    def fam_matmul(self):
        c = self.g.matmul(self.t["a"], self.t["b"], compute_data_type=self.cudnn.data_type.FLOAT)
        self.epilogue(c)

    def epilogue(self, y):
        g = self.g
        for step in self.p.get("epilogue", []):
            if step == "bias":
                y = g.bias(y, self.t["bias"])
            elif step == "add":
                y = g.add(y, self.t["z"])
            elif step == "mul":
                y = g.mul(y, self.t["z"])
            elif step == "scale":
                y = g.scale(y, self.scalar(EPILOGUE_SCALE))
            elif step == "relu":
                y = g.relu(y)
            elif step == "gelu":
                y = g.gelu(y)
            elif step == "sigmoid":
                y = g.sigmoid(y)
            elif step == "tanh":
                y = g.tanh(y)
            else:
                raise ValueError("unknown epilogue step %r" % step)
        self.out("y", y)

    def norm_fwd(self, call):
        p = self.p
        phase = self.cudnn.norm_forward_phase.TRAINING if p["training"] else self.cudnn.norm_forward_phase.INFERENCE
        eps = self.by_value(len(self.by_name["x"]["dims"]))
        outs = call(phase, self.t["x"], scale=self.t["scale"], bias=self.t.get("bias"), epsilon=eps)
        self.out("y", outs[0])
        names = p["stats"]
        for name, t in zip(names, [o for o in outs[1:] if o is not None]):
            self.out(name, t)

    def fam_layer_norm(self):
        self.norm_fwd(self.g.layernorm)

    def fam_rms_norm(self):
        self.norm_fwd(self.g.rmsnorm)

    def fam_batch_norm(self):
        rank = len(self.by_name["x"]["dims"])
        eps = self.by_value(rank)
        running = "running_mean" in self.t
        mom = self.by_value(rank) if running else None
        outs = self.g.batchnorm(
            self.t["x"],
            self.t["scale"],
            self.t["bias"],
            self.t.get("running_mean"),
            self.t.get("running_var"),
            eps,
            mom,
        )
        names = ["y", "mean", "inv_variance", "next_running_mean", "next_running_var"]
        for name, t in zip(names, outs):
            if t is not None and name in self.by_name:
                self.out(name, t)

    def fam_batch_norm_inference(self):
        y = self.g.batchnorm_inference(
            self.t["x"], self.t["mean"], self.t["inv_variance"], self.t["scale"], self.t["bias"]
        )
        self.out("y", y)

    def fam_bn_inference_pointwise(self):
        """Batch norm inference from the running mean and variance (as
        PyTorch keeps them): the frontend's batchnorm_inference node takes
        the inverse std instead, so a frontend user with the variance writes
        these pointwise ops (as the crate does)."""
        g, t = self.g, self.t
        # The epsilon as a by-value input of the data's rank, as frontend
        # samples make it (a [1] `tensor_scalar` here makes cuDNN 9.28's
        # runtime compilation fail: COMPILATION_FAILED for every engine).
        centered = g.sub(t["x"], t["mean"])
        inv = g.rsqrt(g.add(t["var"], self.by_value(len(self.by_name["x"]["dims"]))))
        y = g.add(g.mul(g.mul(centered, inv), t["scale"]), t["bias"])
        self.out("y", y)

    def fam_norm_backward(self):
        kind = self.p["kind"]
        g = self.g
        if kind == "layer":
            outs = g.layernorm_backward(
                self.t["dy"], self.t["x"], scale=self.t["scale"], mean=self.t["mean"], inv_variance=self.t["inv_variance"]
            )
        elif kind == "rms":
            outs = g.rmsnorm_backward(
                self.t["dy"], self.t["x"], scale=self.t["scale"], inv_variance=self.t["inv_variance"], has_dbias=self.p["dbias"]
            )
        else:
            outs = g.batchnorm_backward(self.t["dy"], self.t["x"], self.t["scale"], self.t["mean"], self.t["inv_variance"])
        for name, t in zip(["dx", "dscale", "dbias"], outs):
            if t is not None and name in self.by_name:
                self.out(name, t)

    def sdpa_kwargs(self):
        p = self.p
        kw = dict(attn_scale=p["scale"])
        # Issue 24: the diagonal alignment and the sliding window (left bound).
        align = self.cudnn.diagonal_alignment
        diagonal = align.BOTTOM_RIGHT if p.get("diagonal") == "bottom_right" else align.TOP_LEFT
        # Issue 24 (h5): the frontend refuses masks beside a score mod (its
        # own rule); a frontend user writes the causal mask into the score
        # mod instead, for the composite (difference DSM covers the rest).
        fold = self.softcap_folds_masks()
        if p["causal"] and not fold:
            kw.update(diagonal_alignment=diagonal, diagonal_band_right_bound=0)
        if p.get("window") is not None and not fold:
            kw.update(diagonal_alignment=diagonal, diagonal_band_left_bound=p["window"])
        if p.get("paged_max_seq_len_kv") is not None:
            kw.update(
                paged_attention_k_table=self.t["page_table_k"],
                paged_attention_v_table=self.t["page_table_v"],
                paged_attention_max_seq_len_kv=p["paged_max_seq_len_kv"],
            )
        if p["padding"]:
            kw.update(use_padding_mask=True, seq_len_q=self.t["seq_len_q"], seq_len_kv=self.t["seq_len_kv"])
        if p.get("dropout"):
            kw.update(dropout=(p["dropout"], self.t["dropout_seed"], self.t["dropout_offset"]))
        # ---- issue 24 (h5): the logit softcap as a score modifier ----
        if p.get("softcap") is not None:
            kw.update(self.softcap_kwargs(p["softcap"]))
        # ---- end issue 24 (h5) ----
        kw.update(self.bias_kwargs())
        return kw

    # ---- issue 24 (h5): the logit softcap, as the frontend's Softcap class
    # builds it: div, tanh, mul forward; mul, tanh_backward, div backward ----
    def softcap_kwargs(self, cap):
        saved = {}

        def scalar(g):
            if "cap" not in saved:
                saved["cap"] = g.tensor_scalar(float(cap), self.cudnn.scalar_type.RUNTIME_PARAM)
            return saved["cap"]

        def fwd(g, score):
            c = scalar(g)
            saved["x"] = g.div(score, c)
            capped = g.mul(g.tanh(saved["x"]), c)
            if self.softcap_folds_masks():
                capped = self.folded_masks(g, capped)
            return capped

        def bprop(g, ds):
            c = scalar(g)
            return g.div(g.tanh_backward(g.mul(ds, c), saved["x"]), c)

        kw = dict(score_mod=fwd)
        if self.spec["family"] == "sdpa_bwd":
            kw.update(score_mod_bprop=bprop)
        return kw

    def softcap_folds_masks(self):
        """A composite softcap pattern with the top-left causal mask alone
        (a bottom-right shift or a window as i32 index arithmetic in the
        score mod found no engine here: those rows stay difference DSM)."""
        p = self.p
        composite = self.spec["family"] == "sdpa_bwd" or p.get("implementation") == "composite"
        top_left = p.get("diagonal", "top_left") == "top_left"
        return (p.get("softcap") is not None and composite and p["causal"] and top_left
                and p.get("window") is None and not p["padding"])

    def folded_masks(self, g, s):
        """The top-left causal mask on the capped scores as index
        comparisons (key j kept when j <= i), the masked scores -inf."""
        i32, boolean = self.cudnn.data_type.INT32, self.cudnn.data_type.BOOLEAN
        row = g.gen_index(s, 2, compute_data_type=i32)
        col = g.gen_index(s, 3, compute_data_type=i32)
        keep = g.cmp_ge(row, col, compute_data_type=boolean)
        neg_inf = g.tensor_scalar(float("-inf"), self.cudnn.scalar_type.RUNTIME_PARAM)
        return g.binary_select(s, neg_inf, keep)
    # ---- end issue 24 (h5) ----

    # ---- issue 24 (h4): additive bias and ALiBi ----

    def bias_kwargs(self):
        """The bias input (the crate's `bias`) and ALiBi (the frontend
        computes its own slopes; the crate's `alibi_slopes` input stays
        unconnected here)."""
        kw = {}
        if "bias" in self.t:
            kw.update(bias=self.t["bias"])
        if self.p.get("alibi"):
            kw.update(use_alibi_mask=True)
        return kw

    def dbias_kwargs(self):
        """The backward's dBias output, made with the crate's uid, dims and type."""
        want = self.by_name.get("dbias")
        if want is None:
            return {}
        t = self.g._make_tensor(
            dim=want["dims"],
            stride=want["strides"],
            data_type=self.dt[want["dtype"]],
            name="dbias",
            uid=want["uid"],
        )
        t.set_output(True)
        return dict(dBias=t)

    # ---- end of issue 24 (h4) ----
    # ---- issue 24 (h6): softmax max / sum_exp outputs and attention sinks ----

    def softmax_output(self, name):
        """An output the frontend takes from the caller (score_max, ...)."""
        want = self.by_name[name]
        t = self.g._make_tensor(
            dim=want["dims"], stride=want["strides"], data_type=self.dt[want["dtype"]], name=name, uid=want["uid"]
        )
        return self.out(name, t)

    def softmax_kwargs(self, backward):
        p, kw = self.p, {}
        if p.get("sink") and (not backward or p.get("d_sink")):
            kw["sink_token"] = self.t["sink"]
        if backward and p.get("d_sink"):
            kw["dSink_token"] = self.softmax_output("d_sink")
        if not backward and p.get("max_sum_exp"):
            kw["score_max"] = self.softmax_output("max")
            kw["score_sum_exp"] = self.softmax_output("sum_exp")
        return kw

    # ---- end issue 24 (h6) ----

    def ragged(self, name, t, which):
        """Issue 24: a packed (THD) tensor names its ragged offsets."""
        if self.p.get("ragged"):
            t.set_ragged_offset(self.t["ragged_offset_" + which])
        return t

    def ragged_inputs(self, pairs):
        for name, which in pairs:
            self.ragged(name, self.t[name], which)

    def fam_sdpa_fwd(self):
        p = self.p
        self.ragged_inputs((("q", "q"), ("k", "k"), ("v", "v")))
        kw = self.sdpa_kwargs()
        imp = self.cudnn.attention_implementation
        kw["implementation"] = {"auto": imp.AUTO, "native": imp.UNIFIED, "composite": imp.COMPOSITE}[p["implementation"]]
        kw.update(self.softmax_kwargs(backward=False))
        o, stats = self.g.sdpa(self.t["q"], self.t["k"], self.t["v"], generate_stats=p["training"], **kw)
        o.set_dim(self.by_name["o"]["dims"]).set_stride(self.by_name["o"]["strides"])
        self.out("o", o)
        self.ragged("o", o, "o")
        if p["training"]:
            self.out("stats", stats)

    def fam_sdpa_bwd(self):
        t = self.t
        self.ragged_inputs((("q", "q"), ("k", "k"), ("v", "v"), ("o", "o"), ("do", "o")))
        kw = dict(self.sdpa_kwargs(), **self.dbias_kwargs())
        kw.update(self.softmax_kwargs(backward=True))
        dq, dk, dv = self.g.sdpa_backward(t["q"], t["k"], t["v"], t["o"], t["do"], t["stats"], **kw)
        for name, src, x in (("dq", "q", dq), ("dk", "k", dk), ("dv", "v", dv)):
            x.set_dim(self.by_name[src]["dims"]).set_stride(self.by_name[src]["strides"])
            self.out(name, x)
            self.ragged(name, x, src)

    # ---- FP8 (issue 25) ----

    def fam_fp8_matmul(self):
        g, t, f32 = self.g, self.t, self.cudnn.data_type.FLOAT
        acc = g.matmul(t["a"], t["b"], compute_data_type=f32)
        d = g.mul(acc, t["descale_a"], compute_data_type=f32)
        d = g.mul(d, t["descale_b"], compute_data_type=f32)
        if self.p["amax"]:
            m = g.reduction(d, mode=self.cudnn.reduction_mode.AMAX, compute_data_type=f32)
            m.set_dim(self.by_name["amax"]["dims"]).set_stride(self.by_name["amax"]["strides"])
            self.out("amax", m)
        if "scale_c" in t:
            d = g.mul(d, t["scale_c"], compute_data_type=f32)
        self.out("c", d)

    def fam_sdpa_fp8_fwd(self):
        p, t = self.p, self.t
        kw = dict(attn_scale=p["scale"], generate_stats=p["training"])
        if p["causal"]:
            kw.update(diagonal_alignment=self.cudnn.diagonal_alignment.TOP_LEFT, right_bound=0)
        scales = [t[n] for n in ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")]
        o, stats, amax_s, amax_o = self.g.sdpa_fp8(
            t["q"], t["k"], t["v"], *scales, implementation=self.cudnn.attention_implementation.COMPOSITE, **kw
        )
        o.set_dim(self.by_name["o"]["dims"]).set_stride(self.by_name["o"]["strides"])
        self.out("o", o)
        if p["training"]:
            self.out("stats", stats)
        for name, x in (("amax_s", amax_s), ("amax_o", amax_o)):
            x.set_dim(self.by_name[name]["dims"]).set_stride(self.by_name[name]["strides"])
            self.out(name, x)

    def fam_sdpa_fp8_bwd(self):
        p, t = self.p, self.t
        kw = dict(attn_scale=p["scale"])
        if p["causal"]:
            kw.update(diagonal_alignment=self.cudnn.diagonal_alignment.TOP_LEFT, right_bound=0)
        names = ("descale_q", "descale_k", "descale_v", "descale_o", "descale_do", "descale_s", "descale_dp",
                 "scale_s", "scale_dq", "scale_dk", "scale_dv", "scale_dp")
        outs = self.g.sdpa_fp8_backward(
            t["q"], t["k"], t["v"], t["o"], t["do"], t["stats"], *[t[n] for n in names], **kw
        )
        for name, src, x in (("dq", "q", outs[0]), ("dk", "k", outs[1]), ("dv", "v", outs[2])):
            x.set_dim(self.by_name[src]["dims"]).set_stride(self.by_name[src]["strides"])
            self.out(name, x)
        for name, x in zip(("amax_dq", "amax_dk", "amax_dv", "amax_dp"), outs[3:7]):
            x.set_dim(self.by_name[name]["dims"]).set_stride(self.by_name[name]["strides"])
            self.out(name, x)


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def plan_one(cudnn, spec, target, reps):
    r = {"pattern": spec["name"], "target": target["name"]}
    props = cudnn.create_device_properties(target["json"])
    # Timed: the graph calls, validation and the operation graph (the
    # crate's side times its graph calls and Graph::build likewise), then
    # heuristics on that graph; `reps` times (a fresh graph each), the
    # medians count. The last graph is finalized (timed once).
    t_graph, t_heur = [], []
    for _ in range(max(1, reps)):
        t0 = time.perf_counter()
        g = Builder(cudnn, spec, target, props).build()
        g.validate()
        g.build_operation_graph()
        t1 = time.perf_counter()
        g.create_execution_plans([cudnn.heur_mode.A])
        t2 = time.perf_counter()
        t_graph.append(t1 - t0)
        t_heur.append(t2 - t1)
    r["count_a"] = g.get_execution_plan_count()
    r["first_engine"] = g.get_engine_and_knobs_at_index(0)[0] if r["count_a"] else None
    t2 = time.perf_counter()
    g.check_support()
    g.build_plans()
    t3 = time.perf_counter()
    r["workspace"] = g.get_workspace_size()
    blob = g.serialize()
    d = ubj_loads(blob)
    r["plan_json"] = d["cudnn_backend_data"]
    r["built_engine"] = json.loads(r["plan_json"])["engine"]["engineId"]
    r["pass_by_values"] = d.get("pass_by_values", {})
    r["blob"] = base64.b64encode(bytes(blob)).decode()
    r["t_graph_s"], r["t_heur_s"], r["t_finalize_s"] = median(t_graph), median(t_heur), t3 - t2
    return r


def load_one(cudnn, item, target, reps):
    """The crate's plan (its uids mapped to the frontend's by the caller) in
    the frontend's serialized form, through the frontend's deserialize;
    `reps` times (a fresh graph each), the median counts."""
    d = ubj_loads(base64.b64decode(item["blob"]))
    d["cudnn_backend_data"] = item["plan_json"]
    blob = list(ubj_dumps(d))
    times = []
    for _ in range(max(1, reps)):
        g = cudnn._pybind_module.backend_graph(
            sm_version=target["sm_version"], device_property=cudnn.create_device_properties(target["json"])
        )
        t0 = time.perf_counter()
        g.deserialize(blob)
        t1 = time.perf_counter()
        times.append(t1 - t0)
    return {"pattern": item["pattern"], "target": target["name"], "workspace": g.get_workspace_size(), "t_load_s": median(times)}


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("build", "load"):
        sys.stderr.write(__doc__)
        return 2
    with open(sys.argv[2]) as f:
        req = json.load(f)
    cudnn = load_frontend(req["env"])
    out = {
        "frontend": cudnn.__version__,
        "cudnn": cudnn.backend_version_string(),
        "results": [],
    }
    targets = {t["name"]: t for t in req["targets"]}
    for item in req["items"]:
        target = targets[item["target"]]
        try:
            if sys.argv[1] == "build":
                r = plan_one(cudnn, item["spec"], target, req.get("reps", 1))
            else:
                r = load_one(cudnn, item, target, req.get("reps", 1))
        except Exception as e:  # reported per pattern, compared by the caller
            r = {
                "pattern": item["spec"]["name"] if "spec" in item else item["pattern"],
                "target": target["name"],
                "error": "%s: %s" % (type(e).__name__, e),
                "trace": traceback.format_exc(limit=3),
            }
        out["results"].append(r)
    with open(sys.argv[3], "w") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
