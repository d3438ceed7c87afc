"""kernelfusion.optimize: a PyTorch model in, the same model with kf's fused kernels in place of the patterns
kf knows out, proven on the caller's inputs to compute what the original computes.

How (docs/fusion.md says more):
1. torch.export traces the model on the example inputs into an ATen graph (non-strict: the model's Python
   runs as is); its module form holds the model's own parameters.
2. The rules (rules.py) find sites; each site becomes one call of a function of kernels.py.
3. A trial run runs the original graph once and, at every site, also runs the site's replacement on the same
   values: the site's own error and both times, for the report.
4. The gate runs the converted model on the example inputs and the validation batches against the original
   model; if an output is out of tolerance, the sites are bisected and each one that breaks the gate on its
   own is reverted (left to torch), with the rest kept.
"""
import operator
import time
from dataclasses import dataclass, field

import torch
import torch.utils._pytree as pytree

from . import gate as G
from .rules import RULES, Const, find_sites

A = torch.ops.aten
# A site whose replacement takes more than this times torch's device time keeps torch's ops (speed=True):
# beyond the noise of single-op timings
SLOWER = 1.05


@dataclass
class SiteReport:
    rule: str
    where: str
    kf_op: str
    status: str              # "replaced"; "reverted" (broke the gate); "slower" (kf's measured slower: torch's
                             # kept); "kept" (recognised, not convertible)
    reason: str = ""
    rel: float = None        # the site's own relative 2-norm error on the example inputs
    max_abs: float = None
    torch_ms: float = None   # the pattern's time in torch and its replacement's, measured one node at a time
    kf_ms: float = None


@dataclass
class Report:
    """What optimize found and did: a row per site, the gate's figures per output, and whether it passed."""
    sites: list = field(default_factory=list)
    outputs: list = field(default_factory=list)   # gate.Metrics of each output of the final model
    tolerance: float = 0.0
    passed: bool = True
    validated: bool = True
    training: bool = False

    def count(self, status):
        return sum(1 for s in self.sites if s.status == status)

    def __str__(self):
        lines = [f"kernelfusion.optimize: {self.count('replaced')} replaced, {self.count('reverted')} reverted, "
                 f"{self.count('slower')} slower, {self.count('kept')} kept ({'training' if self.training else 'inference'}; gate "
                 + (("passed" if self.passed else "FAILED") + f" at rel <= {self.tolerance:g})" if self.validated
                    else "not run)")]
        for k, m in enumerate(self.outputs):
            lines.append(f"  output {k}: " + ", ".join(f"{n} {v:.3g}" if isinstance(v, float) else f"{n} {v}"
                                                      for n, v in m.as_dict().items()))
        w = max([len(s.where) for s in self.sites] + [5])
        r = max([len(s.rule) for s in self.sites] + [4])
        for s in self.sites:
            err = "" if s.rel is None else f"rel {s.rel:.2e} max {s.max_abs:.2e}"
            t = "" if s.torch_ms is None else f"torch {s.torch_ms:.3f} ms, kf {s.kf_ms:.3f} ms"
            lines.append(f"  {s.status:8} {s.rule:{r}}  {s.where:{w}}  -> {s.kf_op:16} {err:28} {t}"
                         + (f"  ({s.reason})" if s.reason else ""))
        return "\n".join(lines)


def _strip_asserts(gm):
    # export's dtype/device assertions read intermediate values; they would hold on to nodes a rule
    # replaces, and the converted graph keeps its guards (_guards_fn) for the inputs
    for n in list(gm.graph.nodes):
        if n.op == "call_function" and n.target in (A._assert_tensor_metadata.default,):
            gm.graph.erase_node(n)


