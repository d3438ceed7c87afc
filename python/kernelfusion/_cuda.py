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
    # The CUDA imports of Vulkan memory still in use by queued copies first, once those are done, then
    # the Vulkan tensors they came from: freeing them the other way round aborted the process at exit.
    for e, _ in _pending:
        e.synchronize()
    _pending.clear()
    _close_shared()
    _kf.fast_forget_contexts()
    _contexts.clear()
    # Contexts and torch tensors over Vulkan memory that the program still holds are released after this,
    # when the drivers may be gone (an abort at exit on an H200): they are left to the operating system.
    _kf.exiting()


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
# torch view of it imported into CUDA; the buffers are kept for later calls), the op runs on Vulkan into
# exportable tensors, and the outputs are torch views of that memory: no host copy and no copy of the
# outputs. The queues are ordered on the device by a Vulkan timeline semaphore imported into CUDA where
# both sides have them (kf::Timeline), else by the host waiting: torch's stream before Vulkan reads the
# copies, the Vulkan context before the outputs are returned.

use_shared = True    # False: every Vulkan call with CUDA tensors staged (bench/python_vulkan_cuda.py compares)
use_timeline = True  # False: the host waits for each side instead of the semaphore
_paths = {}      # (context key, device name, CUDA device index) -> "" (shared) or why the call is staged
_shared = {}     # data_ptr of a returned output -> (Vulkan tensor, CUDA tensor over it, torch view's shape)
_timelines = {}  # (Vulkan context key, CUDA context key) -> kf Timeline, or None where there is none
_pool = {}       # (Vulkan key, CUDA key, dtype, elements) -> [(flat Vulkan tensor, flat torch view)]: input buffers
_POOL_BYTES = 1 << 30  # input buffers kept per pair of contexts at most
_pool_bytes = {}


def _close_shared():
    _timelines.clear()
    _pool.clear()
    _shared.clear()


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
    CUDA imports: device-to-device copies in, outputs viewed in place; ordered by a shared semaphore where
    ordering() says so) or "staged: " and why (through the host)."""
    if ctx.backend in ("cuda", "hip"):
        return "native"
    if ctx.backend != "vulkan":
        return f"staged: the {ctx.backend} backend shares no memory with CUDA"
    if not use_shared:
        return "staged: kernelfusion._cuda.use_shared is False"
    index = device.index if isinstance(device, torch.device) else device
    if index is None:
        index = torch.cuda.current_device()
    key = (ctx.key, ctx.device_name, index)
    why = _paths.get(key)
    if why is None:
        why = _paths[key] = _why_staged(ctx, index)
    return "shared" if not why else "staged: " + why


def _timeline(ctx, cuda):
    if not use_timeline:
        return None
    key = (ctx.key, cuda.key)
    if key not in _timelines:
        ok, _ = _kf.Timeline.supported(ctx, cuda)
        try:
            _timelines[key] = _kf.Timeline.create(ctx, cuda) if ok else None
        except Exception:  # noqa: BLE001 (a semaphore the driver would not import: the host orders instead)
            _timelines[key] = None
    return _timelines[key]


def ordering(ctx, device=None):
    """How the shared path orders Vulkan's and CUDA's work: "timeline" (a Vulkan timeline semaphore
    imported into CUDA: no host waits) or "host: " and why (each side waited for)."""
    if not use_timeline:
        return "host: kernelfusion._cuda.use_timeline is False"
    cuda = context_for(device if device is not None else torch.cuda.current_device())
    ok, why = _kf.Timeline.supported(ctx, cuda)
    return "timeline" if ok else "host: " + why


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


def _input(ctx, cuda, x, taken):
    """A Vulkan tensor holding CUDA tensor x: x's own memory when x is an output of ctx, else a buffer of
    the pool (or a new one) that x is copied into on torch's stream."""
    hit = vulkan_tensor_of(x)
    if hit is not None and hit[0].context.key == ctx.key and x.is_contiguous():
        return hit[0]  # already this context's memory
    dt = dtype_name(x.dtype)
    key = (ctx.key, cuda.key, dt, x.numel())
    free = _pool.get(key)
    if free:
        flat, view = free.pop()
        pooled = True
    else:  # a flat buffer, so that any shape of as many elements reuses it
        flat = ctx.empty_exportable([x.numel()], dt)
        view = cuda.share(flat).to_torch()
        pooled = _pool_bytes.get(key[:2], 0) + flat.nbytes <= _POOL_BYTES
        if pooled:
            _pool_bytes[key[:2]] = _pool_bytes.get(key[:2], 0) + flat.nbytes
    view.view(x.shape).copy_(x.detach())  # on torch's current stream; any layout
    taken.append((key, flat, view, pooled))
    return flat.reshape(list(x.shape))


def _give_back(taken):
    """Returns input buffers to the pool: their next copy runs on the stream after this call's Vulkan work
    (ordered by the timeline's wait or by the host's). A buffer past the pool's bound is released once the
    stream's work so far is done."""
    for key, flat, view, pooled in taken:
        if pooled:
            _pool.setdefault(key, []).append((flat, view))
        else:
            _keep_until_done(view)
    taken.clear()


def run_shared(name, op, inputs, attrs, out, ctx):
    """ops.run for a Vulkan context given CUDA tensors where path() is "shared"."""
    device = next(x.device for x in inputs if is_cuda(x))
    cuda = context_for(device)
    timeline = _timeline(ctx, cuda)
    stream = torch.cuda.current_stream(device)
    tensors, taken = [], []
    try:
        for x in inputs:
            if x is None or isinstance(x, _kf.Tensor):
                tensors.append(x)
            elif is_cuda(x):
                tensors.append(_input(ctx, cuda, x, taken))
            else:
                raise ValueError(f"{name}: inputs mix CUDA tensors with {type(x).__name__} (move them to the GPU)")
    except BaseException:
        stream.synchronize()  # the copies already queued, before their buffers are reused
        _give_back(taken)
        raise
    # The copies (and torch's earlier writes to reused outputs) before Vulkan reads them.
    if timeline is not None:
        timeline.vulkan_after_cuda()
    else:
        stream.synchronize()
    try:
        if out is not None:
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
            targets = [o if isinstance(o, _kf.Tensor) else ctx.empty_exportable(list(o.shape), dtype_name(o.dtype))
                       for o in outs]
        else:
            shapes = [[] if t is None else list(t.shape) for t in tensors]
            out_dtype = _kf.output_dtype(name, _op_dtype(op, tensors), attrs)
            targets = [ctx.empty_exportable(s, out_dtype) for s in _kf.infer(name, shapes, attrs)]
        ctx.run(name, tensors, targets, attrs)
    finally:
        # Vulkan's work (reads of the inputs, writes of the outputs) before torch's next work on the stream.
        if timeline is not None:
            timeline.cuda_after_vulkan()
        else:
            ctx.synchronize()
        _give_back(taken)
    if out is not None:
        for o, t in zip(outs, targets):
            if not isinstance(o, _kf.Tensor):
                v = cuda.share(t).to_torch()
                o.detach().copy_(v)
                _keep_until_done(v)
        return out
    results = [_view(cuda, t) for t in targets]
    return results[0] if len(results) == 1 else tuple(results)


def _keep_until_done(v):
    """Holds a temporary CUDA import until the work queued so far on torch's stream (a copy from or to it)
    is done; checked at later calls, waited for when too many are held."""
    e = torch.cuda.Event()
    e.record()
    _pending.append((e, v))
    while _pending and (len(_pending) > 16 or _pending[0][0].query()):
        _pending.pop(0)[0].synchronize()


_pending = []
