#!/bin/bash
# Session 19, probe 1: SPV_NV_cooperative_matrix2 tensor-addressed loads (bench/probes/cm2t) against a plain
# workgroup-scope load, then PyTorch's f16 linear in the same call.
cd "$(dirname "$0")/../.."
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
timeout 400 .gpu-proto/cm2t/probe .gpu-proto/cm2t/wg*.spv 2>&1 | tee "$OUT/probe.txt"
python3 - <<'PY' 2>&1 | tee "$OUT/torch.txt"
import torch
for s in (4096, 8192):
    a = torch.randn(s, s, device="cuda", dtype=torch.float16); w = torch.randn(s, s, device="cuda", dtype=torch.float16)
    for _ in range(20): torch.nn.functional.linear(a, w)
    ts = []
    for _ in range(15):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(); torch.nn.functional.linear(a, w); e1.record(); torch.cuda.synchronize(); ts.append(e0.elapsed_time(e1))
    ts.sort(); ms = ts[len(ts) // 2]
    print(f"torch linear f16 {s}^3: {ms:.3f} ms {2*s**3/ms*1e-9:.1f} TFLOP/s")
PY
