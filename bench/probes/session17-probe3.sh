#!/usr/bin/env bash
# Session 17, third probe (H100): attention's dropout bits drawn once per Philox block instead of once per
# element in the tensor-core passes (attention_dropout.glsl: the invocations holding a block's four keys
# each draw a share of the tile's blocks and trade the 4-bit masks by shuffles; 4x fewer generator calls)
# in the Vulkan forward (QUAD) and both backward passes. Predicted: the backward's S 4096 causal with
# dropout 25.1 ms (1.95x the plain causal time in session 16) -> 15-17 ms (1.2-1.35x); the forward's
# dropout case (new bench case) near its plain causal time. Both backends in the same call; the tests of
# the changed paths with the validation layer; the attention conformance with validation.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
for be in vulkan cuda; do
  timeout 150 build/tools/kf-bench --backend $be --no-unfused --reps 5 --dtypes f16,bf16 --ops '^attention$' --cases '^b4_h32_s4096_d128_causal(_dropout)?$' --json "$out/fwd-$be.json" 2>&1 | grep -E '^attention'
  timeout 200 build/tools/kf-bench --backend $be --no-unfused --reps 5 --dtypes f16,bf16 --ops '^attention_backward$' --cases '^b4_h32_s(1024_d128_causal|4096_d128|4096_d128_causal|4096_d128_causal_dropout)$' --json "$out/bwd-$be.json" 2>&1 | grep -E '^attention'
done
date +%T
timeout 240 build/tests/test_attention --gtest_filter='AttentionPaths.Backward*:AttentionPaths.CooperativeMatrixF16' 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)|Failure|Expected|Which|variant|error|max" | head -60
date +%T
timeout 120 build/tools/kf-conformance --backend vulkan --validation --filter '^attention' 2>&1 | tail -2
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
