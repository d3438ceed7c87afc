#!/usr/bin/env bash
# Session 16, sixth probe (H100): bf16 on the QUAD backward (f16 copies of q, k, v, do times powers of two;
# dS times a power of two from its bound; P times 4096 in both dtypes), and the merged f16 form (probe 5's
# fastest: S 4096 23.05 ms, causal 12.45, S 1024 causal 1.05). Predicted: bf16 within 10 % of f16 (the four
# conversions stream 4 x 134 MB at S 4096: about 0.2 ms), f16 unchanged. Tests (validation on), the
# attention conformance with validation, then kf-bench f16 and bf16 on Vulkan and CUDA, alternated twice.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
cases='^b4_h32_s(1024_d128_causal|4096_d128|4096_d128_causal)$'
run() {  # $1: label, $2: backend
  echo "== $1"
  timeout 150 build/tools/kf-bench --backend $2 --no-unfused --reps 5 --dtypes f16,bf16 --ops '^attention_backward$' --cases "$cases" --json "$out/kf-$1.json" 2>&1 | grep -E '^attention'
}
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
KF_PIPELINE_STATS=1 timeout 60 build/tools/kf-bench --backend vulkan --no-unfused --reps 1 --dtypes f16,bf16 --ops '^attention_backward$' --cases '^b4_h32_s1024_d128_causal$' 2>&1 | grep -E "pipeline-stats.*attn_bwd_cmq" | sed 's/:0:128:16:16:1:[0-9:]*//' | sort -u
timeout 300 build/tests/test_attention --gtest_filter='AttentionPaths.Backward*:AttentionErrors.*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)|Failure|Expected|Which|variant|error|max|vulkan" | head -60
date +%T
timeout 150 build/tools/kf-conformance --backend vulkan --validation --filter '^attention' 2>&1 | tail -3
date +%T
for i in 1 2; do run vulkan$i vulkan; done
run cuda cuda
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
