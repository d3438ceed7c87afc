#!/usr/bin/env bash
# Session 10, final long GPU tests (H100): test_attention and test_matmul_paths (each path forced), in parallel.
set -u
out=${OUT:-/tmp/final}; mkdir -p "$out"
export VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
date +%T
timeout 530 build/tests/test_attention --gtest_brief=1 > "$out/gpu-test_attention.txt" 2>&1 & a=$!
timeout 530 build/tests/test_matmul_paths --gtest_brief=1 > "$out/gpu-test_matmul_paths.txt" 2>&1 & m=$!
timeout 530 build/tests/test_grad --gtest_brief=1 > "$out/gpu-test_grad.txt" 2>&1 & g=$!
wait $a; echo "test_attention rc=$?"; wait $m; echo "test_matmul_paths rc=$?"; wait $g; echo "test_grad rc=$?"
tail -3 "$out"/gpu-test_*.txt
date +%T
