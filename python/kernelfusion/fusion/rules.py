"""The patterns kf fuses, each a small rule over an exported (ATen) graph.

A rule looks at one node and, when the node ends a pattern it knows, returns a Site: the nodes the pattern
consists of, the kf function (kernelfusion.fusion.kernels) that replaces them with its arguments (graph
nodes or constants), and which of the pattern's nodes stand for which of the function's results. A rule
may also return a Kept site, a pattern it recognised but cannot convert, with the reason (it goes into the
report). Rules never change the graph: kernelfusion.fusion.optimize applies the sites it keeps.

Rules run in the order of RULES, and a node belongs to one site at most, so the larger patterns (ffn,
gated MLP, linear with its epilogue) are tried before the parts they contain.
"""
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from . import kernels as K

A = torch.ops.aten
FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


@dataclass
class Site:
    rule: str                  # the pattern, e.g. "linear+gelu+residual"
    kf_op: str                 # kf's op(s) that replace it
    nodes: list                # the pattern's nodes, in graph order
    fn: Callable = None        # kernels.<function>
    args: tuple = ()           # graph nodes, constants, or Const
    kwargs: dict = field(default_factory=dict)
    outputs: dict = None       # pattern node -> index into fn's result tuple; None: the last node is the result
    reason: str = ""           # for a Kept site: why it is not converted
    where: str = ""

    @property
    def kept(self):
        return self.fn is None


@dataclass
class Const:
    """A tensor made at conversion (a folded batch norm, a packed weight), held by the converted module."""
    value: Any


class Graph:
    """What the rules may ask about the graph: node types, users, parameters and constant tensors."""

    def __init__(self, gm, training):
        self.gm, self.training = gm, training
        self.claimed = set()
        self.order = {n: k for k, n in enumerate(gm.graph.nodes)}

    def constant(self, node):
        """node's value when it depends on no input of the model (a mask built from arange and the
        shapes, for example), computed now; else None."""
        seen, order, stack = set(), [], [node]
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            if n.op == "placeholder" or (n.op == "call_function" and n.is_impure()) or n.op == "call_module":
                return None
            order.append(n)
            stack.extend(n.all_input_nodes)
        env = {}
        look = lambda x: env[x] if isinstance(x, torch.fx.Node) else x
        for n in sorted(order, key=lambda x: self.order[x]):
            if n.op == "get_attr":
                env[n] = self.attr(n)
            elif n.op == "call_function":
                env[n] = n.target(*torch.fx.node.map_aggregate(n.args, look),
                                  **torch.fx.node.map_aggregate(n.kwargs, look))
            else:
                return None
        return env[node]

    def attr(self, node):
        """The tensor of a get_attr node (a parameter or buffer), else None."""
        if node is None or getattr(node, "op", None) != "get_attr":
            return None
        obj = self.gm
        for part in node.target.split("."):
            obj = getattr(obj, part)
        return obj


def is_op(n, *targets):
    return isinstance(n, torch.fx.Node) and n.op == "call_function" and n.target in targets


def val(n):
    return n.meta.get("val") if isinstance(n, torch.fx.Node) else None


def only_use(n, user):
    """n's value goes only to user (so that fusing n into user leaves nothing else without it)."""
    return isinstance(n, torch.fx.Node) and set(n.users) == {user}


def dtype_ok(*nodes):
    vs = [val(n) for n in nodes if n is not None]
    return all(isinstance(v, torch.Tensor) and v.dtype in FLOATS for v in vs) and len({v.dtype for v in vs}) == 1


def free(g, *nodes):
    return not any(n in g.claimed for n in nodes if n is not None)


def arg(n, i, name, default=None):
    if len(n.args) > i:
        return n.args[i]
    return n.kwargs.get(name, default)


def where(node):
    """The module path of a node (from export's nn_module_stack), for the report."""
    stack = node.meta.get("nn_module_stack")
    if stack:
        path = list(stack.values())[-1][0]
        return path.replace("L['self'].", "").replace("L__self___", "") or node.name
    return node.name


