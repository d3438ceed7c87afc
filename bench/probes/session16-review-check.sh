#!/usr/bin/env bash
# Session 16, after the review (H100): attention's dropout bit moved into philox.glsl (philox_keep2d) for the
# forward, the portable backward and the tensor-core backward (the same arithmetic; expected: the same bits,
# the same times). The Vulkan attention tests with the validation layer, test_dropout, the attention
# conformance on vulkan and cuda with it, and the backward's dropout case against probe 7 (25.0 ms).
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
timeout 300 build/tests/test_attention --gtest_brief=1 --gtest_filter='AttentionPaths.*' 2>&1 | grep -E "PASSED|FAILED|Failure" | head -20
timeout 100 build/tests/test_dropout --gtest_brief=1 2>&1 | grep -E "PASSED|FAILED|Failure" | head
date +%T
timeout 200 build/tools/kf-conformance --backend vulkan,cuda --validation --filter '^attention' 2>&1 | tail -1
timeout 100 build/tools/kf-bench --backend vulkan --no-unfused --reps 5 --dtypes f16 --ops '^attention_backward$' --cases '^b4_h32_s4096_d128_causal(_dropout)?$' 2>&1 | grep -E '^attention'
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
