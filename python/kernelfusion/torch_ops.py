"""kf's registry ops as PyTorch operators: ``torch.ops.kernelfusion.<name>``.

Importing this module (it needs torch) registers every registry op with ``torch.library.custom_op``,
with a fake kernel (output shapes from the registry's shape inference, OpDef::infer), so that
``torch.compile(fullgraph=True)`` traces through them, and autograd from kf's backward kernels for every op
that has one (kernelfusion._autograd: the activations, softmax, the dropout ops with their saved seed, the
norms, attention, the losses, linear and matmul through their products). The attributes are keyword-only arguments of the operators (kf::Attrs fields).

CPU tensors run on kf's default context (``kernelfusion.set_default_context``), on the CPU backend
without copies; CUDA tensors run on kf's CUDA backend without copies, on torch's current stream
(kernelfusion._cuda), where the CUDA backend is built, else through the host on the default context.

    import torch, kernelfusion.torch_ops as kt
    y = kt.softmax(torch.randn(4, 8, requires_grad=True), scale=0.5)
"""
import torch

from . import _autograd, _kf
from . import ops as _ops
from ._core import dtype_name

_TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64,
          "i32": torch.int32}
ACTIVATIONS = _autograd.ACTIVATIONS


def _attr_schema():
    """The keyword-only part of every operator's schema, typed from kf::Attrs' defaults."""
    parts = []
    for name, default in _kf.attr_defaults():
        if name == "out_dtype":
            parts.append("str? out_dtype=None")
        elif isinstance(default, bool):
            parts.append(f"bool {name}={default}")
        elif isinstance(default, int):
            parts.append(f"int {name}={default}")
        elif isinstance(default, float):
            parts.append(f"float {name}={default!r}")
        elif isinstance(default, str):
            parts.append(f'str {name}="{default}"')
        else:  # a pair (stride, padding, dilation)
            parts.append(f"int[2] {name}=[{default[0]}, {default[1]}]")
    return ", ".join(parts)


_ATTRS = _attr_schema()


def _schema(op):
    args = ", ".join(f"Tensor {x}" if i < op["required_inputs"] else f"Tensor? {x}=None"
                     for i, x in enumerate(op["inputs"]))
    outs = "Tensor" if len(op["outputs"]) == 1 else "(" + ", ".join("Tensor" for _ in op["outputs"]) + ")"
    return f"({args}, *, {_ATTRS}) -> {outs}"


def _op_dtype(op, args):
    for k, a in enumerate(args):
        if a is not None and op["input_dtypes"][k] is None:
            return dtype_name(a.dtype)
    return dtype_name(next(a for a in args if a is not None).dtype)


# An operator's schema has all of the op's outputs; an output that a call does not make (attention's lse
# without return_lse) is an empty tensor there, which the Python functions below leave out.
def _pad(op, res, like):
    return res + tuple(like.new_empty(0) for _ in range(len(op["outputs"]) - len(res)))


def _real(op):
    name = op["name"]

    def impl(*args, **attrs):
        device = next(a.device for a in args if a is not None)
        res = _ops.run(name, list(args), attrs)
        res = res if isinstance(res, tuple) else (res,)
        # outputs must not alias kf's memory that another op could reuse: kf allocated them fresh, and the
        # torch tensors view it (no copy) on the CPU backend
        res = _pad(op, tuple(r if r.device == device else r.to(device) for r in res), res[0])
        return res[0] if len(res) == 1 else res

    return impl


def _fake(op):
    name = op["name"]

    def fake(*args, **attrs):
        shapes = [[] if a is None else [int(d) for d in a.shape] for a in args]
        a = {k: v for k, v in attrs.items() if v is not None}
        out_dtype = _TORCH[_kf.output_dtype(name, _op_dtype(op, args), a)]
        first = next(x for x in args if x is not None)
        res = _pad(op, tuple(first.new_empty(s, dtype=out_dtype) for s in _kf.infer(name, shapes, a)), first)
        return res[0] if len(res) == 1 else res

    return fake


operators = {}
for _op in _kf.op_defs():
    _def = torch.library.custom_op(f"kernelfusion::{_op['name']}", _real(_op), mutates_args=(),
                                   schema=_schema(_op))
    _def.register_fake(_fake(_op))
    operators[_op["name"]] = _def


def _direct(name):
    def run(*inputs, **attrs):
        return _ops.run(name, list(inputs), attrs)
    return run


_eager = _autograd.register(operators, {n: _direct(n) for n in operators})
_DEFAULTS = {name: list(v) if isinstance(v, tuple) else v for name, v in _kf.attr_defaults()}
del _op, _def


class _Eager(torch.autograd.Function):
    """Outside torch.compile, an op with a backward runs through this rather than its torch.library operator:
    the same formulas (kernelfusion._autograd) without the dispatcher's per-call cost (custom_op fills in
    every default attribute in Python, about half a millisecond per call)."""

    @staticmethod
    def forward(ctx, name, attrs, *inputs):
        res = _ops.run(name, list(inputs), attrs)
        setup, _ = _eager[name]
        setup(ctx, inputs, attrs, res)
        ctx.name = name
        return res

    @staticmethod
    def backward(ctx, *grads):
        grads = _eager[ctx.name][1](ctx, *grads)
        return (None, None) + (grads if isinstance(grads, tuple) else (grads,))


_PLAIN = (torch.Tensor, torch.nn.Parameter)
_ops._setup_torch()
_fast = _kf.fast_call
_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled


def _make(name):
    opdef = operators[name]
    differentiable = name in _eager
    names = _ops.defs[name]["inputs"]
    ident = _ops.defs[name]["id"]

    def f(*inputs, **attrs):
        # Plain tensors, no keywords, nothing for autograd to record (grad: fast_call leaves tensors that
        # require grad to the path below), not traced: kernelfusion.ops' C++ path directly.
        if not attrs and len(inputs) <= len(names) and not _compiling():
            res = _fast(ident, inputs, None, None, None, _grad_enabled())
            if res is not NotImplemented:
                return res
        inputs = list(inputs) + [None] * (len(names) - len(inputs))  # optional inputs left out: None
        for k, n in enumerate(names):  # inputs given by name
            if n in attrs:
                if inputs[k] is not None:
                    raise TypeError(f"{name}() got multiple values for input '{n}'")
                inputs[k] = attrs.pop(n)
        attrs = _ops._attrs(name, attrs)
        grad = torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs)
        drop_lse = False
        if name == "attention" and not attrs.get("return_lse") and grad:
            attrs["return_lse"] = drop_lse = True  # the backward needs lse: made by the forward, not again
        if torch.compiler.is_compiling() or any(type(t) not in _PLAIN for t in inputs if t is not None):
            # traced, or tensor subclasses (FakeTensor, ...): torch.library's operator, with its fake kernel
            res = opdef(*inputs, **attrs)
            if isinstance(res, tuple):
                res = tuple(r for k, r in enumerate(res) if k == 0 or r.numel() > 0)  # padding left out
                res = res[0] if len(res) == 1 else res
        elif grad and differentiable:
            res = _Eager.apply(name, {**_DEFAULTS, **attrs}, *inputs)
        else:
            res = _ops.run(name, list(inputs), attrs)
        return res[0] if drop_lse else res

    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"torch.ops.kernelfusion.{name}: {_ops.defs[name]['inputs']} -> {_ops.defs[name]['outputs']}" \
                "\n\n" + (getattr(_ops, name).__doc__ or "")
    return f


for _name in operators:
    globals()[_name] = _make(_name)
del _name