# in-place forms too (nn.ReLU(inplace=True)): a rule fuses them only into the node they overwrite, when that
# node has no other user, so nothing else sees the difference
_ACTS = {A.relu.default: "relu", A.relu_.default: "relu", A.silu.default: "silu", A.silu_.default: "silu"}


def act_of(n):
    """The epilogue activation a node computes ('relu', 'gelu', 'gelu_tanh', 'silu'), or None."""
    if not isinstance(n, torch.fx.Node) or n.op != "call_function":
        return None
    if n.target in _ACTS:
        return _ACTS[n.target]
    if n.target == A.gelu.default:
        return "gelu_tanh" if arg(n, 1, "approximate", "none") == "tanh" else "gelu"
    return None


def dropout_of(n, g):
    """A dropout node's probability when it drops anything (training), else None."""
    if is_op(n, A.dropout.default) and arg(n, 2, "train", False) and g.training:
        return float(arg(n, 1, "p"))
    return None


def identity_dropout(n):
    return is_op(n, A.dropout.default) and not arg(n, 2, "train", False)


def single_user(n):
    return next(iter(n.users)) if isinstance(n, torch.fx.Node) and len(n.users) == 1 else None


def residual_add(n, g):
    """If n's only user adds a tensor of n's shape and dtype to it, (add node, the other operand)."""
    u = single_user(n)
    if not is_op(u, A.add.Tensor) or len(u.args) != 2 or arg(u, 2, "alpha", 1) != 1 or not free(g, u):
        return None, None
    other = u.args[1] if u.args[0] is n else u.args[0]
    vn, vo = val(n), val(other)
    if not isinstance(vo, torch.Tensor) or vo.shape != vn.shape or vo.dtype != vn.dtype or other is n:
        return None, None
    return u, other


# ---------------------------------------------------------------------------------------------- products

def _linear_parts(n):
    if not is_op(n, A.linear.default):
        return None
    x, w = n.args[0], n.args[1]
    b = arg(n, 2, "bias")
    return x, w, b


def gated_mlp(n, g):
    """down(act(gate(x)) * up(x)), act silu (SwiGLU) or gelu (GeGLU), the three linears without bias."""
    if not is_op(n, A.linear.default) or arg(n, 2, "bias") is not None:
        return None
    m = n.args[0]
    if not is_op(m, A.mul.Tensor) or not only_use(m, n):
        return None
    for a_node, up in ((m.args[0], m.args[1]), (m.args[1], m.args[0])):
        act = act_of(a_node)
        if act not in ("silu", "gelu") or not only_use(a_node, m):
            continue
        gate = a_node.args[0]
        if not (is_op(gate, A.linear.default) and is_op(up, A.linear.default) and only_use(gate, a_node)
                and only_use(up, m)):
            continue
        if arg(gate, 2, "bias") is not None or arg(up, 2, "bias") is not None or gate.args[0] is not up.args[0]:
            continue
        x = gate.args[0]
        nodes = [gate, up, a_node, m, n]
        if not free(g, *nodes) or not dtype_ok(x, gate, n):
            return None
        packed = None
        wg, wu = g.attr(gate.args[1]), g.attr(up.args[1])
        if act == "silu" and not g.training and wg is not None and wu is not None:
            packed = Const(torch.cat([wu.detach(), wg.detach()], 0))  # swiglu's packed form: value, then gate
        name = "swiglu" if act == "silu" else "geglu"
        return Site(f"gated MLP ({name})", "ffn_swiglu" if packed is not None else f"linear, {name}", nodes,
                    K.gated_mlp, (x, gate.args[1], up.args[1], n.args[1]), {"w_gate_up": packed, "act": act})
    return None


