#!/usr/bin/env bash
# Session 8, second probe (H100): Vulkan cross_entropy_backward: cached chunks (xent_stream=1), streamed
# statistics + streamed gradient (=2), row in registers where it fits (=3, the default); and torch on them.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
B=build/tools/kf-bench
log="$out/probe.log"
{
date +%T
for k in 1 2 3; do
echo "== vulkan cross_entropy_backward xent_stream=$k"
KF_TUNE=xent_stream=$k $B --backend vulkan --no-unfused --reps 20 --dtypes f16,bf16,f32 --ops '^cross_entropy(_backward)?$' --all-cases 2>&1 | grep -E '^(copy|cross)'
done
KF_PIPELINE_STATS=1 $B --backend vulkan --no-unfused --reps 3 --dtypes f16,f32 --ops '^cross_entropy_backward$' 2>&1 | grep -i -E "pipeline-stats loss" | head -20
build/tools/kf-conformance --backend vulkan --filter '^cross_entropy' --progress none 2>&1 | tail -8
date +%T
} > "$log" 2>&1
cat "$log"
