"""The decoding step of kf-decode-step (bench/decode_step.cpp) in PyTorch, eager and replayed as a CUDA graph,
in tokens per second (docs/performance.md).

    python bench/torch_decode_step.py [--layers 32] [--dim 4096] [--hidden 11008] [--heads 32] [--kv-heads 8]
        [--cache 4096] [--vocab 32000] [--dtype f16] [--steps 20] [--json F]

The same model: per layer rms_norm, the q, k and v projections, the rotary embedding of the new query
(and key) at position `cache` (torch's convention: the cache holds rotated keys), grouped-query
scaled_dot_product_attention against the cache, the output projection plus the residual, rms_norm, the
SwiGLU MLP (one gate/up projection, first half the value, second the gate, as kf's swiglu) plus the residual;
then the final norm and the vocabulary projection. As in kf-decode-step the new key and value are computed
and not appended to the cache.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_events import median_ms  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    for name, default in (("layers", 32), ("dim", 4096), ("hidden", 11008), ("heads", 32), ("kv-heads", 8),
                          ("cache", 4096), ("vocab", 32000), ("steps", 20)):
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--dtype", default="f16", choices=["f16", "bf16"])
    ap.add_argument("--json", help="also write the result as JSON (the fields of kf-decode-step's)")
    a = ap.parse_args()
    dt = torch.float16 if a.dtype == "f16" else torch.bfloat16
    dev = "cuda"
    D = a.dim // a.heads
    g = torch.Generator(device=dev).manual_seed(0)

    def w(rows, cols):
        return ((torch.rand(rows, cols, device=dev, generator=g) * 2 - 1) / cols ** 0.5).to(dt)

    layers = []
    for _ in range(a.layers):
        layers.append(dict(
            w_in=torch.ones(a.dim, device=dev, dtype=dt), wq=w(a.dim, a.dim), wk=w(a.kv_heads * D, a.dim),
            wv=w(a.kv_heads * D, a.dim), wo=w(a.dim, a.dim), w_post=torch.ones(a.dim, device=dev, dtype=dt),
            w_gate_up=w(2 * a.hidden, a.dim), w_down=w(a.dim, a.hidden),
            k=(torch.rand(1, a.kv_heads, a.cache, D, device=dev, generator=g) * 2 - 1).to(dt),
            v=(torch.rand(1, a.kv_heads, a.cache, D, device=dev, generator=g) * 2 - 1).to(dt)))
    w_final, w_vocab = torch.ones(a.dim, device=dev, dtype=dt), w(a.vocab, a.dim)
    x0 = (torch.rand(1, a.dim, device=dev, generator=g) * 2 - 1).to(dt)
    inv = 10000.0 ** (-torch.arange(0, D, 2, device=dev, dtype=torch.float32) / D)
    ang = a.cache * inv
    cos = torch.cat([ang.cos(), ang.cos()]).to(dt)
    sin = torch.cat([ang.sin(), ang.sin()]).to(dt)

    def rope(t):
        return t * cos + torch.cat([-t[..., D // 2:], t[..., :D // 2]], -1) * sin

    def step():
        x = x0
        for y in layers:
            h = F.rms_norm(x, (a.dim,), y["w_in"], eps=1e-6)
            q = rope(F.linear(h, y["wq"]).view(1, a.heads, 1, D))
            k = rope(F.linear(h, y["wk"]).view(1, a.kv_heads, 1, D))  # the new key and value (not appended)
            v = F.linear(h, y["wv"])
            o = F.scaled_dot_product_attention(q, y["k"], y["v"], enable_gqa=True)
            x2 = F.linear(o.reshape(1, a.dim), y["wo"]) + x
            h = F.rms_norm(x2, (a.dim,), y["w_post"], eps=1e-6)
            gu = F.linear(h, y["w_gate_up"])
            x = F.linear(gu[:, :a.hidden] * F.silu(gu[:, a.hidden:]), y["w_down"]) + x2
            del k, v
        return F.linear(F.rms_norm(x, (a.dim,), w_final, eps=1e-6), w_vocab)

    with torch.no_grad():
        eager = median_ms(torch, step, 3, a.steps)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = step()
        graphed = median_ms(torch, graph.replay, 3, a.steps)
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}: {a.layers} layers, dim {a.dim}, "
          f"hidden {a.hidden}, heads {a.heads}/{a.kv_heads}, cache {a.cache}, {a.dtype}")
    print(f"eager      {eager:8.3f} ms/step  {1000 / eager:8.1f} tokens/s")
    print(f"CUDA graph {graphed:8.3f} ms/step  {1000 / graphed:8.1f} tokens/s  (finite: "
          f"{bool(torch.isfinite(out).all())})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "dtype": a.dtype,
                       "layers": a.layers, "dim": a.dim, "hidden": a.hidden, "heads": a.heads,
                       "kv_heads": a.kv_heads, "cache": a.cache, "vocab": a.vocab, "eager_ms": eager,
                       "cuda_graph_ms": graphed, "finite": bool(torch.isfinite(out).all())}, f, indent=1)


if __name__ == "__main__":
    main()
