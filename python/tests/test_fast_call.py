# The per-call C++ path of kernelfusion.ops (_kf.fast_call, python/src/fast_call.cpp) against the generic
# Python path it stands in for (ops._generic): the same results, the zero-copy contract, the same errors,
# and NotImplemented (nothing run) for what it leaves to the generic path. CPU backend; CUDA tensors are
# in test_cuda.py.
import numpy as np
import pytest

import kernelfusion as kf
from kernelfusion import _kf, ops

torch = pytest.importorskip("torch")


def ident(name):
    return ops.defs[name]["id"]


def fast(name, inputs, out=None, attrs=None, context=None, grad=False):
    return _kf.fast_call(ident(name), inputs, out, attrs, context, grad)


def test_ids_are_the_core_op_ids():
    ids = [op["id"] for op in ops.defs.values()]
    assert sorted(ids) == list(range(len(ids)))
    with pytest.raises(IndexError):
        _kf.fast_call(len(ids), (np.zeros(4, np.float32),), None, None, None, False)


CASES = [("relu", [(4, 37)], None), ("add_relu", [(3, 64), (3, 64)], None), ("softmax", [(5, 33)], {"scale": 0.5}),
         ("layer_norm", [(6, 48), (48,), (48,)], {"eps": 1e-5}), ("linear", [(7, 16), (24, 16), (24,)], None),
         ("bias_gelu", [(4, 32), (32,)], None), ("cross_entropy", None, None)]


def case_inputs(name, shapes, rng):
    if name == "cross_entropy":
        return [rng.standard_normal((6, 11)), rng.integers(0, 11, 6).astype(np.int32)]
    return [rng.standard_normal(s) for s in shapes]


