"""Timing of a PyTorch callable on the GPU for the bench scripts (torch_attention.py, torch_linalg.py):
`warmup` untimed calls, then `reps` calls each between two CUDA events; returns the median in ms."""
import statistics


def median_ms(torch, call, warmup, reps):
    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        call()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)
