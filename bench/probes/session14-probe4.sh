#!/usr/bin/env bash
# Session 14, fourth and fifth probes (H100): flash-wgmma on head dimensions between the native ones (D = 96, zero-padded
# to 128) against the kernel that served them before (flash-wmma-regs, KF_TUNE attn_wmma=regs), with D = 128
# for reference, PyTorch in the same call; then the CUDA attention tests and the CUDA conformance.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build
run() {  # $1: label, $2: KF_TUNE
  echo "== $1"
  KF_TUNE=$2 build/tools/kf-bench --backend cuda --no-unfused --reps 15 --dtypes f16,bf16 --ops '^attention$' --cases '^b4_h(32_s4096_d(96_causal|128)|16_s4096_d256_causal)$' --json "$out/kf-$1.json" 2>&1 | grep -E '^attention'
}
{
nvidia-smi --query-gpu=name,driver_version --format=csv
date +%T
for i in 1 2; do run regs$i attn_wmma=regs; run wgmma$i ""; done
PYTHONUNBUFFERED=1 timeout 120 python3 bench/torch_attention.py --cases-from "$out/kf-wgmma1.json" --backends flash,cudnn --out-dir "$out" > "$out/torch-attention.log" 2>&1; echo "torch attention rc=$?"
grep -E 'b4_h32' "$out/torch-attention.log"
date +%T
timeout 250 build/tests/test_attention --gtest_filter='AttentionCuda.*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)|Failure|wanted|Expected|Which|variant" | head -60
date +%T
timeout 200 build/tools/kf-conformance --backend cuda 2>&1 | tail -2
date +%T
} > "$out/probe.log" 2>&1
rm -f "$out"/*.json
tail -45 "$out/probe.log"
