"""Autograd for kf's PyTorch operators (kernelfusion.torch_ops), from kf's backward kernels.

Every formula runs kf's own ops (torch.ops.kernelfusion.*): the activations' and softmax's ``*_backward``,
dropout_backward with the forward's p, seed and offset (the mask is recomputed, never stored), the norms'
``*_backward``, attention_backward (from the forward's lse), cross_entropy_backward,
linear_cross_entropy_backward and mse_backward; linear and matmul differentiate through products (matmul)
of the output's gradient. Only reshapes, transposes, sums over rows and casts are torch's. A fused
activation is differentiated at its input, recomputed by the op without the activation.

Gradients are not returned for: integer inputs (ids, lengths, offsets, masks), attention's ALiBi slopes and
sinks, and attention's lse output (its gradient is ignored).
"""
import torch

_EPILOGUE_ACT = {1: "relu", 2: "gelu", 3: "gelu_tanh", 4: "silu"}
ACTIVATIONS = ("relu", "sigmoid", "tanh", "gelu", "gelu_tanh", "silu", "mish")


def _specs():
    """(op, setup, formula of a _Kf) for every op with a backward."""
    S, O = _save_inputs, _save_output
    specs = [(act, S, lambda K, a=act: K.act(a)) for act in ACTIVATIONS]
    specs += [("softmax", O, lambda K: K.softmax), ("log_softmax", O, lambda K: K.log_softmax),
              ("dropout", S, lambda K: K.dropout), ("gelu_dropout", S, lambda K: K.gelu_dropout),
              ("bias_gelu_dropout", S, lambda K: K.bias_gelu_dropout),
              ("add_dropout_residual", S, lambda K: K.add_dropout_residual)]
    specs += [(f"bias_{act}", S, lambda K, a=act: K.bias_act(a)) for act in ("relu", "gelu", "gelu_tanh", "silu")]
    specs += [("add_relu", S, lambda K: K.add_relu), ("swiglu", S, lambda K: K.glu("silu")),
              ("geglu", S, lambda K: K.glu("gelu")), ("embedding", S, lambda K: K.embedding)]
    for norm, acts in (("layer_norm", ("relu", "gelu", "silu")), ("rms_norm", ("gelu", "silu"))):
        specs.append((norm, S, lambda K, n=norm: K.norm(n, None)))
        specs += [(f"{norm}_{act}", S, lambda K, n=norm, a=act: K.norm(n, a)) for act in acts]
    specs += [("add_layer_norm", O, lambda K: K.add_norm("layer_norm")),
              ("add_rms_norm", O, lambda K: K.add_norm("rms_norm")), ("attention", O, lambda K: K.attention),
              ("cross_entropy", S, lambda K: K.cross_entropy),
              ("linear_cross_entropy", S, lambda K: K.linear_cross_entropy), ("mse", S, lambda K: K.mse),
              ("linear", S, lambda K: K.linear), ("linear_dropout", S, lambda K: K.linear),
              ("matmul", S, lambda K: K.matmul)]
    return specs


def register(ops, direct):
    """Registers the formulas on the operators in `ops` (name -> torch.library custom op), computing with
    those operators (so that torch.compile traces the backward too); returns, for eager calls, name ->
    (setup, backward) with the same formulas over `direct` (name -> a function running kf's op without
    torch's dispatcher)."""
    on_ops, on_direct = _Kf(ops), _Kf(direct)
    eager = {}
    for name, setup, formula in _specs():
        ops[name].register_autograd(_unpacking(formula(on_ops)), setup_context=setup)
        eager[name] = (setup, _unpacking(formula(on_direct)))
    return eager


def _unpacking(backward):
    def unpacked(ctx, *grads):
        saved = ctx.saved_tensors
        ctx.inputs = saved[:ctx.n_inputs]
        outputs = saved[ctx.n_inputs:]
        ctx.output = (outputs[0] if ctx.single else tuple(outputs)) if outputs else None
        try:
            return backward(ctx, *grads)
        finally:  # no reference from the node to the tensors outlives the backward
            del ctx.inputs, ctx.output
    return unpacked


