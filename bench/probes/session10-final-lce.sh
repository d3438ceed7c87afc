#!/usr/bin/env bash
# Session 10, linear_cross_entropy (issue 4: N = 8192 tokens, d = 4096, 131072 classes; --size-mib 128 keeps
# 8192 rows in 16 bits): time on both kf backends, PyTorch eager and torch.compile on the same cases, and
# peak device memory against logits then cross_entropy (kf-lce-memory) on both backends.
set -u
out=${OUT:-/tmp/final}; mkdir -p "$out"
B=build/tools/kf-bench
log="$out/lce.log"
{
date +%T
for be in vulkan cuda; do
  $B --backend $be --no-unfused --reps 5 --size-mib 128 --dtypes f16,bf16 --ops '^linear_cross_entropy(_backward)?$' --json "$out/lce-$be.json" 2>&1 | grep -E '^(linear|copy)'
done
date +%T
PYTHONUNBUFFERED=1 timeout 240 python3 bench/torch_bench.py --modes eager,compile --dtypes f16,bf16 --ops '^linear_cross_entropy(_backward)?$' --cases-from "$out/lce-cuda.json" --reps 5 --out-dir "$out" 2>&1 | grep -E 'linear|torch-' | tail -12
date +%T
for be in vulkan cuda; do
  for dt in f16 bf16; do
    echo "== kf-lce-memory $be $dt"; KF_BACKEND=$be timeout 120 build/tools/kf-lce-memory --n 8192 --d 4096 --c 131072 --dtype $dt --reps 3 2>&1 | tail -8
  done
done
date +%T
} > "$log" 2>&1
cat "$log"
