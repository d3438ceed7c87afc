#!/usr/bin/env bash
# Session 8, fourth probe (H100): Vulkan long rows (65536 features): two passes (rows_coop=1), one pass with
# workgroups sharing a row (=2, default; 16-bit rows cached raw), one pass with a float cache (=3);
# conformance of the norms and softmax, test_norm on the GPU.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
B=build/tools/kf-bench
log="$out/probe.log"
OPS='^(layer_norm|rms_norm|add_layer_norm|add_rms_norm|layer_norm_gelu|softmax|log_softmax|group_norm)$'
{
date +%T
for k in 1 2 3; do
echo "== rows_coop=$k"
KF_TUNE=rows_coop=$k $B --backend vulkan --no-unfused --reps 15 --dtypes f32,f16,bf16 --ops "$OPS" --all-cases 2>&1 | grep -E '^(copy|[a-z_]+ +rows65536|[a-z_]+ +n128)'
done
KF_PIPELINE_STATS=1 $B --backend vulkan --no-unfused --reps 3 --dtypes f16,f32 --ops '^(layer_norm|softmax)$' --all-cases 2>&1 | grep -i -E "pipeline-stats (norm|rows)" | head -20
date +%T
build/tools/kf-conformance --backend vulkan --filter "$OPS" --progress none 2>&1 | tail -30
timeout 300 build/tests/test_norm --gtest_brief=1 2>&1 | tail -5
date +%T
} > "$log" 2>&1
cat "$log"
