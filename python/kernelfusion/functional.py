"""Typed functions for kf's op families (kf/linalg.hpp, attention.hpp, conv.hpp, training.hpp): named
options with Python types (``act="gelu"``, ``rope="half"``, ``stride=2``), the optional inputs by name,
several outputs as tuples. Each runs the registry op of the same name (or the op its options select:
``linear(dropout_p=0.1)`` is linear_dropout, ``layer_norm(act="gelu")`` layer_norm_gelu), with the
checks and errors of kernelfusion.ops, and returns the kind of array it was given. The docstrings quote
docs/ops.md (kernelfusion._docs). These do not record autograd: torch's autograd goes through
kernelfusion.torch_ops and kernelfusion.nn.

    import numpy as np, kernelfusion.functional as F
    y = F.linear(x, W, b, act="gelu")
    o, lse = F.attention(q, k, v, causal=True, rope="half", return_lse=True)
"""
import numpy as np

from . import _docs, _kf
from . import ops as _ops
from ._core import Tensor, default_context, host_array, kind_of
from .errors import InvalidArgumentError

__all__ = ["linear", "matmul", "ffn", "ffn_swiglu", "embedding", "attention", "attention_backward",
           "attention_scores", "decode", "conv2d", "conv2d_bn_relu", "conv2d_gelu_dropout", "depthwise_pointwise",
           "layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm", "batch_norm_relu", "group_norm",
           "layer_norm_backward", "rms_norm_backward", "cross_entropy", "cross_entropy_backward",
           "linear_cross_entropy", "linear_cross_entropy_backward", "mse", "mse_backward", "adamw_step",
           "sgd_step"]

_EPILOGUE = ("none", "relu", "gelu", "gelu_tanh", "silu")
_ROPE = {None: 0, "none": 0, "half": 1, "interleaved": 2}


def _doc(head, *keys, ops=()):
    def wrap(f):
        f.__doc__ = _docs.docstring(head, *keys, ops=ops or (f.__name__,))
        return f
    return wrap


def _act(op, act, allowed):
    act = "none" if act is None else act
    if act not in allowed:
        raise InvalidArgumentError(f"{op}: argument 'act' is {act!r}; expected one of {', '.join(allowed)}")
    return act


def _i32(x):
    """Class indices, token ids, lengths and offsets are i32 in kf: other integer arrays are converted
    (a copy); kf tensors and i32 arrays pass as they are."""
    if x is None or isinstance(x, Tensor):
        return x
    if kind_of(x) == "torch":
        import torch
        return x if x.dtype == torch.int32 else x.to(torch.int32)
    x = np.asarray(x)
    return x if x.dtype == np.int32 or x.dtype.kind != "i" else x.astype(np.int32)


def _pair(name, v):
    if isinstance(v, int):
        return (v, v)
    v = tuple(v)
    if len(v) != 2:
        raise InvalidArgumentError(f"conv2d: argument '{name}' is {v}; expected an int or a pair")
    return v


# ---- section 4: products, embedding, convolutions ----

@_doc("""linear(x, weight, bias=None, residual=None, *, act=None, out_dtype=None, dropout_p=0.0, seed=0,
offset=0, out=None, context=None) -> y

y = dropout(act(x weight^T + bias)) + residual, weight [N, K] as torch.nn.Linear's. act: None, "relu",
"gelu", "gelu_tanh" or "silu". out_dtype: the dtype y (and residual) is stored in when not the inputs'.
dropout_p > 0 runs linear_dropout (the Philox mask of seed and offset).""", "linear", "linear_dropout",
      "Output dtype", ops=("linear", "linear_dropout"))
def linear(x, weight, bias=None, residual=None, *, act=None, out_dtype=None, dropout_p=0.0, seed=0, offset=0,
           out=None, context=None):
    attrs = {"act": _act("linear", act, _EPILOGUE), "out_dtype": out_dtype}
    if dropout_p:
        attrs.update(p=dropout_p, seed=seed, offset=offset)
        return _ops.run("linear_dropout", [x, weight, bias, residual], attrs, out, context)
    return _ops.run("linear", [x, weight, bias, residual], attrs, out, context)


