"""A training step of a small transformer block with kf's modules (kernelfusion.nn) against the same block
in eager PyTorch and under torch.compile, on CUDA tensors (docs/python.md).

    PYTHONPATH=build/python python bench/python_train_step.py [--dtype bf16] [--steps 50]

The block: LayerNorm, causal grouped-query attention, residual, RMSNorm, SwiGLU MLP, residual, a linear
head and cross-entropy, trained with AdamW on one fixed batch. The three start from the same weights. It
prints the forward+backward+step time of each (median over the steps after warm-up) and the three loss
curves every 10 steps, with the largest relative difference between kf's and eager's.
"""
import argparse
import statistics
import time

import torch

import kernelfusion.nn as knn
import kernelfusion.torch_ops as kt

F_ = torch.nn.functional


class KfBlock(torch.nn.Module):
    def __init__(self, E, H, Hkv, hidden, V, dtype):
        super().__init__()
        kw = {"device": "cuda", "dtype": dtype}
        self.ln = knn.LayerNormAct(E, **kw)
        self.attn = knn.Attention(E, H, num_kv_heads=Hkv, causal=True, **kw)
        self.rms = knn.RMSNorm(E, eps=1e-6, **kw)
        self.mlp = knn.SwiGLUMLP(E, hidden, **kw)
        self.head = knn.FusedLinear(E, V, bias=False, **kw)

    def forward(self, x, target):
        h = x + self.attn(self.ln(x))
        h = self.mlp(self.rms(h), residual=h)
        logits = self.head(h)
        return kt.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1).int())


class TorchBlock(torch.nn.Module):
    """The same block from torch's modules and functions, its weights copied from a KfBlock."""

    def __init__(self, kf_block):
        super().__init__()
        k = kf_block
        self.H, self.Hkv, self.D = k.attn.num_heads, k.attn.num_kv_heads, k.attn.head_dim
        E = k.ln.weight.shape[0]
        hidden = k.mlp.down.weight.shape[1]
        c = lambda p: torch.nn.Parameter(p.detach().clone())  # noqa: E731
        self.ln_w, self.ln_b, self.rms_w = c(k.ln.weight), c(k.ln.bias), c(k.rms.weight)
        self.qkv, self.out = c(k.attn.qkv.weight), c(k.attn.out.weight)
        self.up, self.gate = c(k.mlp.gate_up.weight[:hidden]), c(k.mlp.gate_up.weight[hidden:])
        self.down, self.head = c(k.mlp.down.weight), c(k.head.weight)
        self.E = E

    def forward(self, x, target):
        B, S, E = x.shape
        a = F_.layer_norm(x, (E,), self.ln_w, self.ln_b)
        qkv = F_.linear(a, self.qkv).view(B, S, self.H + 2 * self.Hkv, self.D).transpose(1, 2)
        q, k, v = qkv.split([self.H, self.Hkv, self.Hkv], dim=1)
        o = F_.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        h = x + F_.linear(o.transpose(1, 2).reshape(B, S, E), self.out)
        r = F_.rms_norm(h, (E,), self.rms_w, eps=1e-6)
        h = h + F_.linear(F_.linear(r, self.up) * F_.silu(F_.linear(r, self.gate)), self.down)
        logits = F_.linear(h, self.head)
        return F_.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def train(step_fn, steps, warmup=5):
    losses, times = [], []
    for i in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step_fn()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
        losses.append(float(loss))
    return losses, statistics.median(times) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=8192)
    a = ap.parse_args()
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[a.dtype]
    torch.manual_seed(0)
    kf_block = KfBlock(a.dim, a.heads, a.kv_heads, a.dim * 8 // 3 // 8 * 8, a.vocab, dtype)
    eager = TorchBlock(kf_block)
    compiled_block = TorchBlock(kf_block)
    compiled = torch.compile(compiled_block)
    x = torch.randn(a.batch, a.seq, a.dim, device="cuda", dtype=dtype)
    target = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda")

    def stepper(model, fwd, opt):
        def step():
            opt.zero_grad(set_to_none=True)
            loss = fwd(x, target)
            loss.backward()
            opt.step()
            return loss.detach()
        return step

    runs = {
        "kf": stepper(kf_block, kf_block, knn.AdamW(kf_block.parameters(), lr=1e-3)),
        "eager": stepper(eager, eager, torch.optim.AdamW(eager.parameters(), lr=1e-3)),
        "compile": stepper(compiled_block, compiled, torch.optim.AdamW(compiled_block.parameters(), lr=1e-3)),
    }
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}; {a.dtype}, batch {a.batch} x "
          f"{a.seq} tokens, dim {a.dim}, heads {a.heads}/{a.kv_heads}, vocab {a.vocab}, {a.steps} steps")
    curves = {}
    for name, step in runs.items():
        curves[name], ms = train(step, a.steps)
        print(f"{name:8s} forward+backward+AdamW {ms:8.3f} ms/step (median)")
    for i in range(0, a.steps, 10):
        print(f"step {i:3d} loss " + "  ".join(f"{n} {curves[n][i]:.4f}" for n in curves))
    worst = max(abs(k - e) / abs(e) for k, e in zip(curves["kf"], curves["eager"]))
    print(f"largest relative difference of kf's loss from eager's: {worst:.2e}")


if __name__ == "__main__":
    main()
