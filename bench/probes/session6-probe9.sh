#!/usr/bin/env bash
# Session 6, ninth probe (H100): the merged CUDA norm backward (fused kernel) and cross_entropy: timings,
# conformance of the touched ops, and the CUDA runs of test_norm, test_training, test_grad.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
b=build/tools
bench() { local tag=$1; shift; echo "== $tag"; "$b/kf-bench" --no-unfused --reps 20 "$@" 2>&1 | tee -a "$out/probe.log" | grep -vE '^$|^op '; }
bench cuda --backend cuda --all-cases --dtypes f32,f16,bf16 --ops '^(layer_norm_backward|rms_norm_backward|cross_entropy|cross_entropy_backward)$'
export VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
"$b/kf-conformance" --backend cuda --filter 'norm_backward|cross_entropy' > "$out/conf.txt" 2>&1; echo "conformance rc=$?"; grep -E 'fail|FAIL|PASS' "$out/conf.txt" | tail -8
for t in test_norm test_training test_grad; do KF_BACKEND=cuda timeout 150 build/tests/$t > "$out/$t.txt" 2>&1; echo "$t rc=$?"; grep -E 'FAILED|PASSED' "$out/$t.txt" | head -5; done
