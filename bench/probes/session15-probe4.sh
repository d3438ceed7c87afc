#!/usr/bin/env bash
# Session 15, fourth probe (H100): the CUDA attention backward on the tensor cores (flash-mma
# backward after the FastDiv staging, paired tile loads and pair reads of the rows' data; the default for
# f16 / bf16 at D 64 / 128) against the portable
# kernels (KF_TUNE attn_path=1) in the same build and call, alternated twice; PyTorch's FlashAttention-2
# backward in the same call; then the CUDA backward tests, the attention conformance and test_grad on the GPU.
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
run simt1 attn_path=1 '^b4_h32_s1024_d128_causal$'
for i in 1 2; do run mma$i "" '^b4_h32_s(1024|4096)_d128(_causal)?$'; done
run simt2 attn_path=1 '^b4_h32_s1024_d128_causal$'
date +%T
PYTHONUNBUFFERED=1 timeout 120 python3 - <<'PY'
import torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
for dt in (torch.float16, torch.bfloat16):
    for S, causal in ((1024, True), (4096, False), (4096, True)):
        B, H, D = 4, 32, 128
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=dt, requires_grad=True) for _ in range(3))
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            g = torch.randn_like(o)
            for _ in range(3): torch.autograd.grad(o, (q, k, v), g, retain_graph=True)
            ts = []
            for _ in range(10):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record(); torch.autograd.grad(o, (q, k, v), g, retain_graph=True); e1.record(); torch.cuda.synchronize()
                ts.append(e0.elapsed_time(e1))
        ts.sort(); ms = ts[len(ts) // 2]
        fl = 10.0 * B * H * S * S * D / (2 if causal else 1)
        print(f"torch FA2 backward {str(dt)[6:]} S{S} causal={causal}: {ms:.3f} ms {fl / ms * 1e-9:.1f} TFLOP/s")
PY
date +%T
timeout 300 build/tests/test_attention --gtest_filter='AttentionCuda.Backward*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)|Failure|Expected|Which|variant|error" | head -60
date +%T
timeout 120 build/tools/kf-conformance --backend cuda --filter '^attention' 2>&1 | tail -3
timeout 150 build/tests/test_grad 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED)|Failure" | head
date +%T
} > "$out/probe.log" 2>&1
rm -f "$out"/*.json
cat "$out/probe.log"
