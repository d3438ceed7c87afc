#!/usr/bin/env bash
# Session 19, probe 6 (H100): dropout's keep words drawn ahead by a kernel of their own (attention_keep.cu: one
# thread a 32-key word, 8 independent Philox calls each, words no key of which the row sees skipped) and read by
# flash-wgmma and by both backward passes, instead of drawn on each warp's path (probes 4-5: 86 instructions a
# Philox call there, 40 % issue activity). Predicted: the pre-pass about 0.4-0.6 ms at B 4, H 32, S 4096 causal
# (2.7e8 calls at the integer pipes' rate); forward with dropout 3.11 -> 2.0-2.4 ms, backward 6.45 -> 5.8-6.2; the
# cases without dropout unchanged. Against HEAD's build (old/), alternated twice; FlashAttention-2 in the same call;
# the pre-pass's own time (Nsight); the CUDA attention tests with their messages.
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
    LD_LIBRARY_PATH=$PWD/$lib timeout 150 $b/kf-bench --backend cuda --no-unfused --reps 10 --dtypes f16,bf16 --ops '^attention(_backward)?$' --cases '^b4_h32_s(1024_d128_causal|4096_d128_causal|4096_d128_causal_dropout)$' --json "$out/attn-$lib-$rep.json" 2>&1 | grep -E '^attention'
  done
done
date +%T
PYTHONUNBUFFERED=1 timeout 120 python3 - <<'PY'
import torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
def med(f):
    for _ in range(10): f()
    ts = []
    for _ in range(15):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(); f(); e1.record(); torch.cuda.synchronize(); ts.append(e0.elapsed_time(e1))
    ts.sort(); return ts[len(ts) // 2]
B, H, S, D = 4, 32, 4096, 128
for dt in (torch.float16, torch.bfloat16):
    for p in (0.0, 0.1):
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=dt, requires_grad=True) for _ in range(3))
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            fw = med(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p))
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p); g = torch.randn_like(o)
            bw = med(lambda: torch.autograd.grad(o, (q, k, v), g, retain_graph=True))
        print(f"torch-flash {str(dt)[6:]} S{S} causal p={p}: forward {fw:.3f} ms, backward {bw:.3f} ms", flush=True)
PY
date +%T
export LD_LIBRARY_PATH=$PWD/build
echo "== ncu: the pre-pass and flash-wgmma with dropout"
timeout 150 ncu --kernel-name regex:'attn_keep|attn_wgmma' --launch-skip 4 --launch-count 2 --metrics gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active \
  $b/kf-bench --backend cuda --no-unfused --reps 3 --dtypes f16 --ops '^attention$' --cases '^b4_h32_s4096_d128_causal_dropout$' 2>&1 | grep -E "attn_|duration|inst_executed|issue_active" | sed -E 's/\(kf::hal::cuda::[^)]*\)//' | cut -c1-150
date +%T
timeout 400 build/tests/test_attention --gtest_filter='AttentionCuda.*' > "$out/test-attention.txt" 2>&1; echo "test_attention rc=$?"
grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)" "$out/test-attention.txt"
grep -A12 "Failure" "$out/test-attention.txt" | head -60
timeout 200 build/tests/test_dropout 2>&1 | grep -E "^\[  (PASSED|FAILED)|Failure" | head
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
