# The CPU backend shares memory with NumPy and torch: inputs are read in place (and left untouched),
# results are arrays of the caller's library that kf wrote in place (kf tensors' to_numpy / to_torch are
# views of kf's memory), and out= arrays are written in place.
import numpy as np
import pytest

import kernelfusion as kf


def test_numpy_inputs_in_place(cpu):
    x = np.random.default_rng(1).standard_normal((16, 40)).astype(np.float32)
    t = cpu.wrap(x)
    assert t.host_pointer == x.ctypes.data and t.shape == (16, 40) and t.dtype == "f32"
    before = x.copy()
    y = kf.ops.softmax(x, context=cpu)
    np.testing.assert_array_equal(x, before)
    # NumPy's own array (np.empty, written in place by kf: ops.py's fast path), no copy of a kf result
    assert y.shape == x.shape and y.flags.owndata and y.flags.c_contiguous


def test_results_view_kf_memory(cpu):
    t = cpu.call("relu", [cpu.wrap(np.arange(-4, 4, dtype=np.float32))])[0]
    a = t.to_numpy()
    assert a.ctypes.data == t.host_pointer
    del t  # the view keeps kf's tensor alive
    np.testing.assert_array_equal(a, [0, 0, 0, 0, 0, 1, 2, 3])


def test_out_written_in_place(cpu):
    x = np.linspace(-1, 1, 96, dtype=np.float64).reshape(3, 32)
    out = np.empty_like(x)
    address = out.ctypes.data
    r = kf.ops.relu(x, out=out, context=cpu)
    assert r is out and out.ctypes.data == address
    np.testing.assert_array_equal(out, np.maximum(x, 0))


def test_wrapped_tensor_sees_later_writes(cpu):
    x = np.zeros(8, np.float32)
    t = cpu.wrap(x)
    x[:] = 2
    np.testing.assert_array_equal(t.to_numpy(), x)  # no snapshot: the same memory


def test_non_contiguous_is_copied(cpu):
    x = np.arange(32, dtype=np.float32).reshape(4, 8)[:, ::2]
    np.testing.assert_array_equal(kf.ops.relu(x, context=cpu), x)


def test_torch_in_place(cpu):
    torch = pytest.importorskip("torch")
    x = torch.randn(8, 24, dtype=torch.float32)
    before = x.clone()
    assert cpu.wrap(x).host_pointer == x.data_ptr()
    y = kf.ops.softmax(x, context=cpu)
    assert isinstance(y, torch.Tensor) and torch.equal(x, before)
    torch.testing.assert_close(y, torch.softmax(x, -1))
    out = torch.empty_like(x)
    ptr = out.data_ptr()
    assert kf.ops.softmax(x, out=out, context=cpu) is out and out.data_ptr() == ptr
    torch.testing.assert_close(out, y)
    # a result tensor views kf's memory
    t = cpu.call("relu", [cpu.wrap(x)])[0]
    assert t.to_torch().data_ptr() == t.host_pointer


def test_torch_bf16(cpu):
    torch = pytest.importorskip("torch")
    x = torch.randn(4, 16).to(torch.bfloat16)
    y = kf.ops.relu(x, context=cpu)
    assert y.dtype == torch.bfloat16 and torch.equal(y, torch.relu(x))
    t = cpu.call("relu", [cpu.wrap(x)])[0]
    with pytest.raises(kf.DTypeError, match="NumPy has no bf16"):
        t.to_numpy()
    with pytest.raises(kf.DTypeError, match="NumPy has no bf16"):
        kf.ops.relu(t, out=None).to_numpy()


def test_device_memory_is_for_gpu_backends(cpu):
    x = np.zeros(8, np.float32)
    with pytest.raises(kf.InvalidArgumentError, match="wrap_device: the array is in host memory"):
        cpu.wrap_device(x)
    assert cpu.wrap(x).device_pointer == 0
    with pytest.raises(kf.InvalidArgumentError, match="ContextOptions::stream"):
        kf.Context(backend="cpu", stream=0x1000)


def test_out_over_an_input_is_refused(cpu):
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    with pytest.raises(kf.InvalidArgumentError, match="output 'y' shares memory with input 'x'"):
        kf.ops.relu(x, out=x, context=cpu)
    np.testing.assert_array_equal(x, np.linspace(-1, 1, 8, dtype=np.float32))
