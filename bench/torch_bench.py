#!/usr/bin/env python3
"""The ops of kf-bench in PyTorch, eager and torch.compile, written in kf-bench's JSON schema.

Runs the ops of docs/ops.md sections 1-2 (with the semantics written there) on the bench cases of kf's
op registry: [16384, 4096] in f32 is 256 MiB per input, and each case is scaled by --size-mib and by the
dtype exactly as kf-bench's scale_shapes does, so that both tools time the same shapes. With
--cases-from, the cases (ops, shapes, dtypes, attributes) are read from a kf-bench JSON file instead.

Timing: warm-up runs (they also compile, for torch.compile), then --reps timed runs, each between two CUDA
events (on the CPU: a wall clock), and the median is reported. GB/s and TFLOP/s follow kf's cost model
(the bytes of the inputs and outputs, read and written once), and fraction_of_copy is against a copy of
the same size timed in the same way (torch's own copy bandwidth).

Writes one JSON file per mode: OUT_DIR/torch-eager.json and OUT_DIR/torch-compile.json (bench/SCHEMA.md),
for `kf-bench --html report.html --compare OUT_DIR/torch-eager.json --compare OUT_DIR/torch-compile.json`.

Dropout runs torch's own generator (not kf's Philox stream): the same work, another mask.

Sections 3 and 6 (training): layer_norm, rms_norm, add_rms_norm (s = x + r, then rms_norm(s): returns both),
cross_entropy (32k classes; 128k with --all-cases), adamw_step (torch.optim.AdamW: eager is its fused
implementation on CUDA and its foreach one on the CPU, --adamw chooses; compile is torch.compile of the
foreach step) and linear_cross_entropy (F.linear then F.cross_entropy; its _backward form adds
torch.autograd.grad for h and W). They keep torch's own semantics where kf follows torch.

--smoke shrinks every case (1/64 MiB per input; linear_cross_entropy's hidden size and vocabulary to 64
and 512) so that the whole script runs on a CPU in seconds: a check of the script, not a measurement.

    python3 bench/torch_bench.py --out-dir bench/results/local            # CUDA GPU, 256 MiB per input
    python3 bench/torch_bench.py --device cpu --smoke --reps 3 --out-dir /tmp/tb         # smoke test
"""
import argparse
import datetime
import json
import math
import os
import platform
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_events import warm_up  # noqa: E402

torch = None  # imported by load_torch(): --plan-only runs without PyTorch
F = None


def load_torch():
    global torch, F
    import torch as torch_module
    import torch.nn.functional as functional
    torch, F = torch_module, functional

K_BIG = [16384, 4096]
F_ = K_BIG[1]
DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "f64": "float64"}  # torch's names
SIZES = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8}


# kf's bench cases (src/ops/*.cpp, OpDef::bench): (label, input shapes, attributes). An empty shape is an
# optional input left out (the packed form of swiglu / geglu).
BINARY = [("full", [K_BIG, K_BIG], {}), ("bcast", [K_BIG, [F_]], {})]
BIAS = [("full", [K_BIG, [F_]], {})]
UNARY = [("full", [K_BIG], {})]
GATED = [("full", [K_BIG, K_BIG], {}), ("packed", [[K_BIG[0], 2 * K_BIG[1]], []], {})]
ROWS = [("rows4096", [[16384, 4096]], {}), ("rows65536", [[1024, 65536]], {})]


def dropout_cases(second=None):
    return [("p0.1", [K_BIG] + ([second] if second else []), {"p": 0.1, "seed": 1234})]


def gated(act):
    """act(gate) * x; the packed form [.., 2F] holds x then gate."""
    def fn(a, x, gate=None):
        if gate is None:
            x, gate = x.chunk(2, dim=-1)
        return act(gate) * x
    return fn


def gelu_tanh(t):
    return F.gelu(t, approximate="tanh")


def prelu(x, w):
    """docs/ops.md: x if x >= 0 else a x, with a of x's shape or broadcast (F.prelu takes channels only)."""
    return torch.where(x >= 0, x, w * x)


def scaled(x, a):
    return x * a["scale"] if a["scale"] != 1 else x


