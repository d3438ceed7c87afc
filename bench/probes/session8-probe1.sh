#!/usr/bin/env bash
# Session 8, first probe (H100): Vulkan cross_entropy forward streamed (PASS 5, default) against the cached
# chunks (KF_TUNE xent_stream=1) in one call; conformance of cross_entropy on the GPU.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
B=build/tools/kf-bench
log="$out/probe.log"
{
date +%T
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== vulkan cross_entropy: cached chunks (old)"
KF_TUNE=xent_stream=1 $B --backend vulkan --no-unfused --reps 20 --dtypes f16,bf16,f32 --ops '^cross_entropy(_backward)?$' --all-cases 2>&1 | grep -E '^(copy|cross)'
echo "== vulkan cross_entropy: streamed (new)"
$B --backend vulkan --no-unfused --reps 20 --dtypes f16,bf16,f32 --ops '^cross_entropy(_backward)?$' --all-cases 2>&1 | grep -E '^(copy|cross)'
echo "== cuda cross_entropy (reference on the same GPU)"
$B --backend cuda --no-unfused --reps 20 --dtypes f16,bf16,f32 --ops '^cross_entropy(_backward)?$' --all-cases 2>&1 | grep -E '^(copy|cross)'
date +%T
echo "== conformance"
build/tools/kf-conformance --backend vulkan --filter '^cross_entropy' --progress none 2>&1 | tail -8
KF_PIPELINE_STATS=1 $B --backend vulkan --no-unfused --reps 3 --dtypes f16 --ops '^cross_entropy$' 2>&1 | grep -i -E "loss|regist" | head -20
date +%T
} > "$log" 2>&1
cat "$log"
