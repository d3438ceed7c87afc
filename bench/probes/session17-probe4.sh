#!/usr/bin/env bash
# Session 17, fourth probe (H100): the CUDA forward (flash-mma, which serves dropout: the warpgroup kernel has
# none) draws its dropout bits once per Philox block (keep_bits32, as the CUDA backward already did) instead
# of once per key. Predicted: S 4096 causal with dropout 8.16 ms -> 3.0-3.5 ms (flash-mma's plain causal is
# about 2.0 ms). In the same call: the Vulkan forward, PyTorch's scaled_dot_product_attention with dropout
# (FlashAttention-2 and cuDNN forced; torch_attention.py now passes the case's dropout), the backward on both
# backends and PyTorch's FlashAttention-2 backward with and without dropout; then the dropout-mask tests
# (bit for bit against the generator: CUDA's kernels and Vulkan's, Sk % 4 == 2 among the shapes), the CUDA
# tensor-core forward tests, and the attention conformance on CUDA.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
for be in cuda vulkan; do
  timeout 150 build/tools/kf-bench --backend $be --no-unfused --reps 5 --dtypes f16,bf16 --ops '^attention$' --cases '^b4_h32_s4096_d128_causal(_dropout)?$' --json "$out/fwd-$be.json" 2>&1 | grep -E '^attention'
done
PYTHONUNBUFFERED=1 timeout 150 python3 bench/torch_attention.py --cases-from "$out/fwd-cuda.json" --out-dir "$out" --backends flash,cudnn
for be in cuda vulkan; do
  timeout 200 build/tools/kf-bench --backend $be --no-unfused --reps 5 --dtypes f16,bf16 --ops '^attention_backward$' --cases '^b4_h32_s4096_d128_causal(_dropout)?$' --json "$out/bwd-$be.json" 2>&1 | grep -E '^attention'
done
PYTHONUNBUFFERED=1 timeout 120 python3 - <<'PY'
import torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
for dt in (torch.float16, torch.bfloat16):
    for S, causal, p in ((4096, True, 0.0), (4096, True, 0.1)):
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
        print(f"torch FA2 backward {str(dt)[6:]} S{S} causal={causal} dropout={p}: {ms:.3f} ms {fl / ms * 1e-9:.1f} TFLOP/s")
PY
date +%T
timeout 200 build/tests/test_attention --gtest_filter='*DropoutMask*:AttentionCuda.TensorCoreKernelF16BF16' 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)|Failure|Expected|Which|variant|error" | head -40
date +%T
timeout 100 build/tools/kf-conformance --backend cuda --filter '^attention' 2>&1 | tail -2
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