def drop(t, a):
    return F.dropout(t, a["p"], training=True)


ACTS = {0: lambda t: t, 1: lambda t: F.relu(t), 2: lambda t: F.gelu(t), 3: lambda t: gelu_tanh(t),
        4: lambda t: F.silu(t)}  # kf::Activation


def linear(a, x, w, b=None, r=None):
    """docs/ops.md section 4: act(x W^T + bias) + residual (torch.nn.Linear's W [out, in]); cuBLAS. An
    out_dtype (kf's Attrs::out_dtype) is what eager code writes for it: a cast of the result."""
    y = ACTS[a.get("act", 0)](F.linear(x, w, b))
    if a.get("out_dtype"):
        y = y.to(getattr(torch, DTYPES[a["out_dtype"]]))
    return y if r is None else y + r


def matmul(a, x, w, b=None, r=None):
    y = torch.matmul(x, w)
    y = ACTS[a.get("act", 0)](y if b is None else y + b)
    return y if r is None else y + r


# kf's linear bench cases (src/ops/linalg.cpp): at --size-mib 128 the f16 shapes are as written.
LINEAR = [("4096_gelu", [[4096, 4096], [4096, 4096], [4096], []], {"act": 2}),
          ("4096_bare", [[4096, 4096], [4096, 4096], [], []], {}),
          ("8192_gelu", [[8192, 8192], [8192, 8192], [8192], []], {"act": 2}),
          ("8192_bare", [[8192, 8192], [8192, 8192], [], []], {}),
          ("decode_8192", [[1, 8192], [8192, 8192], [8192], []], {}),
          ("4096_gelu_out_f32", [[4096, 4096], [4096, 4096], [4096], []], {"act": 2, "out_dtype": "f32"})]


def add_rms_norm(a, x, r, w):
    s = x + r
    return s, F.rms_norm(s, (s.shape[-1],), w, eps=1e-6)


def cross_entropy(a, logits, target):
    return F.cross_entropy(logits, target, ignore_index=a.get("ignore_index", -100),
                           label_smoothing=a.get("label_smoothing", 0.0))


def lce_logits(a, h, w):
    z = F.linear(h, w)
    cap = a.get("softcap", 0.0)
    return cap * torch.tanh(z / cap) if cap else z


def lce_loss(a, h, w, target):
    """docs/ops.md section 6: cross_entropy(h W^T) (+ z_loss * mean lse^2 over the rows kept)."""
    z = lce_logits(a, h, w)
    loss = cross_entropy(a, z, target)
    if a.get("z_loss", 0.0):
        keep = target != a.get("ignore_index", -100)
        loss = loss + a["z_loss"] * (torch.logsumexp(z.float(), dim=-1)[keep] ** 2).mean()
    return loss


def lce_backward(a, h, w, target):
    h = h.detach().requires_grad_()
    w = w.detach().requires_grad_()
    loss = lce_loss(a, h, w, target)
    dh, dw = torch.autograd.grad(loss, (h, w))
    return loss, dh, dw


def adamw_maker(mode, a, ins, args):
    """torch.optim.AdamW over one tensor with kf's bench attributes (weight_decay 1e-2, from step 10)."""
    param, grad, m, v = ins
    p = torch.nn.Parameter(param)
    p.grad = grad
    impl = args.adamw or ("fused" if param.device.type == "cuda" else "foreach")
    kw = {"fused": True} if (mode == "eager" and impl == "fused") else {"foreach": True}
    opt = torch.optim.AdamW([p], lr=a.get("lr", 1e-3), betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=a.get("weight_decay", 1e-2), **kw)
    step = torch.tensor(float(a.get("step", 10) - 1), dtype=torch.float32,
                        device=param.device if kw.get("fused") else "cpu")
    opt.state[p] = {"step": step, "exp_avg": m, "exp_avg_sq": v}
    if mode == "compile":  # as PyTorch's compiled-optimizer recipe: the step inside a compiled function
        torch._dynamo.reset()

        @torch.compile(mode=args.compile_mode)
        def compiled_step():
            opt.step()
        return compiled_step, "inductor:foreach"
    return opt.step, "eager:" + ("fused" if kw.get("fused") else "foreach")