# Saved state: the positional inputs (None for absent optional ones), the attributes, and the output where
# the formula needs it, through save_for_backward (tensors kept as plain attributes of ctx would make a
# reference cycle through the output's grad_fn, freed only by Python's garbage collector).
def _save(ctx, inputs, keyword_only_inputs, output, with_output):
    outputs = () if not with_output else output if isinstance(output, tuple) else (output,)
    ctx.save_for_backward(*inputs, *outputs)
    ctx.n_inputs = len(inputs)
    ctx.single = not isinstance(output, tuple)
    ctx.attrs = dict(keyword_only_inputs)


def _save_inputs(ctx, inputs, keyword_only_inputs, output):
    _save(ctx, inputs, keyword_only_inputs, output, False)


def _save_output(ctx, inputs, keyword_only_inputs, output):
    _save(ctx, inputs, keyword_only_inputs, output, True)


def _rows(t):
    return t.reshape(-1, t.shape[-1]) if t.dim() > 0 else t.reshape(1, 1)


def _sum_to(g, like):
    """g summed over the leading dimensions down to the shape of a broadcast input `like` ([F] or [1])."""
    if like is None:
        return None
    if g.shape == like.shape:
        return g
    return _rows(g).sum(0).reshape(like.shape) if like.numel() > 1 else g.sum().reshape(like.shape)


def _drop(attrs, *names):
    return {k: v for k, v in attrs.items() if k not in names}


