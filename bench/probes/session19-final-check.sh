#!/usr/bin/env bash
# Session 19, final checks (H100) of the merged code (the CUDA attention's dropout: the backward's kept keep words,
# the keep bits' generator, the forward's words drawn ahead). Part "conf": kf-conformance on vulkan and cuda with
# the validation layer; then attention and attention_backward on both backends and PyTorch's FlashAttention-2 in
# one call. Part "tests": test_attention, test_dropout, test_errors, test_grad on the GPU.
set -u
part=${1:-conf}
out=${OUT:-/tmp/final}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
b=build/tools
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
if [ "$part" = conf ]; then
  "$b/kf-conformance" --backend vulkan,cuda --validation --json "$out/conf.json" > "$out/conf.txt" 2>&1; echo "conformance rc=$?"
  tail -1 "$out/conf.txt"; grep -E ' fail ' "$out/conf.txt" | head
  gzip -f "$out/conf.json"
  date +%T
  cases='^b4_h32_s(1024_d128_causal|4096_d128|4096_d128_causal|4096_d128_causal_dropout)$'
  {
  for be in cuda vulkan; do
    timeout 100 "$b/kf-bench" --backend $be --no-unfused --reps 5 --dtypes f16,bf16 --ops '^attention$' --cases '^b4_h32_s4096_d128_causal(_dropout)?$' --json "$out/fwd-$be.json" 2>&1 | grep -E '^attention'
    timeout 150 "$b/kf-bench" --backend $be --no-unfused --reps 5 --dtypes f16,bf16 --ops '^attention_backward$' --cases "$cases" --json "$out/bwd-$be.json" 2>&1 | grep -E '^attention'
  done
  PYTHONUNBUFFERED=1 timeout 150 python3 - <<'PY'
import torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
def med(f):
    for _ in range(10): f()
    ts = []
    for _ in range(15):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(); f(); e1.record(); torch.cuda.synchronize(); ts.append(e0.elapsed_time(e1))
    ts.sort(); return ts[len(ts) // 2]
B, H, D = 4, 32, 128
for dt in (torch.float16, torch.bfloat16):
    for S, causal, p in ((1024, True, 0.0), (4096, False, 0.0), (4096, True, 0.0), (4096, True, 0.1)):
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=dt, requires_grad=True) for _ in range(3))
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            fw = med(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, dropout_p=p))
            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, dropout_p=p); g = torch.randn_like(o)
            bw = med(lambda: torch.autograd.grad(o, (q, k, v), g, retain_graph=True))
        print(f"torch-flash {str(dt)[6:]} S{S} causal={causal} p={p}: forward {fw:.3f} ms, backward {bw:.3f} ms", flush=True)
PY
  } | tee "$out/attn.txt"
else
  for t in test_attention test_dropout test_errors test_grad; do
    timeout 300 build/tests/$t --gtest_brief=1 > "$out/t.txt" 2>&1; rc=$?
    echo "$t rc=$rc $(grep -E 'PASSED|FAILED' "$out/t.txt" | head -3 | tr '\n' ' ')"; cat "$out/t.txt" >> "$out/gpu-tests.txt"
    grep -A10 "Failure" "$out/t.txt" | head -30
  done
  rm -f "$out/t.txt"
fi
date +%T
