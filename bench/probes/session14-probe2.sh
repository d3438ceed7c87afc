#!/usr/bin/env bash
# Session 14, second probe (H100): the CUDA attention forward on the new warpgroup kernel (flash-wgmma,
# hal/cuda/attention_wgmma.cu, the default on sm_90) against flash-mma (KF_TUNE attn_wmma=mma) in the same
# build and call, alternated twice; PyTorch's FlashAttention-2 and cuDNN backends in the same call; then
# the CUDA attention tests and the attention conformance on the GPU.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build
run() {  # $1: label, $2: KF_TUNE
  echo "== $1"
  KF_TUNE=$2 build/tools/kf-bench --backend cuda --no-unfused --reps 15 --dtypes f16,bf16 --ops '^attention$' --cases '^b4_h32_s(1024|4096|16384)_d128(_causal)?$' --json "$out/kf-$1.json" 2>&1 | grep -E '^attention'
}
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
for i in 1 2; do run mma$i attn_wmma=mma; run wgmma$i ""; done
date +%T
PYTHONUNBUFFERED=1 timeout 200 python3 bench/torch_attention.py --cases-from "$out/kf-wgmma1.json" --backends flash,cudnn --out-dir "$out" > "$out/torch-attention.log" 2>&1; echo "torch attention rc=$?"
grep -E 'b4_h32' "$out/torch-attention.log"
date +%T
timeout 250 build/tests/test_attention --gtest_filter='AttentionCuda.*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)|Failure|wanted|Expected|Which|variant" | head -60
date +%T
timeout 120 build/tools/kf-conformance --backend cuda --filter '^attention' 2>&1 | tail -3
date +%T
} > "$out/probe.log" 2>&1
rm -f "$out"/*.json
tail -60 "$out/probe.log"
