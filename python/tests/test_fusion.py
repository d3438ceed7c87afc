"""kernelfusion.optimize: each rule on a small model, the accuracy gate and its bisection, the report,
training through the replaced ops, and the Vulkan backend (docs/fusion.md). The real models are in
test_fusion_models.py."""
import warnings

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import kernelfusion as kf  # noqa: E402
from conftest import vulkan_context  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def on_cpu(cpu_default):
    torch.manual_seed(0)
    yield


def convert(model, *inputs, **options):
    out, report = kf.optimize(model, inputs, **options)
    return out, report


def rows(report, status="replaced"):
    return sorted(s.rule for s in report.sites if s.status == status)


def same(a, b, tol=1e-5):
    a, b = a.detach().double(), b.detach().double()
    assert a.shape == b.shape
    assert float((a - b).norm() / b.norm().clamp(min=1e-30)) < tol


class LinearActs(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.e = nn.Linear(24, 24, bias=False), nn.Linear(24, 24, bias=False)  # (with bias: an ffn)
        self.b, self.c, self.d = (nn.Linear(24, 24) for _ in range(3))

    def forward(self, x):
        h = F.relu(self.a(x))
        h = F.gelu(self.b(h), approximate="tanh")
        h = self.c(h) + h                     # residual: linear's epilogue adds it
        h = F.silu(self.d(h))
        return F.gelu(self.e(h)) * 0.5         # gelu (erf) into a mul: linear+gelu, the mul stays torch's


def test_linear_epilogues():
    m = LinearActs().eval()
    x = torch.randn(3, 5, 24)
    out, rep = convert(m, x)
    assert rows(rep) == ["linear+gelu", "linear+gelu_tanh", "linear+relu", "linear+residual", "linear+silu"]
    assert rep.passed and rep.count("reverted") == 0
    same(out(x), m(x))
    code = out.code
    assert "aten.linear" not in code and "kernelfusion_fusion_kernels_linear" in code


class Mlps(nn.Module):
    def __init__(self):
        super().__init__()
        self.up1, self.down1 = nn.Linear(16, 40), nn.Linear(40, 16)
        self.gate, self.up, self.down = (nn.Linear(16, 32, bias=False), nn.Linear(16, 32, bias=False),
                                         nn.Linear(32, 16, bias=False))
        self.g2, self.u2, self.d2 = (nn.Linear(16, 32, bias=False), nn.Linear(16, 32, bias=False),
                                     nn.Linear(32, 16, bias=False))

    def forward(self, x):
        h = self.down1(F.gelu(self.up1(x)))                      # ffn
        h = self.down(F.silu(self.gate(h)) * self.up(h))         # SwiGLU (LlamaMLP)
        return self.d2(self.u2(h) * F.gelu(self.g2(h)))          # GeGLU, operands the other way round


def test_ffn_and_gated_mlps():
    m = Mlps().eval()
    x = torch.randn(7, 16)
    out, rep = convert(m, x)
    assert rows(rep) == ["ffn (gelu)", "gated MLP (geglu)", "gated MLP (swiglu)"]
    assert {s.kf_op for s in rep.sites} == {"ffn", "ffn_swiglu", "linear, geglu"}
    same(out(x), m(x))


class HfRMSNorm(nn.Module):
    """The hand-written RMSNorm of common model code (Llama's): computed in f32, cast back."""

    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(d) + 0.5)
        self.variance_epsilon = eps

    def forward(self, x):
        dt = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * x.to(dt)


class Norms(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln, self.ln2, self.rms, self.trms = nn.LayerNorm(32), nn.LayerNorm(32), nn.RMSNorm(32, eps=1e-5), \
            HfRMSNorm(32)

    def forward(self, x, r):
        h = F.gelu(self.ln(x))                  # layer_norm + gelu
        s = h + r
        y = self.ln2(s)                         # add + layer_norm, the sum used again below
        z = self.trms(y + s)                    # add + hand-written RMSNorm
        return F.silu(self.rms(z)), s           # rms_norm + silu


def test_norms():
    m = Norms().eval()
    x, r = torch.randn(4, 9, 32), torch.randn(4, 9, 32)
    out, rep = convert(m, x, r)
    assert rows(rep) == ["add+layer_norm", "add+rms_norm", "layer_norm+gelu", "rms_norm+silu"]
    for a, b in zip(out(x, r), m(x, r)):
        same(a, b)


class Attn(nn.Module):
    def __init__(self, causal, gqa):
        super().__init__()
        self.causal, self.gqa = causal, gqa

    def forward(self, q, k, v, mask=None):
        if self.gqa:  # transformers' repeat_kv
            b, h, s, d = k.shape
            k = k[:, :, None].expand(b, h, 2, s, d).reshape(b, 2 * h, s, d)
            v = v[:, :, None].expand(b, h, 2, s, d).reshape(b, 2 * h, s, d)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal)


