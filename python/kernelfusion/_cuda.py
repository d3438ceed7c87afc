"""torch CUDA tensors on kf's CUDA (or HIP) backend without copies.

A CUDA tensor reaches kf through DLPack (``Context.wrap_device``: the tensor's own memory, no copy) and kf
runs on the caller's stream: the context of a device and stream (``context_for``) is opened once with
``stream=torch.cuda.current_stream().cuda_stream``, so that kf's kernels run in stream order with torch's
and nothing synchronizes. Outputs are allocated by torch (``torch.empty`` on the device, from its caching
allocator) and wrapped the same way, so that torch owns every tensor it gets back.

Requirements of the memory kf reads and writes in place: C-contiguous and 256-byte aligned (a view into
the middle of a tensor is neither, in general). An input that is not is copied on the device first
(``.contiguous()`` / ``.clone()``, stream-ordered too); an ``out=`` tensor that is not raises.
"""
import atexit
import weakref

import torch

from . import _kf
from ._core import dtype_name

_contexts = {}


def _close_all():
    _kf.fast_forget_contexts()
    _contexts.clear()


# The contexts close (waiting for their streams) at exit while CUDA is still up: atexit runs this before
# the handlers torch registered earlier.
atexit.register(_close_all)


def context_for(device, stream=None):
    """kf's context on torch's `device` (a torch.device or index) running on `stream` (default: torch's
    current stream of that device); one per (device, stream), kept for the process."""
    index = device.index if isinstance(device, torch.device) else int(device)
    if index is None:
        index = torch.cuda.current_device()
    if stream is None:
        stream = torch.cuda.current_stream(index)
    return context_of_stream(index, stream.cuda_stream)


def context_of_stream(index, handle):
    """context_for by device index and raw stream handle (torch._C._cuda_getCurrentRawStream: what
    _kf.fast_call asks for, and caches, on its first call of a device and stream)."""
    key = (index, handle)
    ctx = _contexts.get(key)
    if ctx is None:
        backend = "hip" if torch.version.hip else "cuda"
        # torch's default stream is the legacy NULL stream (handle 0), which kf names 1 (cudaStreamLegacy):
        # 0 would give the context a stream of its own, unordered with torch's work
        ctx = _kf.Context(backend=backend, device=str(index), stream=handle or 1)
        _contexts[key] = ctx
    return ctx


def default_for(device):
    """The context for tensors of torch `device` when the call names none: CUDA's (HIP's) on the current
    stream where that backend is built, else kf's default context (staged through the host)."""
    from ._core import default_context
    if ("hip" if torch.version.hip else "cuda") in _kf.backends():
        return context_for(device)
    return default_context()


def _usable(t):
    return t.is_contiguous() and t.data_ptr() % 256 == 0


def wrap(ctx, t, what, writable=False):
    """A kf tensor over CUDA tensor `t`'s memory (no copy); an input that is not contiguous and aligned is
    copied on the device first."""
    t = t.detach()
    if not _usable(t):
        if writable:
            raise ValueError(f"{what}: a CUDA tensor kf writes in place must be contiguous and 256-byte aligned "
                             "(not a view into the middle of another tensor)")
        t = t.clone(memory_format=torch.contiguous_format)
    return ctx.wrap_device(t)


def is_cuda(x):
    return isinstance(x, torch.Tensor) and x.device.type == "cuda"


def run(name, op, inputs, attrs, out, ctx):
    """ops.run for calls with CUDA tensors on a CUDA context: every array on the device, the outputs
    torch's."""
    device = next(x.device for x in inputs if is_cuda(x))
    tensors = []
    for x in inputs:
        if x is None or isinstance(x, _kf.Tensor):
            tensors.append(x)
        elif is_cuda(x):
            tensors.append(wrap(ctx, x, name))
        else:
            raise ValueError(f"{name}: inputs mix CUDA tensors with {type(x).__name__} (move them to the GPU)")
    if out is not None:
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        ctx.run(name, tensors, [o if isinstance(o, _kf.Tensor) else wrap(ctx, o, name, writable=True)
                                for o in outs], attrs)
        return out
    shapes = [[] if t is None else list(t.shape) for t in tensors]
    op_dtype = _op_dtype(op, tensors)
    out_dtype = _TORCH[_kf.output_dtype(name, op_dtype, attrs)]
    results = [torch.empty(s, dtype=out_dtype, device=device) for s in _kf.infer(name, shapes, attrs)]
    ctx.run(name, tensors, [ctx.wrap_device(r) for r in results], attrs)
    return results[0] if len(results) == 1 else tuple(results)


_TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64,
          "i32": torch.int32}


def _op_dtype(op, tensors):
    for k, t in enumerate(tensors):
        if t is not None and op["input_dtypes"][k] is None:
            return t.dtype
    return dtype_name(next(t for t in tensors if t is not None).dtype)


# Vulkan contexts given CUDA tensors: memory shared with CUDA where the machine allows it (docs/python.md,
# "Vulkan and CUDA"). Each input is copied device to device into an exportable Vulkan tensor (through a
# torch view of it imported into CUDA), the op runs on Vulkan into exportable tensors, and the outputs are
# torch views of that memory: no host copy and no copy of the outputs. The queues are ordered by waiting:
# torch's stream before Vulkan reads the copies, the Vulkan context before the outputs are returned.