def ffn(n, g):
    """linear2(act(linear1(x))) with biases, the hidden layer used only there (inference: ffn has no
    backward kernels; training takes the linear rule twice)."""
    if g.training or not is_op(n, A.linear.default) or arg(n, 2, "bias") is None or act_of(single_user(n)):
        return None  # (an activation after the second linear: linear's epilogues serve both better)
    h = n.args[0]
    while identity_dropout(h) and only_use(h, n):
        h = h.args[0]
    act = act_of(h)
    if act is None or not only_use(h, single_user(h)):
        return None
    l1 = h.args[0]
    if not is_op(l1, A.linear.default) or not only_use(l1, h) or arg(l1, 2, "bias") is None:
        return None
    nodes = [l1, h] + _between(h, n) + [n]
    if not free(g, *nodes) or not dtype_ok(l1.args[0], l1, n):
        return None
    return Site(f"ffn ({act})", "ffn", nodes, K.ffn, (l1.args[0], l1.args[1], arg(l1, 2, "bias"), n.args[1],
                                                       arg(n, 2, "bias"), act))


def _between(a, b):
    """The identity-dropout nodes on the single path from a to b."""
    out, u = [], single_user(a)
    while u is not None and u is not b:
        out.append(u)
        u = single_user(u)
    return out


def linear_epilogue(n, g):
    """linear(x, W, b) then, each optional: an activation, dropout (training), a residual add."""
    parts = _linear_parts(n)
    if parts is None or not free(g, n):
        return None
    x, w, b = parts
    if not dtype_ok(x, n, w) or (b is not None and not dtype_ok(b, n)):
        return None
    nodes, last, name, act, p = [n], n, ["linear"], "none", 0.0
    u = single_user(last)
    a = act_of(u)
    if a is not None and free(g, u):
        nodes.append(u); last = u; act = a; name.append(a)
    u = single_user(last)
    pd = dropout_of(u, g)
    if pd is not None and free(g, u):
        nodes.append(u); last = u; p = pd; name.append("dropout")
    elif identity_dropout(u) and free(g, u):
        nodes.append(u); last = u
    add, r = residual_add(last, g)
    if add is not None:
        nodes.append(add); last = add; name.append("residual")
    op = "linear_dropout" if p > 0 else "linear"
    return Site("+".join(name), op, nodes, K.linear, (x, w, b, r, act, p))


# ------------------------------------------------------------------------------------------------- norms

def _norm_parts(n, g):
    """(kind, x, weight, bias, eps, nodes) of a row norm ending at n: aten.layer_norm over the last
    dimension, aten.rms_norm, or the hand-written RMSNorm of common model code
    (w * (x * rsqrt(mean(x^2, -1) + eps)), with optional casts to f32 and back)."""
    if is_op(n, A.layer_norm.default):
        shape = list(arg(n, 1, "normalized_shape"))
        if len(shape) != 1 or shape[0] != val(n).shape[-1]:
            return None
        eps = arg(n, 4, "eps", 1e-5)
        return "layer_norm", n.args[0], arg(n, 2, "weight"), arg(n, 3, "bias"), eps, [n]
    if is_op(n, A.rms_norm.default):
        shape = list(arg(n, 1, "normalized_shape"))
        if len(shape) != 1 or shape[0] != val(n).shape[-1]:
            return None
        eps = arg(n, 3, "eps")
        if eps is None:
            eps = torch.finfo(val(n).dtype).eps
        return "rms_norm", n.args[0], arg(n, 2, "weight"), None, eps, [n]
    return _handwritten_rms(n)


def _strip_cast(n):
    """(the node below a dtype cast, the cast nodes) -- HF's RMSNorm computes in f32 and casts back."""
    casts = []
    while is_op(n, A.to.dtype, A._to_copy.default) and len(n.users) <= 2:
        casts.append(n)
        n = n.args[0]
    return n, casts


