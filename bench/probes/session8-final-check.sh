#!/usr/bin/env bash
# Session 8, final checks (H100): kf-conformance on vulkan and cuda, then the GPU test suites of what this
# session touched (norms, training, gradients, linear algebra paths, attention, errors).
set -u
out=${OUT:-/tmp/final}; mkdir -p "$out"
b=build/tools
export VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
date +%T; "$b/kf-conformance" --backend vulkan,cuda --json "$out/conf.json" > "$out/conf.txt" 2>&1; echo "conformance rc=$?"; tail -1 "$out/conf.txt"; grep -E ' fail ' "$out/conf.txt" | head
date +%T
for t in test_norm test_training test_grad test_errors test_matmul_paths test_linalg test_attention; do timeout 120 build/tests/$t --gtest_brief=1 > "$out/t.txt" 2>&1; rc=$?; echo "$t rc=$rc $(grep -E 'PASSED|FAILED' "$out/t.txt" | head -3 | tr '\n' ' ')"; cat "$out/t.txt" >> "$out/gpu-tests.txt"; done
rm -f "$out/t.txt"
date +%T
