# Every registry op from Python, on every test case of the registry (OpDef::tests, inputs drawn as the C++
# tests draw them), against the registry's float64 reference: on the CPU backend in f32 and f64, and a few
# ops on the Vulkan backend (lavapipe without a GPU) in f32. Also a few ops against NumPy directly, so that
# the reference path itself is checked from outside.
import numpy as np
import pytest

import kernelfusion as kf
from kernelfusion import _kf

from conftest import NP, vulkan_context


def cases(dtypes, only=None):
    for name, op in kf.ops.defs.items():
        if only is not None and name not in only:
            continue
        for i, tc in enumerate(op["tests"]):
            for dt in dtypes:
                if dt in op["dtypes"]:
                    yield pytest.param(name, i, dt, id=f"{name}-{i}-{tc['label'] or 'case'}-{dt}")


def run_case(ctx, name, index, dtype, seed=20261127):
    """Runs case `index` of op `name` in `dtype` on `ctx`; returns the comparison messages ('' = pass)."""
    op = kf.ops.defs[name]
    tc = op["tests"][index]
    attrs = tc["attrs"]
    out_dtype = _kf.output_dtype(name, dtype, attrs)
    if "bf16" in (dtype, out_dtype):
        pytest.skip("NumPy has no bf16")
    values = _kf.case_inputs(name, index, seed)
    inputs, ref_inputs, shapes = [], [], []
    for k, v in enumerate(values):
        if v is None:
            inputs.append(None)
            ref_inputs.append(None)
            shapes.append([])
            continue
        dt = _kf.input_dtype(name, k, dtype, attrs)
        if dt == "bf16":
            pytest.skip("NumPy has no bf16")
        a = v.astype(NP[dt])
        inputs.append(a)
        ref_inputs.append(a.astype(np.float64))  # the reference sees the values the kernel sees
        shapes.append(list(a.shape))
    copies = [None if a is None else a.copy() for a in inputs]
    outs = getattr(kf.ops, name)(*inputs, context=ctx, **attrs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    for a, c in zip(inputs, copies):
        if a is not None:
            np.testing.assert_array_equal(a, c, err_msg="an input was written")
    refs = _kf.reference(name, ref_inputs, attrs)
    # attention's lse is an output only with return_lse: the reference's outputs are the call's
    assert len(outs) == len(refs) and len(refs) <= len(op["outputs"])
    terms = _kf.terms(name, shapes)
    messages = []
    for o, r, oname in zip(outs, refs, op["outputs"]):
        assert isinstance(o, np.ndarray) and o.dtype == NP[out_dtype]
        assert o.shape == r.shape, f"{oname}: shape {o.shape}, reference {r.shape}"
        m = _kf.compare(np.ascontiguousarray(o, dtype=np.float64).ravel(), r.ravel(), out_dtype, terms)
        if m:
            messages.append(f"{oname}: {m}")
    return messages


@pytest.mark.parametrize("name,index,dtype", list(cases(("f32", "f64"))))
def test_cpu_matches_reference(cpu, name, index, dtype):
    assert run_case(cpu, name, index, dtype) == []


VULKAN_OPS = ("add_relu", "bias_gelu", "softmax", "log_softmax", "layer_norm", "rms_norm", "matmul", "linear",
              "cross_entropy", "relu_backward", "softmax_backward")


@pytest.mark.parametrize("name,index,dtype", list(cases(("f32",), VULKAN_OPS)))
def test_vulkan_matches_reference(name, index, dtype):
    ctx = vulkan_context()
    if ctx is None:
        pytest.skip("no Vulkan device")
    supported, why = ctx.supports(name, dtype)
    if not supported:
        pytest.skip(why)
    assert run_case(ctx, name, index, dtype) == []


def test_every_op_is_exposed():
    names = [op["name"] for op in _kf.op_defs()]
    assert len(names) > 50 and names == kf.ops.names()
    for n in names:
        assert callable(getattr(kf.ops, n)) and n in getattr(kf.ops, n).__doc__
    # every op has at least one test case that the tests above run
    assert all(kf.ops.defs[n]["tests"] for n in names)


def test_against_numpy(cpu):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((5, 33)).astype(np.float64)
    b = rng.standard_normal(33).astype(np.float64)
    np.testing.assert_allclose(kf.ops.add_relu(x, b, context=cpu), np.maximum(x + b, 0), rtol=1e-12)
    e = np.exp(0.5 * x - (0.5 * x).max(-1, keepdims=True))
    np.testing.assert_allclose(kf.ops.softmax(x, scale=0.5, context=cpu), e / e.sum(-1, keepdims=True), rtol=1e-12)
    w = rng.standard_normal((33, 7))
    np.testing.assert_allclose(kf.ops.matmul(x, w, context=cpu), x @ w, rtol=1e-10)
    np.testing.assert_allclose(kf.ops.sum_squared(x, context=cpu), (x * x).sum(-1), rtol=1e-12)


def test_keywords(cpu):
    x = np.linspace(-2, 2, 64, dtype=np.float32).reshape(4, 16)
    b = np.ones(16, np.float32)
    np.testing.assert_array_equal(kf.ops.add_relu(x, b=b, context=cpu), kf.ops.add_relu(x, b, context=cpu))
    with pytest.raises(TypeError, match="multiple values"):
        kf.ops.add_relu(x, b, b=b, context=cpu)
    with pytest.raises(TypeError, match="unexpected keyword argument 'scael'"):
        kf.ops.softmax(x, scael=2.0, context=cpu)
    with pytest.raises(TypeError, match="at most"):
        kf.ops.softmax(x, x, context=cpu)
    with pytest.raises(TypeError, match="scale"):
        kf.ops.softmax(x, scale="big", context=cpu)


def test_kf_tensors_stay_kf(cpu):
    x = kf.tensor(np.ones((2, 8), np.float32), context=cpu)
    y = kf.ops.relu(x)
    assert isinstance(y, kf.Tensor) and y.shape == (2, 8) and y.dtype == "f32" and y.backend == "cpu"
    np.testing.assert_array_equal(y.to_numpy(), np.ones((2, 8), np.float32))
