#!/usr/bin/env python3
"""kf's convolution and FFN bench cases in PyTorch eager (cuDNN, cuBLAS), in kf-bench's schema.

Reads the cases (op, shapes, attrs, dtype, the registry's bytes and flops) from a kf-bench JSON file
(--cases-from) so that both sides time the same work, and times PyTorch's composition of each op between
CUDA events, median of --reps after warm-up:
  conv2d               F.conv2d(x, W, b, stride, padding, dilation, groups) then the activation
  conv2d_bn_relu       relu(F.batch_norm(F.conv2d(..), mean, var, w, b, training=False, eps))
  conv2d_gelu_dropout  F.dropout(F.gelu(F.conv2d(..)), p)
  depthwise_pointwise  act(F.conv2d(act(F.conv2d(x, W_dw, b_dw, groups=C)), W_pw, b_pw))
  ffn                  F.linear(F.dropout(act(F.linear(x, W1, b1)), p), W2, b2)
  ffn_swiglu           g = F.linear(x, W_gate_up); F.linear(g[..., :H] * F.silu(g[..., H:]), W_down)
Writes OUT_DIR/torch-eager-linalg.json for `kf-bench --render-only --compare torch-eager:...`.

    python3 bench/torch_linalg.py --cases-from kf-vulkan.json --out-dir results/
"""
import argparse
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_events import median_ms  # noqa: E402

DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32"}
OPS = ("conv2d", "conv2d_bn_relu", "conv2d_gelu_dropout", "depthwise_pointwise", "ffn", "ffn_swiglu")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases-from", required=True, help="a kf-bench JSON file")
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F

    acts = {0: lambda t: t, 1: F.relu, 2: F.gelu, 3: lambda t: F.gelu(t, approximate="tanh"), 4: F.silu}
    with open(args.cases_from) as f:
        doc = json.load(f)
    cases = [r for r in doc["results"] if r.get("op") in OPS and "ms" in r]
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    framework = "torch-eager"
    common = {"device": props.name, "backend": "cuda", "framework": framework}
    results = []
    for r in cases:
        row = {"op": r["op"], "case": r["case"], "dtype": r["dtype"], "shapes": r["shapes"],
               "attrs": r.get("attrs", {}), **common}
        try:
            dt = getattr(torch, DTYPES[r["dtype"]])
            a = r.get("attrs", {})
            act = acts[int(a.get("act", 0))]
            p = float(a.get("p", 0.0))
            conv = {"stride": tuple(a.get("stride", [1, 1])), "padding": tuple(a.get("padding", [0, 0])),
                    "dilation": tuple(a.get("dilation", [1, 1])), "groups": int(a.get("groups", 1))}
            t = [torch.rand(s, device=dev, dtype=torch.float32).mul_(2).sub_(1).to(dt) if s else None
                 for s in r["shapes"]]
            op = r["op"]
            if op == "conv2d":
                def call():
                    return act(F.conv2d(t[0], t[1], t[2] if len(t) > 2 else None, **conv))
            elif op == "conv2d_bn_relu":
                var = t[5].abs() + 0.5

                def call():
                    y = F.conv2d(t[0], t[1], t[6] if len(t) > 6 else None, **conv)
                    return F.relu(F.batch_norm(y, t[4], var, t[2], t[3], training=False, eps=1e-5))
            elif op == "conv2d_gelu_dropout":
                def call():
                    return F.dropout(F.gelu(F.conv2d(t[0], t[1], t[2] if len(t) > 2 else None, **conv)), p)
            elif op == "depthwise_pointwise":
                dw = dict(conv, groups=t[0].shape[1])

                def call():
                    h = act(F.conv2d(t[0], t[1], t[3] if len(t) > 3 else None, **dw))
                    return act(F.conv2d(h, t[2], t[4] if len(t) > 4 else None))
            elif op == "ffn":
                def call():
                    return F.linear(F.dropout(act(F.linear(t[0], t[1], t[2])), p), t[3], t[4])
            else:  # ffn_swiglu: value rows first, then gate rows (docs/ops.md)
                H = t[1].shape[0] // 2

                def call():
                    g = F.linear(t[0], t[1])
                    return F.linear(g[..., :H] * F.silu(g[..., H:]), t[2])
            with torch.no_grad():
                ms = median_ms(torch, call, args.warmup, args.reps)
            row.update({"ms": ms, "bytes": r["bytes"], "flops": r["flops"], "gbs": r["bytes"] / (ms * 1e6),
                        "tflops": r["flops"] / (ms * 1e9), "variant": "torch-eager"})
            print(f"{op:22} {r['case']:34} {r['dtype']:5} {ms:9.4f} ms {row['tflops']:8.2f} TFLOP/s", flush=True)
        except Exception as e:  # noqa: BLE001 - reported, not fatal
            row["error"] = f"{type(e).__name__}: {e}"[:400]
            print(f"{r['op']:22} {r['case']:34} {r['dtype']:5} error: {row['error'][:160]}", flush=True)
        results.append(row)
        torch.cuda.empty_cache()
    out = {"tool": "torch_linalg.py", "framework": framework,
           "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "device": {"name": props.name, "vendor": "NVIDIA", "type": "discrete", "driver": "",
                      "api": f"torch {torch.__version__}", "backend": "cuda", "copy_gbs": {}},
           "size_mib": doc.get("size_mib", 0), "reps": args.reps, "warmup": args.warmup, "results": results}
    os.makedirs(args.out_dir, exist_ok=True)
    with open(os.path.join(args.out_dir, "torch-eager-linalg.json"), "w") as f:
        json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
