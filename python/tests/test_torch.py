# The PyTorch operators (kernelfusion.torch_ops): values against torch, autograd through kf's backward ops
# (gradcheck in float64 on the CPU backend), and torch.compile(fullgraph=True) tracing through them.
import pytest

torch = pytest.importorskip("torch")

import kernelfusion as kf  # noqa: E402



TORCH_ACTS = {
    "relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
    "gelu": torch.nn.functional.gelu, "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
    "silu": torch.nn.functional.silu, "mish": torch.nn.functional.mish,
}


def test_every_op_registered(kt):
    for name in kf.ops.names():
        assert hasattr(torch.ops.kernelfusion, name) and callable(getattr(kt, name))


@pytest.mark.parametrize("act", sorted(TORCH_ACTS))
def test_activation_values_and_grad(kt, act):
    x = torch.randn(3, 17, dtype=torch.float64)
    if act == "relu":
        x = x + 0.01 * torch.sign(x)  # away from the kink, where finite differences are wrong
    x.requires_grad_()
    torch.testing.assert_close(getattr(kt, act)(x), TORCH_ACTS[act](x))
    assert torch.autograd.gradcheck(getattr(kt, act), (x,))


def test_softmax_grad(kt):
    x = torch.randn(4, 9, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(kt.softmax(x, scale=0.7), torch.softmax(0.7 * x, -1))
    assert torch.autograd.gradcheck(lambda t: kt.softmax(t, scale=0.7), (x,))


def test_grad_matches_torch_in_f32(kt):
    x = torch.randn(8, 32, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    kt.softmax(kt.gelu(x)).pow(2).sum().backward()
    torch.softmax(torch.nn.functional.gelu(x2), -1).pow(2).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)


def test_fake_kernels_give_shapes(kt):
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        a = torch.empty(6, 5)
        b = torch.empty(5, 3)
        y = kt.matmul(a, b)
        assert y.shape == (6, 3) and y.dtype == torch.float32
        s = kt.sum_squared(a)
        assert s.shape == (6,)


def test_compile_fullgraph(kt):
    def f(x, b):
        return kt.softmax(kt.add_relu(x, b), scale=0.5) * 2

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    x, b = torch.randn(4, 16), torch.randn(16)
    torch.testing.assert_close(compiled(x, b), torch.softmax(0.5 * torch.relu(x + b), -1) * 2)


def test_errors_through_torch(kt):
    with pytest.raises(kf.ShapeError, match="add_relu"):
        kt.add_relu(torch.zeros(4, 8), torch.zeros(7))
