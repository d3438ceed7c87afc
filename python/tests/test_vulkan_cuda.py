# A Vulkan context given torch CUDA tensors (docs/python.md "Vulkan and CUDA"): exportable Vulkan memory and
# its refusals (everywhere: lavapipe exports or says why not), the staged path where sharing is impossible,
# and on a GPU with both backends the shared path's results and its zero-copy outputs.
import os

import numpy as np
import pytest

import kernelfusion as kf
from conftest import vulkan_context

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def vk():
    ctx = vulkan_context()
    if ctx is None:
        pytest.skip("no Vulkan device")
    return ctx


def test_exportable_memory_or_why_not(vk):
    ok, why = vk.can_export()
    assert len(vk.device_uuid) == 32
    if not ok:
        assert why and "exports no memory" in why
        with pytest.raises(kf.UnsupportedError, match="Context::empty_exportable"):
            vk.empty_exportable([4])
        return
    assert why == ""
    x = vk.empty_exportable([2, 3], "f32")
    x.upload(np.array([[-2, -1, 0], [1, 2, 3]], np.float32))
    y = vk.call("relu", [x])[0]
    np.testing.assert_array_equal(y.to_numpy(), [[0, 0, 0], [1, 2, 3]])
    m = vk.export_memory(x)
    assert m["fd"] >= 0 and m["size"] >= 24 and m["offset"] == 0 and m["device_uuid"] == vk.device_uuid
    os.close(m["fd"])
    with pytest.raises(kf.InvalidArgumentError, match="empty_exportable"):
        vk.export_memory(vk.empty([4]))


def test_refusals(vk):
    cpu = kf.Context(backend="cpu")
    ok, why = cpu.can_export()
    assert not ok and "Vulkan only" in why
    with pytest.raises(kf.UnsupportedError, match="empty_exportable"):
        cpu.empty_exportable([4])
    for ctx in (cpu, vk):  # neither imports: the descriptor is closed all the same
        fd = os.open(os.devnull, os.O_RDONLY)
        memory = {"fd": fd, "size": 64, "offset": 0, "dedicated": True, "device_uuid": ctx.device_uuid}
        with pytest.raises(kf.UnsupportedError, match="imports no memory"):
            ctx.import_memory(memory, [4], "f32")
        with pytest.raises(OSError):
            os.fstat(fd)
    with pytest.raises(kf.InvalidArgumentError, match="32 hex digits"):
        cpu.import_memory({"fd": -1, "size": 64, "offset": 0, "dedicated": True, "device_uuid": "xyz"}, [4])


def test_timeline_refusals(vk):
    cpu = kf.Context(backend="cpu")
    ok, why = kf._kf.Timeline.supported(cpu, cpu)
    assert not ok and "exports no semaphores" in why
    ok, why = kf._kf.Timeline.supported(vk, cpu)
    assert not ok and why
    with pytest.raises(kf.UnsupportedError, match="Timeline::create"):
        kf._kf.Timeline.create(vk, cpu)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the staged path without a CUDA GPU")
def test_staged_without_cuda(vk):
    assert kf.ops.cuda_path(vk, 0).startswith("staged: ")
    assert kf.ops.cuda_path(kf.Context(backend="cpu"), 0).startswith("staged: ")


# On a GPU machine with kf's CUDA backend: the Vulkan device of that GPU shares memory with CUDA.
gpu = pytest.mark.skipif(not torch.cuda.is_available() or "cuda" not in kf.backends(),
                         reason="no CUDA GPU, or kf built without its CUDA backend")
DEV = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else None


@pytest.fixture(scope="module", params=["timeline", "host"])
def shared(vk, request):
    """The shared path, its queues ordered by the timeline semaphore or by host waits."""
    path = kf.ops.cuda_path(vk, DEV)
    if "NVIDIA" in vk.device_name:
        assert path == "shared", path
    elif path != "shared":
        pytest.skip(path)
    from kernelfusion import _cuda
    _cuda.use_timeline = request.param == "timeline"
    ordering = _cuda.ordering(vk, DEV)
    if request.param == "timeline" and ordering != "timeline":
        assert "NVIDIA" not in vk.device_name, ordering
        pytest.skip(ordering)
    yield vk, _cuda
    _cuda.use_timeline = True


