"""The cost of calling kf from Python on CUDA tensors (the kernelfusion package, docs/python.md).

    PYTHONPATH=build/python python bench/python_overhead.py [--calls 1000] [--rounds 15] [--big-mib 256]

Prints one line per measurement:
- small: host time per call of a 1,024-element op (relu), back to back without synchronizing, for torch
  eager, kernelfusion.ops, kernelfusion.functional and the torch.library operator (kernelfusion.torch_ops'
  function, and torch.ops.kernelfusion through torch's dispatcher), on torch's current stream; the figure is
  launch overhead, the kernel being far shorter. Also kf.ops with its outputs from torch.empty_like (the
  C++ allocation switched off) and with the tensors read through their Python attributes, and both sides
  on an empty tensor (no launch). The rows are interleaved
  over rounds and each reports its median;
- big: the device time (CUDA events, queued as kf-bench queues its runs) of gelu over --big-mib MiB of f32
  through kernelfusion.ops with out= (no allocation, no copy) and through torch, to compare with
  kf-bench's figure for the same kernel;
- staged: the same op on a Vulkan context given the CUDA tensor (copied through the host both ways), wall
  time per call, against the CUDA backend's zero-copy call (the shared path is bench/python_vulkan_cuda.py's).
"""
import argparse
import os
import statistics
import sys
import time

import torch

import kernelfusion as kf
import kernelfusion.functional as F
import kernelfusion.torch_ops as kt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_events import median_ms  # noqa: E402


def per_call_us(rows, calls, rounds):
    """Host time per call of each row: the rounds interleave the rows (the host's speed drifts by tens of
    percent within a process), each timing `calls` back-to-back calls; the median over the rounds."""
    for _, f in rows:
        for _ in range(50):
            f()
    torch.cuda.synchronize()
    times = {name: [] for name, _ in rows}
    for _ in range(rounds):
        for name, f in rows:
            t0 = time.perf_counter()
            for _ in range(calls):
                f()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            times[name].append((t1 - t0) / calls * 1e6)
    return {name: statistics.median(t) for name, t in times.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=1000, help="calls per row and round")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--big-mib", type=int, default=256)
    a = ap.parse_args()
    dev = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name(dev)}; torch {torch.__version__}; kf backends {kf.backends()}")
    x = torch.randn(1024, device=dev)
    y = torch.empty_like(x)
    h, w = torch.randn(32, 32, device=dev), torch.randn(32, 32, device=dev)
    rows = [("torch.relu", lambda: torch.relu(x)),
            ("torch.clamp(min=0, out=)", lambda: torch.clamp(x, min=0, out=y)),
            ("kf.ops.relu", lambda: kf.ops.relu(x)),
            ("kf.ops.relu(out=)", lambda: kf.ops.relu(x, out=y)),
            ("torch.ops.kernelfusion.relu", lambda: kt.relu(x)),
            ("  the same through torch's dispatcher", lambda: torch.ops.kernelfusion.relu(x)),
            ("torch.nn.functional.linear 32x32", lambda: torch.nn.functional.linear(h, w)),
            ("kf.functional.linear 32x32", lambda: F.linear(h, w))]
    # The outputs' allocation: made in C++ by default (kf.ops.torch_outputs says how), and the same call with
    # them from torch.empty_like through Python, for the difference.
    from kernelfusion import _kf

    def by_empty_like():
        _kf.fast_cpp_outputs(False)
        kf.ops.relu(x)
        _kf.fast_cpp_outputs(True)

    # With no element, neither launches a kernel: what remains is each side's cost before the launch.
    e = torch.empty(0, 1024, device=dev)
    def python_reads():
        _kf.fast_cpp_reads(False)
        kf.ops.relu(x)
        _kf.fast_cpp_reads(True)

    rows += [("kf.ops.relu, outputs by empty_like", by_empty_like),
             ("kf.ops.relu, tensors read by Python", python_reads),
             ("torch.relu, empty tensor", lambda: torch.relu(e)),
             ("kf.ops.relu, empty tensor", lambda: kf.ops.relu(e)),
             ("  (two switches alone)", lambda: (_kf.fast_cpp_outputs(False), _kf.fast_cpp_outputs(True)))]
    us = per_call_us(rows, a.calls, a.rounds)
    print(f"small: medians of {a.rounds} interleaved rounds of {a.calls} calls; outputs {kf.ops.torch_outputs}; "
          f"tensors read {kf.ops.torch_reads}")
    for name, _ in rows:
        print(f"small: {name:34s} {us[name]:8.2f} us/call")
    n = a.big_mib * (1 << 20) // 4
    big = torch.randn(n, device=dev)
    out = torch.empty_like(big)
    # Timed as kf-bench times (tools/kf-bench.cpp time_runs; cuda_events.py with queued=True): the same
    # warm-up, then every call between its own CUDA events, all queued back to back and one synchronize at the
    # end, the median. Timed one call at a time (synchronizing after each), a call waits on the host's launch
    # gap of an idle GPU (tens of microseconds from Python) inside its events: 0.255 ms against 0.19 (H100).
    ms_kf = median_ms(torch, lambda: kf.ops.gelu(big, out=out), 3, 20, queued=True)
    ms_torch = median_ms(torch, lambda: torch.nn.functional.gelu(big), 3, 20, queued=True)
    gbs = lambda ms: 2 * n * 4 / (ms * 1e-3) / 1e9  # noqa: E731
    print(f"big: gelu f32 {a.big_mib} MiB  kf.ops {ms_kf:.3f} ms ({gbs(ms_kf):.0f} GB/s)  torch {ms_torch:.3f} ms "
          f"({gbs(ms_torch):.0f} GB/s)")
    # The staged path (docs/python.md): a Vulkan context given torch CUDA tensors copies each input to the host
    # and to the Vulkan device, and the output back, waiting at every copy. Wall time per call.
    # Forced here where the shared path exists (bench/python_vulkan_cuda.py compares the two).
    if "vulkan" in kf.backends():
        from kernelfusion import _cuda
        _cuda.use_shared = False
        vk = kf.Context(backend="vulkan")
        for mib in (1, a.big_mib):
            t = torch.randn(mib * (1 << 20) // 4, device=dev)
            f = lambda: kf.ops.gelu(t, context=vk)  # noqa: E731
            f()
            torch.cuda.synchronize()
            reps = 20 if mib == 1 else 5
            t0 = time.perf_counter()
            for _ in range(reps):
                f()
            torch.cuda.synchronize()
            staged = (time.perf_counter() - t0) / reps * 1e3
            ms_cuda = median_ms(torch, lambda: kf.ops.gelu(t), 3, 20)
            print(f"staged: gelu f32 {mib} MiB through Vulkan {staged:.3f} ms per call (wall), on CUDA without "
                  f"copies {ms_cuda:.3f} ms (device): {staged / ms_cuda:.0f}x")


if __name__ == "__main__":
    main()
