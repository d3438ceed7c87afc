#!/usr/bin/env bash
# Session 19, probe 2 (H100): the CUDA tensor-core backward with dropout keeps the keep bits the dK/dV pass
# draws (a workspace of B Hq Sq (ceil(Sk / 64) + 1) 8 bytes) for the dQ pass, which then reads them instead of
# drawing them again. Predicted: S 4096 causal p 0.1 flash-wgmma 8.37 -> 6.6-7.0 ms (drawing is most of
# dropout's 3.6 ms there), flash-mma 11.2 -> 9.4-9.8; the cases without dropout unchanged. Kept (default) and
# drawn (KF_TUNE attn_bwd_bits=1) alternated twice, FlashAttention-2 in the same call, then the CUDA tests.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build
b=build/tools
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
cases='^b4_h32_s(1024_d128_causal|4096_d128_causal|4096_d128_causal_dropout)$'
for rep in 1 2; do
  for bits in 2 1; do
    echo "== attn_bwd_bits=$bits (round $rep)"
    KF_TUNE=attn_bwd_bits=$bits timeout 150 $b/kf-bench --backend cuda --no-unfused --reps 5 --dtypes f16,bf16 --ops '^attention_backward$' --cases "$cases" --json "$out/bwd-$bits-$rep.json" 2>&1 | grep -E '^attention'
  done
done
for bits in 2 1; do
  echo "== attn_wmma=mma, attn_bwd_bits=$bits"
  KF_TUNE=attn_wmma=mma,attn_bwd_bits=$bits timeout 150 $b/kf-bench --backend cuda --no-unfused --reps 5 --dtypes f16,bf16 --ops '^attention_backward$' --cases '^b4_h32_s4096_d128_causal_dropout$' 2>&1 | grep -E '^attention'
done
date +%T
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
        print(f"torch-flash backward {str(dt)[6:]} S{S} causal={causal} p={p}: {ms:.3f} ms {fl / ms / 1e9:.1f} TFLOP/s", flush=True)
PY
date +%T
timeout 240 build/tests/test_attention --gtest_filter='AttentionCuda.Backward*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)|Failure|Expected|Which|variant|error|differ" | head -40
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
