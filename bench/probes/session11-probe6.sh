#!/usr/bin/env bash
# Session 11, sixth probe (H100): the CUDA decode kernel's query heads a block on the GQA decode cases
# (B 4, H 32, 8 kv heads: automatic 4 heads a block, 168 registers, 3 blocks an SM; KF_TUNE
# attn_decode_heads caps it at 1 / 2: K and V read once per chunk of heads), against Vulkan in the same
# call, then the CUDA attention conformance with 2 heads a block.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
B=build/tools/kf-bench
{
date +%T
for h in 0 2 1 0 2; do
  echo "== attn_decode_heads=$h"
  KF_TUNE=$([ $h = 0 ] && echo "" || echo "attn_decode_heads=$h") $B --backend cuda --no-unfused --reps 20 --size-mib 128 --dtypes f16,bf16 --ops '^attention$' --cases '^decode_' 2>&1 | grep -E '^attention'
done
echo "== vulkan"
$B --backend vulkan --no-unfused --reps 20 --size-mib 128 --dtypes f16,bf16 --ops '^attention$' --cases '^decode_' 2>&1 | grep -E '^attention'
KF_TUNE=attn_decode_heads=2 timeout 200 build/tools/kf-conformance --backend cuda --filter '^attention$' --progress none 2>&1 | tail -3
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
