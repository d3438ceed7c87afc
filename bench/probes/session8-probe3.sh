#!/usr/bin/env bash
# Session 8, third probe (H100): CUDA flash-mma with 16 (default) and 32 query rows per warp (a helper's
# spill-free form, 254 registers at D 128), then PyTorch's FlashAttention-2 on the same cases; the CUDA
# attention tests and conformance.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
B=build/tools/kf-bench
log="$out/probe.log"
{
date +%T
for r in 16 32; do
  echo "== attn_rows_per_warp=$r"
  KF_TUNE=attn_rows_per_warp=$r $B --backend cuda --no-unfused --reps 10 --size-mib 128 --dtypes f16,bf16 --ops '^attention$' --all-cases --json "$out/attn$r.json" 2>&1 | grep -E '^attention'
done
date +%T
PYTHONUNBUFFERED=1 timeout 200 python3 bench/torch_attention.py --cases-from "$out/attn32.json" --backends flash --out-dir "$out" 2>&1 | grep -vE '^\s*$' | tail -16
date +%T
KF_BACKEND=cuda timeout 200 build/tests/test_attention --gtest_brief=1 2>&1 | tail -4
build/tools/kf-conformance --backend cuda --filter '^attention' --progress none 2>&1 | tail -8
date +%T
} > "$log" 2>&1
cat "$log"