@_doc("""matmul(a, b, bias=None, residual=None, *, act=None, out_dtype=None, out=None, context=None) -> y

y = act(a b + bias) + residual, a [.., M, K], b [.., K, N] (batched like a) or [K, N] (shared).""",
      "matmul", "Output dtype")
def matmul(a, b, bias=None, residual=None, *, act=None, out_dtype=None, out=None, context=None):
    attrs = {"act": _act("matmul", act, _EPILOGUE), "out_dtype": out_dtype}
    return _ops.run("matmul", [a, b, bias, residual], attrs, out, context)


@_doc("""ffn(x, W1, b1, W2, b2, *, act=None, dropout_p=0.0, seed=0, offset=0, out=None, context=None) -> y""",
      "ffn")
def ffn(x, W1, b1, W2, b2, *, act=None, dropout_p=0.0, seed=0, offset=0, out=None, context=None):
    attrs = {"act": _act("ffn", act, _EPILOGUE), "p": dropout_p, "seed": seed, "offset": offset}
    return _ops.run("ffn", [x, W1, b1, W2, b2], attrs, out, context)


@_doc("""ffn_swiglu(x, W_gate_up, W_down, *, out=None, context=None) -> y""", "ffn")
def ffn_swiglu(x, W_gate_up, W_down, *, out=None, context=None):
    return _ops.run("ffn_swiglu", [x, W_gate_up, W_down], {}, out, context)


@_doc("""embedding(tokens, table, pos=None, *, out=None, context=None) -> y

tokens: integer ids (converted to i32 when they are another integer type).""", "embedding")
def embedding(tokens, table, pos=None, *, out=None, context=None):
    return _ops.run("embedding", [_i32(tokens), table, pos], {}, out, context)


def _conv_attrs(stride, padding, dilation, groups=1):
    return {"stride": _pair("stride", stride), "padding": _pair("padding", padding),
            "dilation": _pair("dilation", dilation), "groups": groups}


@_doc("""conv2d(x, weight, bias=None, *, stride=1, padding=0, dilation=1, groups=1, act=None, out=None,
context=None) -> y

NCHW as torch.nn.functional.conv2d; stride, padding and dilation an int or (height, width).""",
      "Convolutions", "conv2d")
def conv2d(x, weight, bias=None, *, stride=1, padding=0, dilation=1, groups=1, act=None, out=None, context=None):
    attrs = _conv_attrs(stride, padding, dilation, groups)
    attrs["act"] = _act("conv2d", act, _EPILOGUE)
    return _ops.run("conv2d", [x, weight, bias], attrs, out, context)


@_doc("""conv2d_bn_relu(x, weight, bn_weight, bn_bias, bn_mean, bn_var, conv_bias=None, *, eps=0.0, stride=1,
padding=0, dilation=1, groups=1, out=None, context=None) -> y""", "Convolutions", "conv2d_bn_relu")
def conv2d_bn_relu(x, weight, bn_weight, bn_bias, bn_mean, bn_var, conv_bias=None, *, eps=0.0, stride=1, padding=0,
                   dilation=1, groups=1, out=None, context=None):
    attrs = _conv_attrs(stride, padding, dilation, groups)
    attrs["eps"] = eps
    return _ops.run("conv2d_bn_relu", [x, weight, bn_weight, bn_bias, bn_mean, bn_var, conv_bias], attrs, out, context)


@_doc("""conv2d_gelu_dropout(x, weight, bias=None, *, p, seed, offset=0, stride=1, padding=0, dilation=1,
groups=1, out=None, context=None) -> y""", "Convolutions", "conv2d_gelu_dropout")
def conv2d_gelu_dropout(x, weight, bias=None, *, p, seed, offset=0, stride=1, padding=0, dilation=1, groups=1,
                        out=None, context=None):
    attrs = _conv_attrs(stride, padding, dilation, groups)
    attrs.update(p=p, seed=seed, offset=offset)
    return _ops.run("conv2d_gelu_dropout", [x, weight, bias], attrs, out, context)


