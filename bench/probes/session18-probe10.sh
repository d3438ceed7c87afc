#!/usr/bin/env bash
# Session 18, tenth probe (H100), after the second review: one wgmma_unavailable() gives the forward's and the
# backward's warpgroup refusal reasons (build, compute capability), and one launcher serves both backward forms.
# The CUDA attention tests (which assert the refusal reasons and the variants) and the attention conformance.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build
{
nvidia-smi --query-gpu=name,driver_version --format=csv
timeout 200 build/tests/test_attention --gtest_filter='AttentionCuda.*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)|Failure|Expected|variant|relative" | head -30
timeout 120 build/tools/kf-conformance --backend cuda --filter '^attention' 2>&1 | tail -1
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