use_shared = True  # False: every Vulkan call with CUDA tensors staged (bench/python_vulkan_cuda.py compares)
_paths = {}    # (context key, device name, CUDA device index) -> "" (shared) or why the call is staged
_shared = {}   # data_ptr of a returned output -> (Vulkan tensor, CUDA tensor over it, torch view's shape)


def _why_staged(ctx, index):
    backend = "hip" if torch.version.hip else "cuda"
    if backend == "hip":
        return "HIP imports no Vulkan memory in kf"
    if backend not in _kf.backends():
        return "kf was built without the CUDA backend (-DKF_CUDA=ON)"
    ok, why = ctx.can_export()
    if not ok:
        return why
    try:
        cuda = context_for(index)
    except Exception as e:  # noqa: BLE001 (any failure to open CUDA means the staged path)
        return f"kf's CUDA backend cannot open cuda:{index}: {e}"
    if cuda.device_uuid != ctx.device_uuid:
        return (f"the Vulkan device ({ctx.device_name}) is another GPU than cuda:{index} ({cuda.device_name}): "
                "their device UUIDs differ")
    return ""


def path(ctx, device=None):
    """How context `ctx` runs ops on torch CUDA tensors of `device` (default: torch's current device):
    "native" (a CUDA / HIP context: in place on torch's stream), "shared" (a Vulkan context whose memory
    CUDA imports: device-to-device copies in, outputs viewed in place) or "staged: " and why (through the
    host)."""
    if ctx.backend in ("cuda", "hip"):
        return "native"
    if ctx.backend != "vulkan":
        return f"staged: the {ctx.backend} backend shares no memory with CUDA"
    index = device.index if isinstance(device, torch.device) else device
    if index is None:
        index = torch.cuda.current_device()
    if not use_shared:
        return "staged: kernelfusion._cuda.use_shared is False"
    key = (ctx.key, ctx.device_name, index)
    why = _paths.get(key)
    if why is None:
        why = _paths[key] = _why_staged(ctx, index)
    return "shared" if not why else "staged: " + why


def _forget(ptr):
    _shared.pop(ptr, None)


def _view(cuda, t):
    """A torch CUDA tensor over Vulkan tensor `t`'s memory (imported into CUDA), remembered so that passing
    it back to an op of t's context needs no copy."""
    c = cuda.share(t)
    v = c.to_torch()
    ptr = v.data_ptr()
    _shared[ptr] = (t, c, tuple(v.shape))
    weakref.finalize(v, _forget, ptr)
    return v


def vulkan_tensor_of(x):
    """The exportable Vulkan tensor and its CUDA import that a torch tensor returned by the shared path
    views, or None."""
    hit = _shared.get(x.data_ptr()) if is_cuda(x) else None
    return None if hit is None or hit[2] != tuple(x.shape) else hit[:2]


def _input(ctx, cuda, x, views):
    hit = vulkan_tensor_of(x)
    if hit is not None and hit[0].context.key == ctx.key and x.is_contiguous():
        return hit[0]  # already this context's memory
    t = ctx.empty_exportable(list(x.shape), dtype_name(x.dtype))
    view = cuda.share(t).to_torch()
    view.copy_(x.detach())  # on torch's current stream; any layout
    views.append(view)  # the import outlives the copy (released after the stream is synchronized)
    return t


def run_shared(name, op, inputs, attrs, out, ctx):
    """ops.run for a Vulkan context given CUDA tensors where path() is "shared"."""
    device = next(x.device for x in inputs if is_cuda(x))
    cuda = context_for(device)
    tensors, views = [], []
    for x in inputs:
        if x is None or isinstance(x, _kf.Tensor):
            tensors.append(x)
        elif is_cuda(x):
            tensors.append(_input(ctx, cuda, x, views))
        else:
            raise ValueError(f"{name}: inputs mix CUDA tensors with {type(x).__name__} (move them to the GPU)")
    stream = torch.cuda.current_stream(device)
    stream.synchronize()  # the copies are done before Vulkan reads them
    views.clear()
    if out is not None:
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        targets = [o if isinstance(o, _kf.Tensor) else ctx.empty_exportable(list(o.shape), dtype_name(o.dtype))
                   for o in outs]
        ctx.run(name, tensors, targets, attrs)
        ctx.synchronize()  # Vulkan's writes are done before torch reads them
        for o, t in zip(outs, targets):
            if not isinstance(o, _kf.Tensor):
                views.append(cuda.share(t).to_torch())
                o.detach().copy_(views[-1])
        stream.synchronize()  # the copies are done before the temporaries go
        return out
    shapes = [[] if t is None else list(t.shape) for t in tensors]
    out_dtype = _kf.output_dtype(name, _op_dtype(op, tensors), attrs)
    targets = [ctx.empty_exportable(s, out_dtype) for s in _kf.infer(name, shapes, attrs)]
    ctx.run(name, tensors, targets, attrs)
    ctx.synchronize()  # Vulkan's writes are done before torch reads them
    results = [_view(cuda, t) for t in targets]
    return results[0] if len(results) == 1 else tuple(results)