@_doc("""depthwise_pointwise(x, W_dw, W_pw, b_dw=None, b_pw=None, *, stride=1, padding=0, dilation=1, act=None,
out=None, context=None) -> y""", "Convolutions", "depthwise_pointwise")
def depthwise_pointwise(x, W_dw, W_pw, b_dw=None, b_pw=None, *, stride=1, padding=0, dilation=1, act=None, out=None,
                        context=None):
    attrs = _conv_attrs(stride, padding, dilation)
    del attrs["groups"]
    attrs["act"] = _act("depthwise_pointwise", act, _EPILOGUE)
    return _ops.run("depthwise_pointwise", [x, W_dw, W_pw, b_dw, b_pw], attrs, out, context)


# ---- section 5: attention ----

_ATTN_KEYS = ("attention", "causal", "window", "ALiBi", "key lengths", "packed sequences", "sinks", "block mask",
              "soft-capping", "RoPE", "dropout", "custom score function", "Custom score functions")


def _attn(q, k, v, scale, causal, window, alibi, softcap, rope, rope_base, score_mod, dropout_p, seed, offset,
          key_lengths, cu_seqlens_q, cu_seqlens_k, sinks, block_size, block_mask):
    slopes = None
    if alibi is not None and not isinstance(alibi, bool):
        slopes, alibi = alibi, False
    if rope not in _ROPE and not isinstance(rope, int):
        raise InvalidArgumentError(f"attention: argument 'rope' is {rope!r}; expected None, 'half' or 'interleaved'")
    attrs = {"attn_scale": float(scale or 0), "causal": bool(causal), "window": int(window), "alibi": bool(alibi),
             "softcap": float(softcap), "rope": _ROPE.get(rope, rope), "rope_base": float(rope_base),
             "score_mod": score_mod or "", "p": float(dropout_p), "seed": int(seed), "offset": int(offset),
             "block_size": int(block_size)}
    optional = [slopes, _i32(key_lengths), _i32(cu_seqlens_q), _i32(cu_seqlens_k), sinks, _i32(block_mask)]
    return attrs, optional


@_doc("""attention(q, k, v, *, scale=None, causal=False, window=0, alibi=False, softcap=0.0, rope=None,
rope_base=10000.0, score_mod="", dropout_p=0.0, seed=0, offset=0, key_lengths=None, cu_seqlens_q=None,
cu_seqlens_k=None, sinks=None, block_size=0, block_mask=None, return_lse=False, out=None, context=None)
-> o, or (o, lse) with return_lse

scale None: 1 / sqrt(D). alibi: True for the default slopes, or an array of per-head slopes [Hq]. rope:
None, "half" (GPT-NeoX) or "interleaved".""", *_ATTN_KEYS, ops=("attention",))
def attention(q, k, v, *, scale=None, causal=False, window=0, alibi=False, softcap=0.0, rope=None, rope_base=10000.0,
              score_mod="", dropout_p=0.0, seed=0, offset=0, key_lengths=None, cu_seqlens_q=None, cu_seqlens_k=None,
              sinks=None, block_size=0, block_mask=None, return_lse=False, out=None, context=None):
    attrs, optional = _attn(q, k, v, scale, causal, window, alibi, softcap, rope, rope_base, score_mod, dropout_p,
                            seed, offset, key_lengths, cu_seqlens_q, cu_seqlens_k, sinks, block_size, block_mask)
    attrs["return_lse"] = bool(return_lse)
    return _ops.run("attention", [q, k, v] + optional, attrs, out, context)


@_doc("""attention_backward(q, k, v, o, dout, lse, *, <attention's options>, out=None, context=None)
-> (dq, dk, dv)

The gradients of attention given its output o, the output's gradient dout and lse (attention(...,
return_lse=True)), with the forward's options.""", "attention_backward", ops=("attention_backward",))
def attention_backward(q, k, v, o, dout, lse, *, scale=None, causal=False, window=0, alibi=False, softcap=0.0,
                       rope=None, rope_base=10000.0, score_mod="", dropout_p=0.0, seed=0, offset=0, key_lengths=None,
                       cu_seqlens_q=None, cu_seqlens_k=None, sinks=None, block_size=0, block_mask=None, out=None,
                       context=None):
    attrs, optional = _attn(q, k, v, scale, causal, window, alibi, softcap, rope, rope_base, score_mod, dropout_p,
                            seed, offset, key_lengths, cu_seqlens_q, cu_seqlens_k, sinks, block_size, block_mask)
    return _ops.run("attention_backward", [q, k, v, o, dout, lse] + optional, attrs, out, context)


