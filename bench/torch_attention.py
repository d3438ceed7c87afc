#!/usr/bin/env python3
"""kf's attention bench cases in PyTorch's scaled_dot_product_attention, one JSON per forced backend.

Reads the cases (shapes, causal, dtype, the registry's flops) from a kf-bench JSON file (--cases-from) so
that both sides time the same work: attention's forward, and attention_backward's as the gradients of
q, k and v given the output's (torch.autograd.grad on a retained graph, so the backward alone is timed).
Each is timed with torch.nn.attention.sdpa_kernel forcing one backend at a time (flash = FlashAttention-2, cudnn, efficient = memory-efficient), between CUDA events,
median of --reps after warm-up. Writes OUT_DIR/torch-sdpa-<backend>.json in kf-bench's schema
(bench/SCHEMA.md) for `kf-bench --render-only --compare ...`. A case a backend cannot run (GQA on a
backend without it, a head dim it lacks) is written with "error".

    python3 bench/torch_attention.py --cases-from kf-vulkan.json --out-dir results/
"""
import argparse
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_events import median_ms  # noqa: E402

DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases-from", required=True, help="a kf-bench JSON file with attention results")
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--backends", default="flash,cudnn,efficient")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION}
    with open(args.cases_from) as f:
        doc = json.load(f)
    cases = [r for r in doc["results"] if r.get("op") in ("attention", "attention_backward") and "ms" in r]
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    os.makedirs(args.out_dir, exist_ok=True)
    for name in [b for b in args.backends.split(",") if b]:
        framework = f"torch-sdpa-{name}"
        common = {"device": props.name, "backend": "cuda", "framework": framework}
        results = []
        print(f"== {framework}", flush=True)
        for r in cases:
            backward = r["op"] == "attention_backward"
            row = {"op": r["op"], "case": r["case"], "dtype": r["dtype"], "shapes": r["shapes"],
                   "attrs": r.get("attrs", {}), **common}
            try:
                dt = getattr(torch, DTYPES[r["dtype"]])
                qs, ks = r["shapes"][0], r["shapes"][1]
                q = torch.randn(qs, device=dev, dtype=dt, requires_grad=backward)
                k = torch.randn(ks, device=dev, dtype=dt, requires_grad=backward)
                v = torch.randn(ks, device=dev, dtype=dt, requires_grad=backward)
                attrs = r.get("attrs", {})
                # Options scaled_dot_product_attention has no form of (ALiBi, soft-capping, a window, a custom
                # score function): not timed, rather than timed as another computation.
                other = [o for o in ("alibi", "softcap", "window", "score_mod") if attrs.get(o)]
                if other or any(o in r["case"] for o in ("alibi", "softcap", "window", "score_mod")):
                    raise ValueError("not comparable: sdpa has no " + ", ".join(other or ["option of this case"]))
                causal = bool(attrs.get("causal", False)) or "causal" in r["case"]
                gqa = qs[1] != ks[1]
                # bottom-right causal alignment (docs/ops.md) equals torch's top-left one when Sq == Sk;
                # for Sq = 1 (decode) causal masks nothing.
                causal = causal and qs[2] > 1

                dropout_p = float(r.get("attrs", {}).get("p", 0.0))  # training's dropout, as the kf case

                def forward():
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, dropout_p=dropout_p, enable_gqa=gqa)

                with sdpa_kernel(backends[name]):
                    if backward:
                        o = forward()
                        do = torch.randn_like(o)

                        def call():
                            return torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
                    else:
                        call = forward
                    ms = median_ms(torch, call, args.warmup, args.reps)
                row.update({"ms": ms, "bytes": r["bytes"], "flops": r["flops"], "gbs": r["bytes"] / (ms * 1e6),
                            "tflops": r["flops"] / (ms * 1e9), "variant": f"sdpa:{name}"})
                print(f"{r['case']:32} {r['dtype']:5} {ms:9.4f} ms {row['tflops']:8.1f} TFLOP/s "
                      f"{row['gbs']:8.1f} GB/s", flush=True)
            except Exception as e:  # noqa: BLE001 - a backend without this case is reported, not fatal
                row["error"] = f"{type(e).__name__}: {e}"[:400]
                print(f"{r['case']:32} {r['dtype']:5} error: {row['error'][:160]}", flush=True)
            results.append(row)
            torch.cuda.empty_cache()
        out = {"tool": "torch_attention.py", "framework": framework,
               "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
               "device": {"name": props.name, "vendor": "NVIDIA", "type": "discrete", "driver": "",
                          "api": f"torch {torch.__version__}", "backend": "cuda", "copy_gbs": {}},
               "size_mib": doc.get("size_mib", 0), "reps": args.reps, "warmup": args.warmup,
               "results": results}
        with open(os.path.join(args.out_dir, f"{framework}.json"), "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
