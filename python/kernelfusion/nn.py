"""torch.nn modules over kf's fused ops (kernelfusion.torch_ops), with autograd from kf's backward kernels,
and AdamW as a torch.optim.Optimizer over kf's fused step.

    import kernelfusion.nn as knn
    mlp = torch.nn.Sequential(knn.RMSNorm(512), knn.SwiGLUMLP(512, 1376))
    attn = knn.Attention(512, num_heads=8, num_kv_heads=2, causal=True, rope="half")
    opt = knn.AdamW(model.parameters(), lr=3e-4)

Parameters are initialized as torch's corresponding modules initialize theirs, and have the same names
(weight, bias), so that state dicts move between them. Dropout draws its Philox seed from torch's
generator (torch.randint) at each training call.
"""
import math

import torch

from . import functional as _F
from . import torch_ops as kt

_EPILOGUE = (None, "none", "relu", "gelu", "gelu_tanh", "silu")


def _seed():
    return int(torch.randint(0, 2 ** 62, (1,)).item())


class FusedLinear(torch.nn.Module):
    """act(x W^T + b) (+ residual), dropout after the activation in training: one kernel (linear, or
    linear_dropout). act: None, "relu", "gelu", "gelu_tanh" or "silu"."""

    def __init__(self, in_features, out_features, bias=True, act=None, dropout=0.0, device=None, dtype=None):
        super().__init__()
        if act not in _EPILOGUE:
            raise ValueError(f"FusedLinear: act {act!r} is none of {_EPILOGUE[1:]}")
        self.in_features, self.out_features, self.act, self.dropout = in_features, out_features, act, dropout
        ref = torch.nn.Linear(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.weight = ref.weight
        self.register_parameter("bias", ref.bias)

    def forward(self, x, residual=None):
        if self.training and self.dropout > 0:
            return kt.linear_dropout(x, self.weight, self.bias, residual, act=self.act or "none", p=self.dropout,
                                     seed=_seed())
        return kt.linear(x, self.weight, self.bias, residual, act=self.act or "none")

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, " \
               f"act={self.act}, dropout={self.dropout}"


class LayerNormAct(torch.nn.Module):
    """act(layer_norm(x)) over the last dimension in one kernel, as torch.nn.LayerNorm (then the activation).
    act: None, "relu", "gelu" or "silu"."""

    def __init__(self, normalized_shape, act=None, eps=1e-5, elementwise_affine=True, bias=True, device=None,
                 dtype=None):
        super().__init__()
        ref = torch.nn.LayerNorm(normalized_shape, eps=eps, elementwise_affine=elementwise_affine, bias=bias,
                                 device=device, dtype=dtype)
        if len(ref.normalized_shape) != 1:
            raise ValueError("LayerNormAct normalizes the last dimension only")
        self.normalized_shape, self.eps, self.act = ref.normalized_shape, eps, act
        self.register_parameter("weight", ref.weight)
        self.register_parameter("bias", ref.bias)
        self._op = getattr(kt, "layer_norm" if act in (None, "none") else f"layer_norm_{act}")

    def forward(self, x):
        return self._op(x, self.weight, self.bias, eps=self.eps)


class RMSNorm(torch.nn.Module):
    """x / sqrt(mean(x^2) + eps) w, then act (None, "gelu" or "silu"), as torch.nn.RMSNorm; eps None is
    torch's default (the dtype's machine epsilon)."""

    def __init__(self, normalized_shape, eps=None, act=None, elementwise_affine=True, device=None, dtype=None):
        super().__init__()
        ref = torch.nn.RMSNorm(normalized_shape, eps=eps, elementwise_affine=elementwise_affine, device=device,
                               dtype=dtype)
        self.normalized_shape, self.eps, self.act = ref.normalized_shape, eps, act
        self.register_parameter("weight", ref.weight)
        self._op = getattr(kt, "rms_norm" if act in (None, "none") else f"rms_norm_{act}")

    def forward(self, x):
        eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
        return self._op(x, self.weight, eps=eps)


class SwiGLUMLP(torch.nn.Module):
    """W_down (silu(x W_gate^T) * (x W_up^T)), the LLaMA MLP: gate_up.weight [2 hidden, dim] packed (rows
    0..hidden-1 the value (up) half, hidden..2 hidden-1 the gate), down.weight [out, hidden]; no biases."""

    def __init__(self, dim, hidden, out=None, device=None, dtype=None):
        super().__init__()
        self.gate_up = FusedLinear(dim, 2 * hidden, bias=False, device=device, dtype=dtype)
        self.down = FusedLinear(hidden, out or dim, bias=False, device=device, dtype=dtype)

    def forward(self, x, residual=None):
        return self.down(kt.swiglu(self.gate_up(x)), residual)


class Attention(torch.nn.Module):
    """Multi-head self-attention with kf's attention kernel: x [B, S, E] -> [B, S, E] through a packed qkv
    projection (qkv.weight [(H + 2 Hkv) D, E]) and an output projection. num_kv_heads < num_heads is
    grouped-query attention. The options are kf's (kernelfusion.functional.attention): causal, window,
    alibi, softcap, rope ("half" or "interleaved"), rope_base, score_mod, dropout (in training), scale;
    forward takes the optional key_lengths [B]."""

    def __init__(self, embed_dim, num_heads, num_kv_heads=None, bias=False, causal=False, window=0, alibi=False,
                 softcap=0.0, rope=None, rope_base=10000.0, score_mod="", dropout=0.0, scale=None, device=None,
                 dtype=None):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"Attention: embed_dim {embed_dim} is not a multiple of num_heads {num_heads}")
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads or num_heads
        if self.num_heads % self.num_kv_heads:
            raise ValueError("Attention: num_heads is not a multiple of num_kv_heads")
        self.head_dim = embed_dim // num_heads
        self.dropout = dropout
        self.options = {"attn_scale": float(scale or 0), "causal": causal, "window": window, "alibi": bool(alibi),
                        "softcap": softcap, "rope": _F._ROPE[rope] if not isinstance(rope, int) else rope,
                        "rope_base": rope_base, "score_mod": score_mod}
        qkv = (self.num_heads + 2 * self.num_kv_heads) * self.head_dim
        self.qkv = FusedLinear(embed_dim, qkv, bias=bias, device=device, dtype=dtype)
        self.out = FusedLinear(embed_dim, embed_dim, bias=bias, device=device, dtype=dtype)

    def forward(self, x, key_lengths=None):
        B, S, _ = x.shape
        H, Hkv, D = self.num_heads, self.num_kv_heads, self.head_dim
        qkv = self.qkv(x).view(B, S, H + 2 * Hkv, D).transpose(1, 2)
        q, k, v = (t.contiguous() for t in qkv.split([H, Hkv, Hkv], dim=1))
        opts = dict(self.options)
        if self.training and self.dropout > 0:
            opts.update(p=self.dropout, seed=_seed())
        if key_lengths is not None:
            key_lengths = key_lengths.to(torch.int32)
        o = kt.attention(q, k, v, None, key_lengths, **opts)
        return self.out(o.transpose(1, 2).reshape(B, S, H * D))


class AdamW(torch.optim.Optimizer):
    """torch.optim.AdamW (decoupled weight decay, bias correction) with kf's fused step: one kf::adamw_step
    per parameter group and step count, the parameters and moments updated in place. No amsgrad,
    maximize or capturable forms."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        if lr < 0 or eps < 0 or weight_decay < 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"AdamW: invalid lr {lr}, betas {betas}, eps {eps} or weight_decay {weight_decay}")
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            by_step = {}
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("AdamW: sparse gradients are not supported")
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.contiguous_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.contiguous_format)
                state["step"] += 1
                by_step.setdefault(state["step"], []).append(p)
            b1, b2 = group["betas"]
            for step, params in by_step.items():
                _F.adamw_step(params, [p.grad.contiguous() for p in params],
                              [self.state[p]["exp_avg"] for p in params], [self.state[p]["exp_avg_sq"] for p in params],
                              step=step, lr=group["lr"], beta1=b1, beta2=b2, eps=group["eps"],
                              weight_decay=group["weight_decay"])
        return loss
