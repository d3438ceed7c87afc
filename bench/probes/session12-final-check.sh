#!/usr/bin/env bash
# Session 12, final checks (H100): kf-conformance on vulkan and cuda with the validation layer, then the
# GPU test suites of what this session touched (attention: the decode kernels' reduce-scatter form on both
# backends; linear algebra: the CUDA products' epilogue kernel), each with a time limit.
set -u
out=${OUT:-/tmp/final}; mkdir -p "$out"
b=build/tools
export VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T; "$b/kf-conformance" --backend vulkan,cuda --validation --json "$out/conf.json" > "$out/conf.txt" 2>&1; echo "conformance rc=$?"; tail -1 "$out/conf.txt"; grep -E ' fail ' "$out/conf.txt" | head
gzip -f "$out/conf.json"
date +%T
for t in test_attention test_linalg test_errors; do timeout 200 build/tests/$t --gtest_brief=1 > "$out/t.txt" 2>&1; rc=$?; echo "$t rc=$rc $(grep -E 'PASSED|FAILED' "$out/t.txt" | head -3 | tr '\n' ' ')"; cat "$out/t.txt" >> "$out/gpu-tests.txt"; done
rm -f "$out/t.txt"
date +%T