@pytest.mark.parametrize("name,shapes,attrs", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_same_results_as_generic(cpu, name, shapes, attrs, kind, dtype):
    rng = np.random.default_rng(3)
    xs = [a if a.dtype == np.int32 else a.astype(np.float32 if dtype == "f32" else np.float64)
          for a in case_inputs(name, shapes, rng)]
    if kind == "torch":
        xs = [torch.from_numpy(a) for a in xs]
    got = fast(name, xs, attrs=attrs, context=cpu)
    assert got is not NotImplemented
    want = ops._generic(name, xs, attrs, None, cpu)
    got, want = (got if isinstance(got, tuple) else (got,)), (want if isinstance(want, tuple) else (want,))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert type(g) is type(w) and g.dtype == w.dtype and tuple(g.shape) == tuple(w.shape)
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    # and through the public functions, with the attributes as keywords
    r = getattr(kf.ops, name)(*xs, context=cpu, **(attrs or {}))
    r = r if isinstance(r, tuple) else (r,)
    for g, w in zip(r, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def test_default_context_is_used(cpu_default):
    x = torch.randn(8, 16)
    torch.testing.assert_close(fast("relu", (x,)), torch.relu(x))
    torch.testing.assert_close(kf.ops.relu(x), torch.relu(x))


def test_out_written_in_place_and_inputs_shared(cpu):
    x = torch.randn(16, 40)
    before = x.clone()
    out = torch.empty_like(x)
    ptr = out.data_ptr()
    assert fast("softmax", (x,), out=out, context=cpu) is out and out.data_ptr() == ptr
    assert torch.equal(x, before)
    torch.testing.assert_close(out, torch.softmax(x, -1))
    n = np.empty((16, 40), np.float32)
    address = n.ctypes.data
    assert kf.ops.relu(x.numpy(), out=n, context=cpu) is n and n.ctypes.data == address
    np.testing.assert_array_equal(n, np.maximum(x.numpy(), 0))
    # several outputs as a tuple
    xe, t = torch.randn(6, 11), torch.randint(0, 11, (6,), dtype=torch.int32)
    want = ops._generic("cross_entropy", [xe, t], None, None, cpu)
    got = (torch.empty_like(want[0]), torch.empty_like(want[1])) if isinstance(want, tuple) else torch.empty_like(want)
    assert kf.ops.cross_entropy(xe, t, out=got, context=cpu) is got


def test_results_are_written_not_copied(cpu):
    # an output whose shape and dtype are an input's is allocated like it (torch.empty_like), else new_empty
    x = torch.randn(5, 64)
    y = kf.ops.relu(x, context=cpu)
    assert y.is_contiguous() and y.data_ptr() != x.data_ptr() and not y.requires_grad
    s = kf.ops.sum_squared(x, context=cpu)
    assert s.dtype == x.dtype
    torch.testing.assert_close(s, (x.double() ** 2).sum(-1).float() if s.dim() else (x.double() ** 2).sum().float())


TORCH_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32]


def test_outputs_made_in_cpp_and_without(cpu):
    # torch's outputs come from its C functions (aoti_torch_empty_strided) where they pass the check at
    # set-up, else from torch.empty_like; both give the same tensors.
    import os
    assert ops.torch_outputs.startswith("made in C++"), ops.torch_outputs
    lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    x = torch.randn(3, 5, 7)
    results = []
    try:
        for where in (lib, "/nonexistent"):
            why = _kf.fast_setup_alloc(where, torch.Tensor, TORCH_DTYPES)
            assert (why == "") == (where == lib), why
            for dt in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
                y = kf.ops.relu(x.to(dt), context=cpu)
                assert type(y) is torch.Tensor and y.dtype == dt and y.device == x.device and y.shape == x.shape
                assert y.is_contiguous() and y.stride() == (35, 7, 1) and not y.requires_grad
                results.append(y)
            s = kf.ops.sum_squared(x, context=cpu)  # an output shaped like no input (new_empty without)
            assert s.dtype == torch.float32 and s.shape == x.shape[:-1] and s.is_contiguous()
            results.append(s)
    finally:
        assert _kf.fast_setup_alloc(lib, torch.Tensor, TORCH_DTYPES) == ""
    for a, b in zip(results[:5], results[5:]):
        assert torch.equal(a, b)
    assert kf.ops.relu(torch.randn(0, 4), context=cpu).shape == (0, 4)  # an empty tensor
    # the switch bench/python_overhead.py measures with
    assert _kf.fast_cpp_outputs(False) is True
    assert torch.equal(kf.ops.relu(x, context=cpu), results[0])
    assert _kf.fast_cpp_outputs(True) is False and _kf.fast_cpp_outputs(True) is True


@pytest.mark.parametrize("reads", ["cpp", "python"])
def test_tensors_read_in_cpp_and_through_python(cpu, reads):
    # fast_call reads torch tensors with torch's accessors where it found the object's layout at set-up
    # (kf.ops.torch_reads), else through their Python attributes: the same results either way, on views with
    # an offset, transposed and broadcast (stride 0) views, empty tensors and Parameters.
    assert ops.torch_reads.startswith("in C++"), ops.torch_reads
    was = _kf.fast_cpp_reads(reads == "cpp")
    try:
        base = torch.randn(10, 12)
        cases = [base[3:7], base.t(), base[:, 5:], base[2].expand(4, 12), torch.nn.Parameter(base.clone()),
                 base[::2], torch.randn(0, 5), torch.randn(1, 1, 7)[:, :, 2:]]
        for x in cases:
            want = torch.relu(x.detach())
            got = kf.ops.relu(x.detach() if isinstance(x, torch.nn.Parameter) else x, context=cpu)
            assert got.shape == x.shape and got.is_contiguous() and torch.equal(got, want)
        p = torch.nn.Parameter(torch.randn(3, 4))
        with torch.no_grad():
            torch.testing.assert_close(kf.ops.softmax(p, context=cpu), torch.softmax(p, -1))
        # out= read the same way: a strided or offset out= is left to the generic path, which copies
        out = torch.zeros(5, 12)
        assert kf.ops.relu(base[:5], out=out, context=cpu) is out and torch.equal(out, torch.relu(base[:5]))
        big = torch.zeros(6, 12)
        assert fast("relu", (base[:5],), out=big[1:], context=cpu) is not NotImplemented
        assert torch.equal(big[1:], torch.relu(base[:5])) and torch.equal(big[0], torch.zeros(12))
        assert fast("relu", (base[:5],), out=torch.zeros(12, 5).t(), context=cpu) is NotImplemented
        # tensors kf cannot read stay with the generic path, which raises as before
        assert fast("relu", (torch.zeros(8, dtype=torch.int64),), context=cpu) is NotImplemented
        assert fast("relu", (torch.zeros(8, device="meta"),), context=cpu) is NotImplemented
        with pytest.raises(kf.DTypeError, match="no kf dtype"):
            kf.ops.relu(torch.zeros(8, dtype=torch.int64), context=cpu)
    finally:
        _kf.fast_cpp_reads(was)


def test_non_contiguous_inputs_are_copied(cpu):
    x = (torch.arange(64, dtype=torch.float32) - 30).reshape(8, 8)[:, ::2]
    assert not x.is_contiguous()
    torch.testing.assert_close(fast("relu", (x,), context=cpu), torch.relu(x))
    n = (np.arange(64, dtype=np.float32) - 30).reshape(8, 8)[:, ::2]
    np.testing.assert_array_equal(fast("relu", (n,), context=cpu), np.maximum(n, 0))
    # views with an offset are used in place on the CPU (no alignment needed there)
    v = torch.randn(100)[3:67]
    torch.testing.assert_close(kf.ops.relu(v, context=cpu), torch.relu(v))


def test_requires_grad_inputs(cpu):
    x = torch.randn(8, requires_grad=True)
    # kernelfusion.ops records no autograd: the value, detached
    y = kf.ops.relu(x, context=cpu)
    assert not y.requires_grad and torch.equal(y, torch.relu(x.detach()))
    # grad=True (torch_ops) leaves a tensor that requires grad to the generic path
    assert fast("relu", (x,), context=cpu, grad=True) is NotImplemented
    with torch.no_grad():
        assert fast("relu", (x,), context=cpu, grad=False) is not NotImplemented


def test_left_to_the_generic_path(cpu):
    x = np.zeros(8, np.float32)
    # kf tensors, lists, unknown dtypes, NumPy bf16 results, read-only or non-contiguous out=
    assert fast("relu", (cpu.wrap(x),), context=cpu) is NotImplemented
    assert fast("relu", ([0.0, 1.0],), context=cpu) is NotImplemented
    assert fast("relu", (np.zeros(8, np.int64),), context=cpu) is NotImplemented
    assert fast("relu", (torch.zeros(8, dtype=torch.int64),), context=cpu) is NotImplemented
    assert fast("linear", (np.zeros((2, 4), np.float32), np.zeros((3, 4), np.float32)), attrs={"out_dtype": "bf16"},
                context=cpu) is NotImplemented
    ro = np.zeros(8, np.float32)
    ro.flags.writeable = False
    assert fast("relu", (x,), out=ro, context=cpu) is NotImplemented
    t = torch.zeros(8, 2)
    assert fast("relu", (torch.zeros(2, 8),), out=t.t(), context=cpu) is NotImplemented
    # a tensor subclass
    class Sub(torch.Tensor):
        pass
    assert fast("relu", (torch.zeros(8).as_subclass(Sub),), context=cpu) is NotImplemented
    # a context of another backend than the CPU
    vk = kf.Context(backend="vulkan") if "vulkan" in kf.backends() else None
    if vk is not None and vk.backend == "vulkan":  # (KF_BACKEND=cpu in the environment makes it the CPU's)
        assert fast("relu", (x,), context=vk) is NotImplemented


def test_errors_unchanged(cpu):
    x = np.zeros(8, np.float32)
    with pytest.raises(kf.DTypeError, match="no kf dtype"):
        kf.ops.relu(np.zeros(8, np.int64), context=cpu)
    with pytest.raises(kf.DTypeError, match="no kf dtype"):
        kf.ops.relu(torch.zeros(8, dtype=torch.int64), context=cpu)
    with pytest.raises(kf.DTypeError):
        kf.ops.add(np.zeros(8, np.float32), np.zeros(8, np.float64), context=cpu)
    with pytest.raises(kf.DTypeError):
        kf.ops.add(torch.zeros(8), torch.zeros(8, dtype=torch.float16), context=cpu)
    with pytest.raises(kf.ShapeError, match="output 'y' has shape"):
        kf.ops.relu(x, out=np.zeros(9, np.float32), context=cpu)
    with pytest.raises(kf.ShapeError, match="output 'y' has shape"):
        kf.ops.relu(torch.zeros(8), out=torch.zeros(4, 2), context=cpu)
    with pytest.raises(kf.DTypeError, match="output 'y' has dtype"):
        kf.ops.relu(torch.zeros(8), out=torch.zeros(8, dtype=torch.float64), context=cpu)
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        kf.ops.relu(x, bogus=1, context=cpu)
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        kf.ops.relu(torch.zeros(8), bogus=1, context=cpu)
    with pytest.raises(kf.ShapeError):
        kf.ops.add(torch.zeros(8), torch.zeros(7), context=cpu)
    with pytest.raises(kf.InvalidArgumentError, match="'p'"):
        kf.ops.dropout(torch.zeros(8), p=1.5, seed=1, context=cpu)
    with pytest.raises(kf.Error, match="add_relu"):
        kf.ops.add_relu(torch.zeros(8), context=cpu)
    with pytest.raises(kf.InvalidArgumentError, match="same tensor as|shares memory"):
        t = torch.zeros(8)
        kf.ops.relu(t, out=t, context=cpu)
    with pytest.raises(kf.DTypeError, match="NumPy has no bf16"):
        kf.ops.linear(np.zeros((2, 4), np.float32), np.zeros((3, 4), np.float32), out_dtype="bf16", context=cpu)
    # the failed calls left nothing behind: the context still runs
    np.testing.assert_array_equal(kf.ops.relu(np.arange(-2, 2, dtype=np.float32), context=cpu), [0, 0, 0, 1])


def test_torch_ops_same_path(kt):
    x = torch.randn(4, 32)
    torch.testing.assert_close(kt.relu(x), torch.relu(x))
    torch.testing.assert_close(kt.softmax(x, scale=0.5), torch.softmax(0.5 * x, -1))
    # autograd still recorded where asked for
    xg = x.clone().requires_grad_()
    y = kt.relu(xg)
    assert y.requires_grad
    y.sum().backward()
    torch.testing.assert_close(xg.grad, (x > 0).float())


def test_op_functions_are_cpp_callables(cpu):
    # kf.ops.<op> is a C++ callable (OpFunction): plain calls go straight to fast_call, the rest to the Python
    # function it wraps, with the same results and errors either way.
    import inspect
    f = kf.ops.softmax
    assert type(f) is _kf.OpFunction and f.__name__ == "softmax" and f.__module__ == "kernelfusion.ops"
    assert f.__wrapped__.__name__ == "softmax" and f.__doc__ == f.__wrapped__.__doc__ and "softmax" in f.__doc__
    assert "out=None" in str(inspect.signature(f)) and "softmax" in repr(f)
    x = torch.randn(4, 9)
    want = torch.softmax(x, -1)
    torch.testing.assert_close(f(x, context=cpu), want)  # plain
    torch.testing.assert_close(f(x=x, context=cpu), want)  # an input by keyword: the wrapped function
    torch.testing.assert_close(f(x, scale=2.0, context=cpu), torch.softmax(2 * x, -1))  # an attribute
    out = torch.empty_like(x)
    assert f(x, out=out, context=cpu) is out and torch.equal(out, f(x, context=cpu))
    n = x.numpy()
    np.testing.assert_allclose(f(n, context=cpu), want.numpy(), rtol=1e-6)
    t = cpu.wrap(np.ascontiguousarray(n))  # a kf tensor: fast_call leaves it, the generic path runs it
    np.testing.assert_allclose(f(t, context=cpu).to_numpy(), want.numpy(), rtol=1e-6)
    with pytest.raises(TypeError, match="at most 1 inputs"):
        kf.ops.relu(x, x, context=cpu)
    with pytest.raises(kf.ShapeError, match="output 'y' has shape"):
        kf.ops.relu(x, out=torch.empty(3), context=cpu)
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        kf.ops.relu(x, bogus=1, context=cpu)