def build(gm, sites):
    """A GraphModule computing gm with `sites` replaced (gm is left as it is)."""
    graph = torch.fx.Graph()
    env = {}
    out = graph.graph_copy(gm.graph, env)
    graph.output(out)
    graph._codegen = gm.graph._codegen
    order = {n: k for k, n in enumerate(gm.graph.nodes)}
    root = gm  # the exported module is optimize's own: the constants of every site are registered on it
    for k, s in enumerate(sites):
        def node_of(x, s=s, k=k):
            if isinstance(x, torch.fx.Node):
                return env[x]
            if isinstance(x, Const):
                name = f"_kf_const_{id(x):x}"
                if not hasattr(root, name):
                    root.register_buffer(name, x.value)
                return graph.get_attr(name)
            return x
        first = min(s.nodes, key=order.get)
        inputs = [x for x in list(s.args) + list(s.kwargs.values()) if isinstance(x, torch.fx.Node)]
        at = first if all(order[x] < order[first] for x in inputs) else s.nodes[-1]
        with graph.inserting_before(env[at]):
            new = graph.call_function(s.fn, tuple(node_of(a) for a in s.args),
                                      {n: node_of(v) for n, v in s.kwargs.items()})
            results = {s.nodes[-1]: new} if s.outputs is None else \
                {node: graph.call_function(operator.getitem, (new, i)) for node, i in s.outputs.items()}
        old = {}
        for node, r in results.items():
            r.meta["val"] = node.meta.get("val")
            env[node].replace_all_uses_with(r)
            old[node], env[node] = env[node], r  # later sites that read this value read the replacement
        for node in sorted(s.nodes, key=order.get, reverse=True):
            n = old.get(node, env[node])
            if not n.users:
                graph.erase_node(n)
    # what only the replaced patterns read (a constant mask's construction, repeat_kv) goes too
    changed = bool(sites)
    while changed:
        changed = False
        for n in reversed(list(graph.nodes)):
            if not n.users and (n.op == "get_attr" or (n.op == "call_function" and not n.is_impure())):
                graph.erase_node(n)
                changed = True
    graph.lint()
    new_gm = torch.fx.GraphModule(root, graph, class_name=type(gm).__name__)
    for key in ("_in_spec", "_out_spec", "range_constraints", "meta"):
        if hasattr(gm, key):
            setattr(new_gm, key, getattr(gm, key))
    return new_gm


def _sync(tensors):
    if any(t.is_cuda for t in tensors if isinstance(t, torch.Tensor)):
        torch.cuda.synchronize()


class _Trial(torch.fx.Interpreter):
    """Runs the original graph; at each site's last node also runs the site's replacement on the same values,
    and times both (the site's torch nodes one by one, synchronizing around each)."""

    def __init__(self, gm, sites):
        super().__init__(gm, garbage_collect_values=False)
        self.sites = sites
        self.ends = {}
        self.member = {}
        for s in sites:
            self.ends.setdefault(s.nodes[-1], []).append(s)
            for n in s.nodes:
                self.member[n] = s
        self.torch_s = {id(s): 0.0 for s in sites}
        self.results = {}
        self.order = {n: k for k, n in enumerate(gm.graph.nodes)}

    def run_node(self, n):
        s = self.member.get(n)
        t0 = time.perf_counter()
        res = super().run_node(n)
        if s is not None:
            _sync([res] if isinstance(res, torch.Tensor) else [])
            self.torch_s[id(s)] += time.perf_counter() - t0
        self.env[n] = res  # what run() would store after this returns: the site's checks read it
        for site in self.ends.get(n, ()):
            self._check(site)
        return res

    def _check(self, s):
        look = lambda x: self.env[x] if isinstance(x, torch.fx.Node) else x.value if isinstance(x, Const) else x
        args = [look(a) for a in s.args]
        kwargs = {k: look(v) for k, v in s.kwargs.items()}
        kf_call = lambda: s.fn(*args, **kwargs)
        try:
            with torch.no_grad():
                kf_call()  # warm: kernels compiled, memory pooled
                _sync(args)
                t0 = time.perf_counter()
                y = kf_call()
                _sync([y] if isinstance(y, torch.Tensor) else list(y))
                kf_ms, torch_ms = (time.perf_counter() - t0) * 1e3, self.torch_s[id(s)] * 1e3
                device = False
                if any(isinstance(a, torch.Tensor) and a.is_cuda for a in args):
                    # device time, each side replayed as a CUDA graph: what a captured model costs, free of
                    # the host's launch overhead (which differs between torch and kf's Python calls)
                    try:
                        kf_ms, torch_ms = _graph_ms(kf_call), _graph_ms(lambda: self._torch_pattern(s))
                        device = True
                    except Exception:  # noqa: BLE001 -- not capturable: the host times above stand
                        pass
        except Exception as e:  # noqa: BLE001 -- the report says why; the gate reverts the site
            self.results[id(s)] = (None, f"{type(e).__name__}: {e}".splitlines()[0][:200])
            return
        if s.outputs is None:
            pairs = [(y, self.env[s.nodes[-1]])]
        else:
            pairs = [(y[i], self.env[node]) for node, i in s.outputs.items()]
        ms = [G.compare(a, b) for a, b in pairs]
        worst = max(ms, key=lambda m: m.rel)
        self.results[id(s)] = ((worst.rel, worst.max_abs, torch_ms, kf_ms, device), None)

    def _torch_pattern(self, s):
        """The site's original nodes again, on the values the trial run holds (in-place forms out of place, so
        that the held values stay as they were)."""
        local = {}
        look = lambda x: local[x] if x in local else self.env[x]
        for n in sorted(s.nodes, key=self.order.get):
            target = _OUT_OF_PLACE.get(n.target, n.target)
            local[n] = target(*torch.fx.node.map_arg(n.args, look), **torch.fx.node.map_arg(n.kwargs, look))
        return local[s.nodes[-1]]


