#!/usr/bin/env bash
# Session 18, first probe (H100): the CUDA tensor-core backward's warpgroup form (attention_bwd_mma.cu
# attn_bwd_wg_dkv / attn_bwd_wg_dq: the same two passes, 64-row tiles and per-element code as the mma.sync
# kernels, with S^T / dP^T (S / dP) as wgmma m64n64k16 from swizzled shared memory and dV / dK (dQ) as wgmma
# with the A fragments from the accumulators; one warpgroup a block, two blocks an SM). Predicted: S 4096
# 14.6 -> 9-11 ms, causal 7.6 -> 5-6 ms (0.9-1.1 of FlashAttention-2's backward). First the correctness
# tests (every registry case and the awkward shapes on both forms), then the timings alternated twice with
# KF_TUNE attn_wmma=mma (the mma.sync kernels) and PyTorch's FlashAttention-2 backward in the same call.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
timeout 200 build/tests/test_attention --gtest_filter='AttentionCuda.Backward*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)|Failure|Expected|Which|variant|error|max|relative" | head -60
date +%T
cases='^b4_h32_s(1024_d128_causal|4096_d128|4096_d128_causal|4096_d128_causal_dropout)$'
for rep in 1 2; do
  for tune in "" "attn_wmma=mma"; do
    echo "== KF_TUNE=$tune (round $rep)"
    KF_TUNE=$tune timeout 150 build/tools/kf-bench --backend cuda --no-unfused --reps 5 --dtypes f16,bf16 --ops '^attention_backward$' --cases "$cases" --json "$out/bwd-cuda-${tune:-wg}-$rep.json" 2>&1 | grep -E '^attention'
  done
done
date +%T
PYTHONUNBUFFERED=1 timeout 120 python3 - <<'PY'
import torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
for dt in (torch.float16, torch.bfloat16):
    for S, causal, p in ((1024, True, 0.0), (4096, False, 0.0), (4096, True, 0.0), (4096, True, 0.1)):
        B, H, D = 4, 32, 128
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=dt, requires_grad=True) for _ in range(3))
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, dropout_p=p)
            g = torch.randn_like(o)
            for _ in range(10): torch.autograd.grad(o, (q, k, v), g, retain_graph=True)
            ts = []
            for _ in range(10):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record(); torch.autograd.grad(o, (q, k, v), g, retain_graph=True); e1.record(); torch.cuda.synchronize()
                ts.append(e0.elapsed_time(e1))
        ts.sort(); ms = ts[len(ts) // 2]
        fl = 10.0 * B * H * S * S * D / (2 if causal else 1)
        print(f"torch-flash backward {str(dt)[6:]} S{S} causal={causal} p={p}: {ms:.3f} ms {fl / ms / 1e9:.1f} TFLOP/s", flush=True)
PY
date +%T
timeout 120 build/tools/kf-conformance --backend cuda --filter '^attention_backward' 2>&1 | tail -3
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