@pytest.mark.parametrize("causal,gqa", [(False, False), (True, False), (True, True)])
def test_attention(causal, gqa):
    q = torch.randn(2, 4, 12, 16)
    k, v = (torch.randn(2, 2 if gqa else 4, 12, 16) for _ in range(2))
    m = Attn(causal, gqa).eval()
    out, rep = convert(m, q, k, v)
    assert [s.status for s in rep.sites] == ["replaced"]
    assert ("GQA" in rep.sites[0].rule) == gqa and ("causal" in rep.sites[0].rule) == causal
    assert "expand" not in out.code  # kf reads the grouped heads without repeating them
    same(out(q, k, v), m(q, k, v))


class Rotary(nn.Module):
    """transformers' rotary embedding and apply_rotary_pos_emb, positions 0..S-1, before attention."""

    def __init__(self, d, base, start=0):
        super().__init__()
        self.start = start  # the first position
        self.register_buffer("inv_freq", 1.0 / base ** (torch.arange(0, d, 2).float() / d), persistent=False)
        self.proj = nn.Linear(d * 4, d * 4 * 3)

    @staticmethod
    def rotate_half(x):
        return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), dim=-1)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.proj(x).view(b, s, 3, 4, -1).permute(2, 0, 3, 1, 4)
        pos = torch.arange(s, device=x.device)[None].float() + self.start
        freqs = pos[..., None] * self.inv_freq[None, None]
        emb = torch.cat((freqs, freqs), -1)
        cos, sin = emb.cos()[:, None].to(x.dtype), emb.sin()[:, None].to(x.dtype)
        q = q * cos + self.rotate_half(q) * sin
        k = k * cos + self.rotate_half(k) * sin
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


@pytest.mark.parametrize("training", [False, True])
def test_attention_rotary(training):
    torch.manual_seed(4)
    m = Rotary(16, 1000.0).train(training)  # f32: the model's inv_freq is f32-rounded, kf's angles exact
    x = torch.randn(2, 12, 64)
    out, rep = convert(m, x)
    assert "attention+causal+rotary" in rows(rep)
    assert "aten.cos" not in out.code and "aten.cat" not in out.code
    same(out(x), m(x), 1e-5)
    if training:
        w = torch.randn(2, 4, 12, 16)
        (m(x) * w).sum().backward()
        ref = m.proj.weight.grad.clone()
        m.proj.weight.grad = None
        (out(x) * w).sum().backward()
        same(m.proj.weight.grad, ref, 1e-5)


def test_attention_rotary_other_positions_not_fused():
    m = Rotary(16, 1000.0, start=3).eval()  # positions from 3: not kf's, the rotation stays torch's
    x = torch.randn(2, 12, 64)
    out, rep = convert(m, x)
    assert "attention+causal" in rows(rep) and not any("rotary" in r for r in rows(rep))
    same(out(x), m(x))


def test_attention_padding_mask():
    q, k, v = (torch.randn(2, 4, 10, 8) for _ in range(3))
    mask = torch.ones(2, 1, 1, 10, dtype=torch.bool)
    mask[1, ..., 6:] = False
    m = Attn(False, False).eval()
    out, rep = convert(m, q, k, v, mask)
    assert rows(rep) == ["attention+mask"]
    same(out(q, k, v, mask), m(q, k, v, mask))
    other = torch.ones_like(mask)
    other[0, ..., 3:] = False
    same(out(q, k, v, other), m(q, k, v, other))
    holes = mask.clone()
    holes[0, ..., 2] = False  # not a prefix: torch's attention, with a warning
    with pytest.warns(UserWarning, match="not key padding"):
        same(out(q, k, v, holes), m(q, k, v, holes))


def test_attention_kept_with_reason():
    q, k, v = (torch.randn(1, 2, 6, 8) for _ in range(3))
    mask = torch.randn(1, 2, 6, 6)  # a bias per head: not kf's
    out, rep = convert(Attn(False, False).eval(), q, k, v, mask)
    assert [s.status for s in rep.sites] == ["kept"] and "mask" in rep.sites[0].reason
    same(out(q, k, v, mask), Attn(False, False)(q, k, v, mask))


