"""A Vulkan context given torch CUDA tensors (docs/python.md, "Vulkan and CUDA"): the staged path (through the
host) against the shared path (Vulkan memory imported into CUDA), on one GPU.

    PYTHONPATH=build/python python bench/python_vulkan_cuda.py [--reps 20] [--op gelu]

For 1 MiB and 256 MiB of f32 prints, as the median wall time of one call after a warm-up (each call returns
when its results are ready on both paths: the staged path has downloaded them, the shared path has waited for
Vulkan), with torch's stream synchronized before and after each call:
- staged: kf.ops.<op>(x, context=vk) with kernelfusion._cuda.use_shared = False;
- shared: the same call on the shared path (device-to-device copy in, output viewed in place), the queues
  ordered by the timeline semaphore where there is one (and, as "host waits", by waiting on the host);
- vulkan alone: the op on kf tensors of the Vulkan context and a synchronize (the floor of both);
- cuda: kf.ops.<op>(x) on kf's CUDA backend (in place on torch's stream), for reference.
"""
import argparse
import statistics
import time

import torch

import kernelfusion as kf
from kernelfusion import _cuda


def median_wall_ms(call, reps, warmup=3):
    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        call()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--op", default="gelu", choices=["gelu", "relu", "silu"])
    a = ap.parse_args()
    dev = torch.device("cuda", torch.cuda.current_device())
    vk = kf.Context(backend="vulkan")
    op = getattr(kf.ops, a.op)
    print(f"device: {torch.cuda.get_device_name(dev)} (Vulkan: {vk.device_name}); torch {torch.__version__}")
    print(f"path: {kf.ops.cuda_path(vk, dev)}; ordering: {_cuda.ordering(vk, dev)}")
    for mib in (1, 256):
        n = mib * (1 << 20) // 4
        x = torch.randn(n, device=dev)
        ref = getattr(torch.nn.functional, a.op)(x) if a.op != "relu" else torch.relu(x)
        _cuda.use_shared = False
        staged = median_wall_ms(lambda: op(x, context=vk), a.reps)
        torch.testing.assert_close(op(x, context=vk), ref, rtol=1e-4, atol=1e-4)
        _cuda.use_shared = True
        _cuda.use_timeline = False
        host = median_wall_ms(lambda: op(x, context=vk), a.reps)
        torch.testing.assert_close(op(x, context=vk), ref, rtol=1e-4, atol=1e-4)
        _cuda.use_timeline = True
        shared = median_wall_ms(lambda: op(x, context=vk), a.reps)
        torch.testing.assert_close(op(x, context=vk), ref, rtol=1e-4, atol=1e-4)
        kx, ky = vk.empty([n]), vk.empty([n])

        def alone():
            vk.run(a.op, [kx], [ky])
            vk.synchronize()
        floor = median_wall_ms(alone, a.reps)
        cuda = median_wall_ms(lambda: op(x), a.reps) if "cuda" in kf.backends() else float("nan")
        print(f"{a.op} f32 {mib:4d} MiB: staged {staged:9.3f} ms  shared {shared:8.3f} ms ({staged / shared:6.1f}x)  "
              f"shared, host waits {host:8.3f} ms  vulkan alone {floor:8.3f} ms  cuda {cuda:8.3f} ms "
              f"(wall, median of {a.reps})")


if __name__ == "__main__":
    main()
