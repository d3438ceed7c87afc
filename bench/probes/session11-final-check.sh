#!/usr/bin/env bash
# Session 11, final checks (H100): kf-conformance on vulkan and cuda with the validation layer, then the
# GPU test suites of what this session touched (norms, training, errors, linear algebra incl. the
# convolutions, attention), each with a time limit.
set -u
out=${OUT:-/tmp/final}; mkdir -p "$out"
b=build/tools
export VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
date +%T; "$b/kf-conformance" --backend vulkan,cuda --validation --json "$out/conf.json" > "$out/conf.txt" 2>&1; echo "conformance rc=$?"; tail -1 "$out/conf.txt"; grep -E ' fail ' "$out/conf.txt" | head
date +%T
for t in test_norm test_training test_errors test_linalg; do timeout 100 build/tests/$t --gtest_brief=1 > "$out/t.txt" 2>&1; rc=$?; echo "$t rc=$rc $(grep -E 'PASSED|FAILED' "$out/t.txt" | head -3 | tr '\n' ' ')"; cat "$out/t.txt" >> "$out/gpu-tests.txt"; done
rm -f "$out/t.txt"
date +%T
# adamw_step / sgd_step with the second moment drawn non-negative (OpDef::nonneg_inputs), both backends.
for be in vulkan cuda; do build/tools/kf-bench --backend $be --no-unfused --reps 15 --dtypes f32,f16,bf16 --ops '^(adamw_step|sgd_step|batch_norm_relu)$' 2>&1 | grep -E '^(adamw|sgd|batch)|bandwidth \(' | sed "s/^/$be: /"; done
date +%T