_OUT_OF_PLACE = {A.relu_.default: A.relu.default, A.silu_.default: A.silu.default, A.add_.Tensor: A.add.Tensor}


def capture_cuda_graph(call, warmup=2):
    """(a CUDA graph of call(), its output): call runs `warmup` times first on the capturing stream, so
    that kf's context for that stream and the memory the calls need exist before the capture."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(stream):
        for _ in range(warmup):
            call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph, stream=stream):
        out = call()
    return graph, out


def _graph_ms(call, reps=10):
    """Milliseconds of device time per call of `call`, captured once as a CUDA graph and replayed."""
    graph, _ = capture_cuda_graph(call)
    graph.replay()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        graph.replay()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / reps


def _as_call(example_inputs, example_kwargs):
    args = example_inputs if isinstance(example_inputs, tuple) else tuple(example_inputs) \
        if isinstance(example_inputs, list) else (example_inputs,)
    return args, dict(example_kwargs or {})


def _float_dtype(refs):
    for t in G.flat(refs):
        if t.is_floating_point():
            return t.dtype
    return torch.float32


def optimize(model, example_inputs, example_kwargs=None, *, validate=True, tolerance=None, validation=(),
             rules=None, training=None, capture=False, trial=True, speed=None):
    """Converts `model` for kf: returns (converted module, Report).

    model          a torch.nn.Module (its dtype and device are the converted model's; CUDA tensors run on kf's
                   CUDA backend without copies, CPU tensors on kf's default context)
    example_inputs the positional inputs of one call (a tensor or a tuple), example_kwargs the keywords:
                   torch.export traces the model with them, and the converted module takes inputs of these
                   shapes (export's static shapes; convert once per shape, or see capture)
    validate       run the accuracy gate (below); without it every site is replaced unchecked
    tolerance      bound on every floating output's relative 2-norm error against the original model
                   (default by dtype: gate.TOLERANCE)
    validation     more calls for the gate, each (args tuple, kwargs dict) of the example's shapes
    rules          names of the rules to apply (default all: attention, gated_mlp, ffn, linear, norm,
                   depthwise_pointwise, conv, add_relu, embedding, softmax, cross_entropy)
    training       convert for training (autograd through kf's backward kernels; dropout in kf's kernels);
                   default: model.training
    capture        on CUDA, return a module that replays the converted model as a CUDA graph per input shape
                   (inference only; kf's kernels run on torch's stream, so the graph holds them too)
    trial          run each site's replacement beside the original once, for its own error and times (on
                   CUDA: device times, each side replayed as a CUDA graph)
    speed          keep torch's ops where the trial run measured kf's replacement slower on the device (status
                   "slower"); default: on for CUDA inputs (elsewhere the times say little: the CPU backend is
                   the float64 reference, and Vulkan gets CPU tensors through the host)

    The gate runs the original and the converted model on the example inputs (and `validation`); every
    output must be within tolerance (integer outputs equal). Otherwise the sites are bisected, and each site
    that breaks the gate on its own is reverted; the report lists every site with its status, error and
    time, and the metrics of each output (max and relative error, cosine, top-1/top-5 agreement of logits).
    """
    if training is None:
        training = model.training
    args, kwargs = _as_call(example_inputs, example_kwargs)
    if speed is None:
        speed = any(isinstance(t, torch.Tensor) and t.is_cuda for t in pytree.tree_leaves((args, kwargs)))
    grad = torch.enable_grad() if training else torch.no_grad()
    with grad:
        ep = torch.export.export(model, args, kwargs, strict=False)
    gm = ep.module()
    _strip_asserts(gm)
    names = None if rules is None else set(rules)
    if names is not None and names - {n for n, _ in RULES}:
        raise ValueError(f"kernelfusion.optimize: unknown rules {sorted(names - {n for n, _ in RULES})}; "
                         f"known: {[n for n, _ in RULES]}")
    sites = find_sites(gm, training, names)
    active = [s for s in sites if not s.kept]
    report = Report(training=training, validated=validate)
    rows = {id(s): SiteReport(s.rule, s.where, s.kf_op, "kept" if s.kept else "replaced", s.reason) for s in sites}

    if trial and active:
        p = _Trial(gm, active)
        with torch.no_grad():
            p.run(*pytree.tree_leaves((args, kwargs)))
        for s in active:
            res, err = p.results.get(id(s), (None, "not reached on the example inputs"))
            row = rows[id(s)]
            if res is None:
                row.reason = err
            else:
                row.rel, row.max_abs, row.torch_ms, row.kf_ms, on_device = res
                if speed and on_device and row.kf_ms > row.torch_ms * SLOWER:
                    row.status = "slower"

    active = [s for s in active if rows[id(s)].status == "replaced"]
    calls = [(args, kwargs)] + [_as_call(a, k) for a, k in validation]
    if validate:
        with grad:
            refs = [model(*a, **k) for a, k in calls]
        report.tolerance = tolerance if tolerance is not None else G.TOLERANCE.get(_float_dtype(refs), 1e-4)

        def passes(subset):
            try:
                m = build(gm, subset)
                with grad:
                    results = [G.check(m(*a, **k), r, report.tolerance) for (a, k), r in zip(calls, refs)]
            except Exception:  # noqa: BLE001 -- a site whose kernel refuses these inputs breaks the gate
                return False, []
            return all(ok for ok, _ in results), results[0][1]

        def bisect(cands, base):
            """The sites of cands that can join base without breaking the gate."""
            if not cands:
                return []
            if passes(base + cands)[0]:
                return cands
            if len(cands) == 1:
                rows[id(cands[0])].status = "reverted"
                return []
            half = len(cands) // 2
            good = bisect(cands[:half], base)
            return good + bisect(cands[half:], base + good)

        kept = bisect(active, [])
        report.passed, report.outputs = passes(kept)
        if not kept:
            report.passed, report.outputs = True, [G.compare(r, r) for r in G.flat(refs[0])]
    else:
        kept = active
    report.sites = [rows[id(s)] for s in sites]
    converted = build(gm, kept)
    converted.train(training)
    if capture:
        converted = Captured(converted)
    return converted, report


class Captured(torch.nn.Module):
    """Replays a converted model as a CUDA graph per input shape (inference): inputs are copied into the
    graph's own tensors and the outputs are the graph's (overwritten by the next call, as with torch's CUDA
    graphs: clone what you keep). kf's kernels run on torch's current stream, so the graph captures them
    with torch's own kernels."""

    def __init__(self, module, warmup=2):
        super().__init__()
        self.module, self.warmup = module, warmup
        self.graphs = {}

    def forward(self, *args, **kwargs):
        leaves, spec = pytree.tree_flatten((args, kwargs))
        key = (spec, tuple((tuple(t.shape), t.dtype, t.device) if isinstance(t, torch.Tensor) else t
                           for t in leaves))
        entry = self.graphs.get(key)
        if entry is None:
            entry = self.graphs[key] = self._capture(leaves, spec)
        graph, static, out = entry
        for s, t in zip(static, leaves):
            if isinstance(s, torch.Tensor):
                s.copy_(t)
        graph.replay()
        return out

    def _capture(self, leaves, spec):
        if not any(isinstance(t, torch.Tensor) and t.is_cuda for t in leaves):
            raise ValueError("kernelfusion.optimize(capture=True): the inputs are not CUDA tensors; "
                             "capture replays CUDA graphs")
        static = [t.clone() if isinstance(t, torch.Tensor) else t for t in leaves]
        a, k = pytree.tree_unflatten(static, spec)
        graph, out = capture_cuda_graph(lambda: self.module(*a, **k), self.warmup)
        return graph, static, out
