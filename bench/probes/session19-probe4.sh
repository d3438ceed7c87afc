#!/usr/bin/env bash
# Session 19, probe 4 (H100): Philox round keys from the parameter bank for the CUDA elementwise dropout ops too
# (EltwiseParams::rk; one Philox body, philox_rounds, for both key forms). Predicted: 16-bit gelu_dropout /
# bias_gelu_dropout (issue-bound, about 47 instructions a value, 5 of them the round keys' adds) +5-10 %;
# dropout / add_dropout_residual at the copy bandwidth already, unchanged; attention unchanged against probe 3.
# Against HEAD's build (old/), alternated twice; then FlashAttention-2's forward with dropout (issue 7's other
# attention figure), Nsight Compute of the forward with and without dropout, and the CUDA dropout checks.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
mkdir -p old && xz -dc .gpu/old/libkf.so.0.xz > old/libkf.so.0
b=build/tools
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
for rep in 1 2; do
  for lib in build old; do
    echo "== $lib (round $rep)"
    LD_LIBRARY_PATH=$PWD/$lib timeout 120 $b/kf-bench --backend cuda --no-unfused --reps 15 --dtypes f32,f16,bf16 --ops '^(dropout|gelu_dropout|bias_gelu_dropout|add_dropout_residual)$' --json "$out/mb-$lib-$rep.json" 2>&1 | grep -E '^(copy|dropout|gelu|bias|add)'
    LD_LIBRARY_PATH=$PWD/$lib timeout 120 $b/kf-bench --backend cuda --no-unfused --reps 5 --dtypes f16,bf16 --ops '^attention(_backward)?$' --cases '^b4_h32_s4096_d128_causal_dropout$' 2>&1 | grep -E '^attention'
  done
done
date +%T
PYTHONUNBUFFERED=1 timeout 120 python3 - <<'PY'
import torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
for dt in (torch.float16, torch.bfloat16):
    for p in (0.0, 0.1):
        B, H, S, D = 4, 32, 4096, 128
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=dt) for _ in range(3))
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            for _ in range(20): F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p)
            ts = []
            for _ in range(20):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record(); F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p); e1.record(); torch.cuda.synchronize()
                ts.append(e0.elapsed_time(e1))
        ts.sort(); ms = ts[len(ts) // 2]
        print(f"torch-flash forward {str(dt)[6:]} S{S} causal p={p}: {ms:.3f} ms {2.0 * B * H * S * S * D / ms / 1e9:.1f} TFLOP/s", flush=True)
PY
date +%T
export LD_LIBRARY_PATH=$PWD/build
for c in 'b4_h32_s4096_d128_causal' 'b4_h32_s4096_d128_causal_dropout'; do
  echo "== ncu forward $c"
  timeout 150 ncu --kernel-name regex:attn_wgmma --launch-skip 4 --launch-count 1 --metrics gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,smsp__warps_active.avg.per_cycle_active \
    $b/kf-bench --backend cuda --no-unfused --reps 3 --dtypes f16 --ops '^attention$' --cases "^$c\$" 2>&1 | grep -E "duration|inst_executed|issue_active|gmma|registers|warps_active" | cut -c1-150
done
date +%T
timeout 200 build/tests/test_dropout 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED)|Failure|Expected|Which|differ" | head -20
timeout 300 $b/kf-conformance --backend cuda --filter 'dropout' 2>&1 | tail -3
timeout 300 build/tests/test_attention --gtest_filter='AttentionCuda.DropoutMask*:AttentionCuda.Backward*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED)|Failure|Expected|differ" | head -20
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
