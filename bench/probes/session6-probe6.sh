#!/usr/bin/env bash
# Session 6, sixth probe (H100): with the CUDA context held, the Vulkan cases that were short of their
# targets (long rows, cross_entropy, Philox + gelu in 16-bit, norm backward, group_norm), a tensor-core
# product and the attention forward at S = 4096: did any of them share the large-working-set effect?
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
b=build/tools
bench() { local tag=$1; shift; echo "== $tag"; "$b/kf-bench" --no-unfused --reps 20 "$@" 2>&1 | tee -a "$out/probe.log" | grep -vE '^$|^op '; }
bench short --backend vulkan --all-cases --dtypes f32,f16,bf16 --ops '^(softmax|layer_norm|rms_norm|add_rms_norm|cross_entropy|cross_entropy_backward|gelu_dropout|bias_gelu_dropout|layer_norm_backward|group_norm|mish_backward)$'
bench linalg --backend vulkan --dtypes f16 --ops '^linear$' --cases 4096
bench attn --backend vulkan --dtypes f16 --ops '^attention$' --cases 's4096'
