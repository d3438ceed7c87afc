"""The accuracy gate: the converted model's outputs against the original's, with stated metrics.

For every floating-point output: the largest absolute error, the relative error in the 2-norm
(||y - y_ref|| / ||y_ref||, the figure the tolerance bounds), the cosine similarity of the flattened
outputs (sentence embeddings), and, for outputs whose last dimension has at least 5 classes, top-1 and
top-5 agreement over the rows (logits). Integer and boolean outputs must be equal.
"""
from dataclasses import dataclass

import torch

# The default bound on the relative 2-norm error of every output, by the model's dtype: a few times the
# rounding error such models show when a library's kernels replace others (different summation orders,
# one rounding instead of two in fused epilogues). optimize(tolerance=...) overrides it.
TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 4e-2}


@dataclass
class Metrics:
    max_abs: float = 0.0
    rel: float = 0.0
    cosine: float = 1.0
    top1: float = None
    top5: float = None
    equal: bool = True

    def as_dict(self):
        return {k: v for k, v in self.__dict__.items() if v is not None}


def flat(out):
    """The tensors of a model's output (tuples, lists, dicts, dataclass-like ModelOutputs), in order."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict) or hasattr(out, "items"):
        return [t for v in out.values() for t in flat(v)]
    if isinstance(out, (tuple, list)):
        return [t for v in out for t in flat(v)]
    return []


def compare(y, ref):
    """Metrics of one output against its reference."""
    if y.shape != ref.shape:
        return Metrics(rel=float("inf"), cosine=0.0, equal=False)
    if not ref.is_floating_point():
        return Metrics(equal=bool(torch.equal(y, ref)))
    a, b = y.detach().double().flatten(), ref.detach().double().flatten()
    if a.numel() == 0:
        return Metrics()
    d = a - b
    finite = torch.isfinite(b)
    if not torch.equal(torch.isfinite(a), finite):
        return Metrics(max_abs=float("inf"), rel=float("inf"), cosine=0.0, equal=False)
    d = torch.where(finite, d, torch.zeros_like(d))
    bz = torch.where(finite, b, torch.zeros_like(b))
    az = torch.where(finite, a, torch.zeros_like(a))
    nb = float(bz.norm())
    rel = float(d.norm()) / nb if nb > 0 else float(d.norm())
    na = float(az.norm())
    cos = float(az @ bz) / (na * nb) if na > 0 and nb > 0 else float(na == nb)
    m = Metrics(max_abs=float(d.abs().max()), rel=rel, cosine=cos, equal=bool(torch.equal(a, b)))
    if ref.dim() >= 1 and ref.shape[-1] >= 5:
        ra, rb = y.detach().reshape(-1, ref.shape[-1]).float(), ref.detach().reshape(-1, ref.shape[-1]).float()
        m.top1 = float((ra.argmax(-1) == rb.argmax(-1)).float().mean())
        ta, tb = ra.topk(5, -1).indices.sort(-1).values, rb.topk(5, -1).indices.sort(-1).values
        m.top5 = float((ta == tb).all(-1).float().mean())
    return m


def check(outs, refs, tolerance):
    """(passed, [Metrics per output]): every float output within `tolerance` (relative 2-norm error), every
    other output equal."""
    ys, rs = flat(outs), flat(refs)
    if len(ys) != len(rs):
        return False, []
    ms = [compare(y, r) for y, r in zip(ys, rs)]
    ok = all((m.rel <= tolerance) if r.is_floating_point() else m.equal for m, r in zip(ms, rs))
    return ok, ms
