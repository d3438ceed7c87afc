"""Every op of kf's registry as a Python function, made at import from the registry itself.

``kernelfusion.ops.<name>(*inputs, out=None, context=None, **attrs)``: the inputs in the registry's order
(also by name, as keywords; an optional input may be None or left out), the attributes (kf::Attrs fields:
p, seed, scale, eps, causal, ...) as keywords; an unknown keyword raises TypeError. It returns the
op's output (a tuple when it has several) as the kind of array it was given: NumPy arrays for NumPy,
torch tensors for torch, kf tensors for kf tensors. ``out=`` (an array or a tuple of them) makes the op
write into the caller's arrays instead, in place on the CPU backend.

A call first tries ``_kf.fast_call`` (python/src/fast_call.cpp): NumPy arrays and CPU torch tensors on a
CPU context, CUDA torch tensors on the CUDA / HIP context of torch's current stream, read and allocated in
C++ with no per-call Python beyond the function itself. It returns NotImplemented, before running anything,
for what it leaves to the generic path below (kf tensors, other backends, tensor subclasses, ...), which
has the same results and errors.
"""
import os
import sys

import numpy as np

from . import _docs, _kf
from ._core import Tensor, default_context, dtype_name, host_array, kind_of, to_kind

defs = {op["name"]: op for op in _kf.op_defs()}
_fast = _kf.fast_call
_kf.fast_setup_numpy(np.ndarray, np.empty, np.ascontiguousarray,
                     [np.dtype(np.float32), np.dtype(np.float16), None, np.dtype(np.float64), np.dtype(np.int32)],
                     default_context)
_torch_ready = False
#: How fast_call makes the torch tensors it returns (docs/python.md), once torch is imported.
torch_outputs = "torch is not imported"
#: How fast_call reads torch tensors' shape, dtype, address and device.
torch_reads = "torch is not imported"


def _setup_torch():
    """Hands fast_call torch's types, dtypes and allocator, once torch is imported (kf does not import it)."""
    global _torch_ready
    _torch_ready = True
    import torch
    raw = cuda_context = None
    if ("hip" if torch.version.hip else "cuda") in _kf.backends() and hasattr(torch._C, "_cuda_getCurrentRawStream"):
        from . import _cuda
        raw, cuda_context = torch._C._cuda_getCurrentRawStream, _cuda.context_of_stream
    dtypes = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32]
    _kf.fast_setup_torch(torch.Tensor, torch.nn.Parameter, dtypes, torch.empty_like, torch.contiguous_format, raw,
                         cuda_context)
    global torch_outputs
    why = _kf.fast_setup_alloc(os.path.join(os.path.dirname(torch.__file__), "lib"), torch.Tensor, dtypes)
    torch_outputs = "made in C++ (torch's aoti_torch_empty_strided)" if not why else f"torch.empty_like ({why})"
    global torch_reads
    torch_reads = ("in C++ (torch's aoti_torch_get_* accessors)" if _kf.fast_cpp_reads(True)
                   else "through the tensors' Python attributes")


if "torch" in sys.modules:
    _setup_torch()
attr_names = tuple(_kf.attr_names())
_ACTS = {"none": 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}


def names():
    """The registry's op names, in its order."""
    return list(defs)


def _attrs(op, kw):
    a = dict(kw)
    if a.get("out_dtype") is not None:
        a["out_dtype"] = dtype_name(a["out_dtype"])
    if isinstance(a.get("act"), str):
        if a["act"] not in _ACTS:
            raise TypeError(f"{op}: act '{a['act']}' is none of {', '.join(_ACTS)}")
        a["act"] = _ACTS[a["act"]]
    return a


def run(name, inputs, attrs=None, out=None, context=None):
    """Runs registry op ``name`` on a list of inputs (arrays, kf tensors or None) with an attribute dict."""
    op = defs.get(name)
    if op is None:
        raise KeyError(f"kf has no op '{name}'")
    attrs = _attrs(name, attrs) if attrs else None
    res = _fast(op["id"], inputs, out, attrs, context)
    return _generic(name, inputs, attrs, out, context) if res is NotImplemented else res


