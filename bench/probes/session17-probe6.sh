#!/usr/bin/env bash
# Session 17, sixth probe (H100), after the review: philox.glsl's block lookup shared by philox_keep2d and
# philox_keep4 (philox_block2d), which changed the SPIR-V of the attention shaders. The Vulkan attention
# paths with dropout: the dropout-mask tests (bit for bit), the tensor-core forward and backward tests, and
# the attention conformance on Vulkan with the validation layer; the backward's dropout timing once more.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
timeout 250 build/tests/test_attention --gtest_filter='AttentionPaths.DropoutMask*:AttentionPaths.CooperativeMatrixF16:AttentionPaths.BackwardCooperativeMatrix' 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)|Failure|Expected|Which|variant|error" | head -40
date +%T
timeout 100 build/tools/kf-conformance --backend vulkan --validation --filter '^attention' 2>&1 | tail -1
timeout 100 build/tools/kf-bench --backend vulkan --no-unfused --reps 5 --dtypes f16 --ops '^attention(_backward)?$' --cases '^b4_h32_s4096_d128_causal(_dropout)?$' 2>&1 | grep -E '^attention'
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