def _handwritten_rms(n):
    if not is_op(n, A.mul.Tensor):
        return None
    for w, y in ((n.args[0], n.args[1]), (n.args[1], n.args[0])):
        if not isinstance(w, torch.fx.Node) or w.op != "get_attr" or not isinstance(y, torch.fx.Node):
            continue
        y0, casts_out = _strip_cast(y)
        if not is_op(y0, A.mul.Tensor):
            continue
        for xs, r in ((y0.args[0], y0.args[1]), (y0.args[1], y0.args[0])):
            if not is_op(r, A.rsqrt.default):
                continue
            s = r.args[0]
            if not is_op(s, A.add.Tensor) or not isinstance(s.args[1], (int, float)):
                continue
            mean = s.args[0]
            if not is_op(mean, A.mean.dim) or list(mean.args[1]) not in ([-1], [val(mean).dim() - 1]):
                continue
            sq = mean.args[0]
            if is_op(sq, A.pow.Tensor_Scalar) and sq.args[1] == 2 and sq.args[0] is xs:
                pass
            elif is_op(sq, A.mul.Tensor) and sq.args[0] is xs and sq.args[1] is xs:
                pass
            else:
                continue
            x, casts_in = _strip_cast(xs)
            inner = [sq, mean, s, r, y0] + casts_out + [n]
            users_ok = all(set(u.users) <= set(inner) for u in inner[:-1]) and \
                all(set(c.users) <= set(inner) for c in casts_in)
            if not users_ok or val(w).shape != val(n).shape[-1:] or val(n).dtype != val(x).dtype:
                continue
            return "rms_norm", x, w, None, float(s.args[1]), casts_in[::-1] + inner
    return None


_NORM_ACT = {"layer_norm": ("relu", "gelu", "silu"), "rms_norm": ("gelu", "silu")}


def norm(n, g):
    """A row norm, with a following activation or a residual add before it (add + norm in one pass, both
    results kept: the sum is the residual stream of pre-norm transformers)."""
    parts = _norm_parts(n, g)
    if parts is None:
        return None
    kind, x, w, b, eps, nodes = parts
    if not free(g, *nodes) or not dtype_ok(x, n, w, b):
        return None
    add = x if is_op(x, A.add.Tensor) and len(x.args) == 2 and arg(x, 2, "alpha", 1) == 1 and free(g, x) else None
    if add is not None:
        a, r = add.args
        if isinstance(a, torch.fx.Node) and isinstance(r, torch.fx.Node) and val(a).shape == val(r).shape \
                == val(add).shape and dtype_ok(a, r, add):
            outputs = {add: 0, n: 1}
            return Site(f"add+{kind}", f"add_{kind}", [add] + nodes, K.add_norm, (a, r, w, b, kind, eps),
                        outputs=outputs)
    u = single_user(n)
    act = act_of(u)
    if act in _NORM_ACT[kind] and free(g, u):
        return Site(f"{kind}+{act}", f"{kind}_{act}", nodes + [u], K.norm, (x, w, b, kind, eps, act))
    return Site(kind, kind, nodes, K.norm, (x, w, b, kind, eps))


# ------------------------------------------------------------------------------------------- attention

def _unrepeat_kv(k):
    """HF's repeat_kv (k[:, :, None].expand(B, Hkv, n, S, D).reshape(B, Hkv n, S, D)): (k before it, n)."""
    if not is_op(k, A.reshape.default, A.view.default, A._unsafe_view.default):
        return k, []
    e = k.args[0]
    if not is_op(e, A.expand.default) or len(e.users) != 1:
        return k, []
    u = e.args[0]
    nodes = [e, k]
    while is_op(u, A.slice.Tensor) and len(u.users) == 1:
        nodes.insert(0, u)
        u = u.args[0]
    if not is_op(u, A.unsqueeze.default) or u.args[1] != 2 or len(u.users) != 1:
        return k, []
    nodes.insert(0, u)
    src = u.args[0]
    vs, vk = val(src), val(k)
    if vs.dim() != 4 or vk.shape[1] % vs.shape[1] or vk.shape[0] != vs.shape[0]:
        return k, []
    return src, nodes


