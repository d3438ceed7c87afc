#!/usr/bin/env bash
# Session 11, after the cluster kernels' three launch sites became one (common.cuh launch_on_clusters): the
# cluster tests and the CUDA conformance of their ops, then their timings over long rows (variants must
# still say cluster=P).
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
B=build/tools/kf-bench
{
date +%T
timeout 200 build/tests/test_norm --gtest_filter='*CudaClusterRows*' --gtest_brief=1 2>&1 | tail -3
timeout 200 build/tests/test_training --gtest_filter='*CudaCrossEntropyClusterRows*' --gtest_brief=1 2>&1 | tail -3
timeout 200 build/tools/kf-conformance --backend cuda --filter '^(layer_norm|rms_norm|layer_norm_(relu|gelu|silu)|rms_norm_(gelu|silu)|add_layer_norm|add_rms_norm|softmax|log_softmax|cross_entropy|cross_entropy_backward)$' --progress none 2>&1 | tail -2
$B --backend cuda --no-unfused --reps 15 --dtypes f32,f16,bf16 --ops '^(layer_norm|rms_norm|add_rms_norm|softmax|cross_entropy_backward)$' --all-cases 2>&1 | grep -E 'rows65536|c131072|bandwidth \(' | cut -c1-170
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
