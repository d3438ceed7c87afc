#!/usr/bin/env bash
# Session 7, sixth probe (H100), after the final runs: the helper's CUDA norm commit (fast math for the
# activations in 16-bit, 4 packs in registers for rows of 65536), merged after them: conformance of the
# norms on CUDA, test_norm on CUDA, and the norm timings against session7/final/kf-cuda-mb.txt.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
log="$out/probe.log"
{
date +%T
build/tools/kf-conformance --backend cuda --filter 'norm' --progress none 2>&1 | tail -30
KF_BACKEND=cuda timeout 120 build/tests/test_norm --gtest_brief=1 2>&1 | tail -3
build/tools/kf-bench --backend cuda --no-unfused --reps 15 --all-cases --dtypes f32,f16,bf16 --ops '^(layer_norm|rms_norm|add_layer_norm|add_rms_norm|layer_norm_gelu|layer_norm_silu|layer_norm_relu|rms_norm_gelu|rms_norm_silu|group_norm)$' 2>&1 | grep -E '^(copy|layer|rms|add|group)'
date +%T
} > "$log" 2>&1
cat "$log"