class Convs(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.c2, self.b2 = nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8)
        self.c3 = nn.Conv2d(8, 8, 1)
        for bn in (self.b1, self.b2):
            bn.running_mean.uniform_(-1, 1)
            bn.running_var.uniform_(0.5, 2)
            bn.weight.data.uniform_(0.5, 1.5)
            bn.bias.data.uniform_(-0.5, 0.5)

    def forward(self, x):
        h = F.relu(self.b1(self.c1(x)), inplace=True)   # conv + bn + relu
        y = self.b2(self.c2(h))                          # conv + bn: folded
        return F.relu(self.c3(y) + y)                    # conv, then add + relu


def test_convolutions():
    m = Convs().eval()
    x = torch.randn(2, 3, 12, 12)
    out, rep = convert(m, x)
    assert rows(rep) == ["add+relu", "conv2d", "conv2d+batch_norm", "conv2d+batch_norm+relu"]
    same(out(x), m(x))


class MobileNetV1Block(nn.Module):
    def __init__(self, relu):
        super().__init__()
        self.dw, self.b1 = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8, bias=False), nn.BatchNorm2d(8)
        self.pw, self.b2 = nn.Conv2d(8, 12, 1, bias=False), nn.BatchNorm2d(12)
        self.relu = relu
        for bn in (self.b1, self.b2):
            bn.running_mean.uniform_(-1, 1)
            bn.running_var.uniform_(0.5, 2)
            bn.weight.data.uniform_(0.5, 1.5)
            bn.bias.data.uniform_(-0.5, 0.5)

    def forward(self, x):
        act = F.relu if self.relu else (lambda t: t)
        return act(self.b2(self.pw(act(self.b1(self.dw(x))))))


@pytest.mark.parametrize("relu", [True, False])
def test_depthwise_pointwise(relu):
    m = MobileNetV1Block(relu).eval()
    x = torch.randn(2, 8, 10, 10)
    out, rep = convert(m, x)
    assert rows(rep) == ["depthwise+pointwise" + ("+relu" if relu else "")]
    assert {s.kf_op for s in rep.sites} == {"depthwise_pointwise"}
    same(out(x), m(x))


