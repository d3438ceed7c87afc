# Autograd of the PyTorch operators from kf's backward kernels (kernelfusion._autograd): gradcheck in float64
# on the CPU backend for every differentiable op, a comparison with torch's own autograd in float32, and
# torch.compile(fullgraph=True) tracing forward and backward through them. Small shapes keep it fast.
import pytest

torch = pytest.importorskip("torch")

import kernelfusion as kf  # noqa: E402

F_ = torch.nn.functional



def r(*shape, grad=True, away=False):
    t = torch.randn(*shape, dtype=torch.float64)
    if away:  # away from relu's kink, where finite differences are wrong
        t = t + 0.05 * torch.sign(t)
    return t.requires_grad_(grad)


def check(f, *inputs):
    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-6)


def test_dropout_family_keeps_its_mask(kt):
    x, b, res = r(4, 8), r(8), r(4, 8)
    check(lambda t: kt.dropout(t, p=0.4, seed=7, offset=3), x)
    check(lambda t: kt.gelu_dropout(t, p=0.3, seed=1), x)
    check(lambda t, c: kt.bias_gelu_dropout(t, c, p=0.3, seed=2), x, b)
    check(lambda t, u: kt.add_dropout_residual(t, u, p=0.5, seed=9), x, res)
    y = kt.dropout(x, p=0.5, seed=5)
    y.sum().backward()
    torch.testing.assert_close(x.grad, (y != 0).double() * 2)


@pytest.mark.parametrize("name", ["bias_relu", "bias_gelu", "bias_gelu_tanh", "bias_silu", "add_relu"])
def test_bias_activations(kt, name):
    check(getattr(kt, name), r(3, 6, away=True), r(6, away=True))


def test_glu_log_softmax_embedding(kt):
    check(kt.swiglu, r(3, 8))
    check(kt.swiglu, r(3, 4), r(3, 4))
    check(kt.geglu, r(2, 6))
    check(lambda t: kt.log_softmax(t, scale=0.7), r(3, 5))
    tokens = torch.tensor([[1, 4, 1], [0, 2, 4]], dtype=torch.int32)
    check(lambda tab, pos: kt.embedding(tokens, tab, pos), r(5, 3), r(4, 3))


@pytest.mark.parametrize("name", ["layer_norm", "layer_norm_relu", "layer_norm_gelu", "layer_norm_silu"])
def test_layer_norms(kt, name):
    check(lambda x, w, b: getattr(kt, name)(x, w, b, eps=1e-3), r(3, 8), r(8), r(8))
    check(lambda x: getattr(kt, name)(x), r(2, 8))


@pytest.mark.parametrize("name", ["rms_norm", "rms_norm_gelu", "rms_norm_silu"])
def test_rms_norms(kt, name):
    check(lambda x, w: getattr(kt, name)(x, w), r(3, 8), r(8))


def test_add_norms(kt):
    check(lambda x, y, w, b: kt.add_layer_norm(x, y, w, b), r(2, 8), r(2, 8), r(8), r(8))
    check(lambda x, y, w: kt.add_rms_norm(x, y, w), r(2, 8), r(2, 8), r(8))


@pytest.mark.parametrize("opts", [{}, {"causal": True, "attn_scale": 0.3}, {"window": 2, "softcap": 3.0, "rope": 1},
                                  {"p": 0.3, "seed": 4}])
def test_attention(kt, opts):
    q, k, v = r(1, 2, 3, 8), r(1, 1, 4, 8), r(1, 1, 4, 8)  # grouped-query: 2 query heads share a kv head
    check(lambda a, b, c: kt.attention(a, b, c, **opts), q, k, v)


def test_attention_lse_from_the_forward(kt):
    q, k, v = r(1, 2, 3, 8), r(1, 2, 3, 8), r(1, 2, 3, 8)
    o = kt.attention(q, k, v, causal=True)
    assert isinstance(o, torch.Tensor)  # lse was made for the backward and left out
    o.sum().backward()
    q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    torch.ops.kernelfusion.attention(q2, k2, v2, causal=True)[0].sum().backward()  # lse recomputed
    torch.testing.assert_close(q.grad, q2.grad)
    o3 = F_.scaled_dot_product_attention(q2.detach().requires_grad_(), k, v, is_causal=True)
    torch.testing.assert_close(o.detach(), o3.detach())


