#!/usr/bin/env bash
# Session 7, first probe (H100): the session's first changes against their previous forms in one call.
#  1. Vulkan f16 cross_entropy: raw packs + half max (default) vs floats (KF_TUNE xent_floats=1).
#  2. Vulkan layer/rms_norm_backward (layer: one reduction per row about a shift), every dtype.
#  3. CUDA products: cuBLASLt candidates timed (default) vs the heuristic's first (mm_autotune=1), and
#     PyTorch eager on the same cases in the same call.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
B=build/tools/kf-bench
log="$out/probe.log"
{
date +%T
echo "== 1. vulkan cross_entropy f16: floats (old) then half-max (new)"
KF_TUNE=xent_floats=1 $B --backend vulkan --no-unfused --reps 20 --dtypes f16 --ops '^cross_entropy(_backward)?$' --all-cases 2>&1 | grep -E '^(copy|cross)'
$B --backend vulkan --no-unfused --reps 20 --dtypes f16,bf16,f32 --ops '^cross_entropy(_backward)?$' --all-cases 2>&1 | grep -E '^(copy|cross)'
date +%T
echo "== 2. vulkan norm backward (layer: one reduction)"
$B --backend vulkan --no-unfused --reps 20 --dtypes f32,f16,bf16 --ops '^(layer|rms)_norm_backward$' 2>&1 | grep -E '^(copy|layer|rms)'
date +%T
echo "== 3. cuda products: heuristic's first (old) then timed candidates (new)"
KF_TUNE=mm_autotune=1 $B --backend cuda --no-unfused --reps 20 --dtypes f16,bf16 --ops '^(linear|matmul|ffn|ffn_swiglu)$' --all-cases --json "$out/cuda-mm-first.json" 2>&1 | grep -E '^(copy|linear|matmul|ffn)'
$B --backend cuda --no-unfused --reps 20 --dtypes f16,bf16 --ops '^(linear|matmul|ffn|ffn_swiglu)$' --all-cases --json "$out/cuda-mm.json" 2>&1 | grep -E '^(copy|linear|matmul|ffn)'
date +%T
echo "== torch eager, same cases"
PYTHONUNBUFFERED=1 timeout 200 python3 bench/torch_bench.py --modes eager --dtypes f16,bf16 --ops '^(linear|matmul)$' --cases-from "$out/cuda-mm.json" --reps 20 --out-dir "$out" 2>&1 | tail -14
PYTHONUNBUFFERED=1 timeout 200 python3 bench/torch_linalg.py --cases-from "$out/cuda-mm.json" --out-dir "$out" 2>&1 | tail -8
date +%T
} > "$log" 2>&1
cat "$log"
