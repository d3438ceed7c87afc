#!/usr/bin/env bash
# Session 6, eleventh probe (H100): the Vulkan fused norm backward (helper's vk-normbwd, norm_bwd.comp
# PASS 3/4) against the previous column pass (KF_TUNE normbwd_cols=1), conformance and tests on the GPU.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
b=build/tools
bench() { local tag=$1; shift; echo "== $tag"; "$b/kf-bench" --no-unfused --reps 15 "$@" 2>&1 | tee -a "$out/probe.log" | grep -vE '^$|^op '; }
bench fused --backend vulkan --dtypes f32,f16,bf16 --ops '^(layer_norm_backward|rms_norm_backward)$'
KF_TUNE=normbwd_cols=1 bench cols1 --backend vulkan --dtypes f32,f16 --ops '^(layer_norm_backward|rms_norm_backward)$'
export VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
"$b/kf-conformance" --backend vulkan --filter 'norm_backward' > "$out/conf.txt" 2>&1; echo "conformance rc=$?"; tail -1 "$out/conf.txt"
for t in test_norm test_grad; do timeout 100 build/tests/$t --gtest_brief=1 > "$out/$t.txt" 2>&1; echo "$t rc=$? $(grep -E 'PASSED|FAILED' "$out/$t.txt" | head -3 | tr '\n' ' ')"; done
