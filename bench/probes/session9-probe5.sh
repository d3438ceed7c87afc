#!/usr/bin/env bash
# Session 9, fifth probe (H100): CUDA flash-mma with the max as fmaxf and conditional rescaling (m moves
# only when a step's max exceeds it by 2^8), against PyTorch's FlashAttention-2 in the same call; the
# CUDA depthwise kernel with 32-bit tile and plane divisions, and Nsight Compute on it; CUDA tests.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
B=build/tools/kf-bench
NCU=/usr/local/cuda/bin/ncu
log="$out/probe.log"
{
date +%T
$B --backend cuda --no-unfused --reps 10 --size-mib 128 --dtypes f16,bf16 --ops '^attention$' --all-cases --json "$out/attn.json" 2>&1 | grep -E '^attention'
PYTHONUNBUFFERED=1 timeout 200 python3 bench/torch_attention.py --cases-from "$out/attn.json" --backends flash --out-dir "$out" 2>&1 | grep -vE '^\s*$' | tail -16
timeout 100 $NCU --kernel-name regex:attn_mma --launch-skip 3 --launch-count 1 --section InstructionStats --section SpeedOfLight \
  $B --backend cuda --no-unfused --reps 3 --warmup 1 --warmup-ms 0 --dtypes f16 --ops '^attention$' --cases 's4096_d128$' 2>&1 | grep -E "Executed Instructions  |Duration|attn_mma"
date +%T
echo "== depthwise"
$B --backend cuda --no-unfused --reps 20 --dtypes f16,bf16,f32 --ops '^(conv2d|depthwise_pointwise)$' --cases mobilenet --json "$out/dw-cuda.json" 2>&1 | grep -E '^(copy|conv|depth)'
timeout 100 $NCU --kernel-name regex:conv_depthwise --launch-skip 3 --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats \
  --section InstructionStats --section WarpStateStats --section MemoryWorkloadAnalysis --print-details all \
  $B --backend cuda --no-unfused --reps 3 --warmup 1 --warmup-ms 0 --dtypes f16 --ops '^conv2d$' --cases 'mobilenet_dw' > "$out/ncu-dw.txt" 2>&1; echo "ncu rc=$?"
timeout 100 $NCU --kernel-name regex:conv_depthwise --launch-skip 3 --launch-count 1 --section SourceCounters --page source --print-source sass --csv \
  $B --backend cuda --no-unfused --reps 3 --warmup 1 --warmup-ms 0 --dtypes f16 --ops '^conv2d$' --cases 'mobilenet_dw' > "$out/ncu-dw.csv" 2>&1; echo "ncu rc=$?"
date +%T
KF_BACKEND=cuda timeout 200 build/tests/test_attention --gtest_brief=1 2>&1 | tail -3
timeout 200 build/tools/kf-conformance --backend cuda --filter '^(attention|conv2d|depthwise_pointwise|conv2d_bn_relu|conv2d_gelu_dropout)$' --progress none 2>&1 | tail -8
date +%T
} > "$log" 2>&1
cat "$log"