def _generic(name, inputs, attrs, out, context):
    """run() for every call fast_call leaves: arrays through DLPack, kf tensors, staged backends."""
    if not _torch_ready and "torch" in sys.modules:
        _setup_torch()
    op = defs[name]
    inputs = list(inputs)
    attrs = attrs or {}
    ctx = context
    if ctx is None:
        ctx = next((x.context for x in inputs if isinstance(x, Tensor)), None)
    gpu = next((x for x in inputs if kind_of(x) == "torch" and x.device.type != "cpu"), None)
    if gpu is not None:  # torch GPU tensors: in place on a CUDA / HIP context, else staged through the host
        from . import _cuda
        ctx = ctx or _cuda.default_for(gpu.device)
        if ctx.backend in ("cuda", "hip"):
            return _cuda.run(name, op, inputs, attrs, out, ctx)
        if ctx.backend == "vulkan" and _cuda.path(ctx, gpu.device) == "shared":
            return _cuda.run_shared(name, op, inputs, attrs, out, ctx)
    ctx = ctx or default_context()
    kinds = {kind_of(x) for x in inputs} - {None}
    kind = "torch" if "torch" in kinds else "numpy" if "numpy" in kinds else "kf"
    tensors = [None if x is None else x if isinstance(x, Tensor) else ctx.wrap(host_array(x, name))
               for x in inputs]
    if out is None:
        results = ctx.call(name, tensors, attrs)
        results = [to_kind(t, kind) for t in results]
        if gpu is not None:
            results = [r.to(gpu.device) for r in results]
        return results[0] if len(results) == 1 else tuple(results)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    in_place = ctx.backend == "cpu"
    targets, copies = [], []
    for k, o in enumerate(outs):
        if isinstance(o, Tensor):
            targets.append(o)
        elif in_place:
            targets.append(ctx.wrap_output(o.detach() if kind_of(o) == "torch" else o))
        else:  # other backends: the op writes a device tensor, then a copy into the caller's array
            t = ctx.empty(list(o.shape), dtype_name(o.dtype))
            targets.append(t)
            copies.append((t, o))
    ctx.run(name, tensors, targets, attrs)
    for t, o in copies:
        ctx.download_into(t, o.detach() if kind_of(o) == "torch" else o)
    return out


def cuda_path(context, device=None):
    """How ``context`` runs ops given torch CUDA tensors of ``device`` (default: torch's current device):
    "native" (CUDA / HIP contexts: in place on torch's stream), "shared" (a Vulkan context sharing device
    memory with CUDA: inputs copied device to device, outputs torch views of Vulkan's memory) or
    "staged: <why>" (copies through the host). docs/python.md, "Vulkan and CUDA"."""
    from . import _cuda
    return _cuda.path(context, device)


def _make(op):
    name, inputs, required, ident = op["name"], op["inputs"], op["required_inputs"], op["id"]
    n_inputs = len(inputs)

    def f(*args, out=None, context=None, **kw):
        if len(args) > n_inputs:
            raise TypeError(f"{name}() takes at most {n_inputs} inputs ({', '.join(inputs)}), got {len(args)}")
        attrs = None
        if kw:
            args = list(args)
            for key, value in kw.items():
                if key in inputs:
                    i = inputs.index(key)
                    if i < len(args) and args[i] is not None:
                        raise TypeError(f"{name}() got multiple values for input '{key}'")
                    args += [None] * (i + 1 - len(args))
                    args[i] = value
                else:
                    attrs = attrs or {}
                    attrs[key] = value  # the C++ side raises TypeError for a name that is no attribute
            if attrs:
                attrs = _attrs(name, attrs)
        res = _fast(ident, args, out, attrs, context)
        return _generic(name, args, attrs, out, context) if res is NotImplemented else res

    args = ", ".join(x if i < required else f"{x}=None" for i, x in enumerate(inputs))
    f.__name__ = f.__qualname__ = name
    f.__module__ = __name__
    f.__doc__ = _docs.docstring(f"{name}({args}, *, out=None, context=None, **attrs) -> {', '.join(op['outputs'])}"
                                "\n\nkf's registry op; attributes are kf::Attrs fields by name (typed forms: "
                                "kernelfusion.functional).", name, ops=(name,))
    # The function itself is a C++ callable (python/src/fast_call.cpp, OpFunction) that takes the plain
    # calls straight to fast_call and hands the others to f, or to the generic path; f is its __wrapped__,
    # for inspect.signature and help().
    fn = _kf.OpFunction(ident, n_inputs, _fast, f, lambda xs, out, context: _generic(name, xs, None, out, context))
    fn.__name__ = fn.__qualname__ = name
    fn.__module__ = __name__
    fn.__doc__ = f.__doc__
    fn.__wrapped__ = f
    return fn


for _op in defs.values():
    globals()[_op["name"]] = _make(_op)
del _op