# Bench cases of the training ops (src/ops/normalization.cpp, training.cpp, optim.cpp, linear_xent.cpp).
NORM_ROWS = [[16384, 4096], [1024, 65536]]
LN = [("rows4096", [NORM_ROWS[0], [4096], [4096]], {}), ("rows65536", [NORM_ROWS[1], [65536], [65536]], {})]
RMS = [("rows4096", [NORM_ROWS[0], [4096]], {}), ("rows65536", [NORM_ROWS[1], [65536]], {})]
ADD_RMS = [("rows4096", [NORM_ROWS[0], NORM_ROWS[0], [4096]], {}),
           ("rows65536", [NORM_ROWS[1], NORM_ROWS[1], [65536]], {})]
XENT = [("n4096_c32768", [[4096, 32768], [4096]], {}), ("n1024_c131072", [[1024, 131072], [1024]], {})]
ADAMW = [("n64M", [[67108864]] * 4, {"weight_decay": 1e-2, "step": 10})]
LCE = [("n8192_d4096_c131072", [[8192, 4096], [131072, 4096], [8192]], {})]

# Ops whose inputs are not all of the op's dtype: input index -> dtype (class indices are int32).
INPUT_DTYPES = {"cross_entropy": {1: "i32"}, "linear_cross_entropy": {2: "i32"},
                "linear_cross_entropy_backward": {2: "i32"}}
# Inputs never negative (src/ops OpDef::nonneg_inputs: adamw's second moment, batch_norm's variance):
# squares of the uniform values, as kf-bench draws them.
NONNEG = {"adamw_step": {3}, "batch_norm_relu": {4}}
# Ops that need more than a function of their inputs: maker(mode, attrs, inputs, args) -> (call, variant).
MAKERS = {"adamw_step": adamw_maker}

