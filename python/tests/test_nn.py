# The nn.Module wrappers (kernelfusion.nn) against torch's own modules on the CPU backend, in float32 with
# the same weights: outputs, gradients, and AdamW's parameters over a few steps.
import pytest

torch = pytest.importorskip("torch")

import kernelfusion as kf  # noqa: E402

F_ = torch.nn.functional
TOL = {"rtol": 1e-4, "atol": 1e-5}



def grads_match(ours, ref, inputs, f_ours, f_ref):
    x1 = inputs.clone().requires_grad_()
    x2 = inputs.clone().requires_grad_()
    y1, y2 = f_ours(x1), f_ref(x2)
    torch.testing.assert_close(y1, y2, **TOL)
    g = torch.randn_like(y1)
    y1.backward(g)
    y2.backward(g)
    torch.testing.assert_close(x1.grad, x2.grad, **TOL)
    for (n, a), (_, b) in zip(ours.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(a.grad, b.grad, **TOL, msg=n)


@pytest.mark.parametrize("act", [None, "relu", "gelu", "silu"])
def test_fused_linear(knn, act):
    torch.manual_seed(1)
    ours = knn.FusedLinear(12, 7, act=act)
    ref = torch.nn.Linear(12, 7)
    ref.load_state_dict(ours.state_dict())
    f = {None: lambda t: t, "relu": F_.relu, "gelu": F_.gelu, "silu": F_.silu}[act]
    grads_match(ours, ref, torch.randn(3, 5, 12), ours, lambda t: f(ref(t)))


def test_fused_linear_dropout_in_training_only(knn):
    m = knn.FusedLinear(8, 8, bias=False, dropout=0.5)
    x = torch.randn(4, 8)
    y = m(x)
    assert 0 < (y == 0).sum() < y.numel()
    m.eval()
    torch.testing.assert_close(m(x), x @ m.weight.T)


@pytest.mark.parametrize("act", [None, "relu", "gelu", "silu"])
def test_layer_norm_act(knn, act):
    ours = knn.LayerNormAct(16, act=act)
    ref = torch.nn.LayerNorm(16)
    with torch.no_grad():
        ours.weight.normal_()
        ours.bias.normal_()
    ref.load_state_dict(ours.state_dict())
    f = {None: lambda t: t, "relu": F_.relu, "gelu": F_.gelu, "silu": F_.silu}[act]
    grads_match(ours, ref, torch.randn(2, 3, 16), ours, lambda t: f(ref(t)))


def test_rms_norm(knn):
    ours = knn.RMSNorm(16, eps=1e-6)
    ref = torch.nn.RMSNorm(16, eps=1e-6)
    with torch.no_grad():
        ours.weight.normal_()
    ref.load_state_dict(ours.state_dict())
    grads_match(ours, ref, torch.randn(4, 16), ours, ref)
    torch.testing.assert_close(knn.RMSNorm(8)(torch.ones(2, 8)), torch.nn.RMSNorm(8)(torch.ones(2, 8)))


def test_swiglu_mlp(knn):
    ours = knn.SwiGLUMLP(16, 24, out=8)
    ref = torch.nn.ModuleDict({"up": torch.nn.Linear(16, 24, bias=False), "gate": torch.nn.Linear(16, 24, bias=False),
                               "down": torch.nn.Linear(24, 8, bias=False)})
    with torch.no_grad():
        ref.up.weight.copy_(ours.gate_up.weight[:24])
        ref.gate.weight.copy_(ours.gate_up.weight[24:])
        ref.down.weight.copy_(ours.down.weight)
    x1 = torch.randn(3, 16, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_()
    y1 = ours(x1)
    y2 = ref.down(ref.up(x2) * F_.silu(ref.gate(x2)))
    torch.testing.assert_close(y1, y2, **TOL)
    y1.sum().backward()
    y2.sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, **TOL)
    torch.testing.assert_close(ours.gate_up.weight.grad, torch.cat([ref.up.weight.grad, ref.gate.weight.grad]), **TOL)


@pytest.mark.parametrize("kv_heads,causal", [(4, False), (2, True)])
def test_attention(knn, kv_heads, causal):
    torch.manual_seed(3)
    E, H, D = 32, 4, 8
    ours = knn.Attention(E, H, num_kv_heads=kv_heads, bias=True, causal=causal)

    def ref(x):
        B, S, _ = x.shape
        qkv = F_.linear(x, ours.qkv.weight, ours.qkv.bias).view(B, S, H + 2 * kv_heads, D).transpose(1, 2)
        q, k, v = qkv.split([H, kv_heads, kv_heads], dim=1)
        o = F_.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        return F_.linear(o.transpose(1, 2).reshape(B, S, E), ours.out.weight, ours.out.bias)

    x1 = torch.randn(2, 5, E, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_()
    y1 = ours(x1)
    torch.testing.assert_close(y1, ref(x2), **TOL)
    w_grads = []
    for x, f in ((x1, ours), (x2, ref)):
        ours.zero_grad()
        f(x).pow(2).sum().backward()
        w_grads.append([p.grad.clone() for p in ours.parameters()])
    torch.testing.assert_close(x1.grad, x2.grad, **TOL)
    for a, b in zip(*w_grads):
        torch.testing.assert_close(a, b, **TOL)


def test_attention_options(knn):
    m = knn.Attention(16, 2, rope="half", window=3, softcap=20.0, alibi=True)
    y = m(torch.randn(1, 6, 16), key_lengths=torch.tensor([4]))
    assert y.shape == (1, 6, 16) and torch.isfinite(y).all()


def test_adamw_matches_torch(knn):
    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.Tanh(), torch.nn.Linear(6, 3))
    twin = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.Tanh(), torch.nn.Linear(6, 3))
    twin.load_state_dict(model.state_dict())
    ours = knn.AdamW(model.parameters(), lr=1e-2, betas=(0.8, 0.95), weight_decay=0.1)
    ref = torch.optim.AdamW(twin.parameters(), lr=1e-2, betas=(0.8, 0.95), weight_decay=0.1)
    x, y = torch.randn(10, 8), torch.randn(10, 3)
    for _ in range(4):
        for m, opt in ((model, ours), (twin, ref)):
            opt.zero_grad()
            F_.mse_loss(m(x), y).backward()
            opt.step()
    for a, b in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError):
        knn.AdamW(model.parameters(), lr=-1)
