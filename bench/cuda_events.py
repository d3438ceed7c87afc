"""Timing of a PyTorch callable on the GPU for the bench scripts (torch_bench.py, torch_attention.py,
torch_linalg.py, python_overhead.py): a warm-up as kf-bench's, then `reps` calls each between two CUDA
events; returns the median in ms."""
import statistics

# kf-bench's warm-up (tools/kf-bench.cpp time_runs): `warmup` calls, then rounds of 1, 2, 4, ... calls until
# one takes WARMUP_MS of device time. With a fixed 5 calls, PyTorch timed a GPU that had idled while the script
# made its inputs: linear 16384 x 8192 x 8192 ran 5-10 % faster than after kf-bench's warm-up, on the same
# cuBLAS kernel (H100), clocks not yet lowered by the power limit. Both sides now time the same state.
WARMUP_MS = 50.0


def warm_up(torch, call, warmup, warmup_ms=WARMUP_MS):
    for _ in range(warmup):  # (torch.compile compiles in the first: host time, not counted below)
        call()
    torch.cuda.synchronize()
    n = 1
    for _ in range(16):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(n):
            call()
        b.record()
        b.synchronize()
        if a.elapsed_time(b) >= warmup_ms:
            break
        n = min(2 * n, 1024)
    torch.cuda.synchronize()


def median_ms(torch, call, warmup, reps, queued=False):
    """The median device time of call() in ms. By default each call is timed alone (recorded, then waited
    for). queued=True times as kf-bench's time_runs does: every call between its own pair of events, all
    recorded back to back and one synchronize at the end, so that the host's time to launch the next call
    (tens of microseconds from Python, while the GPU idles) falls between the pairs, not inside them."""
    warm_up(torch, call, warmup)
    pairs = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        call()
        b.record()
        if not queued:
            b.synchronize()
        pairs.append((a, b))
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in pairs)