# name -> (family, flops per element as kf's registry counts them, function(attrs, *inputs), bench cases).
# Families as the registry's cost model counts them: "elementwise" and "optimizer" per output element,
# "reduction", "normalization" and "loss" per element of the first input; "lce": the matrix products.
OPS = {
    "add_relu": ("elementwise", 2, lambda a, x, y: F.relu(x + y), BINARY),
    "mul_relu": ("elementwise", 2, lambda a, x, y: F.relu(x * y), BINARY),
    "add_sigmoid": ("elementwise", 5, lambda a, x, y: torch.sigmoid(x + y), BINARY),
    "mul_tanh": ("elementwise", 5, lambda a, x, y: torch.tanh(x * y), BINARY),
    "bias_relu": ("elementwise", 2, lambda a, x, b: F.relu(x + b), BIAS),
    "bias_gelu": ("elementwise", 12, lambda a, x, b: F.gelu(x + b), BIAS),
    "bias_gelu_tanh": ("elementwise", 10, lambda a, x, b: gelu_tanh(x + b), BIAS),
    "bias_silu": ("elementwise", 6, lambda a, x, b: F.silu(x + b), BIAS),
    "swiglu": ("elementwise", 7, gated(lambda t: F.silu(t)), GATED),
    "geglu": ("elementwise", 13, gated(lambda t: F.gelu(t)), GATED),
    "mish_scale": ("elementwise", 10, lambda a, x, s: F.mish(x) * s, BIAS),
    "prelu_bias": ("elementwise", 3, lambda a, x, w, b: F.prelu(x + b, w), [("full", [K_BIG, [F_], [F_]], {})]),
    "dropout": ("elementwise", 2, lambda a, x: drop(x, a), dropout_cases()),
    "gelu_dropout": ("elementwise", 14, lambda a, x: drop(F.gelu(x), a), dropout_cases()),
    "bias_gelu_dropout": ("elementwise", 15, lambda a, x, b: drop(F.gelu(x + b), a), dropout_cases([F_])),
    "add_dropout_residual": ("elementwise", 3, lambda a, x, r: r + drop(x, a), dropout_cases(K_BIG)),
    "sum_squared": ("reduction", 2, lambda a, x: torch.sum(x * x, dim=-1), ROWS),
    "mean_abs": ("reduction", 2, lambda a, x: torch.mean(torch.abs(x), dim=-1), ROWS),
    "softmax": ("reduction", 6, lambda a, x: torch.softmax(scaled(x, a), dim=-1), ROWS),
    "log_softmax": ("reduction", 5, lambda a, x: torch.log_softmax(scaled(x, a), dim=-1), ROWS),
    # Section 4 (flops from the shapes: 2 M N K).
    "linear": ("matmul", 0, linear, LINEAR),
    "matmul": ("matmul", 0, matmul, [("4096", [[4096, 4096], [4096, 4096], [], []], {})]),
    "layer_norm": ("normalization", 8, lambda a, x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5), LN),
    "rms_norm": ("normalization", 6, lambda a, x, w: F.rms_norm(x, (x.shape[-1],), w, eps=1e-6), RMS),
    "add_rms_norm": ("normalization", 7, add_rms_norm, ADD_RMS),
    "cross_entropy": ("loss", 5, cross_entropy, XENT),
    "adamw_step": ("optimizer", 14, None, ADAMW),
    "linear_cross_entropy": ("lce", 2, lce_loss, LCE),
    "linear_cross_entropy_backward": ("lce", 6, lce_backward, LCE),
    # The unfused building blocks (--primitives, as kf-bench's).
    "add": ("primitive", 1, lambda a, x, y: x + y, BINARY),
    "mul": ("primitive", 1, lambda a, x, y: x * y, BINARY),
    "prelu": ("primitive", 2, lambda a, x, w: prelu(x, w), BINARY),
    "relu": ("primitive", 1, lambda a, x: F.relu(x), UNARY),
    "sigmoid": ("primitive", 4, lambda a, x: torch.sigmoid(x), UNARY),
    "tanh": ("primitive", 4, lambda a, x: torch.tanh(x), UNARY),
    "gelu": ("primitive", 11, lambda a, x: F.gelu(x), UNARY),
    "gelu_tanh": ("primitive", 9, lambda a, x: gelu_tanh(x), UNARY),
    "silu": ("primitive", 5, lambda a, x: F.silu(x), UNARY),
    "mish": ("primitive", 9, lambda a, x: F.mish(x), UNARY),
}


def llround(v):
    return int(math.floor(v + 0.5)) if v >= 0 else -int(math.floor(-v + 0.5))


def scale_shapes(shapes, dtype, mib, op=None):
    """kf-bench's scale_shapes: keep `mib` MiB per input in `dtype` by scaling the leading dimension
    (of a matrix product, only the rows of x and of the residual: the weights keep their shape)."""
    out = [list(s) for s in shapes]
    main = list(shapes[0])
    factor = (mib / 256.0) * (4.0 / SIZES[dtype])
    rows = main[0] if len(main) > 1 else 1
    new_rows = max(1, llround(rows * factor))
    if op is not None and OPS[op][0] == "matmul":
        for k, s in enumerate(out):
            if (k == 0 or k == 3) and len(s) > 1 and s[0] == rows:
                s[0] = new_rows
        return out
    for s in out:
        if s and s[0] == rows and (len(s) > 1 or main[-1] != rows):
            s[0] = new_rows
        elif len(main) == 1 and s == main:
            s[0] = max(1, llround(s[0] * factor))
    return out


def numel(s):
    return math.prod(s) if s else 0