@gpu
def test_shared_results_and_zero_copy(shared):
    vk, _cuda = shared
    x = torch.randn(256, 1024, device=DEV)
    b = torch.randn(1024, device=DEV)
    before = x.clone()
    y = kf.ops.add_relu(x, b, context=vk)
    assert y.is_cuda and y.shape == x.shape and y.dtype == x.dtype
    torch.testing.assert_close(y, torch.relu(x + b))
    assert torch.equal(x, before)  # inputs untouched
    vt, ct = _cuda.vulkan_tensor_of(y)
    assert y.data_ptr() == ct.device_pointer  # a view of the imported Vulkan memory: no copy
    assert vt.context.key == vk.key and vk.last_variant().startswith("vulkan")
    taken = []
    assert _cuda._input(vk, _cuda.context_for(DEV), y, taken) is vt and not taken  # used in place
    # Passed back to the same context, the output is used in place; torch's writes are seen by Vulkan.
    y.mul_(-1.0)
    z = kf.ops.relu(y, context=vk)
    assert torch.equal(z, torch.zeros_like(z))
    g = kf.ops.gelu(x.t(), context=vk)  # a non-contiguous input: copied on the device
    torch.testing.assert_close(g, torch.nn.functional.gelu(x.t()), rtol=1e-4, atol=1e-4)


@gpu
def test_shared_chain_in_order(shared):
    """Calls that alternate between torch and Vulkan with no synchronize of the caller's see each other's
    results (large tensors, so that an unordered read would see stale values)."""
    vk, _ = shared
    a = torch.zeros(64 << 20, device=DEV)
    for _ in range(6):
        a = kf.ops.relu(a + 1.0, context=vk)  # torch adds, Vulkan applies relu into a new output
        a.mul_(2.0)                          # torch writes the Vulkan output in place
    torch.cuda.synchronize()
    assert torch.equal(a, torch.full_like(a, 126.0))


@gpu
def test_shared_out_and_dtypes(shared):
    vk, _ = shared
    x = torch.randn(4096, device=DEV, dtype=torch.float16)
    out = torch.empty_like(x)
    address = out.data_ptr()
    assert kf.ops.gelu(x, out=out, context=vk) is out and out.data_ptr() == address
    torch.testing.assert_close(out, torch.nn.functional.gelu(x), rtol=1e-2, atol=1e-2)
    xg = torch.randn(8, 64, device=DEV)
    y = kf.ops.swiglu(xg, context=vk)  # packed: the value, then the gate
    torch.testing.assert_close(y, xg[:, :32] * torch.nn.functional.silu(xg[:, 32:]), rtol=1e-4, atol=1e-4)


@gpu
def test_export_import_by_hand(shared):
    vk, _cuda = shared
    cuda = _cuda.context_for(DEV)
    assert cuda.device_uuid == vk.device_uuid
    t = vk.empty_exportable([256], "f32")
    m = vk.export_memory(t)
    c = cuda.import_memory(m, [256], "f32")  # consumes m["fd"]
    v = c.to_torch()
    assert v.data_ptr() == c.device_pointer
    v.fill_(3.0)
    torch.cuda.current_stream().synchronize()
    np.testing.assert_array_equal(t.to_numpy(), np.full(256, 3.0, np.float32))
    wrong = dict(vk.export_memory(t), device_uuid="0" * 32)
    with pytest.raises(kf.DeviceError, match="another GPU"):
        cuda.import_memory(wrong, [256], "f32")
    with pytest.raises(kf.InvalidArgumentError, match="needs"):
        cuda.import_memory(vk.export_memory(t), [1 << 20], "f32")


@gpu
def test_shared_errors_leave_the_context_usable(shared):
    vk, _ = shared
    x = torch.randn(64, 32, device=DEV)
    with pytest.raises(kf.ShapeError, match="add_relu"):
        kf.ops.add_relu(x, torch.randn(3, device=DEV), context=vk)
    with pytest.raises(ValueError, match="mix CUDA tensors"):
        kf.ops.add_relu(x, np.zeros(32, np.float32), context=vk)
    torch.testing.assert_close(kf.ops.add_relu(x, x[0].clone(), context=vk), torch.relu(x + x[0]))