class Emb(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(50, 16)
        self.pos = nn.Parameter(torch.randn(8, 16))

    def forward(self, ids):
        h = self.tok(ids) + self.pos
        return F.log_softmax(h, -1), F.softmax(h * 2, dim=-1)


def test_embedding_softmax():
    m = Emb().eval()
    ids = torch.randint(0, 50, (3, 8))
    out, rep = convert(m, ids)
    assert rows(rep) == ["embedding+add", "log_softmax", "softmax"]
    for a, b in zip(out(ids), m(ids)):
        same(a, b)


class Loss(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(16, 11)

    def forward(self, h, target):
        return F.cross_entropy(self.head(h), target, label_smoothing=0.1)


def test_cross_entropy():
    m = Loss().eval()
    h, t = torch.randn(9, 16), torch.randint(0, 11, (9,))
    out, rep = convert(m, h, t)
    assert rows(rep) == ["cross_entropy", "linear"]
    same(out(h, t), m(h, t))


def test_gate_reverts_a_broken_site_by_bisection(monkeypatch):
    from kernelfusion.fusion import kernels
    real = kernels.norm

    def broken(x, weight, bias, kind, eps, act=None):  # wrong only for the RMSNorm
        y = real(x, weight, bias, kind, eps, act)
        return y * 1.01 if kind == "rms_norm" else y

    monkeypatch.setattr(kernels, "norm", broken)
    m = Norms().eval()
    x, r = torch.randn(4, 9, 32), torch.randn(4, 9, 32)
    out, rep = convert(m, x, r)
    assert rows(rep, "reverted") == ["rms_norm+silu"]
    assert rows(rep) == ["add+layer_norm", "add+rms_norm", "layer_norm+gelu"]
    assert rep.passed
    bad = next(s for s in rep.sites if s.status == "reverted")
    assert bad.rel > 5e-3  # the trial run saw it on its own
    for a, b in zip(out(x, r), m(x, r)):
        same(a, b)
    assert "reverted" in str(rep) and "rms_norm+silu" in str(rep)


def test_validation_batches_and_tolerance():
    m = LinearActs().eval()
    x = torch.randn(3, 5, 24)
    more = [((torch.randn(3, 5, 24) * 100,), {})]
    out, rep = convert(m, x, validation=more, tolerance=1e-30)  # nothing can pass: every site reverted
    assert rep.count("replaced") == 0 and rep.count("reverted") == 5
    same(out(x), m(x), 1e-12)


def test_rules_subset_and_errors():
    m = Mlps().eval()
    x = torch.randn(7, 16)
    out, rep = convert(m, x, rules=["linear"])
    assert len(rows(rep)) == 8 and all(r.startswith("linear") for r in rows(rep))
    with pytest.raises(ValueError, match="unknown rules"):
        convert(m, x, rules=["linears"])


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(32)
        self.qkv = nn.Linear(32, 96)
        self.mlp1, self.mlp2 = nn.Linear(32, 64), nn.Linear(64, 32)
        self.rms = nn.RMSNorm(32, eps=1e-6)

    def forward(self, x):
        q, k, v = self.qkv(self.ln(x)).view(x.shape[0], x.shape[1], 3, 4, 8).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(x.shape)
        h = x + a
        return self.mlp2(F.gelu(self.mlp1(self.rms(h)))) + h


def test_training_gradients():
    torch.manual_seed(1)
    m = Block().double().train()
    x = torch.randn(2, 6, 32, dtype=torch.float64)
    out, rep = convert(m, x)
    assert rep.training and rep.passed
    assert set(rows(rep)) >= {"add+rms_norm", "attention+causal", "layer_norm", "linear+gelu", "linear+residual"}
    assert "ffn" not in str(rows(rep))  # ffn has no backward kernels: its linears are converted one by one
    ref = {n: p for n, p in m.named_parameters()}
    w = torch.randn(2, 6, 32, dtype=torch.float64)
    (m(x) * w).sum().backward()
    grads = {n: p.grad.clone() for n, p in m.named_parameters()}
    for p in m.parameters():
        p.grad = None
    xg = x.clone().requires_grad_()
    (out(xg) * w).sum().backward()
    conv_params = dict(out.named_parameters())
    for name, g in grads.items():
        p = conv_params.get(name)
        assert p is ref[name], name  # the converted module trains the model's own parameters
        same(p.grad, g, 1e-9)
    assert xg.grad is not None


def test_training_keeps_convolutions():
    m = Convs().train()
    out, rep = convert(m, torch.randn(2, 3, 12, 12))
    kept = [s for s in rep.sites if s.status == "kept"]
    assert kept and all("backward" in s.reason for s in kept)


def test_report_lists_sites():
    m = Norms().eval()
    _, rep = convert(m, torch.randn(4, 9, 32), torch.randn(4, 9, 32))
    text = str(rep)
    assert text.startswith("kernelfusion.optimize: 4 replaced, 0 reverted, 0 slower, 0 kept (inference; gate passed")
    assert all(s.rel is not None and s.kf_ms is not None and s.torch_ms is not None for s in rep.sites)
    assert rep.outputs and rep.outputs[0].cosine > 0.99999


def test_vulkan_backend():
    ctx = vulkan_context()
    if ctx is None:
        pytest.skip("no Vulkan device")
    previous = kf.default_context()
    kf.set_default_context(ctx)
    try:
        m = Block().eval()
        x = torch.randn(2, 6, 32)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out, rep = convert(m, x)
        assert rep.passed and rep.count("replaced") >= 5 and rep.count("reverted") == 0
        same(out(x), m(x), 1e-4)
    finally:
        kf.set_default_context(previous)


def test_cuda_tensors_and_captured_replay():
    if not torch.cuda.is_available() or "cuda" not in kf.backends():
        pytest.skip("no CUDA GPU, or a build without the CUDA backend")
    torch.manual_seed(2)
    m = Block().cuda().half().eval()
    x = torch.randn(2, 6, 32, device="cuda", dtype=torch.float16)
    out, rep = kf.optimize(m, (x,), capture=True, speed=False)
    assert rep.passed and rep.count("replaced") >= 5 and rep.count("reverted") == 0
    # device times of both sides (CUDA graphs), and the speed gate's choice from them
    _, timed = kf.optimize(m, (x,))
    assert all(s.torch_ms > 0 and s.kf_ms > 0 for s in timed.sites)
    assert all((s.status == "slower") == (s.kf_ms > s.torch_ms * kf.fusion.convert.SLOWER) for s in timed.sites)
    assert isinstance(out, kf.fusion.Captured)
    with torch.no_grad():
        ref = m(x)
        y = out(x).clone()
        x2 = torch.randn_like(x)
        y2 = out(x2).clone()  # the same graph, new inputs copied in
        same(y, ref, 1e-2)
        same(y2, m(x2), 1e-2)
    assert len(out.graphs) == 1
