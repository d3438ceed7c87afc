#!/usr/bin/env bash
# Session 15, eighth probe (H100): as the seventh, with the dropout keep bits computed a tile ahead (after the
# products, no barrier of their own; predicted causal + dropout 11.3 -> about 9.5 ms): kf-bench on its four bench cases (dropout included) alternated twice with the portable
# kernels on the smallest (KF_TUNE attn_path=1); PyTorch's FlashAttention-2 backward in the same call (with
# dropout where the case has it); then every CUDA attention test and the attention conformance on CUDA.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build
run() {  # $1: label, $2: KF_TUNE, $3: cases
  echo "== $1"
  KF_TUNE=$2 timeout 150 build/tools/kf-bench --backend cuda --no-unfused --reps 10 --dtypes f16,bf16 --ops '^attention_backward$' --cases "$3" --json "$out/kf-$1.json" 2>&1 | grep -E '^attention'
}
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
for i in 1 2; do run simt$i attn_path=1 '^b4_h32_s1024_d128_causal$'; run mma$i "" '^b4_h32_s(1024|4096)_d128(_causal)?(_dropout)?$'; done
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
            for _ in range(3): torch.autograd.grad(o, (q, k, v), g, retain_graph=True)
            ts = []
            for _ in range(10):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record(); torch.autograd.grad(o, (q, k, v), g, retain_graph=True); e1.record(); torch.cuda.synchronize()
                ts.append(e0.elapsed_time(e1))
        ts.sort(); ms = ts[len(ts) // 2]
        fl = 10.0 * B * H * S * S * D / (2 if causal else 1)
        print(f"torch FA2 backward {str(dt)[6:]} S{S} causal={causal} dropout={p}: {ms:.3f} ms {fl / ms * 1e-9:.1f} TFLOP/s")
PY
date +%T
timeout 330 build/tests/test_attention --gtest_filter='AttentionCuda.*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)|Failure|Expected|Which|variant|error" | head -60
date +%T
timeout 100 build/tools/kf-conformance --backend cuda --filter '^attention' 2>&1 | tail -2
date +%T
} > "$out/probe.log" 2>&1
rm -f "$out"/*.json
cat "$out/probe.log"