def out_shapes(op, shapes):
    """The registry's output shapes (infer); a 0-dimensional output (a loss) is [], one element."""
    family = OPS[op][0]
    x = shapes[0]
    if family == "matmul":
        return [x[:-1] + ([shapes[1][0]] if op == "linear" else [shapes[1][-1]])]
    if family == "reduction" and op in ("sum_squared", "mean_abs"):
        return [x[:-1]]
    if op in ("swiglu", "geglu") and (len(shapes) < 2 or not shapes[1]):
        return [x[:-1] + [x[-1] // 2]]
    if op == "add_rms_norm":
        return [x, x]
    if op in ("cross_entropy", "linear_cross_entropy"):
        return [[]]
    if op == "linear_cross_entropy_backward":
        return [[], x, shapes[1]]
    if op == "adamw_step":
        return [x, x, x]
    return [x]


def cost(op, dtype, shapes, attrs=None):
    """kf's cost model (src/ops/registry.cpp op_cost): bytes of inputs and outputs, flops per element; the
    outputs in attrs' out_dtype where given (linear, matmul)."""
    es = SIZES[dtype]
    out_es = SIZES[(attrs or {}).get("out_dtype") or dtype]
    ys = out_shapes(op, shapes)
    in_dt = INPUT_DTYPES.get(op, {})
    nbytes = sum((4 if in_dt.get(k) == "i32" else es) * numel(s) for k, s in enumerate(shapes) if s)
    nbytes += out_es * sum(math.prod(y) for y in ys)  # math.prod([]) = 1: a 0-dimensional output
    family = OPS[op][0]
    if family == "matmul":  # 2 M N K, K the last dimension of x
        return float(nbytes), float(2 * math.prod(ys[0]) * shapes[0][-1])
    if family == "lce":  # OpDef::flops: 2 N C d (forward), 6 N C d (with the gradients)
        return float(nbytes), float(OPS[op][1] * shapes[0][0] * shapes[1][0] * shapes[0][1])
    n = numel(shapes[0]) if family in ("reduction", "normalization", "loss") else math.prod(ys[0])
    return float(nbytes), float(n * OPS[op][1])


class Timer:
    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def time(self, fn, warmup, reps):
        if self.cuda:
            warm_up(torch, fn, warmup)
        else:
            for _ in range(warmup):
                fn()
        ms = []
        if self.cuda:
            events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
            for a, b in events:
                a.record()
                fn()
                b.record()
            torch.cuda.synchronize()
            ms = [a.elapsed_time(b) for a, b in events]
        else:
            for _ in range(reps):
                t0 = time.perf_counter()
                fn()
                ms.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(ms)

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()


def random_tensor(shape, dtype, device, gen):
    return (torch.rand(shape, dtype=torch.float32, device=device, generator=gen) * 2 - 1).to(getattr(torch, DTYPES[dtype]))


def make_inputs(op, shapes, dtype, device, gen):
    """Random inputs of a case; class indices (int64, as torch's losses take them) below the class count."""
    in_dt = INPUT_DTYPES.get(op, {})
    classes = shapes[1][0] if op.startswith("linear_cross_entropy") else shapes[0][-1]
    ins = []
    for k, s in enumerate(shapes):
        if not s:
            ins.append(None)
        elif in_dt.get(k) == "i32":
            ins.append(torch.randint(0, classes, s, device=device, generator=gen))
        elif k in NONNEG.get(op, ()):
            t = random_tensor(s, dtype, device, gen)
            ins.append(t * t)
        else:
            ins.append(random_tensor(s, dtype, device, gen))
    return ins


def smoke_shapes(op, shapes):
    """--smoke: linear_cross_entropy's hidden size and vocabulary cut to 64 and 512 (the rows are scaled
    by --size-mib as every other case)."""
    if not op.startswith("linear_cross_entropy"):
        return shapes
    n = shapes[0][0]
    return [[n, 64], [512, 64], [n]]


def device_info(device):
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        hip = getattr(torch.version, "hip", None)
        return {"name": p.name, "vendor": "AMD" if hip else "NVIDIA", "type": "discrete",
                "driver": f"HIP {hip}" if hip else f"CUDA {torch.version.cuda}",
                "api": f"torch {torch.__version__}", "backend": "hip" if hip else "cuda"}
    return {"name": platform.processor() or platform.machine(), "vendor": "", "type": "cpu",
            "driver": f"{os.cpu_count()} threads ({torch.get_num_threads()} used)", "api": f"torch {torch.__version__}",
            "backend": "cpu"}


def plan(args):
    """(op, case, dtype, shapes, attrs, cost) for every timing, from the table or from a kf-bench file."""
    keep = re.compile(args.ops)
    items = []
    if args.cases_from:
        with open(args.cases_from) as f:
            doc = json.load(f)
        for r in doc["results"]:
            op = r.get("op")
            if op not in OPS or op == "copy" or "ms" not in r or not keep.search(op):
                continue
            if r["dtype"] not in args.dtypes:
                continue
            items.append((op, r["case"], r["dtype"], [list(s) for s in r["shapes"]], dict(r.get("attrs", {})),
                          (r.get("bytes"), r.get("flops"))))
        return items
    for dtype in args.dtypes:
        for op, (family, _, _, cases) in OPS.items():
            if (family == "primitive" and not args.primitives) or not keep.search(op):
                continue
            for k, (label, shapes, attrs) in enumerate(cases):
                if k > 0 and not args.all_cases:
                    break
                shapes = scale_shapes(shapes, dtype, args.size_mib, op)
                if args.smoke:
                    shapes = smoke_shapes(op, shapes)
                items.append((op, label, dtype, shapes, dict(attrs), cost(op, dtype, shapes, attrs)))
    return items


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    ap.add_argument("--modes", default="eager,compile", help="eager, compile, or both (comma-separated)")
    ap.add_argument("--dtypes", default="f32,f16", help="comma-separated: f32, f16, bf16, f64")
    ap.add_argument("--ops", default=".*", help="regular expression selecting op names")
    ap.add_argument("--size-mib", type=float, default=256, help="MiB per input tensor (as kf-bench)")
    ap.add_argument("--reps", type=int, default=30, help="timed runs; the median is reported")
    ap.add_argument("--warmup", type=int, default=5, help="untimed runs first (torch.compile compiles here)")
    ap.add_argument("--all-cases", action="store_true", help="every bench case of an op, not only the first")
    ap.add_argument("--primitives", action="store_true", help="also time the building blocks (add, relu, ...)")
    ap.add_argument("--cases-from", help="time exactly the cases of this kf-bench JSON file")
    ap.add_argument("--compile-mode", default=None, help="torch.compile mode (default: its default)")
    ap.add_argument("--out-dir", help="writes torch-eager.json and torch-compile.json here")
    ap.add_argument("--adamw", choices=("fused", "foreach"), default=None,
                    help="torch.optim.AdamW implementation of eager mode (default: fused on CUDA, foreach on CPU)")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny cases (1/64 MiB per input, a small linear_cross_entropy): checks the script on a CPU")
    ap.add_argument("--list-ops", action="store_true", help="print the op names this script implements")
    ap.add_argument("--plan-only", action="store_true",
                    help="print the cases (op, case, dtype, shapes, bytes, flops) as JSON and time nothing")
    args = ap.parse_args()
    args.dtypes = [d for d in args.dtypes.split(",") if d]
    if args.smoke:
        args.size_mib = 1 / 64
    for d in args.dtypes:
        if d not in DTYPES:
            ap.error(f"unknown dtype {d!r} (f32, f16, bf16, f64)")
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in ("eager", "compile"):
            ap.error(f"unknown mode {m!r} (eager, compile)")
    if args.list_ops:
        print("\n".join(OPS))
        return
    if args.plan_only:
        keys = ("op", "case", "dtype", "shapes", "attrs", "cost")
        json.dump([dict(zip(keys, item)) for item in plan(args)], sys.stdout, indent=1)
        print()
        return
    if not args.out_dir:
        ap.error("--out-dir is required (or --plan-only)")
    load_torch()
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_bench.py: --device cuda but torch sees no CUDA device")
    os.makedirs(args.out_dir, exist_ok=True)
    timer = Timer(device)
    gen = torch.Generator(device=device)
    gen.manual_seed(1234)
    info = device_info(device)
    items = plan(args)
    print(f"torch_bench on {info['name']} ({info['backend']}, {info['api']}), {args.size_mib:g} MiB per input, "
          f"median of {args.reps} runs, {len(items)} cases", flush=True)

    for mode in modes:
        framework = "torch-eager" if mode == "eager" else "torch-compile"
        variant = "eager" if mode == "eager" else "inductor" + (f":{args.compile_mode}" if args.compile_mode else "")
        results, copy_gbs = [], {}
        common = {"device": info["name"], "backend": info["backend"], "framework": framework}
        print(f"\n== {framework}", flush=True)
        print(f"{'op':22} {'case':10} {'dtype':5} {'time ms':>10} {'GB/s':>9} {'of copy':>8}", flush=True)
        for dtype in args.dtypes:
            # The copy roofline: torch's own copy of one [16384, 4096]-f32-sized tensor (scaled), eager.
            cshape = scale_shapes([K_BIG], dtype, args.size_mib)[0]
            src = random_tensor(cshape, dtype, device, gen)
            dst = torch.empty_like(src)
            cms = timer.time(lambda: dst.copy_(src), args.warmup, args.reps)
            cbytes = 2.0 * src.numel() * src.element_size()
            copy_gbs[dtype] = cbytes / (cms * 1e6)
            results.append({"op": "copy", "case": "roofline", "dtype": dtype, "shapes": [cshape], "ms": cms,
                            "bytes": cbytes, "flops": 0.0, "gbs": copy_gbs[dtype], "tflops": 0.0,
                            "fraction_of_copy": 1.0, "variant": "eager", **common})
            print(f"{'copy':22} {'roofline':10} {dtype:5} {cms:10.4f} {copy_gbs[dtype]:9.1f} {1.0:8.3f}", flush=True)
            del src, dst
            for op, label, dt, shapes, attrs, (nbytes, flops) in items:
                if dt != dtype:
                    continue
                row = {"op": op, "case": label, "dtype": dtype, "shapes": shapes, "attrs": attrs}
                try:
                    ins = make_inputs(op, shapes, dtype, device, gen)
                    while ins and ins[-1] is None:  # an optional input left out (the packed form)
                        ins.pop()
                    fn = OPS[op][2]
                    a = {"p": attrs.get("p", 0.0), "scale": attrs.get("scale", 1.0), "act": int(attrs.get("act", 0))}
                    a.update({k: v for k, v in attrs.items() if k not in a})
                    row_variant = variant
                    if op in MAKERS:
                        call, row_variant = MAKERS[op](mode, a, ins, args)
                    elif mode == "compile":
                        torch._dynamo.reset()
                        compiled = torch.compile(lambda *t, _fn=fn, _a=a: _fn(_a, *t), mode=args.compile_mode,
                                                 dynamic=False)
                        call = lambda: compiled(*ins)  # noqa: E731
                    else:
                        call = lambda: fn(a, *ins)  # noqa: E731
                    ms = timer.time(call, max(args.warmup, 2 if mode == "compile" else 0), args.reps)
                    if nbytes is None or flops is None:
                        nbytes, flops = cost(op, dtype, shapes, attrs)
                    gbs = nbytes / (ms * 1e6)
                    row.update({"ms": ms, "bytes": nbytes, "flops": flops, "gbs": gbs, "tflops": flops / (ms * 1e9),
                                "fraction_of_copy": gbs / copy_gbs[dtype], "variant": row_variant})
                    print(f"{op:22} {label:10} {dtype:5} {ms:10.4f} {gbs:9.1f} {gbs / copy_gbs[dtype]:8.3f}", flush=True)
                except Exception as e:  # noqa: BLE001 - one op failing (a compile error) must not end the run
                    row["error"] = f"{type(e).__name__}: {e}"[:500]
                    print(f"{op:22} {label:10} {dtype:5} error: {row['error'][:200]}", flush=True)
                finally:
                    ins = call = compiled = None  # the optimizer's and the compiled function's tensors too
                row.update(common)
                results.append(row)
                if device.type == "cuda":
                    torch.cuda.empty_cache()
        doc = {"tool": "torch_bench.py", "framework": framework,
               "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
               "device": {**info, "copy_gbs": copy_gbs}, "size_mib": args.size_mib, "reps": args.reps,
               "warmup": args.warmup, "results": results}
        path = os.path.join(args.out_dir, f"{framework}.json")
        with open(path, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
        print(f"wrote {path}", flush=True)


if __name__ == "__main__":
    main()
