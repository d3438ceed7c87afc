#!/usr/bin/env bash
# Session 10, fifth probe (H100): Vulkan bf16 products stored [K, N] on the tensor cores (a helper's change:
# columns as scaled f16): conformance of matmul, linear and linear_cross_entropy(_backward) with the
# validation layer, test_matmul_paths, then bf16 matmul 4096 and linear_cross_entropy at N 8192 in bf16
# against f16 on the same path.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
B=build/tools/kf-bench
{
date +%T
VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d timeout 200 build/tools/kf-conformance --backend vulkan --validation --filter '^(matmul|linear|linear_dropout|ffn|linear_cross_entropy|linear_cross_entropy_backward)$' --progress none 2>&1 | tail -12
VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d timeout 300 build/tests/test_matmul_paths --gtest_brief=1 2>&1 | tail -4
date +%T
$B --backend vulkan --no-unfused --reps 10 --size-mib 128 --dtypes f16,bf16 --ops '^(matmul|linear)$' --cases '^(4096|4096_bare)$' 2>&1 | grep -E '^(matmul|linear)'
$B --backend vulkan --no-unfused --reps 3 --size-mib 128 --dtypes f16,bf16 --ops '^linear_cross_entropy(_backward)?$' --json "$out/lce-vulkan.json" 2>&1 | grep -E '^linear'
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
