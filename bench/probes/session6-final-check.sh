#!/usr/bin/env bash
# Session 6, final checks (H100): kf-conformance on vulkan and cuda, the GPU test suites of what this
# session touched (attention decode, norms, training, gradients, errors), then torch.compile on the
# memory-bound cases (kf-vulkan-mb.json of the previous call, carried in the tree).
set -u
out=${OUT:-/tmp/final}; mkdir -p "$out"
b=build/tools
export VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
date +%T; "$b/kf-conformance" --backend vulkan,cuda --json "$out/conf.json" > "$out/conf.txt" 2>&1; echo "conformance rc=$?"; tail -1 "$out/conf.txt"; grep -E ' fail ' "$out/conf.txt" | head
date +%T
for t in test_attention test_norm test_training test_grad test_errors; do timeout 70 build/tests/$t --gtest_brief=1 > "$out/t.txt" 2>&1; rc=$?; echo "$t rc=$rc $(grep -E 'PASSED|FAILED' "$out/t.txt" | head -3 | tr '\n' ' ')"; cat "$out/t.txt" >> "$out/gpu-tests.txt"; done
rm -f "$out/t.txt"
date +%T