@_doc("""attention_scores(q, k, *, scale=None, out=None, context=None) -> s [B, Hq, Sq, Sk]""", "attention_scores")
def attention_scores(q, k, *, scale=None, out=None, context=None):
    return _ops.run("attention_scores", [q, k], {"attn_scale": float(scale or 0)}, out, context)


@_doc("""decode(q, k_cache, v_cache, key_lengths=None, **options) -> o

One decoding step: attention of one new query per sequence against a key/value cache. q is [B, Hq, D]
(o is then [B, Hq, D]) or [B, Hq, 1, D]; the caches [B, Hkv, S, D]; key_lengths [B] the valid length of
each cache (keys at or past it are masked). The options are attention's.""", "Decoding", ops=("attention",))
def decode(q, k_cache, v_cache, key_lengths=None, **options):
    squeeze = not isinstance(q, Tensor) and len(q.shape) == 3
    if squeeze:
        q = q.reshape(q.shape[0], q.shape[1], 1, q.shape[2])
    elif len(q.shape) != 4 or q.shape[2] != 1:
        raise InvalidArgumentError(f"decode: argument 'q' has shape {list(q.shape)}; expected [B, Hq, D] or "
                                   "[B, Hq, 1, D]")
    o = attention(q, k_cache, v_cache, key_lengths=key_lengths, **options)
    if squeeze:
        return tuple(t.reshape(t.shape[0], t.shape[1], *t.shape[3:]) for t in o) if isinstance(o, tuple) else \
            o.reshape(o.shape[0], o.shape[1], o.shape[3])
    return o


# ---- section 3: normalizations and their backward ----

@_doc("""layer_norm(x, weight=None, bias=None, *, eps=0.0, act=None, out=None, context=None) -> y

Along the last dimension; eps 0: the op's default. act: None, "relu", "gelu" or "silu" (the fused
layer_norm_<act>).""", "layer_norm", "layer_norm_relu", ops=("layer_norm",))
def layer_norm(x, weight=None, bias=None, *, eps=0.0, act=None, out=None, context=None):
    act = _act("layer_norm", act, ("none", "relu", "gelu", "silu"))
    name = "layer_norm" if act == "none" else f"layer_norm_{act}"
    return _ops.run(name, [x, weight, bias], {"eps": eps}, out, context)


@_doc("""rms_norm(x, weight=None, *, eps=0.0, act=None, out=None, context=None) -> y

act: None, "gelu" or "silu" (the fused rms_norm_<act>).""", "rms_norm", "rms_norm_gelu", ops=("rms_norm",))
def rms_norm(x, weight=None, *, eps=0.0, act=None, out=None, context=None):
    act = _act("rms_norm", act, ("none", "gelu", "silu"))
    name = "rms_norm" if act == "none" else f"rms_norm_{act}"
    return _ops.run(name, [x, weight], {"eps": eps}, out, context)


@_doc("""add_layer_norm(x, r, weight=None, bias=None, *, eps=0.0, out=None, context=None) -> (s, y)""",
      "add_layer_norm")
def add_layer_norm(x, r, weight=None, bias=None, *, eps=0.0, out=None, context=None):
    return _ops.run("add_layer_norm", [x, r, weight, bias], {"eps": eps}, out, context)


@_doc("""add_rms_norm(x, r, weight=None, *, eps=0.0, out=None, context=None) -> (s, y)""", "add_rms_norm")
def add_rms_norm(x, r, weight=None, *, eps=0.0, out=None, context=None):
    return _ops.run("add_rms_norm", [x, r, weight], {"eps": eps}, out, context)


@_doc("""batch_norm_relu(x, weight, bias, mean, var, *, eps=0.0, out=None, context=None) -> y""", "batch_norm_relu")
def batch_norm_relu(x, weight, bias, mean, var, *, eps=0.0, out=None, context=None):
    return _ops.run("batch_norm_relu", [x, weight, bias, mean, var], {"eps": eps}, out, context)


