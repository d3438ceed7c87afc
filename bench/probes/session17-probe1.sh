#!/usr/bin/env bash
# Session 17, first probe (H100): the Vulkan tensor-core forward with K and V fragments assembled from
# 32-bit shared-memory words (attention_coopmat.comp FRAGW, variant _w8f: K staged transposed with key
# pairs in a word) against coopMatLoadNV's fragments (_w8, session 7-16's default), alternated twice.
# Predicted: -10 to -20 % time at S >= 4096 (f16 S 4096: 6.7 -> 5.6-6.0 ms): the probe of session 9 read
# 277 -> 345 TFLOP/s with word-built fragments, and this kernel is bound by its fragment loads.
# Also: the f16 layout found (KF_COOPMAT_LAYOUT), registers (KF_PIPELINE_STATS), the forward's tests with
# the validation layer, the attention conformance on Vulkan with validation.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
cases='^b4_h32_s(1024|4096|16384)_d128(_causal)?$'
run() {  # $1: label, $2: KF_TUNE
  echo "== $1"
  KF_TUNE=$2 timeout 200 build/tools/kf-bench --backend vulkan --no-unfused --reps 5 --dtypes f16,bf16 --ops '^attention$' --cases "$cases" --json "$out/kf-$1.json" 2>&1 | grep -E '^attention'
}
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
KF_COOPMAT_LAYOUT=1 KF_PIPELINE_STATS=1 timeout 60 build/tools/kf-bench --backend vulkan --no-unfused --reps 2 --dtypes f16 --ops '^attention$' --cases '^b4_h32_s1024_d128$' 2>&1 | grep -E "lane  [0-9]:|attn_cmq|Register|Local|^attention" | head -40
KF_TUNE=attn_cm=2 KF_PIPELINE_STATS=1 timeout 60 build/tools/kf-bench --backend vulkan --no-unfused --reps 2 --dtypes f16 --ops '^attention$' --cases '^b4_h32_s1024_d128$' 2>&1 | grep -E "attn_cmq|Register|Local|^attention" | head -20
date +%T
timeout 250 build/tests/test_attention --gtest_filter='AttentionPaths.CooperativeMatrixF16' 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)|Failure|Expected|Which|variant|error|max" | head -60
date +%T
for i in 1 2; do run w8f$i ""; run w8$i attn_cm=2; done
date +%T
timeout 150 build/tools/kf-conformance --backend vulkan --validation --filter '^attention' 2>&1 | tail -2
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
