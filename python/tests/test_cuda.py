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


# ---- the C++ fast path (_kf.fast_call) on CUDA tensors: what kernelfusion.ops and torch_ops call first ----

def _fast(name, inputs, out=None, attrs=None, grad=False):
    from kernelfusion import ops
    return kf._kf.fast_call(ops.defs[name]["id"], inputs, out, attrs, None, grad)


def test_fast_path_takes_cuda_tensors():
    from kernelfusion import ops
    x, b = torch.randn(64, 256, device=DEV), torch.randn(256, device=DEV)
    for name, inputs, attrs in [("relu", (x,), None), ("bias_gelu", (x, b), None), ("softmax", (x,), {"scale": 0.5}),
                                ("sum_squared", (x,), None)]:
        got = _fast(name, inputs, attrs=attrs)
        assert got is not NotImplemented and got.is_cuda and got.device == DEV
        want = ops._generic(name, list(inputs), attrs, None, None)
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    xb = x.to(torch.bfloat16)
    y = _fast("relu", (xb,))
    assert y.dtype == torch.bfloat16 and torch.equal(y, torch.relu(xb))


def test_fast_path_zero_copy_and_stream_order():
    x = torch.randn(1 << 20, device=DEV)
    before = x.clone()
    out = torch.empty_like(x)
    address = out.data_ptr()
    assert _fast("gelu", (x,), out=out) is out and out.data_ptr() == address
    torch.testing.assert_close(out, F_.gelu(x), **TOL)
    assert torch.equal(x, before)
    # the result is torch's (its caching allocator), written in place, and ordered with torch's later work
    y = kf.ops.relu(x)
    z = y * 2  # torch's kernel on the same stream reads what kf wrote, without a synchronize
    torch.testing.assert_close(z, 2 * torch.relu(x))


def test_fast_path_context_of_the_current_stream():
    x = torch.randn(32, 64, device=DEV)
    kf.ops.relu(x)
    legacy = torch.cuda.current_stream(DEV).cuda_stream
    assert (DEV.index, legacy) in _cuda._contexts
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = kf.ops.softmax(x)
        z = kt.relu(x)
    assert (DEV.index, s.cuda_stream) in _cuda._contexts
    s.synchronize()
    torch.testing.assert_close(y, torch.softmax(x, -1), **TOL)
    torch.testing.assert_close(z, torch.relu(x))


def test_fast_path_copies_misaligned_inputs_and_refuses_bad_out():
    base = torch.randn(1025, device=DEV)
    v = base[1:]  # 4 bytes past a 256-byte boundary
    torch.testing.assert_close(_fast("relu", (v,)), torch.relu(v))
    t = torch.randn(16, 8, device=DEV).t()  # not contiguous
    torch.testing.assert_close(kf.ops.relu(t), torch.relu(t))
    # out= that kf cannot write in place: left to the generic path, which raises as before
    assert _fast("relu", (v,), out=torch.empty(1025, device=DEV)[1:]) is NotImplemented
    with pytest.raises(ValueError, match="in place"):
        kf.ops.relu(v, out=torch.empty(1025, device=DEV)[1:])


def test_fast_path_errors_unchanged():
    x = torch.randn(8, device=DEV)
    with pytest.raises(ValueError, match="mix CUDA tensors"):
        kf.ops.add(x, torch.randn(8))
    with pytest.raises(kf.DTypeError):
        kf.ops.add(x, x.to(torch.float16))
    with pytest.raises(kf.ShapeError, match="output 'y' has shape"):
        kf.ops.relu(x, out=torch.empty(9, device=DEV))
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        kf.ops.relu(x, bogus=1)
    with pytest.raises(kf.DTypeError, match="no kf dtype"):
        kf.ops.relu(torch.zeros(8, dtype=torch.int64, device=DEV))
    torch.testing.assert_close(kf.ops.relu(x), torch.relu(x))  # the context still runs


def test_fast_path_leaves_autograd_to_torch_ops():
    x = torch.randn(8, 32, device=DEV, requires_grad=True)
    assert _fast("relu", (x,), grad=True) is NotImplemented
    y = kt.relu(x)
    y.sum().backward()
    torch.testing.assert_close(x.grad, (x > 0).float())
