"""KernelFusion (kf): fused neural-network kernels on Vulkan, CUDA and the CPU, from Python.

    import numpy as np, kernelfusion as kf
    x = np.random.rand(4, 8).astype(np.float32)
    y = kf.ops.softmax(x, scale=0.5)        # every registry op, attributes as keywords

Arrays (NumPy, torch) go in and come out as the same kind; kf tensors (:class:`Tensor`) stay on their
context's device. On the CPU backend nothing is copied; elsewhere arrays are copied through the host
(docs/python.md says what copies where).
"""
from . import _kf
from .errors import (Error, InvalidArgumentError, ShapeError, DTypeError, DeviceError, OutOfMemoryError,
                     DeviceLostError, UnsupportedError, TimeoutError, InternalError)
from ._core import Context, Tensor, Graph, GraphCache, capture, default_context, set_default_context, backends, tensor
from . import ops, functional


def optimize(model, example_inputs, example_kwargs=None, **options):
    """Converts a PyTorch model to kf's fused kernels, checked by an accuracy gate: returns (module, report).
    See kernelfusion.fusion.optimize (it needs torch, imported on first use)."""
    from .fusion import optimize as run
    return run(model, example_inputs, example_kwargs, **options)

__all__ = ["Context", "Tensor", "Graph", "GraphCache", "capture", "default_context", "set_default_context", "backends", "tensor", "ops", "functional", "optimize",
           "Error", "InvalidArgumentError", "ShapeError", "DTypeError", "DeviceError", "OutOfMemoryError",
           "DeviceLostError", "UnsupportedError", "TimeoutError", "InternalError"]
