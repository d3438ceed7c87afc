#!/usr/bin/env bash
# Session 16, first probe (H100): the QUAD form of the Vulkan tensor-core backward (attention_bwd_coopmat.comp:
# P and dS on the accumulators, 4 subgroups, 64 keys / 64 rows a workgroup, the next tile in registers).
# Predicted against the generic form (session 15: S 1024 causal 5.46 ms, S 4096 137 ms, causal 74.5 ms):
# 2.5-4x faster (no shared-memory round trip of S / dP, loads overlapped with the products, 16 warps an SM).
# Its tests with the validation layer, then kf-bench alternating it with the generic form (KF_TUNE
# attn_quad=1) twice, the CUDA backend on the same cases, the attention conformance with validation.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
cases='^b4_h32_s(1024_d128_causal|4096_d128|4096_d128_causal)$'
run() {  # $1: label, $2: backend, $3: KF_TUNE
  echo "== $1"
  KF_TUNE=$3 timeout 150 build/tools/kf-bench --backend $2 --no-unfused --reps 5 --dtypes f16 --ops '^attention_backward$' --cases "$cases" --json "$out/kf-$1.json" 2>&1 | grep -E '^attention'
}
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
timeout 200 build/tests/test_attention --gtest_filter='AttentionPaths.Backward*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)|Failure|Expected|Which|variant|error|max" | head -60
date +%T
for i in 1 2; do run quad$i vulkan ""; run generic$i vulkan attn_quad=1; done
run cuda cuda ""
date +%T
timeout 100 build/tools/kf-conformance --backend vulkan --validation --filter '^attention' 2>&1 | tail -2
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
