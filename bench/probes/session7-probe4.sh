#!/usr/bin/env bash
# Session 7, fourth probe (H100): the CUDA fused norm backward with its column sums in registers and one
# block sum per row for layer norm (was: f32 layer 0.84, rms 0.89; 16-bit layer 0.73-0.74, rms 0.80),
# its conformance and test_norm on the CUDA device.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
B=build/tools/kf-bench
log="$out/probe.log"
{
date +%T
$B --backend cuda --no-unfused --reps 20 --dtypes f32,f16,bf16 --ops '^(layer|rms)_norm_backward$' 2>&1 | grep -E '^(layer|rms)'
build/tools/kf-conformance --backend cuda --filter 'norm_backward' --progress none 2>&1 | tail -12
KF_BACKEND=cuda timeout 120 build/tests/test_norm --gtest_brief=1 2>&1 | tail -3
date +%T
} > "$log" 2>&1
cat "$log"
