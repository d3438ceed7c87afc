"""Contexts, tensors and the conversion of arrays (NumPy, torch) to and from kf tensors."""
import atexit

import numpy as np

from . import _kf
from .errors import DTypeError

Context = _kf.Context
Tensor = _kf.Tensor
Graph = _kf.Graph
GraphCache = _kf.GraphCache
backends = _kf.backends

_default = None


def default_context():
    """The context ops use when no kf tensor or ``context=`` names one: opened on first use with the
    environment's choice (KF_BACKEND, KF_DEVICE, ...), else the best device."""
    global _default
    if _default is None:
        _default = Context()
    return _default


def set_default_context(context):
    """Makes ``context`` (a :class:`Context`, or None to reopen from the environment) the default."""
    global _default
    _default = context


# The default context closes its device at exit, before the interpreter tears modules down.
atexit.register(set_default_context, None)


# kf dtype names from NumPy / torch dtypes and names.
_NAMES = {"float32": "f32", "float16": "f16", "float64": "f64", "bfloat16": "bf16", "int32": "i32",
          "f32": "f32", "f16": "f16", "f64": "f64", "bf16": "bf16", "i32": "i32",
          "float": "f32", "half": "f16", "double": "f64", "int": "i32"}


def dtype_name(dtype):
    """The kf name ("f32", "bf16", ...) of a NumPy dtype, a torch dtype or a name."""
    name = str(dtype)
    if name.startswith("torch."):
        name = name[len("torch."):]
    try:
        name = np.dtype(name).name if name not in _NAMES else name
    except TypeError:
        pass
    if name not in _NAMES:
        raise DTypeError(f"dtype: unknown dtype '{dtype}' (expected f32, f16, bf16, f64 or i32)")
    return _NAMES[name]


def _is_torch(x):
    return type(x).__module__.startswith("torch") and hasattr(x, "is_contiguous")


def kind_of(x):
    """"kf", "torch", "numpy" or None (for None)."""
    if x is None:
        return None
    if isinstance(x, Tensor):
        return "kf"
    if _is_torch(x):
        return "torch"
    return "numpy"


def host_array(x, what):
    """A C-contiguous host array of x (torch stays torch): x itself when it already is one, so that the
    CPU backend uses its memory in place; a copy when it must be made contiguous or brought to the host."""
    if _is_torch(x):
        x = x.detach()
        if x.device.type != "cpu":
            x = x.cpu()  # the CUDA/Vulkan zero-copy paths are later work: a host copy for now
        return x if x.is_contiguous() else x.contiguous()
    if not isinstance(x, np.ndarray):
        x = np.asarray(x)
    return x if x.flags.c_contiguous else np.ascontiguousarray(x)


def tensor(x, context=None):
    """A kf tensor of an array on ``context`` (the default context when None): on the CPU backend it
    uses the array's memory in place (the tensor keeps the array alive); elsewhere it is a copy."""
    if isinstance(x, Tensor):
        return x
    return (context or default_context()).wrap(host_array(x, "tensor"))


def to_kind(t, kind):
    """A result tensor as the kind of array the caller passed: a view of kf's memory on the CPU backend."""
    if kind == "torch":
        return t.to_torch()
    if kind == "numpy":
        if t.dtype == "bf16":
            raise DTypeError("NumPy has no bf16: pass torch tensors or kf tensors for bf16 results")
        return t.to_numpy()
    return t


class capture:
    """Records the kf ops run on ``context`` (the default context when None) inside a ``with`` block into a
    :class:`Graph` instead of running them; ``graph.replay()`` (or ``graph()``) runs them again, with the
    values the captured tensors hold then (write new inputs with ``Tensor.upload``). Ops inside the block
    take kf tensors of that context: arrays would be copied to the device, which a capture refuses, as it
    refuses synchronize and downloads (kernelfusion.UnsupportedError)::

        with kernelfusion.capture(ctx) as cap:
            y = kernelfusion.ops.add_relu(x, b)
        x.upload(new_values); cap.graph.replay()
    """

    def __init__(self, context=None):
        self.context = context or default_context()
        self.graph = None

    def __enter__(self):
        self.context.begin_capture()
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.context.abort_capture()
            return False
        self.graph = self.context.end_capture()
        return False

    def replay(self):
        self.graph.replay()

    __call__ = replay