def _unrope(x):
    """transformers' apply_rotary_pos_emb on one tensor, x * cos + rotate_half(x) * sin with
    rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2]): (x before it, cos node, sin node, its nodes), or None.
    Each node of it must feed only the next, so that nothing else (a key/value cache) reads rotated keys."""
    if not is_op(x, A.add.Tensor) or len(x.args) != 2:
        return None
    for m1, m2 in ((x.args[0], x.args[1]), (x.args[1], x.args[0])):
        if not (is_op(m1, A.mul.Tensor) and is_op(m2, A.mul.Tensor)):
            continue
        for cat, sin in ((m2.args[0], m2.args[1]), (m2.args[1], m2.args[0])):
            if not is_op(cat, A.cat.default) or len(cat.args[0]) != 2 or arg(cat, 1, "dim", 0) not in (-1, 3):
                continue
            neg, lo = cat.args[0]
            if not (is_op(neg, A.neg.default) and is_op(lo, A.slice.Tensor) and is_op(neg.args[0], A.slice.Tensor)):
                continue
            hi, src = neg.args[0], lo.args[0]
            d = val(src).shape[-1] if isinstance(val(src), torch.Tensor) else 0
            if hi.args[0] is not src or d % 2 or val(src).dim() != 4 or \
                    tuple(lo.args[1:4]) not in ((3, 0, d // 2), (-1, 0, d // 2)) or \
                    tuple(hi.args[1:3]) not in ((3, d // 2), (-1, d // 2)):
                continue
            if m1.args[0] is src:
                cos = m1.args[1]
            elif m1.args[1] is src:
                cos = m1.args[0]
            else:
                continue
            nodes = [lo, hi, neg, cat, m1, m2, x]
            if all(len(k.users) == 1 for k in nodes[2:-1]) and set(lo.users) == {cat} and set(hi.users) == {neg}:
                return src, cos, sin, nodes
    return None


def _rope_base(g, cos, sin, s, d):
    """kf's rope_base when cos and sin (constants: the positions come from arange) are GPT-NeoX's rotation
    of positions 0..s-1 (cos(p theta_k) in both halves, theta_k = base^(-2k/d)), with the base read from the
    model's inv_freq buffer; else None."""
    c, sn = g.constant(cos), g.constant(sin)
    if c is None or sn is None:
        return None
    inv = None
    seen, stack = set(), [cos]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        t = g.attr(n)
        if isinstance(t, torch.Tensor) and t.dim() == 1 and t.numel() == d // 2 and t.is_floating_point():
            inv = t
        stack.extend(n.all_input_nodes)
    if inv is None or d < 4 or float(inv[1]) <= 0:
        return None
    base = float(inv[1].double()) ** (-d / 2.0)
    k = torch.arange(d // 2, dtype=torch.float64)
    ang = torch.arange(s, dtype=torch.float64)[:, None] * base ** (-2.0 * k / d)
    tol = max(2e-3, 8 * torch.finfo(c.dtype).eps)
    want_c, want_s = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
    try:
        ok = all(float((t.double().cpu().reshape(-1, s, d) - w).abs().max()) <= tol
                 for t, w in ((c, want_c), (sn, want_s)))
    except RuntimeError:  # another shape
        return None
    return base if ok else None


def attention(n, g):
    if not is_op(n, A.scaled_dot_product_attention.default):
        return None
    q, k, v = n.args[:3]
    mask = arg(n, 3, "attn_mask")
    p = float(arg(n, 4, "dropout_p", 0.0))
    causal = bool(arg(n, 5, "is_causal", False))
    scale = n.kwargs.get("scale", n.args[6] if len(n.args) > 6 else None)
    vq, vk = val(q), val(k)
    if not free(g, n):
        return None
    k0, knodes = _unrepeat_kv(k)
    v0, vnodes = _unrepeat_kv(v)
    if (k0 is k) != (v0 is v):
        k0, knodes, v0, vnodes = k, [], v, []
    why = None
    if vq.dim() != 4 or not dtype_ok(q, k, v):
        why = "not 4-D [B, H, S, D] in one float dtype"
    elif vq.shape[-1] % 8 or vq.shape[-1] > 256:
        why = f"head size {vq.shape[-1]} (kf: a multiple of 8 up to 256)"
    elif vq.shape[1] % val(k0).shape[1]:
        why = "query heads not a multiple of key heads"
    elif causal and vq.shape[-2] != vk.shape[-2]:
        why = "is_causal with Sq != Sk (torch aligns it top-left, kf bottom-right)"
    elif p > 0 and not g.training:
        why = "dropout in inference"
    elif mask is not None:
        vm = val(mask)
        if vm.dim() != 4 or vm.shape[1] != 1 or vm.shape[2] not in (1, vq.shape[-2]) or vm.shape[3] != vk.shape[-2]:
            why = f"attention mask of shape {list(vm.shape)} (kf: causal and key padding, [B, 1, Sq or 1, Sk])"
        else:
            c = g.constant(mask)
            if c is not None:  # the same for every input of these shapes: none, or causal, or not kf's
                visible = c if c.dtype == torch.bool else c == 0
                sq, sk = vq.shape[-2], vk.shape[-2]
                tril = torch.ones(sq, sk, dtype=torch.bool, device=c.device).tril(sk - sq)
                if bool(visible.all()):
                    mask = None
                elif not causal and bool((visible == tril).all()):
                    mask, causal = None, True
                else:
                    why = "a constant attention mask that is neither causal nor empty"
    if why:
        return Site("scaled_dot_product_attention", "attention", [n], reason=why)
    p = p if g.training else 0.0
    rope, rope_nodes = {}, []
    rq, rk = _unrope(q), _unrope(k0)
    if rq is not None and rk is not None and rq[1] is rk[1] and rq[2] is rk[2] and only_use(q, n) and \
            (only_use(k0, knodes[0]) if knodes else only_use(k0, n)) and vq.shape[-2] == vk.shape[-2] and \
            free(g, *rq[3], *rk[3]):
        base = _rope_base(g, rq[1], rq[2], vq.shape[-2], vq.shape[-1])
        if base is not None:  # kf rotates q and k inside the kernel: query i and key j at positions i and j
            q, k0 = rq[0], rk[0]
            rope, rope_nodes = {"rope_base": base}, rq[3] + rk[3]
    nodes = rope_nodes + [x for x in knodes + vnodes if free(g, x)] + [n]
    name = "attention" + ("+causal" if causal else "") + ("+mask" if mask is not None else "") + \
        ("+GQA" if val(k0).shape[1] != vq.shape[1] else "") + ("+rotary" if rope else "")
    return Site(name, "attention", nodes, K.attention, (q, k0, v0, mask, causal, scale, p),
                {"site": f"{where(n)}:{n.name}@{id(g.gm):x}", **rope})


# ---------------------------------------------------------------------------------------- convolutions

def _conv_parts(n):
    if not is_op(n, A.conv2d.default) or val(n).dim() != 4:
        return None
    x, w = n.args[0], n.args[1]
    b = arg(n, 2, "bias")
    stride, padding, dilation = (tuple(arg(n, i, nm, d)) for i, nm, d in
                                 ((3, "stride", [1, 1]), (4, "padding", [0, 0]), (5, "dilation", [1, 1])))
    if isinstance(arg(n, 4, "padding", [0, 0]), str):
        return None
    groups = arg(n, 6, "groups", 1)
    pair = lambda t: t * 2 if len(t) == 1 else t
    return x, w, b, pair(stride), pair(padding), pair(dilation), groups


def _bn_eval(n, g):
    """aten.batch_norm in inference form: (weight, bias, mean, var, eps)."""
    if not is_op(n, A.batch_norm.default) or arg(n, 5, "training", False):
        return None
    return n.args[1], n.args[2], n.args[3], n.args[4], float(arg(n, 7, "eps", 1e-5))


def _fold_bn(g, w, b, bn):
    """Conv weights and bias with an inference batch norm folded in (made once, at conversion)."""
    bw, bb, mean, var, eps = (g.attr(x) if isinstance(x, torch.fx.Node) else x for x in bn)
    W = g.attr(w)
    if any(t is None for t in (bw, bb, mean, var, W)):
        return None
    s = (bw / torch.sqrt(var + eps)).detach()
    cb = g.attr(b) if b is not None else torch.zeros_like(mean)
    return Const((W.detach() * s.reshape(-1, 1, 1, 1)).contiguous()), Const(((cb.detach() - mean) * s + bb).detach())


def conv(n, g):
    """conv2d, with (inference) batch norm and ReLU: conv2d_bn_relu; conv + batch norm: the norm folded into
    the weights; conv + ReLU: conv2d's epilogue."""
    parts = _conv_parts(n)
    if parts is None or not free(g, n):
        return None
    x, w, b, stride, padding, dilation, groups = parts
    if not dtype_ok(x, n, w):
        return None
    if g.training:
        return Site("conv2d", "conv2d", [n], reason="training (kf has no convolution backward kernels)")
    geo = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    u = single_user(n)
    bn = _bn_eval(u, g)
    if bn is not None and free(g, u):
        r = single_user(u)
        if act_of(r) == "relu" and free(g, r):
            return Site("conv2d+batch_norm+relu", "conv2d_bn_relu", [n, u, r], K.conv2d_bn_relu,
                        (x, w) + bn[:4] + (b,), dict(geo, eps=bn[4]))
        folded = _fold_bn(g, w, b, bn)
        if folded is not None:
            return Site("conv2d+batch_norm", "conv2d", [n, u], K.conv2d, (x,) + folded, geo)
    if act_of(u) == "relu" and free(g, u):
        return Site("conv2d+relu", "conv2d", [n, u], K.conv2d, (x, w, b), dict(geo, act="relu"))
    return Site("conv2d", "conv2d", [n], K.conv2d, (x, w, b), geo)


def _conv_bn(conv_node, g):
    """(weight, bias, nodes, last node) of conv_node with an inference batch norm after it folded in (the
    norm's nodes then belong to the site), or as it is; None where the norm cannot be folded."""
    parts = _conv_parts(conv_node)
    w, b = parts[1], parts[2]
    u = single_user(conv_node)
    bn = _bn_eval(u, g)
    if bn is None:
        return w, b, [conv_node], conv_node
    folded = _fold_bn(g, w, b, bn)
    if folded is None or not free(g, u):
        return None
    return folded[0], folded[1], [conv_node, u], u


def depthwise_pointwise(n, g):
    """MobileNet's block: a depthwise conv2d [+ batch norm] [+ relu] into a 1x1 conv2d [+ batch norm] [+ relu],
    the same activation (or none) after both; the batch norms folded into the weights (inference)."""
    pw = _conv_parts(n)
    if g.training or pw is None or not free(g, n):
        return None
    x1, w_pw, _, stride, padding, dilation, groups = pw
    if groups != 1 or tuple(val(w_pw).shape[2:]) != (1, 1) or stride != (1, 1) or padding != (0, 0):
        return None
    a1 = act_of(x1)
    mid = x1.args[0] if a1 == "relu" else x1
    dw_end = mid
    dw_conv = mid.args[0] if _bn_eval(mid, g) is not None else mid
    dw = _conv_parts(dw_conv)
    if dw is None or not free(g, dw_conv):
        return None
    x, w_dw, _, s_dw, p_dw, d_dw, g_dw = dw
    c = val(x).shape[1]
    if g_dw != c or tuple(val(w_dw).shape[:2]) != (c, 1) or not dtype_ok(x, w_dw, n):
        return None
    first = _conv_bn(dw_conv, g)
    second = _conv_bn(n, g)
    if first is None or second is None or first[3] is not dw_end:
        return None
    a2_node = single_user(second[3])
    a2 = act_of(a2_node)
    if (a1 or "none") != (a2 or "none") or a1 not in (None, "relu"):
        return None
    nodes = first[2] + ([x1] if a1 else []) + second[2] + ([a2_node] if a2 else [])
    if not free(g, *nodes) or not all(set(k.users) == {nxt} for k, nxt in zip(nodes, nodes[1:])):
        return None
    act = a1 or "none"
    return Site("depthwise+pointwise" + (f"+{act}" if a1 else ""), "depthwise_pointwise", nodes,
                K.depthwise_pointwise, (x, first[0], second[0], first[1], second[1]),
                dict(stride=s_dw, padding=p_dw, dilation=d_dw, act=act))


def add_relu(n, g):
    if not is_op(n, A.relu.default, A.relu_.default) or not free(g, n):
        return None
    a = n.args[0]
    # out += identity (ResNet) is an in-place add on a value that nothing else reads
    inplace_ok = is_op(a, A.add_.Tensor) and len(a.args) == 2 and set(a.args[0].users) == {a}
    if not (is_op(a, A.add.Tensor) or inplace_ok) or len(a.args) != 2 or not only_use(a, n) or not free(g, a):
        return None
    x, y = a.args
    if not isinstance(y, torch.fx.Node) or val(x).shape != val(y).shape or not dtype_ok(x, y):
        return None
    return Site("add+relu", "add_relu", [a, n], K.add_relu, (x, y))


# --------------------------------------------------------------------------------------------- the rest

def embedding(n, g):
    if not is_op(n, A.embedding.default) or not free(g, n):
        return None
    table, ids = n.args[0], n.args[1]
    if val(table).dim() != 2 or not dtype_ok(table):
        return None
    u = single_user(n)
    if is_op(u, A.add.Tensor) and free(g, u) and len(u.args) == 2:
        pos = u.args[1] if u.args[0] is n else u.args[0]
        vp = val(pos)
        # kf's pos is per position: [S, d] (or [1, S, d]) broadcast over the batch of [B, S] ids
        if isinstance(vp, torch.Tensor) and vp.dtype == val(n).dtype and val(n).dim() >= 2 and \
                [d for d in vp.shape[:-2] if d != 1] == [] and tuple(vp.shape[-2:]) == tuple(val(n).shape[-2:]):
            return Site("embedding+add", "embedding", [n, u], K.embedding, (table, ids, pos))
    return Site("embedding", "embedding", [n], K.embedding, (table, ids))


def softmax(n, g):
    if not is_op(n, A.softmax.int, A._softmax.default, A.log_softmax.int, A._log_softmax.default) or not free(g, n):
        return None
    x, dim = n.args[0], n.args[1]
    if dim not in (-1, val(x).dim() - 1) or val(x).dtype != val(n).dtype or not dtype_ok(x):
        return None
    log = n.target in (A.log_softmax.int, A._log_softmax.default)
    return Site("log_softmax" if log else "softmax", "log_softmax" if log else "softmax", [n], K.softmax, (x, log))


def cross_entropy(n, g):
    if not is_op(n, A.cross_entropy_loss.default) or not free(g, n):
        return None
    logits, target = n.args[0], n.args[1]
    weight, reduction = arg(n, 2, "weight"), arg(n, 3, "reduction", 1)
    if weight is not None or reduction != 1 or val(logits).dim() != 2 or not dtype_ok(logits):
        return Site("cross_entropy", "cross_entropy", [n], reason="class weights, a reduction other than mean, "
                    "or logits that are not [N, C]")
    return Site("cross_entropy", "cross_entropy", [n], K.cross_entropy,
                (logits, target, arg(n, 4, "ignore_index", -100), float(arg(n, 5, "label_smoothing", 0.0))))


# (name, rule): in this order; the names are what optimize(rules=...) selects
RULES = [
    ("attention", attention),
    ("gated_mlp", gated_mlp),
    ("ffn", ffn),
    ("linear", linear_epilogue),
    ("norm", norm),
    ("depthwise_pointwise", depthwise_pointwise),
    ("conv", conv),
    ("add_relu", add_relu),
    ("embedding", embedding),
    ("softmax", softmax),
    ("cross_entropy", cross_entropy),
]


def find_sites(gm, training, names=None):
    """Every site of the rules in `names` (all by default) in gm's graph, in rule then graph order."""
    g = Graph(gm, training)
    sites = []
    for name, rule in RULES:
        if names is not None and name not in names:
            continue
        for n in list(gm.graph.nodes):
            s = rule(n, g)
            if s is None:
                continue
            s.where = where(s.nodes[-1])
            if not s.kept:
                g.claimed.update(s.nodes)
            sites.append(s)
    return sites
