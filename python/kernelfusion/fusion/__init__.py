"""Automatic fusion of PyTorch models (needs torch): ``kernelfusion.optimize``.

    import kernelfusion as kf
    fast, report = kf.optimize(model.eval(), (input_ids,))
    print(report)               # each pattern found: replaced, reverted by the accuracy gate, or kept

docs/fusion.md lists the patterns, the gate's metrics and what runs where.
"""
from .gate import Metrics, TOLERANCE
from .convert import Captured, Report, SiteReport, build, optimize
from .rules import RULES, Site

__all__ = ["optimize", "Report", "SiteReport", "Metrics", "TOLERANCE", "Captured", "RULES", "Site", "build"]
