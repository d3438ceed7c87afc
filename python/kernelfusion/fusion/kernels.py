"""What a converted graph calls in place of the patterns it replaced: torch's semantics on the outside, kf's
fused ops (kernelfusion.torch_ops, with their autograd) inside.

Each function takes the tensors of the pattern it stands for and the options the rule read from the graph,
adapts what kf's op wants (int32 ids, explicit eps, key lengths from a padding mask, a dropout seed drawn
from torch's generator) and returns what the pattern returned. Nothing here runs torch's version of the op.
"""
import warnings

import torch

from .. import torch_ops as kt


def _seed():
    # as kernelfusion.nn: a fresh Philox seed from torch's generator at each training call
    return int(torch.randint(0, 2 ** 62, (1,)).item())


def linear(x, weight, bias=None, residual=None, act="none", p=0.0):
    if p > 0.0:
        return kt.linear_dropout(x, weight, bias, residual, act=act, p=p, seed=_seed())
    return kt.linear(x, weight, bias, residual, act=act)


def ffn(x, w1, b1, w2, b2, act):
    return kt.ffn(x, w1, b1, w2, b2, act=act)


def gated_mlp(x, w_gate, w_up, w_down, w_gate_up=None, act="silu"):
    """down(act(gate(x)) * up(x)): SwiGLU / GeGLU. With the packed weight (made at conversion, inference
    only) SwiGLU is kf's ffn_swiglu; otherwise two linears, kf's swiglu / geglu on the pair, and the down
    projection, every step differentiable."""
    if w_gate_up is not None and act == "silu":
        return kt.ffn_swiglu(x, w_gate_up, w_down)
    up = kt.linear(x, w_up)
    gate = kt.linear(x, w_gate)
    h = kt.swiglu(up, gate) if act == "silu" else kt.geglu(up, gate)
    return kt.linear(h, w_down)


def norm(x, weight, bias, kind, eps, act=None):
    name = kind if act is None else f"{kind}_{act}"
    if kind == "layer_norm":
        return getattr(kt, name)(x, weight, bias, eps=eps)
    return getattr(kt, name)(x, weight, eps=eps)


def add_norm(x, r, weight, bias, kind, eps):
    """(x + r, norm(x + r)) in one pass."""
    if kind == "layer_norm":
        return kt.add_layer_norm(x, r, weight, bias, eps=eps)
    return kt.add_rms_norm(x, r, weight, eps=eps)


# What each masked attention site's mask turned out to be ("padding" or "causal padding"), decided where it
# could be checked (outside CUDA-graph capture) and reused where it cannot.
_MASK_KIND = {}
_warned = set()


def _classify(mask, b, sq, sk):
    """(kind, key lengths) of an attention mask ([B or 1, 1, Sq or 1, Sk]; bool where True attends, or
    additive where 0 attends) when it is kf's key padding, alone or with causal masking; else (None, None)."""
    visible = (mask if mask.dtype == torch.bool else mask == 0).expand(b, 1, sq, sk)
    lengths = visible[:, 0, -1, :].sum(-1, dtype=torch.int32)
    prefix = (torch.arange(sk, device=mask.device) < lengths[:, None])[:, None, None, :]
    if torch.equal(prefix.expand(b, 1, sq, sk), visible):
        return "padding", lengths
    tril = torch.ones(sq, sk, dtype=torch.bool, device=mask.device).tril(sk - sq)
    if torch.equal(prefix & tril, visible):
        return "causal padding", lengths
    return None, None


def attention(q, k, v, mask=None, causal=False, scale=None, p=0.0, site="", rope_base=None):
    """torch's scaled_dot_product_attention on q [B, H, Sq, D] and k, v [B, Hkv, Sk, D] (Hq a multiple of
    Hkv: grouped-query attention, which kf reads without repeating k and v). causal is torch's top-left
    form; the rule passes it only where Sq == Sk, where it is kf's bottom-right one too.

    A mask that depends on the model's inputs (an attention_mask) is checked at each call: where it is key
    padding (with or without causal masking) kf's key_lengths express it; otherwise (left padding, holes)
    this call runs torch's attention, with a warning the first time. Within CUDA-graph capture nothing can
    be checked, and the kind found for this site at the last call outside it is used."""
    attrs = {"causal": causal}
    if scale is not None:
        attrs["attn_scale"] = float(scale)
    if rope_base is not None:  # q and k unrotated: GPT-NeoX's rotation (half) inside the kernel
        attrs.update(rope=1, rope_base=float(rope_base))
    lengths = None
    if mask is not None:
        b, sq, sk = q.shape[0], q.shape[-2], k.shape[-2]
        if q.is_cuda and torch.cuda.is_current_stream_capturing():
            kind = _MASK_KIND.get(site)
            visible = (mask if mask.dtype == torch.bool else mask == 0).expand(b, 1, sq, sk)
            lengths = visible[:, 0, -1, :].sum(-1, dtype=torch.int32)
        else:
            kind, lengths = _classify(mask, b, sq, sk)
            _MASK_KIND[site] = kind
        if kind is None:
            if site not in _warned:
                _warned.add(site)
                warnings.warn(f"kernelfusion: the attention mask of {site} is not key padding (with or without "
                              "causal masking); those calls run torch's scaled_dot_product_attention")
            if rope_base is not None:
                raise ValueError(f"kernelfusion: the attention mask of {site} is not key padding, and the rotary "
                                 "embedding was fused into kf's attention: convert on inputs with such masks")
            rep = q.shape[1] // k.shape[1]
            return torch.nn.functional.scaled_dot_product_attention(
                q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1), mask, dropout_p=p, is_causal=causal,
                scale=scale)
        attrs["causal"] = causal or kind == "causal padding"
    if p > 0.0:
        attrs.update(p=p, seed=_seed())
    return kt.attention(q, k, v, None, lengths, **attrs)


def conv2d(x, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, act="none"):
    return kt.conv2d(x, weight, bias, stride=list(stride), padding=list(padding), dilation=list(dilation),
                     groups=groups, act=act)


def conv2d_bn_relu(x, weight, bn_w, bn_b, mean, var, bias=None, stride=(1, 1), padding=(0, 0),
                   dilation=(1, 1), groups=1, eps=1e-5):
    return kt.conv2d_bn_relu(x, weight, bn_w, bn_b, mean, var, bias, stride=list(stride), padding=list(padding),
                             dilation=list(dilation), groups=groups, eps=eps)


def depthwise_pointwise(x, w_dw, w_pw, b_dw=None, b_pw=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1),
                        act="none"):
    return kt.depthwise_pointwise(x, w_dw, w_pw, b_dw, b_pw, stride=list(stride), padding=list(padding),
                                  dilation=list(dilation), act=act)


def add_relu(a, b):
    return kt.add_relu(a, b)


def embedding(table, ids, pos=None):
    """table[ids] (+ pos[s] at sequence position s)."""
    ids32 = ids.to(torch.int32)
    if pos is not None:
        pos = pos.reshape(pos.shape[-2], pos.shape[-1])  # [S, d]: the rule took only a per-position table
    return kt.embedding(ids32, table, pos)


def softmax(x, log=False):
    return kt.log_softmax(x) if log else kt.softmax(x)


def cross_entropy(logits, target, ignore_index=-100, label_smoothing=0.0):
    return kt.cross_entropy(logits, target.to(torch.int32), ignore_index=ignore_index,
                            label_smoothing=label_smoothing)
