# torch CUDA tensors on kf's CUDA backend without copies (kernelfusion._cuda): data pointers shared, outputs
# allocated by torch, work on torch's current stream, values and gradients against torch. Skipped without
# a CUDA GPU and a build with the CUDA backend (-DKF_CUDA=ON).
import pytest

torch = pytest.importorskip("torch")

import kernelfusion as kf  # noqa: E402

if not torch.cuda.is_available() or "cuda" not in kf.backends():
    pytest.skip("no CUDA GPU, or kf built without its CUDA backend", allow_module_level=True)

import kernelfusion.functional as F  # noqa: E402
import kernelfusion.nn as knn  # noqa: E402
import kernelfusion.torch_ops as kt  # noqa: E402
from kernelfusion import _cuda  # noqa: E402

F_ = torch.nn.functional
DEV = torch.device("cuda", torch.cuda.current_device())
TOL = {"rtol": 1e-4, "atol": 1e-4}


def test_inputs_and_outputs_share_memory():
    x = torch.randn(1024, device=DEV)
    ctx = _cuda.context_for(DEV)
    assert ctx.backend == "cuda" and ctx.device_index == DEV.index
    t = ctx.wrap_device(x)
    assert t.device_pointer == x.data_ptr() and t.shape == (1024,) and t.dtype == "f32"
    before = x.clone()
    y = kf.ops.relu(x)
    assert y.is_cuda and y.data_ptr() != x.data_ptr()
    torch.testing.assert_close(y, torch.relu(x))
    assert torch.equal(x, before)  # inputs untouched
    out = torch.empty_like(x)
    address = out.data_ptr()
    assert kf.ops.gelu(x, out=out) is out and out.data_ptr() == address
    torch.testing.assert_close(out, F_.gelu(x), **TOL)


def test_kf_tensors_to_torch_without_copy():
    ctx = _cuda.context_for(DEV)
    t = ctx.call("relu", [ctx.wrap_device(torch.arange(-4.0, 4.0, device=DEV))])[0]
    a = t.to_torch()
    assert a.is_cuda and a.data_ptr() == t.device_pointer
    del t  # the torch tensor keeps kf's alive
    torch.testing.assert_close(a.cpu(), torch.tensor([0, 0, 0, 0, 0, 1, 2, 3.0]))


def test_runs_on_the_current_stream():
    s = torch.cuda.Stream()
    x = torch.randn(64, 256, device=DEV)
    s.wait_stream(torch.cuda.current_stream())  # x was made on the default stream
    with torch.cuda.stream(s):
        y = kt.softmax(x, scale=0.5)
        ctx = _cuda.context_for(DEV)
    assert (DEV.index, s.cuda_stream) in _cuda._contexts and ctx is _cuda.context_for(DEV, s)
    s.synchronize()
    torch.testing.assert_close(y, torch.softmax(0.5 * x, -1), **TOL)


def test_views_are_copied_and_out_views_refused():
    x = torch.randn(5, 63, device=DEV)  # rows of 252 bytes: x[1:] starts off the 256-byte alignment
    torch.testing.assert_close(kf.ops.relu(x[1:]), torch.relu(x[1:]))     # unaligned: cloned first
    torch.testing.assert_close(kf.ops.relu(x.t()), torch.relu(x.t()).contiguous())  # strided: made contiguous
    out = torch.empty(5, 63, device=DEV)
    with pytest.raises(ValueError, match="in place"):
        kf.ops.relu(x[1:], out=out[1:])


def test_errors_leave_outputs_untouched():
    out = torch.full((4, 8), 7.0, device=DEV)
    with pytest.raises(kf.ShapeError, match="add_relu"):
        kf.ops.add_relu(torch.zeros(4, 8, device=DEV), torch.zeros(7, device=DEV), out=out)
    assert torch.all(out == 7)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_ops_against_torch(dtype):
    tol = TOL if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    x, W, b = (torch.randn(s, device=DEV, dtype=dtype) for s in ((8, 64), (32, 64), (32,)))
    torch.testing.assert_close(F.linear(x, W, b, act="gelu"), F_.gelu(F_.linear(x, W, b)), **tol)
    w = torch.randn(64, device=DEV, dtype=dtype)
    torch.testing.assert_close(F.layer_norm(x, w), F_.layer_norm(x, (64,), w), **tol)
    q, k, v = (torch.randn(2, 4, 16, 64, device=DEV, dtype=dtype) for _ in range(3))
    torch.testing.assert_close(F.attention(q, k, v, causal=True),
                               F_.scaled_dot_product_attention(q, k, v, is_causal=True), **tol)
    target = torch.randint(0, 32, (8,), device=DEV)
    logits = torch.randn(8, 32, device=DEV, dtype=dtype)
    torch.testing.assert_close(F.cross_entropy(logits, target), F_.cross_entropy(logits.float(), target).to(dtype),
                               **tol)


def test_autograd_against_torch():
    x = torch.randn(4, 16, 64, device=DEV)
    W, w = torch.randn(96, 64, device=DEV) * 0.1, torch.randn(64, device=DEV)
    ours = [t.clone().requires_grad_() for t in (x, W, w)]
    ref = [t.clone().requires_grad_() for t in (x, W, w)]
    kt.linear(kt.rms_norm(ours[0], ours[2], eps=1e-6), ours[1], act="silu").pow(2).mean().backward()
    F_.silu(F_.linear(F_.rms_norm(ref[0], (64,), ref[2], eps=1e-6), ref[1])).pow(2).mean().backward()
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a.grad, b.grad, **TOL)
    q, k, v = (torch.randn(1, 4, 32, 64, device=DEV, requires_grad=True) for _ in range(3))
    kt.attention(q, k, v, causal=True).sum().backward()
    q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    F_.scaled_dot_product_attention(q2, k2, v2, is_causal=True).sum().backward()
    for a, b in ((q, q2), (k, k2), (v, v2)):
        torch.testing.assert_close(a.grad, b.grad, **TOL)


def test_adamw_in_place_on_the_gpu():
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 32, device=DEV)
    twin = torch.nn.Linear(64, 32, device=DEV)
    twin.load_state_dict(model.state_dict())
    addresses = [p.data_ptr() for p in model.parameters()]
    ours, ref = knn.AdamW(model.parameters(), lr=1e-2), torch.optim.AdamW(twin.parameters(), lr=1e-2)
    x = torch.randn(16, 64, device=DEV)
    for _ in range(3):
        for m, opt in ((model, ours), (twin, ref)):
            opt.zero_grad()
            m(x).pow(2).mean().backward()
            opt.step()
    assert [p.data_ptr() for p in model.parameters()] == addresses
    for a, b in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(a, b, **TOL)


def test_compile_fullgraph_on_cuda():
    f = torch.compile(lambda x, b: kt.softmax(kt.add_relu(x, b), scale=0.5), fullgraph=True, backend="aot_eager")
    x, b = torch.randn(8, 128, device=DEV), torch.randn(128, device=DEV)
    torch.testing.assert_close(f(x, b), torch.softmax(0.5 * torch.relu(x + b), -1), **TOL)