class _Kf:
    """The formulas, over the operators `ops` (so that they run kf's kernels)."""

    def __init__(self, ops):
        self.o = ops

    def _c(self, t):
        return t.contiguous()

    def act(self, act):
        bwd = self.o[f"{act}_backward"]

        def backward(ctx, g):
            return bwd(self._c(g), ctx.inputs[0])
        return backward

    def softmax(self, ctx, g):
        return self.o["softmax_backward"](self._c(g), ctx.output, scale=ctx.attrs["scale"])

    def log_softmax(self, ctx, g):
        # y = s x - lse: dx = s (g - softmax(s x) sum(g))
        s = ctx.attrs["scale"]
        return s * (g - torch.exp(ctx.output) * g.sum(-1, keepdim=True))

    def _mask(self, g, attrs):
        return self.o["dropout_backward"](self._c(g), p=attrs["p"], seed=attrs["seed"], offset=attrs["offset"])

    def dropout(self, ctx, g):
        return self._mask(g, ctx.attrs)

    def gelu_dropout(self, ctx, g):
        return self.o["gelu_backward"](self._mask(g, ctx.attrs), ctx.inputs[0])

    def bias_gelu_dropout(self, ctx, g):
        x, bias = ctx.inputs
        dz = self.o["gelu_backward"](self._mask(g, ctx.attrs), self.o["add"](x, bias))
        return dz, _sum_to(dz, bias)

    def add_dropout_residual(self, ctx, g):
        return self._mask(g, ctx.attrs), g

    def bias_act(self, act):
        bwd = self.o[f"{act}_backward"]

        def backward(ctx, g):
            x, bias = ctx.inputs
            dz = bwd(self._c(g), self.o["add"](x, bias))
            return dz, _sum_to(dz, bias)
        return backward

    def add_relu(self, ctx, g):
        a, b = ctx.inputs
        dz = self.o["relu_backward"](self._c(g), self.o["add"](a, b))
        return dz, _sum_to(dz, b)

    def glu(self, act):
        fwd, bwd = self.o[act], self.o[f"{act}_backward"]

        def backward(ctx, g):
            x, gate = ctx.inputs
            g = self._c(g)
            packed = gate is None
            if packed:
                F = x.shape[-1] // 2
                x, gate = x[..., :F].contiguous(), x[..., F:].contiguous()
            dx = self.o["mul"](g, fwd(gate))
            dgate = bwd(self.o["mul"](g, x), gate)
            return (torch.cat([dx, dgate], -1), None) if packed else (dx, dgate)
        return backward

    def embedding(self, ctx, g):
        tokens, table, pos = ctx.inputs
        g2 = _rows(g)
        dtable = torch.zeros_like(table).index_add_(0, tokens.reshape(-1).long(), g2)
        dpos = None
        if pos is not None:
            L = tokens.shape[-1]
            dpos = torch.zeros_like(pos)
            dpos[:L] = g.reshape(-1, L, table.shape[-1]).sum(0)
        return None, dtable, dpos

    def norm(self, norm, act):
        layer = norm == "layer_norm"

        def backward(ctx, g):
            x, w = ctx.inputs[0], ctx.inputs[1]
            b = ctx.inputs[2] if layer else None
            eps = ctx.attrs["eps"]
            g = self._c(g)
            if act is not None:  # differentiated at the norm's output, recomputed
                args = (x, w, b) if layer else (x, w)
                g = self.o[f"{act}_backward"](g, self.o[norm](*args, eps=eps))
            grads = self.o[f"{norm}_backward"](g, x, w, eps=eps)
            dx, dw = grads[0], grads[1] if w is not None else None
            if layer:
                return dx, dw, grads[2] if b is not None else None
            return dx, dw
        return backward

    def add_norm(self, norm):
        layer = norm == "layer_norm"

        def backward(ctx, gs, gy):
            w = ctx.inputs[2]
            b = ctx.inputs[3] if layer else None
            s = ctx.output[0]
            grads = self.o[f"{norm}_backward"](self._c(gy), s, w, eps=ctx.attrs["eps"])
            ds = grads[0] if gs is None else grads[0] + gs
            dw = grads[1] if w is not None else None
            if layer:
                return ds, ds, dw, grads[2] if b is not None else None
            return ds, ds, dw
        return backward

    def attention(self, ctx, go, glse=None):
        q, k, v = ctx.inputs[:3]
        optional = ctx.inputs[3:]
        attrs = _drop(ctx.attrs, "return_lse")
        o, lse = ctx.output
        if lse.numel() == 0 and o.numel() > 0:  # the forward left lse out: recomputed
            o, lse = self.o["attention"](q, k, v, *optional, **attrs, return_lse=True)
        dq, dk, dv = self.o["attention_backward"](q, k, v, o, self._c(go), lse, *optional, **attrs)
        return (dq, dk, dv) + (None,) * len(optional)

    def cross_entropy(self, ctx, g):
        logits, target = ctx.inputs
        _, d = self.o["cross_entropy_backward"](logits, target, **ctx.attrs)
        return d * g, None

    def linear_cross_entropy(self, ctx, g):
        h, W, target = ctx.inputs
        _, dh, dW = self.o["linear_cross_entropy_backward"](h, W, target, **ctx.attrs)
        return dh * g, dW * g, None

    def mse(self, ctx, g):
        a, b = ctx.inputs
        d = self.o["mse_backward"](a, b) * g
        return d, -d

    def _epilogue(self, name, ctx, g, recompute):
        """The gradient at the product's output z (before the activation and dropout), in the inputs' dtype."""
        attrs = ctx.attrs
        g = self._c(g)
        if name == "linear_dropout" and attrs["p"] > 0:
            g = self._mask(g, attrs)
        act = _EPILOGUE_ACT.get(attrs["act"])
        if act is not None:
            z = recompute()
            g = self.o[f"{act}_backward"](g, z)
        return g

    def linear(self, ctx, g):
        x, W, bias, residual = ctx.inputs
        attrs = ctx.attrs
        plain = _drop(attrs, "act", "p", "seed", "offset")
        gz = self._epilogue("linear_dropout" if "p" in attrs and attrs["p"] > 0 else "linear", ctx, g,
                            lambda: self.o["linear"](x, W, bias, **plain, act=0))
        gz2 = _rows(gz.to(x.dtype))
        x2 = _rows(x)
        dx = self.o["matmul"](gz2, W).reshape(x.shape)
        dW = self.o["matmul"](gz2.t().contiguous(), x2)
        db = gz2.sum(0) if bias is not None else None
        dr = g if residual is not None else None
        return dx, dW, db, dr

    def matmul(self, ctx, g):
        a, b, bias, residual = ctx.inputs
        plain = _drop(ctx.attrs, "act")
        gz = self._epilogue("matmul", ctx, g, lambda: self.o["matmul"](a, b, bias, **plain, act=0)).to(a.dtype)
        da = self.o["matmul"](gz, b.transpose(-1, -2).contiguous())
        if b.dim() == 2:
            db = self.o["matmul"](_rows(a).t().contiguous(), _rows(gz))
        else:
            db = self.o["matmul"](a.transpose(-1, -2).contiguous(), gz)
        dbias = _rows(gz).sum(0) if bias is not None else None
        dr = g if residual is not None else None
        return da, db, dbias, dr