@_doc("""group_norm(x, groups, weight=None, bias=None, *, eps=0.0, out=None, context=None) -> y""", "group_norm")
def group_norm(x, groups, weight=None, bias=None, *, eps=0.0, out=None, context=None):
    return _ops.run("group_norm", [x, weight, bias], {"groups": int(groups), "eps": eps}, out, context)


@_doc("""layer_norm_backward(dy, x, weight=None, *, eps=0.0, out=None, context=None) -> (dx, dw, db)""",
      "layer_norm_backward")
def layer_norm_backward(dy, x, weight=None, *, eps=0.0, out=None, context=None):
    return _ops.run("layer_norm_backward", [dy, x, weight], {"eps": eps}, out, context)


@_doc("""rms_norm_backward(dy, x, weight=None, *, eps=0.0, out=None, context=None) -> (dx, dw)""",
      "rms_norm_backward")
def rms_norm_backward(dy, x, weight=None, *, eps=0.0, out=None, context=None):
    return _ops.run("rms_norm_backward", [dy, x, weight], {"eps": eps}, out, context)


# ---- section 6: losses and optimizers ----

@_doc("""cross_entropy(logits, target, *, ignore_index=-100, label_smoothing=0.0, out=None, context=None) -> loss

target: class indices (converted to i32 when another integer type); the loss is 0-dimensional.""",
      "cross_entropy")
def cross_entropy(logits, target, *, ignore_index=-100, label_smoothing=0.0, out=None, context=None):
    attrs = {"ignore_index": int(ignore_index), "label_smoothing": float(label_smoothing)}
    return _ops.run("cross_entropy", [logits, _i32(target)], attrs, out, context)


@_doc("""cross_entropy_backward(logits, target, *, ignore_index=-100, label_smoothing=0.0, out=None,
context=None) -> (loss, d_logits)""", "cross_entropy")
def cross_entropy_backward(logits, target, *, ignore_index=-100, label_smoothing=0.0, out=None, context=None):
    attrs = {"ignore_index": int(ignore_index), "label_smoothing": float(label_smoothing)}
    return _ops.run("cross_entropy_backward", [logits, _i32(target)], attrs, out, context)


def _lce_attrs(ignore_index, label_smoothing, z_loss, softcap):
    return {"ignore_index": int(ignore_index), "label_smoothing": float(label_smoothing), "z_loss": float(z_loss),
            "softcap": float(softcap)}


@_doc("""linear_cross_entropy(h, weight, target, *, ignore_index=-100, label_smoothing=0.0, z_loss=0.0,
softcap=0.0, out=None, context=None) -> loss""", "linear_cross_entropy")
def linear_cross_entropy(h, weight, target, *, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=0.0,
                         out=None, context=None):
    attrs = _lce_attrs(ignore_index, label_smoothing, z_loss, softcap)
    return _ops.run("linear_cross_entropy", [h, weight, _i32(target)], attrs, out, context)


@_doc("""linear_cross_entropy_backward(h, weight, target, *, <linear_cross_entropy's options>, out=None,
context=None) -> (loss, d_h, d_W)""", "linear_cross_entropy")
def linear_cross_entropy_backward(h, weight, target, *, ignore_index=-100, label_smoothing=0.0, z_loss=0.0,
                                  softcap=0.0, out=None, context=None):
    attrs = _lce_attrs(ignore_index, label_smoothing, z_loss, softcap)
    return _ops.run("linear_cross_entropy_backward", [h, weight, _i32(target)], attrs, out, context)


@_doc("""mse(a, b, *, out=None, context=None) -> loss""", "mse")
def mse(a, b, *, out=None, context=None):
    return _ops.run("mse", [a, b], {}, out, context)


@_doc("""mse_backward(a, b, *, out=None, context=None) -> d_a""", "mse")
def mse_backward(a, b, *, out=None, context=None):
    return _ops.run("mse_backward", [a, b], {}, out, context)


