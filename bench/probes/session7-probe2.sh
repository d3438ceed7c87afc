#!/usr/bin/env bash
# Session 7, second probe (H100):
#  1. Vulkan fused norm backward, packs per invocation 4 (default) / 2 / 1 (KF_TUNE normbwd_packs): is the
#     16-bit layer_norm_backward occupancy-bound (33 KB of shared memory and 4 warps a workgroup)?
#  2. Vulkan cross_entropy with four independent chains for the row statistics (was 0.652 / 0.711 / 0.916).
#  3. CUDA products with the epilogue by packs, then torch eager on the same cases.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
B=build/tools/kf-bench
log="$out/probe.log"
{
date +%T
for p in 4 2 1; do
  echo "== 1. normbwd_packs=$p"
  KF_TUNE=normbwd_packs=$p $B --backend vulkan --no-unfused --reps 20 --dtypes f32,f16,bf16 --ops '^(layer|rms)_norm_backward$' 2>&1 | grep -E '^(layer|rms)'
done
for p in 2 1; do KF_PIPELINE_STATS=1 KF_TUNE=normbwd_packs=$p $B --backend vulkan --no-unfused --reps 5 --dtypes f16 --ops '^layer_norm_backward$' 2>&1 | grep 'pipeline-stats normbwd' | head -8; done
date +%T
echo "== 2. vulkan cross_entropy, four chains"
$B --backend vulkan --no-unfused --reps 20 --dtypes f16,bf16,f32 --ops '^cross_entropy(_backward)?$' --all-cases 2>&1 | grep -E '^(cross)'
date +%T
echo "== 3. cuda products, epilogue by packs"
$B --backend cuda --no-unfused --reps 20 --dtypes f16,bf16 --ops '^(linear|linear_dropout|matmul|ffn|ffn_swiglu|conv2d_bn_relu|conv2d_gelu_dropout)$' --all-cases --json "$out/cuda-mm.json" 2>&1 | grep -E '^(copy|linear|matmul|ffn|conv)'
date +%T
PYTHONUNBUFFERED=1 timeout 200 python3 bench/torch_bench.py --modes eager --dtypes f16,bf16 --ops '^(linear|matmul)$' --cases-from "$out/cuda-mm.json" --reps 20 --out-dir "$out" 2>&1 | grep -E '^(linear|matmul)'
PYTHONUNBUFFERED=1 timeout 200 python3 bench/torch_linalg.py --cases-from "$out/cuda-mm.json" --out-dir "$out" 2>&1 | grep -E '^(ffn|conv)'
date +%T
} > "$log" 2>&1
cat "$log"
