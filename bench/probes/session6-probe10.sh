#!/usr/bin/env bash
# Session 6, tenth probe (H100): gelu_tanh as x / (1 + exp(-2u)) (one exp, one division) instead of
# 0.5 x (1 + tanh_f(u)); conformance of the ops that use it on the GPU (Vulkan).
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
b=build/tools
bench() { local tag=$1; shift; echo "== $tag"; "$b/kf-bench" --reps 15 "$@" 2>&1 | tee -a "$out/probe.log" | grep -vE '^$|^op '; }
bench geltanh --backend vulkan --all-cases --dtypes f32,f16,bf16 --ops '^(gelu_tanh|bias_gelu_tanh)$'
export VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
"$b/kf-conformance" --backend vulkan --filter 'gelu_tanh|^linear$|^conv2d$' > "$out/conf.txt" 2>&1; echo "conformance rc=$?"; tail -1 "$out/conf.txt"