def _writable(ctx, arrays, what):
    """kf tensors over the caller's arrays, to be updated in place: on the CPU backend over their memory;
    elsewhere device copies, with the copies back to make afterwards."""
    tensors, back = [], []
    for a in arrays:
        if isinstance(a, Tensor):
            tensors.append(a)
            continue
        host = a.detach() if kind_of(a) == "torch" else a
        if kind_of(a) == "torch" and host.device.type != "cpu" and ctx.backend in ("cuda", "hip"):
            from . import _cuda
            tensors.append(_cuda.wrap(ctx, host, what, writable=True))
            continue
        if ctx.backend == "cpu":
            tensors.append(ctx.wrap_output(host))
        else:
            t = ctx.wrap(host_array(host, what))
            tensors.append(t)
            back.append((t, host))
    return tensors, back


def _optimizer_context(arrays, context):
    if context is not None:
        return context
    for a in arrays:
        if isinstance(a, Tensor):
            return a.context
    for a in arrays:
        if kind_of(a) == "torch" and a.device.type != "cpu":
            from . import _cuda
            return _cuda.default_for(a.device)
    return default_context()


@_doc("""adamw_step(params, grads, exp_avgs, exp_avg_sqs, *, step, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8,
weight_decay=1e-2, context=None) -> None

One AdamW step over lists of tensors (or one tensor each), updating params, exp_avgs (m) and exp_avg_sqs (v)
in place: kf::adamw_step, one submission for the whole list. weight_decay defaults to torch.optim.AdamW's
1e-2. In place on the CPU backend (NumPy arrays, CPU torch tensors) and for torch CUDA
tensors on the CUDA backend; elsewhere arrays are copied to the device and back.""", "adamw_step", ops=("adamw_step",))
def adamw_step(params, grads, exp_avgs, exp_avg_sqs, *, step, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8,
               weight_decay=1e-2, context=None):
    lists = [list(x) if isinstance(x, (list, tuple)) else [x] for x in (params, grads, exp_avgs, exp_avg_sqs)]
    ctx = _optimizer_context(lists[0], context)
    p, back_p = _writable(ctx, lists[0], "adamw_step")
    g = [a if isinstance(a, Tensor) else _input(ctx, a, "adamw_step") for a in lists[1]]
    m, back_m = _writable(ctx, lists[2], "adamw_step")
    v, back_v = _writable(ctx, lists[3], "adamw_step")
    _kf.adamw_step(p, g, m, v, float(lr), float(beta1), float(beta2), float(eps), float(weight_decay), int(step))
    for t, a in back_p + back_m + back_v:
        _copy_back(ctx, t, a)


@_doc("""sgd_step(params, grads, momentum_buffers, *, step, lr=1e-3, momentum=0.0, dampening=0.0,
weight_decay=0.0, nesterov=False, context=None) -> None

One SGD step over lists of tensors, updating params and momentum_buffers in place (kf::sgd_step), as
adamw_step.""", "adamw_step", ops=("sgd_step",))
def sgd_step(params, grads, momentum_buffers, *, step, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0,
             nesterov=False, context=None):
    lists = [list(x) if isinstance(x, (list, tuple)) else [x] for x in (params, grads, momentum_buffers)]
    ctx = _optimizer_context(lists[0], context)
    p, back_p = _writable(ctx, lists[0], "sgd_step")
    g = [a if isinstance(a, Tensor) else _input(ctx, a, "sgd_step") for a in lists[1]]
    b, back_b = _writable(ctx, lists[2], "sgd_step")
    _kf.sgd_step(p, g, b, float(lr), float(momentum), float(dampening), float(weight_decay), bool(nesterov), int(step))
    for t, a in back_p + back_b:
        _copy_back(ctx, t, a)


def _copy_back(ctx, t, a):
    if kind_of(a) == "torch" and a.device.type != "cpu":  # staged: through a host tensor
        import torch
        host = torch.empty(a.shape, dtype=a.dtype)
        ctx.download_into(t, host)
        a.copy_(host)
    else:
        ctx.download_into(t, a)


def _input(ctx, a, what):
    if kind_of(a) == "torch" and a.device.type != "cpu" and ctx.backend in ("cuda", "hip"):
        from . import _cuda
        return _cuda.wrap(ctx, a, what)
    return ctx.wrap(host_array(a, what))
