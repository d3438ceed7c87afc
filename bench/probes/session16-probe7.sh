#!/usr/bin/env bash
# Session 16, seventh probe (H100): dropout, soft-capping and ALiBi in the QUAD backward (P Z and dS on the
# accumulators, the keep bits from the same Philox index as the forward; instances of their own through the
# specialization constants, so the plain ones should not change). Predicted: causal dropout 0.1 at S 4096
# on the tensor cores instead of the portable passes, about 1.4x the plain causal time (the CUDA kernel's
# ratio: 11.3 / 7.6); f16 and bf16 plain unchanged (23.2 / 24.3 ms at S 4096). Tests (validation on), the
# attention conformance on Vulkan with validation, kf-bench on the four backward cases, Vulkan and CUDA.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
cases='^b4_h32_s(1024_d128_causal|4096_d128|4096_d128_causal|4096_d128_causal_dropout)$'
run() {  # $1: label, $2: backend
  echo "== $1"
  timeout 200 build/tools/kf-bench --backend $2 --no-unfused --reps 5 --dtypes f16,bf16 --ops '^attention_backward$' --cases "$cases" --json "$out/kf-$1.json" 2>&1 | grep -E '^attention'
}
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
KF_PIPELINE_STATS=1 timeout 60 build/tools/kf-bench --backend vulkan --no-unfused --reps 1 --dtypes f16 --ops '^attention_backward$' --cases '^b4_h32_s4096_d128_causal(_dropout)?$' 2>&1 | grep -E "pipeline-stats.*attn_bwd_cmq" | sed 's/:0:128:16:16:1:[0-9:]*//' | sort -u
timeout 300 build/tests/test_attention --gtest_filter='AttentionPaths.Backward*:AttentionErrors.*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)|Failure|Expected|Which|variant|error|max|vulkan" | head -60
date +%T
timeout 150 build/tools/kf-conformance --backend vulkan --validation --filter '^attention' 2>&1 | tail -3
date +%T
run vulkan vulkan
run cuda cuda
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
