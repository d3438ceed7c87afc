#!/usr/bin/env bash
# Session 9: test_attention on the H100 again after its expectation of flash-mma's default form was updated.
set -u
out=${OUT:-/tmp/final}; mkdir -p "$out"
export VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
date +%T
timeout 500 build/tests/test_attention --gtest_brief=1 > "$out/gpu-test_attention.txt" 2>&1; echo "test_attention rc=$?"
grep -E "PASSED|FAILED|SKIPPED" "$out/gpu-test_attention.txt" | head
date +%T