def test_losses(kt):
    target = torch.tensor([0, 3, -100, 2], dtype=torch.int32)
    check(lambda x: kt.cross_entropy(x, target, label_smoothing=0.1), r(4, 5))
    check(lambda h, w: kt.linear_cross_entropy(h, w, target, z_loss=1e-2, softcap=3.0), r(4, 6), r(5, 6))
    check(kt.mse, r(3, 4), r(3, 4))


@pytest.mark.parametrize("act", [0, 1, 2, 3, 4])
def test_linear(kt, act):
    check(lambda x, w, b, res: kt.linear(x, w, b, res, act=act), r(2, 3, 5, away=True), r(4, 5), r(4), r(2, 3, 4))
    check(lambda x, w: kt.linear(x, w), r(3, 5), r(2, 5))


def test_linear_dropout(kt):
    check(lambda x, w, b: kt.linear_dropout(x, w, b, act="gelu", p=0.25, seed=3), r(3, 5), r(4, 5), r(4))


def test_matmul(kt):
    check(lambda a, b, c, res: kt.matmul(a, b, c, res, act="silu"), r(2, 3, 4), r(2, 4, 5), r(5), r(2, 3, 5))
    check(lambda a, b: kt.matmul(a, b), r(2, 3, 4), r(4, 5))


def test_matches_torch_in_f32(kt):
    torch.manual_seed(0)
    x = torch.randn(4, 6, 16)
    W, b, w_ln = torch.randn(32, 16) * 0.2, torch.randn(32), torch.randn(16)
    target = torch.randint(0, 32, (24,))
    ours = [t.clone().requires_grad_() for t in (x, W, b, w_ln)]
    ref = [t.clone().requires_grad_() for t in (x, W, b, w_ln)]

    def loss(x, W, b, w_ln, ln, lin, xent):
        return xent(lin(ln(x, w_ln), W, b).reshape(-1, 32), target)

    loss(*ours, lambda t, w: kt.layer_norm(t, w), lambda t, w, c: kt.linear(t, w, c, act="gelu"),
         lambda z, t: kt.cross_entropy(z, t.int())).backward()
    loss(*ref, lambda t, w: F_.layer_norm(t, (16,), w), lambda t, w, c: F_.gelu(F_.linear(t, w, c)),
         F_.cross_entropy).backward()
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)


def test_compile_fullgraph_forward_and_backward(kt):
    def f(x, W, w_ln, q):
        h = kt.linear(kt.rms_norm(x, w_ln), W, act="silu")
        o = kt.attention(q, q, q, causal=True)
        return h.pow(2).mean() + o.pow(2).mean()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    args = [torch.randn(3, 8), torch.randn(4, 8), torch.randn(8), torch.randn(1, 2, 4, 8)]
    a1 = [t.clone().requires_grad_() for t in args]
    a2 = [t.clone().requires_grad_() for t in args]
    f(*a1).backward()
    compiled(*a2).backward()
    for a, b in zip(a1, a2):
        torch.testing.assert_close(a.grad, b.grad)


def test_saved_outputs_make_no_reference_cycle(kt):
    import gc
    import weakref
    x = torch.randn(4, 8, requires_grad=True)
    gc.disable()
    try:
        for f in (lambda t: kt.softmax(t), lambda t: kt.add_layer_norm(t, t)[1]):
            y = f(x)
            ref = weakref.ref(y)
            del y
            assert ref() is None  # freed by reference counting, without the garbage collector
    finally:
        gc.enable()


def test_the_operators_own_autograd(kt):
    """torch.ops.kernelfusion.<op> (what torch.compile traces) has the same formulas registered on the
    operator itself; kt.<op> outside compilation runs them without the dispatcher."""
    ops = torch.ops.kernelfusion
    target = torch.tensor([1, 0, 2], dtype=torch.int32)
    check(lambda x, w, b: ops.layer_norm(x, w, b), r(3, 8), r(8), r(8))
    check(lambda x, w, b: ops.linear(x, w, b, act=2), r(3, 5), r(4, 5), r(4))
    check(lambda x: ops.cross_entropy(x, target), r(3, 4))
    check(lambda x: ops.dropout(x, p=0.5, seed=3), r(3, 4))
    check(lambda x: ops.swiglu(x), r(2, 6))
    x = r(2, 8)
    assert type(kt.softmax(x).grad_fn).__name__ != type(ops.softmax(x).grad_fn).__name__  # two paths, one formula

